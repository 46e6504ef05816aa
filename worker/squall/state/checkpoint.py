"""Storm's checkpoint protocol: the checkpoint spout's phases, and the barrier a bolt task keeps.

Every ``topology.state.checkpoint.interval.ms`` the checkpoint spout (system component
``__checkpoint``, one task) emits PREPARE for the next transaction id on the ``__checkpoint`` stream;
every bolt takes it once from each of its input tasks (its barrier), acts on it (a stateful bolt
freezes its changes), and forwards it to its own subscribers. When that tuple tree is acked, the
spout emits COMMIT (every stateful bolt writes what it froze, then acks the inputs whose effect it
holds); when it fails or times out, ROLLBACK (back to the last commit; the inputs held fail and replay).
At start, and after any failure once the rollback (or the retried commit) is done, INITSTATE hands every
bolt its last committed state; a task that has none yet fails the PREPAREs it gets, which starts that
recovery. Every checkpoint tree rides the XOR acker like any other: a lost checkpoint tuple fails it.

The spout's own progress (the last transaction id and its phase) is kept in a store like a task's
state, so a restarted spout resumes the protocol where it was (Storm's ``CheckPointState``)::

    >>> p = Progress(txid=-1, phase=COMMITTED)
    >>> p.emit(recovering=True)      # at start: hand every bolt its committed state
    ('INITSTATE', -1, Progress(txid=-1, phase='COMMITTED'))
    >>> action, txid, p = p.emit(recovering=False); action, txid
    ('PREPARE', 0)
    >>> p = p.acked(action, txid); p.emit(recovering=False)[:2]
    ('COMMIT', 0)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from squall.api import Spout
from squall.state.config import CHECKPOINT_INTERVAL_KEY, DEFAULT_CHECKPOINT_INTERVAL_MS
from squall.state.kv import KeyValueState
from squall.state.stores import open_store
from squall.system import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM
from squall.tuples import Tuple

INITSTATE, PREPARE, COMMIT, ROLLBACK = "INITSTATE", "PREPARE", "COMMIT", "ROLLBACK"
#: The spout's phases: the last transaction committed; one prepared (its PREPARE emitted or acked); one
#: being committed (its COMMIT emitted: it is retried until every bolt has it, never rolled back).
COMMITTED, PREPARING, COMMITTING = "COMMITTED", "PREPARING", "COMMITTING"
#: The fields of the ``__checkpoint`` stream.
FIELDS = ("txid", "action")


@dataclass(frozen=True)
class Progress:
    """Where the protocol stands: ``txid`` in ``phase``."""

    txid: int
    phase: str

    def emit(self, *, recovering: bool) -> tuple[str, int, Progress]:
        """The action to emit next, its transaction id, and the progress to record before emitting it."""
        if self.phase == COMMITTED:
            if recovering:
                return INITSTATE, self.txid, self
            return PREPARE, self.txid + 1, Progress(self.txid + 1, PREPARING)
        if self.phase == PREPARING:
            if recovering:
                return ROLLBACK, self.txid, self
            return COMMIT, self.txid, Progress(self.txid, COMMITTING)
        return COMMIT, self.txid, self

    def acked(self, action: str, txid: int) -> Progress:
        """The progress once every bolt took ``action`` for ``txid``."""
        if action == ROLLBACK:
            return Progress(txid - 1, COMMITTED)
        if action == PREPARE:
            return Progress(txid, PREPARING)
        return Progress(txid, COMMITTED)


def interval_seconds(conf: dict[str, Any]) -> float:
    return float(conf.get(CHECKPOINT_INTERVAL_KEY, DEFAULT_CHECKPOINT_INTERVAL_MS)) / 1000


class CheckpointSpout(Spout):
    """The system spout that drives checkpoints (``__checkpoint``, one task per topology with stateful
    bolts). One checkpoint tuple tree is in flight at a time; its message id is ``(action, txid)``."""

    outputs = {CHECKPOINT_STREAM: list(FIELDS)}

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.interval = interval_seconds(conf)
        # named by its index, 0, not its task id: that follows the user's components' task counts, which a
        # rebalance may change, and its progress must stay where it was
        self._state = KeyValueState(open_store(conf, topology=context.topology_name, component=CHECKPOINT_COMPONENT,
                                               task=context.this_task_index))
        txid, phase = self._state.get("progress", [-1, COMMITTED])
        self.progress = Progress(txid, phase)
        self.recovering = True  # a start is a recovery: every bolt gets its committed state first
        self.in_flight: tuple[str, int] | None = None
        self.next_at = 0.0
        self.last_after: float | None = None  # winding down: the last checkpoint is prepared after this
        self.prepared_at = 0.0  # when the last PREPARE was emitted
        self.done = False  # wound down: no checkpoint until the topology is active again

    def next_tuple(self) -> None:
        if self.done or self.in_flight is not None or time.monotonic() < self.next_at:
            return
        action, txid, progress = self.progress.emit(recovering=self.recovering)
        if action == PREPARE:
            self.prepared_at = time.monotonic()
        self._record(progress)
        self.in_flight = (action, txid)
        self.collector.emit([txid, action], stream=CHECKPOINT_STREAM, msg_id=[action, txid])

    def ack(self, msg_id: Any) -> None:
        action, txid = msg_id
        self.in_flight = None
        self._record(self.progress.acked(action, txid))
        # A recovery ends with an INITSTATE (Storm's): after a rollback or a retried commit every task goes
        # back to the last commit, and a task that restarted since gets its state. A prepared transaction
        # commits at once, a recovery goes on at once; the next transaction begins an interval later.
        self.recovering = self.recovering and action != INITSTATE
        self.next_at = time.monotonic() + self.interval if action == COMMIT and not self.recovering else 0.0
        if self.last_after is not None and action == COMMIT and not self.recovering:
            self.done = self.prepared_at >= self.last_after

    def fail(self, msg_id: Any) -> None:
        self.in_flight = None
        self.recovering = True
        self.next_at = time.monotonic() + self.interval  # a bolt that cannot act now is not asked again at once

    def wind_down(self, down: bool) -> None:
        """The topology is deactivated (a drain, a suspend) or active again. Deactivated, this spout runs one
        more checkpoint, prepared an interval from now, when what the other spouts emitted last has reached
        the stateful bolts; its commit acks what they hold, and it stops there. (Deactivated at once, it would
        leave those inputs held until their trees time out, and every drain would last the message timeout.)"""
        self.done = False
        self.last_after = time.monotonic() + self.interval if down else None
        if down:
            self.next_at = max(self.next_at, self.last_after)

    def close(self) -> None:
        self._state.close()

    def _record(self, progress: Progress) -> None:
        if progress != self.progress:
            self.progress = progress
            state = self._state
            state.put("progress", [progress.txid, progress.phase])
            state.prepare(state.txid + 1)
            state.commit(state.txid + 1)


class Barrier:
    """A bolt task's checkpoint barrier: a checkpoint counts once from each of its ``inputs`` tasks, then
    the task acts on it; copies of two attempts of one checkpoint (two trees) never mix. What an earlier
    attempt left behind is failed (its tree failed already, or is failed now so that the spout retries
    at once): a copy from a task that sends the same checkpoint
    again (a retried COMMIT), and every checkpoint still incomplete when another one completes (the
    spout has one in flight at a time, so those can no longer complete). Acked instead, their edges
    would complete a tree whose checkpoint this task never acted on."""

    def __init__(self, inputs: frozenset[int]) -> None:
        self.inputs = inputs
        self._arrived: dict[tuple[Any, Any], dict[int, Tuple]] = {}

    def arrived(self) -> frozenset[int]:
        """The input tasks that sent a checkpoint this task has not acted on yet."""
        return frozenset(task for left in self._arrived.values() for task in left)

    def arrive(self, tup: Tuple) -> tuple[list[Tuple] | None, list[Tuple]]:
        """Take a checkpoint tuple: (every copy of its checkpoint once all inputs sent it, else None; the
        tuples of earlier attempts to fail)."""
        key = (tup.values[0], tup.values[1], tup.root)  # an attempt's copies share its tree: its root
        arrived = self._arrived.setdefault(key, {})
        stale = arrived.get(tup.source_task)
        arrived[tup.source_task] = tup
        failed = [stale] if stale is not None else []
        if arrived.keys() < self.inputs:
            return None, failed
        del self._arrived[key]
        failed += [t for left in self._arrived.values() for t in left.values()]
        self._arrived.clear()
        return list(arrived.values()), failed
