"""values.yaml documents every value, and values.schema.json refuses bad ones (through Helm's own validator)."""

from __future__ import annotations

import json
import re

import helm_python as helm
import pytest
import yaml
from chart_support import CHART, NAMESPACE, render

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES_TEXT = (CHART / "values.yaml").read_text()

BAD_VALUES = [
    # (values, what the error names)
    ({"watchNamespace": ["team-a"]}, "watchNamespace"),  # misspelled: would be ignored without the schema
    ({"image": {"repository": "squall", "pullPolicy": "Sometimes"}}, "pullPolicy"),
    ({"image": {"repository": "", "pullPolicy": "Always"}}, "repository"),
    ({"logLevel": "TRACE"}, "logLevel"),
    ({"watchNamespaces": ["Team_A"]}, "watchNamespaces"),
    ({"watchNamespaces": ["team-a", "team-a"]}, "watchNamespaces"),
    ({"watchNamespaces": "team-a"}, "watchNamespaces"),
    ({"topologyPodMonitors": "maybe"}, "topologyPodMonitors"),
    ({"resources": {"requests": {"cpu": "lots"}}}, "cpu"),
    ({"resources": {"request": {"cpu": "1"}}}, "request"),
    ({"rbac": {"create": "yes"}}, "create"),
    ({"serviceAccount": {"annotations": {"replicas": 2}}}, "replicas"),
    ({"imagePullSecrets": ["regcred"]}, "imagePullSecrets"),
    ({"monitoring": {"podMonitor": {"enabled": "true"}}}, "enabled"),
    ({"monitoring": {"podMonitor": {"enabled": True, "interval": "30 seconds"}}}, "interval"),
    ({"monitoring": {"prometheusRule": {"enabled": True}}}, "prometheusRule"),
    ({"monitoring": {"operatorPodMonitor": {"enabled": "maybe"}}}, "enabled"),
    ({"grafanaDashboard": {"enabled": True, "namespace": "Monitoring"}}, "namespace"),
    # the operator's /metrics and /healthz ports: both servers bound it (found by the configuration audit)
    ({"webhook": {"enabled": True, "failurePolicy": "Fail", "port": 9090}}, "port"),
    ({"webhook": {"enabled": True, "failurePolicy": "Fail", "port": 8080}}, "port"),
]


@pytest.mark.parametrize(("values", "named"), BAD_VALUES, ids=[named for _, named in BAD_VALUES])
def test_the_schema_rejects_bad_values(values, named):
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError) as raised:
        chart.validate_schema(values)
    assert named in str(raised.value), f"the error should name {named!r}: {raised.value}"


def test_helm_lint_reports_bad_values_as_errors():
    report = helm.lint(CHART, {"logLevel": "TRACE"}, namespace=NAMESPACE)
    assert report["errors"] and any("logLevel" in e for e in report["errors"])


def test_the_schema_accepts_the_defaults_and_every_documented_kind_of_value():
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema({})
        chart.validate_schema(chart.values)
        for values in ({"topologyPodMonitors": True}, {"topologyPodMonitors": "false"},
                       {"resources": {"limits": {"cpu": 2, "memory": "1.5Gi"}}},
                       {"monitoring": {"podMonitor": {"enabled": True, "interval": "1m30s"}}},
                       {"grafanaDashboard": {"enabled": True, "namespace": ""}}, {"global": {"any": "thing"}}):
            chart.validate_schema(values)
    render({"topologyPodMonitors": False})  # helm --set turns false into a boolean


def _schema_leaves(schema: dict, path: tuple[str, ...] = ()):
    """Paths of the chart's own values. Groups of values are walked; free-form maps and objects of a
    Kubernetes type (with a ``description`` in the schema, such as resources) are leaves."""
    for key, sub in schema.get("properties", {}).items():
        if "properties" in sub and "description" not in sub:
            yield from _schema_leaves(sub, (*path, key))
        else:
            yield (*path, key)


def _key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line of every mapping key in values.yaml, by its path (two-space indentation)."""
    found, stack = {}, []
    for number, line in enumerate(text.splitlines()):
        match = re.match(r"^( *)([A-Za-z][\w.-]*):", line)
        if not match:
            continue
        depth = len(match.group(1)) // 2
        stack = [*stack[:depth], match.group(2)]
        found[tuple(stack)] = number
    return found


def test_every_value_has_a_default_a_comment_and_a_schema():
    lines, keys = VALUES_TEXT.splitlines(), _key_lines(VALUES_TEXT)
    leaves = [leaf for leaf in _schema_leaves(SCHEMA) if leaf != ("global",)]
    for leaf in leaves:
        assert leaf in keys, f"{'.'.join(leaf)} is in values.schema.json but has no default in values.yaml"
        above = lines[keys[leaf] - 1].strip()
        assert above.startswith("#"), f"{'.'.join(leaf)} in values.yaml has no comment above it"
    # and the other way round: the schema refuses what it does not know, so it must know every value
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(yaml.safe_load(VALUES_TEXT))
    assert SCHEMA["additionalProperties"] is False


def test_the_readme_lists_every_value_with_its_default():
    readme = (CHART / "README.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w.]+)` \| `(.*?)` \|", readme, re.M)}
    values = yaml.safe_load(VALUES_TEXT)
    leaves = [leaf for leaf in _schema_leaves(SCHEMA) if leaf != ("global",)]
    for leaf in leaves:
        path = ".".join(leaf)
        assert path in rows, f"charts/squall/README.md does not list {path}"
        default = values
        for key in leaf:
            default = default[key]
        assert json.loads(rows[path]) == default, f"README.md gives {path} the default {rows[path]}"
    assert set(rows) == {".".join(leaf) for leaf in leaves}, "README.md lists values the chart does not have"
