"""The e2e suite's Topologies are valid against the CRD and the operator's checks, and the logcount
components they run behave as the no-record-lost test expects (in process: no cluster needed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from chart_support import REPO

from squall.testing import LocalCluster
from squall.topology import TopologySpec, load_spec, validate
from squall_operator import resource

E2E = REPO / "e2e"
MANIFESTS = sorted((E2E / "manifests").glob("*.yaml"))


def json_schema(node: Any) -> Any:
    """A CRD's structural OpenAPI 3.0 schema as draft-4 JSON schema (whose exclusiveMinimum is a flag, as
    in OpenAPI 3.0): ``nullable`` becomes "or null"."""
    if isinstance(node, list):
        return [json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: json_schema(value) for key, value in node.items() if key != "nullable"}
    return {"anyOf": [out, {"type": "null"}]} if node.get("nullable") else out


def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "topology.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == resource.VERSION]
    return json_schema(version["schema"]["openAPIV3Schema"])


def test_there_are_the_wordcount_logcount_clickstream_and_stateful_topologies():
    assert [m.stem for m in MANIFESTS] == ["clickstream", "logcount", "statefulwc", "wordcount"]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.stem)
def test_each_manifest_is_a_valid_topology(path: Path):
    doc = yaml.safe_load(path.read_text())
    assert (doc["apiVersion"], doc["kind"]) == (resource.API_VERSION, resource.KIND)
    jsonschema.Draft4Validator(crd_schema()).validate(doc)
    spec = resource.check_spec(doc["metadata"]["name"], doc["spec"], namespace="squall-e2e")
    assert spec.name == path.stem


def test_wordcount_is_the_example_on_two_workers():
    doc = yaml.safe_load((E2E / "manifests" / "wordcount.yaml").read_text())
    example = resource.to_resource(load_spec(REPO / "examples" / "wordcount.yaml"))
    assert doc["spec"] == {**example["spec"], "workers": 2, "config": {"wordcount.rate": 4000}}, (
        "the e2e suite scales it from 2 workers to 3, its spout paced")


def test_clickstream_is_the_example_with_its_spark_bolt_on_executor_pods():
    doc = yaml.safe_load((E2E / "manifests" / "clickstream.yaml").read_text())
    example = resource.to_resource(load_spec(REPO / "examples" / "clickstream.yaml"))["spec"]
    assert {k: v for k, v in doc["spec"].items() if k not in ("spark", "config")} == {
        k: v for k, v in example.items() if k not in ("spark", "config")}
    assert doc["spec"]["config"] == {**example["config"], "clickstream.clicks": 20000}
    assert doc["spec"]["spark"]["executors"] == 1


@pytest.fixture
def logcount(monkeypatch) -> TopologySpec:
    monkeypatch.syspath_prepend(str(E2E / "image"))  # the e2e topology image puts e2e_topologies.py in /app
    doc = yaml.safe_load((E2E / "manifests" / "logcount.yaml").read_text())
    spec = TopologySpec.from_dict({**doc["spec"], "name": "logcount"})
    validate(spec)  # with imports: the classNames resolve to the right kinds of component
    return spec


def _with(spec: TopologySpec, **config: Any) -> TopologySpec:
    return TopologySpec.from_dict({**spec.to_dict(), "config": {**spec.config, **config}})


def test_logcount_acks_every_line_once_and_counts_them(logcount):
    with LocalCluster(_with(logcount, **{"logcount.lines": 400, "logcount.rate": 1e6})) as cluster:
        cluster.run(until=lambda c: c.counts("lines").acked == 400, seconds=30)
        counts = cluster.counts("lines")
        assert (counts.acked, counts.failed, counts.timed_out, cluster.pending()) == (400, 0, 0, 0)
        totals: dict[str, int] = {}
        for bolt in cluster.instances("count"):
            for level, n in bolt.counts.items():
                totals[level] = totals.get(level, 0) + n
        assert totals == {"INFO": 200, "WARN": 100, "ERROR": 100}
        (spout,) = cluster.instances("lines")
        spout.pending[7] = [7, "00000007 ERROR request 7 served"]  # as after a lost tree:
        spout.fail(7)  # the line is emitted again, and acked again
        cluster.run(until=lambda c: c.counts("lines").acked == 401, seconds=30)
        assert spout.pending == {} and not spout.replays and spout.acked.count(7) == 2


def test_logcount_paces_its_lines(logcount):
    with LocalCluster(_with(logcount, **{"logcount.lines": 10_000, "logcount.rate": 200})) as cluster:
        start = time.monotonic()
        cluster.run(seconds=0.5)
        elapsed = time.monotonic() - start
        assert cluster.counts("lines").emitted <= 200 * elapsed + 5, "the e2e test kills a worker mid-stream"


def test_the_e2e_suite_skips_with_the_reason_when_its_tools_are_missing(tmp_path):
    # a PATH without docker, kind and kubectl
    env = {**os.environ, "PATH": str(tmp_path), "PYTHON": sys.executable}
    env.pop("SQUALL_E2E_KUBECONFIG", None)
    done = subprocess.run([shutil.which("bash"), "e2e/run.sh", "-p", "no:cacheprovider"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for tool in ("docker", "kind", "kubectl"):
        assert f"{tool} is not installed (not on PATH)" in done.stdout, done.stdout
    assert re.search(r"SKIPPED \[\d+\] .*e2e needs", done.stdout), done.stdout
    assert re.search(r"^=+ \d+ skipped in", done.stdout, re.M), done.stdout


def test_the_e2e_suite_on_a_named_cluster_needs_no_docker_and_refuses_to_skip(tmp_path):
    # kubectl present, no docker or kind: a cluster named by its kubeconfig (here a missing file)
    kubectl = tmp_path / "kubectl"
    kubectl.write_text("#!/bin/sh\nexit 0\n")
    kubectl.chmod(0o755)
    env = {**os.environ, "PATH": str(tmp_path), "PYTHON": sys.executable,
           "SQUALL_E2E_KUBECONFIG": str(tmp_path / "missing"), "SQUALL_E2E_BUILD": "none"}
    done = subprocess.run([shutil.which("bash"), "e2e/run.sh", "-p", "no:cacheprovider"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0, done.stdout + done.stderr
    assert f"SQUALL_E2E_KUBECONFIG={tmp_path / 'missing'} is not a file" in done.stderr, done.stderr
    assert "docker" not in done.stdout + done.stderr and "kind" not in done.stdout + done.stderr
