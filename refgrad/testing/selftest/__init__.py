"""`refgrad selftest`: realistic bugs planted one at a time in copies of a compiled backend (mutants/), each run
against `refgrad check` and `refgrad fuzz` in a process of its own (runner.py), to measure what the kit catches."""
