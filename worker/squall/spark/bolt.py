"""``SparkBolt``: input tuples gathered into micro-batches, each processed as a Spark DataFrame.

A batch is acked only when its Spark job succeeded and its result rows were emitted, each row
anchored to every input of the batch (with ``anchor_by``, to the inputs of its key); a job that
raises fails every input, so the spouts replay them. Jobs run on the task's own background threads
(``spark.jobs.in.flight`` of them, so Spark runs that many jobs of the task at once), because the
executor thread is shared by every executor of the worker process; everything that touches the
collector is handed back to the executor thread with ``call_soon_threadsafe``, and batches are
decided there in the order they were cut.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, ClassVar

from squall.api import Bolt, OutputCollector, TopologyContext
from squall.conf_keys import refuse_misspelled
from squall.errors import ConfigError, TopologyError
from squall.spark.alarm import Alarm
from squall.spark.session import active_session, get_session
from squall.tuples import Fields, Tuple
from squall.values import check_values

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

Row = tuple[list[Any], list[Tuple]]  # a result row's values, and the inputs it is anchored to

BATCH_SIZE = "spark.batch.size"
MAX_WAIT_MS = "spark.batch.max.wait.ms"
JOB_TIMEOUT_MS = "spark.job.timeout.ms"
JOBS_IN_FLIGHT = "spark.jobs.in.flight"
TARGET_MS = "spark.batch.target.ms"
DEFAULT_BATCH_SIZE = 1000
DEFAULT_JOBS_IN_FLIGHT = 2
DEFAULT_MAX_WAIT_MS = 1000.0
DEFAULT_JOB_TIMEOUTS = 10  # message timeouts: the default longest job
JOB_TIME_WEIGHT = 0.3  # of the latest job in the running estimate of a job's time (spark.batch.target.ms)


@dataclass(frozen=True)
class Batching:
    """How a SparkBolt task cuts its input into micro-batches."""

    size: int  # a batch is submitted as soon as it holds this many tuples
    max_wait: float  # seconds: ... or when its first tuple has waited this long
    job_timeout: float  # seconds a job may run before it is cancelled and its batch failed
    in_flight: int = DEFAULT_JOBS_IN_FLIGHT  # batches submitted and not yet decided, at most
    target: float | None = None  # seconds: ... or when its first tuple has waited this less a job's time

    @classmethod
    def from_conf(cls, conf: dict[str, Any], *, component: str, message_timeout: float) -> Batching:
        """Read ``spark.batch.size``, ``spark.batch.max.wait.ms``, ``spark.batch.target.ms``,
        ``spark.jobs.in.flight`` and ``spark.job.timeout.ms``; raise :class:`ConfigError` naming the fix."""
        size = conf.get(BATCH_SIZE, DEFAULT_BATCH_SIZE)
        if type(size) is not int or size < 1:
            raise ConfigError(f"bolt {component!r}: {BATCH_SIZE}={size!r} must be a whole number >= 1 "
                              "(the most tuples in one micro-batch)")
        in_flight = conf.get(JOBS_IN_FLIGHT, DEFAULT_JOBS_IN_FLIGHT)
        if type(in_flight) is not int or in_flight < 1:
            raise ConfigError(f"bolt {component!r}: {JOBS_IN_FLIGHT}={in_flight!r} must be a whole number >= 1 "
                              "(the most Spark jobs of one task running at once)")
        target = conf.get(TARGET_MS)
        if target is not None and (type(target) not in (int, float) or not 0 < target < math.inf):
            raise ConfigError(f"bolt {component!r}: {TARGET_MS}={target!r} must be a finite number of "
                              "milliseconds > 0 (the latency a batch's first tuple aims at, its job included)")
        target = None if target is None else target / 1000
        timeout_ms = message_timeout * 1000
        job = conf.get(JOB_TIMEOUT_MS, DEFAULT_JOB_TIMEOUTS * timeout_ms)
        if type(job) not in (int, float) or not 0 < job < math.inf:
            raise ConfigError(f"bolt {component!r}: {JOB_TIMEOUT_MS}={job!r} must be a finite number of "
                              "milliseconds > 0 (the longest a job may run before its batch fails)")
        if MAX_WAIT_MS not in conf:
            # The default must fit any valid message timeout, however short.
            return cls(size, min(DEFAULT_MAX_WAIT_MS, timeout_ms / 2) / 1000, job / 1000, in_flight, target)
        wait = conf[MAX_WAIT_MS]
        if type(wait) not in (int, float) or not wait > 0:
            raise ConfigError(f"bolt {component!r}: {MAX_WAIT_MS}={wait!r} must be a number of milliseconds > 0")
        if wait >= timeout_ms:
            raise ConfigError(f"bolt {component!r}: {MAX_WAIT_MS}={wait!r} is not below the message timeout "
                              f"({message_timeout:g} s = {timeout_ms:g} ms), so a batch's first tuple could time "
                              f"out before its batch even starts; lower {MAX_WAIT_MS} or raise "
                              "messageTimeoutSeconds")
        return cls(size, wait / 1000, job / 1000, in_flight, target)


@dataclass
class Batch:
    """A micro-batch handed to the job thread; its inputs are acked or failed when the job is over."""

    inputs: list[Tuple]
    fields: Fields
    reset_due: float  # when the inputs' timeouts are next reset: half a timeout after the first came, then every half
    deadline: float  # when the job has run too long: cancelled, and the batch failed
    job_group: str  # its Spark job group: a cancel reaches its own job, never the next batch's
    abandoned: bool = False  # failed at its deadline: never started if it has not been yet
    done: bool = False  # its job is over: decided once every batch cut before it is
    rows: list[Row] | None = None  # its job's result rows, each with its anchors, or None if it raised
    error: BaseException | None = None


class SparkBolt(Bolt):
    """A bolt whose work is a PySpark DataFrame function over micro-batches of its input.

    Subclass it, declare ``outputs`` and implement :meth:`process`::

        from pyspark.sql import functions as F
        from squall.spark import SparkBolt

        class PageViews(SparkBolt):
            schema = "user STRING, page STRING"   # optional: a DDL string; default: inferred
            outputs = ["page", "views"]

            def process(self, df):
                return df.groupBy("page").agg(F.count("*").alias("views"))

    The DataFrame's columns are the input stream's declared fields. Each result row is emitted as
    one tuple (the columns named as the declared output fields, in any order), anchored to every
    input of the batch (with ``anchor_by``, to the inputs of its key); then every input is acked.
    If ``process`` or the Spark job raises, every input of the batch is failed and the error
    reported. Config keys (the bolt's ``conf``):
    ``spark.batch.size`` (default 1000), ``spark.batch.max.wait.ms`` (default 1000, and at most
    half the message timeout; a value at or above the message timeout is refused),
    ``spark.batch.target.ms`` (default none: a batch is also cut once its first tuple has waited
    this less the recent jobs' time, but at least half of it), ``spark.jobs.in.flight`` (default
    2: Spark jobs of the task running at once; their batches are decided in the order they were cut) and
    ``spark.job.timeout.ms`` (default ten message timeouts: a job still running then is cancelled,
    and its batch failed).

    ``process`` runs on the task's job thread, not the executor thread: it must not use
    ``self.collector``. All inputs must carry the same fields (subscribe to streams that declare
    identical fields); a tuple with other fields is failed and reported.
    """

    #: Optional Spark DDL schema of the input DataFrame, e.g. ``"user STRING, ts BIGINT"``: its
    #: column names must be the input fields, in order. Without it Spark infers the types from each
    #: batch, which fails on a column that is None in every row of a batch.
    schema: ClassVar[str | None] = None

    #: Optional: a field, or a tuple of fields, both input and output fields, that the result is grouped by:
    #: each row is then anchored only to the inputs whose values of it equal the row's (a row with values no
    #: input has, or that cannot be hashed, to every input). Default None: every row to every input.
    anchor_by: ClassVar[str | tuple[str, ...] | None] = None

    def process(self, df: DataFrame) -> DataFrame | None:
        """Return the result DataFrame of one micro-batch (or None to emit nothing, e.g. after a write)."""
        raise NotImplementedError(f"{type(self).__name__} must implement process(df)")

    @classmethod
    def check_config(cls, component: str, conf: dict[str, Any], *, message_timeout_seconds: int) -> None:
        """Refuse misspelled or bad batching keys, more than one output stream, an ``anchor_by`` that names no
        output field, or a worker without PySpark."""
        refuse_misspelled(component, conf, (BATCH_SIZE, MAX_WAIT_MS, JOB_TIMEOUT_MS, JOBS_IN_FLIGHT, TARGET_MS))
        Batching.from_conf(conf, component=component, message_timeout=message_timeout_seconds)
        _anchor_key(cls, component, _output_stream(cls, component)[1])
        if importlib.util.find_spec("pyspark") is None:
            raise ConfigError(f"bolt {component!r} is a SparkBolt, and PySpark is not installed in the "
                              "worker's environment: pip install pyspark")

    # -- on the executor thread -------------------------------------------------------------

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: OutputCollector) -> None:
        super().prepare(conf, context, collector)
        component = context.component_id
        self.batching = Batching.from_conf(conf, component=component, message_timeout=context.message_timeout_seconds)
        self._stream, self._out_fields = _output_stream(type(self), component)
        self._key = _anchor_key(type(self), component, self._out_fields)
        # The message timeout counts from a tree's emit or its last reset; resetting every half timeout,
        # counted from when the batch's first tuple came, keeps its trees alive however long it is held.
        self._reset_every = context.message_timeout_seconds / 2
        self._fields: Fields | None = None  # the input fields, from the first tuple
        self._input: _InputSchema | None = None  # ``schema`` parsed, on the job thread's first batch
        self._buffer: list[Tuple] = []  # the next batch, gathering
        self._buffer_since = 0.0  # when the gathering batch's first tuple came
        self._buffer_reset_due = 0.0  # when the gathering tuples' timeouts are next reset
        self._job_time: float | None = None  # seconds: a running estimate of a job's time (target only)
        self._in_flight: deque[Batch] = deque()  # submitted and not yet decided, in the order they were cut
        self._job_group = f"squall:{context.topology_name}:{component}:{context.task_id}"
        # Every task of the bolt in one FAIR pool: jobs of other bolts get their share of the executors.
        self._pool = f"squall:{context.topology_name}:{component}"
        self._batches = 0  # numbers each batch's job group
        # The batches handed to the job threads and not yet taken. A batch failed at its deadline is dropped
        # from here when the next one is handed over (it may be there because every job thread is stuck): a
        # queue that kept them all ran every one once a thread was free. It holds at most in_flight batches.
        self._handed_over: deque[Batch] = deque()
        self._closed = False
        self._handed = threading.Condition(threading.Lock())
        name = f"squall-spark-{component}-{context.task_id}"
        self._alarm = Alarm(name=f"{name}-alarm", post=collector.call_soon_threadsafe, fire=self._on_alarm)
        # Daemons: a job stuck in Spark must not keep the worker process from exiting.
        for i in range(self.batching.in_flight):
            threading.Thread(target=self._job_loop, args=(i == 0,), name=f"{name}-{i}", daemon=True).start()

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick:  # a bolt keeps its own time; ticks are untracked
            self.collector.ack(tup)
            return
        fields = self._fields
        if fields is None:
            self._fields = tup.fields
        elif tup.fields is not fields and tup.fields != fields:
            self.collector.fail(tup)
            self.collector.report_error(TopologyError(
                f"bolt {self.context.component_id!r} is a SparkBolt: all its inputs must declare the same "
                f"fields, but {tup.source_component}/{tup.source_stream} declares ({', '.join(tup.fields)}) "
                f"and an earlier input ({', '.join(fields)}); give them the same fields or use one SparkBolt each"))
            return
        buffer = self._buffer
        buffer.append(tup)
        n = len(buffer)
        if n == 1:
            now = time.monotonic()
            self._buffer_since = now
            self._buffer_reset_due = now + self._reset_every
            self._advance(now)
        elif n >= self.batching.size:
            self._advance(time.monotonic())

    def cleanup(self) -> None:
        """Stop the threads and cancel the running jobs; their inputs time out and are replayed."""
        self._alarm.close()
        with self._handed:
            self._closed = True
            self._handed.notify_all()
        for batch in self._in_flight:
            _cancel(batch.job_group)

    def _wait(self) -> float:
        """How long the gathering batch's first tuple waits before the batch is cut (unless it fills first):
        the max wait, or with a target the target less a job's recent time, so that the first tuple's
        latency, wait and job, stays near the target; but at least half the target. Under load the batch
        is cut with all that came in that time, up to ``spark.batch.size``, so batches grow with the load;
        idle, they are cut small, early.

        Half the target at least: the input comes a tuple at a time, and the spouts send more only as
        batches are acked. With no wait at all (Structured Streaming's trigger, which finds its source's
        data there at once), the job slot freed by an ack took the first tuple that came after it, alone:
        batches of one, and a fifth of the clicks/s of fixed batches (bench/HISTORY.md)."""
        target, job = self.batching.target, self._job_time
        if target is None:
            return self.batching.max_wait
        return min(self.batching.max_wait, max(target / 2, target - (job or 0.0)))

    def _advance(self, now: float) -> None:
        """Submit the batches that are due while fewer than ``in_flight`` are undecided, and keep ``paused``
        and the alarm in step with the state."""
        buffer, size, in_flight = self._buffer, self.batching.size, self._in_flight
        most = self.batching.in_flight
        while buffer and len(in_flight) < most and (len(buffer) >= size or now >= self._buffer_since + self._wait()):
            self._batches += 1
            # No reset at hand-over (a RESET per input for the ackers): the batch's resets stay due half a
            # timeout after its first tuple came, which a batch decided sooner, the usual case, never reaches.
            # The tuples left gathering keep that due too: theirs is no earlier.
            batch = Batch(buffer[:size], self._fields, reset_due=self._buffer_reset_due,
                          deadline=now + self.batching.job_timeout, job_group=f"{self._job_group}:{self._batches}")
            self._buffer = buffer = buffer[size:]
            self._buffer_since = now
            in_flight.append(batch)
            with self._handed:
                handed = self._handed_over
                if handed and any(b.abandoned for b in handed):
                    self._handed_over = handed = deque(b for b in handed if not b.abandoned)
                handed.append(batch)
                self._handed.notify()
        # Backpressure: with every job thread busy and the next batch full, take no more input.
        self.collector.paused = len(in_flight) >= most and len(buffer) >= size
        if in_flight:
            self._alarm.set(min(in_flight[0].deadline, min(b.reset_due for b in in_flight)))
        if buffer:
            self._alarm.set(self._buffer_reset_due)
            if len(in_flight) < most:
                self._alarm.set(self._buffer_since + self._wait())

    def _on_alarm(self) -> None:
        now = time.monotonic()
        in_flight = self._in_flight
        # The batch cut first has the first deadline: those past theirs are at the front.
        while in_flight and now >= in_flight[0].deadline:
            # A job that never ends (executors that never come, a hung process) must not hold its inputs,
            # and the bolt, for good: its batch failed and replayed, its job cancelled, the bolt going on.
            batch = in_flight.popleft()
            batch.abandoned = True
            self._decide(batch, None, TimeoutError(
                f"bolt {self.context.component_id!r}: a Spark job of {len(batch.inputs)} tuples ran "
                f"{self.batching.job_timeout:g} s ({JOB_TIMEOUT_MS}) without ending: cancelled, and its tuples "
                f"failed; raise {JOB_TIMEOUT_MS} if its jobs take that long"))
            _cancel(batch.job_group)
        self._decide_done()
        reset = self.collector.reset_timeout
        for batch in in_flight:
            if now >= batch.reset_due:
                for tup in batch.inputs:
                    reset(tup)
                batch.reset_due = now + self._reset_every
        if self._buffer and now >= self._buffer_reset_due:  # waiting for a job slot, or gathering slowly
            for tup in self._buffer:
                reset(tup)
            self._buffer_reset_due = now + self._reset_every
        self._advance(now)

    def _finish(self, batch: Batch, rows: list[Row] | None, error: BaseException | None,
                took: float) -> None:
        """The job of ``batch`` is over (``took`` seconds): decide it, and every batch behind it that waited
        for it, in the order they were cut."""
        if batch.abandoned:  # it ran past its deadline, and was failed then
            return
        batch.rows, batch.error, batch.done = rows, error, True
        if self.batching.target is not None:
            job = self._job_time
            self._job_time = took if job is None else job + JOB_TIME_WEIGHT * (took - job)
        self._decide_done()
        self._advance(time.monotonic())

    def _decide_done(self) -> None:
        in_flight = self._in_flight
        while in_flight and in_flight[0].done:
            batch = in_flight.popleft()
            self._decide(batch, batch.rows, batch.error)

    def _decide(self, batch: Batch, rows: list[Row] | None, error: BaseException | None) -> None:
        """Emit the batch's rows, each anchored to its inputs, and ack every input; or fail them all."""
        collector = self.collector
        try:
            if error is None:
                stream, emit = self._stream, collector.emit
                for values, anchors in rows or ():
                    emit(values, anchors=anchors, stream=stream)
                for tup in batch.inputs:
                    collector.ack(tup)
            else:
                for tup in batch.inputs:
                    collector.fail(tup)
                collector.report_error(error)
        except Exception as exc:  # noqa: BLE001 - an emit was refused: the batch must still be decided
            for tup in batch.inputs:
                if not tup.done:  # those acked before the emit that raised stay acked
                    collector.fail(tup)
            collector.report_error(exc)

    # -- on the job thread ------------------------------------------------------------------

    def _job_loop(self, first: bool) -> None:
        post = self.collector.call_soon_threadsafe
        try:
            if first:  # one of them starts Spark now, not when the first batch is due (and reports once)
                get_session()
        except Exception as exc:  # noqa: BLE001 - each batch retries, and fails if Spark is still down
            log.warning("bolt %r task %d: Spark did not start: %s", self.context.component_id,
                        self.context.task_id, exc)
            post(partial(self.collector.report_error, exc))
        while True:
            with self._handed:
                while not self._handed_over and not self._closed:
                    self._handed.wait()
                if self._closed:
                    return
                batch = self._handed_over.popleft()
            if batch.abandoned:  # failed at its deadline while every job thread was busy
                continue
            began = time.monotonic()
            try:
                rows, error = self._run(batch), None
            except BaseException as exc:  # noqa: BLE001 - even SystemExit: the batch must be decided
                rows, error = None, exc
            post(partial(self._finish, batch, rows, error, time.monotonic() - began))

    def _run(self, batch: Batch) -> list[Row]:
        """One Spark job: the batch as a DataFrame, ``process``, and the result rows as checked tuple values,
        each with the inputs it is anchored to."""
        from pyspark.sql import DataFrame

        spark = get_session()
        ctx = self.context
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", self._pool)
        spark.sparkContext.setJobGroup(batch.job_group, f"squall {ctx.topology_name}/{ctx.component_id} task "
                                       f"{ctx.task_id}: {len(batch.inputs)} tuples", interruptOnCancel=True)
        out = self.process(self._dataframe(spark, batch))
        if out is None:
            return []
        if not isinstance(out, DataFrame):
            raise TypeError(f"bolt {ctx.component_id!r}: process() returned {type(out).__name__}; "
                            "return a DataFrame, or None to emit nothing")
        fields = self._out_fields
        if self._stream is None or sorted(out.columns) != sorted(fields):
            declared = f"declares outputs ({', '.join(fields)})" if self._stream else "declares no outputs"
            raise TopologyError(f"bolt {ctx.component_id!r}: process() returned a DataFrame with columns "
                                f"({', '.join(out.columns)}), but the bolt {declared}; select or rename its "
                                "columns to match, or return None to emit nothing")
        rows = [[_plain(v) for v in row] for row in out.select(*fields).collect()]
        inputs = batch.inputs
        anchored = _Anchoring(inputs) if self._key is None else _Anchoring.by_key(
            inputs, rows, self._key, batch.fields, fields, component=ctx.component_id)
        result = []
        for values in rows:
            anchors = anchored.anchors(values)
            # Checked here, so a bad value fails the whole batch before any of its rows is emitted.
            check_values(values, fields=fields, component=ctx.component_id, stream=self._stream,
                         max_bytes=ctx.max_value_bytes, max_frame=ctx.max_frame_bytes,
                         anchors=anchored.trees(anchors))
            result.append((values, anchors))
        return result

    def _dataframe(self, spark: SparkSession, batch: Batch) -> DataFrame:
        """The batch as a DataFrame: as Arrow columns when ``schema`` types them all and every value fits
        its column's type as Spark's own check would have it; else as rows, which Spark infers and checks."""
        columns = list(batch.fields.names)
        if self.schema is None:
            return spark.createDataFrame([tup.values for tup in batch.inputs], schema=columns)
        if self._input is None:
            self._input = _InputSchema.parse(self.schema, component=self.context.component_id, fields=columns)
        table = self._input.arrow_table(batch.inputs, slices=spark.sparkContext.defaultParallelism)
        if table is None:
            return spark.createDataFrame([tup.values for tup in batch.inputs], schema=self._input.struct)
        return spark.createDataFrame(table, schema=self._input.struct)


@dataclass(frozen=True)
class _InputSchema:
    """The bolt's ``schema`` as Spark and Arrow types, and the Python types Spark's row check accepts per column
    (None for a column only rows can carry: arrays, maps, structs, decimals, dates...)."""

    struct: StructType
    arrow: pa.Schema | None  # None without pyarrow (an image that lacks it): rows, as before
    accepts: tuple[frozenset[type] | None, ...]

    @classmethod
    def parse(cls, ddl: str, *, component: str, fields: list[str]) -> _InputSchema:
        from pyspark.sql.types import StructType

        struct = StructType.fromDDL(ddl)
        if struct.names != fields:
            raise TopologyError(f"bolt {component!r}: schema {ddl!r} names the columns "
                                f"({', '.join(struct.names)}), but the input fields are ({', '.join(fields)}); "
                                "name the schema's columns after the fields, in order")
        accepts = []
        for field in struct.fields:
            flat = _FLAT.get(field.dataType.typeName())
            accepts.append(None if flat is None else flat | {type(None)} if field.nullable else flat)
        if importlib.util.find_spec("pyarrow") is None:
            return cls(struct, None, tuple(accepts))
        from pyspark.sql.pandas.types import to_arrow_schema

        return cls(struct, to_arrow_schema(struct, timezone="UTC"), tuple(accepts))

    def arrow_table(self, inputs: list[Tuple], *, slices: int) -> pa.Table | None:
        """The inputs as an Arrow table in ``slices`` record batches (Spark's partitions), or None where a
        column cannot go as Arrow: a value Spark's row check refuses (refused again there, with Spark's message),
        or a column type Arrow would convert differently."""
        if self.arrow is None or None in self.accepts:
            return None
        import pyarrow as pa

        # Column by column in C loops (zip, map, set): the job thread holds the interpreter lock that the
        # executor thread needs for as short as it can.
        columns = list(zip(*map(_VALUES, inputs), strict=True))
        arrays = []
        for column, accepts, field in zip(columns, self.accepts, self.arrow, strict=True):
            if not set(map(type, column)) <= accepts:
                return None
            try:
                arrays.append(pa.array(column, type=field.type))
            except (pa.ArrowException, OverflowError, TypeError, ValueError):
                return None  # out of the column's range, say: the rows' check says so
        # One record batch per partition (Spark makes a partition of each): as many as the default
        # parallelism, so the first stage of the job uses every core, as the rows' parallelize did.
        table = pa.Table.from_arrays(arrays, schema=self.arrow)
        return pa.Table.from_batches(table.to_batches(max_chunksize=-(-len(inputs) // max(1, slices))))


class _Anchoring:
    """Which inputs of a batch each result row is anchored to, and how many trees they are in: every input,
    or with ``anchor_by`` those that share the row's key."""

    def __init__(self, inputs: list[Tuple], groups: dict[Any, list[Tuple]] | None = None,
                 key: Callable[[list[Any]], Any] | None = None) -> None:
        self._inputs, self._groups, self._key = inputs, groups, key
        self._trees: dict[int, int] = {}  # per anchors list's id: its distinct trees, counted once

    @classmethod
    def by_key(cls, inputs: list[Tuple], rows: list[list[Any]], key: tuple[str, ...], fields: Fields,
               out_fields: tuple[str, ...], *, component: str) -> _Anchoring:
        """Inputs grouped by their values of ``key``; every input for all rows if a key value cannot be hashed
        (a list, a dict)."""
        of_input = itemgetter(*_key_indexes(key, fields.names, component, "input fields"))
        of_row = itemgetter(*_key_indexes(key, out_fields, component, "output fields"))
        groups: dict[Any, list[Tuple]] = {}
        try:
            for tup in inputs:
                groups.setdefault(of_input(tup.values), []).append(tup)
            for values in rows:
                hash(of_row(values))
        except TypeError:  # a list or a dict: unhashable
            return cls(inputs)
        return cls(inputs, groups, of_row)

    def anchors(self, values: list[Any]) -> list[Tuple]:
        if self._key is None:
            return self._inputs
        return self._groups.get(self._key(values), self._inputs)

    def trees(self, anchors: list[Tuple]) -> int:
        n = self._trees.get(id(anchors))
        if n is None:
            n = self._trees[id(anchors)] = len({root for tup in anchors for root in tup.roots()})
        return n


def _anchor_key(cls: type[SparkBolt], component: str, outputs: tuple[str, ...]) -> tuple[str, ...] | None:
    """``anchor_by`` as a tuple of field names, each an output field; None without it."""
    key = cls.anchor_by
    if key is None:
        return None
    names = (key,) if isinstance(key, str) else key
    if not isinstance(names, tuple) or not names or not all(isinstance(n, str) for n in names):
        raise TopologyError(f"bolt {component!r}: {cls.__name__}.anchor_by={key!r} must be a field name or a "
                            "tuple of field names (fields of both its input and its output)")
    _key_indexes(names, outputs, component, "output fields")
    return names


def _key_indexes(key: tuple[str, ...], fields: Sequence[str], component: str, what: str) -> list[int]:
    missing = [name for name in key if name not in fields]
    if missing:
        raise TopologyError(f"bolt {component!r}: anchor_by names ({', '.join(missing)}), not among its {what} "
                            f"({', '.join(fields)}); anchor by fields its input and its result rows both have")
    return [list(fields).index(name) for name in key]


# Spark's own row check (``_make_type_verifier``) takes exactly these Python types for these column types.
_FLAT: dict[str, frozenset[type]] = {
    "string": frozenset({str}), "binary": frozenset({bytes, bytearray}), "boolean": frozenset({bool}),
    "long": frozenset({int}), "integer": frozenset({int}), "short": frozenset({int}), "byte": frozenset({int}),
    "double": frozenset({float}), "float": frozenset({float}),
}
_VALUES = attrgetter("values")


def _cancel(job_group: str) -> None:
    """Cancel the Spark jobs of ``job_group``, on a thread of its own: the call goes to the JVM, which may
    not answer (a long pause) or be gone, and must hold neither the executor thread, which every executor
    of the process shares, nor the decision on the batch, taken before."""
    def cancel() -> None:
        session = active_session()
        try:
            if session is not None:
                session.sparkContext.cancelJobGroup(job_group)
        except Exception as exc:  # noqa: BLE001 - py4j raises several types for a JVM that is gone
            log.warning("cancelling the Spark jobs of %s failed: %s", job_group, exc)

    threading.Thread(target=cancel, name=f"cancel-{job_group}", daemon=True).start()


def _output_stream(cls: type[SparkBolt], component: str) -> tuple[str | None, tuple[str, ...]]:
    """The one stream a SparkBolt emits its rows on (None if it declares none) and its fields."""
    streams = cls.declared_streams()
    if not streams:
        return None, ()
    if len(streams) > 1:
        raise TopologyError(f"bolt {component!r}: a SparkBolt emits its result rows on one stream, but "
                            f"{cls.__name__}.outputs declares {len(streams)} ({', '.join(streams)}); declare one")
    ((stream, declared),) = streams.items()
    if declared.direct:
        raise TopologyError(f"bolt {component!r}: a SparkBolt cannot emit on the direct stream {stream!r}; "
                            "declare it without direct(...)")
    return stream, declared.fields


_SCALARS = frozenset((str, int, float, bool, bytes, type(None)))


def _plain(value: Any) -> Any:
    """A Spark result value as a tuple value: structs (Rows) become dicts, binary becomes bytes."""
    if type(value) in _SCALARS:
        return value
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, bytearray):
        return bytes(value)
    return value
