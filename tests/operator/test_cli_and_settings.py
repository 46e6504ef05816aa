"""``squall render`` / ``squall submit``, and the operator's settings from its environment."""

from __future__ import annotations

import importlib.metadata
import logging
import os
import pathlib
import subprocess
import sys

import kopf
import pytest
import yaml
from kubernetes import client

from squall.cli import main
from squall.errors import ConfigError
from squall.topology.spec import load_spec
from squall_operator.handlers import kopf_settings
from squall_operator.render import credentials
from squall_operator.resource import parse_spec
from squall_operator.settings import Settings

REPO = pathlib.Path(__file__).resolve().parents[2]
WORDCOUNT = REPO / "examples" / "wordcount.yaml"


def test_render_prints_what_the_operator_creates(capsys):
    assert main(["render", str(WORDCOUNT), "-n", "prod", "--image", "squall:1", "--podmonitor",
                 "--metrics-from", "monitoring"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    secret, policy = docs.pop(2), docs.pop(2)
    assert credentials(secret) is not None  # a CA of its own, as the operator makes
    assert policy["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "monitoring"]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ConfigMap", "wordcount-spec"), ("ServiceAccount", "wordcount"), ("Service", "wordcount-worker"),
        ("StatefulSet", "wordcount-worker"), ("Service", "wordcount-acker"), ("StatefulSet", "wordcount-acker"),
        ("PodDisruptionBudget", "wordcount-worker"), ("PodDisruptionBudget", "wordcount-acker"),
        ("PodMonitor", "wordcount")]
    assert {d["metadata"]["namespace"] for d in docs} == {"prod"}
    assert docs[3]["spec"]["template"]["spec"]["containers"][0]["image"] == "squall:1"
    assert load_spec(WORDCOUNT).to_dict() == yaml.safe_load(docs[0]["data"]["topology.yaml"])


def test_render_insecure_has_no_tls_secret(capsys):
    assert main(["render", str(WORDCOUNT), "--image", "squall:1", "--insecure"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert not {"Secret", "NetworkPolicy"} & {d["kind"] for d in docs}
    assert "SQUALL_TLS_DIR" not in {e["name"] for d in docs if d["kind"] == "StatefulSet"
                                    for e in d["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_render_needs_an_image_and_a_valid_topology(tmp_path, capsys):
    assert main(["render", str(WORDCOUNT)]) == 2
    assert "has no image: set spec.image" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(WORDCOUNT.read_text().replace("component: split", "component: splitt"))
    assert main(["render", str(bad), "--image", "x"]) == 2
    assert "unknown component 'splitt'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["render", "submit"])
def test_render_and_submit_refuse_a_namespace_kubernetes_would(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, str(WORDCOUNT), "--image", "x", "-n", "Bad_NS"])
    assert exit_.value.code == 2
    assert "'Bad_NS' is not a namespace name: lowercase letters, digits and '-'" in capsys.readouterr().err


def test_render_and_submit_need_neither_kopf_nor_the_kubernetes_client():
    """A worker image may be built without the operator's dependencies."""
    code = ("import sys; sys.modules['kopf'] = sys.modules['kubernetes'] = None; from squall.cli import main; "
            f"sys.exit(main(['render', {str(WORDCOUNT)!r}, '--image', 'x']) or main(['submit', {str(WORDCOUNT)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "kind: StatefulSet" in done.stdout and "kind: Topology" in done.stdout


def test_submit_writes_the_topology_resource(tmp_path, capsys):
    assert main(["submit", str(WORDCOUNT), "-n", "prod"]) == 0
    cr = yaml.safe_load(capsys.readouterr().out)
    assert (cr["apiVersion"], cr["kind"], cr["metadata"]) == ("squall.dev/v1alpha1", "Topology",
                                                              {"name": "wordcount", "namespace": "prod"})
    assert "name" not in cr["spec"] and cr["spec"]["bolts"][1]["inputs"][0]["grouping"] == {
        "type": "fields", "fields": ["word"]}  # as written: the defaults are the CRD's and the model's
    assert parse_spec("wordcount", cr["spec"]) == load_spec(WORDCOUNT)

    out = tmp_path / "wordcount-topology.yaml"
    assert main(["submit", str(WORDCOUNT), "-o", str(out)]) == 0
    assert "kubectl apply -f" in capsys.readouterr().err
    assert "namespace" not in yaml.safe_load(out.read_text())["metadata"]


def test_submit_warns_when_the_classes_are_not_in_the_default_image_and_no_image_is_given(tmp_path, capsys):
    """Before, it said nothing, and the pods failed at their imports in the cluster (found by the newcomer
    audit). The examples are in the worker image, the default: no warning for them."""
    assert main(["submit", str(WORDCOUNT)]) == 0
    assert "warning" not in capsys.readouterr().err
    own = tmp_path / "mine.yaml"
    own.write_text(WORDCOUNT.read_text().replace("examples.wordcount:WordCount", "mytopo.bolts:WordCount"))
    assert main(["submit", str(own)]) == 0
    assert ("warning: no image: the pods will run the operator's default image, which holds squall and its "
            "examples only, not mytopo.bolts: build an image FROM it with your modules and give --image") in \
        capsys.readouterr().err
    assert main(["submit", str(own), "--image", "registry.example/mytopo:1"]) == 0
    assert "no image" not in capsys.readouterr().err


@pytest.mark.parametrize("command", [["render", "--image", "x"], ["submit"]])
def test_render_and_submit_refuse_a_topology_named_default(command, tmp_path, capsys):
    """Both said it was fine, and the operator refused the Topology (found by the configuration audit)."""
    named = tmp_path / "default.yaml"
    named.write_text(WORDCOUNT.read_text().replace("name: wordcount", "name: default"))
    assert main([command[0], str(named), *command[1:]]) == 2
    assert f"{named}: name 'default' is taken: the Topology's ServiceAccount bears its name" in capsys.readouterr().err


def test_settings_from_the_environment():
    assert Settings.from_env({}) == Settings()
    assert Settings().clusterwide and Settings().podmonitor == "auto"
    s = Settings.from_env({"SQUALL_OPERATOR_NAMESPACES": " team-a, team-b ,", "SQUALL_OPERATOR_IMAGE": "squall:1",
                           "SQUALL_OPERATOR_LOG_LEVEL": "debug", "SQUALL_OPERATOR_PODMONITOR": "False",
                           "SQUALL_OPERATOR_LIVENESS": "http://0.0.0.0:9999/healthz"})
    assert s == Settings(namespaces=("team-a", "team-b"), image="squall:1", log_level="DEBUG", podmonitor="false",
                         liveness="http://0.0.0.0:9999/healthz")
    assert not s.clusterwide and s.log_level_number == logging.DEBUG
    with pytest.raises(ConfigError, match="SQUALL_OPERATOR_LOG_LEVEL='LOUD'"):
        Settings.from_env({"SQUALL_OPERATOR_LOG_LEVEL": "loud"})
    with pytest.raises(ConfigError, match="SQUALL_OPERATOR_PODMONITOR='maybe': use auto, true or false"):
        Settings.from_env({"SQUALL_OPERATOR_PODMONITOR": "maybe"})
    labelled = Settings.from_env({"SQUALL_OPERATOR_PODMONITOR_LABELS": " release=kps , team=data,"})
    assert labelled.podmonitor_labels == (("release", "kps"), ("team", "data"))
    with pytest.raises(ConfigError, match="SQUALL_OPERATOR_PODMONITOR_LABELS: 'release' is not key=value"):
        Settings.from_env({"SQUALL_OPERATOR_PODMONITOR_LABELS": "release"})


@pytest.mark.parametrize(("env", "message"), [
    # two servers on one port both bound it, and each took some of the connections
    ({"SQUALL_OPERATOR_WEBHOOK_PORT": "9090"},
     "SQUALL_OPERATOR_WEBHOOK_PORT and SQUALL_OPERATOR_METRICS_PORT are both 9090: give them different ports"),
    ({"SQUALL_OPERATOR_METRICS_PORT": "8080"},
     "SQUALL_OPERATOR_METRICS_PORT and SQUALL_OPERATOR_LIVENESS are both 8080"),
    ({"SQUALL_OPERATOR_WEBHOOK_PORT": "70000"}, "SQUALL_OPERATOR_WEBHOOK_PORT=70000 is not a port: use 1 to 65535"),
    ({"SQUALL_OPERATOR_LIVENESS": "http://0.0.0.0:99999/healthz"}, "SQUALL_OPERATOR_LIVENESS='http://0.0.0.0:99999"),
    # drift repair never ran
    ({"SQUALL_OPERATOR_RESYNC_SECONDS": "inf"}, "SQUALL_OPERATOR_RESYNC_SECONDS='inf': use a positive number"),
    ({"SQUALL_OPERATOR_RESYNC_SECONDS": "nan"}, "use a positive number"),
])
def test_settings_that_cannot_work_are_refused(env, message):
    """Found by the configuration audit: each was taken."""
    with pytest.raises(ConfigError) as refused:
        Settings.from_env(env)
    assert message in str(refused.value)


def test_a_misspelled_setting_is_named_with_the_one_meant(caplog):
    """SQUALL_OPERATOR_NAMESPACE (no S) was ignored in silence, and the operator watched every namespace.
    What Kubernetes sets for a Service named squall-operator is no setting, and not warned of."""
    settings = Settings.from_env({"SQUALL_OPERATOR_NAMESPACE": "team-a", "SQUALL_OPERATOR_SERVICE_HOST": "10.0.0.1",
                                  "SQUALL_OPERATOR_PORT_443_TCP_ADDR": "10.0.0.1",
                                  "SQUALL_OPERATOR_PORT": "tcp://10.0.0.1:443"})
    assert settings.clusterwide
    assert [r.getMessage() for r in caplog.records] == [
        "SQUALL_OPERATOR_NAMESPACE is not a setting of the operator and is ignored; did you mean "
        "SQUALL_OPERATOR_NAMESPACES?"]


def test_tls_and_network_policy_settings():
    assert Settings().tls and Settings().metrics_from == ()
    s = Settings.from_env({"SQUALL_OPERATOR_TLS": "False", "SQUALL_OPERATOR_METRICS_NAMESPACES": "monitoring, obs",
                           "SQUALL_OPERATOR_POD_NAMESPACE": "squall-system"})
    assert not s.tls and s.metrics_from == ("monitoring", "obs", "squall-system")
    assert Settings.from_env({"SQUALL_OPERATOR_NETWORK_POLICY": "false"}).metrics_from is None  # no NetworkPolicy
    with pytest.raises(ConfigError, match="SQUALL_OPERATOR_TLS='yes': use true or false"):
        Settings.from_env({"SQUALL_OPERATOR_TLS": "yes"})


def test_kopf_runs_standalone_and_keeps_its_state_in_annotations():
    settings = kopf_settings(Settings(), client.ApiClient())
    assert settings.peering.standalone and not settings.scanning.disabled
    # no cluster-wide listing needed
    assert kopf_settings(Settings(namespaces=("a",)), client.ApiClient()).scanning.disabled
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert settings.persistence.progress_storage.prefix == "squall.dev"
    assert settings.persistence.diffbase_storage.prefix == "squall.dev"


def test_webhook_and_resync_settings():
    assert (Settings().webhook_host, Settings().webhook_port, Settings().webhook_failure_policy) == (None, 9443, "Fail")
    assert Settings().resync_seconds == 60
    s = Settings.from_env({"SQUALL_OPERATOR_WEBHOOK_HOST": "squall-webhook.ops.svc",
                           "SQUALL_OPERATOR_WEBHOOK_PORT": "8443", "SQUALL_OPERATOR_WEBHOOK_FAILURE_POLICY": "ignore",
                           "SQUALL_OPERATOR_RESYNC_SECONDS": "2.5"})
    assert (s.webhook_host, s.webhook_port, s.webhook_failure_policy, s.resync_seconds) == (
        "squall-webhook.ops.svc", 8443, "Ignore", 2.5)
    settings = kopf_settings(s, client.ApiClient())
    # kopf neither serves the webhook (every replica does, kopf runs in the leader alone: admission.Webhook) nor
    # manages its configuration (it would create configurations: the chart makes the one it needs)
    assert settings.admission.managed is None and settings.admission.server is None
    with pytest.raises(ConfigError, match="SQUALL_OPERATOR_WEBHOOK_FAILURE_POLICY='Maybe': use Fail or Ignore"):
        Settings.from_env({"SQUALL_OPERATOR_WEBHOOK_FAILURE_POLICY": "maybe"})
    with pytest.raises(ConfigError, match="SQUALL_OPERATOR_RESYNC_SECONDS='0': use a positive number"):
        Settings.from_env({"SQUALL_OPERATOR_RESYNC_SECONDS": "0"})
    with pytest.raises(ConfigError, match="SQUALL_OPERATOR_WEBHOOK_PORT='x': use a positive integer"):
        Settings.from_env({"SQUALL_OPERATOR_WEBHOOK_PORT": "x"})


def test_validate_takes_topology_resources_as_submit_prints_them(tmp_path, capsys):
    out = tmp_path / "wordcount-topology.yaml"
    assert main(["submit", str(WORDCOUNT), "-n", "prod", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["validate", str(out), "--no-imports"]) == 0
    assert "topology 'wordcount' is valid: 1 spout(s), 2 bolt(s)" in capsys.readouterr().out

    cr = yaml.safe_load(out.read_text())
    other = {**cr, "metadata": {"name": "other"}}
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump_all([cr, other]))
    assert main(["validate", str(both), "--no-imports"]) == 0
    assert capsys.readouterr().out.count("is valid") == 2

    cr["spec"]["bolts"][1]["inputs"][0]["component"] = "splitt"
    cr["spec"]["resources"] = {"request": {"cpu": "1"}}
    out.write_text(yaml.safe_dump(cr))
    assert main(["validate", str(out), "--no-imports"]) == 2
    assert "Topology prod/wordcount spec is invalid:\n  resources.request: unknown key; did you mean 'requests'?" in \
        capsys.readouterr().err

    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump_all([yaml.safe_load(both.read_text().split("---")[0]),
                                         {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]))
    assert main(["validate", str(mixed)]) == 2
    assert "document 2 is a v1 ConfigMap, not a squall.dev/v1alpha1 Topology" in capsys.readouterr().err

    # it said the spec "must be a mapping ..., got NoneType" (found by the configuration audit)
    cr["specs"] = cr.pop("spec")
    out.write_text(yaml.safe_dump(cr))
    assert main(["validate", str(out)]) == 2
    assert "document 1: unknown key 'specs'; did you mean 'spec'?" in capsys.readouterr().err


def test_submit_checks_the_classes_where_it_can_import_them_and_sets_the_image(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # examples.wordcount is importable from here
    bad = tmp_path / "bad.yaml"
    bad.write_text(WORDCOUNT.read_text().replace("examples.wordcount:SplitSentence", "examples.wordcount:Split"))
    assert main(["submit", str(bad)]) == 2
    assert "module 'examples.wordcount' has no 'Split'" in capsys.readouterr().err

    assert main(["submit", str(WORDCOUNT), "--image", "registry.example.com/wordcount:3"]) == 0
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out)["spec"]["image"] == "registry.example.com/wordcount:3"
    assert "warning" not in captured.err

    monkeypatch.chdir(tmp_path)  # elsewhere the user's modules cannot be imported: a warning, not an error
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(REPO))])
    for name in [m for m in sys.modules if m == "examples" or m.startswith("examples.")]:
        monkeypatch.delitem(sys.modules, name)
    assert main(["submit", str(bad)]) == 0
    assert "warning: cannot import examples.wordcount here, so the classes are not checked" in \
        capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"squall {importlib.metadata.version('squall')}"


def test_the_operator_without_a_cluster_says_what_to_set(tmp_path):
    """No service account and no kubeconfig: one line that says what to do, not the client's tracebacks."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env |= {"HOME": str(tmp_path), "SQUALL_OPERATOR_IMAGE": "squall:test"}
    done = subprocess.run([sys.executable, "-m", "squall_operator"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("squall-operator: no Kubernetes API to talk to: not in a pod, and no kubeconfig")
    assert "set KUBECONFIG" in done.stderr and "Traceback" not in done.stderr
