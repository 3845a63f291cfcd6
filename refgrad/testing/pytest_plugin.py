"""pytest plugin (entry point `pytest11`): run a test suite on chosen refgrad devices with no glue code.

    pytest --refgrad-device CLANG --refgrad-device PYTHON

Tests that take the `refgrad_device` fixture run once per selected device, with `Device.DEFAULT` set to it,
so tensors made without `device=` land there. Without the option: the device in REFGRAD_DEVICE if that is
set, else every available device.
"""
from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
  """--refgrad-device NAME, repeatable."""
  group = parser.getgroup("refgrad")
  group.addoption("--refgrad-device", action="append", default=[], metavar="NAME",
                  help="run device tests on this refgrad device (repeatable; default: every available device)")


def pytest_configure(config: pytest.Config) -> None:
  config._refgrad_devices = None  # chosen once, at the first test that needs it (see selected_devices)


def selected_devices(config: pytest.Config) -> list[str]:
  """The devices to run on, decided once per session: devices that tests register later (such as the
  deliberately broken ones of the oracle-kit tests) never join the list."""
  if getattr(config, "_refgrad_devices", None) is None:
    config._refgrad_devices = _choose_devices(config)
  return config._refgrad_devices


def _choose_devices(config: pytest.Config) -> list[str]:
  from refgrad import Device
  chosen = config.getoption("--refgrad-device") or ([os.environ["REFGRAD_DEVICE"]] if
                                                    os.environ.get("REFGRAD_DEVICE") else Device.available())
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
