"""The end-to-end suite's cluster: kind, the Squall image loaded into it, the chart installed.

Every test is skipped, with the reason, when docker (and a running engine), kind or kubectl is missing.
Settings (environment):

- ``SQUALL_E2E_CLUSTER``: the kind cluster's name (default ``squall-e2e``). An existing cluster of
  that name is used as it is; one the suite creates is deleted at the end...
- ``SQUALL_E2E_KEEP=1``: ...unless this is set (to look around, or to rerun faster).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kube import Kubectl, run

REPO = Path(__file__).resolve().parents[1]
E2E = REPO / "e2e"
CHART = REPO / "charts" / "squall"
SQUALL_IMAGE = "squall:e2e"  # the repository's Dockerfile
TOPOLOGY_IMAGE = "squall-topologies:e2e"  # e2e/image: the Squall image plus the logcount components
OPERATOR_NAMESPACE = "squall-system"
TOPOLOGY_NAMESPACE = "squall-e2e"
TIMEOUT = 3600  # per test, setup included: the first one builds the image and creates the cluster


def missing_prerequisites() -> list[str]:
    """Why the suite cannot run here; empty when it can."""
    missing = [f"{tool} is not installed (not on PATH)" for tool in ("docker", "kind", "kubectl")
               if shutil.which(tool) is None]
    if shutil.which("docker") is not None:
        try:
            info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30, check=False)
        except subprocess.TimeoutExpired:
            missing.append("docker info did not answer within 30 s")
        else:
            if info.returncode != 0:
                lines = [line for line in info.stderr.splitlines() if line.strip()] or ["no output"]
                missing.append(f"docker cannot reach its engine ({lines[-1].strip()})")
    try:
        import helm_python  # noqa: F401
    except ImportError:
        missing.append("helm-python-sdk is not installed (pip install -e '.[dev]')")
    return missing


MISSING = missing_prerequisites()


def pytest_report_header(config: pytest.Config) -> str:
    if MISSING:
        return "squall e2e: skipped: " + "; ".join(MISSING)
    return "squall e2e: docker, kind and kubectl found"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.timeout(TIMEOUT))
        if MISSING:
            item.add_marker(pytest.mark.skip(reason="e2e needs " + "; ".join(MISSING)))


@dataclass(frozen=True)
class Cluster:
    name: str
    kubeconfig: Path

    def kubectl(self, namespace: str) -> Kubectl:
        return Kubectl(self.kubeconfig, namespace)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A kind cluster with the Squall images loaded."""
    name = os.environ.get("SQUALL_E2E_CLUSTER", "squall-e2e")
    created = name not in run("kind", "get", "clusters").split()
    if created:
        run("kind", "create", "cluster", "--name", name, "--wait", "300s", timeout=900)
    try:
        kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
        kubeconfig.write_text(run("kind", "get", "kubeconfig", "--name", name))
        run("docker", "build", "--tag", SQUALL_IMAGE, str(REPO), timeout=3000)
        run("docker", "build", "--tag", TOPOLOGY_IMAGE, "--build-arg", f"BASE={SQUALL_IMAGE}", str(E2E / "image"))
        run("kind", "load", "docker-image", SQUALL_IMAGE, TOPOLOGY_IMAGE, "--name", name, timeout=1800)
        yield Cluster(name, kubeconfig)
    finally:
        if created and os.environ.get("SQUALL_E2E_KEEP") != "1":
            run("kind", "delete", "cluster", "--name", name, timeout=300)


@pytest.fixture(scope="session")
def operator(cluster: Cluster) -> Kubectl:
    """The chart installed with the Helm library (no helm binary), the way a user runs `helm install`.
    It stays installed: a kept cluster is left as the tests left it, and the next run installs afresh."""
    import helm_python as helm

    values = {"image": {"repository": "squall", "tag": "e2e", "pullPolicy": "Never"},
              "topologyImage": TOPOLOGY_IMAGE, "logLevel": "DEBUG"}
    with helm.Config(kubeconfig_path=cluster.kubeconfig, namespace=OPERATOR_NAMESPACE) as helm_config:
        helm_config.uninstall("squall", ignore_not_found=True, wait="watcher", timeout=300)
        helm_config.install(CHART, "squall", values, namespace=OPERATOR_NAMESPACE, create_namespace=True,
                            wait="watcher", timeout=300)
    return cluster.kubectl(OPERATOR_NAMESPACE)


@pytest.fixture(scope="session")
def kubectl(cluster: Cluster, operator: Kubectl) -> Kubectl:
    """kubectl in the namespace the Topologies go to (created if missing)."""
    k = cluster.kubectl(TOPOLOGY_NAMESPACE)
    k("apply", "--filename", "-", stdin=f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {TOPOLOGY_NAMESPACE}\n")
    return k
