"""`refgrad fuzz`: random programs on a device against the PYTHON reference, until the time is up.

Each program runs in a worker process, with a timeout, so a segfault or a hang of the backend under test
becomes a finding and the campaign goes on with a fresh worker. hypothesis generates the programs (random
Tensor programs and random primitive-op kernels) and shrinks every failure to a small one, which is written
as a standalone pytest file, once per signature (the kind of failure and the failing kernel's form). With an
example database, failures are saved there and every later campaign replays them first.

Only failures of the device under test are findings. An exception of refgrad's own harness (the program
strategies, the reference run, the comparison, the report) is a bug of refgrad: it stops the campaign and
propagates (`refgrad fuzz` prints its traceback and exits with status 3), never counted, never ignored.

One job per module: program_check.py checks one program in this process; worker.py runs it in a worker process;
signatures.py names findings; database.py opens the example database; campaign.py runs one worker's campaign (its
config, its batches); engines.py runs campaigns here, in local processes or as Ray actors; driver.py (`fuzz`) adds
up what they report (report.py), writes findings (findings.py) and shows a dashboard (dashboard.py) and an HTML
report (html_report.py); results.py holds the records they pass each other, coverage.py the op x dtype coverage.
"""
