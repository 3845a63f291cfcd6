"""Every example in the docstrings of Tensor's methods and properties runs and prints what it says.

The methods are collected from Tensor and all its base classes (the frontend mixins), so a method added anywhere
is covered without touching this file.
"""
import doctest
import inspect

import pytest

import refgrad
from refgrad import Tensor, dtypes

pytestmark = pytest.mark.usefixtures("refgrad_device")  # every test runs on every selected device


def _docstring(obj) -> str | None:
  if isinstance(obj, (staticmethod, classmethod)):
    obj = obj.__func__
  if isinstance(obj, property):
    obj = obj.fget
  return inspect.getdoc(obj) if callable(obj) else None


def _examples() -> dict[str, doctest.DocTest]:
  """name -> the doctest of each Tensor attribute whose docstring has examples (the first definition in MRO order)."""
  parser, found = doctest.DocTestParser(), {}
  for cls in Tensor.__mro__:
    for name, obj in vars(cls).items():
      doc = _docstring(obj)
      if name in found or not doc or ">>>" not in doc:
        continue
      found[name] = parser.get_doctest(doc, {}, f"Tensor.{name}", inspect.getsourcefile(cls), 0)
  return found


EXAMPLES = _examples()


def test_examples_were_found():
  assert len(EXAMPLES) >= 40, sorted(EXAMPLES)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_docstring_examples(name):
  runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
  test = EXAMPLES[name]
  test.globs = {"Tensor": Tensor, "dtypes": dtypes, "refgrad": refgrad}  # fresh per run: the runner clears it
  output: list[str] = []
  result = runner.run(test, out=output.append)
  assert result.failed == 0, "".join(output)
