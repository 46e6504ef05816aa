"""Test setup shared by every test: the repository root is importable, so class names such as
'examples.wordcount:SplitSentence' resolve as they do for `squall run` from the repository root."""

import os
import pathlib
import sys

from squall.process.contract import EVERY_PROCESS

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# The test processes run as every Squall process does (gRPC's fork support off), before any test imports
# gRPC: the Spark tests fork PySpark's JVM from a process whose earlier tests ran gRPC, and with fork
# support on, gRPC's fork handlers crashed that child (a fresh CI run: JAVA_GATEWAY_EXITED).
assert "grpc" not in sys.modules, "gRPC was imported before tests/conftest.py could turn its fork support off"
for name, value in EVERY_PROCESS.items():
    os.environ.setdefault(name, value)
