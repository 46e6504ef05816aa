"""``squall state show``: each stateful task's committed state, read from the store the topology's config
picks (embedded under a run directory, topology.state.dir or $SQUALL_STATE_DIR; Redis), as tables or JSON,
added up with --sum; exit 1 with where it looked when nothing is committed yet, 2 for a wrong request."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from squall.cli import main
from squall.cli.state import _redacted
from squall.contract import STATE_DIR, STATE_REDIS_URL
from squall.state.stores import open_store

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "statefulwordcount.yaml"  # count's tasks are 1 and 2

TOPOLOGY = """\
name: tally
config: {config}
spouts:
  - name: source
    className: squall.testing:TestingSpout
bolts:
  - name: pass
    className: squall.testing:TestingSink
    inputs: [{{component: source}}]
  - name: tally
    className: examples.statefulwordcount:WordCount
    stateful: true
    parallelism: 2
    inputs: [{{component: pass}}]
"""


@pytest.fixture(autouse=True)
def no_state_environment(monkeypatch):
    """squall run's processes have it; this shell must not, unless a test says so."""
    monkeypatch.delenv(STATE_DIR, raising=False)
    monkeypatch.delenv(STATE_REDIS_URL, raising=False)


def commit(conf: dict, topology: str, component: str, task: int, txid: int, items: dict) -> None:
    """What a task's checkpoint writes, with the store the engine uses."""
    store = open_store(conf, topology=topology, component=component, task=task)
    store.commit(txid, items)
    store.close()


def topology(tmp_path: Path, **config) -> Path:
    path = tmp_path / "tally.yaml"
    path.write_text(TOPOLOGY.format(config=json.dumps(config)))
    return path


@pytest.fixture
def run_dir(tmp_path):
    """A squall run's directory with the example's committed counts, as its processes keep them."""
    conf = {"topology.state.dir": str(tmp_path / "run" / "state")}
    commit(conf, "statefulwordcount", "count", 1, 7, {"the": 4, "cow": 1})
    commit(conf, "statefulwordcount", "count", 2, 7, {"moon": 2, "a": 3})
    return tmp_path / "run"


def show(*args, capsys) -> tuple[int, str, str]:
    code = main(["state", "show", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_show_prints_each_tasks_txid_and_items_from_a_squall_runs_directory(run_dir, capsys):
    code, out, err = show(EXAMPLE, "--run-dir", run_dir, capsys=capsys)
    assert code == 0 and err == ""
    first, second = out.split("\n\n")
    assert first.splitlines()[0] == (f"count task 1 (txid 7): 2 key(s) in "
                                     f"{run_dir}/state/statefulwordcount/count-1.db")
    assert first.splitlines()[1:] == ["  KEY  VALUE", "  cow  1", "  the  4"]
    assert second.splitlines()[0].startswith("count task 2 (txid 7): 2 key(s)")

    code, out, _ = show(EXAMPLE, "--run-dir", run_dir, "--task", 2, capsys=capsys)
    assert code == 0 and "task 1" not in out and "moon" in out


def test_sum_adds_a_components_tasks_up(run_dir, capsys):
    code, out, _ = show(EXAMPLE, "--run-dir", run_dir, "--sum", capsys=capsys)
    assert code == 0
    assert out.splitlines() == ["count tasks 1, 2 added up (txid 7, 7): 4 key(s)", "  KEY   VALUE", "  a     3",
                                "  cow   1", "  moon  2", "  the   4"]
    code, out, _ = show(EXAMPLE, "--run-dir", run_dir, "--sum", "-o", "json", capsys=capsys)
    assert json.loads(out) == {"topology": "statefulwordcount", "components": [
        {"component": "count", "tasks": [1, 2], "txids": [7, 7], "state": {"a": 3, "cow": 1, "moon": 2, "the": 4}}]}


def test_json_holds_every_task_and_any_value_a_state_keeps(tmp_path, capsys):
    conf = {"topology.state.dir": str(tmp_path / "state")}
    path = topology(tmp_path, **conf)
    commit(conf, "tally", "tally", 3, 0, {"s": "text", 5: [1.5, None, True], b"\xff": {"nested": b"ok"}})
    code, out, err = show(path, "-o", "json", capsys=capsys)
    doc = json.loads(out)
    assert doc["tasks"] == [{"component": "tally", "task": 3, "txid": 0, "where": f"{tmp_path}/state/tally/tally-3.db",
                             "state": {"\\xff": {"nested": "ok"}, "5": [1.5, None, True], "s": "text"}}]
    assert "tally task 4: nothing committed yet" in err  # the other task: said, and the shown one is kept
    assert code == 0


def test_exactly_once_a_spouts_positions_are_shown_as_its_state(tmp_path, capsys):
    """Exactly once, each spout task's checkpoint holds its positions (the first offset not emitted, per
    partition): the offsets the committed counts hold every record before."""
    conf = {"topology.state.dir": str(tmp_path / "state"), "topology.state.guarantee": "exactly_once"}
    commit(conf, "tally", "source", 2, 4, {"clicks/0": 120, "clicks/1": 98})
    code, out, _ = show(topology(tmp_path, **conf), "--component", "source", capsys=capsys)
    assert code == 0
    assert out.splitlines()[1:] == ["  KEY       VALUE", "  clicks/0  120", "  clicks/1  98"]
    assert out.startswith("source task 2 (txid 4)")


def test_the_state_directory_comes_from_the_config_then_the_environment_then_the_run_directory(tmp_path, capsys,
                                                                                                monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    commit({"topology.state.dir": str(elsewhere)}, "tally", "tally", 3, 2, {"k": 1})
    code, out, _ = show(topology(tmp_path, **{"topology.state.dir": str(elsewhere)}), "--task", 3, capsys=capsys)
    assert code == 0 and f"in {elsewhere}/tally/tally-3.db" in out

    monkeypatch.setenv(STATE_DIR, str(elsewhere))  # as a worker pod's, or squall run's processes'
    code, out, _ = show(topology(tmp_path), "--task", 3, "--run-dir", tmp_path / "ignored", capsys=capsys)
    assert code == 0 and f"in {elsewhere}/tally/tally-3.db" in out


def test_nothing_committed_yet_exits_1_saying_where_it_looked_and_makes_no_file(tmp_path, capsys):
    code, out, err = show(EXAMPLE, "--run-dir", tmp_path / "run", capsys=capsys)
    assert code == 1 and out == ""
    assert f"count task 1: nothing committed yet (no {tmp_path}/run/state/statefulwordcount/count-1.db)" in err
    assert f"looked in {tmp_path}/run/state/statefulwordcount/ (the embedded store, in the state/ of squall run's " \
           f"directory {tmp_path}/run: run the topology with squall run first, or pass the --run-dir" in err
    assert not (tmp_path / "run").exists()

    conf = {"topology.state.dir": str(tmp_path / "state")}
    open_store(conf, topology="tally", component="tally", task=3).close()  # a task opens its store at start
    code, _, err = show(topology(tmp_path, **conf), "--task", 3, capsys=capsys)
    assert code == 1 and "holds no checkpoint: the task started, its first commit is to come" in err
    assert "in topology.state.dir of the topology's config" in err


@pytest.mark.parametrize("args, message", [
    (["--component", "nope"], "topology 'statefulwordcount' has no component 'nope'; its stateful bolts: 'count'"),
    (["--component", "split"], "'split' is not a stateful bolt and keeps no state; the stateful bolts of "
                               "'statefulwordcount': 'count'"),
    (["--task", "3"], "task 3 is not a task of a stateful bolt of 'statefulwordcount' (their tasks: 'count': 1, 2)"),
    (["--component", "count", "--task", "9"], "task 9 is not a task of a stateful bolt"),
])
def test_a_request_the_topology_cannot_answer_exits_2_naming_what_it_has(args, message, run_dir, capsys):
    code, out, err = show(EXAMPLE, "--run-dir", run_dir, *args, capsys=capsys)
    assert code == 2 and out == ""
    assert err.startswith("squall state: ") and message in err


def test_topologies_that_keep_no_state_readable_here_exit_2(tmp_path, capsys):
    code, _, err = show(REPO / "examples" / "wordcount.yaml", capsys=capsys)
    assert code == 2 and "topology 'wordcount' has no stateful bolt" in err
    code, _, err = show(topology(tmp_path, **{"topology.state.provider": "memory"}), capsys=capsys)
    assert code == 2 and "topology.state.provider is memory" in err and "nothing to read" in err
    code, _, err = show(topology(tmp_path, **{"topology.state.provider": "redis"}), capsys=capsys)
    assert code == 2 and "set topology.state.redis.url" in err and STATE_REDIS_URL in err


def test_a_file_that_is_not_a_store_exits_2_naming_it(tmp_path, capsys):
    conf = {"topology.state.dir": str(tmp_path / "state")}
    (tmp_path / "state" / "tally").mkdir(parents=True)
    (tmp_path / "state" / "tally" / "tally-3.db").write_text("not a database")
    code, _, err = show(topology(tmp_path, **conf), "--task", 3, capsys=capsys)
    assert code == 2 and f"cannot read the state of 'tally' task 3 from {tmp_path}/state/tally/tally-3.db" in err


def test_sum_refuses_values_it_cannot_add(tmp_path, capsys):
    conf = {"topology.state.dir": str(tmp_path / "state")}
    commit(conf, "tally", "tally", 3, 0, {"k": "text"})
    code, _, err = show(topology(tmp_path, **conf), "--sum", capsys=capsys)
    assert code == 2 and "--sum adds numbers, and tally task 3 holds str text at key k: leave out --sum" in err


def test_redis_state_is_read_where_the_store_writes_it(tmp_path, redis_url, capsys, monkeypatch):
    conf = {"topology.state.provider": "redis", "topology.state.redis.url": redis_url}
    path = topology(tmp_path, **conf)
    commit(conf, "tally", "tally", 3, 4, {"x": 2})
    commit(conf, "tally", "tally", 4, 4, {"x": 3, "y": 1})
    code, out, _ = show(path, "--sum", capsys=capsys)
    assert code == 0 and out.splitlines()[1:] == ["  KEY  VALUE", "  x    5", "  y    1"]

    monkeypatch.setenv(STATE_REDIS_URL, redis_url)  # a pod's URL comes from a Secret, so may this one
    code, out, _ = show(topology(tmp_path, **{"topology.state.provider": "redis"}), "--task", 3, capsys=capsys)
    assert code == 0 and out.startswith(f"tally task 3 (txid 4): 1 key(s) in {redis_url} squall:tally:tally:3:state")

    other = tmp_path / "other.yaml"
    other.write_text(path.read_text().replace("name: tally", "name: fresh", 1))
    code, _, err = show(other, "--task", 3, capsys=capsys)
    assert code == 1 and "no key squall:fresh:tally:3:txid" in err and f"looked in Redis at {redis_url}" in err


def test_an_unreachable_redis_exits_2_without_its_password(tmp_path, capsys):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    url = f"redis://:secret@127.0.0.1:{port}/0"
    code, _, err = show(topology(tmp_path, **{"topology.state.provider": "redis", "topology.state.redis.url": url}),
                        capsys=capsys)
    assert code == 2 and f"from Redis at redis://:***@127.0.0.1:{port}/0" in err and "secret" not in err


def test_redacted_hides_only_the_password():
    assert _redacted("redis://localhost:6379/0") == "redis://localhost:6379/0"
    assert _redacted("redis://user:pw@host:1/2") == "redis://user:***@host:1/2"
    assert _redacted("rediss://:pw@host") == "rediss://:***@host"


def test_help_shows_examples_and_exit_statuses():
    proc = subprocess.run([sys.executable, "-m", "squall", "state", "show", "--help"], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0
    assert "squall state show examples/statefulwordcount.yaml --sum" in proc.stdout
    assert "exit status: 0 state shown, 1 no task has committed state yet" in proc.stdout
