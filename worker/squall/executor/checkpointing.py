"""The bolts of a topology with stateful bolts: each task takes the checkpoint stream through its barrier
and forwards it (Storm's ``CheckpointTupleForwarder``); a stateful task also runs the protocol on its state,
holds its inputs until the commit that holds their effect, and anchors its emits (Storm's
``StatefulBoltExecutor``). The protocol itself is :mod:`squall.state.checkpoint`'s.
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
from squall.tuples import Tuple


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
    is written (:func:`in_background`); without them, the task only forwards checkpoints."""

    def __init__(self, *, barrier: Barrier, collector: BoltCollector, bolt: Any,
                 open_store: Callable[[], Store] | None = None, run: Callable[[Tuple], None] | None = None,
                 submit: Submit | None = None) -> None:
        self.barrier = barrier
        self.out = collector
        self.bolt = bolt
        self._open_store = open_store
        self._run = run
        self._submit = submit
        self.stateful = open_store is not None
        self.writing = False  # a commit's write is under way: the checkpoints that come meanwhile wait for it
        self.deferred: list[Tuple] = []
        self.collector = AnchoringCollector(collector)  # what a stateful bolt is prepared with
        self.state: KeyValueState | None = None
        self.initialized = False  # init_state was called
        self.waiting: list[Tuple] = []  # inputs that came before init_state: executed right after it
        self.pending: list[Tuple] = []  # executed since the last PREPARE
        self.prepared: list[Tuple] = []  # executed before the last PREPARE: acked at its COMMIT


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
                return
            if write is not None:
                self.writing = True
                assert self._submit is not None
                self._submit(write, lambda error: self._written(txid, complete, error))
                return
        self._forward(txid, action, complete)

    def _forward(self, txid: int, action: str, complete: list[Tuple]) -> None:
        out = self.out
        out.emit([txid, action], anchors=complete, stream=CHECKPOINT_STREAM)
        for t in complete:
            out.ack(t)

    def _written(self, txid: int, complete: list[Tuple], error: BaseException | None) -> None:
        """On the scheduler thread: the commit's write of ``txid`` is done (or raised: the checkpoint fails, and
        the spout commits it again). Then the checkpoints that came meanwhile."""
        assert self.state is not None
        self.writing = False
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
        deferred, self.deferred = self.deferred, []
        for tup in deferred:
            self.checkpoint(tup)

    def _act(self, action: str, txid: int) -> Callable[[], None] | None:
        """Act on a checkpoint; a COMMIT returns its write, for the caller to run off the scheduler thread."""
        bolt, state = self.bolt, self.state
        assert state is not None
        if action == INITSTATE:
            if self.initialized:  # a task elsewhere restarted: every task goes back to the last commit
                self._rollback()
                return
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
            self.prepared += self.pending
            self.pending = []
        elif action == COMMIT:
            if self.initialized:
                bolt.pre_commit(txid)
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
        for tup in self.prepared + self.pending:
            self.out.fail(tup)
        self.prepared, self.pending = [], []

    def execute(self, tup: Tuple) -> None:
        """A data tuple of a stateful task: held until its state is initialized, then executed, and held
        until the commit that holds its effect (unless the bolt failed it)."""
        if not self.initialized:
            self.waiting.append(tup)
            return
        assert self._run is not None
        self.collector.anchors = tup
        try:
            self._run(tup)
        finally:
            self.collector.anchors = None
        if not tup.done:
            self.pending.append(tup)


class CheckpointingBoltExecutor(BoltExecutor):
    """A bolt executor of a topology with stateful bolts: checkpoint tuples go to each task's
    :class:`CheckpointedTask`, and so do a stateful task's inputs."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.checkpointed: dict[int, CheckpointedTask] = {}

    def _execute(self, task: BoltTask, tup: Tuple) -> None:
        checkpointed = self.checkpointed[task.task_id]
        if tup.source_stream == CHECKPOINT_STREAM:
            checkpointed.checkpoint(tup)
        elif checkpointed.stateful:
            checkpointed.execute(tup)
        else:
            BoltExecutor._execute(self, task, tup)

    def stop(self) -> None:
        super().stop()
        for checkpointed in self.checkpointed.values():
            checkpointed.close()

