"""Topology specs (YAML or built in Python), validation and the resolved run plan."""

from squall.topology.builder import TopologyBuilder
from squall.topology.context import TopologyContext
from squall.topology.plan import Plan, validate
from squall.topology.spec import Grouping, GroupingType, TopologySpec, load_spec

__all__ = ["Grouping", "GroupingType", "Plan", "TopologyBuilder", "TopologyContext", "TopologySpec",
           "load_spec", "validate"]
