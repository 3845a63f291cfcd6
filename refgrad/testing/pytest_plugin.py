"""pytest plugin (entry point `pytest11`): run a test suite on chosen refgrad devices with no glue code.

    pytest --refgrad-device CLANG --refgrad-device PYTHON

Tests that take the `refgrad_device` fixture run once per selected device, with `Device.DEFAULT` set to it,
so tensors made without `device=` land there. Without the option: the device in REFGRAD_DEVICE if that is
set, else every available device.

    pytest --refgrad-database redis://ci-cache:6379 --refgrad-device CLANG

adds one test per selected device, `refgrad_replay[clang]`, that replays every failing example `refgrad fuzz`
campaigns saved in that example database for the device (read only: nothing is deleted or added) and fails
with each one's explanation while any still fails.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
  """--refgrad-device NAME, repeatable."""
  group = parser.getgroup("refgrad")
  group.addoption("--refgrad-device", action="append", default=[], metavar="NAME",
                  help="run device tests on this refgrad device (repeatable; default: every available device)")
  group.addoption("--refgrad-database", action="append", default=[], metavar="URL",
                  help="replay the fuzz findings saved in this hypothesis example database (a directory or "
                       "redis://host:port; repeatable) on each selected device, as tests refgrad_replay[device]")
  group.addoption("--refgrad-plugin", action="append", default=[], metavar="FILE",
                  help="load a backend plugin from a .py file (also in the processes that replay findings)")


def pytest_configure(config: pytest.Config) -> None:
  config._refgrad_devices = None  # chosen once, at the first test that needs it (see selected_devices)
  if config.getoption("--refgrad-plugin", None):
    from refgrad.plugin_loader import load_plugin_file
    for path in config.getoption("--refgrad-plugin"):
      load_plugin_file(path)


def selected_devices(config: pytest.Config) -> list[str]:
  """The devices to run on, decided once per session: devices that tests register later (such as the
  deliberately broken ones of the oracle-kit tests) never join the list."""
  if getattr(config, "_refgrad_devices", None) is None:
    config._refgrad_devices = _choose_devices(config)
  return config._refgrad_devices


def _choose_devices(config: pytest.Config) -> list[str]:
  """--refgrad-device, else REFGRAD_DEVICE, else every available kernel device (a graph device, which compiles
  every graph with its framework, runs when named)."""
  from refgrad import Device
  chosen = config.getoption("--refgrad-device") or ([os.environ["REFGRAD_DEVICE"]] if
                                                    os.environ.get("REFGRAD_DEVICE") else Device.available("kernel"))
  names = []
  for name in chosen:
    canonical = Device.canonicalize(name)
    Device[canonical]  # raises the reason now if the device cannot run here
    names.append(canonical)
  return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
  if "refgrad_device" in metafunc.fixturenames:
    devices = selected_devices(metafunc.config)
    metafunc.parametrize("refgrad_device", devices, ids=[d.lower() for d in devices], indirect=True)


@pytest.fixture
def refgrad_device(request: pytest.FixtureRequest):
  """The device under test; Device.DEFAULT is set to it for the duration of the test."""
  from refgrad import Device
  previous = Device.DEFAULT
  Device.DEFAULT = request.param
  try:
    yield request.param
  finally:
    Device.DEFAULT = previous


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
  databases = config.getoption("--refgrad-database")
  if databases:
    plugin_files = tuple(str(Path(p).resolve()) for p in config.getoption("--refgrad-plugin"))
    items += [ReplayItem.from_parent(session, name=f"refgrad_replay[{device.lower()}]", device=device,
                                     databases=tuple(databases), plugin_files=plugin_files)
              for device in selected_devices(config)]


class ReplayFailed(Exception):
  """Examples saved in the database still fail on the device; the message explains each."""


class ReplayItem(pytest.Item):
  """Replays a device's saved fuzz findings (refgrad.testing.fuzz.campaign.replay_database)."""

  def __init__(self, *, device: str, databases: tuple[str, ...], plugin_files: tuple[str, ...], **kwargs):
    super().__init__(**kwargs)
    self.device, self.databases, self.plugin_files = device, databases, plugin_files

  def runtest(self) -> None:
    from refgrad.testing.fuzz.campaign import replay_database
    chunk = replay_database(self.device, self.databases, self.plugin_files)
    self.user_properties.append(("replayed", chunk.replayed))
    if chunk.findings:
      raise ReplayFailed(f"{len(chunk.findings)} of {chunk.replayed} saved example(s) still fail on {self.device}:\n\n"
                         + "\n\n".join(f"[{f.kind}] {f.program.to_python()}\n{f.detail}" for f in chunk.findings))

  def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
    return str(excinfo.value) if isinstance(excinfo.value, ReplayFailed) else super().repr_failure(excinfo, style)

  def reportinfo(self) -> tuple[str, int, str]:
    return "refgrad-database", 0, f"{self.name}: {', '.join(self.databases)}"

