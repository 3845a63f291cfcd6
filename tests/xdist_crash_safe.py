"""A crash of one xdist worker must fail its test, not hang the suite.

pytest-xdist 3.8's `--dist loadgroup` scheduler keeps every work unit a worker was ever given, finished or not. When
the worker crashes, all of them go back on the queue; the replacement worker is then sent a finished unit, an empty
list of tests that never completes, and the controller waits for it forever (it hung a run of this suite at 99%
after PoCL crashed a worker). Forgetting a crashed worker's finished units first leaves xdist's own handling: the
test that crashed is reported failed, the rest of its unit reruns on the replacement.
"""
from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadGroupScheduling


class CrashSafeLoadGroupScheduling(LoadGroupScheduling):
  """loadgroup, except that a crashed worker's finished work units are not queued again."""

  def remove_node(self, node: Any) -> str | None:
    workload = self.assigned_work.get(node, {})
    for scope in [scope for scope, unit in workload.items() if all(unit.values())]:
      del workload[scope]
    return super().remove_node(node)


def pytest_xdist_make_scheduler(config: Any, log: Any) -> LoadGroupScheduling | None:
  """The suite's scheduler under `--dist loadgroup` (pyproject.toml's addopts); other modes keep xdist's."""
  return CrashSafeLoadGroupScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None
