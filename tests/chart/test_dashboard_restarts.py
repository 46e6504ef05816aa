"""The dashboard counts a process restart however it happened, as promtool evaluates its queries: a pod's
process back after minutes of crash loop, a pod replaced on a new IP (a new ``instance``, so a new series),
and none for a pod that kept running or for another topology's pod."""

from __future__ import annotations

import re

import pytest
from chart_support import promtool_test
from dashboard_queries import load
from observed import expand

PANELS = {p["title"]: p for p in load()["panels"]}
VARIABLES = {"namespace": "prod", "topology": "clicks", "__range": "30m", "__rate_interval": "2m"}


def _series(pod: str, ip: str, start_times: str, topology: str = "clicks") -> list[dict[str, str]]:
    """A process's start time and info series, scraped from ``ip`` (promtool's notation, minute by minute)."""
    target = f'namespace="prod", pod="{pod}", instance="{ip}:9400"'
    return [{"series": f"process_start_time_seconds{{{target}}}", "values": start_times},
            {"series": f'squall_process_info{{{target}, topology="{topology}"}}',
             "values": re.sub(r"\d+x", "1x", start_times)}]


# "_": not scraped, for a minute. Each process starts at 100 s; one that restarts, at 1,300 s.
SERIES = (_series("clicks-worker-0", "10.0.0.1", "100x9 _x10 1300x10")  # a crash loop: 10 minutes down
          + _series("clicks-worker-1", "10.0.0.2", "100x9")  # replaced ...
          + _series("clicks-worker-1", "10.0.0.3", "_x20 1300x10")  # ... by a pod on a new IP
          + _series("clicks-acker-0", "10.0.0.4", "100x30")  # never restarted
          + _series("views-worker-0", "10.0.0.5", "100x9 _x10 1300x10", topology="views"))  # another topology


@pytest.mark.parametrize(("title", "eval_time", "expected"), [
    ("Restarts", "30m", [{"labels": "{}", "value": 2}]),
    ("Pod restarts", "21m", [{"labels": '{pod="clicks-acker-0"}', "value": 0},
                             {"labels": '{pod="clicks-worker-0"}', "value": 1},
                             {"labels": '{pod="clicks-worker-1"}', "value": 1}]),
    ("Pod restarts", "25m", [{"labels": f'{{pod="{pod}"}}', "value": 0}
                             for pod in ("clicks-acker-0", "clicks-worker-0", "clicks-worker-1")]),
])
def test_a_restart_counts_after_a_crash_loop_and_on_a_replaced_pod(tmp_path, title, eval_time, expected):
    expr = expand(PANELS[title]["targets"][0]["expr"], VARIABLES)
    promtool_test(tmp_path, [{"interval": "1m", "input_series": SERIES, "promql_expr_test": [
        {"expr": expr, "eval_time": eval_time, "exp_samples": expected}]}])
