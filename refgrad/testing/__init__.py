"""The oracle kit: a device checked against the PYTHON reference, one subpackage per tool.

oracle/ compares a program on a device with the reference (`oracle.reference.check_against_reference`, kernel by
kernel; `oracle.graph_check.check_graph_against_reference`, over the whole graph, for graph devices);
conformance/ is `refgrad check`, fuzz/ `refgrad fuzz`, selftest/ `refgrad selftest`. Shared by them: edges.py (the
edge values), strategies.py and programs.py (random programs for hypothesis), charts.py and terminal.py (reports),
and pytest_plugin.py (`--refgrad-device`, `--refgrad-database`)."""
