"""Where a task's committed state lives: in memory (lost with the process, as Storm's default), an
embedded SQLite file per task (durable, the default where a durable directory exists), or Redis.

A store keeps one task's state: :meth:`Store.load` gives the last committed checkpoint's id and items,
:meth:`Store.commit` writes a checkpoint's changes and its id in one atomic step. Exactly once, a checkpoint
is written in two: :meth:`Store.prepare` keeps its changes durably beside the committed state, and
:meth:`Store.commit_prepared` applies them once the checkpoint is decided. Keys and values
are encoded with msgpack (never pickle): a store holds nothing a tuple could not carry.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import msgpack

from squall.contract import STATE_DIR as DIR_ENV
from squall.contract import STATE_REDIS_URL as REDIS_URL_ENV
from squall.errors import ConfigError
from squall.state.config import DIR_KEY, EMBEDDED, MEMORY, PROVIDER_KEY, PROVIDERS, REDIS, REDIS_URL_KEY

#: A change that removes its key (in the changes a commit writes).
DELETED: Any = object()

class Store(Protocol):
    def load(self) -> tuple[int, dict[Any, Any]]:
        """The last committed checkpoint's id (-1: none) and a fresh dict of the items it holds."""

    def commit(self, txid: int, changes: dict[Any, Any]) -> None:
        """Apply ``changes`` (key → value, or :data:`DELETED`) and record ``txid``, all or nothing."""

    def prepare(self, txid: int, changes: dict[Any, Any]) -> None:
        """Keep ``changes`` durably as checkpoint ``txid``'s, not applied (replacing any prepared before)."""

    def commit_prepared(self, txid: int) -> bool:
        """Apply the changes prepared for ``txid`` and record ``txid``, all or nothing; False (and nothing
        written) when what is prepared is not ``txid``'s (committed already, or never prepared here)."""

    def close(self) -> None: ...


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _pack_prepared(txid: int, changes: dict[Any, Any]) -> bytes:
    """A prepared checkpoint as one value: its id and its changes, a deletion as a change with no value."""
    return _pack([txid, [[key] if value is DELETED else [key, value] for key, value in changes.items()]])


def _unpack_prepared(data: bytes | None) -> tuple[int, dict[Any, Any]]:
    if data is None:
        return -1, {}
    txid, changes = _unpack(data)
    return txid, {change[0]: change[1] if len(change) == 2 else DELETED for change in changes}


class MemoryStore:
    """Committed state in this process's memory: for tests, and lost with the process (Storm's default)."""

    def __init__(self) -> None:
        self._txid = -1
        self._items: dict[Any, Any] = {}
        self._prepared: bytes | None = None

    def load(self) -> tuple[int, dict[Any, Any]]:
        # a deep copy, as a durable store's would be: a bolt changing a value in place changes no commit
        return self._txid, {key: _unpack(_pack(value)) for key, value in self._items.items()}

    def commit(self, txid: int, changes: dict[Any, Any]) -> None:
        for key, value in changes.items():
            if value is DELETED:
                self._items.pop(key, None)
            else:
                self._items[key] = _unpack(_pack(value))
        self._txid = txid

    def prepare(self, txid: int, changes: dict[Any, Any]) -> None:
        self._prepared = _pack_prepared(txid, changes)

    def commit_prepared(self, txid: int) -> bool:
        prepared, changes = _unpack_prepared(self._prepared)
        if prepared != txid:
            return False
        self.commit(txid, changes)
        self._prepared = None
        return True

    def close(self) -> None:
        pass


class SqliteStore:
    """One SQLite file per task: a commit is one transaction, on disk when it returns (``synchronous=FULL``,
    write-ahead log), so a SIGKILL at any moment leaves the last committed checkpoint whole."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("CREATE TABLE IF NOT EXISTS state (key BLOB PRIMARY KEY, value BLOB NOT NULL)")
        self._db.execute("CREATE TABLE IF NOT EXISTS checkpoint (id INTEGER PRIMARY KEY CHECK (id = 0), txid INTEGER)")
        self._db.execute("CREATE TABLE IF NOT EXISTS prepared (id INTEGER PRIMARY KEY CHECK (id = 0), changes BLOB)")

    def load(self) -> tuple[int, dict[Any, Any]]:
        row = self._db.execute("SELECT txid FROM checkpoint").fetchone()
        items = {_unpack(key): _unpack(value) for key, value in self._db.execute("SELECT key, value FROM state")}
        return (row[0] if row else -1), items

    def commit(self, txid: int, changes: dict[Any, Any]) -> None:
        with self._transaction() as db:
            self._apply(db, txid, changes)

    def prepare(self, txid: int, changes: dict[Any, Any]) -> None:
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO prepared (id, changes) VALUES (0, ?)", (_pack_prepared(txid, changes),))

    def commit_prepared(self, txid: int) -> bool:
        with self._transaction() as db:
            row = db.execute("SELECT changes FROM prepared").fetchone()
            prepared, changes = _unpack_prepared(row[0] if row else None)
            if prepared != txid:
                return False
            self._apply(db, txid, changes)
            db.execute("DELETE FROM prepared")
        return True

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @staticmethod
    def _apply(db: sqlite3.Connection, txid: int, changes: dict[Any, Any]) -> None:
        gone = [(_pack(key),) for key, value in changes.items() if value is DELETED]
        kept = [(_pack(key), _pack(value)) for key, value in changes.items() if value is not DELETED]
        db.executemany("DELETE FROM state WHERE key = ?", gone)
        db.executemany("INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)", kept)
        db.execute("INSERT OR REPLACE INTO checkpoint (id, txid) VALUES (0, ?)", (txid,))

    def close(self) -> None:
        self._db.close()


class RedisStore:
    """A task's state in a Redis hash (``<namespace>:state``) and its checkpoint id (``<namespace>:txid``),
    both written in one MULTI/EXEC transaction per commit (Storm's persistent backend)."""

    def __init__(self, url: str, namespace: str) -> None:
        import redis  # only where the Redis store is chosen

        self._redis = redis.Redis.from_url(url)
        self._hash, self._txid = f"{namespace}:state", f"{namespace}:txid"
        self._prepared = f"{namespace}:prepared"

    def load(self) -> tuple[int, dict[Any, Any]]:
        txid = self._redis.get(self._txid)
        items = {_unpack(key): _unpack(value) for key, value in self._redis.hgetall(self._hash).items()}
        return (int(txid) if txid is not None else -1), items

    def commit(self, txid: int, changes: dict[Any, Any]) -> None:
        pipe = self._redis.pipeline(transaction=True)
        self._apply(pipe, txid, changes)
        pipe.execute()

    def prepare(self, txid: int, changes: dict[Any, Any]) -> None:
        self._redis.set(self._prepared, _pack_prepared(txid, changes))

    def commit_prepared(self, txid: int) -> bool:
        # one writer per task: nothing changes the prepared key between this read and the transaction
        prepared, changes = _unpack_prepared(self._redis.get(self._prepared))
        if prepared != txid:
            return False
        pipe = self._redis.pipeline(transaction=True)
        self._apply(pipe, txid, changes)
        pipe.delete(self._prepared)
        pipe.execute()
        return True

    def _apply(self, pipe: Any, txid: int, changes: dict[Any, Any]) -> None:
        gone = [_pack(key) for key, value in changes.items() if value is DELETED]
        kept = {_pack(key): _pack(value) for key, value in changes.items() if value is not DELETED}
        if gone:
            pipe.hdel(self._hash, *gone)
        if kept:
            pipe.hset(self._hash, mapping=kept)
        pipe.set(self._txid, txid)

    def close(self) -> None:
        self._redis.close()


def provider(conf: dict[str, Any]) -> str:
    """The store the config picks: ``topology.state.provider``, by default the embedded store where a
    durable directory is known (``squall run``, a worker pod with a volume), else memory."""
    chosen = conf.get(PROVIDER_KEY)
    if chosen is None:
        return EMBEDDED if conf.get(DIR_KEY) or os.environ.get(DIR_ENV) else MEMORY
    if chosen not in PROVIDERS:
        raise ConfigError(f"config {PROVIDER_KEY}: {chosen!r} is not a state provider; use one of "
                          f"{', '.join(PROVIDERS)}")
    return chosen


def embedded_path(directory: str | Path, *, topology: str, component: str, task: int) -> Path:
    """The embedded store's file of ``task`` of ``component``, under the state directory ``directory``."""
    return Path(directory) / topology / f"{component}-{task}.db"


def redis_namespace(*, topology: str, component: str, task: int) -> str:
    """The prefix of the Redis store's keys of ``task`` of ``component`` (``:state``, its hash; ``:txid``)."""
    return f"squall:{topology}:{component}:{task}"


def open_store(conf: dict[str, Any], *, topology: str, component: str, task: int) -> Store:
    """The store of ``task`` of ``component`` in ``topology``, as the config picks it (see :func:`provider`).
    A task's store is named by its task id, which rebalances keep: its state follows it."""
    chosen = provider(conf)
    if chosen == MEMORY:
        return MemoryStore()
    if chosen == EMBEDDED:
        where = conf.get(DIR_KEY) or os.environ.get(DIR_ENV)
        if not where:
            raise ConfigError(f"config {PROVIDER_KEY}: {EMBEDDED} needs a durable directory: set {DIR_KEY} "
                              f"(or the environment variable {DIR_ENV})")
        return SqliteStore(embedded_path(where, topology=topology, component=component, task=task))
    url = conf.get(REDIS_URL_KEY) or os.environ.get(REDIS_URL_ENV)
    if not url:
        raise ConfigError(f"config {PROVIDER_KEY}: {REDIS} needs a URL: set {REDIS_URL_KEY} (or the environment "
                          f"variable {REDIS_URL_ENV}), e.g. redis://localhost:6379/0")
    return RedisStore(url, redis_namespace(topology=topology, component=component, task=task))
