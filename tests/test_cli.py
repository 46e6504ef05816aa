"""The ``squall`` command line: ``validate`` (exit 0 / 2, errors on stderr) and ``run --in-process``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from squall.cli import main
from squall.cli import run as run_cli

REPO = Path(__file__).resolve().parents[1]
GOOD = REPO / "examples" / "wordcount.yaml"

BAD = """\
name: wordcount
spouts:
  - name: sentences
    className: examples.wordcount:SentenceSpout
bolts:
  - name: count
    className: examples.wordcount:WordCount
    inputs:
      - {component: sentences, grouping: {type: fields, fields: [wrod]}}
"""


def squall(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "squall", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def bad_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    return path


def test_validate_a_good_file_exits_0():
    proc = squall("validate", str(GOOD))
    assert proc.returncode == 0, proc.stderr
    assert "topology 'wordcount' is valid" in proc.stdout
    assert "1 spout(s), 2 bolt(s)" in proc.stdout


def test_validate_a_bad_file_exits_2_with_the_error_on_stderr(bad_file):
    proc = squall("validate", str(bad_file))
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "squall validate:" in proc.stderr
    assert "bolt 'count'" in proc.stderr and "'wrod'" in proc.stderr and "declared: sentence" in proc.stderr


def test_validate_in_process(bad_file, tmp_path, capsys):
    assert main(["validate", str(GOOD)]) == 0
    assert "is valid" in capsys.readouterr().out

    assert main(["validate", str(bad_file)]) == 2
    assert "'wrod'" in capsys.readouterr().err

    assert main(["validate", str(tmp_path / "absent.yaml")]) == 2
    assert "cannot read topology file" in capsys.readouterr().err

    unknown_class = tmp_path / "unknown.yaml"
    unknown_class.write_text(BAD.replace("[wrod]", "[sentence]").replace("examples.wordcount:WordCount",
                                                                         "not_installed:Bolt"))
    assert main(["validate", str(unknown_class)]) == 2
    assert "cannot import module 'not_installed'" in capsys.readouterr().err
    assert main(["validate", "--no-imports", str(unknown_class)]) == 0


def test_a_suspended_topology_runs_in_process_with_its_spouts_inactive_and_says_so(tmp_path, capsys):
    """squall run --in-process ran a suspended topology as if it were not, and process mode said nothing:
    zero progress lines looked like a dead topology."""
    suspended = tmp_path / "wordcount.yaml"
    suspended.write_text(GOOD.read_text() + "\nsuspended: true\n")
    assert main(["run", str(suspended), "--in-process", "--duration", "1.5"]) == 0
    out, err = capsys.readouterr()
    assert "suspended: the spouts stay inactive" in err
    assert re.search(r"\b0 trees acked", out), out


def test_run_in_process_acks_the_requested_trees():
    proc = squall("run", str(GOOD), "--in-process", "--trees", "200", "--duration", "60", timeout=120)
    assert proc.returncode == 0, proc.stderr
    acked = re.search(r"([\d,]+) trees acked", proc.stdout)
    assert acked and int(acked.group(1).replace(",", "")) >= 200, proc.stdout
    assert any(line.startswith("sentences") for line in proc.stdout.splitlines())
    # Percentiles from every recorded complete latency (a HDR histogram), not 0 for want of samples.
    p50 = re.search(r"p50 ([\d.]+) ms, p99 [\d.]+ ms, p99\.9 [\d.]+ ms", proc.stdout)
    assert p50 and float(p50.group(1)) > 0, proc.stdout


BROKEN_OPEN = """\
from squall import Spout


class Source(Spout):
    outputs = ["line"]

    def open(self, conf, context, collector):
        raise FileNotFoundError("no input at /nowhere/records.db; produce it first")

    def next_tuple(self):
        pass
"""


def test_run_prints_a_components_first_error_on_the_terminal_once(tmp_path):
    """With worker processes, whose logs are files, the terminal says what broke and where the rest is:
    once per component, however many tasks and processes report it."""
    (tmp_path / "broken_open.py").write_text(BROKEN_OPEN)
    spec = tmp_path / "broken.yaml"
    spec.write_text("name: broken\nworkers: 2\nspouts:\n"
                    "  - {name: source, className: broken_open:Source, parallelism: 2}\n")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "squall", "run", str(spec), "--insecure", "--run-dir",
                             str(run_dir)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])})
    seen: list[str] = []
    try:
        lines = iter(proc.stderr.readline, "")
        for line in lines:  # until both workers' tasks reported, and the run printed a progress line after
            seen.append(line)
            reported = [p for p in run_dir.glob("worker-*.log") if "reported an error" in p.read_text()]
            if len(reported) == 2 and line.startswith("acked") and any("reported an error" in s for s in seen):
                break
        proc.send_signal(signal.SIGINT)
        seen += proc.communicate(timeout=60)[1].splitlines(keepends=True)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(seen)
    told = [line.rstrip("\n") for line in seen if line.startswith("source reported an error")]
    assert len(told) == 1, "".join(seen)
    assert re.fullmatch(r"source reported an error \(worker-[01]\): FileNotFoundError: no input at "
                        r"/nowhere/records\.db; produce it first; more in " + re.escape(f"{run_dir}/"), told[0])


@pytest.mark.parametrize("args,message", [
    (["run", str(GOOD), "--duration", "0"], "argument --duration: must be above 0 and finite, not 0"),
    (["run", str(GOOD), "--trees", "-5"], "argument --trees: must be above 0 and finite, not -5"),
    (["run", str(GOOD), "--duration", "nan"], "argument --duration: must be above 0 and finite, not nan"),
    # a traceback before (found by the configuration audit)
    (["top", "--interval", "nan"], "argument --interval: must be above 0 and finite, not nan"),
    (["run", str(GOOD), "--trees", "many"], "argument --trees: 'many' is not a number (a whole one)"),
    (["run", str(GOOD), "--trees", "1.5"], "argument --trees: '1.5' is not a number (a whole one)"),
    (["--log-level", "VERBOSE", "validate", str(GOOD)], "argument --log-level: invalid choice: 'VERBOSE'"),
])
def test_bad_options_are_refused_before_anything_starts_naming_the_option(capsys, args, message):
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_log_level_comes_from_squall_log_level_without_the_option(capsys, monkeypatch):
    monkeypatch.setenv("SQUALL_LOG_LEVEL", "loud")
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(GOOD)])
    assert exited.value.code == 2
    assert "SQUALL_LOG_LEVEL must be one of DEBUG, INFO, WARNING, ERROR, not 'LOUD'" in capsys.readouterr().err
    assert main(["--log-level", "warning", "validate", str(GOOD)]) == 0  # the option wins


def test_the_log_level_may_also_follow_the_command(capsys, tmp_path):
    assert main(["validate", str(GOOD), "--log-level", "debug"]) == 0
    assert "is valid" in capsys.readouterr().out
    # a command of a command too (it was refused: unrecognized arguments)
    assert main(["log", "describe", str(tmp_path / "no-log"), "--log-level", "debug"]) == 2
    assert "there is no log at" in capsys.readouterr().err


def test_an_empty_file_is_said_to_be_empty(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert main(["validate", str(empty)]) == 2
    assert "empty.yaml is empty: it must be a mapping with name, spouts and bolts" in capsys.readouterr().err


def test_a_run_waiting_for_trees_its_spouts_will_not_emit_says_so_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_cli, "QUIET_HINT", 1.0)
    spec = tmp_path / "few.yaml"
    spec.write_text(GOOD.read_text().replace("config: {}", "config: {wordcount.sentences: 50}"))
    assert main(["run", str(spec), "--in-process", "--trees", "1000", "--duration", "4"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("no spout has emitted")]
    assert said == ["no spout has emitted for 1 s and no tree is in flight, with 50 of --trees 1,000 acked: the "
                    "spouts' input may be exhausted; Ctrl-C stops the run"]


def test_a_run_whose_spout_could_not_open_says_that_is_why_nothing_is_emitted(tmp_path, monkeypatch, capsys):
    """It said the spouts' input may be exhausted, pointing away from the error (found by the newcomer audit)."""
    monkeypatch.setattr(run_cli, "QUIET_HINT", 1.0)
    spec = tmp_path / "broken.yaml"
    spec.write_text("name: broken\nspouts:\n  - {name: source, className: 'test_ticks_errors:BrokenOpen'}\n"
                    "bolts: []\n")
    assert main(["run", str(spec), "--in-process", "--trees", "10", "--duration", "3"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("no spout has emitted")]
    assert said == ["no spout has emitted for 1 s and no tree is in flight, with 0 of --trees 10 acked: spout "
                    "'source' reported errors (above; a spout whose open() raised emits nothing until a later call of "
                    "it returns): fix it and run again; Ctrl-C stops the run"]


def test_the_summary_says_when_a_bolt_executed_tuples_and_acked_none(tmp_path, capsys):
    """A Bolt that never calls ack showed only acked 0 in the table, and its trees timing out later (found
    by the newcomer audit)."""
    spec = tmp_path / "holds.yaml"
    spec.write_text("name: holds\n"
                    "messageTimeoutSeconds: 1\n"  # the stop waits for the held trees to time out
                    "spouts:\n"
                    "  - {name: ids, className: 'engine_kit:Numbers', config: {count: 3}}\n"
                    "bolts:\n"
                    "  - {name: sink, className: 'engine_kit:HoldBolt', config: {hold: [[0], [1], [2]]},\n"
                    "     inputs: [{component: ids, grouping: {type: shuffle}}]}\n")
    assert main(["run", str(spec), "--in-process", "--duration", "1"]) == 0
    out = capsys.readouterr()
    assert ("bolt 'sink' executed 3 tuples and acked or failed none: unless it holds them on purpose (a batch), "
            "call self.collector.ack(tup) in execute") in out.out + out.err


def test_an_in_process_run_drains_its_trees_in_flight_when_it_stops(tmp_path, capsys):
    """As the processes do: the spouts deactivate and the trees in flight are acked before the run ends.
    Before, it stopped at once and reported them as neither acked nor failed (found by the newcomer audit)."""
    spec = tmp_path / "slow.yaml"
    spec.write_text("name: slow\n"
                    "spouts:\n"
                    "  - {name: ids, className: 'squall.testing:TestingSpout',\n"
                    "     config: {testing.items: [[0], [1], [2], [3], [4]]}}\n"
                    "bolts:\n"
                    "  - {name: sink, className: 'engine_kit:SlowBolt', config: {seconds: 0.2},\n"
                    "     inputs: [{component: ids, grouping: {type: shuffle}}]}\n")
    assert main(["run", str(spec), "--in-process", "--duration", "0.1"]) == 0
    out, err = capsys.readouterr()
    assert "stopping: spouts deactivate, in-flight trees drain (for at most the message timeout, 30 s" in err
    # Every tree emitted before the stop (the spout's first round, up to all 5: a loaded machine's round
    # ends sooner) is acked; the first is still in the bolt's 0.2 s at the stop, so at least one drains.
    emitted = re.search(r"^ids +(\d+) +0 +\1 +0 +0 +0$", out, re.MULTILINE)
    assert emitted and int(emitted[1]) >= 1, out
    assert "still in flight" not in out


# The pod entrypoint replaced by a stand-in that reports the environment it started with, and what
# GRPC_ENABLE_FORK_SUPPORT said when gRPC was first imported (gRPC reads it then): the real entrypoint
# would need a topology and peers, and its environment is what this checks.
STARTS_WITH = r"""
import os, sys, types

class AtGrpcImport:
    seen = "not imported"

    def find_spec(self, name, path=None, target=None):
        if name == "grpc" and AtGrpcImport.seen == "not imported":
            AtGrpcImport.seen = os.environ.get("GRPC_ENABLE_FORK_SUPPORT")
        return None

sys.meta_path.insert(0, AtGrpcImport())
pod = types.ModuleType("squall.process.pod")
pod.main = lambda role: print(role, AtGrpcImport.seen, os.environ.get("GRPC_ENABLE_FORK_SUPPORT"),
                              os.environ.get("OPENBLAS_NUM_THREADS"), "numpy" in sys.modules) or 0
sys.modules["squall.process.pod"] = pod
from squall.cli import main
raise SystemExit(main([sys.argv[1]]))
"""


@pytest.mark.parametrize(("role", "inherited", "started_with"), [
    ("worker", {}, "worker false false None False"),
    ("acker", {}, "acker false false 1 False"),
    ("worker", {"GRPC_ENABLE_FORK_SUPPORT": "true"}, "worker true true None False"),  # said otherwise: kept
])
def test_a_process_started_by_hand_runs_with_its_roles_environment_from_the_start(role, inherited, started_with):
    env = {k: v for k, v in os.environ.items() if k not in ("GRPC_ENABLE_FORK_SUPPORT", "OPENBLAS_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", STARTS_WITH, role], env=env | inherited, cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, started_with), done.stderr[-2000:]
