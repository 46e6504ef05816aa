"""The architecture holds: the public docstring examples run, and the import layering is kept.

``python tests/import_graph.py`` prints the graph these checks read.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

from import_graph import cycles, graph

DOCTESTED = ["squall.api", "squall.topology.builder", "squall.testing", "squall.topology.assignment"]


@pytest.mark.parametrize("module", DOCTESTED)
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_no_import_cycles_even_for_type_checking():
    assert cycles(graph(type_checking=True)) == []


@pytest.mark.parametrize("module, forbidden", [
    ("squall.api", "squall.executor"),  # the public faces know nothing of their implementations
    ("squall.spouts", "squall.executor"),  # spouts and Spark bolts are written against squall.api
    ("squall.spark", "squall.executor"),
    ("squall.transport.codec", "squall.executor"),  # the wire knows the acker's messages, not executors
    ("squall.topology.assignment", "squall.api"),  # the assignment imports no user-facing classes
    ("squall_operator", "squall.executor"),  # the operator renders; it runs no engine
])
def test_layering(module, forbidden):
    edges = graph(type_checking=True)
    offenders = {f"{m} -> {d}" for m, deps in edges.items() if m == module or m.startswith(f"{module}.")
                 for d in deps if d == forbidden or d.startswith(f"{forbidden}.")}
    assert not offenders
