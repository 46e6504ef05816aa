"""The compiled hot path and the pure Python path: the same modules, both tested.

``make install`` builds the modules of ``squall._pure.COMPILED`` with Cython, so the suite runs them
compiled; the engine's own tests run once more on their interpreted sources (``SQUALL_PURE_PYTHON=1``).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from squall import _pure

REPO = Path(__file__).resolve().parents[1]
# The tests of what the compiled modules do: run again on the interpreted sources, in three parts of
# about the same length (a test each, which pytest-xdist runs side by side).
ENGINE_TESTS = {
    "acker": ["tests/test_acker.py", "tests/test_stats.py", "tests/test_hdr.py"],
    "timeouts": ["tests/test_timeouts.py"],
    "executors": [
        "tests/test_reliability.py", "tests/test_basic_bolt.py", "tests/test_held.py", "tests/test_groupings.py",
        "tests/test_spout.py", "tests/test_ticks_errors.py", "tests/test_values.py",
        "tests/transport/test_outboxes.py::test_acks_folded_per_tree_in_a_batch_give_the_verdicts_of_the_messages_one_by_one",
        "tests/transport/test_outboxes.py::test_a_trees_acks_leave_a_worker_as_one_message",
        "tests/transport/test_codec.py::test_a_data_frame_carries_tuples_and_the_acker_messages_its_worker_forwards"],
}


@pytest.mark.skipif(os.environ.get(_pure.ENV) == "1", reason="this run imports the sources on purpose")
@pytest.mark.parametrize("name", _pure.COMPILED)
def test_the_hot_path_runs_compiled(name):
    module = importlib.import_module(name)
    assert _pure.compiled(module), (
        f"{name} runs from {module.__file__}, not compiled: reinstall with a C compiler (pip install -e .)")


@pytest.mark.parametrize("part", ENGINE_TESTS)
def test_the_engine_passes_its_tests_on_the_pure_python_path(part):
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ENGINE_TESTS[part]],
                          cwd=REPO, env={**os.environ, _pure.ENV: "1"}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_pure_python_imports_the_sources_of_compiled_modules_and_needs_no_cython():
    """Cython is a build requirement only: a SQUALL_PURE_PYTHON=1 install has none, and the sources of the
    compiled modules must import and run without it (``import cython`` resolves at compile time only)."""
    code = ("import sys; sys.modules['cython'] = None; import importlib, squall._pure as p; "
            "modules = [importlib.import_module(n) for n in p.COMPILED]; "
            "print(all(not p.compiled(m) for m in modules)); "
            "from squall.grouping import FieldsHash, stable_hash; "
            "print(FieldsHash([1, 2, 3], [0]).choose(['word']) == [[1, 2, 3][stable_hash(['word']) % 3]])")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, _pure.ENV: "1"}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.split() == ["True", "True"], done.stderr[-2000:]
