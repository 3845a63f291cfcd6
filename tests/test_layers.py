"""The package's layers depend one way: each module imports only from its own layer or the ones below (imports
inside functions count too). So the IR and the op semantics can be read, tested and reused without codegen,
devices or the frontend; `refgrad/uop.py` rests on dtypes, ops, semantics and value ranges alone. The layers, and
what plugins may import, are the tables of docs/architecture.md ("0. Layers"): this test reads them there."""
import ast
import itertools
import re
from pathlib import Path

import refgrad

PACKAGE = Path(refgrad.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def doc_table(header: str) -> list[tuple[str, list[str]]]:
  """The rows of the docs/architecture.md table whose header row is `header`: (first cell, the modules named in the
  row as paths inside refgrad/: `dtype.py` is refgrad.dtype, `codegen/` is refgrad.codegen, `__init__.py` refgrad)."""
  lines = ARCHITECTURE.read_text().splitlines()
  rows = itertools.takewhile(lambda line: line.startswith("|"), lines[lines.index(header) + 2:])
  return [(row.split("|")[1].strip(), [module_of_path(p) for p in re.findall(r"`([\w/]+(?:\.py|/))`", row)])
          for row in rows]


def module_of_path(path: str) -> str:
  parts = path.removesuffix("/").removesuffix(".py").split("/")
  return ".".join(["refgrad"] + [p for p in parts if p != "__init__"])


# lowest first; a module belongs to the first layer with a prefix matching it
LAYERS = doc_table("| layer | modules |")
PLUGIN_EXPORTS = {module for _, modules in doc_table("| what a plugin may import | for |") for module in modules}
PLUGIN_PACKAGES = sorted(init.parent for init in PACKAGE.parent.glob("*/*/refgrad_*/__init__.py"))


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
  raise AssertionError(f"{module} is in no layer: add it to the layer table of docs/architecture.md")


def imports(path: Path, roots: frozenset[str] = frozenset({"refgrad"})) -> set[str]:
  """Modules under `roots` that a file imports, anywhere in it except `if TYPE_CHECKING:` blocks (annotations only);
  `from refgrad.codegen import cstyle` imports refgrad.codegen.cstyle."""
  tree = ast.parse(path.read_text())
  skipped = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and
             getattr(block.test, "id", "") == "TYPE_CHECKING" for n in ast.walk(block)}
  found = set()
  for node in ast.walk(tree):
    if id(node) in skipped:
      continue
    if isinstance(node, ast.ImportFrom) and node.module and not node.level and node.module.split(".")[0] in roots:
      submodules = [f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}")]
      found |= set(submodules) if len(submodules) == len(node.names) else {node.module} | set(submodules)
    elif isinstance(node, ast.Import):
      found |= {a.name for a in node.names if a.name.split(".")[0] in roots}
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
  assert imports(PACKAGE / "uop.py") == {"refgrad.alu", "refgrad.dtype", "refgrad.ops", "refgrad.value_ranges"}
  assert imports(PACKAGE / "alu.py") == {"refgrad.dtype", "refgrad.ops"}


def test_the_checker_sees_an_upward_import(tmp_path):
  """The test itself can fail: a file importing the frontend from the IR layer is reported."""
  bad = tmp_path / "bad.py"
  bad.write_text("def f():\n  from refgrad.tensor import Tensor\n  return Tensor\n")
  assert imports(bad) == {"refgrad.tensor"} and layer_of("refgrad.tensor") > layer_of("refgrad.uop")


def test_the_tables_name_modules_that_exist():
  named = [module for _, modules in LAYERS for module in modules] + sorted(PLUGIN_EXPORTS)
  assert [module for module in named if not is_module(module)] == []
  assert len(LAYERS) > 10 and len(PLUGIN_EXPORTS) > 5 and len(PLUGIN_PACKAGES) >= 3


def test_no_refgrad_module_imports_a_plugin():
  plugins = frozenset(package.name for package in PLUGIN_PACKAGES)
  assert [module_name(path) for path in PACKAGE.rglob("*.py") if imports(path, plugins)] == []


def test_plugins_import_only_what_refgrad_exports_to_them():
  """A backend rests on the contract (docs/architecture.md lists it), never on refgrad's insides: Tensor, the
  scheduler, the oracle kit, another stage of codegen."""
  outside = [f"{path.relative_to(PACKAGE.parent)} imports {dep}" for package in PLUGIN_PACKAGES
             for path in sorted(package.rglob("*.py")) for dep in sorted(imports(path) - PLUGIN_EXPORTS)]
  assert outside == []


def test_the_plugin_checker_sees_an_import_from_refgrads_insides(tmp_path):
  bad = tmp_path / "bad_plugin.py"
  bad.write_text("from refgrad.codegen.pipeline import compile_ast\nimport refgrad_clang\n")
  assert imports(bad) - PLUGIN_EXPORTS == {"refgrad.codegen.pipeline"}
  assert imports(bad, frozenset({"refgrad_clang"})) == {"refgrad_clang"}
