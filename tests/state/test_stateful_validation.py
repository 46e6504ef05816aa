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
    ({"config": {"topology.state.guarantee": "exactly-once"}}, "'exactly-once' is not a state guarantee; use one "
                                                               "of at_least_once, exactly_once"),
    ({"config": {"topology.state.guarantee": "exactly_once"}, "bolts": [{"name": "plain", "className": "m:Plain",
                                                                       "inputs": [{"component": "src"}]}]},
     "exactly_once is a promise about state, and no bolt is stateful"),
    ({"bolts": [{"name": "count", "className": "m:Count", "stateful": True, "inputs": [{"component": "src"}],
                 "config": {"topology.state.guarantee": "exactly_once"}}]},
     "component(s) 'count': config topology.state.guarantee is the topology's"),
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


def test_exactly_once_refuses_a_spout_that_cannot_read_again_from_a_checkpoint():
    """TestingSpout is no offset spout: exactly once would need it to rewind after a failure."""
    with pytest.raises(TopologyError, match="spout 'src': topology.state.guarantee: exactly_once reads every record "
                                            "again from the last checkpoint .* TestingSpout is not one"):
        validate(spec(config={"topology.state.guarantee": "exactly_once"}))


def test_exactly_once_sends_checkpoints_through_the_spouts_behind_their_tuples():
    """The checkpoint spout's stream reaches the spouts, and each bolt aligns on its own input tasks."""
    from squall.spouts.log import LogSpout
    from squall.topology.plan import Plan

    eo = spec(config={"topology.state.guarantee": "exactly_once"})
    eo._classes["src"] = LogSpout
    plan = Plan(eo)
    assert [s.component for s in plan.subscribers[("__checkpoint", "__checkpoint")]] == ["src"]
    assert [s.component for s in plan.subscribers[("src", "__checkpoint")]] == ["count"]
    (count_task,) = plan.component_tasks["count"]
    assert plan.checkpoint_inputs[count_task] == frozenset(plan.component_tasks["src"])
