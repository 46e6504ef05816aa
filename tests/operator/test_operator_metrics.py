"""The operator's /metrics: a real operator (kopf against kmock) scraped by a real Prometheus (Debian's
package; without it this test fails, not skips), through a Topology's life, a refused write and the
webhook; then every query of the "Squall operator" dashboard returns series, and the chart's operator
alert rules evaluate on metrics and labels that exist."""

from __future__ import annotations

import asyncio
import time

import pytest
from operator_kit import NAMESPACE, SPEC, create_topology, eventually, free_port, obj, roll_out, status
from prometheus_client.parser import text_string_to_metric_families
from test_admission import BROKEN, WEBHOOKS, install_webhook_configuration, review, webhooks
from tests.chart.dashboard_queries import REPO, load, panel_targets, variable_queries
from tests.chart.live_rules import problems, rule_file
from tests.chart.observed import Prometheus, Target, expand

from squall.metrics.scrape import fetch
from squall_operator import reconcile

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio]
DASHBOARD = REPO / "charts" / "squall" / "dashboards" / "squall-operator.json"
OPERATOR_NAMESPACE = "squall-system"
HANDLERS = ("discover", "reconcile", "status", "configmaps", "secrets", "services", "pods")  # kopf ids


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) → value of the operator's /metrics."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(fetch(f"http://127.0.0.1:{port}/metrics")) for s in f.samples}


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


async def test_the_operator_counts_what_it_does_and_its_dashboard_shows_it(api, start_operator, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(reconcile, "RETRY_DELAY", 0.1)  # kopf retries a refused reconcile after it
    await install_webhook_configuration(api)
    op = await start_operator(webhook_host="127.0.0.1", webhook_port=free_port())
    port = op.settings.metrics_port
    prometheus = Prometheus(workdir=tmp_path / "prometheus", targets=[Target(
        f"127.0.0.1:{port}", {"namespace": OPERATOR_NAMESPACE, "pod": "squall-operator-0", "container": "operator"})],
        rule_files=[rule_file(tmp_path / "rules.yaml", "squall.operator")])
    prometheus.start()
    try:
        samples = scrape(port)
        assert value(samples, "squall_operator_ready") == 1
        assert value(samples, "squall_operator_reconciles_total") == 0
        assert value(samples, "squall_operator_webhook_admissions_total", result="rejected") == 0
        assert value(samples, "process_cpu_seconds_total") is not None  # the process collectors
        for handler in HANDLERS:  # exported at 0 from the start
            assert value(samples, "squall_operator_handler_failures_total", handler=handler) == 0, handler
            assert value(samples, "squall_operator_handler_retries_total", handler=handler) == 0, handler
        # no resync pass yet (every 60 s): the start counts as one
        assert 0 < value(samples, "squall_operator_last_resync_timestamp_seconds") <= time.time()

        await create_topology(api, "wc", SPEC)
        await eventually("phase Pending", lambda: status(api, "wc").get("phase") == "Pending")
        await roll_out(api, "wc-worker")
        await roll_out(api, "wc-acker")
        await eventually("Running", lambda: value(scrape(port), "squall_operator_topologies", phase="Running") == 1)
        samples = scrape(port)
        assert value(samples, "squall_operator_topologies", phase="Pending") == 0
        assert value(samples, "squall_operator_children_applied_total", kind="StatefulSet", action="created") == 2
        assert value(samples, "squall_operator_reconciles_total") >= 1
        assert value(samples, "squall_operator_reconcile_errors_total") == 0
        assert value(samples, "squall_operator_reconcile_duration_seconds_count") == value(
            samples, "squall_operator_reconciles_total")
        assert value(samples, "squall_operator_topology_degraded", topology_namespace=NAMESPACE, topology="wc",
                     reason="") == 0
        expiry = value(samples, "squall_operator_certificate_expiry_timestamp_seconds",
                       topology_namespace=NAMESPACE, topology="wc")
        assert time.time() + 364 * 86400 < expiry < time.time() + 366 * 86400
        # what should run, for SquallProcessesDown: from the operator, so a Topology with no process left still says
        assert [value(samples, "squall_operator_topology_processes", topology_namespace=NAMESPACE, topology="wc",
                      role=role) for role in ("worker", "acker")] == [2, 2]

        await roll_out(api, "wc-worker", ready=1)  # a worker pod dies
        await eventually("Degraded", lambda: value(scrape(port), "squall_operator_topology_degraded",
                                                   topology_namespace=NAMESPACE, topology="wc",
                                                   reason="PodsNotReady") == 1)

        # a write the API server refuses is a failed reconcile
        forbidden = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                     "message": "configmaps is forbidden"}
        api[f"post /api/v1/namespaces/{NAMESPACE}/configmaps"] << 403 << forbidden
        await create_topology(api, "other", SPEC)
        await eventually("a reconcile error", lambda: value(scrape(port), "squall_operator_reconcile_errors_total"))
        # the create handler failed, and kopf calls it again
        await eventually("a retry", lambda: value(scrape(port), "squall_operator_handler_retries_total",
                                                  handler="reconcile"))
        samples = scrape(port)
        assert value(samples, "squall_operator_handler_failures_total", handler="reconcile") >= 1
        assert value(samples, "squall_operator_handler_failures_total", handler="status") == 0

        await eventually("the webhook in the configuration", lambda: webhooks(api))
        config = obj(api, WEBHOOKS, "squall.dev", namespace=None)
        assert (await review(config, "CREATE", BROKEN))["allowed"] is False
        assert (await review(config, "CREATE", SPEC))["allowed"] is True
        samples = scrape(port)
        assert value(samples, "squall_operator_webhook_admissions_total", result="rejected") == 1
        assert value(samples, "squall_operator_webhook_admissions_total", result="allowed") == 1

        # the dashboard, through Prometheus
        deadline = time.monotonic() + 60
        while len(prometheus.query(f'count_over_time(squall_operator_ready{{namespace="{OPERATOR_NAMESPACE}"}}'
                                   '[5m]) >= 12')) != 1:
            assert time.monotonic() < deadline, "Prometheus did not scrape the operator"
            time.sleep(0.5)  # Prometheus has no event for "scraped n times"
        variables = {"datasource": "prometheus", "namespace": OPERATOR_NAMESPACE, "__rate_interval": "10s",
                     "__interval": "1s", "__range": "1m"}
        board = load(DASHBOARD)
        empty = [f"{where}: {expr}" for where, expr in panel_targets(board)
                 if not prometheus.query(expand(expr, variables))]
        empty += [f"{where}: {match}" for where, match, label in variable_queries(board)
                  if not prometheus.label_values(label, expand(match, variables))]
        assert not empty, "queries without a series:\n" + "\n".join(empty)
        degraded = prometheus.query(f'sum(squall_operator_topology_degraded{{namespace="{OPERATOR_NAMESPACE}"}})')
        assert degraded[0]["value"][1] == "2"  # wc lost a pod, other's ConfigMap was refused (ApplyFailed)
        found = problems(prometheus)
        assert not found, "alert rules that cannot work:\n" + "\n".join(found)
    finally:
        prometheus.stop()


async def test_the_last_resync_moves_with_passes_that_reconcile_every_topology(api, start_operator):
    op = await start_operator(resync_seconds=0.2)
    port = op.settings.metrics_port
    started = value(scrape(port), "squall_operator_last_resync_timestamp_seconds")
    await create_topology(api, "wc", SPEC)
    await eventually("phase Pending", lambda: status(api, "wc").get("phase") == "Pending")
    await eventually("a resync pass", lambda: value(scrape(port), "squall_operator_last_resync_timestamp_seconds")
                     > started)

    # the Topology can no longer be read: every pass fails on it from now on, slowly; the passes that start
    # meanwhile (one every 0.2 s) find it still being reconciled, and must not count as having reconciled it
    failure = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "InternalError", "code": 500,
               "message": "etcdserver: request timed out"}

    async def slow_failure() -> dict:
        await asyncio.sleep(1.0)  # an API server that takes its time to fail, not a wait for an event
        return failure

    api[f"get /apis/squall.dev/v1alpha1/namespaces/{NAMESPACE}/topologies/wc"] << 500 << slow_failure
    errors = value(scrape(port), "squall_operator_reconcile_errors_total")
    await eventually("a failed pass", lambda: value(scrape(port), "squall_operator_reconcile_errors_total")
                     > errors)
    # passes run one after the other: a pass that read the Topology before the failure has ended by now
    samples = scrape(port)
    last, errors = value(samples, "squall_operator_last_resync_timestamp_seconds"), value(
        samples, "squall_operator_reconcile_errors_total")
    await eventually("two more failed passes", lambda: value(scrape(port), "squall_operator_reconcile_errors_total")
                     >= errors + 2)
    assert value(scrape(port), "squall_operator_last_resync_timestamp_seconds") == last


async def test_the_operator_exports_no_created_series():
    """prometheus-client adds a ``*_created`` gauge beside each counter and histogram unless told not to:
    undocumented series, which the processes' metrics do not have either."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from squall_operator.metrics import OperatorMetrics

    text = generate_latest(OperatorMetrics().registry).decode()
    names = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    assert names and not [n for n in names if n.endswith("_created")]
