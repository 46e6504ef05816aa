"""The end-to-end suite's cluster: kind, or any existing cluster given by its kubeconfig; the Squall
images built and loaded into it; the chart installed once for the whole run.

Settings (environment):

- ``SQUALL_E2E_KUBECONFIG``: run on the existing cluster of this kubeconfig (kind is not used and
  Docker is not needed). Without it the suite runs on kind, and needs docker (with a running engine)
  and kind.
- ``SQUALL_E2E_BUILD``: a shell command, run in the repository root, that builds ``squall:e2e`` (the
  repository's Dockerfile), ``squall-operator:e2e`` (its ``operator`` target, which the chart's
  operator runs, as a user's does) and ``squall-topologies:e2e`` (``e2e/image``, ``FROM squall:e2e``).
  Default: three ``docker build``s. ``none``: the images exist already.
- ``SQUALL_E2E_LOAD``: a command that makes images available to the cluster's nodes; the suite
  appends the three image names. Default: ``kind load docker-image`` with kind, nothing with
  ``SQUALL_E2E_KUBECONFIG`` (the build pushed them, or put them on the nodes itself).
- ``SQUALL_E2E_CLUSTER``: the kind cluster's name (default ``squall-e2e``). An existing cluster of
  that name is used as it is; one the suite creates is deleted at the end...
- ``SQUALL_E2E_KEEP=1``: ...unless this is set (to look around, or to rerun faster).
- ``SQUALL_E2E_LOGS``: where a failed test (or a failed setup) leaves the logs of every pod of the
  Topologies' and the operator's namespaces (default ``e2e/logs``, one folder per failed test); the
  pods' state, the namespaces' events and the logs' warnings and errors are also in the test's
  report, so a CI log shows what the pods saw and why one was not ready.

``kubectl`` (on PATH) may be as old as the cluster: the suite uses no verb newer than 1.20. On kind,
every test is skipped, with the reason, when a prerequisite is missing; with ``SQUALL_E2E_KUBECONFIG``
that is an error.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kube import Figures, Kubectl, run

REPO = Path(__file__).resolve().parents[1]
E2E = REPO / "e2e"
CHART = REPO / "charts" / "squall"
SQUALL_IMAGE = "squall:e2e"  # the repository's Dockerfile
TOPOLOGY_IMAGE = "squall-topologies:e2e"  # e2e/image: the Squall image plus the logcount components
OPERATOR_IMAGE = "squall-operator:e2e"  # the Dockerfile's operator target: the chart's default operator image
OPERATOR_NAMESPACE = "squall-system"
TOPOLOGY_NAMESPACE = "squall-e2e"
TIMEOUT = 3600  # per test, setup included: the first one builds the image and creates the cluster
KUBECONFIG = os.environ.get("SQUALL_E2E_KUBECONFIG", "")
DOCKER_BUILD = (f"docker build --tag {SQUALL_IMAGE} . && docker build --target operator --tag {OPERATOR_IMAGE} . "
                f"&& docker build --tag {TOPOLOGY_IMAGE} --build-arg BASE={SQUALL_IMAGE} e2e/image")
BUILD = os.environ.get("SQUALL_E2E_BUILD", DOCKER_BUILD)
LOGS = Path(os.environ.get("SQUALL_E2E_LOGS", E2E / "logs"))
NOTABLE = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback", " squall.transport: ")  # what a report shows


def missing_prerequisites() -> list[str]:
    """Why the suite cannot run here; empty when it can."""
    tools = ["kubectl"]
    if not KUBECONFIG:
        tools += ["kind"]
    if BUILD == DOCKER_BUILD or not KUBECONFIG:
        tools += ["docker"]
    missing = [f"{tool} is not installed (not on PATH)" for tool in tools if shutil.which(tool) is None]
    if KUBECONFIG and not Path(KUBECONFIG).is_file():
        missing.append(f"SQUALL_E2E_KUBECONFIG={KUBECONFIG} is not a file")
    if "docker" in tools and shutil.which("docker") is not None:
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
FIGURES = Figures()


def pytest_report_header(config: pytest.Config) -> str:
    if MISSING:
        return "squall e2e: skipped: " + "; ".join(MISSING)
    where = f"the cluster of {KUBECONFIG}" if KUBECONFIG else "kind"
    return f"squall e2e: on {where}; kubectl {shutil.which('kubectl')}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MISSING and KUBECONFIG:  # a cluster was named: not running on it is an error, not a skip
        raise pytest.UsageError("squall e2e on SQUALL_E2E_KUBECONFIG's cluster needs " + "; ".join(MISSING))
    for item in items:
        item.add_marker(pytest.mark.timeout(TIMEOUT))
        if MISSING:
            item.add_marker(pytest.mark.skip(reason="e2e needs " + "; ".join(MISSING)))


REPORTED: set[int] = set()  # the failures already reported: a session fixture's repeats for every test


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A failed test, or a failed setup (the chart's install), keeps its pods' logs (a pod's previous
    container's too) and reports the pods' state and the namespaces' events, which say why a pod is
    not ready: the cluster they came from is gone when CI reports the failure."""
    outcome = yield
    report = outcome.get_result()
    cluster = CLUSTERS[0] if CLUSTERS else None
    if report.when in ("setup", "call") and report.failed and cluster is not None and call.excinfo is not None:
        if id(call.excinfo.value) not in REPORTED:
            REPORTED.add(id(call.excinfo.value))
            report.sections.append(("pods and events", pod_logs(cluster, LOGS / item.name)))


def pod_logs(cluster: Cluster, folder: Path) -> str:
    """Save the logs of every pod of the suite's namespaces under ``folder``; the pods' state, the
    namespaces' events and the logs' notable lines."""
    folder.mkdir(parents=True, exist_ok=True)
    shown = [f"all of them in {folder}"]
    for namespace in (TOPOLOGY_NAMESPACE, OPERATOR_NAMESPACE):
        kubectl = cluster.kubectl(namespace)
        for what in (("get", "pods", "--output", "wide"), ("get", "events", "--sort-by", ".lastTimestamp")):
            try:
                shown += [f"--- {namespace}: kubectl {' '.join(what)}", kubectl(*what, timeout=60).rstrip() or "(none)"]
            except (AssertionError, subprocess.TimeoutExpired) as exc:
                shown.append(f"--- {namespace}: kubectl {' '.join(what)} failed: {exc}")
        try:
            pods = [p["metadata"]["name"] for p in kubectl.get("pods")["items"]]
        except (AssertionError, subprocess.TimeoutExpired) as exc:
            shown.append(f"{namespace}: no pods listed ({exc})")
            continue
        for pod in pods:
            for previous in (False, True):
                try:
                    text = kubectl("logs", pod, "--all-containers", *(["--previous"] if previous else []),
                                   timeout=60)
                except (AssertionError, subprocess.TimeoutExpired):
                    continue  # no previous container, or the pod is gone
                name = f"{namespace}.{pod}{'.previous' if previous else ''}.log"
                (folder / name).write_text(text)
                lines = [line for line in text.splitlines() if any(mark in line for mark in NOTABLE)]
                shown += [f"--- {name}: {len(lines)} notable lines, the last 40:", *lines[-40:]]
    return "\n".join(shown)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if FIGURES.lines:
        terminalreporter.section("squall e2e figures")
        for line in FIGURES.lines:
            terminalreporter.write_line(line)


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path

    def kubectl(self, namespace: str) -> Kubectl:
        return Kubectl(self.kubeconfig, namespace)


def images_into(load: str) -> None:
    """Build the three images (SQUALL_E2E_BUILD), then hand them to the cluster (``load``, if any)."""
    if BUILD != "none":
        run("sh", "-c", f"cd {shlex.quote(str(REPO))} && {BUILD}", timeout=3000)
    if load:
        run(*shlex.split(load), SQUALL_IMAGE, OPERATOR_IMAGE, TOPOLOGY_IMAGE, timeout=1800)


CLUSTERS: list[Cluster] = []  # the session's cluster, once up: what a failure's report looks at


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The cluster (kind, or SQUALL_E2E_KUBECONFIG's) with the Squall images loaded."""
    if KUBECONFIG:
        images_into(os.environ.get("SQUALL_E2E_LOAD", ""))
        CLUSTERS.append(Cluster(Path(KUBECONFIG)))
        yield CLUSTERS[0]
        return
    name = os.environ.get("SQUALL_E2E_CLUSTER", "squall-e2e")
    created = name not in run("kind", "get", "clusters").split()
    if created:
        run("kind", "create", "cluster", "--name", name, "--wait", "300s", timeout=900)
    try:
        kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
        kubeconfig.write_text(run("kind", "get", "kubeconfig", "--name", name))
        images_into(os.environ.get("SQUALL_E2E_LOAD", f"kind load docker-image --name {name}"))
        CLUSTERS.append(Cluster(kubeconfig))
        yield CLUSTERS[0]
    finally:
        CLUSTERS.clear()
        if created and os.environ.get("SQUALL_E2E_KEEP") != "1":
            run("kind", "delete", "cluster", "--name", name, timeout=300)


@pytest.fixture(scope="session")
def operator(cluster: Cluster) -> Kubectl:
    """The chart installed once for the run with the Helm library (no helm binary), the way a user
    runs `helm install`: the operator from the slim ``--target operator`` image, two replicas. It stays
    installed: a kept cluster is left as the tests left it, and the next run installs afresh."""
    import helm_python as helm

    values = {"image": {"repository": "squall", "tag": "e2e", "pullPolicy": "Never"},
              "operatorImage": {"repository": "squall-operator", "tag": "e2e"},
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


@pytest.fixture(scope="session")
def figures() -> Figures:
    """Measured figures, printed at the end of the run."""
    return FIGURES
