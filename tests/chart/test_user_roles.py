"""The built-in roles' Squall rules let a read-only user run the read verbs (squall list, top, logs)."""

from __future__ import annotations

from chart_support import render


def rules_of(name: str) -> set[tuple[str, str, str]]:
    role = next(r for r in render().of_kind("ClusterRole") if r["metadata"]["name"] == name)
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_a_viewer_may_read_topologies_and_the_pods_metrics_through_the_pod_proxy():
    view = rules_of("squall-topology-view")
    assert {("squall.dev", "topologies", verb) for verb in ("get", "list", "watch")} <= view
    assert ("", "pods/proxy", "get") in view  # squall list and top read /metrics through it
    assert {verb for _, _, verb in view} == {"get", "list", "watch"}  # nothing written
