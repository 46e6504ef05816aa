"""Draw a dashboard's panels from real query results to a PNG: what a user would see in Grafana.

No Grafana server runs here, so this runs the same thing the dashboard test checks (tests/chart/observed.py:
a LogSpout topology in worker and acker processes, a producer, a real Prometheus scraping them),
optionally kills a worker with SIGKILL part-way (the supervisor restarts it, as Kubernetes would),
then evaluates every panel's queries through Prometheus' HTTP API and lays the panels out on the
dashboard's own grid with matplotlib::

    python bench/dashboard.py [--seconds 90] [--kill-at 40] [--out docs/dashboard.png]

Stat panels show the last value and their threshold colour; tables list one row per component;
time series are range queries over the run at a 1 s step.
"""

from __future__ import annotations

import argparse
import math
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.chart.dashboard_queries import DASHBOARDS, load  # noqa: E402
from tests.chart.observed import Run, expand, observed_run  # noqa: E402

UNIT_HEIGHT = 0.42  # inches per grid row (Grafana's 30 px)
WIDTH = 22.0  # inches for 24 grid columns
GRID = "#d9d9d9"
PALETTE = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0",
           "#508642", "#cca300"]
COLORS = {"green": "#56a64b", "orange": "#ff9830", "red": "#e02f44", "yellow": "#f2cc0c", "blue": "#3274d9"}


def legend(fmt: str, labels: dict[str, str]) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), fmt or "")
    return text or ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"


def human(value: float, unit: str) -> str:
    if value is None or math.isnan(value):
        return "NaN"
    if unit == "percentunit":
        return f"{value * 100:.2f} %" if value < 0.1 else f"{value * 100:.0f} %"
    if unit == "s":
        if value < 0.001:
            return f"{value * 1e6:.0f} µs"
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "bytes":
        for suffix in ("B", "KiB", "MiB", "GiB"):
            if abs(value) < 1024:
                return f"{value:.1f} {suffix}" if suffix != "B" else f"{value:.0f} B"
            value /= 1024
        return f"{value:.1f} TiB"
    suffix = "/s" if unit == "cps" else ""
    if abs(value) >= 10_000:
        return f"{value / 1000:.1f}K{suffix}"
    return f"{value:.0f}{suffix}" if abs(value) >= 10 or value == int(value) else f"{value:.2f}{suffix}"


def threshold_color(value: float, defaults: dict[str, Any]) -> str:
    color = "green"
    for step in defaults.get("thresholds", {}).get("steps", []):
        if step["value"] is None or (value is not None and not math.isnan(value) and value >= step["value"]):
            color = step["color"]
    return COLORS.get(color, color)


def draw_stat(ax: Any, panel: dict, run: Run, variables: dict[str, str]) -> None:
    defaults = panel["fieldConfig"]["defaults"]
    unit = defaults.get("unit", "short")
    values = []
    for target in panel["targets"]:
        result = run.prometheus.query(expand(target["expr"], variables))
        value = float(result[0]["value"][1]) if result else None
        values.append((target.get("legendFormat") or "", value))
    ax.axis("off")
    if len(values) == 1:
        (_, value), = values
        text = defaults.get("noValue", "No data") if value is None else human(value, unit)
        ax.text(0.5, 0.42, text, ha="center", va="center", fontsize=22, weight="bold",
                color=threshold_color(value, defaults), transform=ax.transAxes)
        return
    for i, (name, value) in enumerate(values):
        x = (i + 0.5) / len(values)
        ax.text(x, 0.62, name, ha="center", va="center", fontsize=9, color="#555", transform=ax.transAxes)
        ax.text(x, 0.3, "–" if value is None else human(value, unit), ha="center", va="center", fontsize=18,
                weight="bold", color=threshold_color(value, defaults), transform=ax.transAxes)


def draw_series(ax: Any, panel: dict, run: Run, variables: dict[str, str], start: float, end: float) -> None:
    unit = panel["fieldConfig"]["defaults"].get("unit", "short")
    dashed = [o["matcher"]["options"] for o in panel["fieldConfig"].get("overrides", [])
              if any(p["id"] == "custom.lineStyle" for p in o["properties"])]
    n = 0
    for target in panel["targets"]:
        for series in run.prometheus.query_range(expand(target["expr"], variables), start=start, end=end, step=1):
            points = [(float(t) - start, float(v)) for t, v in series["values"] if not math.isnan(float(v))]
            if not points:
                continue
            name = legend(target.get("legendFormat", ""), series["metric"])
            style = "--" if any(re.fullmatch(d, name) for d in dashed) else "-"
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, style, lw=1.4, color=PALETTE[n % len(PALETTE)], label=name)
            n += 1
    ax.grid(color=GRID, lw=0.6)
    ax.tick_params(labelsize=7)
    ax.set_xlim(0, end - start)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: human(v, unit)))
    ax.set_xlabel("seconds", fontsize=7, labelpad=1)
    if n:
        ax.legend(fontsize=6.5, loc="upper left", ncol=min(n, 3), frameon=False)
    else:
        ax.text(0.5, 0.5, "No data", ha="center", va="center", transform=ax.transAxes, color="#888")


def draw_table(ax: Any, panel: dict, run: Run, variables: dict[str, str]) -> None:
    units = {o["matcher"]["options"]: p["value"] for o in panel["fieldConfig"]["overrides"]
             for p in o["properties"] if p["id"] == "unit"}
    columns = [t["legendFormat"] for t in panel["targets"]]
    rows: dict[str, dict[str, str]] = {}
    now_ms = time.time() * 1000
    for target in panel["targets"]:
        name = target["legendFormat"]
        for sample in run.prometheus.query(expand(target["expr"], variables)):
            row = rows.setdefault(sample["metric"]["component"], {})
            value = float(sample["value"][1])
            if units.get(name) == "dateTimeFromNow":
                row[name] = f"{(now_ms - value) / 1000:.0f} s ago: {sample['metric'].get('error', '')[:38]}"
            else:
                row[name] = human(value, units.get(name, "short"))
    ax.axis("off")
    cells = [[comp, *(rows[comp].get(c, "") for c in columns)] for comp in sorted(rows)]
    table = ax.table(cellText=cells, colLabels=["component", *columns], loc="upper center", cellLoc="left",
                     colLoc="left", colWidths=[0.07] + [0.07] * (len(columns) - 1) + [0.23])
    table.auto_set_font_size(False)
    table.set_fontsize(7.5)
    table.scale(1, 1.35)
    for (r, _), cell in table.get_celld().items():
        cell.set_edgecolor(GRID)
        if r == 0:
            cell.set_text_props(weight="bold")


def draw(dashboard: dict, run: Run, out: Path, *, start: float, end: float) -> None:
    variables = run.variables
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    height = rows * UNIT_HEIGHT + 0.6
    fig = plt.figure(figsize=(WIDTH, height), dpi=80)
    fig.suptitle(f"{dashboard['title']}: namespace {variables['namespace']}, topology {variables['topology']}, "
                 f"last {end - start:.0f} s", x=0.01, ha="left", fontsize=13, weight="bold")
    top = 1 - 0.6 / height
    for panel in panels:
        g = panel["gridPos"]
        left, width = g["x"] / 24 + 0.004, g["w"] / 24 - 0.008
        box_h = g["h"] * UNIT_HEIGHT / height
        bottom = top - (g["y"] * UNIT_HEIGHT / height) - box_h
        if panel["type"] == "row":
            fig.text(left, bottom + box_h * 0.3, panel["title"], fontsize=11, weight="bold")
            continue
        title_h = 0.32 / height
        fig.text(left, bottom + box_h - title_h * 0.7, panel["title"], fontsize=9, weight="bold")
        pad = 0.35 / height if panel["type"] == "timeseries" else 0
        ax = fig.add_axes((left + (0.025 if panel["type"] == "timeseries" else 0), bottom + pad,
                           width - (0.03 if panel["type"] == "timeseries" else 0), box_h - title_h - pad))
        if panel["type"] == "stat":
            draw_stat(ax, panel, run, variables)
        elif panel["type"] == "table":
            draw_table(ax, panel, run, variables)
        else:
            draw_series(ax, panel, run, variables, start, end)
    fig.savefig(out)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=90.0, help="how long the topology runs before drawing")
    parser.add_argument("--kill-at", type=float, default=40.0,
                        help="SIGKILL worker-0 this many seconds in (0: never)")
    parser.add_argument("--rate", type=float, default=200.0, help="records the producer appends per second")
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="squall-dashboard-") as tmp, \
            observed_run(Path(tmp), rate=args.rate) as run:
        start = time.time()
        killed = False
        while time.time() - start < args.seconds:
            for event in run.supervisor.check():
                print(event, file=sys.stderr)
            if args.kill_at and not killed and time.time() - start >= args.kill_at:
                run.supervisor.child("worker-0").proc.send_signal(signal.SIGKILL)
                print(f"killed worker-0 at {args.kill_at:.0f} s", file=sys.stderr)
                killed = True
            time.sleep(0.5)  # the supervisor's polling period, as squall run's
        end = time.time()
        draw(load(DASHBOARDS[0]), run, args.out, start=start, end=end)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
