"""`refgrad check`: the conformance suite for a device.

What it runs (docs/testing.md has the full list):
* every primitive op x every dtype the device claims, over the full cross product of the dtype's edge values and
  their neighbours (refgrad.testing.edges), so both operand orders of every edge pair;
* every cast and bitcast between claimed dtypes, narrowing casts also at and one step either side of each rounding
  boundary of the target (ties to even and to odd, overflow, the subnormal range);
* chains of two and three ops fused into one kernel, with constant and loop-invariant operands, and mixed precision;
* the three reductions over rows made of one edge value (all -inf, all NaN, all -0.0, ...) and over lengths that
  reach every path a backend may specialise (empty, 1, a prime, multiples of 8 and 32, longer than a work-group);
* a fixed corpus of Tensor programs (elementwise, reductions, matmul, conv, indexing, hashing).

To stay fast, cases are batched: every cell of the op x dtype matrix that shares an output dtype becomes one segment
of one kernel (the segments are concatenated), so a dtype's ops compile once. Each kernel runs through
check_against_reference, so verdicts follow docs/SPEC.md exactly, and each segment is then judged on its own lanes.
Cells of a dtype the device does not declare (not in its Capabilities.dtypes) are not run but listed as
unsupported, so a device that stops claiming a dtype shows it in the matrix and the summary.

The modules: results.py (CaseResult, CheckRun), batches.py (the op, cast, chain and reduction batches), corpus.py
(the Tensor programs), run.py (run_conformance), report.py (the matrix as text, --json, --html) and terminal.py
(the matrix on a terminal).
"""
