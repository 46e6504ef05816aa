"""Windows against a reference computation: for random streams of timestamps with disorder and lateness, and
windows by count or duration, sliding or tumbling, on event or processing time, each window a task computes
holds exactly the tuples the reference says, each tuple is acked exactly once and only after its last window,
late tuples go to the late stream, and the tuples of a window whose execute raised are failed and leave."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from squall.executor.windowing import WindowedTask
from squall.topology.window import WindowSpec
from squall.tuples import ACKED, FAILED, Fields, Tuple

FIELDS = Fields(["id", "ts"])
STREAMS = [("a", "default"), ("b", "default")]


@dataclass
class Log:
    """What the task did, in order: ("window", ids, new, expired, start, end), ("ack", id), ("fail", id),
    ("late", id)."""

    events: list = field(default_factory=list)


class Out:
    """The task's own collector, recording (an ack or fail of a decided tuple changes nothing, as the engine's)."""

    def __init__(self, log: Log) -> None:
        self.log = log

    def emit(self, values, *, anchors=None, stream="default"):
        self.log.events.append(("late", values[0]) if stream == "late" else ("emit", values))
        return []

    def ack(self, tup):
        if not tup.done:
            tup.done = ACKED
            self.log.events.append(("ack", tup["id"]))

    def fail(self, tup):
        if tup.done != FAILED:
            tup.done = FAILED
            self.log.events.append(("fail", tup["id"]))

    def reset_timeout(self, tup):
        pass

    def report_error(self, exc):
        pass


class Recorder:
    def __init__(self, log: Log, raising: set[int]) -> None:
        self.log, self.raising, self.n = log, raising, 0

    def execute(self, window):
        self.log.events.append(("window", [t["id"] for t in window.get()], [t["id"] for t in window.get_new()],
                                [t["id"] for t in window.get_expired()], window.start_timestamp,
                                window.end_timestamp))
        self.n += 1
        if self.n - 1 in self.raising:
            raise RuntimeError("boom")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def extent(kind: str, amount: int) -> dict:
    return {"count": amount} if kind == "count" else {"seconds": amount / 1000}


@st.composite
def scenarios(draw, *, event_time: bool):
    length_kind = draw(st.sampled_from(["count", "ms"]))
    slide_kind = draw(st.sampled_from(["count", "ms"]))
    length = draw(st.integers(1, 12) if length_kind == "count" else st.integers(1, 60))
    same = length_kind == slide_kind
    other = st.integers(1, 12) if slide_kind == "count" else st.integers(1, 60)
    slide = draw(st.integers(1, length) if same else other)
    window = {"length": extent(length_kind, length), "slidingInterval": extent(slide_kind, slide)}
    lag = 0
    if event_time:
        lag = draw(st.integers(0, 15))
        window |= {"timestampField": "ts", "lagSeconds": lag / 1000, "lateTupleStream": "late"}
    streams = draw(st.integers(1, 2))
    # events: a tuple of a stream, its timestamp a step ahead of or (disorder) behind its stream's latest; or a tick
    events = draw(st.lists(st.one_of(
        st.tuples(st.just("tuple"), st.integers(0, streams - 1), st.integers(-25, 12)),
        st.tuples(st.just("tick"), st.just(0), st.integers(0, 30))), min_size=5, max_size=120))
    return WindowSpec.model_validate(window), streams, events, (length_kind, length, slide_kind, slide, lag)


def run(window: WindowSpec, streams: int, events: list, *, event_time: bool, raising: frozenset[int] = frozenset()):
    """Feed the task; returns its log, each tuple's timestamp and the watermark reached (the reference's inputs)."""
    log = Log()
    clock = Clock()
    recorder = Recorder(log, set(raising))
    task = WindowedTask(window=window, bolt=recorder, out=Out(log), inputs=STREAMS[:streams], clock=clock,
                        report=lambda exc: None)
    latest = [500] * streams
    stamps: dict[int, int] = {}
    for i, (kind, stream, step) in enumerate(events):
        if kind == "tick":
            clock.now += step / 1000
            task.tick()
            continue
        if event_time:
            ts = max(latest[stream] + step, 0)
            latest[stream] = max(latest[stream], ts)
        else:
            clock.now += max(step, 0) / 1000
            ts = task.now_ms()
        stamps[i] = ts
        component, name = STREAMS[stream]
        task.add(Tuple([i, ts], FIELDS, component, name, 1, {i + 2: 1}, 1))
    clock.now += 0.001
    task.tick()
    watermark = task.event.watermark if task.event is not None else task.now_ms() - 1
    return log, stamps, watermark


def late_reference(events: list, streams: int, stamps: dict[int, int], lag: int) -> set[int]:
    """Replays Storm's watermark: per stream the latest timestamp, at each tick the least of them less the lag
    (once every stream sent one); a tuple at or behind it is late."""
    latest: dict[int, int] = {}
    watermark = None
    late = set()
    for i, (kind, stream, _) in enumerate(events):
        if kind == "tick":
            if len(latest) == streams:
                candidate = min(latest.values()) - lag
                watermark = candidate if watermark is None else max(watermark, candidate)
            continue
        ts = stamps[i]
        latest[stream] = max(latest.get(stream, ts), ts)
        if watermark is not None and ts <= watermark:
            late.add(i)
    return late


def reference(params, stamps: dict[int, int], late: set[int], watermark: int | None, *, event_time: bool):
    """The tuples released (in timestamp order, then arrival order) and the windows the task must compute, in
    order: (ids, start, end)."""
    length_kind, length, slide_kind, slide, _ = params
    released = sorted((ts, i) for i, ts in stamps.items()
                      if i not in late and (not event_time or (watermark is not None and ts <= watermark)))
    windows = []
    if slide_kind == "count":
        for k in range(slide, len(released) + 1, slide):
            upto = released[:k]
            end = upto[-1][0]
            content = upto[-length:] if length_kind == "count" else [x for x in upto if x[0] > end - length]
            windows.append(([i for _, i in content], None if length_kind == "count" else end - length, end))
    elif released and watermark is not None:
        end = -(-released[0][0] // slide) * slide
        while end <= watermark:
            upto = [x for x in released if x[0] <= end]
            content = upto[-length:] if length_kind == "count" else [x for x in upto if x[0] > end - length]
            if content:
                windows.append(([i for _, i in content], None if length_kind == "count" else end - length, end))
            end += slide
    return released, windows


def check(params, events: list, streams: int, log: Log, stamps: dict[int, int], watermark, *,
          event_time: bool) -> None:
    late = {e[1] for e in log.events if e[0] == "late"}
    assert late == (late_reference(events, streams, stamps, params[4]) if event_time else set())
    released, windows = reference(params, stamps, late, watermark, event_time=event_time)
    fired = [(n, e) for n, e in enumerate(log.events) if e[0] == "window"]
    assert [(w[1], w[4], w[5]) for _, w in fired] == windows  # each window holds what the reference says
    ack_at: dict[int, int] = {}
    for n, e in enumerate(log.events):
        if e[0] == "ack":
            assert e[1] not in ack_at  # acked once
            ack_at[e[1]] = n
    assert not [e for e in log.events if e[0] == "fail"]
    assert late <= ack_at.keys()  # a late tuple goes to the late stream, and is acked
    last_window: dict[int, int] = {}
    previous: set[int] = set()
    previous_at = -1
    for n, w in fired:
        for i in w[1]:
            last_window[i] = n
        assert w[2] == [i for i in w[1] if i not in previous]  # new: not in the previous window
        # expired: acked since the previous window
        assert w[3] == [e[1] for e in log.events[previous_at + 1:n] if e[0] == "ack" and e[1] not in late]
        previous, previous_at = set(w[1]), n
    length_kind, length, slide_kind, slide, _ = params
    for i, at in ack_at.items():
        if i not in late:
            # acked after its last window, never before one; with a length and interval of different kinds
            # (the last N tuples every S ms, or the last L ms every S tuples) a tuple may fall between windows
            assert at > last_window[i] if i in last_window else length_kind != slide_kind
    if length_kind == slide_kind:  # every tuple whose last window came is acked, and no other
        if slide_kind == "count":
            done = len(released) // slide * slide
            due = {i for p, (_, i) in enumerate(released) if (p + length) // slide * slide <= done}
        else:
            due = {i for ts, i in released if watermark is not None and (ts + length - 1) // slide * slide <= watermark}
        assert ack_at.keys() - late == due


@settings(max_examples=300, deadline=None)
@given(scenarios(event_time=True))
def test_event_time_windows_match_the_reference(scenario):
    window, streams, events, params = scenario
    log, stamps, watermark = run(window, streams, events, event_time=True)
    check(params, events, streams, log, stamps, watermark, event_time=True)


@settings(max_examples=200, deadline=None)
@given(scenarios(event_time=False))
def test_processing_time_windows_match_the_reference(scenario):
    window, streams, events, params = scenario
    log, stamps, watermark = run(window, streams, events, event_time=False)
    check(params, events, streams, log, stamps, watermark, event_time=False)


@settings(max_examples=200, deadline=None)
@given(scenarios(event_time=True), st.frozensets(st.integers(0, 10), max_size=4))
def test_a_window_whose_execute_raised_fails_its_tuples_and_they_leave(scenario, raising):
    window, streams, events, _ = scenario
    log, _, _ = run(window, streams, events, event_time=True, raising=raising)
    verdicts: dict[int, str] = {}
    failed_at: dict[int, int] = {}
    for n, e in enumerate(log.events):
        if e[0] in ("ack", "fail"):
            assert e[1] not in verdicts  # one verdict per tuple
            verdicts[e[1]] = e[0]
            if e[0] == "fail":
                failed_at[e[1]] = n
    fired = [(n, e) for n, e in enumerate(log.events) if e[0] == "window"]
    for k, (n, w) in enumerate(fired):
        for i in w[1]:
            assert i not in failed_at or failed_at[i] > n  # a failed tuple is in no later window
        if k in raising:
            assert all(verdicts.get(i) == "fail" for i in w[1])


class State(dict):
    """What a durable window needs of a KeyValueState."""

    def put(self, key, value):
        self[key] = value


@settings(max_examples=200, deadline=None)
@given(scenarios(event_time=True), st.floats(0, 1))
def test_a_durable_window_restored_from_its_snapshot_computes_the_same_windows(scenario, where):
    """Snapshot a task's windows at any point (what a checkpoint writes), restore them into a new task (what a
    restarted one reads), feed it the rest: the windows after the cut are the uninterrupted task's."""
    window, streams, events, _ = scenario
    whole, _, _ = run(window, streams, events, event_time=True)
    cut = int(where * len(events))

    log = Log()
    clock = Clock()

    def task():
        return WindowedTask(window=window, bolt=Recorder(log, set()), out=Out(log), inputs=STREAMS[:streams],
                            clock=clock, report=lambda exc: None, task=1, durable=True, fields=lambda c, s: FIELDS)
    current = task()
    current.init_state(State())
    latest = [500] * streams
    for i, (kind, stream, step) in enumerate(events):
        if i == cut:
            state = State()
            current.state = state
            current.pre_prepare(0)
            current = task()
            current.init_state(state)
        if kind == "tick":
            current.tick()
            continue
        ts = max(latest[stream] + step, 0)
        latest[stream] = max(latest[stream], ts)
        component, name = STREAMS[stream]
        current.add(Tuple([i, ts], FIELDS, component, name, 1, {i + 2: 1}, 1))
    current.tick()
    windows = [e[1:4] + e[4:] for e in whole.events if e[0] == "window"]
    assert [e[1:] for e in log.events if e[0] == "window"] == windows
