"""Test setup shared by every test: the repository root is importable, so class names such as
'examples.wordcount:SplitSentence' resolve as they do for `squall run` from the repository root."""

import os
import pathlib
import sys

from squall.contract import EVERY_PROCESS

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# The test processes run as every Squall process does (gRPC's fork support off), before any test imports
# gRPC: the Spark tests fork PySpark's JVM from a process whose earlier tests ran gRPC, and with fork
# support on, gRPC's fork handlers crashed that child (a fresh CI run: JAVA_GATEWAY_EXITED).
assert "grpc" not in sys.modules, "gRPC was imported before tests/conftest.py could turn its fork support off"
for name, value in EVERY_PROCESS.items():
    os.environ.setdefault(name, value)


def pytest_collection_modifyitems(config, items: list) -> None:
    """Under pytest-xdist, start each test marked ``long`` at once, no two on one worker while there are
    workers enough: worksteal gives each worker a contiguous share of the collection, in order, and a long
    test late in its share ran on alone at the end of the suite (the JVM test, 90 s from 177 s on)."""
    # the same in every worker, so all collect one order; read from the config, not the environment, which
    # the pytest runs a test starts in a subprocess inherit
    workers = getattr(config, "workerinput", {}).get("workercount", 0)
    long = [item for item in items if item.get_closest_marker("long")]
    if workers < 2 or not long:
        return
    rest = [item for item in items if not item.get_closest_marker("long")]
    ordered = []
    for worker in range(workers):  # each share as worksteal cuts it: what is left ÷ the workers left
        share = (len(items) - len(ordered)) // (workers - worker)
        firsts = long[worker::workers]
        take = max(share - len(firsts), 0)  # a negative slice would take all but a few: a small selection
        ordered += firsts + rest[:take]
        del rest[:take]
    items[:] = ordered + rest
