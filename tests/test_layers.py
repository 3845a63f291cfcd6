"""The package's layers depend one way: each module imports only from its own layer or the ones below (imports
inside functions count too). So the IR and the op semantics can be read, tested and reused without codegen,
devices or the frontend; `refgrad/uop.py` rests on dtypes, ops, semantics and value ranges alone."""
import ast
from pathlib import Path

import refgrad

PACKAGE = Path(refgrad.__file__).parent

# lowest first; a module belongs to the first layer with a prefix matching it
LAYERS = [
  ("dtype, ops and version", ["refgrad.dtype", "refgrad.ops", "refgrad.version", "refgrad.hookspecs"]),
  ("op semantics", ["refgrad.alu"]),
  ("value ranges", ["refgrad.ranges"]),
  ("IR", ["refgrad.uop", "refgrad.sizes"]),
  ("rewrite engine", ["refgrad.rewrite"]),
  ("device contract", ["refgrad.codegen.contract"]),
  ("codegen", ["refgrad.codegen"]),
  ("devices", ["refgrad.device", "refgrad.plugins"]),
  ("reference device, schedule and realize", ["refgrad.interp", "refgrad.multi", "refgrad.schedule",
                                               "refgrad.search", "refgrad.realize"]),
  ("autograd", ["refgrad.gradient"]),
  ("frontend mixins", ["refgrad.frontend"]),  # they build tensors through type(self), never importing Tensor
  ("Tensor", ["refgrad.tensor"]),
  ("capture and replay", ["refgrad.jit"]),
  ("package", ["refgrad"]),
  ("nn", ["refgrad.nn"]),
  ("oracle kit and CLI", ["refgrad.testing", "refgrad.cli"]),
]


def module_name(path: Path) -> str:
  parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
  base = PACKAGE.parent / Path(*name.split("."))
  return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def layer_of(module: str) -> int:
  for i, (_, prefixes) in enumerate(LAYERS):
    if any(module == p or module.startswith(p + ".") for p in prefixes if p != "refgrad") or \
       (module == "refgrad" and "refgrad" in prefixes):
      return i
  raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def imports(path: Path) -> set[str]:
  """refgrad modules a file imports, anywhere in it except `if TYPE_CHECKING:` blocks (annotations only)."""
  tree = ast.parse(path.read_text())
  skipped = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and
             getattr(block.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(block)}
  found = set()
  for node in ast.walk(tree):
    if id(node) in skipped:
      continue
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "refgrad":
      submodules = [f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}")]
      found |= set(submodules) if len(submodules) == len(node.names) else {node.module} | set(submodules)
    elif isinstance(node, ast.Import):
      found |= {a.name for a in node.names if a.name.split(".")[0] == "refgrad"}
  return found


def test_every_import_points_down_or_sideways():
  upward = []
  for path in sorted(PACKAGE.rglob("*.py")):
    module = module_name(path)
    for dep in imports(path):
      if layer_of(dep) > layer_of(module):
        upward.append(f"{module} ({LAYERS[layer_of(module)][0]}) imports {dep} ({LAYERS[layer_of(dep)][0]})")
  assert upward == []


def test_the_ir_rests_on_dtypes_ops_semantics_and_ranges():
  assert imports(PACKAGE / "uop.py") == {"refgrad.alu", "refgrad.dtype", "refgrad.ops", "refgrad.ranges"}
  assert imports(PACKAGE / "alu.py") == {"refgrad.dtype", "refgrad.ops"}


def test_the_checker_sees_an_upward_import(tmp_path):
  """The test itself can fail: a file importing the frontend from the IR layer is reported."""
  bad = tmp_path / "bad.py"
  bad.write_text("def f():\n  from refgrad.tensor import Tensor\n  return Tensor\n")
  assert imports(bad) == {"refgrad.tensor"} and layer_of("refgrad.tensor") > layer_of("refgrad.uop")


def test_the_old_path_of_the_semantics_is_the_same_module():
  import refgrad.alu
  import refgrad.interp.alu
  from refgrad.interp.alu import exec_alu
  assert refgrad.interp.alu is refgrad.alu and exec_alu is refgrad.alu.exec_alu
