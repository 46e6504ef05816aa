"""A topology with stateful bolts that cannot checkpoint is refused before anything runs, naming why and
the fix."""

from __future__ import annotations

import pytest

from squall import Bolt, StatefulBolt, TopologyError, TopologySpec, validate
from squall.testing import TestingSpout


class Count(StatefulBolt):
    outputs = ["value"]

    def execute(self, tup):
        pass


class Plain(Bolt):
    outputs = ["value"]

    def execute(self, tup):
        pass


def spec(*, bolts=None, **top) -> TopologySpec:
    doc = {"name": "t", "spouts": [{"name": "src", "className": "m:Src"}],
           "bolts": bolts or [{"name": "count", "className": "m:Count", "stateful": True,
                               "inputs": [{"component": "src"}]}], **top}
    result = TopologySpec.from_dict(doc, strict=False)
    result._classes.update(src=TestingSpout, count=Count, plain=Plain, other=Plain)
    return result


@pytest.mark.parametrize("top, message", [
    ({"ackers": 0}, "stateful bolt(s) 'count' need ackers: their inputs are acked when the checkpoint holding "
                    "their effect commits"),
    ({"messageTimeoutSeconds": 2, "config": {"topology.state.checkpoint.interval.ms": 1000}},
     "config topology.state.checkpoint.interval.ms (1000 ms) must be under half of messageTimeoutSeconds (2 s)"),
    ({"config": {"topology.state.checkpoint.interval.ms": "1s"}}, "'1s' is not a number of milliseconds"),
    ({"config": {"topology.state.provider": "rocksdb"}}, "'rocksdb' is not a state provider; use one of memory, "
                                                         "embedded, redis"),
])
def test_a_spec_that_cannot_checkpoint_is_refused_naming_the_field_and_the_fix(top, message):
    with pytest.raises(TopologyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec(**top)


def test_the_stateful_flag_and_the_class_must_agree():
    with pytest.raises(TopologyError, match="className 'm:Plain' is not a StatefulBolt subclass"):
        validate(spec(bolts=[{"name": "plain", "className": "m:Plain", "stateful": True,
                              "inputs": [{"component": "src"}]}]))
    undeclared = spec(bolts=[{"name": "count", "className": "m:Count", "inputs": [{"component": "src"}]}])
    with pytest.raises(TopologyError, match="bolt 'count': Count is a StatefulBolt; declare the bolt with stateful: "
                                            "true"):
        validate(undeclared)


def test_a_cycle_of_bolts_is_refused_where_checkpoints_flow():
    cyclic = spec(bolts=[
        {"name": "count", "className": "m:Count", "stateful": True,
         "inputs": [{"component": "src"}, {"component": "other"}]},
        {"name": "other", "className": "m:Plain", "inputs": [{"component": "count"}]}])
    with pytest.raises(TopologyError, match="bolts count -> other -> count form a cycle"):
        validate(cyclic)


def test_a_stateful_topology_has_a_checkpoint_spout_after_the_users_components():
    from squall.topology.plan import Plan

    plan = Plan(spec(bolts=[
        {"name": "count", "className": "m:Count", "stateful": True, "inputs": [{"component": "src"}]},
        {"name": "plain", "className": "m:Plain", "parallelism": 2, "inputs": [{"component": "count"}]}]))
    assert plan.component_tasks == {"count": (1,), "plain": (2, 3), "src": (4,), "__checkpoint": (5,),
                                    "__acker": (6,)}
    # the checkpoint stream follows the topology: from the checkpoint spout to the bolt reading the spout,
    # from that bolt to the bolt reading it
    assert plan.checkpoint_inputs == {1: frozenset({5}), 2: frozenset({1}), 3: frozenset({1})}
