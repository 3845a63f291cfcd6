"""The plugin contract: the hooks a refgrad plugin implements, one docstring each.

A plugin is a module or object with functions marked `@hookimpl`. Installed plugins are found through the
entry-point group ``refgrad``; tests and notebooks can also call ``refgrad.plugin_loader.register(obj)``.
The PYTHON device is registered through this same contract (``refgrad/interp/plugin.py``).

A device has four parts (see refgrad/codegen/contract.py for their exact methods):

- an **allocator**: ``alloc(nbytes) -> handle``, ``free(handle)``, ``copyin(handle, memoryview)``,
  ``copyout(memoryview, handle)``;
- a **renderer**: ``render(program) -> str`` (source text) and ``caps`` (a ``Capabilities`` record: the
  dtypes it supports, local memory, maximum global and local sizes ...); optionally ``code_paths(program)``,
  the special cases it takes for that program, which ``refgrad check`` reports as reached;
- a **compiler**: ``compile(source) -> bytes`` and ``cache_key`` (everything, besides the source, that changes
  the binary: compiler version, flags, the resolved target CPU and its features). refgrad caches binaries by
  content, so it runs once per source, in a folder machines may share (docs/writing-a-backend.md). A JIT that
  cannot hand back a binary keeps its own cache in ``refgrad.compile_cache.backend_cache_dir(name)``;
- a **runtime**: ``load(binary, program) -> runner``; ``runner(*handles)`` runs the kernel on the buffers'
  handles in the order of the program's PARAMs (0 is the output). Launch sizes are the program's
  (``program.global_shape``, and ``program.local_shape`` for GPU-shaped programs), fixed when it was rendered.
  An optional ``synchronize()`` waits for every launched kernel (for runtimes that launch asynchronously).

Instead of renderer, compiler and runtime, a device may give ``interpret(program) -> runner``: it runs programs
itself (the PYTHON device does). Its ``caps`` are then the defaults (every dtype).

A **graph device** gives ``graph``, a ``GraphCompiler`` (``caps``, ``unsupported(node)``, ``compile(graph)``), and
host memory instead: it takes whole tensor-level graphs and computes them with a framework's own compiler
(refgrad/graph_device.py; docs/writing-a-backend.md, section 6). Its ``DeviceSpec`` says ``kind="graph"``.
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("refgrad")
hookimpl = pluggy.HookimplMarker("refgrad")


@hookspec
def refgrad_devices() -> list:
  """Return the devices this plugin provides, as a list of ``refgrad.registry.DeviceSpec``.

  Each spec names the device (``"CLANG"``), the plugin and its version, a ``probe()`` that returns None when
  the device can run on this machine or a sentence saying why not (``"no C compiler found: tried clang,
  cc"``), and a ``make()`` that builds the ``DeviceImpl``. ``probe`` must be cheap and must not raise;
  ``make`` is called only for an available device, the first time it is used.

  Called once, when refgrad is imported (or, for a plugin imported before refgrad, at the first device lookup
  after its import); ``probe`` and a callable ``version`` run later, when the device is first listed or selected.
  A plugin whose import fails never breaks ``import refgrad``: it is listed by ``refgrad devices`` as
  unavailable with the error. A device name another plugin registered already is refused (ValueError).
  """


@hookspec
def refgrad_aliases() -> dict:
  """Return extra names for devices this plugin provides, e.g. ``{"GPU": "OPENCL"}``."""
