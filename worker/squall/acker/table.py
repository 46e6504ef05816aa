"""The acker's pending trees: an open-addressing hash table in numpy arrays.

A Python dict of root id → record costs well over 100 bytes per tree; this table stores a tree
in 19 bytes per slot (root, ack val, spout task, generation), and applies a whole batch of acker
messages with a few vectorised passes. Its capacity is not a power of two: a resize
leaves it GROW_TO full, so with live trees it stays between GROW_TO and MAX_LOAD full (32 to 25
bytes per pending tree), where doubling would leave it anywhere between a quarter and a half full.
Tables of up to 16,384 trees are kept sparser (a quarter full after a resize): a few hundred KB.

Root ids 0 and 1 are reserved (empty slot, deleted slot); spouts never generate them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EMPTY, DELETED = 0, 1
INIT, ACK, FAIL, RESET = 0, 1, 2, 3
ACKER_BUCKETS = 3  # a tree is dropped on the third rotation after it was last touched: (2T, 3T]
MAX_LOAD = 0.75  # live + deleted slots; linear probing's chains grow fast beyond this
GROW_TO = 0.6  # a resize sizes the table so that live trees fill this share of it
MIN_CAPACITY = 16
SMALL_TABLE = 1 << 16  # slots (1.5 MB): below this a rebuild leaves the table 1/SPARSE full
SPARSE = 4
MAX_TASK = 0xFFFE  # spout task ids are kept in 16 bits; 0xFFFF marks "init not seen yet"
NO_TASK = 0xFFFF
SCALAR_TAIL = 8  # probe the last few keys one by one

_U64 = np.uint64


@dataclass(frozen=True)
class Outcome:
    """Trees decided by one batch: acked, failed, and those whose timeout was reset."""

    acked_roots: np.ndarray
    acked_tasks: np.ndarray
    failed_roots: np.ndarray
    failed_tasks: np.ndarray
    reset_roots: np.ndarray
    reset_tasks: np.ndarray


class PendingTrees:
    """root id → (ack val, spout task, failed), rotated like Storm's ``RotatingMap``."""

    def __init__(self, capacity: int = 1024) -> None:
        self._alloc(max(MIN_CAPACITY, capacity))
        self.live = 0
        self._used = 0  # live + deleted slots: what lengthens probes
        self._gen = 0

    def _alloc(self, cap: int) -> None:
        self.cap = cap
        self.keys = np.zeros(cap, _U64)
        self.vals = np.zeros(cap, _U64)
        self.tasks = np.full(cap, NO_TASK, np.uint16)
        self.gen = np.zeros(cap, np.uint8)  # low bits: rotation generation; bit 7: failed

    def __len__(self) -> int:
        return self.live

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.keys, self.vals, self.tasks, self.gen))

    def _probe(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For distinct keys: their slot (or -1), and for missing keys the slot to insert them at
        (the first deleted or empty slot on their path)."""
        cap = self.cap
        idx = ((keys ^ (keys >> _U64(32))) % _U64(cap)).astype(np.int64)
        found = np.full(len(keys), -1, np.int64)
        free = np.full(len(keys), -1, np.int64)
        todo = np.arange(len(keys))
        while todo.size > SCALAR_TAIL:
            at = idx[todo]
            k = self.keys[at]
            hit = k == keys[todo]
            found[todo[hit]] = at[hit]
            reusable = (k <= DELETED) & (free[todo] < 0)
            free[todo[reusable]] = at[reusable]
            todo = todo[~(hit | (k == EMPTY))]
            nxt = idx[todo] + 1
            nxt[nxt == cap] = 0
            idx[todo] = nxt
        # The few keys left on long chains: a plain loop beats numpy's per-call overhead.
        table = self.keys
        for i in todo.tolist():
            key, at, first_free = keys.item(i), idx.item(i), free.item(i)
            while True:
                k = table.item(at)
                if k == key:
                    found[i] = at
                    break
                if k <= DELETED and first_free < 0:
                    first_free = free[i] = at
                if k == EMPTY:
                    break
                at = at + 1 if at + 1 < cap else 0
        return found, free

    def _insert(self, keys: np.ndarray) -> np.ndarray:
        """Insert distinct keys known to be absent; return their slots."""
        slots = np.empty(len(keys), np.int64)
        todo = np.arange(len(keys))
        while todo.size:
            _, free = self._probe(keys[todo])
            # Two new keys may race for one free slot: the first wins, the others probe again.
            claimed, first = np.unique(free, return_index=True)
            winners = todo[first]
            self._used += int(np.count_nonzero(self.keys[claimed] == EMPTY))
            self.keys[claimed] = keys[winners]
            self.vals[claimed] = 0
            self.tasks[claimed] = NO_TASK
            self.gen[claimed] = self._gen & 0x7F
            slots[winners] = claimed
            lost = np.ones(len(todo), bool)
            lost[first] = False
            todo = todo[lost]
        self.live += len(keys)
        return slots

    def _delete(self, slots: np.ndarray) -> None:
        self.keys[slots] = DELETED
        self.tasks[slots] = NO_TASK
        self.live -= len(slots)

    def _grow_for(self, extra: int) -> None:
        if self._used + extra <= MAX_LOAD * self.cap:
            return
        live = self.keys >= 2
        keys, vals, tasks, gen = self.keys[live], self.vals[live], self.tasks[live], self.gen[live]
        need = len(keys) + extra
        # Small tables stay sparse: their memory does not matter, and they probe and rebuild less.
        self._alloc(max(MIN_CAPACITY, need * SPARSE if need * SPARSE <= SMALL_TABLE else int(need / GROW_TO) + 1))
        self.live = self._used = 0
        slots = self._insert(keys)
        self.vals[slots], self.tasks[slots], self.gen[slots] = vals, tasks, gen

    def apply(self, kinds: np.ndarray, roots: np.ndarray, vals: np.ndarray, tasks: np.ndarray) -> Outcome:
        """Apply a batch of acker messages as if one by one, in arrival order, so the verdicts never
        depend on how messages fall into batches.

        A tree is decided by the first message after which its spout task is known (its ``INIT`` was
        seen) and it has either seen a ``FAIL`` or holds 0. A fail is sticky: once seen, later acks
        cannot complete the tree, and it fails. Messages for a root after its decision are dropped:
        one by one they would start an entry without an ``INIT``, which never gives a verdict and is
        forgotten on rotation. A duplicated message would XOR its value in twice (cancelling it):
        nothing in Squall ever sends a message twice (docs/architecture.md).
        """
        if len(tasks) and tasks.max() > MAX_TASK:
            raise ValueError(f"spout task id {int(tasks.max())} is above {MAX_TASK}, the largest the acker keeps")
        ok = roots >= 2
        if not ok.all():
            kinds, roots, vals, tasks = kinds[ok], roots[ok], vals[ok], tasks[ok]
        n = len(roots)
        if not n:
            empty, none = np.zeros(0, _U64), np.zeros(0, np.int32)
            return Outcome(empty, none, empty, none, empty, none)
        order = np.argsort(roots, kind="stable")  # stable: each root's messages stay in arrival order
        roots, kinds, vals, tasks = roots[order], kinds[order], vals[order], tasks[order]
        first = np.concatenate(([True], roots[1:] != roots[:-1]))
        starts = np.flatnonzero(first)
        group = np.cumsum(first) - 1  # each message's root, as an index into uroots
        uroots = roots[starts]

        self._grow_for(len(uroots))
        slots, _ = self._probe(uroots)
        new = slots < 0
        if new.any():
            slots[new] = self._insert(uroots[new])
        base_task = self.tasks[slots].astype(np.int32)

        # The tree's value after each message: the table's value XOR the root's messages so far.
        prefix = np.bitwise_xor.accumulate(vals)
        before = prefix[starts] ^ vals[starts]
        value = self.vals[slots][group] ^ prefix ^ before[group]
        at, never = np.arange(n), n
        first_init = np.minimum.reduceat(np.where(kinds == INIT, at, never), starts)
        first_fail = np.minimum.reduceat(np.where(kinds == FAIL, at, never), starts)
        known = (base_task[group] != NO_TASK) | (at >= first_init[group])
        failed = (self.gen[slots][group] >= 0x80) | (at >= first_fail[group])
        decided_at = np.minimum.reduceat(np.where(known & (failed | (value == 0)), at, never), starts)
        decided = decided_at < never
        task = np.where(base_task != NO_TASK, base_task,
                        np.where(first_init < never, tasks[np.minimum(first_init, n - 1)], NO_TASK)).astype(np.int32)
        fail = decided & failed[np.minimum(decided_at, n - 1)]
        done = decided & ~fail

        # Undecided trees keep what the batch did to them.
        live = ~decided
        keep = slots[live]
        last = np.append(starts[1:], n) - 1
        self.vals[keep] = value[last][live]
        self.tasks[keep] = task[live]
        any_fail = first_fail < never
        reset = np.logical_or.reduceat(kinds == RESET, starts)
        touch = slots[live & (any_fail | reset)]  # as in Storm, a fail or reset moves the tree to the newest bucket
        self.gen[touch] = (self.gen[touch] & 0x80) | (self._gen & 0x7F)
        self.gen[slots[live & any_fail]] |= 0x80
        resets = live & reset & (task != NO_TASK)
        if decided.any():
            self._delete(slots[decided])
        return Outcome(uroots[done], task[done], uroots[fail], task[fail], uroots[resets], task[resets])

    def rotate(self) -> int:
        """Advance one bucket; drop trees untouched for ``ACKER_BUCKETS`` rotations. Returns how many."""
        self._gen += 1
        live = self.keys >= 2
        age = (self._gen - (self.gen & 0x7F).astype(np.int64)) & 0x7F
        expired = np.flatnonzero(live & (age >= ACKER_BUCKETS))
        if len(expired):
            self._delete(expired)
        return len(expired)
