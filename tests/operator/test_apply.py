"""Idempotent apply: create what is missing, patch what differs, delete what is owned and no longer
rendered, and write nothing when the cluster already holds what is rendered."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from squall.topology.spec import TopologySpec
from squall_operator.apply import APPLIED_HASH, ApplyError, Ref, apply, covers
from squall_operator.render import child_refs, render

SPEC = {"name": "wc", "workers": 2, "spouts": [{"name": "s", "className": "m:S"}]}


class MemoryKube:
    """Stands in for :class:`squall_operator.apply.Kube`: objects in a dict, with the API server's habit
    of adding fields (here: a status and a default) to what it stores."""

    def __init__(self, *, strict_apply: bool = False) -> None:
        # strict_apply: server-side applies, each stored as the whole object here, as a create or merge
        # patch is (the API server's merging of list items: e2e/test_cluster.py)
        self.strict_apply = strict_apply
        self.objects: dict[Ref, dict[str, Any]] = {}
        self.writes: list[str] = []

    def get(self, ref: Ref) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(ref))

    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(f"create {Ref.of(manifest)}")
        stored = copy.deepcopy(manifest) | {"status": {}}
        stored["metadata"]["uid"] = "123"
        self.objects[Ref.of(manifest)] = stored
        return copy.deepcopy(stored)

    def patch(self, ref: Ref, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(f"patch {ref}")
        self.objects[ref] = {**self.objects[ref], **copy.deepcopy(body)}
        return copy.deepcopy(self.objects[ref])

    def server_side_apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        ref = Ref.of(manifest)
        return self.patch(ref, manifest) if ref in self.objects else self.create(manifest)

    def delete(self, ref: Ref) -> bool:
        self.writes.append(f"delete {ref}")
        return self.objects.pop(ref, None) is not None


def manifests(**changes: Any) -> list[dict[str, Any]]:
    return render(TopologySpec.from_dict({**SPEC, **changes}), namespace="ns", image="squall:1")


def prune() -> list[Ref]:
    return [Ref(v, k, "ns", n) for v, k, n in child_refs("wc")]


def ours(live: dict[str, Any]) -> bool:
    """Every object is the Topology's."""
    return True


def test_covers_ignores_what_the_server_adds_but_not_what_differs():
    desired = {"spec": {"replicas": 2, "ports": [{"name": "grpc", "port": 7070}]}}
    assert covers({"spec": {"replicas": 2, "ports": [{"name": "grpc", "port": 7070, "protocol": "TCP"}],
                            "revisionHistoryLimit": 10}, "status": {}}, desired)
    assert not covers({"spec": {"replicas": 3, "ports": [{"name": "grpc", "port": 7070}]}}, desired)
    assert not covers({"spec": {"replicas": 2, "ports": []}}, desired)
    assert not covers({"spec": {"replicas": 2}}, desired)
    assert not covers({"spec": {"replicas": 2, "ports": [{"name": "grpc", "port": 7070}, {"name": "x"}]}}, desired)


def test_covers_with_extra_items_allows_list_items_someone_else_added_and_nothing_else():
    """Server-side apply keeps the items of another field manager (``kubectl set env``, a mutating
    webhook): they must not count as a difference, or every resync would apply again, forever."""
    desired = {"env": [{"name": "A", "value": "1"}, {"name": "C", "value": "3"}], "args": ["run", "-v"]}
    theirs = {"env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}, {"name": "C", "value": "3"}],
              "args": ["run", "-v"]}
    assert covers(theirs, desired, extra_items=True)
    assert not covers(theirs, desired)
    assert not covers({**theirs, "env": [{"name": "A", "value": "1"}]}, desired, extra_items=True)  # C removed
    assert not covers({**theirs, "env": [{"name": "A", "value": "9"}, {"name": "C", "value": "3"}]}, desired,
                      extra_items=True)
    assert not covers({**theirs, "args": ["run", "-v", "-x"]}, desired, extra_items=True)  # scalars: exact
    # a list that does not merge item by item is replaced whole by a forced apply: an item added to it
    # (an allow-all ingress rule in the NetworkPolicy) is a difference, repaired (found by the review)
    policy = {"ingress": [{"from": [{"podSelector": {"matchLabels": {"a": "b"}}}]}]}
    assert not covers({"ingress": [*policy["ingress"], {}]}, policy, extra_items=True)
    assert covers(policy, policy, extra_items=True)


def test_covers_compares_quantities_by_value():
    desired = {"resources": {"requests": {"cpu": "1000m", "memory": "1024Mi"}}}
    assert covers({"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}, desired)
    assert not covers({"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}, desired)
    assert not covers({"env": [{"name": "A", "value": "1"}]}, {"env": [{"name": "A", "value": "1.0"}]})


def test_apply_creates_then_writes_nothing_then_patches_only_what_changed():
    kube = MemoryKube()
    first = apply(kube, manifests(), prune=prune(), owned=ours)
    assert first.created == ["ConfigMap wc-spec", "ServiceAccount wc", "Service wc-worker", "StatefulSet wc-worker",
                             "Service wc-acker", "StatefulSet wc-acker", "PodDisruptionBudget wc-worker",
                             "PodDisruptionBudget wc-acker"]
    assert first.live[("StatefulSet", "wc-worker")]["status"] == {}

    kube.writes.clear()
    again = apply(kube, manifests(), prune=prune(), owned=ours)
    assert kube.writes == [] and not again.changed and again.summary() == "nothing to change"

    suspended = apply(kube, manifests(suspended=True), prune=prune(), owned=ours)
    assert kube.writes == ["patch ConfigMap wc-spec"] and suspended.patched == ["ConfigMap wc-spec"]


def test_server_side_apply_leaves_another_managers_list_items_and_applies_again_when_the_render_changes():
    """Before, an env var ``kubectl set env`` added to the worker StatefulSet (kept by every server-side
    apply) made each resync apply it again, forever. A render that drops an item must still be applied
    (the server then removes it), though the live list would still cover the smaller one."""
    kube = MemoryKube(strict_apply=True)
    apply(kube, manifests(), prune=prune(), owned=ours)
    ref = Ref("apps/v1", "StatefulSet", "ns", "wc-worker")
    worker = kube.objects[ref]["spec"]["template"]["spec"]["containers"][0]
    worker["env"].append({"name": "HTTP_PROXY", "value": "http://proxy:3128"})  # kubectl set env
    kube.writes.clear()
    assert not apply(kube, manifests(), prune=prune(), owned=ours).changed and kube.writes == []

    fewer = manifests()
    rendered = next(m for m in fewer if Ref.of(m) == ref)
    dropped = rendered["spec"]["template"]["spec"]["containers"][0]["env"].pop()
    assert any(e == dropped for e in worker["env"])  # the live list still covers the render without it
    before = kube.objects[ref]["metadata"]["annotations"][APPLIED_HASH]
    assert apply(kube, fewer, prune=prune(), owned=ours).patched == ["StatefulSet wc-worker"]
    assert kube.writes == ["patch StatefulSet wc-worker"]
    assert kube.objects[ref]["metadata"]["annotations"][APPLIED_HASH] != before


def test_apply_deletes_only_its_own_children_that_are_no_longer_rendered():
    kube = MemoryKube()
    apply(kube, manifests(), prune=prune(), owned=ours)
    foreign = Ref("v1", "Service", "ns", "wc-acker")

    done = apply(kube, manifests(ackers=0), prune=prune(), owned=lambda live: Ref.of(live) != foreign)
    assert done.deleted == ["StatefulSet wc-acker", "PodDisruptionBudget wc-acker"]
    assert foreign in kube.objects  # not ours: left alone
    # ackers: 0 in the spec; the worker pods' template stays as it was (a rebalance switches them in place)
    assert done.patched == ["ConfigMap wc-spec"]
    kube.writes.clear()
    done = apply(kube, manifests(ackers=0), prune=prune(), owned=lambda live: True)
    assert done.deleted == ["Service wc-acker"] and kube.writes == ["delete Service wc-acker"]


def test_apply_neither_patches_nor_adopts_an_object_of_the_same_name_that_is_someone_elses():
    """A ServiceAccount ``wc`` of another app (annotated for a cloud role, owned by its Deployment)
    before Topology ``wc`` is made: taken over, it would lose its owner and go with the Topology."""
    kube = MemoryKube()
    theirs = Ref("v1", "ServiceAccount", "ns", "wc")
    kube.objects[theirs] = {"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": "wc", "namespace": "ns",
                                         "annotations": {"eks.amazonaws.com/role-arn": "arn:billing"}}}
    before = copy.deepcopy(kube.objects[theirs])
    with pytest.raises(ApplyError) as info:
        apply(kube, manifests(), prune=prune(), owned=lambda live: Ref.of(live) != theirs)
    assert str(info.value) == ("ServiceAccount wc exists and is not this Topology's (no owner reference to it): the "
                               "operator leaves it alone; delete or rename it, or give the Topology another name")
    assert kube.objects[theirs] == before
    assert kube.writes == ["create ConfigMap wc-spec"]  # the objects before it in order were made
