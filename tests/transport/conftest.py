"""The ``plan`` fixture: the transport tests' small topology, words → upper (2 tasks) → last."""

from __future__ import annotations

import pytest
from transport_support import Last, Upper, Words

from squall import TopologyBuilder
from squall.topology import Plan


@pytest.fixture
def plan() -> Plan:
    builder = TopologyBuilder("wire")
    builder.set_spout("words", Words)
    builder.set_bolt("upper", Upper, parallelism=2).shuffle_grouping("words")
    builder.set_bolt("last", Last).shuffle_grouping("upper")  # consumes upper only, never words
    return Plan(builder.build())
