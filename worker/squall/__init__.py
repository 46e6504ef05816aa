"""Squall: Apache Storm's guaranteed-processing stream engine, in Python, for Kubernetes."""

import os as _os

if _os.environ.get("SQUALL_PURE_PYTHON") == "1":  # first: before any compiled module is imported
    from squall import _pure

    _pure.install()

from squall.api import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    OutputCollector,
    OutputStream,
    Spout,
    SpoutOutputCollector,
    StatefulBolt,
    TopologyContext,
    direct,
)
from squall.errors import (
    ConfigError,
    EmitError,
    FailedException,
    ReportedFailedException,
    SquallError,
    TopologyError,
)
from squall.topology import TopologyBuilder, TopologySpec, load_spec, validate
from squall.tuples import Fields, Tuple
from squall.windows import Count, Duration, Window, WindowedBolt

__all__ = [
    "BasicBolt", "BasicOutputCollector", "Bolt", "ConfigError", "Count", "Duration", "EmitError", "FailedException",
    "Fields", "OutputCollector", "OutputStream", "ReportedFailedException", "Spout", "SpoutOutputCollector",
    "SquallError", "StatefulBolt", "TopologyBuilder", "TopologyContext", "TopologyError", "TopologySpec", "Tuple",
    "Window", "WindowedBolt", "direct", "load_spec", "validate",
]
