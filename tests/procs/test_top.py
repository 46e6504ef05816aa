"""``squall top`` against real running processes: one frame of the component table, from their /metrics."""

from __future__ import annotations

import re
import subprocess
import sys

from procs_support import wait_for


def top(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "squall", "top", "--once", "--interval", "0.5", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def row(text: str, component: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if line.startswith(component + " ")]
    return line.split()


def test_one_frame_of_a_running_topology(cluster, tmp_path):
    sup = cluster(count=-1, workers=2, ackers=1, sink="ReportingSink", config={"test.rate": 500})
    wait_for(lambda t: t.acked["a-numbers"] >= 100, timeout=60, sup=sup, what="the topology to run")

    # a local run: the URLs come from the run directory
    run = top("--run-dir", str(sup.run_dir), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    header, blank, columns, *rows = run.stdout.rstrip("\n").splitlines()
    assert re.match(r"topology proc-test   processes 3/3   trees acked [\d,.]+/s   failed [\d,.]+/s   pending \d+",
                    header), header
    assert columns.split()[:6] == ["component", "emitted/s", "transferred/s", "executed/s", "acked/s", "failed/s"]
    assert [r.split()[0] for r in rows] == ["a-numbers", "b-double", "c-sink"]
    spout, double, sink = row(run.stdout, "a-numbers"), row(run.stdout, "b-double"), row(run.stdout, "c-sink")
    assert float(spout[4].replace(",", "")) > 0, "the spout acks trees"
    assert spout[3] == spout[6] == spout[8] == "-", "no executed, latency or capacity for a spout"
    assert float(double[3].replace(",", "")) > 0 and 0 <= float(double[8]) <= 1
    assert sink[9] == "1" and "ValueError: five is not allowed here" in run.stdout  # errors, last error

    # a port-forwarded pod: one URL
    worker = top(sup.child("worker-0").url("/metrics"), cwd=tmp_path)
    assert worker.returncode == 0, worker.stderr
    assert "processes 1/1" in worker.stdout and "a-numbers" in worker.stdout


def test_without_a_run_or_an_answer_it_says_what_to_do(tmp_path):
    missing = top("--run-dir", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2
    assert ("start `squall run` first (with worker processes: an --in-process run serves no /metrics), or give "
            "a Topology's name (squall top NAME -n NAMESPACE), or /metrics URLs") in missing.stderr
    down = top("http://127.0.0.1:9/metrics", cwd=tmp_path)
    assert down.returncode == 2 and "is the topology running (and port-forwarded)?" in down.stderr
    not_a_url = top("localhost:9090", cwd=tmp_path)  # was "none of localhost:9090 answered"
    assert not_a_url.returncode == 2
    assert ("'localhost:9090' is neither a Topology's name nor a URL: give each process's /metrics as "
            "http://HOST:PORT/metrics") in not_a_url.stderr
