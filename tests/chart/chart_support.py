"""Rendering the Helm chart offline with the real Helm library (helm-python-sdk binds Helm's Go SDK), and
running promtool's unit tests on what the chart ships."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from helm_python import _native

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "squall"
RELEASE, NAMESPACE = "squall", "squall-system"
# What a cluster with prometheus-operator's CRDs serves (``helm template --api-versions``).
PODMONITOR_API = "monitoring.coreos.com/v1/PodMonitor"


class UniqueKeys(yaml.SafeLoader):
    """YAML that refuses a mapping key given twice, as ``helm install`` does (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(key, deep=True) for key, _ in node.value]
        twice = sorted({str(k) for k in keys if keys.count(k) > 1})
        if twice:
            raise yaml.constructor.ConstructorError(None, None, f"keys given twice: {twice}", node.start_mark)
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True)
class Rendered:
    """One rendered chart: its Kubernetes objects (with the template each came from) and NOTES.txt."""

    objects: list[tuple[str, dict[str, Any]]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [obj for _, obj in self.objects if obj["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [obj for obj in self.of_kind(kind) if name is None or obj["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
        return found[0]


def render(values: dict[str, Any] | None = None, *, namespace: str = NAMESPACE,
           api_versions: Sequence[str] = ()) -> Rendered:
    """``helm template`` of the chart: what ``helm install`` would apply (the CRD aside, see crds/).
    ``api_versions``: what the cluster serves besides Kubernetes' own APIs, as ``--api-versions`` gives
    it (``.Capabilities.APIVersions``)."""
    options = {"name": RELEASE, "namespace": namespace, "is_install": True, "api_versions": list(api_versions)}
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values or {})
        # Chart.render does not pass api_versions on, which the library it binds takes: call that directly
        files = json.loads(_native.call_string("helm_render", chart._raw(),
                                               None if values is None else json.dumps(values), json.dumps(options)))
    objects, notes = [], ""
    for template, text in sorted(files.items()):
        if template.endswith("NOTES.txt"):
            notes = text
            continue
        objects += [(template, doc) for doc in yaml.load_all(text, Loader=UniqueKeys) if doc]
    return Rendered(objects, notes)


def deployment_env(rendered: Rendered) -> dict[str, str]:
    deployment = rendered.one("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    downward = {"metadata.namespace": deployment["metadata"]["namespace"]}  # what the kubelet fills in
    return {e["name"]: e["value"] if "value" in e else downward[e["valueFrom"]["fieldRef"]["fieldPath"]]
            for e in container["env"]}


def promtool_test(workdir: Path, tests: list[dict[str, Any]], *, rules: dict[str, Any] | None = None) -> None:
    """Run ``promtool test rules`` on ``tests`` (promtool's unit-test cases, a 1m evaluation interval) against
    ``rules`` (a rule file's groups), and fail with promtool's report unless every case passes.

    promtool comes with Debian's ``prometheus`` package (``make install`` installs it). Without it these
    tests fail rather than skip: CI must run them."""
    promtool = shutil.which("promtool")
    assert promtool, ("promtool is not on PATH: `make install` installs Debian's prometheus package (as root, where "
                      "apt-get exists), or install Prometheus yourself")
    rule_files = []
    if rules is not None:
        (workdir / "rules.yaml").write_text(yaml.safe_dump(rules))
        check = subprocess.run([promtool, "check", "rules", "rules.yaml"], cwd=workdir, capture_output=True,
                               text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
        rule_files = ["rules.yaml"]
    (workdir / "tests.yaml").write_text(yaml.safe_dump({"rule_files": rule_files, "evaluation_interval": "1m",
                                                        "tests": tests}, sort_keys=False))
    run = subprocess.run([promtool, "test", "rules", "tests.yaml"], cwd=workdir, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
