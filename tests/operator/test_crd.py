"""The Topology CRD: generated from the spec model and current, valid for Kubernetes, and in agreement
with the model on which documents are good.

The API server is not here, so its validation is emulated with ``jsonschema`` on the CRD's schema,
translated as the API server reads it: ``nullable`` adds null to the type, and unknown fields are
errors (kubectl's strict field validation, its default).
"""

from __future__ import annotations

import copy
import pathlib
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from squall.errors import TopologyError
from squall.topology.spec import TopologySpec, load_spec
from squall_operator import crd
from squall_operator.resource import check_spec, parse_spec, to_resource

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def test_the_checked_in_crd_is_generated_from_the_current_model():
    assert (REPO / "crds" / "topology.yaml").read_text() == crd.crd_yaml(), \
        "crds/topology.yaml is stale: run python -m squall_operator.crd"
    assert (REPO / "crds" / "topology-cel.yaml").read_text() == crd.crd_yaml(cel=True)
    assert (REPO / "charts" / "squall" / "crds" / "topology.yaml").read_text() == crd.crd_yaml()
    assert not (REPO / "charts" / "squall" / "crds" / "topology-cel.yaml").exists()  # 1.20 would refuse it
    assert crd.main(["--check"]) == 0


def test_the_crd_files_have_no_yaml_anchors_or_aliases():
    """Anchors (&id001) and aliases (*id001) confuse kustomize patches and GitOps diffs."""
    for cel in (False, True):
        events = list(yaml.parse(crd.crd_yaml(cel=cel)))
        assert not any(getattr(e, "anchor", None) for e in events)
        assert not any(isinstance(e, yaml.AliasEvent) for e in events)


def test_check_fails_on_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "topology.yaml"
    stale.write_text(crd.crd_yaml().replace("minimum: 1", "minimum: 2", 1))
    assert crd.main(["--check", "--output", str(stale)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert crd.main(["--output", str(stale)]) == 0
    assert stale.read_text() == crd.crd_yaml()


@pytest.mark.parametrize("cel", [False, True])
def test_the_crd_is_a_valid_kubernetes_object(cel):
    kubernetes_validate.validate(yaml.safe_load(crd.crd_yaml(cel=cel)), "1.30.0", strict=True)


def test_only_the_cel_rendering_has_cel_rules():
    assert "x-kubernetes-validations" not in crd.crd_yaml()
    assert crd.crd_yaml(cel=True).count("x-kubernetes-validations") == 4  # spouts, bolts, groupings, the spec


def version() -> dict[str, Any]:
    return crd.crd()["spec"]["versions"][0]


def test_names_subresources_and_columns():
    spec = crd.crd()["spec"]
    assert crd.crd()["metadata"]["name"] == "topologies.squall.dev"
    assert (spec["group"], spec["scope"], version()["name"]) == ("squall.dev", "Namespaced", "v1alpha1")
    assert spec["names"]["shortNames"] == ["topo"] and spec["names"]["kind"] == "Topology"
    assert version()["subresources"] == {"status": {}, "scale": {
        "specReplicasPath": ".spec.workers", "statusReplicasPath": ".status.workers",
        "labelSelectorPath": ".status.selector"}}
    root = version()["schema"]["openAPIV3Schema"]["properties"]
    for column in version()["additionalPrinterColumns"]:
        section, field = column["jsonPath"].lstrip(".").split(".", 1)
        assert section == "metadata" or field.split("[")[0] in root[section]["properties"], column
    assert [c["name"] for c in version()["additionalPrinterColumns"]] == ["Workers", "Ackers", "Ready", "Phase",
                                                                         "Reason", "Age"]
    # the Reason column is the Degraded condition's: why pods do not run
    assert version()["additionalPrinterColumns"][4]["jsonPath"] == '.status.conditions[?(@.type=="Degraded")].reason'

    spec_schema = root["spec"]["properties"]
    assert spec_schema["workers"] == {"type": "integer", "default": 1, "minimum": 1}
    assert spec_schema["messageTimeoutSeconds"] == {"type": "integer", "default": 30, "minimum": 1}
    assert spec_schema["ackers"] | {"description": ""} == {"type": "integer", "nullable": True, "minimum": 0,
                                                         "description": ""}
    grouping = spec_schema["bolts"]["items"]["properties"]["inputs"]["items"]["properties"]["grouping"]
    assert grouping["properties"]["type"]["enum"] == ["shuffle", "fields", "all", "global", "none", "direct",
                                                      "localOrShuffle", "custom"]
    for key in ("tickFrequencySeconds", "spoutWait", "errorReporting", "transfer", "executorQueueSize",
                "maxSpoutPending", "image", "imagePullPolicy", "resources", "suspended", "spark"):
        assert key in spec_schema or key in spec_schema["bolts"]["items"]["properties"], key


def test_the_schema_is_structural():
    """What the API server demands of a CRD schema: a type on every node (or preserved unknown
    fields), and no references, unions or additionalProperties next to properties."""
    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("x-kubernetes-int-or-string"):  # the one union a structural schema allows
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}] and "type" not in node, path
            return
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        for banned in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "title"):
            assert banned not in node, f"{path}: {banned}"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("default", 0) is not None, path
        for name, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{name}")
        if "items" in node:
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")
    walk(version()["schema"]["openAPIV3Schema"], "")


def as_api_server(node: dict[str, Any]) -> dict[str, Any]:
    """The CRD schema as JSON schema, read as the API server reads it."""
    node = copy.deepcopy(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: as_api_server(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = as_api_server(value)
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):  # OpenAPI 3.0's flag, JSON schema's number
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[key] = node[bound]
        elif not key.startswith("x-kubernetes-") and key not in ("nullable", "default", "format"):
            out[key] = value
    for bound in ("minimum", "maximum"):
        if node.get(f"exclusive{bound.capitalize()}") is True:
            out.pop(bound, None)
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False  # strict field validation
    if node.get("nullable"):  # a null passes every other check of a nullable field
        return {"anyOf": [{"type": "null"}, out]}
    return out


SPEC_SCHEMA = as_api_server(version()["schema"]["openAPIV3Schema"]["properties"]["spec"])


def crd_accepts(doc: Any) -> bool:
    return not list(jsonschema.Draft202012Validator(SPEC_SCHEMA).iter_errors(doc))


def model_accepts(doc: Any) -> bool:
    try:
        parse_spec("wc", doc)
    except TopologyError:
        return False
    return True


MINIMAL = {"spouts": [{"name": "s", "className": "m:S"}]}
FULL = {
    "name": "wc", "workers": 3, "ackers": None, "messageTimeoutSeconds": 10, "maxSpoutPending": None,
    "executorQueueSize": 64, "spoutWait": {"level1Count": 1, "level2Count": 2, "level3SleepMs": 0.5},
    "errorReporting": {"maxPerInterval": 2, "intervalSeconds": 1.5, "keepLast": 3},
    "transfer": {"batchSize": 128, "flushIntervalMs": 0.5, "maxFrameBytes": 65536, "maxValueBytes": 32768},
    "config": {"anything": {"nested": [1, "two"]}},
    "spouts": [{"name": "s", "className": "m:S", "parallelism": 2, "tasks": 4, "config": {"k": 1}}],
    "bolts": [{"name": "b", "className": "m:B", "tasks": None, "tickFrequencySeconds": 0.5,
               "inputs": [{"component": "s", "stream": "default",
                           "grouping": {"type": "fields", "fields": ["w"], "customClass": None}},
                          {"component": "s", "grouping": {"type": "custom", "customClass": "m:G"}},
                          {"component": "s", "grouping": {"type": "localOrShuffle", "fields": None}}]}],
    "image": "squall:1", "imagePullPolicy": None, "resources": {"limits": {"cpu": 2}}, "suspended": True,
    "spark": {"executorImage": None, "executors": 1, "executorCores": 2, "executorMemory": "512m",
              "driverMemory": "2g", "conf": {"spark.a": "b"}},
}


def with_(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``doc`` with ``value`` at a dotted ``path`` (integers index lists); ``...`` deletes the key."""
    doc = copy.deepcopy(doc)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = doc
    for part in parents:
        node = node[part]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return doc


GOOD = {
    "minimal": MINIMAL,
    "every field": FULL,
    "imagePullPolicy": with_(FULL, "imagePullPolicy", "Always"),
    "no ackers": with_(MINIMAL, "ackers", 0),
    "pod templates and typed resources": {**MINIMAL, "resources": {"requests": {"cpu": "500m", "memory": 1024}},
                                         "podTemplate": {"workers": {"metadata": {"labels": {"a": "b"}},
                                                                     "resources": {"limits": {"memory": "1Gi"}},
                                                                     "spec": {"nodeSelector": {"disk": "ssd"}}},
                                                         "ackers": None}},
    "a default stream and grouping": {**MINIMAL, "bolts": [{"name": "b", "className": "m:B",
                                                           "inputs": [{"component": "s"}]}]},
    **{f"example {p.stem}": to_resource(load_spec(p))["spec"] for p in EXAMPLES},
}
BAD = {
    "workers 0": with_(FULL, "workers", 0),
    "negative ackers": with_(FULL, "ackers", -1),
    "message timeout 0": with_(FULL, "messageTimeoutSeconds", 0),
    "max spout pending 0": with_(FULL, "maxSpoutPending", 0),
    "queue size 0": with_(FULL, "executorQueueSize", 0),
    "workers not a number": with_(FULL, "workers", "two"),
    "no spouts": with_(FULL, "spouts", ...),
    "empty spouts": with_(FULL, "spouts", []),
    "unknown top-level key": with_(FULL, "wrokers", 2),
    "unknown key in a bolt": with_(FULL, "bolts.0.paralellism", 2),
    "unknown key in a grouping": with_(FULL, "bolts.0.inputs.0.grouping.key", "w"),
    "unknown grouping type": with_(FULL, "bolts.0.inputs.0.grouping.type", "random"),
    "grouping without type": with_(FULL, "bolts.0.inputs.0.grouping.type", ...),
    "bolt without inputs": with_(FULL, "bolts.0.inputs", ...),
    "bolt with empty inputs": with_(FULL, "bolts.0.inputs", []),
    "input without component": with_(FULL, "bolts.0.inputs.0.component", ...),
    "spout without className": with_(FULL, "spouts.0.className", ...),
    "bad component name": with_(FULL, "spouts.0.name", "1spout"),
    "parallelism 0": with_(FULL, "spouts.0.parallelism", 0),
    "tasks 0": with_(FULL, "spouts.0.tasks", 0),
    "tick every 0 s": with_(FULL, "bolts.0.tickFrequencySeconds", 0),
    "negative wait count": with_(FULL, "spoutWait.level1Count", -1),
    "error interval 0": with_(FULL, "errorReporting.intervalSeconds", 0),
    "batch too large": with_(FULL, "transfer.batchSize", 70000),
    "flush interval too long": with_(FULL, "transfer.flushIntervalMs", 1001),
    "frames too small": with_(FULL, "transfer.maxFrameBytes", 1024),
    "bad pull policy": with_(FULL, "imagePullPolicy", "Sometimes"),
    "suspended not a boolean": with_(FULL, "suspended", "maybe"),
    "bad executor memory": with_(FULL, "spark.executorMemory", "1gb"),
    "spark conf not strings": with_(FULL, "spark.conf", {"spark.a": 1}),
    "zero executors": with_(FULL, "spark.executors", 0),
    "resources not a map": with_(FULL, "resources", "big"),
    "a typo in resources": with_(FULL, "resources", {"request": {"cpu": "1"}}),
    "not a quantity": with_(FULL, "resources", {"limits": {"cpu": "lots"}}),
    "a typo in a pod template": with_(FULL, "podTemplate", {"workers": {"spc": {}}}),
    "an unknown role": with_(FULL, "podTemplate", {"drivers": {}}),
    "bad topology name": with_(FULL, "name", "Word_Count"),
    "a topology name beginning with a digit (its Services' would be refused)": with_(FULL, "name", "1wc"),
    "a className without its colon": with_(FULL, "spouts.0.className", "examples.wordcount.SentenceSpout"),
}


@pytest.mark.parametrize("name", GOOD)
def test_both_accept(name):
    assert crd_accepts(GOOD[name]), list(jsonschema.Draft202012Validator(SPEC_SCHEMA).iter_errors(GOOD[name]))
    assert model_accepts(GOOD[name])


@pytest.mark.parametrize("name", BAD)
def test_both_reject(name):
    assert not crd_accepts(BAD[name])
    assert not model_accepts(BAD[name])


def test_a_topology_resource_takes_camel_case_keys_only():
    """A topology file may spell keys either way; a resource's schema has camelCase keys only, and the API
    server would drop (or, strict, refuse) a snake_case one: validation says so instead of passing it."""
    doc = {"message_timeout_seconds": 10, "spouts": [{"name": "s", "className": "m:S"}]}
    assert TopologySpec.from_dict({"name": "wc", **doc}).message_timeout_seconds == 10
    with pytest.raises(TopologyError) as info:
        check_spec("wc", doc)
    assert "message_timeout_seconds: unknown key; did you mean 'messageTimeoutSeconds'?" in str(info.value)


@pytest.mark.parametrize("name", ["1wc", "word_count", "w" * 41])
def test_a_topology_whose_own_name_is_refused_is_told_of_its_metadata_name(name):
    with pytest.raises(TopologyError) as info:
        check_spec(name, {"spouts": [{"name": "s", "className": "m:S"}]}, namespace="prod")
    assert str(info.value).startswith(f"Topology prod/{name}: metadata.name must be lowercase letters, digits and "
                                      "'-', beginning with a letter")
    assert f"at most 40 characters (got {name!r}); create the Topology under such a name" in str(info.value)


def test_a_topology_named_default_is_refused_since_its_service_account_would_be_the_namespaces_own():
    """Its children bear its name, and every namespace has a ServiceAccount ``default``: such a Topology was
    accepted and then stayed ApplyFailed for good (found by the operator audit)."""
    with pytest.raises(TopologyError) as info:
        check_spec("default", {"spouts": [{"name": "s", "className": "m:S"}]}, namespace="prod")
    assert "Topology prod/default: metadata.name 'default' is taken" in str(info.value)
    assert "give the topology another name" in str(info.value)


# Types are checked as strictly by both: a string that spells a number or a boolean is refused (the model
# converted it, so squall validate called valid what kubectl apply then refused). Where they differ, on
# purpose: rules that tie fields together are only in the model, so such a Topology is accepted by the
# API server and then reported Failed by the operator.
WRONG_TYPES = {
    "workers as a string": with_(FULL, "workers", "2"),
    "suspended as a string": with_(FULL, "suspended", "true"),
    "parallelism as a boolean": with_(FULL, "bolts.0.parallelism", True),
}
ONLY_THE_CRD_ACCEPTS = {
    "fields grouping without fields": with_(FULL, "bolts.0.inputs.0.grouping.fields", ...),
    "fields on a shuffle grouping": with_(FULL, "bolts.0.inputs.2.grouping.fields", ["w"]),
    "custom grouping without customClass": with_(FULL, "bolts.0.inputs.1.grouping.customClass", ...),
    "spec.name other than metadata.name": with_(FULL, "name", "other"),
}


@pytest.mark.parametrize("name", WRONG_TYPES)
def test_the_crd_and_the_model_both_refuse_wrong_types(name):
    assert not model_accepts(WRONG_TYPES[name]) and not crd_accepts(WRONG_TYPES[name])


@pytest.mark.parametrize("name", ONLY_THE_CRD_ACCEPTS)
def test_rules_across_fields_are_the_operators(name):
    assert crd_accepts(ONLY_THE_CRD_ACCEPTS[name]) and not model_accepts(ONLY_THE_CRD_ACCEPTS[name])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_submitted_examples_are_valid_topologies_that_parse_back(path):
    topology = load_spec(path)
    cr = to_resource(topology, namespace="prod")
    assert cr["apiVersion"] == "squall.dev/v1alpha1" and cr["kind"] == "Topology"
    assert cr["metadata"] == {"name": topology.name, "namespace": "prod"}
    root = as_api_server(version()["schema"]["openAPIV3Schema"])
    jsonschema.validate(cr, root)
    assert parse_spec(cr["metadata"]["name"], cr["spec"]) == topology


# The CEL rules (Kubernetes >= 1.25), evaluated with cel-python as the API server would: on each node
# that has rules, after it has dropped the nulls of fields that are not nullable and filled in defaults.
CEL_SPEC = crd.crd(cel=True)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _defaulted(node: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict):
        props = node.get("properties", {})
        out = {k: v for k, v in value.items() if v is not None or props.get(k, {}).get("nullable")}
        for name, sub in node.get("properties", {}).items():
            if name not in out and "default" in sub and sub["default"] is not None:
                out[name] = copy.deepcopy(sub["default"])
        return {k: _defaulted(node.get("properties", {}).get(k, {}), v) for k, v in out.items()}
    if isinstance(value, list):
        return [_defaulted(node.get("items", {}), v) for v in value]
    return value


def cel_failures(doc: Any) -> list[str]:
    """The messages of the CEL rules ``doc`` breaks."""
    import celpy

    env = celpy.Environment()
    failures: list[str] = []

    def walk(node: dict[str, Any], value: Any) -> None:
        for rule in node.get("x-kubernetes-validations", ()):
            if not env.program(env.compile(rule["rule"])).evaluate({"self": celpy.json_to_cel(value)}):
                failures.append(rule["message"])
        if isinstance(value, dict):
            for name, sub in node.get("properties", {}).items():
                if name in value:
                    walk(sub, value[name])
        elif isinstance(value, list):
            for item in value:
                walk(node.get("items", {}), item)

    walk(CEL_SPEC, _defaulted(CEL_SPEC, doc))
    return failures


CEL_REJECTS = {
    "fields grouping without fields": (ONLY_THE_CRD_ACCEPTS["fields grouping without fields"],
                                       "a fields grouping needs 'fields'"),
    "fields on a shuffle grouping": (ONLY_THE_CRD_ACCEPTS["fields on a shuffle grouping"],
                                     "'fields' is only for the fields grouping"),
    "custom grouping without customClass": (ONLY_THE_CRD_ACCEPTS["custom grouping without customClass"],
                                            "a custom grouping needs 'customClass'"),
    "tasks below parallelism": (with_(FULL, "spouts.0.tasks", 1), "tasks is less than parallelism"),
    "a spout and a bolt of one name": (with_(FULL, "bolts.0.name", "s"), "component names must be unique"),
    "an input from nowhere": (with_(FULL, "bolts.0.inputs.0.component", "t"), "inputs must name a spout or bolt"),
}


@pytest.mark.parametrize("name", GOOD)
def test_the_cel_rules_accept_what_the_model_accepts(name):
    assert cel_failures(GOOD[name]) == []


@pytest.mark.parametrize("name", CEL_REJECTS)
def test_the_cel_rules_refuse_what_the_model_refuses(name):
    doc, message = CEL_REJECTS[name]
    assert [f for f in cel_failures(doc) if message in f], cel_failures(doc)
    with pytest.raises(TopologyError):  # and so do the operator and its webhook
        check_spec("wc", doc)
