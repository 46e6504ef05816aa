"""Topology specs (YAML or built in Python), validation, the layout and assignment, and the run plan."""

from squall.topology.builder import TopologyBuilder
from squall.topology.plan import Plan, validate
from squall.topology.spec import Grouping, GroupingType, TopologySpec, load_spec

__all__ = ["Grouping", "GroupingType", "Plan", "TopologyBuilder", "TopologySpec", "load_spec", "validate"]
