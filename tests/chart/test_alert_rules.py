"""The chart's PrometheusRule, as rendered, passes ``promtool check rules`` and ``promtool test rules``: each
alert fires on the series that should fire it, and stays quiet on its near misses.

promtool comes with Debian's ``prometheus`` package (``make install`` installs it). Without it these
tests fail rather than skip: CI must run them.
"""

from __future__ import annotations

import re

import pytest
from chart_support import REPO, promtool_test, render

# Labels every scraped series of a topology's process carries (target labels + the metric's own).
W0 = 'namespace="prod", pod="clicks-worker-0", topology="clicks"'
SPOUT = f'{W0}, component="events", task="0"'
BOLT = f'{W0}, component="count", task="2"'

def down(topology: str, n: int = 1) -> dict:
    """SquallProcessesDown as it fires for ``n`` processes of ``topology`` in namespace prod."""
    return {"exp_labels": {"severity": "critical", "namespace": "prod", "topology": topology},
            "exp_annotations": {
                "summary": f"{n} process(es) of prod/{topology} are down",
                "description": f"Prometheus has not scraped {n} of the topology's worker and acker processes for 5 "
                               "minutes; their trees time out and replay. kubectl get pods -n prod "
                               f"-l app.kubernetes.io/instance={topology}"}}


TESTS = [
    {"name": "lag growing on one partition", "interval": "1m", "input_series": [
        {"series": f'squall_spout_lag_records{{{SPOUT}, topic="events", partition="0"}}', "values": "0+100x40"},
        {"series": f'squall_spout_lag_records{{{SPOUT}, topic="events", partition="1"}}', "values": "500x40"},
        {"series": f'squall_spout_lag_records{{{SPOUT}, topic="events", partition="2"}}', "values": "0x40"},
    ], "alert_rule_test": [
        {"eval_time": "8m", "alertname": "SquallSpoutLagGrowing", "exp_alerts": []},
        {"eval_time": "20m", "alertname": "SquallSpoutLagGrowing", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "namespace": "prod", "topology": "clicks", "component": "events",
                           "topic": "events", "partition": "0"},
            "exp_annotations": {
                "summary": "Topology prod/clicks falls behind on events/0",
                "description": "The lag of spout events on partition events/0 has been growing for 10m (now 1.667 "
                               "records/s more): the topology processes less than arrives. Look at capacity and "
                               "failures on the Squall dashboard; scale the busiest bolt."}}]},
    ]},
    {"name": "failures of spout trees, not of bolt inputs", "interval": "1m", "input_series": [
        {"series": f"squall_max_spout_pending{{{SPOUT}}}", "values": "1000x20"},
        {"series": f'squall_acked_total{{{SPOUT}, stream="default"}}', "values": "0+600x20"},
        {"series": f'squall_failed_total{{{SPOUT}, stream="default", reason="explicit"}}', "values": "0+60x20"},
        {"series": f'squall_failed_total{{{SPOUT}, stream="default", reason="timeout"}}', "values": "0x20"},
        # a bolt failing many of its inputs: not spout trees, so not in the ratio
        {"series": f'squall_acked_total{{{BOLT}, stream="default"}}', "values": "0+600x20"},
        {"series": f'squall_failed_total{{{BOLT}, stream="default", reason="explicit"}}', "values": "0+6000x20"},
    ], "alert_rule_test": [
        {"eval_time": "4m", "alertname": "SquallFailureRatioHigh", "exp_alerts": []},
        {"eval_time": "10m", "alertname": "SquallFailureRatioHigh", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "namespace": "prod", "topology": "clicks"},
            "exp_annotations": {
                "summary": "Topology prod/clicks fails 9.091% of its tuple trees",
                "description": "More than 0.01 of the spout tuple trees failed (explicitly or by timeout) over 5 "
                               "minutes; they are replayed, so the work is redone. The components' errors: kubectl "
                               "get topology clicks -n prod -o yaml (status.componentErrors)."}}]},
        {"eval_time": "10m", "alertname": "SquallTreesTimingOut", "exp_alerts": []},
    ]},
    {"name": "timeouts", "interval": "1m", "input_series": [
        {"series": f"squall_max_spout_pending{{{SPOUT}}}", "values": "1000x20"},
        {"series": f'squall_failed_total{{{SPOUT}, stream="default", reason="timeout"}}', "values": "0x3 0+6x16"},
    ], "alert_rule_test": [
        {"eval_time": "7m", "alertname": "SquallTreesTimingOut", "exp_alerts": []},
        {"eval_time": "15m", "alertname": "SquallTreesTimingOut", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "namespace": "prod", "topology": "clicks", "component": "events"},
            "exp_annotations": {
                "summary": "Tuple trees of prod/clicks time out",
                "description": "Trees of spout events have been timing out for 5 minutes (100m/s): a bolt does not "
                               "ack its input, a process is down, or messageTimeoutSeconds is shorter than the "
                               "processing."}}]},
    ]},
    {"name": "a bolt over capacity", "interval": "1m", "input_series": [
        {"series": f'squall_busy_seconds_total{{{W0}, component="count", executor="2-2"}}', "values": "0+57x30"},
        {"series": f'squall_busy_seconds_total{{{W0}, component="split", executor="1-1"}}', "values": "0+50x30"},
    ], "alert_rule_test": [
        {"eval_time": "9m", "alertname": "SquallBoltOverCapacity", "exp_alerts": []},
        {"eval_time": "20m", "alertname": "SquallBoltOverCapacity", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "namespace": "prod", "topology": "clicks", "component": "count"},
            "exp_annotations": {
                "summary": "Bolt count of prod/clicks is the bottleneck",
                "description": "An executor of bolt count has been busy 95% of the time for 10 minutes: raise its "
                               "parallelism (or the topology's workers)."}}]},
    ]},
    {"name": "processes down", "interval": "1m", "input_series": [
        # clicks: two workers and an acker; worker-1 stops being scraped at 10m. fresh: the same, but the
        # operator (restarted) has not applied it yet: what should run comes from its processes
        *({"series": f'squall_process_info{{namespace="prod", pod="{topology}-{name}", topology="{topology}", '
                     f'role="{name[:-2]}", index="{name[-1]}"}}', "values": values}
          for topology in ("clicks", "fresh")
          for name, values in (("worker-0", "1x40"), ("worker-1", "1x10 _x30"), ("acker-0", "1x40"))),
        *({"series": f'squall_expected_processes{{namespace="prod", pod="{topology}-{name}", '
                     f'topology="{topology}", role="{role}"}}', "values": values.replace("1x", f"{n}x")}
          for topology in ("clicks", "fresh")
          for name, values in (("worker-0", "1x40"), ("worker-1", "1x10 _x30"), ("acker-0", "1x40"))
          for role, n in (("worker", 2), ("acker", 1))),
        # views: its only worker (and no acker) is gone at 5m
        {"series": 'squall_process_info{namespace="prod", pod="views-worker-0", topology="views", role="worker", '
                   'index="0"}', "values": "1x5 _x35"},
        {"series": 'squall_expected_processes{namespace="prod", pod="views-worker-0", topology="views", '
                   'role="worker"}', "values": "1x5 _x35"},
        {"series": 'squall_expected_processes{namespace="prod", pod="views-worker-0", topology="views", '
                   'role="acker"}', "values": "0x5 _x35"},
        # gone: deleted at 5m (the operator forgets it too), so its processes are not down
        {"series": 'squall_process_info{namespace="prod", pod="gone-worker-0", topology="gone", role="worker", '
                   'index="0"}', "values": "1x5 _x35"},
        {"series": 'squall_expected_processes{namespace="prod", pod="gone-worker-0", topology="gone", '
                   'role="worker"}', "values": "1x5 _x35"},
        # what the operator says of the Topologies that exist (scraped in its own namespace)
        *({"series": f'squall_operator_topology_degraded{{namespace="squall-system", pod="squall-0", '
                     f'topology_namespace="prod", topology="{name}", reason=""}}', "values": values}
          for name, values in (("clicks", "0x40"), ("views", "0x40"), ("gone", "0x5 _x35"), ("fresh", "0x40"))),
        *({"series": f'squall_operator_topology_processes{{namespace="squall-system", pod="squall-0", '
                     f'topology_namespace="prod", topology="{name}", role="{role}"}}', "values": values}
          for name, role, values in (("clicks", "worker", "2x40"), ("clicks", "acker", "1x40"),
                                     ("views", "worker", "1x40"), ("views", "acker", "0x40"),
                                     ("gone", "worker", "1x5 _x35"), ("gone", "acker", "0x5 _x35"))),
    ], "alert_rule_test": [
        {"eval_time": "12m", "alertname": "SquallProcessesDown", "exp_alerts": []},
        {"eval_time": "17m", "alertname": "SquallProcessesDown", "exp_alerts": [down("views")]},
        {"eval_time": "22m", "alertname": "SquallProcessesDown",
         "exp_alerts": [down("clicks"), down("fresh"), down("views")]},
        # views has had no process for 35 minutes: the operator still says it should run one (the processes'
        # own count of what should run went with them; the alert resolved at 20m, found by the observability audit)
        {"eval_time": "40m", "alertname": "SquallProcessesDown",
         "exp_alerts": [down("clicks"), down("fresh"), down("views")]},
    ]},
    {"name": "a process waiting for its peers", "interval": "1m", "input_series": [
        # clicks-worker-0 loses its acker from 2m on; clicks-worker-1 its peer worker for 5 minutes only;
        # views-worker-0 has a link down during a rebalance, which holds its spouts anyway
        *({"series": f'squall_process_state{{namespace="prod", pod="{pod}", topology="{topology}", '
                     f'state="{state}"}}', "values": values}
          for pod, topology, state, values in (
              ("clicks-worker-0", "clicks", "waiting_for_peers", "0x2 1x20"),
              ("clicks-worker-0", "clicks", "active", "1x2 0x20"),
              ("clicks-worker-1", "clicks", "waiting_for_peers", "0x2 1x5 0x15"),
              ("views-worker-0", "views", "rebalancing", "1x22"))),
        *({"series": f'squall_transport_connected{{namespace="prod", pod="{pod}", topology="{topology}", '
                     f'peer="{peer}", lane="{lane}", direction="{direction}"}}', "values": values}
          for pod, topology, peer, lane, direction, values in (
              ("clicks-worker-0", "clicks", "acker-0", "control", "out", "1x2 0x20"),
              ("clicks-worker-0", "clicks", "acker-0", "control", "in", "1x2 0x20"),
              ("clicks-worker-0", "clicks", "worker-1", "data", "out", "1x22"),
              ("clicks-worker-1", "clicks", "worker-0", "data", "out", "1x2 0x5 1x15"),
              ("views-worker-0", "views", "acker-0", "control", "out", "0x22"))),
    ], "alert_rule_test": [
        {"eval_time": "11m", "alertname": "SquallProcessWaitingForPeers", "exp_alerts": []},
        {"eval_time": "13m", "alertname": "SquallProcessWaitingForPeers", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "namespace": "prod", "topology": "clicks", "pod": "clicks-worker-0"},
            "exp_annotations": {
                "summary": "clicks-worker-0 of prod/clicks waits for 2 connection(s) to its peers",
                "description": "The process is up but has had 2 link(s) to or from its peers down for 10 minutes, "
                               "so it does not process (a worker's spouts stay inactive). squall_transport_connected "
                               "== 0 names them, and so does its log (\"waiting for peers\"): a peer not running, a "
                               "NetworkPolicy or DNS name that keeps them apart, or certificates of another CA. "
                               "kubectl logs -n prod clicks-worker-0"}}]},
    ]},
    {"name": "the operator", "interval": "1m", "input_series": [
        {"series": 'squall_operator_topology_degraded{namespace="squall-system", pod="squall-0", '
                   'topology_namespace="prod", topology="clicks", reason="CrashLoopBackOff"}', "values": "0x2 1x20"},
        {"series": 'squall_operator_topology_degraded{namespace="squall-system", pod="squall-0", '
                   'topology_namespace="prod", topology="views", reason=""}', "values": "0x22"},
        {"series": 'squall_operator_reconcile_errors_total{namespace="squall-system", pod="squall-0"}',
         "values": "0x2 0+3x20"},
    ], "alert_rule_test": [
        {"eval_time": "5m", "alertname": "SquallTopologyDegraded", "exp_alerts": []},
        {"eval_time": "10m", "alertname": "SquallTopologyDegraded", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "topology_namespace": "prod", "topology": "clicks",
                           "reason": "CrashLoopBackOff"},
            "exp_annotations": {
                "summary": "Topology prod/clicks is Degraded (CrashLoopBackOff)",
                "description": "The operator has reported the Topology Degraded for 5 minutes: kubectl describe "
                               "topology clicks -n prod"}}]},
        {"eval_time": "8m", "alertname": "SquallOperatorReconcileErrors", "exp_alerts": []},
        {"eval_time": "18m", "alertname": "SquallOperatorReconcileErrors", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "namespace": "squall-system", "pod": "squall-0"},
            "exp_annotations": {
                "summary": "The Squall operator fails to reconcile Topologies",
                "description": "Reconciles have been failing for 10 minutes (50m/s): the API server refuses what "
                               "the operator applies. kubectl logs -n squall-system squall-0; the Topologies' "
                               "ApplyFailed Events say why."}}]},
    ]},
    {"name": "a certificate not renewed", "interval": "1m", "input_series": [
        # promtool's clock starts at 0: clicks' certificate expires in 29 days, views' in 31
        {"series": 'squall_operator_certificate_expiry_timestamp_seconds{namespace="squall-system", pod="squall-0", '
                   'topology_namespace="prod", topology="clicks"}', "values": f"{29 * 86400}x90"},
        {"series": 'squall_operator_certificate_expiry_timestamp_seconds{namespace="squall-system", pod="squall-0", '
                   'topology_namespace="prod", topology="views"}', "values": f"{31 * 86400}x90"},
    ], "alert_rule_test": [
        {"eval_time": "50m", "alertname": "SquallCertificateExpiring", "exp_alerts": []},
        {"eval_time": "70m", "alertname": "SquallCertificateExpiring", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "topology_namespace": "prod", "topology": "clicks"},
            "exp_annotations": {
                "summary": "The TLS certificate of Topology prod/clicks expires in 28d 22h 50m 0s",
                "description": "The operator renews a Topology's certificate when three to four months of its "
                               "year are left; this one was not renewed, and when it expires "
                               "the topology's processes cannot reach each other. The Topology's Events and the "
                               "operator's log say why (kubectl describe topology clicks -n prod); deleting its "
                               "Secret clicks-tls issues new ones at once (docs/operator.md, \"Mutual TLS, and "
                               "rotating the CA\")."}}]},
    ]},
    {"name": "the operator down", "interval": "1m", "input_series": [
        # ready, then not ready from 5m (kopf lost its watches), then not scraped at all from 20m
        {"series": 'squall_operator_ready{namespace="squall-system", pod="squall-0"}', "values": "1x5 0x15 _x20"},
    ], "alert_rule_test": [
        {"eval_time": "12m", "alertname": "SquallOperatorDown", "exp_alerts": []},
        *({"eval_time": at, "alertname": "SquallOperatorDown", "exp_alerts": [{
            "exp_labels": {"severity": "critical", "namespace": "squall-system"},
            "exp_annotations": {
                "summary": "The Squall operator in squall-system is down or not ready",
                "description": "For 10 minutes the operator has not been scraped, or kopf has not been ready "
                               "(logged in, watching): Topology changes are not applied, statuses are stale, and "
                               "drifted or deleted objects are not put back (the topologies themselves run on). "
                               "kubectl get pods -n squall-system; kubectl logs -n squall-system deploy/squall"}}]}
          for at in ("16m", "40m")),
    ]},
    {"name": "the operator's resync", "interval": "1m", "input_series": [
        # promtool's clock starts at 0: a healthy operator's last resync follows it, this one stops at 5m
        {"series": 'squall_operator_last_resync_timestamp_seconds{namespace="squall-system", pod="squall-0"}',
         "values": "0+60x5 300x20"},
        {"series": 'squall_operator_last_resync_timestamp_seconds{namespace="squall-system", pod="squall-1"}',
         "values": "0+60x25"},
    ], "alert_rule_test": [
        {"eval_time": "13m", "alertname": "SquallOperatorResyncStalled", "exp_alerts": []},
        {"eval_time": "15m", "alertname": "SquallOperatorResyncStalled", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "namespace": "squall-system", "pod": "squall-0"},
            "exp_annotations": {
                "summary": "The Squall operator has not resynced its Topologies for 10m 0s",
                "description": "No resync pass (every 60 s) has reconciled every Topology without an error for "
                               "10m 0s: a reconcile hangs on the API server or keeps failing (see "
                               "SquallOperatorReconcileErrors), and objects edited or deleted by hand are not put "
                               "back. kubectl logs -n squall-system squall-0"}}]},
    ]},
]


def rules(values: dict | None = None, *, operator: bool = True) -> dict:
    rendered = render({"monitoring": {"alerts": {"enabled": True, **(values or {})},
                                      "operatorPodMonitor": {"enabled": operator}}})
    return {"groups": rendered.one("PrometheusRule")["spec"]["groups"]}


def test_where_the_operator_is_not_scraped_the_processes_say_how_many_should_run(tmp_path):
    """Without the operator's series, what should run comes from the processes' own squall_expected_processes,
    remembered 15 minutes (docs/operations.md, "Alerts")."""
    clicks = [{"series": f'squall_process_info{{namespace="prod", pod="clicks-{name}", topology="clicks", '
                         f'role="{name[:-2]}", index="{name[-1]}"}}', "values": values}
              for name, values in (("worker-0", "1x30"), ("worker-1", "1x10 _x20"), ("acker-0", "1x30"))]
    clicks += [{"series": f'squall_expected_processes{{namespace="prod", pod="clicks-{name}", topology="clicks", '
                          f'role="{role}"}}', "values": values.replace("1x", f"{n}x")}
               for name, values in (("worker-0", "1x30"), ("worker-1", "1x10 _x20"), ("acker-0", "1x30"))
               for role, n in (("worker", 2), ("acker", 1))]
    tests = [{"name": "processes down, no operator", "interval": "1m", "input_series": clicks, "alert_rule_test": [
        {"eval_time": "12m", "alertname": "SquallProcessesDown", "exp_alerts": []},
        {"eval_time": "22m", "alertname": "SquallProcessesDown", "exp_alerts": [down("clicks")]}]}]
    promtool_test(tmp_path, tests, rules=rules(operator=False))


def test_the_rule_is_off_by_default_and_labelled_for_kube_prometheus_stack():
    assert render().of_kind("PrometheusRule") == []
    rule = render({"monitoring": {"release": "monitoring", "alerts": {"enabled": True, "labels": {"team": "data"}}}})
    assert rule.one("PrometheusRule")["metadata"]["labels"].items() >= {"release": "monitoring", "team": "data"}.items()


def test_the_issue_s_alerts_are_all_there_and_tested():
    names = [r["alert"] for group in rules()["groups"] for r in group["rules"]]
    assert names == ["SquallSpoutLagGrowing", "SquallFailureRatioHigh", "SquallTreesTimingOut",
                     "SquallBoltOverCapacity", "SquallProcessesDown", "SquallProcessWaitingForPeers",
                     "SquallOperatorDown", "SquallTopologyDegraded",
                     "SquallCertificateExpiring", "SquallOperatorReconcileErrors", "SquallOperatorResyncStalled"]
    tested = {t["alertname"] for case in TESTS for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert tested == set(names), f"alerts never seen firing in TESTS: {set(names) - tested}"


@pytest.mark.parametrize("values", [{}, {"failureRatio": 0.2, "capacity": 0.5, "lagGrowingFor": "30m"}],
                         ids=["defaults", "custom thresholds"])
def test_promtool_checks_the_rules_and_runs_their_unit_tests(tmp_path, values):
    promtool_test(tmp_path, TESTS if not values else [], rules=rules(values))
    if values:
        # the thresholds come from the values: the defaults' near misses fire now, and its alerts do not
        exprs = {r["alert"]: r for g in rules(values)["groups"] for r in g["rules"]}
        assert exprs["SquallFailureRatioHigh"]["expr"].rstrip().endswith("> 0.2")
        assert exprs["SquallBoltOverCapacity"]["expr"].rstrip().endswith("> 0.5")
        assert exprs["SquallSpoutLagGrowing"]["for"] == "30m"


def test_a_runbook_url_points_each_alert_at_its_row_of_the_operations_docs():
    docs = (REPO / "docs" / "operations.md").read_text()
    names = [r["alert"] for group in rules()["groups"] for r in group["rules"]]
    assert all("runbook_url" not in r["annotations"] for group in rules()["groups"] for r in group["rules"])
    base = "https://git.example.com/squall/blob/v0.1.0/docs/operations.md"
    urls = {r["alert"]: r["annotations"]["runbook_url"]
            for group in rules({"runbookUrl": base})["groups"] for r in group["rules"]}
    assert urls == {name: f"{base}#{name.lower()}" for name in names}
    anchors = re.findall(r'^\| <a id="([a-z]+)"></a>`(\w+)` \|', docs, re.M)
    assert anchors == [(name.lower(), name) for name in names], "docs/operations.md's Alerts table lacks an anchor"


@pytest.mark.parametrize("url", ["docs/operations.md", "https://example.com/ops.md#alerts"])
def test_a_runbook_url_that_is_no_http_address_without_a_fragment_is_refused(url):
    with pytest.raises(Exception, match="runbookUrl"):
        rules({"runbookUrl": url})
