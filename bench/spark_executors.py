"""Spark executor pods: does the clickstream topology move more clicks with 2 executor pods than with 1?
Prints figures, never passes or fails.

Against the cluster of ``$KUBECONFIG`` (the Squall chart's operator installed, the Squall image loaded),
in a namespace of its own (``squall-bench-spark`` by default, created if missing), each round applies
the end-to-end suite's clickstream Topology (``e2e/manifests/clickstream.yaml``: ``ClickSpout`` →
``SessionStats``, a SparkBolt → ``PrintStats``; 1 worker pod, the Spark driver in client mode) without
its click limit, with ``spark.executors`` set to the round's count, then:

1. waits for the Topology to be Ready and for that many executor pods to run;
2. warms up: from the first acked click, at least ``--warmup`` seconds and until two consecutive
   ``--step``-second rates are within 20 % of each other (at most three times ``--warmup``): the worker's
   and the executors' JVMs compile Spark's code as the first jobs run;
3. measures clicks acked per second over ``--window`` seconds: the spout's ``squall_acked_total``, read
   from the worker pod's Prometheus ``/metrics`` through the API server's pod proxy, as ``squall top``
   does (``e2e/kube.py``'s ``Acked``, which the end-to-end suite's rate checks use), together with
   each pod's CPU over the window (the kubelet's stats summary, through the API server's node proxy),
   the executor pods' CPU throttling (their cgroup's ``cpu.stat``), and the clicks failed (replays);
4. deletes the Topology (its executor pods go with their driver) and waits for its pods to go.

``--transfer-batch`` sets ``transfer.batchSize`` (default: the topology's, 1,024). The runs in
bench/HISTORY.md ("Spark executor pods") used 65,536: with 1,024 the worker died about once a minute,
from a bug in ``AckerOutbox.expire`` since fixed (a batch one past full, after a young tree's RESET,
took every expired young tree in).

The rounds follow ``--order`` (default ``1,2,2,1``: alternated, so that a machine growing slower or
faster over the run, shared as it is, weighs on both counts alike). It prints a line per round, then
per executor count every round's clicks/s and their median, and the ratio of the medians (2 ÷ 1), with
each alternated pair's ratio beside it.

The executor pods' CPU is bounded so that a node of 2 cores holds both beside the worker:
``--executor-cpu`` (default 200m) is the ``sparkExecutors`` pod template's CPU limit and request. Spark
replaces a template's CPU request with ``spark.executor.cores`` (1, a whole core each, which such a node
cannot hold twice beside the worker), so the request also goes to Spark as
``spark.kubernetes.executor.request.cores``.

Batches are big (``spark.batch.size`` 30,000 by default, ``maxSpoutPending`` 4 batches,
``spark.jobs.in.flight`` 3: the settings that moved the most clicks in bench/HISTORY.md) so that the
executors do the work: a Spark job costs a roughly fixed few hundred ms in the driver (planning,
scheduling, collecting; docs/spark.md, "Benchmark") whatever its size, and the worker's Python pays
per click (the spout, the batch's Arrow columns, anchoring and acking), none of which a second
executor shares; with small batches that fixed part is most of a job, and more executors change
little. The input crosses as Arrow in ``defaultParallelism`` record batches (the executors' cores),
so each executor gets a partition of every job's first stage, and ``spark.sql.shuffle.partitions``
(4, the session's default) spreads the rest.

    export KUBECONFIG=/var/lib/k8s-local/admin.kubeconfig PATH=/opt/k8s-local/bin:$PATH
    python bench/spark_executors.py                             # 1,2,2,1: about 25 min on k8s-local
    python bench/spark_executors.py --order 1,2 --warmup 30 --window 30
    python bench/spark_executors.py --spark-conf spark.locality.wait=0 --executor-cpu 400m

Before it, on k8s-local (as ``e2e/local-cluster.sh`` does, with tags of your own): build the image and
the operator's (``--target operator``) with buildah, load both with ``load-image.sh``, and install the
chart with ``image.repository=squall``, ``image.tag=TAG``, ``image.pullPolicy=Never`` and
``operatorImage.tag=TAG`` (e2e/conftest.py's ``operator`` fixture; ``helm install`` with those values
does the same). Needs ``kubectl`` on ``PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "e2e"))

from kube import Acked, Kubectl, eventually  # noqa: E402

MANIFEST = REPO / "e2e" / "manifests" / "clickstream.yaml"
SPOUT, BOLT = "clicks", "sessions"
EXECUTOR = "spark-executor"  # the executor pods' component label (squall_operator.render.SPARK_EXECUTOR)
STEADY = 0.2  # two consecutive warm-up rates this close (relative) end the warm-up
# CPU seconds per command in a pod (the worker's: its Python process, ``squall``; Spark's driver JVM, ``java``)
PROCESS_CPU = """
import os
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    fields = stat[stat.rindex(")") + 2:].split()
    print(stat[stat.index("(") + 1:stat.rindex(")")], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
"""
CGROUP_CPU_STAT = "cat /sys/fs/cgroup/cpu.stat 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.stat"


def topology(args: argparse.Namespace, executors: int) -> dict[str, Any]:
    """The suite's clickstream Topology, endless, with ``executors`` executor pods and the bench's batches."""
    doc = yaml.safe_load(MANIFEST.read_text())
    doc["metadata"]["name"] = args.name
    spec = doc["spec"]
    spec["config"] = {"clickstream.users": args.users}  # no clickstream.clicks: clicks for as long as it runs
    spec["maxSpoutPending"] = args.max_pending or 4 * args.batch
    spec["messageTimeoutSeconds"] = args.message_timeout
    if args.transfer_batch:
        spec["transfer"] = {"batchSize": args.transfer_batch}
    if args.image:
        spec["image"] = args.image
    cpu = {"cpu": args.executor_cpu}
    spec["spark"] = {"executors": executors, "executorCores": args.executor_cores,
                     "executorMemory": args.executor_memory, "driverMemory": args.driver_memory,
                     "conf": {"spark.kubernetes.executor.request.cores": args.executor_cpu, **args.spark_conf}}
    spec["podTemplate"] = {"sparkExecutors": {"resources": {"requests": cpu, "limits": cpu}}}
    if args.worker_cpu:
        spec["podTemplate"]["workers"] = {"resources": {"requests": {"cpu": args.worker_cpu}}}
    (bolt,) = (b for b in spec["bolts"] if b["name"] == BOLT)
    bolt["config"] = {"spark.batch.size": args.batch, "spark.batch.max.wait.ms": args.max_wait_ms,
                      "spark.jobs.in.flight": args.jobs}
    return doc


@dataclass
class Round:
    executors: int
    rate: float  # clicks acked per second over the window
    steps: list[float]  # the window's rate per --step seconds
    warmup: float  # seconds from the first acked click to the window
    failed: float  # clicks failed (to be replayed) during the window
    cores: dict[str, float] = field(default_factory=dict)  # pod (or "node") → cores busy over the window
    throttled: dict[str, tuple[float, float]] = field(default_factory=dict)  # pod → (periods throttled, s/s)
    load: float = 0.0
    resources: dict[str, Any] = field(default_factory=dict)  # an executor pod's main container resources
    worker: dict[str, float] = field(default_factory=dict)  # the worker pod's processes → cores busy


class Bench:
    def __init__(self, kubectl: Kubectl, args: argparse.Namespace) -> None:
        self.kubectl, self.args = kubectl, args
        self.node = kubectl.get("nodes")["items"][0]["metadata"]["name"]

    def pods(self, role: str) -> list[dict[str, Any]]:
        return [p for p in self.kubectl.pods(self.args.name, role) if not p["metadata"].get("deletionTimestamp")]

    def delete(self) -> None:
        self.kubectl("delete", "topology", self.args.name, "--ignore-not-found", "--timeout=300s", timeout=360)
        selector = f"app.kubernetes.io/instance={self.args.name}"
        eventually(lambda: not self.kubectl.get("pods", "--selector", selector)["items"], timeout=300,
                   what=f"the pods of {self.args.name} gone")

    def running(self, role: str, count: int) -> list[str] | None:
        pods = [p for p in self.pods(role) if p["status"].get("phase") == "Running"]
        return [p["metadata"]["name"] for p in pods] if len(pods) == count else None

    def cpu(self) -> dict[str, tuple[float, float]]:
        """Per pod of the namespace, and the node's (``node``): (CPU seconds used, at what time), the kubelet's."""
        summary = json.loads(self.kubectl("get", "--raw", f"/api/v1/nodes/{self.node}/proxy/stats/summary"))

        def seconds(cpu: dict[str, Any]) -> tuple[float, float]:
            stamp = datetime.fromisoformat(cpu["time"].replace("Z", "+00:00")).timestamp()
            return cpu.get("usageCoreNanoSeconds", 0) / 1e9, stamp

        used = {"node": seconds(summary["node"]["cpu"])}
        for pod in summary.get("pods", []):
            if pod["podRef"]["namespace"] == self.kubectl.namespace and "cpu" in pod:
                used[pod["podRef"]["name"]] = seconds(pod["cpu"])
        return used

    def throttling(self, pods: list[str]) -> dict[str, dict[str, float]]:
        """Each pod's cgroup CPU throttling counters (nr_periods, nr_throttled, throttled time in s)."""
        stats = {}
        for pod in pods:
            try:
                text = self.kubectl("exec", pod, "--", "sh", "-c", CGROUP_CPU_STAT, timeout=30)
            except (AssertionError, subprocess.TimeoutExpired):
                continue
            values = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
            throttled = (float(values["throttled_usec"]) / 1e6 if "throttled_usec" in values
                         else float(values.get("throttled_time", 0)) / 1e9)
            stats[pod] = {"periods": float(values.get("nr_periods", 0)),
                          "throttled": float(values.get("nr_throttled", 0)), "seconds": throttled}
        return stats

    def processes(self, pod: str) -> dict[str, float]:
        """CPU seconds used so far per command in ``pod`` (its processes' utime + stime)."""
        try:
            text = self.kubectl("exec", pod, "--", "python", "-c", PROCESS_CPU, timeout=30)
        except (AssertionError, subprocess.TimeoutExpired):
            return {}
        used: dict[str, float] = {}
        for line in text.splitlines():
            command, seconds = line.rsplit(" ", 1)
            used[command] = used.get(command, 0.0) + float(seconds)
        return used

    def failed(self, worker: str) -> float:
        return self.kubectl.metrics(worker).total("squall_failed_total", component=SPOUT)

    def round(self, executors: int) -> Round:
        args = self.args
        self.delete()
        self.kubectl("apply", "--filename", "-", stdin=yaml.safe_dump(topology(args, executors), sort_keys=False))
        self.kubectl("wait", "--for=condition=Ready", f"topology/{args.name}", "--timeout=600s", timeout=660)
        executor_pods = eventually(lambda: self.running(EXECUTOR, executors), timeout=300,
                                   what=f"{executors} running executor pods")
        (worker,) = eventually(lambda: self.running("worker", 1), timeout=60, what="the worker pod running")
        container = self.kubectl.get("pod", executor_pods[0])["spec"]["containers"][0]
        acked = Acked(self.kubectl, args.name, SPOUT)
        acked.follow(lambda: acked.total > 0, timeout=600, what="the first click acked")
        start, steps = time.monotonic(), []
        while True:
            steps.append(rate(acked, args.step))
            spent = time.monotonic() - start
            steady = len(steps) >= 2 and abs(steps[-1] - steps[-2]) <= STEADY * max(steps[-2:])
            if (spent >= args.warmup and steady) or spent >= 3 * args.warmup:
                break
        warmup = time.monotonic() - start
        cpu0, throttle0, failed0 = self.cpu(), self.throttling(executor_pods), self.failed(worker)
        procs0 = self.processes(worker)
        acked.sample()
        t0, n0 = acked.samples[-1]
        window = [rate(acked, args.step) for _ in range(max(1, round(args.window / args.step)))]
        t1, n1 = acked.samples[-1]
        cpu1, throttle1, failed1 = self.cpu(), self.throttling(executor_pods), self.failed(worker)
        procs1 = self.processes(worker)
        cores = {pod: (cpu1[pod][0] - cpu0[pod][0]) / (cpu1[pod][1] - cpu0[pod][1])
                 for pod in cpu1 if pod in cpu0 and cpu1[pod][1] > cpu0[pod][1]}
        throttled = {}
        for pod in throttle1:
            if pod in throttle0:
                d = {k: throttle1[pod][k] - throttle0[pod][k] for k in throttle1[pod]}
                throttled[pod] = (d["throttled"] / d["periods"] if d["periods"] else 0.0, d["seconds"] / (t1 - t0))

        def role(pod: str) -> str:
            if pod == worker:
                return "worker"
            if pod in executor_pods:
                return "executor " + pod.rsplit("-", 1)[-1]
            return "node (machine)" if pod == "node" else pod.split(f"{args.name}-", 1)[-1]

        names = {"squall": "worker's Python", "java": "worker's driver JVM"}
        return Round(
            executors, (n1 - n0) / (t1 - t0), window, warmup, failed1 - failed0,
            cores={role(pod): busy for pod, busy in cores.items()},
            throttled={role(pod): value for pod, value in throttled.items()},
            load=os.getloadavg()[0], resources=container.get("resources", {}),
            worker={names.get(command, f"worker's {command}"): (procs1[command] - procs0.get(command, 0.0)) / (t1 - t0)
                    for command in procs1})


def rate(acked: Acked, seconds: float) -> float:
    """Clicks acked per second over the next ``seconds``: two samples, with a sleep between them rather than
    ``Acked.rate``'s sample a second, whose kubectl processes would take CPU from the pods measured."""
    t0, n0 = acked.samples[-1] if acked.samples else acked.sample()
    time.sleep(max(0.0, t0 + seconds - time.monotonic()))
    t1, n1 = acked.sample()
    return (n1 - n0) / (t1 - t0)


def describe(r: Round) -> str:
    cores = ", ".join(f"{name} {value:.2f}" for name, value in sorted(r.cores.items()))
    throttled = ", ".join(f"{name} {share:.0%} of periods ({seconds:.2f} s/s)"
                          for name, (share, seconds) in sorted(r.throttled.items()))
    processes = ", ".join(f"{name} {value:.2f}" for name, value in sorted(r.worker.items()) if value >= 0.005)
    executors = sum(value for name, value in r.cores.items() if name.startswith("executor"))
    if r.rate > 0:
        cores += (f"; CPU µs per click: worker {r.cores.get('worker', 0) / r.rate * 1e6:.0f}, "
                  f"executors {executors / r.rate * 1e6:.0f}")
    return (f"{r.rate:>9,.0f} clicks/s  (per {len(r.steps)} steps: {', '.join(f'{s:,.0f}' for s in r.steps)}; "
            f"warm-up {r.warmup:.0f} s; failed {r.failed:,.0f}; load {r.load:.2f})\n"
            f"      cores busy: {cores}\n      of the worker pod: {processes or 'not measured'}\n"
            f"      throttled: {throttled or 'none measured'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--order", default="1,2,2,1",
                        help="executor pods per round, comma-separated (default 1,2,2,1: alternated pairs)")
    parser.add_argument("--warmup", type=float, default=180,
                        help="least seconds of warm-up after the first ack (default 180)")
    parser.add_argument("--window", type=float, default=60, help="seconds measured per round")
    parser.add_argument("--step", type=float, default=10, help="seconds per rate while warming up and measuring")
    parser.add_argument("--batch", type=int, default=30_000, help="spark.batch.size (default 30000)")
    parser.add_argument("--max-wait-ms", type=int, default=2000, help="spark.batch.max.wait.ms (default 2000)")
    parser.add_argument("--max-pending", type=int, help="maxSpoutPending (default 4 batches)")
    parser.add_argument("--message-timeout", type=int, default=60, help="messageTimeoutSeconds (default 60)")
    parser.add_argument("--transfer-batch", type=int, default=0,
                        help="transfer.batchSize (default 0: the topology's, 1024)")
    parser.add_argument("--jobs", type=int, default=3, help="spark.jobs.in.flight (default 3)")
    parser.add_argument("--users", type=int, default=20, help="clickstream.users (default 20)")
    parser.add_argument("--executor-cpu", default="200m",
                        help="each executor pod's CPU request and limit (default 200m)")
    parser.add_argument("--executor-cores", type=int, default=1, help="spark.executor.cores (default 1)")
    parser.add_argument("--executor-memory", default="512m", help="spark.executor.memory (default 512m)")
    parser.add_argument("--driver-memory", default="1g", help="spark.driver.memory (default 1g)")
    parser.add_argument("--worker-cpu", help="the worker pod's CPU request (default: the operator's)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark property for spec.spark.conf (repeatable), e.g. spark.locality.wait=0")
    parser.add_argument("--image", help="the Topology's image (default: the operator's)")
    parser.add_argument("--name", default="clickstream", help="the Topology's name (default clickstream)")
    parser.add_argument("--namespace", default="squall-bench-spark", help="default squall-bench-spark")
    args = parser.parse_args()
    args.spark_conf = dict(item.split("=", 1) for item in args.spark_conf)
    order = [int(n) for n in args.order.split(",") if n]
    kubeconfig = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not kubeconfig or not Path(kubeconfig).is_file():
        print("spark_executors.py: set KUBECONFIG to the cluster's kubeconfig "
              "(k8s-local: export KUBECONFIG=/var/lib/k8s-local/admin.kubeconfig)", file=sys.stderr)
        return 2
    kubectl = Kubectl(Path(kubeconfig), args.namespace)
    kubectl("apply", "--filename", "-", stdin=f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {args.namespace}\n")
    bench = Bench(kubectl, args)
    spec = topology(args, 0)["spec"]
    bolt = next(b["config"] for b in spec["bolts"] if b["name"] == BOLT)
    spark = {key: value for key, value in spec["spark"].items() if key != "executors"}  # per round
    print(f"clickstream on Spark executor pods, node {bench.node} ({os.cpu_count()} cores here); rounds {order}; "
          f"maxSpoutPending {spec['maxSpoutPending']:,}; bolt config {json.dumps(bolt)}; spark "
          f"{json.dumps(spark)}; pod templates {json.dumps(spec['podTemplate'])}; "
          f"warm-up at least {args.warmup:g} s, window {args.window:g} s", flush=True)
    rounds: list[Round] = []
    try:
        for number, executors in enumerate(order, 1):
            begun = time.monotonic()
            r = bench.round(executors)
            rounds.append(r)
            print(f"round {number}: {executors} executor(s) {describe(r)}\n      executor resources "
                  f"{json.dumps(r.resources)}; round took {time.monotonic() - begun:.0f} s", flush=True)
    finally:
        bench.delete()
    counts = sorted({r.executors for r in rounds})
    print(f"\n{'executors':>9}  {'clicks/s per round':<40} {'median':>9}")
    medians = {}
    for n in counts:
        rates = [r.rate for r in rounds if r.executors == n]
        medians[n] = statistics.median(rates)
        print(f"{n:>9}  {', '.join(f'{x:,.0f}' for x in rates):<40} {medians[n]:>9,.0f}")
    if len(counts) >= 2:
        low, high = counts[0], counts[-1]
        pairs = [b.rate / a.rate if a.executors == low else a.rate / b.rate
                 for a, b in zip(rounds[::2], rounds[1::2], strict=False) if {a.executors, b.executors} == {low, high}]
        print(f"\nratio {high} ÷ {low} executors (medians): {medians[high] / medians[low]:.2f}"
              + (f"; per alternated pair: {', '.join(f'{p:.2f}' for p in pairs)}" if pairs else ""))
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
