"""A task's KeyValueState over each store: memory, the embedded SQLite file, and a real Redis."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from squall.errors import ConfigError
from squall.state.kv import KeyValueState, StateError
from squall.state.stores import MemoryStore, RedisStore, SqliteStore, open_store, provider

KINDS = ["memory", "sqlite", "redis"]


@pytest.fixture
def reopen(request, tmp_path):
    """``reopen()``: a state over the same store as every earlier call made (a restarted task's), memory
    aside, whose state lives in its one store object."""
    kind = request.param
    memory = MemoryStore()
    namespace = f"test:{request.node.name}"

    def make() -> KeyValueState:
        if kind == "memory":
            return KeyValueState(memory)
        if kind == "sqlite":
            return KeyValueState(SqliteStore(tmp_path / "task-1.db"))
        return KeyValueState(RedisStore(request.getfixturevalue("redis_url"), namespace))
    return make


@pytest.mark.parametrize("reopen", KINDS, indirect=True)
def test_a_state_gets_puts_deletes_and_iterates(reopen):
    state = reopen()
    assert state.txid == -1 and len(state) == 0
    state.put("apple", 3)
    state.put(7, [1.5, None, {"nested": b"bytes"}])
    state.put(b"raw", True)
    state.delete("absent")
    assert state.get("apple") == 3 and state["apple"] == 3 and state.get("pear", 0) == 0
    assert sorted(map(str, state)) == sorted(map(str, ["apple", 7, b"raw"])) and 7 in state and len(state) == 3
    state.delete("apple")
    assert "apple" not in state and dict(state.items()) == {7: [1.5, None, {"nested": b"bytes"}], b"raw": True}


@pytest.mark.parametrize("reopen", KINDS, indirect=True)
def test_what_a_commit_wrote_is_what_a_restarted_task_loads_and_nothing_after_it(reopen):
    state = reopen()
    state.put("kept", 1)
    state.put("gone", 2)
    state.prepare(0)
    state.put("after the prepare", 3)  # not in checkpoint 0
    state.commit(0)
    state.delete("gone")
    state.prepare(1)  # prepared, never committed: a crash before the commit
    restarted = reopen()
    assert restarted.txid == 0
    assert dict(restarted.items()) == {"kept": 1, "gone": 2}


@pytest.mark.parametrize("reopen", KINDS, indirect=True)
def test_a_rollback_returns_to_the_last_commit(reopen):
    state = reopen()
    state.put("n", 1)
    state.prepare(0)
    state.commit(0)
    state.put("n", 2)
    state.prepare(1)
    state.put("m", 5)
    state.rollback()
    assert dict(state.items()) == {"n": 1} and state.txid == 0
    state.commit(1)  # its prepare was rolled back: nothing is written
    assert dict(reopen().items()) == {"n": 1}


@pytest.mark.parametrize("reopen", KINDS, indirect=True)
def test_a_second_prepare_before_a_commit_keeps_the_first_ones_changes(reopen):
    """A checkpoint whose PREPARE tree failed is prepared again (a retry, or the next one): the changes the
    first prepare froze must not be lost when the second commits."""
    state = reopen()
    state.put("a", 1)
    state.prepare(0)
    state.put("b", 2)
    state.prepare(1)
    state.commit(1)
    assert dict(reopen().items()) == {"a": 1, "b": 2}


@pytest.mark.parametrize("reopen", KINDS, indirect=True)
def test_a_value_changed_in_place_after_its_commit_is_not_what_was_committed(reopen):
    state = reopen()
    words = ["a"]
    state.put("words", words)
    state.prepare(0)
    state.commit(0)
    words.append("b")  # in place, no put: not a change of the state's
    state.rollback()
    assert state.get("words") == ["a"]


@pytest.mark.parametrize("reopen", ["memory"], indirect=True)
@pytest.mark.parametrize("key, value, message", [
    ((1, 2), 0, "state key (1, 2): a key is a str, an int or bytes, not tuple"),
    (1.5, 0, "a key is a str, an int or bytes, not float"),
    ("k", object(), "state value for key 'k': object is not supported; a state keeps str, bytes"),
    ("k", {"inner": {1, 2}}, "set is not supported"),
    ("k", 2**70, "does not fit in 64 bits"),
])
def test_a_key_or_value_no_store_can_keep_is_refused_naming_it_and_the_state_is_unchanged(reopen, key, value,
                                                                                         message):
    state = reopen()
    with pytest.raises(StateError, match=message.replace("(", r"\(").replace(")", r"\)")):
        state.put(key, value)
    assert len(state) == 0


def test_the_embedded_store_keeps_its_last_commit_whole_through_a_sigkill_mid_commit(tmp_path):
    """A process commits checkpoint after checkpoint (each a batch of keys and ``last``) until it is killed
    with SIGKILL: the file then holds exactly one of the checkpoints it committed, whole."""
    path = tmp_path / "task.db"
    script = textwrap.dedent(f"""
        import sys
        from squall.state.kv import KeyValueState
        from squall.state.stores import SqliteStore
        state = KeyValueState(SqliteStore(__import__("pathlib").Path({str(path)!r})))
        for txid in range(10**6):
            for i in range(50):
                state.put(f"k{{txid}}-{{i}}", txid)
            state.put("last", txid)
            state.prepare(txid)
            state.commit(txid)
            if txid == 3:
                print("committing", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout.readline() == "committing\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    state = KeyValueState(SqliteStore(path))
    last = state.txid
    assert last >= 3 and state.get("last") == last
    assert len(state) == 50 * (last + 1) + 1  # every committed checkpoint's keys, none of a later one


def test_the_config_picks_the_store(tmp_path, monkeypatch, redis_url):
    monkeypatch.delenv("SQUALL_STATE_DIR", raising=False)
    where = {"topology": "wc", "component": "count", "task": 3}
    assert provider({}) == "memory" and isinstance(open_store({}, **where), MemoryStore)
    embedded = open_store({"topology.state.dir": str(tmp_path)}, **where)
    assert isinstance(embedded, SqliteStore) and embedded.path == tmp_path / "wc" / "count-3.db"
    monkeypatch.setenv("SQUALL_STATE_DIR", str(tmp_path))
    assert provider({}) == "embedded"
    assert isinstance(open_store({"topology.state.provider": "redis", "topology.state.redis.url": redis_url}, **where),
                      RedisStore)
    with pytest.raises(ConfigError, match="redis needs a URL: set topology.state.redis.url"):
        open_store({"topology.state.provider": "redis"}, **where)
    with pytest.raises(ConfigError, match="'rocksdb' is not a state provider; use one of memory, embedded, redis"):
        open_store({"topology.state.provider": "rocksdb"}, **where)


@pytest.mark.parametrize("reopen", KINDS, indirect=True)
def test_exactly_once_a_prepared_checkpoint_survives_its_task_and_commits_once_decided(reopen):
    """Exactly once, a PREPARE's write keeps the changes beside the committed state: a task restarted before
    the COMMIT loads the last commit, and the COMMIT then applies what the task before it prepared, once."""
    state = reopen()
    state.put("kept", 1)
    state.prepare(0)
    state.prepare_write(0)()
    state.promote_write(0)()
    state.committed(0)
    state.put("kept", 2)
    state.delete("gone")
    state.put("new", "x")
    state.prepare(1)
    state.prepare_write(1)()
    restarted = reopen()  # died between the PREPARE and the COMMIT
    assert (restarted.txid, restarted.items()) == (0, [("kept", 1)])
    restarted.promote_write(2)()  # not what is prepared: nothing changes
    assert (reopen().txid, reopen().items()) == (0, [("kept", 1)])
    restarted.promote_write(1)()
    again = reopen()
    assert again.txid == 1 and dict(again.items()) == {"kept": 2, "new": "x"}
    again.promote_write(1)()  # a COMMIT retried: applied once
    assert dict(reopen().items()) == {"kept": 2, "new": "x"}
