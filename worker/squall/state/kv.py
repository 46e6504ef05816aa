"""A stateful bolt task's key-value state (Storm's ``KeyValueState``): held in memory while the task runs,
made durable by its store once per checkpoint, in the checkpoint's commit.

The engine drives it through the checkpoint protocol (:mod:`squall.state.checkpoint`): ``prepare``
freezes the changes made since the last prepare, ``commit`` writes what the prepare froze to the store
in one atomic step, and ``rollback`` goes back to what the store last committed. Exactly once, a
checkpoint's changes are made durable at its prepare (:meth:`KeyValueState.prepare_write`) and applied at
its commit (:meth:`KeyValueState.promote_write`), so that a task that dies between the two still commits
what it prepared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from squall.errors import SquallError
from squall.state.stores import DELETED, Store
from squall.values import INT_MAX, INT_MIN, SUPPORTED, unsupported

#: What a key may be: it is encoded by value (msgpack) in every store, so only these keep their identity.
KEY_TYPES = (str, int, bytes)


class StateError(SquallError):
    """A key or value a :class:`KeyValueState` cannot keep, or a store that cannot be opened or written."""


class KeyValueState:
    """One task's state: ``get``, ``put``, ``delete``, ``state[key]``, ``len``, ``in``, ``keys()`` and ``items()``.

    Keys are ``str``, ``int`` or ``bytes``; values are what a tuple carries (str, bytes, bool, int
    (64-bit), float, None, list and dict), so every store keeps them without pickling::

        >>> from squall.state.stores import MemoryStore
        >>> state = KeyValueState(MemoryStore())
        >>> state.put("apple", 3)
        >>> state.get("apple"), state.get("pear", 0), len(state)
        (3, 0, 1)
        >>> state.put("pear", object())
        Traceback (most recent call last):
        ...
        squall.state.kv.StateError: state value for key 'pear': object is not supported; a state keeps str, ...
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self.txid, self._items = store.load()  #: the checkpoint the store last committed (-1: none yet)
        self._changes: dict[Any, Any] = {}  # key → value (or DELETED) since the last prepare
        self._prepared: tuple[int, dict[Any, Any]] | None = None  # (txid, changes) that prepare froze

    # -- what a bolt calls -------------------------------------------------------------------

    def get(self, key: Any, default: Any = None) -> Any:
        """The value of ``key``, or ``default``."""
        return self._items.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        """Set ``key`` to ``value`` (kept once the next checkpoint commits)."""
        _check(key, value)
        self._items[key] = value
        self._changes[key] = value

    def delete(self, key: Any) -> None:
        """Remove ``key`` (no error if it is absent)."""
        if self._items.pop(key, DELETED) is not DELETED:
            self._changes[key] = DELETED

    def __getitem__(self, key: Any) -> Any:
        return self._items[key]

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[Any]:
        """The keys (a copy: the bolt may change the state while it iterates)."""
        return iter(list(self._items))

    def keys(self) -> list[Any]:
        return list(self._items)

    def items(self) -> list[tuple[Any, Any]]:
        """``(key, value)`` pairs, as Storm's state iterates its entries."""
        return list(self._items.items())

    # -- the checkpoint protocol ----------------------------------------------------------------

    def prepare(self, txid: int) -> None:
        """Freeze the changes since the last prepare as those of checkpoint ``txid`` (a prepare again
        before a commit, after a failed checkpoint, takes the earlier ones in too)."""
        changes = self._changes
        if self._prepared is not None:
            changes = {**self._prepared[1], **changes}
        self._prepared = (txid, changes)
        self._changes = {}

    def commit(self, txid: int) -> None:
        """Write the changes prepared for ``txid`` to the store, atomically with ``txid``. A commit of a
        checkpoint committed already (a retried commit) or never prepared here (the task started after
        its prepare: what it lacks is replayed) writes nothing."""
        write = self.commit_write(txid)
        if write is not None:
            write()
            self.committed(txid)

    def commit_write(self, txid: int) -> Callable[[], None] | None:
        """The write :meth:`commit` makes (None: nothing to write), to run on another thread: it reads only
        what the prepare froze, so the bolt may go on changing the state meanwhile. Then :meth:`committed`."""
        if self._prepared is None or self._prepared[0] != txid:
            return None
        changes = self._prepared[1]
        return lambda: self._store.commit(txid, changes)

    def prepare_write(self, txid: int) -> Callable[[], None]:
        """Exactly once: the write that keeps the changes :meth:`prepare` froze for ``txid`` durably, not
        committed (to run on another thread, as :meth:`commit_write`'s)."""
        assert self._prepared is not None and self._prepared[0] == txid, "prepare(txid) first"
        changes = self._prepared[1]
        return lambda: self._store.prepare(txid, changes)

    def promote_write(self, txid: int) -> Callable[[], None]:
        """Exactly once: the write that commits what the store holds prepared for ``txid`` (a task that
        restarted since commits it too; nothing, if it is committed already). Then :meth:`committed`."""
        return lambda: self._store.commit_prepared(txid)

    def committed(self, txid: int) -> None:
        """The write of :meth:`commit_write` for ``txid`` is done."""
        self.txid = txid
        self._prepared = None

    def rollback(self) -> None:
        """Forget every change not committed: back to what the store last committed."""
        self.txid, self._items = self._store.load()
        self._changes = {}
        self._prepared = None

    def close(self) -> None:
        self._store.close()


def _check(key: Any, value: Any) -> None:
    kind = type(key)
    if kind not in KEY_TYPES:
        raise StateError(f"state key {key!r}: a key is a str, an int or bytes, not {kind.__name__}")
    # the common puts (an ASCII word, a count) checked without the walk: a put per input is the state's hot path
    if kind is str and key.isascii() or kind is bytes:
        kind = type(value)
        if kind is int and INT_MIN <= value <= INT_MAX or kind in _PLAIN or kind is str and value.isascii():
            return
    reason = unsupported(key) or unsupported(value)
    if reason:
        raise StateError(f"state value for key {key!r}: {reason}; a state keeps {SUPPORTED}")


_PLAIN = frozenset((float, bool, bytes, type(None)))  # values any store keeps as they are
