"""The cluster verbs of the ``squall`` command line (list, rebalance, kill, activate, deactivate, set-log-level,
top NAME, logs) against kmock's API server, logged in with a kubeconfig as a user would be; with the operator
running where the verb's effect is the operator's (a rebalance, the log level relayed to real processes).

kmock serves no pod proxy and no pod logs: the tests serve them at the paths the API server would
(``/api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics``, ``.../pods/POD/log``)."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
import yaml
from operator_kit import (
    NAMESPACE,
    SPEC,
    STATEFULSETS,
    TOPOLOGIES,
    ApiServer,
    condition,
    create_topology,
    eventually,
    obj,
    patch,
    roll_out,
    status,
)
from test_operator import REPO, processes_behind_pods

from squall.cli import main
from squall.process import log_levels
from squall.process.log_levels import LogLevels

pytestmark = [pytest.mark.timeout(120)]

@pytest.fixture
def kubeconfig(api, tmp_path, monkeypatch):
    """A kubeconfig for kmock's server, as ``$KUBECONFIG``: the verbs log in as they would anywhere."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": str(api.url).rstrip("/")}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "me", "namespace": NAMESPACE}}]}))
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


async def squall(*argv: str) -> int:
    """``squall ARGV`` in a thread (the emulator runs on this event loop)."""
    return await asyncio.to_thread(main, list(argv))


def metrics(acked: float, *, failed: float = 0.0, fast: float = 0.0, lag: float | None = None) -> str:
    """A worker's /metrics: the spout ``sentences`` with ``acked`` trees so far, ``fast`` of them under 1 ms."""
    labels = 'topology="wc",component="sentences",task="1"'
    text = (f'squall_process_info{{topology="wc",role="worker",index="0",plan="p1"}} 1\n'
            "process_start_time_seconds 100\n"
            f"squall_max_spout_pending{{{labels}}} 1000\n"
            f'squall_acked_total{{{labels},stream="default"}} {acked}\n'
            f'squall_failed_total{{{labels},stream="default"}} {failed}\n'
            f'squall_emitted_total{{{labels},stream="default"}} {acked}\n'
            f'squall_complete_latency_seconds_bucket{{{labels},stream="default",le="0.001"}} {fast}\n'
            f'squall_complete_latency_seconds_bucket{{{labels},stream="default",le="0.01"}} {acked}\n'
            f'squall_complete_latency_seconds_bucket{{{labels},stream="default",le="+Inf"}} {acked}\n'
            f'squall_complete_latency_seconds_count{{{labels},stream="default"}} {acked}\n'
            f'squall_complete_latency_seconds_sum{{{labels},stream="default"}} {acked * 0.001}\n')
    if lag is not None:
        text += f'squall_spout_lag_records{{{labels},partition="0"}} {lag}\n'
    return text


async def running_pod(api: ApiServer, name: str, topology: str, role: str = "worker") -> None:
    """A running pod of ``topology`` as its StatefulSet makes it (the labels the verbs select by)."""
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {
                "app.kubernetes.io/name": "squall", "app.kubernetes.io/instance": topology,
                "app.kubernetes.io/component": role, "app.kubernetes.io/managed-by": "squall-operator"}},
            "spec": {"containers": [{"name": role, "ports": [{"name": "metrics", "containerPort": 9090}]}]},
            "status": {"phase": "Running", "podIP": "127.0.0.1"}}
    response = await api.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json=body)
    assert response.status == 200, await response.text()


def serve_metrics(api: ApiServer, pod: str, per_second: float, **kwargs: float) -> None:
    """The pod's /metrics and /errors through the pod proxy: ``per_second`` trees acked a second, 90 % fast."""
    began = time.monotonic()

    def answer(_: object) -> bytes:  # bytes: kmock sends them as they are (a str would go as JSON)
        acked = 1000 + per_second * (time.monotonic() - began)
        return metrics(acked, fast=0.9 * acked, **kwargs).encode()

    api[f"get /api/v1/namespaces/{NAMESPACE}/pods/{pod}:9090/proxy/metrics"] << answer
    api[f"get /api/v1/namespaces/{NAMESPACE}/pods/{pod}:9090/proxy/errors"] << (
        lambda _: [{"component": "sentences", "task": 1, "time": time.time(), "error": "ValueError: bad line"}])


@pytest.mark.asyncio
async def test_list_shows_each_topology_with_its_rates_from_the_pods_metrics(api, kubeconfig, capsys):
    await create_topology(api, "wc", SPEC)
    await create_topology(api, "idle", {**SPEC, "suspended": True})
    await patch(api, TOPOLOGIES, "wc", {"status": {"phase": "Running", "readyWorkers": 2, "ackers": 2,
                                                     "readyAckers": 2}}, subresource="status")
    for pod in ("wc-worker-0", "wc-worker-1"):
        await running_pod(api, pod, "wc")
        serve_metrics(api, pod, 500.0, lag=7)

    assert await squall("list", "-o", "json", "--interval", "2") == 0  # long: a loaded machine's scrapes lag
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    wc, idle = rows["wc"], rows["idle"]
    assert (wc["phase"], wc["workers"], wc["readyWorkers"], wc["ackers"], wc["lag"]) == ("Running", 2, 2, 2, 14)
    assert 600 < wc["ackedPerSecond"] < 1400 and wc["failedPerSecond"] == 0  # two pods at 500/s
    assert 1 < wc["p99Ms"] <= 10  # 10 % of the trees between 1 and 10 ms
    assert idle["suspended"] and idle["ackedPerSecond"] is None  # no pod: no rates

    assert await squall("list") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "WORKERS", "ACKERS", "ACKED/S", "FAILED/S", "P99", "MS", "LAG",
                                "AGE"]
    assert table[1].split()[:4] == ["idle", "-", "0/2", "0/2"] and table[2].split()[:4] == ["wc", "Running", "2/2",
                                                                                            "2/2"]
    assert await squall("list", "-o", "yaml", "--interval", "0.1") == 0
    assert {r["name"] for r in yaml.safe_load(capsys.readouterr().out)} == {"idle", "wc"}

    # a user who may read Topologies but not list pods gets the table, without rates
    forbidden = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                 "message": 'pods is forbidden: User "me" cannot list resource "pods"'}
    api[f"get /api/v1/namespaces/{NAMESPACE}/pods"] << 403 << forbidden
    assert await squall("list", "-o", "json") == 0
    result = capsys.readouterr()
    assert [r["ackedPerSecond"] for r in json.loads(result.out)] == [None, None]
    assert "warning: no rates: forbidden: you may not list pods in namespace default" in result.err


@pytest.mark.asyncio
async def test_the_verbs_say_what_is_missing_forbidden_or_unreachable(api, kubeconfig, tmp_path, capsys,
                                                                       monkeypatch):
    assert await squall("rebalance", "nope", "--workers", "3") == 5
    assert ("no topology 'nope' in namespace default: `squall list -n default` lists those there"
            in capsys.readouterr().err)
    assert await squall("top", "nope", "--once") == 5
    assert "no topology 'nope'" in capsys.readouterr().err

    forbidden = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                 "message": 'topologies.squall.dev is forbidden: User "me" cannot list resource "topologies"'}
    api[f"get /apis/squall.dev/v1alpha1/namespaces/{NAMESPACE}/topologies"] << 403 << forbidden
    assert await squall("list") == 4
    err = capsys.readouterr().err
    assert "forbidden: you may not list topologies in namespace default" in err
    assert "kubectl auth can-i list topologies -n default" in err

    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"  # nothing listens there
    kubeconfig.write_text(yaml.safe_dump(config))
    assert await squall("activate", "wc") == 3
    assert "cannot reach the API server http://127.0.0.1:9" in capsys.readouterr().err
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert await squall("list") == 3
    assert "no kubeconfig" in capsys.readouterr().err


@pytest.mark.asyncio
async def test_top_shows_a_topology_s_components_through_the_pod_proxy_and_says_when_it_runs_nothing(
        api, kubeconfig, capsys):
    await create_topology(api, "wc", SPEC)
    await patch(api, TOPOLOGIES, "wc", {"status": {"phase": "Pending", "conditions": [
        {"type": "Ready", "status": "False", "reason": "PodsNotReady", "message": "0/2 workers ready"}]}},
        subresource="status")
    assert await squall("top", "wc", "--once") == 1
    assert ("topology 'wc' in namespace default has no running pod (phase Pending: PodsNotReady: 0/2 workers ready)"
            in capsys.readouterr().err)

    await create_topology(api, "hidden", SPEC)  # whose pods the user may not read
    await running_pod(api, "hidden-worker-0", "hidden")
    forbidden = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                 "message": 'pods "hidden-worker-0" is forbidden: cannot get resource "pods/proxy"'}
    api[f"get /api/v1/namespaces/{NAMESPACE}/pods/hidden-worker-0:9090/proxy/metrics"] << 403 << forbidden
    assert await squall("top", "hidden", "--once") == 4
    assert "forbidden: you may not get pods/proxy in namespace default" in capsys.readouterr().err

    await running_pod(api, "wc-worker-0", "wc")
    serve_metrics(api, "wc-worker-0", 200.0)
    assert await squall("top", "wc", "--once", "--interval", "0.5") == 0
    out = capsys.readouterr().out
    header, _, titles, row = out.splitlines()[:4]
    assert header.startswith("topology wc   processes 1/1   trees acked ") and "p99 " in header
    assert titles.split()[:4] == ["component", "emitted/s", "transferred/s", "executed/s"]
    assert row.startswith("sentences") and "ValueError: bad line" in row


@pytest.mark.asyncio
async def test_rebalance_patches_the_counts_and_waits_for_the_operator_to_rebalance(api, kubeconfig,
                                                                                     start_operator, capsys):
    await start_operator()
    await create_topology(api, "wc", SPEC)
    for role in ("worker", "acker"):
        await eventually(f"the {role} StatefulSet", lambda role=role: obj(api, STATEFULSETS, f"wc-{role}"))
        await roll_out(api, f"wc-{role}")
    await eventually("Ready", lambda: condition(api, "wc", "Ready").get("status") == "True")

    assert await squall("rebalance", "wc", "--parallelism", "nope=2") == 2
    assert "no component 'nope' (components: count, sentences, split)" in capsys.readouterr().err
    assert await squall("rebalance", "wc", "--workers", "3", "--ackers", "-1") == 2  # checked as the webhook would
    assert "the rebalanced spec would be refused: " in capsys.readouterr().err
    assert obj(api, TOPOLOGIES, "wc")["metadata"]["generation"] == 1  # nothing written

    async def roll_out_when_rescaled() -> None:  # as the StatefulSet controller would: 3 workers, 3 ackers
        for role in ("worker", "acker"):
            await eventually(f"3 {role}s wanted", lambda role=role: obj(api, STATEFULSETS, f"wc-{role}")["spec"]
                             ["replicas"] == 3, timeout=30)
            await roll_out(api, f"wc-{role}")

    rolling = asyncio.create_task(roll_out_when_rescaled())
    assert await squall("rebalance", "wc", "--workers", "3", "-e", "split=3", "--wait", "60") == 0
    await rolling
    out = capsys.readouterr().out
    assert "topology 'wc': rebalance asked (3 worker(s), sentences=1, split=3, count=1" in out
    assert out.rstrip().endswith("Rebalanced: Ready, 6/6 pods ready")
    spec = obj(api, TOPOLOGIES, "wc")["spec"]
    assert spec["workers"] == 3 and spec["bolts"][0]["parallelism"] == 3
    assert spec["spouts"] == SPEC["spouts"] and spec["bolts"][1] == SPEC["bolts"][1]  # the rest as it was

    assert await squall("rebalance", "wc", "--workers", "3") == 0
    assert "already has those counts" in capsys.readouterr().out


@pytest.mark.asyncio
async def test_a_rebalance_the_operator_refuses_ends_the_wait_with_its_reason(api, kubeconfig, capsys):
    await create_topology(api, "wc", SPEC)
    topology = obj(api, TOPOLOGIES, "wc")

    async def refuse() -> None:
        await eventually("the rebalance", lambda: obj(api, TOPOLOGIES, "wc")["spec"]["workers"] == 4)
        generation = obj(api, TOPOLOGIES, "wc")["metadata"]["generation"]
        await patch(api, TOPOLOGIES, "wc", {"status": {"phase": "Running", "observedGeneration": generation,
                                                       "conditions": [{"type": "Degraded", "status": "True",
                                                                       "reason": "SwitchRefused",
                                                                       "message": "wc-worker-0 refused"}]}},
                    subresource="status")

    assert topology["metadata"]["generation"] == 1
    refusing = asyncio.create_task(refuse())
    assert await squall("rebalance", "wc", "--workers", "4", "--wait", "30") == 1
    await refusing
    assert "refused: wc-worker-0 refused" in capsys.readouterr().out


@pytest.mark.asyncio
async def test_deactivate_activate_and_kill(api, kubeconfig, capsys):
    await create_topology(api, "wc", {**SPEC, "messageTimeoutSeconds": 1})
    assert await squall("deactivate", "wc") == 0
    assert obj(api, TOPOLOGIES, "wc")["spec"]["suspended"] is True
    assert "topology 'wc' deactivated" in capsys.readouterr().out
    assert await squall("activate", "wc") == 0
    assert obj(api, TOPOLOGIES, "wc")["spec"]["suspended"] is False

    writes: list[str] = []
    began = time.monotonic()
    killing = asyncio.create_task(squall("kill", "wc"))  # waits its message timeout, 1 s, between the two
    await eventually("deactivated", lambda: obj(api, TOPOLOGIES, "wc")["spec"]["suspended"] is True)
    writes.append(f"suspended after {time.monotonic() - began:.1f} s")
    assert obj(api, TOPOLOGIES, "wc") is not None  # not deleted yet
    assert await killing == 0
    assert time.monotonic() - began >= 1.0
    assert obj(api, TOPOLOGIES, "wc") is None
    out = capsys.readouterr().out
    assert "deleting it in 1 s" in out and "topology 'wc' deleted" in out
    assert await squall("kill", "wc", "--wait", "0") == 5


@pytest.mark.asyncio
async def test_logs_merge_the_pods_lines_with_pod_and_task(api, kubeconfig, capsys):
    await create_topology(api, "wc", SPEC)
    for pod, lines in (("wc-worker-0", ["2026-12-02 00:00:01,000 INFO squall: worker-0 up",
                                        "2026-12-02 00:00:03,000 ERROR squall: split task 3: raised",
                                        "Traceback (most recent call last):"]),
                       ("wc-worker-1", ["2026-12-02 00:00:02,000 INFO squall: worker-1 up"])):
        await running_pod(api, pod, "wc")
        text = ("\n".join(lines) + "\n").encode()
        api[f"get /api/v1/namespaces/{NAMESPACE}/pods/{pod}/log"] << (lambda _, text=text: text)
    await running_pod(api, "wc-acker-0", "wc", role="acker")
    api[f"get /api/v1/namespaces/{NAMESPACE}/pods/wc-acker-0/log"] << b"2026-12-02 00:00:00,500 INFO squall: acker\n"

    await running_pod(api, "wc-worker-2", "wc")  # left over from a scale-down, its container not started
    waiting = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "BadRequest", "code": 400,
               "message": 'container "worker" in pod "wc-worker-2" is waiting to start: ContainerCreating'}
    api[f"get /api/v1/namespaces/{NAMESPACE}/pods/wc-worker-2/log"] << 400 << waiting

    assert await squall("logs", "wc") == 0
    merged = capsys.readouterr()
    assert "no log of wc-worker-2 (starting, or gone): " in merged.err and "waiting to start" in merged.err
    assert merged.out.splitlines() == [
        "[wc-acker-0] 2026-12-02 00:00:00,500 INFO squall: acker",
        "[wc-worker-0] 2026-12-02 00:00:01,000 INFO squall: worker-0 up",
        "[wc-worker-1] 2026-12-02 00:00:02,000 INFO squall: worker-1 up",
        "[wc-worker-0 split:3] 2026-12-02 00:00:03,000 ERROR squall: split task 3: raised",
        "[wc-worker-0] Traceback (most recent call last):"]
    # sentences (task 3 of 5, in name order: count 1, sentences 2, split 3-4) runs on worker 0 of 2... by the
    # assignment every process computes: executors dealt round robin
    assert await squall("logs", "wc", "--component", "sentences") == 0
    assert {line.split("]")[0] for line in capsys.readouterr().out.splitlines()} <= {"[wc-worker-1", "[wc-worker-0",
                                                                                    "[wc-worker-0 split:3"}
    assert await squall("logs", "wc", "--follow", "--component", "split") == 0  # until every stream ends
    followed = capsys.readouterr()
    assert "[wc-worker-0 split:3] 2026-12-02 00:00:03,000 ERROR squall: split task 3: raised" in followed.out
    assert "every pod's log stream ended" in followed.err
    assert await squall("logs", "wc", "--component", "nope") == 2
    assert "has no component 'nope' (components: count, sentences, split)" in capsys.readouterr().err


@pytest.mark.asyncio
async def test_set_log_level_writes_the_annotation_the_operator_relays_and_the_processes_revert(
        api, kubeconfig, start_operator, tmp_path, monkeypatch, capsys):
    """The processes behind the emulated pods are real: the operator tells them the level over their control
    channel, and each sets the logger back by itself when the timeout is up."""
    monkeypatch.chdir(REPO)
    async with processes_behind_pods(api, start_operator, tmp_path) as (_, sup, _states):
        assert await squall("set-log-level", "wc", "loud") == 2
        assert "'LOUD' is not a log level" in capsys.readouterr().err
        assert await squall("set-log-level", "wc", "debug", "--logger", "examples.wordcount", "--timeout", "15") == 0
        assert "logger examples.wordcount at DEBUG until" in capsys.readouterr().out
        written = log_levels.parse(obj(api, TOPOLOGIES, "wc")["metadata"]["annotations"][log_levels.ANNOTATION])
        assert [(o.logger, o.level) for o in written] == [("examples.wordcount", "DEBUG")]
        logs = [child.log_path for child in sup.children]
        await eventually("every process to set it", lambda: all(
            "logger examples.wordcount at DEBUG for" in log.read_text() for log in logs), timeout=60)
        await eventually("every process to set it back", lambda: all(
            "logger examples.wordcount back to its own level" in log.read_text() for log in logs), timeout=60)
        assert obj(api, TOPOLOGIES, "wc")["metadata"]["generation"] == 1  # no spec change: nothing rebalanced
        assert status(api, "wc").get("rebalance") is None


def test_a_process_sets_a_logger_and_sets_it_back_to_its_own_level_when_the_time_is_up():
    named, root = logging.getLogger("squall.test.levels"), logging.getLogger()
    named.setLevel(logging.WARNING)
    before = root.level
    levels = LogLevels()
    levels.set("squall.test.levels", "DEBUG", 10, now=0.0)
    levels.set("ROOT", "error", 5, now=0.0)
    assert named.level == logging.DEBUG and root.level == logging.ERROR
    levels.set("squall.test.levels", "INFO", 20, now=1.0)  # again: the new level and end, the same level to go back to
    assert levels.expire(4.0) == [] and named.level == logging.INFO
    assert levels.expire(5.0) == [""] and root.level == before
    assert levels.expire(20.0) == [] and levels.expire(21.0) == ["squall.test.levels"]
    assert named.level == logging.WARNING and levels.overridden() == {}
    with pytest.raises(ValueError, match="'LOUD' is not a log level"):
        levels.set("x", "LOUD", 1, now=0.0)


def test_the_annotation_keeps_only_what_parses_and_is_not_over():
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 12, 2, tzinfo=UTC)
    kept = log_levels.Override(logger="ROOT", level="DEBUG", until=now + timedelta(seconds=30))
    over = log_levels.Override(logger="a", level="INFO", until=now - timedelta(seconds=1))
    text = log_levels.dump([kept, over])
    assert log_levels.active(log_levels.parse(text), now) == [kept]
    assert log_levels.parse("not json") == [] and log_levels.parse('{"x": {"level": "LOUD", "until": "x"}}') == []


def test_a_rebalance_s_progress_as_read_from_the_status():
    from squall.cli.manage import progress

    def topology(**status: object) -> dict:
        return {"metadata": {"generation": 3}, "status": status}

    ready = {"type": "Ready", "status": "True", "reason": "AllPodsReady"}
    assert progress(topology(observedGeneration=2, conditions=[ready]), 3) == ("waiting for the operator", None)
    draining = topology(observedGeneration=3, ready="4/6", rebalance={"step": "Draining", "target": "ab12"})
    assert progress(draining, 3) == ("Draining to plan ab12 (4/6 pods ready)", None)
    assert progress(topology(observedGeneration=3, ready="6/6", conditions=[ready]), 3) == (
        "Rebalanced: Ready, 6/6 pods ready", True)
    refused = {"type": "Degraded", "status": "True", "reason": "SwitchRefused", "message": "no module x"}
    assert progress(topology(observedGeneration=3, conditions=[refused]), 3) == ("refused: no module x", False)
    invalid = {"type": "Degraded", "status": "True", "reason": "InvalidSpec", "message": "bad"}
    assert progress(topology(observedGeneration=3, phase="Failed", conditions=[invalid]), 3) == ("refused: bad", False)
