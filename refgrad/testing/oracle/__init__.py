"""The oracle: a program on a device against the PYTHON reference, kernel by kernel (reference.py), lane by lane
within the error bounds docs/SPEC.md allows (bounds.py, compare.py); a jitted function's replays against its plain
calls (jit_replay.py); rewrite rules proven against the op semantics (rules.py), and the rule to blame when the
reference disagrees with the graph evaluator (blame.py)."""
