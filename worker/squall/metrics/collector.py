"""Exposes the runtime's counters as Prometheus metrics.

The hot path only bumps plain integers (``TaskStats``); this collector turns them into metric
families when Prometheus scrapes, so metrics cost nothing between scrapes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from squall.contract import ROLES, process_count
from squall.executor.hdr import HdrHistogram
from squall.executor.reporting import ReportedError
from squall.executor.stats import LATENCY_BUCKETS, Histogram
from squall.spouts.spout import OffsetSpout

if TYPE_CHECKING:
    from squall.executor.runtime import Runtime
    from squall.transport import Transport

TASK = ["topology", "component", "task", "stream"]
ERROR_TYPE_CHARS = 100  # an error's type in a label, cut (a qualified name can be long)
EXECUTED = ["topology", "component", "task", "stream", "source_component"]


def _buckets(h: Histogram) -> list[tuple[str, float]]:
    counts, out, total = list(h.counts), [], 0
    for bound, n in zip([*LATENCY_BUCKETS, float("inf")], counts, strict=True):
        total += n
        out.append(("+Inf" if bound == float("inf") else repr(bound), total))
    return out


def recorded_latency(runtime: Runtime, components: list[str] | None = None) -> HdrHistogram:
    """Every recorded complete latency of ``components`` (default: all spouts) in one histogram."""
    total = HdrHistogram()
    for comp in runtime.plan.spout_names if components is None else components:
        for stats in runtime.component_stats(comp):
            for h in list(stats.complete_recorded.values()):
                total.merge(h)
    return total


class RuntimeCollector:
    """A prometheus-client collector over one process's :class:`~squall.executor.runtime.Runtime`."""

    def __init__(self, runtime: Runtime, *, role: str, index: int, transport: Transport | None = None,
                 state: Callable[[], str] | None = None, states: tuple[str, ...] = ()) -> None:
        """``state``: what the process is doing now, one of ``states`` (``squall_process_state``)."""
        self.runtime = runtime
        self.transport = transport
        self.state, self.states = state, states
        self.role, self.index = role, index
        self.topology = runtime.plan.spec.name
        self.fingerprint = runtime.plan.spec.fingerprint()

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families are built at scrape time

    def collect(self) -> Iterator[Metric]:
        yield from self._tasks()
        yield from self._queues()
        yield from self._transport()
        yield from self._offsets()
        yield from self._last_errors()
        info = GaugeMetricFamily("squall_process_info", "This process's role in the topology, and the plan it runs",
                                 labels=["topology", "role", "index", "plan"])
        info.add_metric([self.topology, self.role, str(self.index), self.fingerprint], 1)
        spec = self.runtime.plan.spec
        expected = GaugeMetricFamily("squall_expected_processes", "Worker and acker processes the topology "
                                     "runs (its spec's workers and ackers)", labels=["topology", "role"])
        for role in ROLES:
            expected.add_metric([self.topology, role], process_count(spec, role))
        yield from (info, expected)
        if self.state is not None:
            state = GaugeMetricFamily("squall_process_state", "1 for the state this process is in, 0 for the "
                                      "others (docs/metrics.md)",
                                      labels=["topology", "state"])
            now = self.state()
            for name in self.states:
                state.add_metric([self.topology, name], 1 if name == now else 0)
            yield state

    def _tasks(self) -> Iterator[Metric]:
        topo, rt = self.topology, self.runtime
        emitted = CounterMetricFamily("squall_emitted", "Emit calls", labels=TASK)
        transferred = CounterMetricFamily("squall_transferred", "Tuples sent to tasks", labels=TASK)
        acked = CounterMetricFamily("squall_acked", "Spouts: tuple trees acked; bolts: input tuples acked",
                                    labels=TASK)
        failed = CounterMetricFamily("squall_failed", "Spouts: trees failed; bolts: input tuples failed",
                                     labels=[*TASK, "reason"])
        executed = CounterMetricFamily("squall_executed", "Input tuples executed by bolts", labels=EXECUTED)
        errors = CounterMetricFamily("squall_errors", "Errors reported by a task",
                                     labels=["topology", "component", "task"])
        complete = HistogramMetricFamily("squall_complete_latency_seconds",
                                         "Spout emit to tree completion", labels=TASK)
        execute = HistogramMetricFamily("squall_execute_latency_seconds", "Time in Bolt.execute", labels=EXECUTED)
        process = HistogramMetricFamily("squall_process_latency_seconds", "Execute start to ack", labels=EXECUTED)
        pending = GaugeMetricFamily("squall_pending_trees", "Tuple trees emitted and not yet decided",
                                    labels=["topology", "component", "task"])
        max_pending = GaugeMetricFamily("squall_max_spout_pending", "maxSpoutPending per spout task (0: no limit)",
                                        labels=["topology", "component", "task"])
        expired = CounterMetricFamily("squall_acker_expired_trees", "Trees an acker forgot undecided, untouched "
                                      "for three message timeouts (their spouts timed them out already)",
                                      labels=["topology", "component", "task"])
        plan = rt.plan
        for task, stats in list(rt.stats.items()):
            comp, t = plan.task_component[task], str(task)
            # Known label sets start at 0, so rates and alerts work before the first failure.
            spout = comp in plan.spout_names
            if spout:
                streams = list(plan.outputs[comp])
                inputs: list[tuple[str, str]] = []
            else:
                inputs = [(i.component, i.stream) for i in plan.spec.component(comp).inputs]
                streams = [stream for _, stream in inputs]
            # a declared stream starts at 0 if anything can come of it: a sink's ``outputs = []`` declares
            # a default stream with no fields and no subscribers, whose series would stay 0 for good
            declared = [s for s, out in plan.outputs[comp].items() if out.fields or (comp, s) in plan.subscribers]
            for stream in {*stats.emitted, *declared}:
                emitted.add_metric([topo, comp, t, stream], stats.emitted.get(stream, 0))
                transferred.add_metric([topo, comp, t, stream], stats.transferred.get(stream, 0))
            for stream in {*stats.acked, *stats.failed, *stats.timed_out, *streams}:
                acked.add_metric([topo, comp, t, stream], stats.acked.get(stream, 0))
                failed.add_metric([topo, comp, t, stream, "explicit"], stats.failed.get(stream, 0))
                if spout:  # a bolt's input never times out: its series would be 0 for good
                    failed.add_metric([topo, comp, t, stream, "timeout"], stats.timed_out.get(stream, 0))
            for src, stream in {*stats.executed, *inputs}:
                executed.add_metric([topo, comp, t, stream, src], stats.executed.get((src, stream), 0))
            for stream, h in list(stats.complete_latency.items()):
                complete.add_metric([topo, comp, t, stream], _buckets(h), h.sum)
            for (src, stream), h in list(stats.execute_latency.items()):
                execute.add_metric([topo, comp, t, stream, src], _buckets(h), h.sum)
            for (src, stream), h in list(stats.process_latency.items()):
                process.add_metric([topo, comp, t, stream, src], _buckets(h), h.sum)
            errors.add_metric([topo, comp, t], stats.errors)
        limit = rt.plan.spec.max_spout_pending or 0
        for spout in rt.spouts:
            for task in list(spout.tasks.values()):
                pending.add_metric([topo, spout.component, str(task.task_id)], task.pending)
                max_pending.add_metric([topo, spout.component, str(task.task_id)], limit)
        for acker in rt.ackers:
            pending.add_metric([topo, acker.component, str(acker.task_ids[0])], acker.acker.pending)
            expired.add_metric([topo, acker.component, str(acker.task_ids[0])], acker.acker.expired)
        yield from (emitted, transferred, acked, failed, executed, errors, complete, execute, process,
                    pending, max_pending, expired)

    def _last_errors(self) -> Iterator[Metric]:
        # The label holds the error's type, never its message: free text would make a new series for every
        # distinct message (ids, values in it), and put user data in the metrics store. /errors has it.
        last = GaugeMetricFamily("squall_last_error_timestamp_seconds", "When a component last reported an "
                                 "error in this process (Unix time), its type in the label (Storm UI's last "
                                 "error; the message: GET /errors)", labels=["topology", "component", "task", "error"])
        newest: dict[str, ReportedError] = {}
        for error in self.runtime.errors.recent():  # oldest first
            newest[error.component] = error
        for comp, error in newest.items():
            last.add_metric([self.topology, comp, str(error.task), error.error.split(":", 1)[0][:ERROR_TYPE_CHARS]],
                            error.time)
        yield last

    def _offsets(self) -> Iterator[Metric]:
        labels = ["topology", "component", "task", "topic", "partition"]
        committed = GaugeMetricFamily("squall_spout_committed_offset", "The offset an offset spout's consumer "
                                      "group committed last (the next record to process)", labels=labels)
        latest = GaugeMetricFamily("squall_spout_latest_offset", "The partition's end offset (after its last "
                                   "record), as the spout's source last learned it", labels=labels)
        lag = GaugeMetricFamily("squall_spout_lag_records", "Records of the partition not committed yet "
                                "(latest - committed), as Kafka's consumer lag", labels=labels)
        for spout in self.runtime.spouts:
            for task in list(spout.tasks.values()):
                if not isinstance(task.spout, OffsetSpout):
                    continue
                for tp, offsets in task.spout.partition_offsets().items():
                    values = [self.topology, spout.component, str(task.task_id), tp.topic, str(tp.partition)]
                    if offsets.committed is not None:
                        committed.add_metric(values, offsets.committed)
                    if offsets.latest is not None:
                        latest.add_metric(values, offsets.latest)
                    if offsets.lag is not None:
                        lag.add_metric(values, offsets.lag)
        yield from (committed, latest, lag)

    def _queues(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("squall_queue_depth", "Items waiting in an executor's inbox",
                                  labels=["topology", "component", "executor"])
        busy = CounterMetricFamily("squall_busy_seconds", "Time a bolt executor spent executing tuples: "
                                   "rate() is Storm's capacity (near 1: the bolt is a bottleneck)",
                                   labels=["topology", "component", "executor"])
        stats = self.runtime.stats
        overflow = GaugeMetricFamily("squall_overflow_depth", "Sends an executor parked because the destination "
                                     "was full (backpressure when > 0)", labels=["topology", "component", "executor"])
        capacity = self.runtime.transfer.capacity
        for ex in self.runtime.executors:
            name = f"{ex.task_ids[0]}-{ex.task_ids[-1]}"
            depth.add_metric([self.topology, ex.component, name], len(ex.inbox))
            overflow.add_metric([self.topology, ex.component, name], len(ex.overflow))
            if ex.kind == "bolt":
                busy.add_metric([self.topology, ex.component, name], sum(stats[t].busy_seconds for t in ex.task_ids))
        limit = GaugeMetricFamily("squall_queue_capacity", "Capacity of each executor inbox", labels=["topology"])
        limit.add_metric([self.topology], capacity)
        yield from (depth, overflow, limit, busy)

    def _transport(self) -> Iterator[Metric]:
        tr = self.transport
        if tr is None:
            return
        topo = self.topology
        sent_b = CounterMetricFamily("squall_transport_batches_sent", "Frames sent to a peer",
                                     labels=["topology", "peer", "lane"])
        sent_bytes = CounterMetricFamily("squall_transport_bytes_sent", "Bytes sent to a peer",
                                         labels=["topology", "peer", "lane"])
        dropped = CounterMetricFamily("squall_transport_dropped_frames", "Frames dropped while a peer was "
                                      "unreachable, or that a broken stream may have lost (their trees fail "
                                      "and replay)", labels=["topology", "peer", "lane"])
        reconnects = CounterMetricFamily("squall_transport_reconnects", "Reconnections to a peer",
                                         labels=["topology", "peer", "lane"])
        refused = CounterMetricFamily("squall_transport_refused_streams", "Streams a peer refused (another "
                                      "plan: a rolling update in progress)", labels=["topology", "peer", "lane"])
        for (peer, lane), link in tr.links.items():
            s = link.stats
            sent_b.add_metric([topo, peer, lane], s.batches)
            sent_bytes.add_metric([topo, peer, lane], s.bytes)
            dropped.add_metric([topo, peer, lane], s.dropped)
            reconnects.add_metric([topo, peer, lane], s.reconnects)
            refused.add_metric([topo, peer, lane], s.refused)
        recv_b = CounterMetricFamily("squall_transport_batches_received", "Frames received from a peer",
                                     labels=["topology", "peer", "lane"])
        recv_bytes = CounterMetricFamily("squall_transport_bytes_received", "Bytes received from a peer",
                                         labels=["topology", "peer", "lane"])
        malformed = CounterMetricFamily("squall_transport_malformed_frames", "Frames rejected as malformed "
                                        "(their stream was closed)", labels=["topology"])
        if tr.receiver is not None:
            rs = tr.receiver.stats
            for (peer, lane), n in list(rs.batches.items()):
                recv_b.add_metric([topo, peer, lane], n)
            for (peer, lane), n in list(rs.bytes.items()):
                recv_bytes.add_metric([topo, peer, lane], n)
            malformed.add_metric([topo], rs.malformed)
        connected = GaugeMetricFamily("squall_transport_connected", "1 while a link to a peer (direction out) or "
                                      "a peer's stream to this process (in) is up, 0 while it is not: the spouts "
                                      "start once every one is up", labels=["topology", "peer", "lane", "direction"])
        for peer, lane, direction, up in tr.connections():
            connected.add_metric([topo, peer, lane, direction], 1 if up else 0)
        completed = CounterMetricFamily("squall_transport_completed_trees", "Trees this worker found complete "
                                        "itself (their INIT and every ack folded to 0 before any went to their "
                                        "acker), their acker never told", labels=["topology"])
        completed.add_metric([topo], tr.completed)
        congested = GaugeMetricFamily("squall_transport_congested_tasks", "Tasks of this process (and acker tasks "
                                      "it forwards for) whose peers are told to send them nothing for now: an "
                                      "inbox's worth waits behind their full inbox", labels=["topology", "component"])
        held = GaugeMetricFamily("squall_transport_held_items", "Items received for full inboxes, waiting behind "
                                 "them (an acker's batch counted as its messages)", labels=["topology"])
        if tr.ingress is not None:
            names = self.runtime.plan.task_component
            counts = Counter(names[task] for task in list(tr.ingress.congested))
            # an acker's home counts the acker tasks it forwards for as well (component __acker)
            for component in sorted({ex.component for ex in self.runtime.executors} | set(counts)):
                congested.add_metric([topo, component], counts[component])
            held.add_metric([topo], tr.ingress.held)
        yield from (sent_b, sent_bytes, dropped, reconnects, refused, recv_b, recv_bytes, malformed, connected,
                    completed, congested, held)
