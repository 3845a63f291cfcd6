"""The oracle kit: a device checked against the PYTHON reference, one subpackage per tool.

oracle/ compares a program on a device with the reference (`oracle.reference.check_against_reference`);
conformance/ is `refgrad check`, fuzz/ `refgrad fuzz`, selftest/ `refgrad selftest`. Shared by them: edges.py (the
edge values), strategies.py and programs.py (random programs for hypothesis), charts.py and terminal.py (reports),
and pytest_plugin.py (`--refgrad-device`, `--refgrad-database`)."""
