"""A Topology's status as pure functions of its spec, its StatefulSets and its previous status."""

from __future__ import annotations

from typing import Any

import pytest

from squall.topology.spec import TopologySpec
from squall_operator import status
from squall_operator.status import Rollout, compute, failed, merge_patch, transition, with_error

SPEC = TopologySpec.from_dict({"name": "wc", "workers": 2, "ackers": 1,
                               "spouts": [{"name": "s", "className": "m:S"}]})
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"


def sts(*, replicas: int, ready: int | None = None, updated: int | None = None, generation: int = 1,
        observed: int | None = 1, revisions: tuple[str, str] = ("r1", "r1"), wanted: int | None = None) -> dict:
    """A StatefulSet as the API server shows it (``observed=None``: its controller has not seen it yet)."""
    current, update = revisions
    body: dict[str, Any] = {"metadata": {"generation": generation}, "spec": {"replicas": wanted or replicas},
                            "status": {"replicas": replicas, "readyReplicas": replicas if ready is None else ready,
                                       "updatedReplicas": replicas if updated is None else updated,
                                       "currentRevision": current, "updateRevision": update}}
    if observed is not None:
        body["status"]["observedGeneration"] = observed
    return body


def cond(st: dict, kind: str) -> tuple[str, str]:
    c = next(c for c in st["conditions"] if c["type"] == kind)
    return c["status"], c["reason"]


def test_rollout_reads_a_statefulset():
    assert Rollout.of(None, 0).done and Rollout.of(None, 0).all_ready  # ackers: 0 wants none
    assert not Rollout.of(None, 2).done
    assert Rollout.of(sts(replicas=2), 2).all_ready
    assert not Rollout.of(sts(replicas=2, observed=None), 2).done  # a fresh one: the controller is behind
    assert not Rollout.of(sts(replicas=2, generation=2, observed=1), 2).done
    # a new template, pods not replaced yet; OnDelete: the controller never moves currentRevision on, so
    # the pods made from the update revision are what counts
    assert not Rollout.of(sts(replicas=2, updated=1, revisions=("r1", "r2")), 2).done
    assert Rollout.of(sts(replicas=2, revisions=("r1", "r2")), 2).done
    assert not Rollout.of(sts(replicas=2), 3).done  # not scaled yet
    lost = Rollout.of(sts(replicas=2, ready=1), 2)
    assert lost.done and not lost.all_ready and (lost.ready, lost.updated) == (1, 2)


def test_a_new_topology_is_pending_until_every_pod_is_ready():
    st = compute(SPEC, workers=sts(replicas=2, observed=None), ackers=None, previous={}, generation=1, at=T0)
    assert st["phase"] == "Pending" and st["observedGeneration"] == 1
    assert cond(st, "Ready") == ("False", "PodsNotReady") and cond(st, "Progressing") == ("True", "RollingOut")
    assert cond(st, "Degraded") == ("False", "AsExpected")
    starting = compute(SPEC, workers=sts(replicas=2, ready=0), ackers=sts(replicas=1, ready=0), previous=st,
                       generation=1, at=T1)
    assert starting["phase"] == "Pending" and cond(starting, "Progressing") == ("True", "Starting")
    assert cond(starting, "Degraded") == ("False", "AsExpected")  # pods that never ran are not lost

    running = compute(SPEC, workers=sts(replicas=2), ackers=sts(replicas=1), previous=starting, generation=1, at=T1)
    assert running["phase"] == "Running"
    assert cond(running, "Ready") == ("True", "AllPodsReady")
    assert cond(running, "Progressing") == ("False", "RolloutComplete")
    assert (running["workers"], running["readyWorkers"], running["ackers"], running["readyAckers"]) == (2, 2, 1, 1)
    assert running["ready"] == "3/3"
    assert running["selector"] == ("app.kubernetes.io/name=squall,app.kubernetes.io/instance=wc,"
                                   "app.kubernetes.io/component=worker")


def test_a_running_topology_that_loses_a_pod_is_degraded():
    running = compute(SPEC, workers=sts(replicas=2), ackers=sts(replicas=1), previous={}, generation=1, at=T0)
    lost = compute(SPEC, workers=sts(replicas=2, ready=1), ackers=sts(replicas=1), previous=running, generation=1,
                   at=T1)
    assert lost["phase"] == "Running"
    assert cond(lost, "Degraded") == ("True", "PodsNotReady") and cond(lost, "Ready") == ("False", "PodsNotReady")
    assert next(c for c in lost["conditions"] if c["type"] == "Degraded")["message"] == \
        "1/2 workers and 1/1 ackers ready"


def test_a_spec_change_rolls_without_leaving_running():
    running = compute(SPEC, workers=sts(replicas=2), ackers=sts(replicas=1), previous={}, generation=1, at=T0)
    rolling = compute(SPEC, workers=sts(replicas=2, generation=2, observed=1), ackers=sts(replicas=1),
                      previous=running, generation=2, at=T1)
    assert rolling["phase"] == "Running" and rolling["observedGeneration"] == 2
    assert cond(rolling, "Progressing") == ("True", "RollingOut") and cond(rolling, "Degraded")[0] == "False"


def test_suspended_and_no_ackers():
    suspended = TopologySpec.from_dict({**SPEC.to_dict(), "suspended": True, "ackers": 0})
    st = compute(suspended, workers=sts(replicas=2), ackers=None, previous={}, generation=3, at=T0)
    assert st["phase"] == "Suspended" and st["ready"] == "2/2" and st["ackers"] == 0
    assert cond(st, "Ready") == ("True", "AllPodsReady")


def test_transition_times_move_only_when_a_condition_flips():
    first = compute(SPEC, workers=sts(replicas=2, ready=0), ackers=sts(replicas=1), previous={}, generation=1, at=T0)
    same = compute(SPEC, workers=sts(replicas=2, ready=1), ackers=sts(replicas=1), previous=first, generation=1,
                   at=T1)
    ready = compute(SPEC, workers=sts(replicas=2), ackers=sts(replicas=1), previous=same, generation=1, at=T1)
    times = {c["type"]: c["lastTransitionTime"] for c in same["conditions"]}
    assert times == {"Ready": T0, "Progressing": T0, "Degraded": T0}
    assert {c["type"]: c["lastTransitionTime"] for c in ready["conditions"]} == {
        "Ready": T1, "Progressing": T1, "Degraded": T0}


def test_an_invalid_spec_keeps_the_pods_figures_and_records_the_error():
    running = compute(SPEC, workers=sts(replicas=2), ackers=sts(replicas=1), previous={}, generation=1, at=T0)
    st = failed(running, "bolt 'b': unknown component 'x'", generation=2, at=T1)
    assert st["phase"] == "Failed" and st["observedGeneration"] == 2
    assert (st["readyWorkers"], st["ready"]) == (2, "3/3")
    assert cond(st, "Ready") == ("False", "InvalidSpec") and cond(st, "Degraded") == ("True", "InvalidSpec")
    assert next(c for c in st["conditions"] if c["type"] == "Ready")["message"] == "bolt 'b': unknown component 'x'"
    assert st["errors"] == [{"time": T1, "message": "bolt 'b': unknown component 'x'"}]
    assert failed(st, "bolt 'b': unknown component 'x'", generation=2, at=T1)["errors"] == st["errors"]


def test_a_topology_whose_first_apply_is_refused_is_pending_and_not_ready():
    """Its status held only Progressing and Degraded: no phase (an empty PHASE column in kubectl get topo),
    no Ready, no observedGeneration (found by the operator audit). Later refusals keep what the pods say."""
    first = status.apply_failed({}, "creating StatefulSet wc-worker failed: 403 forbidden", generation=1, at=T0)
    assert (first["phase"], first["observedGeneration"]) == ("Pending", 1)
    assert [(c["type"], c["status"], c["reason"]) for c in first["conditions"]] == [
        ("Ready", "False", "ApplyFailed"), ("Progressing", "False", "ApplyFailed"), ("Degraded", "True", "ApplyFailed")]
    running = compute(SPEC, workers=sts(replicas=2, ready=2), ackers=sts(replicas=1, ready=1), previous={},
                      generation=1, at=T0)
    later = status.apply_failed(running, "patching StatefulSet wc-worker failed: 403 forbidden", generation=2, at=T1)
    assert later["phase"] == "Running" and later["observedGeneration"] == 1
    assert next(c for c in later["conditions"] if c["type"] == "Ready")["reason"] == "AllPodsReady"


def test_recent_errors_are_bounded():
    errors: list[dict] = []
    for i in range(status.KEEP_ERRORS + 3):
        errors = with_error(errors, f"error {i}", at=T0)
    assert [e["message"] for e in errors] == [f"error {i}" for i in range(3, status.KEEP_ERRORS + 3)]


@pytest.mark.parametrize("before,after,event", [
    ({}, {"phase": "Pending"}, ("Normal", "Pending", "m")),
    ({"phase": "Pending"}, {"phase": "Running"}, ("Normal", "Running", "m")),
    ({"phase": "Running"}, {"phase": "Running"}, None),
    ({"phase": "Running"}, {"phase": "Suspended"}, ("Normal", "Suspended", "spouts deactivated; pods keep running")),
    ({"phase": "Running"}, {"phase": "Failed"}, ("Warning", "Failed", "m")),
])
def test_an_event_for_each_transition(before, after, event):
    ready = {"type": "Ready", "status": "False", "reason": "r", "message": "m"}
    assert transition(before | {"conditions": [ready]}, after | {"conditions": [ready]}) == event


def test_a_failed_topology_reports_each_new_problem():
    old = {"phase": "Failed", "conditions": [{"type": "Ready", "message": "one"}]}
    assert transition(old, {"phase": "Failed", "conditions": [{"type": "Ready", "message": "one"}]}) is None
    assert transition(old, {"phase": "Failed", "conditions": [{"type": "Ready", "message": "two"}]}) == (
        "Warning", "Failed", "two")


def test_merge_patch_removes_what_is_gone():
    assert merge_patch({"a": 1, "b": 2}, {"a": 3}) == {"a": 3, "b": None}


def pod(name: str, **st: Any) -> dict:
    return {"metadata": {"name": name}, "status": st}


def test_pod_problems_read_container_states_and_scheduling():
    config_error = pod("wc-worker-0", containerStatuses=[{"name": "worker", "state": {"waiting": {
        "reason": "CreateContainerConfigError", "message": 'secret "kafka" not found'}}}])
    unschedulable = pod("wc-worker-1", phase="Pending", conditions=[{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."}])
    starting = pod("wc-acker-0", containerStatuses=[{"name": "acker", "state": {"waiting": {
        "reason": "ContainerCreating"}}}])  # on its way: not a problem
    long_log = pod("wc-acker-1", containerStatuses=[{"name": "acker", "state": {"waiting": {
        "reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 2, "message": "x" * 1000}}}])
    problems = status.pod_problems([config_error, unschedulable, starting, long_log], at=T0)
    assert [(p.pod, p.reason) for p in problems] == [
        ("wc-worker-0", "CreateContainerConfigError"), ("wc-worker-1", "Unschedulable"),
        ("wc-acker-1", "CrashLoopBackOff")]
    assert str(problems[0]) == \
        "pod wc-worker-0: CreateContainerConfigError: container worker: secret \"kafka\" not found"
    assert "didn't match Pod's node affinity/selector" in problems[1].message
    assert len(problems[2].message) == status.MESSAGE_CHARS and problems[2].message.endswith("...")


def test_a_pod_deleted_on_a_node_that_does_not_answer_is_reported_once_its_deletion_is_long_overdue():
    """A StatefulSet's pod on a lost node stays Terminating until its kubelet confirms the stop, and is made
    again only then: its tasks stay missing, and the status said only PodsNotReady (found by the operator
    audit)."""
    lost = {**pod("wc-worker-1", phase="Running", containerStatuses=[{"name": "worker", "state": {"running": {}}}],
                  conditions=[{"type": "Ready", "status": "False"}]), "spec": {"nodeName": "node-b"}}
    lost["metadata"]["deletionTimestamp"] = T0  # its grace period's end
    assert status.pod_problems([lost], at="2026-01-01T00:00:59Z") == []  # the kubelet may still be stopping it
    problem, = status.pod_problems([lost], at=T1)
    assert (problem.pod, problem.reason) == ("wc-worker-1", "StuckTerminating")
    assert "node node-b" in problem.message and "kubectl delete pod wc-worker-1 --force" in problem.message
    st = compute(SPEC, workers=sts(replicas=2, ready=1), ackers=sts(replicas=1), previous={}, generation=1,
                 at=T1, problems=[problem])
    assert cond(st, "Degraded") == ("True", "StuckTerminating")


def test_a_pod_problem_degrades_even_a_topology_that_never_ran():
    problem = status.PodProblem("wc-worker-0", "ImagePullBackOff", "container worker: no such image")
    st = compute(SPEC, workers=sts(replicas=2, ready=0), ackers=sts(replicas=1, ready=0), previous={},
                 generation=1, at=T0, problems=[problem])
    assert st["phase"] == "Pending" and cond(st, "Degraded") == ("True", "ImagePullBackOff")
    assert st["errors"] == [{"time": T0, "message": str(problem)}]
    assert transition({}, st) == ("Warning", "ImagePullBackOff", str(problem))
    assert transition(st, st) is None  # the same problem: one event
    # every pod ready: a stale problem (a pod restarting once) does not degrade
    ok = compute(SPEC, workers=sts(replicas=2), ackers=sts(replicas=1), previous=st, generation=1, at=T1,
                 problems=[problem])
    assert cond(ok, "Degraded") == ("False", "AsExpected")


def test_component_errors_are_the_newest_few_across_pods():
    reported = {"wc-worker-0": [{"component": "split", "task": 3, "time": 1_700_000_000 + i, "error": f"E{i}"}
                                for i in range(4)],
                "wc-worker-1": [{"component": "count", "task": 5, "time": 1_700_000_010, "error": "boom\n  at"}]}
    rows = status.component_errors(reported)
    assert [r["error"] for r in rows] == ["E0", "E1", "E2", "E3", "boom at"][-status.KEEP_ERRORS:]
    assert rows[-1] == {"pod": "wc-worker-1", "component": "count", "task": 5, "time": "2023-11-14T22:13:30Z",
                        "error": "boom at"}
    st = compute(SPEC, workers=sts(replicas=2), ackers=sts(replicas=1), previous={}, generation=1, at=T0,
                 reported=rows)
    assert st["componentErrors"] == rows
    kept = compute(SPEC, workers=sts(replicas=2), ackers=sts(replicas=1), previous=st, generation=1, at=T1)
    assert kept["componentErrors"] == rows  # not read this time: kept


def test_a_rollout_that_makes_no_progress_for_ten_minutes_is_degraded():
    """A pod its StatefulSet cannot make (a ResourceQuota, Pod Security admission) shows only in the
    StatefulSet's Events: the Topology said Progressing RollingOut and Degraded AsExpected for ever,
    its pods waiting for the missing peer (found by the operator audit). As a Deployment's progress
    deadline, ten minutes of rollout without its end make it Degraded."""
    running = compute(SPEC, workers=sts(replicas=2), ackers=sts(replicas=1), previous={}, generation=1, at=T0)
    scaled = TopologySpec.from_dict({**SPEC.to_dict(), "workers": 3})
    short = sts(replicas=2, wanted=3)  # the third pod never made
    rolling = compute(scaled, workers=short, ackers=sts(replicas=1), previous=running, generation=2, at=T1)
    assert cond(rolling, "Progressing") == ("True", "RollingOut") and cond(rolling, "Degraded")[0] == "False"
    late = compute(scaled, workers=short, ackers=sts(replicas=1), previous=rolling, generation=2,
                   at="2026-01-01T00:11:00Z")
    assert cond(late, "Degraded") == ("True", "ProgressDeadlineExceeded")
    degraded = next(c for c in late["conditions"] if c["type"] == "Degraded")
    assert "2/3 worker and 1/1 acker pods exist" in degraded["message"] and "wc-worker" in degraded["message"]
    assert transition(rolling, late)[:2] == ("Warning", "ProgressDeadlineExceeded")
    done = compute(scaled, workers=sts(replicas=3), ackers=sts(replicas=1), previous=late, generation=2,
                   at="2026-01-01T00:12:00Z")
    assert cond(done, "Degraded")[0] == "False"
