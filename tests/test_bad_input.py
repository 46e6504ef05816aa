"""Bad input never crashes or hangs the spec loader or the Topology CR path: it parses, or it is
refused with a TopologyError that names where the problem is (property-based, with hypothesis)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall.errors import TopologyError
from squall.topology import TopologySpec, validate
from squall.topology.spec import load_spec
from squall_operator.resource import check_spec

VALID = {
    "name": "wc", "workers": 2, "messageTimeoutSeconds": 10,
    "spouts": [{"name": "sentences", "className": "examples.wordcount:SentenceSpout"}],
    "bolts": [{"name": "split", "className": "examples.wordcount:SplitSentence", "parallelism": 2,
               "inputs": [{"component": "sentences"}]},
              {"name": "count", "className": "examples.wordcount:WordCount",
               "inputs": [{"component": "split", "grouping": {"type": "fields", "fields": ["word"]}}]}],
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)

# (path into VALID, key): where a random value replaces what is there
PLACES = [((), "name"), ((), "workers"), ((), "ackers"), ((), "messageTimeoutSeconds"), ((), "maxSpoutPending"),
          ((), "transfer"), ((), "spouts"), ((), "bolts"), ((), "config"), ((), "podTemplate"), ((), "resources"),
          (("spouts", 0), "name"), (("spouts", 0), "className"), (("spouts", 0), "parallelism"),
          (("bolts", 1), "inputs"), (("bolts", 1, "inputs", 0), "grouping"), (("bolts", 1, "inputs", 0), "component"),
          (("bolts", 0), "tasks"), (("bolts", 0), "tickFrequencySeconds"), ((), "unknownKey")]


def _mutate(doc: dict, place: tuple, value: object) -> dict:
    doc = copy.deepcopy(doc)
    path, key = place
    target = doc
    for part in path:
        target = target[part]
    target[key] = value
    return doc


def _refused_well(exc: TopologyError) -> None:
    message = str(exc)
    assert message and "Traceback" not in message
    assert "invalid" in message or "topology" in message.lower()


@settings(max_examples=300, deadline=None)
@given(place=st.sampled_from(PLACES), value=json_values)
def test_a_spec_with_any_value_anywhere_parses_or_is_refused_naming_the_field(place, value):
    doc = _mutate(VALID, place, value)
    try:
        spec = TopologySpec.from_dict(doc)
    except TopologyError as exc:
        _refused_well(exc)
        path, key = place
        assert key in str(exc) or any(str(p) in str(exc) for p in path), str(exc)
        return
    try:
        validate(spec, imports=False)
    except TopologyError as exc:
        _refused_well(exc)


@settings(max_examples=200, deadline=None)
@given(doc=json_values)
def test_any_document_parses_or_is_refused(doc):
    try:
        TopologySpec.from_dict(doc)
    except TopologyError as exc:
        _refused_well(exc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_any_file_loads_or_is_refused(tmp_path, text):
    path = tmp_path / "topology.yaml"
    path.write_text(text)
    try:
        load_spec(path)
    except TopologyError as exc:
        _refused_well(exc)


@settings(max_examples=300, deadline=None)
@given(place=st.sampled_from(PLACES), value=json_values, name=st.sampled_from(["wc", "other", "Bad_Name", ""]))
def test_a_topology_resource_spec_parses_or_is_refused(place, value, name):
    """The operator's path: a Topology CR's spec (metadata.name the topology's name), never importing code."""
    spec = _mutate({k: v for k, v in VALID.items() if k != "name"}, place, value) if place != ((), "name") \
        else _mutate(VALID, place, value)
    try:
        check_spec(name, spec, namespace="ns")
    except TopologyError as exc:
        _refused_well(exc)
        # the resource, when the spec does not parse; the topology (its name), when its wiring is wrong
        assert str(exc).startswith((f"Topology ns/{name}", f"topology {name!r}")), str(exc)


@pytest.mark.parametrize("text", ["spouts: [", "- a\n- b", "name: wc\nspouts: !!python/object:os.system {}"])
def test_malformed_yaml_is_refused_and_never_executed(tmp_path, text):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(TopologyError):  # safe_load: a tag that would build an object is refused
        load_spec(path)
