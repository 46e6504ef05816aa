"""A spec change carried out as Storm's ``rebalance -w``: deactivate, drain, switch, activate.

:func:`decide` is pure: from the pods (the template each was made from, and what its process says of
itself over :mod:`squall.process.control`) and the rebalance in progress (``status.rebalance``), it
says what to do now; the operator does it and comes back a moment later, until no pod is outdated.

A pod is outdated when it was made from another template (image, resources, podTemplate... changed:
it must be replaced), when its process runs another plan (it can switch in place), or when the new
spec has no place for it (fewer pods: its StatefulSet removes it when scaled down).

``upgradeStrategy: Drain`` (the default):

1. **Draining.** Every process deactivates its spouts; the operator waits until no tree is in flight
   anywhere, at most ``messageTimeoutSeconds``. Nothing new is applied meanwhile.
2. **Switching.** The new children are applied (the spec's ConfigMap, the StatefulSets' replicas and
   templates); pods whose template changed are deleted (their StatefulSet makes them again at once),
   the others switch to the new spec in place; pods beyond the new counts go with the scale-down.
   Each process activates its spouts once connected to every peer of the new plan.

``upgradeStrategy: Recreate``: no drain; every outdated pod is deleted at once and made again.

The rebalance is over when every pod of the new spec answers with its plan. A pod that does not answer
the operator (its gRPC port unreachable) is waited for :data:`ANSWER_GRACE` at most: a process that
cannot reach its peers when its spec file changes to another plan switches to it by itself
(:mod:`squall.process.pod`), and Kubernetes updates that file from the ConfigMap.

A drain counts as done only when every running pod answered that it holds nothing: a pod whose process
is too busy to answer (a long bolt call) may hold trees. Before the new children are applied for an
in-place switch, a process is asked whether it could run the new spec (``CHECK``: a class its image
lacks passes validation, which imports nothing). If it could not, or a SWITCH is refused all the same,
the rebalance stops there (``refused``): nothing more is applied, the held spouts go again on the plan
they run, and the spec (or the image) must change before it is tried again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from squall.contract import ROLES, process_count
from squall.process.control import ProcessState
from squall.topology.spec import TopologySpec
from squall_operator.status import TIME_FORMAT, parse_time

DRAIN, RECREATE = "Drain", "Recreate"
DRAINING, SWITCHING, REPLACING = "Draining", "Switching", "Replacing"
ANSWER_GRACE = 60.0  # seconds after the switch that the pods of the new spec are given to answer with its plan


@dataclass(frozen=True)
class Pod:
    """One worker or acker pod as the operator found it."""

    name: str
    role: str
    ordinal: int
    template: str | None  # the hash of the template it was made from
    state: ProcessState | None = None  # what its process said; None: no answer (starting, stopping, unreachable)
    running: bool = False  # its pod runs, so its process could hold trees even when it does not answer


@dataclass(frozen=True)
class Decision:
    """What to do now. ``rebalance`` is the new ``status.rebalance`` (None: none in progress)."""

    rebalance: dict[str, Any] | None
    apply: bool = True  # write the rendered children (not while draining: the old spec keeps running)
    deactivate: tuple[str, ...] = ()  # pods whose spouts must stop
    delete: tuple[str, ...] = ()  # pods to replace
    switch: tuple[str, ...] = ()  # pods to switch to the new spec in place
    activate: tuple[str, ...] = ()  # pods whose spouts may go again
    again: bool = False  # come back soon: a step is under way
    events: tuple[tuple[str, str, str], ...] = field(default=())  # (type, reason, message) to post


def decide(*, spec: TopologySpec, templates: Mapping[str, str], pods: Sequence[Pod],
           previous: Mapping[str, Any] | None, now: datetime, watched_since: datetime | None = None) -> Decision:
    """What to do about ``pods`` for ``spec`` (whose pod templates hash to ``templates``, by role), with
    the rebalance ``previous`` in progress, at ``now``. ``watched_since``: when this operator first saw
    ``previous`` (its start, for one it began): a drain's time counts from then, since while no operator
    ran the processes' holds may have lapsed, and their spouts emitted again."""
    target = spec.fingerprint()
    wanted = {role: process_count(spec, role) for role in ROLES}

    def surplus(pod: Pod) -> bool:
        return pod.ordinal >= wanted[pod.role]

    def new_template(pod: Pod) -> bool:
        return pod.template != templates.get(pod.role)

    def other_spec(pod: Pod) -> bool:
        return pod.state is not None and pod.state.member and pod.state.fingerprint != target

    def held() -> tuple[str, ...]:  # the pods whose spouts a rebalance holds, to let go
        return tuple(p.name for p in pods if p.state is not None and p.state.held and p.state.member)

    outdated = [p for p in pods if surplus(p) or new_template(p) or other_spec(p)]
    current = dict(previous) if previous and previous.get("target") == target else None
    if not outdated:
        # Over once every pod of the new spec answers with its plan; one that stays silent (unreachable:
        # it follows its spec file by itself) is waited for ANSWER_GRACE after the switch at most.
        answered = [p for p in pods if p.state is not None and p.state.fingerprint == target]
        if current is not None and len(answered) < sum(wanted.values()) and \
                (now - parse_time(current.get("switched", current["started"]))).total_seconds() < ANSWER_GRACE:
            return Decision(rebalance=current, again=True)
        complete = len(answered) >= sum(wanted.values())  # else some pod is silent, or was never made
        events = () if previous is None else (
            ("Normal" if complete else "Warning", "Rebalanced" if complete else "RebalanceIncomplete",
             f"{len(answered)} of {sum(wanted.values())} pods answer with plan {target}, "
             f"{(now - parse_time(previous['started'])).total_seconds():.0f} s after it began"
             + ("" if complete else f"; the others were given {ANSWER_GRACE:.0f} s")),)
        return Decision(rebalance=None, activate=held(), events=events)

    events: list[tuple[str, str, str]] = []
    if current is not None and current.get("refused"):
        # Tried again only with other templates than the refused switch's (a new image may have what the
        # spec needs). Not against the pods': nothing of that switch was applied, so a role whose template
        # it changed keeps its old pods, and every try drained, deleted them and was refused again.
        tried = current.get("templates")  # absent from a switch refused before they were kept
        if (tried == dict(templates)) if tried is not None else not any(new_template(p) for p in outdated):
            return Decision(rebalance=current, apply=False, activate=held())  # the children stay as they are
        current = None  # the spouts went again meanwhile: a rebalance of its own, drained first
    if current is None:
        step = REPLACING if spec.upgrade_strategy == RECREATE else DRAINING
        current = {"target": target, "strategy": spec.upgrade_strategy, "step": step,
                   "started": now.strftime(TIME_FORMAT)}
        if step == REPLACING:
            current["switched"] = current["started"]
        if step == DRAINING:
            events.append(("Normal", DRAINING, f"moving {len(outdated)} outdated pod(s) to plan {target}: spouts "
                           f"deactivated, waiting for the trees in flight (at most {spec.message_timeout_seconds} s)"))
        else:
            events.append(("Normal", REPLACING, f"replacing {len(outdated)} outdated pod(s) at once, without "
                           "draining (upgradeStrategy Recreate)"))
    began = parse_time(current["started"])
    waited = (now - (began if watched_since is None else max(began, watched_since))).total_seconds()

    if current["step"] == REPLACING:
        return Decision(rebalance=current, delete=tuple(p.name for p in outdated if not surplus(p)), again=True,
                        events=tuple(events))

    if current["step"] == DRAINING:
        answering = [p for p in pods if p.state is not None]
        silent = [p.name for p in pods if p.state is None and p.running]  # busy, perhaps holding trees
        drained = not silent and all(p.state.held and p.state.idle for p in answering if p.state is not None)
        if not drained and waited < spec.message_timeout_seconds:
            return Decision(rebalance=current, apply=False, again=True, events=tuple(events),
                            deactivate=tuple(p.name for p in answering if p.state is not None and not p.state.held))
        current = {**current, "step": SWITCHING, "switched": now.strftime(TIME_FORMAT), "templates": dict(templates)}
        if drained:
            events.append(("Normal", "Drained", f"no tree in flight after {waited:.0f} s: switching to plan {target}"))
        else:
            pending = sum(p.state.pending for p in answering if p.state is not None)
            unheard = f" and {len(silent)} running pod(s) did not answer ({', '.join(silent)})" if silent else ""
            events.append(("Warning", "DrainTimedOut", f"{pending} tree(s) still in flight{unheard} after "
                           f"{spec.message_timeout_seconds} s: switching anyway; they are dropped (a spout that "
                           "replays from a durable source emits them again)"))

    replace = tuple(p.name for p in outdated if new_template(p) and not surplus(p))
    switch = tuple(p.name for p in outdated if not new_template(p) and not surplus(p) and other_spec(p))
    return Decision(rebalance=current, delete=replace, switch=switch, again=True, events=tuple(events))


def refused(rebalance: Mapping[str, Any], pod: str, reason: str) -> dict[str, Any]:
    """``rebalance`` stopped by ``pod``'s process refusing its SWITCH with ``reason``."""
    return {**rebalance, "refused": f"{pod} refused to switch to plan {rebalance['target']}: {reason}; the pods "
                                    "run on the plan they had: change the spec (or the image) to try again"}
