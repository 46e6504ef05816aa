"""A Topology's status, computed by pure functions from its spec and its StatefulSets as read.

Phases: ``Pending`` until every pod is ready for the first time, then ``Running`` (also while a spec
change rolls the pods, or while pods are lost: ``Degraded`` says so); ``Suspended`` while
``spec.suspended``; ``Failed`` while the spec is invalid. Conditions follow Kubernetes' conventions:
``Ready``, ``Progressing`` and ``Degraded``, each with a reason and a message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from squall.contract import WORKER
from squall.topology.spec import TopologySpec
from squall_operator.render import Names, selector

PENDING, RUNNING, SUSPENDED, FAILED = "Pending", "Running", "Suspended", "Failed"
KEEP_ERRORS = 5
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # of every time in the status
TERMINATING_SECONDS = 60  # past a pod's deletion time (its grace period's end) before it counts as stuck
MESSAGE_CHARS = 400  # of a termination message or a component's error, in the status
# Status keys that describe pods; an invalid spec leaves the last known values in place.
POD_KEYS = ("workers", "readyWorkers", "ackers", "readyAckers", "ready", "selector", "specHash", "componentErrors",
            "rebalance")
KEEP: Any = object()  # compute(rebalance=KEEP): the rebalance in progress stays as the previous status says
# Seconds a rollout may take before it counts as stuck (a Deployment's progressDeadlineSeconds): the
# pods a StatefulSet could not make (a ResourceQuota, Pod Security admission) show only in its Events
PROGRESS_DEADLINE = 600
# A container waiting for one of these will not start by itself: someone must act
STUCK = {"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
         "CreateContainerError", "RunContainerError"}


@dataclass(frozen=True)
class PodProblem:
    """Why one pod does not run: a container stuck waiting, OOM-killed, or the pod unschedulable."""

    pod: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"pod {self.pod}: {self.reason}: {self.message}" if self.message else f"pod {self.pod}: {self.reason}"


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 3] + "..."


def pod_problems(pods: list[dict[str, Any]], *, at: str) -> list[PodProblem]:
    """The problems of ``pods`` as read from the API server at ``at``, the most telling one per pod: a pod
    still there long after its deletion was due (its node does not answer), the container state's reason
    (CrashLoopBackOff, ImagePullBackOff, ...) with the last termination message (the log tail, with
    ``terminationMessagePolicy: FallbackToLogsOnError``), OOMKilled, Unschedulable."""
    found = []
    for pod in pods:
        name = pod.get("metadata", {}).get("name", "?")
        problem = _stuck_terminating(pod, name, at) or _container_problem(pod, name) or _unschedulable(pod, name)
        if problem is not None:
            found.append(problem)
    return found


def _stuck_terminating(pod: dict[str, Any], name: str, at: str) -> PodProblem | None:
    """Deleted, and still there :data:`TERMINATING_SECONDS` after its deletion was due: only the kubelet of
    its node can confirm that it stopped, and its StatefulSet makes no pod of that name elsewhere until
    then, so its tasks are missing for as long as the node does not answer."""
    due = (pod.get("metadata") or {}).get("deletionTimestamp")
    if not due or (parse_time(at) - datetime.fromisoformat(due)).total_seconds() < TERMINATING_SECONDS:
        return None
    node = (pod.get("spec") or {}).get("nodeName") or "?"
    return PodProblem(name, "StuckTerminating", f"deleted, still there {TERMINATING_SECONDS} s after its grace "
                      f"period: node {node} does not confirm the stop, and the pod is made again only once it does "
                      f"or the Node object is deleted. If the node is gone, delete the Node (or, sure that the pod "
                      f"no longer runs, kubectl delete pod {name} --force --grace-period=0)")


def _container_problem(pod: dict[str, Any], name: str) -> PodProblem | None:
    st = pod.get("status") or {}
    for container in [*(st.get("initContainerStatuses") or ()), *(st.get("containerStatuses") or ())]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        last = (container.get("lastState") or {}).get("terminated") or {}
        terminated = (container.get("state") or {}).get("terminated") or last
        where = f"container {container.get('name')}"
        if terminated.get("reason") == "OOMKilled":
            return PodProblem(name, "OOMKilled", f"{where} ran out of memory (exit code "
                              f"{terminated.get('exitCode')}): raise its memory limit")
        if waiting.get("reason") in STUCK:
            detail = last.get("message") or waiting.get("message") or ""
            if last.get("exitCode") is not None:
                detail = f"exit code {last['exitCode']}" + (f": {detail}" if detail else "")
            return PodProblem(name, waiting["reason"], _clip(f"{where}: {detail}" if detail else where))
    return None


def _unschedulable(pod: dict[str, Any], name: str) -> PodProblem | None:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return PodProblem(name, "Unschedulable", _clip(scheduled.get("message") or ""))
    return None


def component_errors(reported: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The newest errors the components reported (``GET /errors`` of each pod, by pod), newest last."""
    rows = [{"pod": pod, "component": str(e.get("component")), "task": e.get("task"),
             "time": datetime.fromtimestamp(float(e.get("time") or 0), UTC).strftime(TIME_FORMAT),
             "error": _clip(str(e.get("error", "")))}
            for pod, errors in reported.items() for e in errors]
    return sorted(rows, key=lambda r: (r["time"], r["pod"]))[-KEEP_ERRORS:]


@dataclass(frozen=True)
class Rollout:
    """Where one StatefulSet stands against the number of pods the spec wants."""

    wanted: int
    replicas: int = 0
    ready: int = 0
    updated: int = 0
    done: bool = False  # every pod runs the current template and the wanted count, as far as the controller has seen

    @classmethod
    def of(cls, sts: dict[str, Any] | None, wanted: int) -> Rollout:
        """Read a live StatefulSet (None: it does not exist)."""
        if sts is None:
            return cls(wanted=wanted, done=wanted == 0)
        status = sts.get("status") or {}
        replicas, ready, updated = (int(status.get(k) or 0) for k in ("replicas", "readyReplicas", "updatedReplicas"))
        observed = int(status.get("observedGeneration") or 0) >= int(sts.get("metadata", {}).get("generation") or 0)
        # updated: pods made from the current template (the operator replaces the others: OnDelete, where
        # the controller never moves currentRevision on)
        done = observed and sts.get("spec", {}).get("replicas") == wanted and replicas == wanted and updated == wanted
        return cls(wanted=wanted, replicas=replicas, ready=ready, updated=updated, done=done)

    @property
    def all_ready(self) -> bool:
        return self.done and self.ready == self.wanted


def now() -> str:
    return datetime.now(UTC).strftime(TIME_FORMAT)


def parse_time(text: str) -> datetime:
    """A time of the status (:data:`TIME_FORMAT`)."""
    return datetime.strptime(text, TIME_FORMAT).replace(tzinfo=UTC)


def _condition(kind: str, *, status: bool, reason: str, message: str, generation: int | None,
               previous: list[dict[str, Any]], at: str) -> dict[str, Any]:
    text = "True" if status else "False"
    before = next((c for c in previous if c.get("type") == kind), None)
    # lastTransitionTime moves only when the status flips, as Kubernetes' conventions ask
    since = before["lastTransitionTime"] if before and before.get("status") == text and \
        before.get("lastTransitionTime") else at
    out = {"type": kind, "status": text, "reason": reason, "message": message, "lastTransitionTime": since}
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def with_error(errors: list[dict[str, Any]], message: str, *, at: str) -> list[dict[str, Any]]:
    """``errors`` with ``message`` appended (unless it repeats the last one), keeping the newest few."""
    if errors and errors[-1].get("message") == message:
        return list(errors)
    return [*errors, {"time": at, "message": message}][-KEEP_ERRORS:]


def failed(previous: dict[str, Any], message: str, *, generation: int | None, at: str) -> dict[str, Any]:
    """The status of a Topology whose spec is invalid: nothing was applied, pods are as they were."""
    conditions = previous.get("conditions") or []
    out = {k: previous[k] for k in POD_KEYS if k in previous}
    out |= {
        "phase": FAILED,
        "conditions": [
            _condition("Ready", status=False, reason="InvalidSpec", message=message, generation=generation,
                       previous=conditions, at=at),
            _condition("Progressing", status=False, reason="InvalidSpec",
                       message="fix the spec: nothing is applied until it is valid", generation=generation,
                       previous=conditions, at=at),
            _condition("Degraded", status=True, reason="InvalidSpec", message=message, generation=generation,
                       previous=conditions, at=at),
        ],
        "errors": with_error(previous.get("errors") or [], message, at=at),
    }
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def apply_failed(previous: dict[str, Any], message: str, *, generation: int | None, at: str) -> dict[str, Any]:
    """The status of a Topology whose children could not all be written (the API server refused one, or
    one is someone else's): its pods run on as they were, ``Ready`` says how they are, and the write is
    retried."""
    conditions = previous.get("conditions") or []
    kept = [c for c in conditions if c.get("type") not in ("Progressing", "Degraded")]
    first: dict[str, Any] = {}
    if not previous.get("phase"):  # nothing ever applied: no phase, no Ready said so
        first = {"phase": PENDING} | ({"observedGeneration": generation} if generation is not None else {})
    if not any(c.get("type") == "Ready" for c in kept):
        kept.append(_condition("Ready", status=False, reason="ApplyFailed", message="nothing of the spec is applied "
                               "yet", generation=generation, previous=conditions, at=at))
    return {**previous, **first, "conditions": [
        *kept,
        _condition("Progressing", status=False, reason="ApplyFailed",
                   message="the spec could not be applied; retried until it can", generation=generation,
                   previous=conditions, at=at),
        _condition("Degraded", status=True, reason="ApplyFailed", message=message, generation=generation,
                   previous=conditions, at=at),
    ], "errors": with_error(previous.get("errors") or [], message, at=at)}


def apply_failing(current: dict[str, Any]) -> bool:
    """Whether the last apply failed (:func:`apply_failed`): only a reconcile that applies clears that."""
    return any(c.get("type") == "Degraded" and c.get("reason") == "ApplyFailed"
               for c in current.get("conditions") or ())


def compute(spec: TopologySpec, *, workers: dict[str, Any] | None, ackers: dict[str, Any] | None,
            previous: dict[str, Any], generation: int | None, at: str, problems: Sequence[PodProblem] = (),
            reported: list[dict[str, Any]] | None = None, rebalance: dict[str, Any] | None = KEEP) -> dict[str, Any]:
    """The status of a valid Topology whose worker and acker StatefulSets read as ``workers``/``ackers``.

    ``previous`` is the current status (for the phase history, transition times and errors);
    ``generation`` is the spec generation the operator has acted on; ``problems`` are its pods'
    (:func:`pod_problems`), ``reported`` the components' own errors (:func:`component_errors`; None:
    not read this time, the previous ones stay), ``rebalance`` the rebalance in progress
    (:mod:`squall_operator.rebalance`; None: none; by default the previous status's).
    """
    if rebalance is KEEP:
        rebalance = previous.get("rebalance")
    w, a = Rollout.of(workers, spec.workers), Rollout.of(ackers, spec.num_ackers)
    all_ready, done = w.all_ready and a.all_ready, w.done and a.done
    was_running = previous.get("phase") == RUNNING
    counts = f"{w.ready}/{w.wanted} workers and {a.ready}/{a.wanted} ackers ready"
    conditions = previous.get("conditions") or []

    def cond(kind: str, status: bool, reason: str, message: str) -> dict[str, Any]:
        return _condition(kind, status=status, reason=reason, message=message, generation=generation,
                          previous=conditions, at=at)

    if rebalance and rebalance.get("refused"):
        progressing = cond("Progressing", False, "SwitchRefused", "the spec's plan cannot run in the pods; change it "
                           "(or the image) to try again")
    elif rebalance:
        progressing = cond("Progressing", True, rebalance["step"],
                           f"{rebalance['step'].lower()} to plan {rebalance['target']} since {rebalance['started']} "
                           f"(upgradeStrategy {rebalance['strategy']})")
    elif not done:
        progressing = cond("Progressing", True, "RollingOut",
                           f"rolling out: {w.updated}/{w.wanted} workers and {a.updated}/{a.wanted} ackers updated")
    elif not all_ready and not was_running:
        progressing = cond("Progressing", True, "Starting", counts)
    else:
        progressing = cond("Progressing", False, "RolloutComplete", "every pod runs the current spec")
    degraded = done and not all_ready and was_running and not rebalance  # a rebalance's pods are unready on purpose
    degraded_reason, degraded_message = ("PodsNotReady", counts) if degraded else ("AsExpected", counts)
    errors = list(previous.get("errors") or [])
    stuck = progressing["status"] == "True" and not done and \
        (parse_time(at) - parse_time(progressing["lastTransitionTime"])).total_seconds() >= PROGRESS_DEADLINE
    if rebalance and rebalance.get("refused"):
        degraded, degraded_reason, degraded_message = True, "SwitchRefused", rebalance["refused"]
        errors = with_error(errors, degraded_message, at=at)
    elif stuck and not problems:
        degraded, degraded_reason = True, "ProgressDeadlineExceeded"
        degraded_message = (f"{w.replicas}/{w.wanted} worker and {a.replicas}/{a.wanted} acker pods exist, "
                            f"{w.updated} and {a.updated} from the current template, after "
                            f"{PROGRESS_DEADLINE // 60} min: `kubectl describe statefulset` of "
                            f"{Names(spec.name).worker} and {Names(spec.name).acker} shows why a pod is not "
                            "made (a ResourceQuota, Pod Security admission)")
        errors = with_error(errors, degraded_message, at=at)
    elif problems and not all_ready:
        # a pod that cannot run is reported at once, whether the topology ever ran or not
        degraded, degraded_reason = True, problems[0].reason
        degraded_message = "; ".join(str(p) for p in problems[:3]) + (
            f" (and {len(problems) - 3} more pods)" if len(problems) > 3 else "")
        errors = with_error(errors, degraded_message, at=at)
    if spec.suspended:
        phase = SUSPENDED
    elif all_ready or was_running:
        phase = RUNNING
    else:
        phase = PENDING
    out = {
        "phase": phase,
        "workers": w.replicas,
        "readyWorkers": w.ready,
        "ackers": a.wanted,
        "readyAckers": a.ready,
        "ready": f"{w.ready + a.ready}/{w.wanted + a.wanted}",
        "selector": ",".join(f"{k}={v}" for k, v in selector(spec.name, component=WORKER).items()),
        "specHash": spec.fingerprint(),
        "conditions": [
            # pods ready on a plan they refused to leave do not run the current spec
            cond("Ready", False, "SwitchRefused", rebalance["refused"]) if rebalance and rebalance.get("refused")
            else cond("Ready", all_ready, "AllPodsReady" if all_ready else "PodsNotReady", counts),
            progressing,
            cond("Degraded", degraded, degraded_reason, degraded_message),
        ],
        "errors": errors,
    }
    if rebalance:
        out["rebalance"] = rebalance
    kept = previous.get("componentErrors") if reported is None else reported
    if kept:
        out["componentErrors"] = kept
    if generation is not None:
        out["observedGeneration"] = generation
    return out


def transition(previous: dict[str, Any], current: dict[str, Any]) -> tuple[str, str, str] | None:
    """The Event (type, reason, message) to post when the phase changes, a Failed topology's message
    does, or pods start failing (a Warning with the pods' reason); None otherwise."""
    degraded = next((c for c in current.get("conditions", ()) if c["type"] == "Degraded"), {})
    if degraded.get("reason") not in ("PodsNotReady", "AsExpected", "InvalidSpec", None):
        before = next((c for c in previous.get("conditions") or () if c.get("type") == "Degraded"), {})
        if (before.get("reason"), before.get("message")) != (degraded["reason"], degraded.get("message")):
            return "Warning", degraded["reason"], degraded.get("message", "")
    phase = current.get("phase")
    ready = next((c for c in current.get("conditions", ()) if c["type"] == "Ready"), {})
    message = ready.get("message", "")
    if phase == previous.get("phase"):
        before = next((c for c in previous.get("conditions") or () if c.get("type") == "Ready"), {})
        if phase != FAILED or before.get("message") == message:
            return None
    if phase == FAILED:
        return "Warning", "Failed", message
    if phase == SUSPENDED:
        return "Normal", SUSPENDED, "spouts deactivated; pods keep running"
    return "Normal", str(phase), message


def merge_patch(previous: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch from ``previous`` to ``current`` (top-level keys: the status is written whole)."""
    return {**{k: None for k in previous if k not in current}, **current}

