# cython: boundscheck=False, wraparound=False
"""The acker's pending trees: an open-addressing hash table in flat arrays, updated message by message.

A Python dict of root id → record costs well over 100 bytes per tree; this table stores a tree in 19
bytes per slot (root, ack val, spout task, and a byte for its generation and two flags). Its
capacity is not a power of two: a resize leaves it GROW_TO full, so with live trees it stays between
GROW_TO and MAX_LOAD full (32 to 25 bytes per pending tree), where doubling would leave it anywhere
between a quarter and a half full. Tables of up to :data:`SMALL_TABLE` slots are kept sparser.

Each message is applied on its own, in arrival order, so a verdict never depends on how messages
fall into batches. Where Squall was built with Cython, ``table.pxd`` gives this module C types and
the loop runs as C; elsewhere (``SQUALL_PURE_PYTHON=1``, or no compiler) the same code is interpreted.

Root ids 0 and 1 are reserved (empty slot, deleted slot); spouts never generate them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

EMPTY, DELETED = 0, 1
INIT, ACK, FAIL, RESET = 0, 1, 2, 3
NO_VERDICT = -1
ACKER_BUCKETS = 3  # a tree is dropped on the third rotation after it was last touched: (2T, 3T]
MAX_LOAD = 0.75  # live + deleted slots; linear probing's chains grow fast beyond this
GROW_TO = 0.6  # a resize sizes the table so that live trees fill this share of it
MIN_CAPACITY = 16
SMALL_TABLE = 1 << 16  # slots (1.2 MB): below this a rebuild leaves the table 1/SPARSE full
SPARSE = 4
MAX_TASK = 0xFFFE  # spout task ids are kept in 16 bits; 0xFFFF marks "init not seen yet"
NO_TASK = 0xFFFF
FAILED_BIT = 0x80  # in a slot's generation byte: the tree has seen a FAIL
RESET_BIT = 0x40  # ... a RESET came before its INIT: the spout task hears of it once the INIT comes
GENERATION = 0x3F
# What the per-message path uses, again under module-private names that table.pxd types as C values
# where this module is compiled (the public names stay Python objects, for the modules importing them).
_INIT, _ACK, _FAIL, _RESET = INIT, ACK, FAIL, RESET
_EMPTY, _DELETED, _NO_TASK, _MAX_TASK = EMPTY, DELETED, NO_TASK, MAX_TASK
_FAILED_BIT, _RESET_BIT = FAILED_BIT, RESET_BIT
_NO_VERDICT, _MAX_LOAD = NO_VERDICT, MAX_LOAD


class PendingTrees:
    """root id → (ack val, spout task, failed), rotated like Storm's ``RotatingMap``.

    A tree is decided by the first message after which its spout task is known (its ``INIT`` was
    seen) and it has either seen a ``FAIL`` or holds 0. A fail is sticky: once seen, later acks cannot
    complete the tree, and it fails. A decided tree is deleted; a message for it that arrives later
    starts an entry without an ``INIT``, which never gives a verdict and is forgotten on rotation. A ``RESET``
    that comes before its tree's ``INIT`` is told to the spout task when the ``INIT`` comes, unless
    that ``INIT`` decides the tree. A duplicated message would XOR its value in twice (cancelling it):
    nothing in Squall ever sends a message twice (docs/architecture.md).
    """

    def __init__(self, capacity: int = 1024) -> None:
        self._alloc(max(MIN_CAPACITY, capacity))
        self.live = 0
        self._used = 0  # live + deleted slots: what lengthens probes
        self._generation = 0

    def _alloc(self, cap: int) -> None:
        # numpy is imported by the first table, not with the module: a worker process imports this
        # module for its constants only, and numpy's import takes 60 ms and starts OpenBLAS's threads.
        import numpy as np

        self.cap = cap
        self.keys = np.zeros(cap, np.ulonglong)
        self.vals = np.zeros(cap, np.ulonglong)
        self.tasks = np.full(cap, NO_TASK, np.uint16)
        self.gens = np.zeros(cap, np.uint8)  # low 7 bits: the rotation it was last touched in; FAILED_BIT
        # the per-message path reads and writes through these (typed memoryviews when compiled)
        self._keys, self._vals = memoryview(self.keys), memoryview(self.vals)
        self._tasks, self._gens = memoryview(self.tasks), memoryview(self.gens)

    def __len__(self) -> int:
        return self.live

    def awaiting(self) -> int:
        """Pending trees that can still be decided: those whose ``INIT`` was seen. The others are messages
        for trees decided before (a ``FAIL`` for a frame that was read after all, say), which never give a
        verdict; a draining acker need not wait for them. A scan of the table: not for the hot path."""
        import numpy as np

        return int(np.count_nonzero(self.tasks != NO_TASK))

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.vals.nbytes + self.tasks.nbytes + self.gens.nbytes

    def update(self, kind: int, root: int, val: int, task: int) -> int:
        """Apply one message; return the verdict it makes, ``(kind << 16) | spout task`` (kind ACK, FAIL,
        or RESET for a pending tree whose timeout was reset), or :data:`NO_VERDICT`."""
        if root <= _DELETED:
            return _NO_VERDICT
        if kind == _INIT and not 0 <= task <= _MAX_TASK:
            raise ValueError(f"spout task id {task} is outside 0..{_MAX_TASK}, the task ids the acker keeps")
        at = self._find(root)
        value = self._vals[at]
        spout = self._tasks[at]
        gen = self._gens[at]
        if kind == _INIT:
            value ^= val
            spout = task
        elif kind == _ACK:
            value ^= val
        else:  # FAIL and RESET move the tree to the newest generation, as in Storm
            gen = (gen & (_FAILED_BIT | _RESET_BIT)) | self._generation
            if kind == _FAIL:
                gen |= _FAILED_BIT
            elif spout == _NO_TASK:
                gen |= _RESET_BIT
        if spout != _NO_TASK and (gen & _FAILED_BIT or value == 0):
            self._keys[at] = _DELETED
            self._tasks[at] = _NO_TASK
            self.live -= 1
            return ((_FAIL if gen & _FAILED_BIT else _ACK) << 16) | spout
        self._vals[at] = value
        self._tasks[at] = spout
        self._gens[at] = gen
        if spout != _NO_TASK:
            if kind == _RESET:
                return (_RESET << 16) | spout
            if kind == _INIT and gen & _RESET_BIT:  # a RESET came first, when the spout task was unknown
                self._gens[at] = gen ^ _RESET_BIT
                return (_RESET << 16) | spout
        return _NO_VERDICT

    def _find(self, root: int) -> int:
        """The slot of ``root``, inserted (empty, in the newest generation) if it is not there."""
        cap = self.cap
        keys = self._keys
        at = (root ^ (root >> 32)) % cap
        free = -1
        while True:
            key = keys[at]
            if key == root:
                return at
            if key == _EMPTY:
                break
            if key == _DELETED and free < 0:
                free = at
            at += 1
            if at == cap:
                at = 0
        if free < 0:
            if self._used + 1 > _MAX_LOAD * cap:
                self._rebuild(self.live + 1)
                return self._find(root)
            self._used += 1
        else:
            at = free
        keys[at] = root
        self._vals[at] = 0
        self._tasks[at] = _NO_TASK
        self._gens[at] = self._generation
        self.live += 1
        return at

    def _rebuild(self, need: int) -> None:
        """Re-insert the live trees into a table sized for ``need`` (deleted slots go)."""
        live = self.keys > DELETED
        keys, vals, tasks, gens = self.keys[live], self.vals[live], self.tasks[live], self.gens[live]
        # Small tables stay sparse: their memory does not matter, and they probe and rebuild less.
        self._alloc(max(MIN_CAPACITY, need * SPARSE if need * SPARSE <= SMALL_TABLE else int(need / GROW_TO) + 1))
        self.live = self._used = 0
        for i in range(len(keys)):
            at = self._find(int(keys[i]))
            self._vals[at] = int(vals[i])
            self._tasks[at] = int(tasks[i])
            self._gens[at] = int(gens[i])

    def apply(self, messages: Iterable[tuple[int, int, int, int]]) -> list[tuple[int, int, int]]:
        """Apply ``(kind, root, val, task)`` messages in order: the verdicts, ``(kind, root, spout task)`` each."""
        out = []
        for kind, root, val, task in messages:
            verdict = self.update(kind, root, val, task)
            if verdict != NO_VERDICT:
                out.append((verdict >> 16, root, verdict & 0xFFFF))
        return out

    def apply_columns(self, kinds: Any, roots: Any, vals: Any, tasks: Any) -> list[tuple[int, int, int]]:
        """:meth:`apply` for messages given as columns (a frame's arrays: uint8 kinds, uint64 roots and
        values, int32 tasks), without a Python object per message."""
        out = []
        for i in range(len(kinds)):
            verdict = self.update(kinds[i], roots[i], vals[i], tasks[i])
            if verdict != _NO_VERDICT:
                out.append((verdict >> 16, roots[i], verdict & 0xFFFF))
        return out

    def rotate(self) -> int:
        """Advance one bucket; drop trees untouched for ``ACKER_BUCKETS`` rotations. Returns how many."""
        import numpy as np

        self._generation = (self._generation + 1) & GENERATION
        live = self.keys > DELETED
        age = (self._generation - (self.gens & GENERATION).astype(np.int64)) & GENERATION
        expired = np.flatnonzero(live & (age >= ACKER_BUCKETS))
        if len(expired):
            self.keys[expired] = DELETED
            self.tasks[expired] = NO_TASK
            self.live -= len(expired)
        return len(expired)
