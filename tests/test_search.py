"""Opt search (refgrad/search.py): under REFGRAD_SEARCH a compiled device runs each kernel with the fastest of the
candidates it timed, the values stay the reference's, the choice is printed and cached on disk, and the reference
itself is never searched."""
import json

import numpy as np
import pytest

from refgrad import Device, Tensor
from refgrad import search as search_module
from refgrad.codegen.contract import Opt, opts_text
from refgrad.codegen.pipeline import compile_ast
from refgrad.compile_cache import CacheWarning
from refgrad.execute import kernel_opts, search_budget
from refgrad.search import candidates, kernel_key, search_opts


@pytest.fixture
def searching(monkeypatch, tmp_path):
  """REFGRAD_SEARCH=4 with an empty cache folder of its own, and no search remembered from an earlier test."""
  monkeypatch.setenv("REFGRAD_SEARCH", "4")
  monkeypatch.setenv("REFGRAD_CACHE", str(tmp_path))
  search_opts.cache_clear()
  yield tmp_path
  search_opts.cache_clear()


def matmul_inputs(n=64):
  rng = np.random.default_rng(5)
  return rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)


def test_searched_kernels_compute_the_reference_values(refgrad_device, searching, capfd):
  a, b = matmul_inputs()
  got = (Tensor(a, device=refgrad_device) @ Tensor(b, device=refgrad_device)).numpy()
  bound = 2 * 64 * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b))  # SPEC.md's order-free sum bound
  assert np.all(np.abs(got - a.astype(np.float64) @ b.astype(np.float64)) <= bound)
  printed = capfd.readouterr().err
  if Device[refgrad_device].interpret is not None:  # the reference runs kernels as lowered
    assert "search:" not in printed
  else:
    assert f"on {refgrad_device}: " in printed and "chose" in printed
    assert list(searching.glob("search/*.json"))


def test_the_fastest_candidate_is_chosen_and_remembered_on_disk(searching, monkeypatch, capfd):
  device = next((d for d in Device.available("kernel") if Device[d].interpret is None), None)
  if device is None:
    pytest.skip("no compiled device is installed here")
  a, b = matmul_inputs()
  ast = (Tensor(a, device=device) @ Tensor(b, device=device)).schedule()[-1].ast
  options = candidates(ast, device, 4, seed=kernel_key(ast, device))  # what search_opts draws
  fastest = options[-1]
  monkeypatch.setattr(search_module, "time_opts", lambda ast, device, opts: 1.0 if opts == fastest else 2.0)
  assert search_opts(ast, device, 4) == fastest
  assert f"chose {opts_text(fastest)} (1000.000 ms; heuristic 2000.000 ms)" in capfd.readouterr().err
  search_opts.cache_clear()  # a new process: the choice comes from the disk, nothing is timed
  monkeypatch.setattr(search_module, "time_opts", lambda *args: pytest.fail("a cached kernel was timed again"))
  assert search_opts(ast, device, 4) == fastest
  assert "(cached)" in capfd.readouterr().err
  assert compile_ast(ast, Device[device].caps, kernel_opts(ast, device)).opts == fastest  # what realize runs


def test_candidates_start_with_the_heuristic_and_are_distinct():
  device = next((d for d in Device.available("kernel") if Device[d].interpret is None), None)
  if device is None:
    pytest.skip("no compiled device is installed here")
  a, b = matmul_inputs()
  ast = (Tensor(a, device=device) @ Tensor(b, device=device)).schedule()[-1].ast
  options = candidates(ast, device, 6, seed="x")
  assert options[0] == compile_ast(ast, Device[device].caps).opts and options[1] == ()
  assert len(set(options)) == len(options) and 2 < len(options) <= 8
  assert all(isinstance(opt, Opt) for opts in options for opt in opts)


def test_no_search_unless_asked_and_a_bad_budget_is_refused(monkeypatch):
  monkeypatch.delenv("REFGRAD_SEARCH", raising=False)
  assert search_budget() == 0
  a, b = matmul_inputs(8)
  assert kernel_opts((Tensor(a) @ Tensor(b)).schedule()[-1].ast, "PYTHON") is None
  for bad in ("lots", "-3", "1001", "2.5", "nan"):  # -3 was taken for 0, silently
    monkeypatch.setenv("REFGRAD_SEARCH", bad)
    with pytest.raises(ValueError, match=rf"REFGRAD_SEARCH='{bad}': .* 0 \(no search\) to 1000"):
      search_budget()
  for good in ("0", "1000", " 20 "):
    monkeypatch.setenv("REFGRAD_SEARCH", good)
    assert search_budget() == int(good)


BAD_ENTRIES = {
  "not JSON": b'{"opts": ', "not UTF-8": b'\xff\xfe{"opts"', "a list": b"[1, 2]", "nested too deep": b"[" * 10**5,
  "a string budget": b'{"opts": "(none)", "budget": "10"}', "a number for opts": b'{"opts": 5, "budget": 10}',
  "opts that do not parse": b'{"opts": "UPCAST(0,", "budget": 10}',
  "an amount of 5000 digits": b'{"opts": "UPCAST(0,' + b"9" * 5000 + b')", "budget": 10}',
  "opts of another kernel": b'{"opts": "UPCAST(9,4)", "budget": 10}',
}


@pytest.mark.parametrize("entry", BAD_ENTRIES)
def test_a_search_cache_entry_not_valid_for_its_kernel_is_evicted_and_searched_again(searching, monkeypatch, entry):
  device = next((d for d in Device.available("kernel") if Device[d].interpret is None), None)
  if device is None:
    pytest.skip("no compiled device is installed here")
  a, b = matmul_inputs(16)
  ast = (Tensor(a, device=device) @ Tensor(b, device=device)).schedule()[-1].ast
  path = searching / "search" / f"{kernel_key(ast, device)}.json"
  path.parent.mkdir()
  path.write_bytes(BAD_ENTRIES[entry])
  monkeypatch.setattr(search_module, "time_opts", lambda ast, device, opts: 1.0)  # a tie: the heuristic wins
  with pytest.warns(CacheWarning, match=f"search cache entry {path} is not valid for its kernel"):
    opts = kernel_opts(ast, device)
  assert opts == compile_ast(ast, Device[device].caps).opts
  assert json.loads(path.read_text())["opts"] == opts_text(opts)  # searched again and written anew
  got = (Tensor(a, device=device) @ Tensor(b, device=device)).numpy()
  np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
