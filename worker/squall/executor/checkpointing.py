"""The bolts of a topology with stateful bolts: each task takes the checkpoint stream through its barrier
and forwards it (Storm's ``CheckpointTupleForwarder``); a stateful task also runs the protocol on its state,
holds its inputs until the commit that holds their effect, and anchors its emits (Storm's
``StatefulBoltExecutor``). The protocol itself is :mod:`squall.state.checkpoint`'s.

Exactly once (``topology.state.guarantee: exactly_once``), checkpoints are aligned barriers, as Flink's: the
checkpoint spout sends them to the spouts, each spout records its positions and sends them on behind what
it emitted (:class:`CheckpointedSpout`), and a bolt task that has a checkpoint from some inputs holds
what those inputs send next until every input sent it, so that its state at the checkpoint holds the
effect of exactly the records before the spouts' positions. A PREPARE makes every task's state durable,
uncommitted; the checkpoint spout's COMMITTING record decides it; the COMMIT applies it. A ROLLBACK or an
INITSTATE rewinds the spouts to the last committed positions and every task's state to the last commit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from squall.api import Anchors
from squall.executor.bolt import BoltExecutor, BoltTask
from squall.executor.collectors import BoltCollector
from squall.state.checkpoint import COMMIT, INITSTATE, PREPARE, ROLLBACK, Barrier
from squall.state.kv import KeyValueState
from squall.state.stores import Store
from squall.system import CHECKPOINT_STREAM, DEFAULT_STREAM
from squall.tuples import FAILED, Tuple

#: The actions that take the topology back to its last commit (exactly once: the spouts rewind as well).
RESYNCS = (ROLLBACK, INITSTATE)


class AnchoringCollector:
    """A task's :class:`squall.api.OutputCollector` over its own collector, for a task whose inputs the engine
    acks (a stateful bolt's at the commit holding their effect, Storm's anchoring collector; a windowed
    bolt's when they leave their last window): an emit without anchors is anchored to :attr:`anchors`, what
    the task computes now (an input, a window's tuples), and ``ack`` leaves the tuple to the engine; the
    rest is the task's own collector's."""

    def __init__(self, out: BoltCollector) -> None:
        self._out = out
        self.anchors: Anchors = None

    def emit(self, values: Sequence[Any], *, anchors: Anchors = None, stream: str = DEFAULT_STREAM) -> list[int]:
        return self._out.emit(values, anchors=self.anchors if anchors is None else anchors, stream=stream)

    def emit_direct(self, task: int, values: Sequence[Any], *, anchors: Anchors = None,
                    stream: str = DEFAULT_STREAM) -> list[int]:
        return self._out.emit_direct(task, values, anchors=self.anchors if anchors is None else anchors,
                                     stream=stream)

    def ack(self, tup: Tuple) -> None:
        """Acked by the engine (a commit, a window's end), not now."""

    def fail(self, tup: Tuple) -> None:
        self._out.fail(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        self._out.reset_timeout(tup)

    def report_error(self, exc: BaseException) -> None:
        self._out.report_error(exc)

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> None:
        self._out.call_soon_threadsafe(fn)

    @property
    def paused(self) -> bool:
        return self._out.paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._out.paused = value


class NotInitialized(Exception):
    """A PREPARE reached a stateful task that has no state yet (it started after the last INITSTATE): the
    checkpoint fails, and the spout recovers with an INITSTATE, as Storm's does."""


#: ``submit(work, done)``: run ``work()`` off the scheduler thread, then ``done(error)`` on it (error: what
#: ``work`` raised, or None)
Submit = Callable[[Callable[[], None], Callable[[BaseException | None], None]], None]


def in_background(out: BoltCollector, name: str) -> Submit:
    """A :data:`Submit` that runs each work on a thread of its own and hands ``done`` back through the task's
    collector (a commit a second per task: a thread's start is nothing beside its write)."""
    def submit(work: Callable[[], None], done: Callable[[BaseException | None], None]) -> None:
        def run() -> None:
            error: BaseException | None = None
            try:
                work()
            except Exception as exc:  # noqa: BLE001 - the store's error fails the checkpoint, on the scheduler
                error = exc
            out.call_soon_threadsafe(lambda: done(error))
        threading.Thread(target=run, name=name, daemon=True).start()
    return submit


class CheckpointedTask:
    """One bolt task's side of the protocol. For a stateful task, ``open_store`` gives its store, ``run``
    executes an input as any bolt's is (what the bolt raises fails the input and is reported), and
    ``submit`` runs a commit's write off the scheduler thread, so that tuples keep flowing while the state
    is written (:func:`in_background`); without them, the task only forwards checkpoints. Exactly once,
    every task's inputs come through :meth:`take` (``run`` executes them), and its barrier aligns them."""

    def __init__(self, *, barrier: Barrier, collector: BoltCollector, bolt: Any,
                 open_store: Callable[[], Store] | None = None, run: Callable[[Tuple], None] | None = None,
                 submit: Submit | None = None, exactly_once: bool = False) -> None:
        self.barrier = barrier
        self.out = collector
        self.bolt = bolt
        self._open_store = open_store
        self._run = run
        self._submit = submit
        self.stateful = open_store is not None
        self.exactly_once = exactly_once
        self.writing = False  # a commit's write is under way: the checkpoints that come meanwhile wait for it
        self.deferred: list[Tuple] = []
        self.collector = AnchoringCollector(collector)  # what a stateful bolt is prepared with
        self.state: KeyValueState | None = None
        self.initialized = False  # init_state was called (exactly once, for every task: INITSTATE came)
        self.waiting: list[Tuple] = []  # inputs that came before init_state: executed right after it
        self.pending: list[Tuple] = []  # executed since the last PREPARE
        self.prepared: list[Tuple] = []  # executed before the last PREPARE: acked at its COMMIT
        # exactly once: the inputs that sent a checkpoint this task has not acted on yet, what they sent since
        # (held, in order, until it acts), and whether an input failed since the topology last went back
        self.blocked: frozenset[int] = frozenset()
        self.held: list[Tuple] = []
        self.dirty = False

    def open(self) -> None:
        """At prepare: the task's state as last committed (Storm opens it there too, so that a COMMIT retried
        for a task that restarted reaches its store)."""
        assert self._open_store is not None
        if self.state is None:
            self.state = KeyValueState(self._open_store())

    def close(self) -> None:
        if self.state is not None:
            self.state.close()

    def checkpoint(self, tup: Tuple) -> None:
        """A tuple of the checkpoint stream: once every input task sent it, act on it and forward it."""
        if self.exactly_once:
            if tup.values[1] in RESYNCS:  # what its sender sent before it is from before the topology went back
                self._drop_held(tup.source_task)
            self.blocked |= {tup.source_task}
        self._arrive(tup)

    def _arrive(self, tup: Tuple) -> None:
        if self.writing:
            self.deferred.append(tup)
            return
        out = self.out
        complete, failed = self.barrier.arrive(tup)
        for stale in failed:
            out.fail(stale)
        if complete is None:
            return
        txid, action = tup.values
        if self.exactly_once and action == PREPARE and (self.dirty or not self.initialized):
            for t in complete:  # an input failed, or this task lost what came before: the topology goes back
                out.fail(t)
            self._release()
            return
        if self.stateful:
            try:
                write = self._act(action, txid)
            except NotInitialized:
                for t in complete:
                    out.fail(t)
                return
            except Exception as exc:  # noqa: BLE001 - a hook or the store raised: the checkpoint fails
                out.report_error(exc)
                for t in complete:
                    out.fail(t)
                self._release()
                return
            if write is not None:
                self.writing = True
                assert self._submit is not None
                if action == PREPARE:  # exactly once: made durable; forwarded now, behind nothing it executes next
                    self._forward(txid, action, complete, ack=False)
                    self._submit(write, lambda error: self._prepared(complete, error))
                else:
                    self._submit(write, lambda error: self._written(txid, complete, error))
                self._release()
                return
        elif self.exactly_once and action in RESYNCS:
            self.dirty = False
            self.initialized = self.initialized or action == INITSTATE
        self._forward(txid, action, complete)
        self._release()

    def _forward(self, txid: int, action: str, complete: list[Tuple], *, ack: bool = True) -> None:
        out = self.out
        out.emit([txid, action], anchors=complete, stream=CHECKPOINT_STREAM)
        if ack:
            for t in complete:
                out.ack(t)

    def _written(self, txid: int, complete: list[Tuple], error: BaseException | None) -> None:
        """On the scheduler thread: the commit's write of ``txid`` is done (or raised: the checkpoint fails, and
        the spout commits it again). Then the checkpoints that came meanwhile."""
        assert self.state is not None
        if error is not None:
            self.out.report_error(error)
            for t in complete:
                self.out.fail(t)
        else:
            self.state.committed(txid)
            for tup in self.prepared:
                self.out.ack(tup)
            self.prepared = []
            self._forward(txid, COMMIT, complete)
        self._written_all()

    def _prepared(self, complete: list[Tuple], error: BaseException | None) -> None:
        """On the scheduler thread, exactly once: the PREPARE's write is done; its tuples' edges complete here
        (or fail, if the write raised: the checkpoint rolls back)."""
        if error is not None:
            self.out.report_error(error)
        for t in complete:
            (self.out.fail if error is not None else self.out.ack)(t)
        self._written_all()

    def _written_all(self) -> None:
        self.writing = False
        deferred, self.deferred = self.deferred, []
        for tup in deferred:
            self._arrive(tup)

    def _act(self, action: str, txid: int) -> Callable[[], None] | None:
        """Act on a checkpoint; a COMMIT (exactly once, a PREPARE too) returns its write, for the caller to run
        off the scheduler thread."""
        bolt, state = self.bolt, self.state
        assert state is not None
        if action == INITSTATE:
            if self.initialized:  # a task elsewhere restarted: every task goes back to the last commit
                self._rollback()
                return None
            if self.exactly_once:  # a COMMIT retried since this task opened its store may have committed more
                state.rollback()
            bolt.init_state(state)
            self.initialized = True
            waiting, self.waiting = self.waiting, []
            for tup in waiting:
                self.execute(tup)
        elif action == PREPARE:
            if not self.initialized:
                raise NotInitialized
            bolt.pre_prepare(txid)
            state.prepare(txid)
            if self.exactly_once:
                return state.prepare_write(txid)
            self.prepared += self.pending
            self.pending = []
        elif action == COMMIT:
            if self.initialized:
                bolt.pre_commit(txid)
            if self.exactly_once:
                return state.promote_write(txid)
            write = state.commit_write(txid)
            if write is not None:
                return write
            for tup in self.prepared:  # nothing to write (committed already): the inputs it holds are in it
                self.out.ack(tup)
            self.prepared = []
        elif action == ROLLBACK:
            self._rollback()
        return None

    def _rollback(self) -> None:
        """Back to the last commit: what the inputs held since did to the state is gone, so they fail and replay."""
        assert self.state is not None
        if self.initialized:
            self.bolt.pre_rollback()
        self.state.rollback()
        self.dirty = False
        for tup in self.prepared + self.pending:
            self.out.fail(tup)
        self.prepared, self.pending = [], []

    def execute(self, tup: Tuple) -> None:
        """A data tuple of a stateful task: held until its state is initialized, then executed, and held
        until the commit that holds its effect (unless the bolt failed it)."""
        if not self.initialized:
            self.waiting.append(tup)
            return
        self._anchored_run(tup)
        if not tup.done:
            self.pending.append(tup)

    def _anchored_run(self, tup: Tuple) -> None:
        """Execute ``tup``, the emits of a stateful bolt's ``execute`` anchored to it."""
        assert self._run is not None
        self.collector.anchors = tup
        try:
            self._run(tup)
        finally:
            self.collector.anchors = None

    def take(self, tup: Tuple) -> None:
        """Exactly once: a data tuple. Held while its sender is past a checkpoint this task has not acted on;
        dropped before the task's first INITSTATE (it was sent before the spouts rewound to where that takes
        the state); else executed, a stateful task's acked at once (its checkpoint, not its ack, commits the
        offsets), and a failed one keeps any checkpoint from committing until the topology goes back."""
        if tup.source_task in self.blocked:
            self.held.append(tup)
            return
        out = self.out
        if not self.initialized:
            out.ack(tup)
            return
        self._anchored_run(tup)
        if tup.done == FAILED:
            self.dirty = True
        elif self.stateful and not tup.done:
            out.ack(tup)

    def _drop_held(self, source: int) -> None:
        """Exactly once: ``source`` sent a ROLLBACK or an INITSTATE; what it sent before is void (acked, done)."""
        if self.held:
            kept = []
            for tup in self.held:
                if tup.source_task == source:
                    self.out.ack(tup)
                else:
                    kept.append(tup)
            self.held = kept

    def _release(self) -> None:
        """Exactly once: a checkpoint was acted on; take in what its inputs sent since, unless still blocked."""
        if not self.exactly_once:
            return
        self.blocked = self.barrier.arrived() | {t.source_task for t in self.deferred}
        held, self.held = self.held, []
        for tup in held:
            self.take(tup)


class CheckpointedSpout:
    """Exactly once: a spout task's side of the protocol. A PREPARE records the spout's positions (durably,
    uncommitted) and goes on behind what the spout emitted; a COMMIT commits them (and tells the source);
    a ROLLBACK or an INITSTATE rewinds the spout to the last committed ones. A spout that started since
    the last INITSTATE, or whose tuples failed since the topology last went back, fails the PREPARE."""

    def __init__(self, *, spout: Any, collector: BoltCollector, open_store: Callable[[], Store]) -> None:
        self.spout = spout
        self.out = collector
        self._open_store = open_store
        self.state: KeyValueState | None = None
        self.initialized = False

    def checkpoint(self, tup: Tuple) -> None:
        txid, action = tup.values
        out = self.out
        try:
            acted = self._act(action, txid)
        except Exception as exc:  # noqa: BLE001 - the spout or the store raised: the checkpoint fails
            out.report_error(exc)
            acted = False
        if not acted:
            out.fail(tup)
            return
        out.emit([txid, action], anchors=tup, stream=CHECKPOINT_STREAM)
        out.ack(tup)

    def _act(self, action: str, txid: int) -> bool:
        if self.state is None:
            self.state = KeyValueState(self._open_store())
        state, spout = self.state, self.spout
        if action == PREPARE:
            positions = spout.snapshot() if self.initialized else None
            if positions is None:
                return False
            for name, offset in positions.items():
                state.put(name, offset)
            state.prepare(txid)
            state.prepare_write(txid)()
        elif action == COMMIT:
            state.promote_write(txid)()
            state.committed(txid)
            if self.initialized:
                spout.commit_positions(dict(state.items()))
            else:  # what it committed was prepared by the task before this one: it is in the store, not here
                state.rollback()
        else:
            state.rollback()
            spout.rewind(dict(state.items()))
            self.initialized = True
        return True

    def close(self) -> None:
        if self.state is not None:
            self.state.close()


class CheckpointingBoltExecutor(BoltExecutor):
    """A bolt executor of a topology with stateful bolts: checkpoint tuples go to each task's
    :class:`CheckpointedTask`, and so do a stateful task's inputs (exactly once, every task's)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checkpointed: dict[int, CheckpointedTask] = {}

    def _execute(self, task: BoltTask, tup: Tuple) -> None:
        checkpointed = self.checkpointed[task.task_id]
        if tup.source_stream == CHECKPOINT_STREAM:
            checkpointed.checkpoint(tup)
        elif checkpointed.exactly_once:
            checkpointed.take(tup)
        elif checkpointed.stateful:
            checkpointed.execute(tup)
        else:
            BoltExecutor._execute(self, task, tup)

    def stop(self) -> None:
        super().stop()
        for checkpointed in self.checkpointed.values():
            checkpointed.close()
