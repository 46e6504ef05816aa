"""Run and check topologies in this process, for your tests and ours: :class:`LocalCluster`, and
:class:`TestingSpout` / :class:`TestingSink`, a replaying source and a recording sink (Bytewax's
``TestingSource`` and ``TestingSink``, in Storm's terms); :class:`DurableSink` records on disk what
it acked, for tests that kill processes::

    >>> from squall import TopologyBuilder
    >>> class Numbers(TestingSpout):
    ...     outputs = ["n"]
    ...     def items(self):
    ...         return ([n] for n in range(100))
    >>> builder = TopologyBuilder("numbers")
    >>> builder.set_spout("numbers", Numbers)
    >>> _ = builder.set_bolt("sink", TestingSink, parallelism=2).shuffle_grouping("numbers")
    >>> with LocalCluster(builder.build()) as cluster:
    ...     result = cluster.run(trees=100, seconds=30)
    ...     received = [t for sink in cluster.instances("sink") for t in sink.received]
    >>> result.reason, sorted(received) == [[n] for n in range(100)]
    ('trees', True)
"""

from __future__ import annotations

import shutil
import socket
import sqlite3
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from squall.api import Bolt, Spout
from squall.executor.hdr import HdrHistogram
from squall.executor.reporting import ReportedError
from squall.executor.runtime import Runtime
from squall.executor.stats import Histogram
from squall.metrics.collector import recorded_latency
from squall.topology.plan import Plan
from squall.topology.spec import TopologySpec
from squall.tuples import Tuple

ITEMS_KEY = "testing.items"  # a TestingSpout's tuples, when given in the config (a YAML topology)


class TestingSpout(Spout):
    """A reliable spout: emits each item of :meth:`items` once with a message id (0, 1, ...), keeps it
    until it is acked, and emits it again when its tree fails or times out (at least once, as a real
    source); a subclass with ``replay = False`` emits each item once, whatever its verdict.

    It records every verdict in ``acked`` and ``failed`` (message ids in call order); ``pending``
    holds the values of the trees in flight. :meth:`ready` paces new items.
    """

    __test__ = False  # not a pytest test class, whatever its name
    outputs: ClassVar = ["value"]
    replay: ClassVar[bool] = True  # False: a failed item is only recorded in ``failed``, not emitted again

    def items(self) -> Iterable[Sequence[Any]]:
        """The tuples to emit, each a list of values (default: the config's ``testing.items``)."""
        return self.conf.get(ITEMS_KEY, [])

    def ready(self) -> bool:
        """Whether a new item may be emitted now (replays always may); override to pace the source."""
        return True

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self._source = iter(self.items())
        self._emitted = 0
        self.pending: dict[int, list[Any]] = {}
        self.replays: deque[int] = deque()
        self.acked: list[int] = []
        self.failed: list[int] = []
        self.exhausted = False

    def next_tuple(self) -> None:
        if self.replays:
            msg_id = self.replays.popleft()
        elif self.exhausted or not self.ready():
            return
        else:
            values = next(self._source, None)
            if values is None:
                self.exhausted = True
                return
            msg_id = self._emitted
            self._emitted += 1
            self.pending[msg_id] = list(values)
        self.collector.emit(self.pending[msg_id], msg_id=msg_id)

    def ack(self, msg_id: int) -> None:
        del self.pending[msg_id]
        self.acked.append(msg_id)

    def fail(self, msg_id: int) -> None:
        self.failed.append(msg_id)
        if self.replay:
            self.replays.append(msg_id)
        else:
            del self.pending[msg_id]

    @property
    def emitted(self) -> int:
        """How many distinct items were emitted so far."""
        return self._emitted

    def done(self) -> bool:
        """Every item emitted and acked (or, with ``replay = False``, acked or failed)."""
        return self.exhausted and not self.pending


class TestingSink(Bolt):
    """Acks every input and keeps its values in ``received`` (one list per task instance)."""

    __test__ = False
    outputs: ClassVar = []

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.received: list[list[Any]] = []

    def execute(self, tup: Tuple) -> None:
        self.received.append(list(tup.values))
        self.collector.ack(tup)


class DurableSink(Bolt):
    """A sink that writes a row for each input to its own SQLite file and acks an input only once
    its row is on disk, so whatever it acked survives its process being killed with SIGKILL.

    Inputs are buffered and written in one transaction (``synchronous=FULL``: synced when the
    commit returns) once ``sink.batch`` of them (default 200) arrived, or on a tick: give the bolt a
    ``tickFrequencySeconds`` so a partial batch is written too. Each task writes
    ``<file_prefix>-<task id>.db`` in ``sink.dir`` (required). A subclass gives its table's ``schema``
    (created if missing), its ``insert`` statement and the :meth:`row` of an input.
    """

    outputs: ClassVar = []
    file_prefix: ClassVar[str] = "sink"
    schema: ClassVar[str]
    insert: ClassVar[str]

    def row(self, tup: Tuple) -> Sequence[Any]:
        """The values of ``insert``'s parameters for one input."""
        raise NotImplementedError

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        directory = Path(conf["sink.dir"])
        directory.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(directory / f"{self.file_prefix}-{context.task_id}.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(self.schema)
        self.batch = int(conf.get("sink.batch", 200))
        self.buffer: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick:
            self.flush()
            self.collector.ack(tup)
            return
        self.buffer.append(tup)
        if len(self.buffer) >= self.batch:
            self.flush()

    def flush(self) -> None:
        """Write the buffered inputs in one transaction, then ack them."""
        if not self.buffer:
            return
        self.db.execute("BEGIN")
        self.db.executemany(self.insert, [self.row(t) for t in self.buffer])
        self.db.execute("COMMIT")  # on disk when this returns: only now may the inputs be acked
        for tup in self.buffer:
            self.collector.ack(tup)
        self.buffer = []

    def cleanup(self) -> None:
        self.flush()
        self.db.close()

    @classmethod
    def query(cls, directory: str | Path, sql: str) -> list[tuple[Any, ...]]:
        """The rows ``sql`` selects from each task's file in ``directory``, concatenated in file order
        (a file whose table is not created yet gives none)."""
        rows: list[tuple[Any, ...]] = []
        for path in sorted(Path(directory).glob(f"{cls.file_prefix}-*.db")):
            db = sqlite3.connect(path)
            try:
                rows += db.execute(sql).fetchall()
            except sqlite3.OperationalError:  # the sink created the file but not its table yet
                pass
            finally:
                db.close()
        return rows


@dataclass(frozen=True)
class Counts:
    """Totals over a component's tasks. Spouts: trees ``acked``/``failed``/``timed_out``, and
    ``pending`` (emitted, not yet decided); bolts: input tuples ``executed``/``acked``/``failed``.
    ``emitted`` counts emit calls."""

    emitted: int
    transferred: int
    acked: int
    failed: int
    timed_out: int
    executed: int
    errors: int
    pending: int


@dataclass(frozen=True)
class RunResult:
    reason: str  # "trees", "until" or "seconds"
    seconds: float


class LocalCluster:
    """A topology running on this thread, in this process (Storm's ``LocalCluster``)."""

    def __init__(self, spec: TopologySpec, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.spec = spec
        self.plan = Plan(spec)
        self.runtime = Runtime(self.plan, executors=self.plan.executors, acker_tasks=self.plan.acker_tasks,
                               clock=clock)
        self.runtime.start(active=not spec.suspended)  # a suspended topology's spouts wait for activate()
        self._closed = False

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def run(self, *, trees: int | None = None, until: Callable[[LocalCluster], bool] | None = None,
            seconds: float | None = None) -> RunResult:
        """Run until ``trees`` more spout trees were acked, ``until(cluster)`` holds, or ``seconds`` pass.

        At least one stop condition is required.
        """
        if trees is None and until is None and seconds is None:
            raise ValueError("give run() a stop condition: trees=, until= or seconds=")
        start = time.monotonic()
        target = None if trees is None else self.trees_acked() + trees
        reason = ""

        def stop() -> bool:
            nonlocal reason
            if target is not None and self.trees_acked() >= target:
                reason = "trees"
            elif until is not None and until(self):
                reason = "until"
            elif seconds is not None and time.monotonic() - start >= seconds:
                reason = "seconds"
            return bool(reason)

        self.runtime.run(stop)
        return RunResult(reason, time.monotonic() - start)

    def run_until(self, condition: Callable[[], bool], *, seconds: float = 20.0) -> None:
        """Run until ``condition()`` holds, for a test that waits on an event rather than a sleep; raise
        :class:`TimeoutError` if ``seconds`` pass first, so that the test fails rather than hangs::

            >>> from squall import TopologyBuilder
            >>> builder = TopologyBuilder("three")
            >>> builder.set_spout("numbers", TestingSpout, config={"testing.items": [[1], [2], [3]]})
            >>> _ = builder.set_bolt("sink", TestingSink).shuffle_grouping("numbers")
            >>> with LocalCluster(builder.build()) as cluster:
            ...     numbers, sink = cluster.instance("numbers"), cluster.instance("sink")
            ...     cluster.run_until(numbers.done)
            >>> sorted(sink.received), sorted(numbers.acked)
            ([[1], [2], [3]], [0, 1, 2])
        """
        result = self.run(until=lambda _: condition(), seconds=seconds)
        if not condition():
            raise TimeoutError(f"condition not reached within {seconds} s (run stopped on {result.reason!r})")

    def trees_acked(self) -> int:
        return sum(self.counts(s.name).acked for s in self.spec.spouts)

    def counts(self, component: str) -> Counts:
        stats = self.runtime.component_stats(component)
        if not stats and component not in self.plan.component_tasks:
            raise KeyError(f"no component {component!r}")
        return Counts(
            emitted=sum(sum(s.emitted.values()) for s in stats),
            transferred=sum(sum(s.transferred.values()) for s in stats),
            acked=sum(sum(s.acked.values()) for s in stats),
            failed=sum(sum(s.failed.values()) for s in stats),
            timed_out=sum(sum(s.timed_out.values()) for s in stats),
            executed=sum(sum(s.executed.values()) for s in stats),
            errors=sum(s.errors for s in stats),
            pending=sum(t.pending for ex in self.runtime.spouts if ex.component == component
                        for t in ex.tasks.values()),
        )

    def complete_latency(self, component: str) -> Histogram:
        total = Histogram()
        for s in self.runtime.component_stats(component):
            for h in s.complete_latency.values():
                total.merge(h)
        return total

    def recorded_latency(self, component: str) -> HdrHistogram:
        """Every complete latency ``component``'s tasks recorded (percentiles within 0.8 %)."""
        return recorded_latency(self.runtime, [component])

    def errors(self, component: str | None = None) -> list[ReportedError]:
        """The most recent recorded errors (all components, or one)."""
        return self.runtime.errors.recent(component)

    def pending(self) -> int:
        """Spout trees emitted and not yet acked, failed or timed out."""
        return self.runtime.pending_trees()

    def instances(self, component: str) -> list:
        """The spout or bolt objects of a component, one per task (for assertions in tests)."""
        out = []
        for ex in self.runtime.executors:
            if ex.component == component:
                out += [getattr(t, "spout", None) or t.bolt for t in ex.tasks.values()]
        return out

    def instance(self, component: str) -> Any:
        """The spout or bolt object of a component that has one task (see :meth:`run_until`)."""
        instances = self.instances(component)
        if not instances:
            raise KeyError(f"no component {component!r}")
        if len(instances) > 1:
            raise ValueError(f"component {component!r} has {len(instances)} tasks: use instances()")
        return instances[0]

    def deactivate(self) -> None:
        self.runtime.set_active(False)

    def activate(self) -> None:
        self.runtime.set_active(True)

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self.runtime.set_active(False)
            self.runtime.close()


class RedisServer:
    """A real Redis (``redis-server`` from PATH) on a free port of loopback, for tests of the Redis state
    store (``topology.state.provider: redis``); ``url`` is what ``topology.state.redis.url`` takes::

        with RedisServer(tmp_path) as redis:
            spec = builder.build(config={"topology.state.provider": "redis", "topology.state.redis.url": redis.url})

    It keeps nothing on disk (no snapshots, no append-only file) and stops when the block ends.
    """

    def __init__(self, directory: str | Path, *, start_within: float = 20.0) -> None:
        self.directory = Path(directory)
        self.start_within = start_within
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RedisServer:
        server = shutil.which("redis-server")
        if server is None:
            raise FileNotFoundError("redis-server is not on PATH: install Redis (Debian: apt-get install "
                                    "redis-server; `make test` does it)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.directory.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.directory),
                                       "--save", "", "--appendonly", "no"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_within
        while True:  # a new process has no event to wait on: ask until it answers
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or self._proc.poll() is not None:
                self.__exit__()
                raise RuntimeError(f"redis-server did not start on port {port} within {self.start_within:g} s")
            time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{port}/0"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
            self._proc = None
