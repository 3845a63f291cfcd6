"""The plugin contract: the hooks a refgrad plugin implements, one docstring each.

A plugin is a module or object with functions marked `@hookimpl`. Installed plugins are found through the
entry-point group ``refgrad``; tests and notebooks can also call ``refgrad.plugins.register(obj)``.
The PYTHON device is registered through this same contract (``refgrad/interp/plugin.py``).

A device has four parts (see refgrad/device.py for their exact methods):

- an **allocator**: ``alloc(nbytes) -> handle``, ``free(handle)``, ``copyin(handle, memoryview)``,
  ``copyout(memoryview, handle)``;
- a **renderer**: ``render(program) -> str`` (source text) and ``caps`` (a ``Capabilities`` record: the
  dtypes it supports, native transcendentals, local memory, maximum global size ...);
- a **compiler**: ``compile(source) -> bytes`` and ``cache_key`` (everything, besides the source, that changes
  the binary: compiler version, flags, the resolved target CPU and its features). refgrad caches binaries by
  content, so it runs once per source, in a folder machines may share (docs/writing-a-backend.md);
- a **runtime**: ``load(binary, program) -> runner``; ``runner(*handles, global_size=..., local_size=...,
  vals=...)`` launches the kernel.
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("refgrad")
hookimpl = pluggy.HookimplMarker("refgrad")


@hookspec
def refgrad_devices() -> list:
  """Return the devices this plugin provides, as a list of ``refgrad.device.DeviceSpec``.

  Each spec names the device (``"CLANG"``), the plugin and its version, a ``probe()`` that returns None when
  the device can run on this machine or a sentence saying why not (``"no C compiler found: tried clang,
  cc"``), and a ``make()`` that builds the ``DeviceImpl``. ``probe`` must be cheap and must not raise;
  ``make`` is called only for an available device, the first time it is used.

  Called once, when refgrad is imported. A plugin whose import fails never breaks ``import refgrad``: it is
  listed by ``refgrad devices`` as unavailable with the error.
  """


@hookspec
def refgrad_aliases() -> dict:
  """Return extra names for devices this plugin provides, e.g. ``{"GPU": "OPENCL"}``."""
