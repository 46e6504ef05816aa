"""A spec change as Storm's ``rebalance -w``, decided step by step by a pure function of the pods (their
template, and what their processes say) and the rebalance in progress."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from squall.process.control import ProcessState
from squall.topology.spec import TopologySpec
from squall_operator.rebalance import DRAINING, REPLACING, SWITCHING, TIME_FORMAT, Pod, decide, refused

BASE = {"name": "wc", "workers": 2, "messageTimeoutSeconds": 20, "spouts": [{"name": "s", "className": "m:S"}]}
OLD, NEW = TopologySpec.from_dict(BASE), TopologySpec.from_dict({**BASE, "workers": 3})
TEMPLATES = {"worker": "t1", "acker": "t1"}
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def state(fingerprint: str, *, held: bool = False, pending: int = 0, in_flight: int = 0, member: bool = True,
          active: bool | None = None) -> ProcessState:
    return ProcessState(fingerprint=fingerprint, active=not held if active is None else active, held=held,
                        connected=True, pending=pending, in_flight=in_flight, member=member)


def pods(spec: TopologySpec, *, template: str = "t1", **kwargs) -> list[Pod]:
    """The pods of ``spec``, each answering with its fingerprint (``kwargs``: the state's other fields)."""
    return [Pod(f"wc-{role}-{i}", role, i, template, state(spec.fingerprint(), **kwargs))
            for role, n in (("worker", spec.workers), ("acker", spec.num_ackers)) for i in range(n)]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_nothing_to_do_when_every_pod_runs_the_spec_and_its_template():
    decision = decide(spec=OLD, templates=TEMPLATES, pods=pods(OLD), previous=None, now=T0)
    assert decision.rebalance is None and decision.apply and not decision.again and not decision.events
    # a fresh topology, no pod yet: apply
    assert decide(spec=OLD, templates=TEMPLATES, pods=[], previous=None, now=T0).apply


def test_a_rescale_drains_then_switches_the_kept_pods_in_place_and_ends_when_the_new_pods_run():
    running = pods(OLD, pending=40)
    first = decide(spec=NEW, templates=TEMPLATES, pods=running, previous=None, now=T0)
    # step 1: every spout stops, nothing new is applied while the old spec's trees drain
    assert first.rebalance["step"] == DRAINING and first.rebalance["target"] == NEW.fingerprint()
    assert not first.apply and first.again and not first.delete and not first.switch
    assert set(first.deactivate) == {p.name for p in running}
    assert [e[1] for e in first.events] == [DRAINING]

    held = pods(OLD, held=True, pending=3)
    waiting = decide(spec=NEW, templates=TEMPLATES, pods=held, previous=first.rebalance, now=at(1))
    assert waiting.rebalance["step"] == DRAINING and not waiting.apply and not waiting.deactivate
    assert not waiting.events

    # drained: the new children go out, the kept pods switch; nothing is deleted (same template)
    drained = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD, held=True), previous=waiting.rebalance, now=at(2))
    assert drained.rebalance["step"] == SWITCHING and drained.apply and drained.again
    assert set(drained.switch) == {p.name for p in held} and not drained.delete
    assert [e[:2] for e in drained.events] == [("Normal", "Drained")]

    # the kept pods restart their engines (no answer), the new ones are not made yet: not over
    silent = [Pod(p.name, p.role, p.ordinal, "t1") for p in held]
    assert decide(spec=NEW, templates=TEMPLATES, pods=silent, previous=drained.rebalance, now=at(3)).again
    done = decide(spec=NEW, templates=TEMPLATES, pods=pods(NEW), previous=drained.rebalance, now=at(9))
    assert done.rebalance is None and not done.again and done.apply
    assert [e[:2] for e in done.events] == [("Normal", "Rebalanced")] and "9 s" in done.events[0][2]


def test_a_drain_that_does_not_finish_switches_after_the_message_timeout_with_a_warning():
    first = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD, pending=5), previous=None, now=T0)
    stuck = pods(OLD, held=True, pending=5)
    assert not decide(spec=NEW, templates=TEMPLATES, pods=stuck, previous=first.rebalance, now=at(19)).apply
    late = decide(spec=NEW, templates=TEMPLATES, pods=stuck, previous=first.rebalance, now=at(20))
    assert late.apply and late.rebalance["step"] == SWITCHING
    assert late.events[0][:2] == ("Warning", "DrainTimedOut") and "20 tree(s)" in late.events[0][2]


def test_items_queued_anywhere_keep_the_drain_waiting():
    first = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD), previous=None, now=T0)
    busy = pods(OLD, held=True, in_flight=1)
    assert not decide(spec=NEW, templates=TEMPLATES, pods=busy, previous=first.rebalance, now=at(1)).apply


def test_a_new_template_replaces_pods_after_the_drain_and_a_scale_down_leaves_surplus_pods_to_the_statefulset():
    smaller = TopologySpec.from_dict({**BASE, "workers": 1, "image": "squall:2"})  # ackers follow: 1
    new_templates = {"worker": "t2", "acker": "t2"}
    first = decide(spec=smaller, templates=new_templates, pods=pods(OLD), previous=None, now=T0)
    assert first.rebalance["step"] == DRAINING
    switched = decide(spec=smaller, templates=new_templates, pods=pods(OLD, held=True), previous=first.rebalance,
                      now=at(1))
    assert switched.apply and not switched.switch
    assert set(switched.delete) == {"wc-worker-0", "wc-acker-0"}  # -1 of each: the scale-down removes them


def test_recreate_replaces_every_outdated_pod_at_once_without_draining():
    recreate = TopologySpec.from_dict({**BASE, "workers": 3, "upgradeStrategy": "Recreate"})
    decision = decide(spec=recreate, templates=TEMPLATES, pods=pods(OLD, pending=50), previous=None, now=T0)
    assert decision.rebalance["step"] == REPLACING and decision.apply and not decision.deactivate
    assert set(decision.delete) == {p.name for p in pods(OLD)} and not decision.switch


def test_an_abandoned_rebalance_lets_the_held_spouts_go_again():
    """The spec went back to what the pods run while they were draining: nothing to move, spouts resume."""
    first = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD), previous=None, now=T0)
    back = decide(spec=OLD, templates=TEMPLATES, pods=pods(OLD, held=True), previous=first.rebalance, now=at(1))
    assert back.rebalance is None and set(back.activate) == {p.name for p in pods(OLD)}


def test_a_pod_without_the_template_hash_is_outdated():
    old_pods = [Pod(p.name, p.role, p.ordinal, None, p.state) for p in pods(OLD)]
    decision = decide(spec=OLD, templates=TEMPLATES, pods=old_pods, previous=None, now=T0)
    assert decision.rebalance["step"] == DRAINING


def test_the_rebalance_in_status_keeps_its_start():
    first = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD), previous=None, now=T0)
    assert first.rebalance["started"] == T0.strftime(TIME_FORMAT)
    later = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD, held=True, pending=1), previous=first.rebalance,
                   now=at(5))
    assert later.rebalance["started"] == first.rebalance["started"]


def test_a_pod_that_never_answers_is_waited_for_a_grace_period_only():
    """It cannot be switched (its gRPC port unreachable): it follows its spec file by itself."""
    first = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD), previous=None, now=T0)
    drained = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD, held=True), previous=first.rebalance, now=at(1))
    some_silent = [p if p.role == "worker" else Pod(p.name, p.role, p.ordinal, p.template) for p in pods(NEW)]
    waiting = decide(spec=NEW, templates=TEMPLATES, pods=some_silent, previous=drained.rebalance, now=at(60))
    assert waiting.rebalance is not None and waiting.again and not waiting.events
    given_up = decide(spec=NEW, templates=TEMPLATES, pods=some_silent, previous=drained.rebalance, now=at(61))
    assert given_up.rebalance is None and "3 of 6 pods answer" in given_up.events[0][2]
    assert given_up.events[0][:2] == ("Warning", "RebalanceIncomplete")  # was a Normal Rebalanced


def test_a_running_pod_that_does_not_answer_keeps_the_drain_waiting_until_the_message_timeout():
    """Its process may be busy in a long bolt call, holding trees: it counted as drained, the switch
    dropped its trees, and the Event said no tree was in flight (found by the operator audit). A pod
    that does not run (pending, gone) holds none."""
    first = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD), previous=None, now=T0)
    busy = [p if p.name != "wc-worker-1" else Pod(p.name, p.role, p.ordinal, p.template, running=True)
            for p in pods(OLD, held=True)]
    waiting = decide(spec=NEW, templates=TEMPLATES, pods=busy, previous=first.rebalance, now=at(5))
    assert waiting.rebalance["step"] == DRAINING and not waiting.apply
    late = decide(spec=NEW, templates=TEMPLATES, pods=busy, previous=first.rebalance, now=at(20))
    assert late.events[0][:2] == ("Warning", "DrainTimedOut") and "did not answer (wc-worker-1)" in late.events[0][2]
    gone = [p if p.name != "wc-worker-1" else Pod(p.name, p.role, p.ordinal, p.template)
            for p in pods(OLD, held=True)]
    drained = decide(spec=NEW, templates=TEMPLATES, pods=gone, previous=first.rebalance, now=at(5))
    assert drained.rebalance["step"] == SWITCHING and drained.events[0][1] == "Drained"


def test_a_drain_counts_its_time_from_when_this_operator_saw_it():
    """An operator restarted mid-drain after more than the message timeout found the time up, and
    switched processes whose holds had lapsed (their spouts emitting again) without deactivating them
    (found by the operator audit): they are deactivated, and drained for the message timeout again."""
    first = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD), previous=None, now=T0)
    lapsed = pods(OLD, pending=30)  # the holds lapsed while no operator ran
    back = decide(spec=NEW, templates=TEMPLATES, pods=lapsed, previous=first.rebalance, now=at(300),
                  watched_since=at(300))
    assert back.rebalance["step"] == DRAINING and not back.apply and set(back.deactivate) == {p.name for p in lapsed}
    held = pods(OLD, held=True, pending=30)
    assert not decide(spec=NEW, templates=TEMPLATES, pods=held, previous=first.rebalance, now=at(319),
                      watched_since=at(300)).apply
    assert decide(spec=NEW, templates=TEMPLATES, pods=held, previous=first.rebalance, now=at(320),
                  watched_since=at(300)).apply


def test_a_refused_switch_is_not_sent_again_and_the_held_spouts_go_again_on_their_plan():
    """A SWITCH every process refuses (a class the image lacks passes the webhook, which imports nothing)
    was sent again about once a second for ever, the spouts held, with nothing in the status (found by
    the operator audit)."""
    first = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD), previous=None, now=T0)
    switching = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD, held=True), previous=first.rebalance, now=at(1))
    stopped = refused(switching.rebalance, "wc-worker-0", "cannot import module 'app'")
    assert "wc-worker-0 refused to switch" in stopped["refused"] and "cannot import" in stopped["refused"]
    after = decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD, held=True), previous=stopped, now=at(2))
    assert after.rebalance == stopped and not after.switch and not after.delete and not after.deactivate
    assert not after.apply  # nothing more of the spec: a scale it has would take pods the old plan needs
    assert set(after.activate) == {p.name for p in pods(OLD)}
    # a new image (a new template) may have the class: a rebalance of its own, drained first (the spouts
    # went again meanwhile: replacing the pods at once dropped their trees; found by the review)
    tried = decide(spec=NEW, templates={"worker": "t2", "acker": "t2"}, pods=pods(OLD, pending=40), previous=stopped,
                   now=at(3))
    assert "refused" not in tried.rebalance and tried.rebalance["step"] == DRAINING and not tried.delete
    assert tried.rebalance["started"] == at(3).strftime(TIME_FORMAT) and set(tried.deactivate) == {
        p.name for p in pods(OLD)}
    # another spec: a rebalance of its own
    other = TopologySpec.from_dict({**BASE, "workers": 4})
    fresh = decide(spec=other, templates=TEMPLATES, pods=pods(OLD, held=True), previous=stopped, now=at(4))
    assert fresh.rebalance["target"] == other.fingerprint() and "refused" not in fresh.rebalance


def test_a_refused_switch_that_gave_a_role_a_new_template_stays_refused_until_the_templates_change_again():
    """The spec that a process refuses also gave the ackers a new template (podTemplate, resources).
    Nothing of a refused switch is applied, so the ackers keep their old template, and each reconcile
    took that for a new image that may have what the spec needs: it drained, deleted the ackers and was
    refused again, twice a second (found by the operator audit)."""
    changed = {"worker": "t1", "acker": "t2"}
    first = decide(spec=NEW, templates=changed, pods=pods(OLD), previous=None, now=T0)
    switching = decide(spec=NEW, templates=changed, pods=pods(OLD, held=True), previous=first.rebalance, now=at(1))
    assert set(switching.delete) == {"wc-acker-0", "wc-acker-1"} and switching.rebalance["templates"] == changed
    stopped = refused(switching.rebalance, "wc-worker-0", "cannot import module 'app'")
    after = decide(spec=NEW, templates=changed, pods=pods(OLD), previous=stopped, now=at(1.5))
    assert after.rebalance == stopped and not after.apply and not after.deactivate and not after.delete
    newer = decide(spec=NEW, templates={"worker": "t3", "acker": "t3"}, pods=pods(OLD), previous=stopped, now=at(2))
    assert newer.rebalance["step"] == DRAINING and "refused" not in newer.rebalance
    # refused by an operator that did not keep the templates: tried again when a pod's template is not the spec's
    legacy = {k: v for k, v in stopped.items() if k != "templates"}
    assert decide(spec=NEW, templates=TEMPLATES, pods=pods(OLD), previous=legacy, now=at(3)).rebalance == legacy


def test_a_pod_counts_as_running_only_while_its_process_container_runs():
    """A pod crash-looping is in phase Running: it was taken for a busy process holding trees, so every
    drain waited the whole message timeout for it (found by the review)."""
    from squall_operator.processes import running

    def pod(state: dict) -> dict:
        return {"status": {"phase": "Running", "containerStatuses": [
            {"name": "log-shipper", "state": {"running": {}}}, {"name": "worker", "state": state}]}}

    assert running(pod({"running": {"startedAt": "2026-01-01T00:00:00Z"}}), "worker")
    assert not running(pod({"waiting": {"reason": "CrashLoopBackOff"}}), "worker")
    assert not running({"status": {"phase": "Pending"}}, "worker")
