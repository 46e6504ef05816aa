"""``squall validate FILE``: check a topology without running it.

``FILE`` is a topology YAML, or a Topology resource (what ``squall submit`` prints and GitOps
repositories hold; several, as a multi-document YAML). Resources are checked as the operator and its
admission webhook check them, with the same messages, plus the classes unless ``--no-imports``.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

from squall.errors import SquallError, TopologyError
from squall.topology import TopologySpec, load_spec
from squall.topology.spec import yaml_documents


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("validate", help="check a topology file or Topology resource (structure, streams, "
                              "fields, classes, pod templates)")
    p.add_argument("topology", help="path to the topology YAML, or to a Topology resource")
    p.add_argument("--no-imports", action="store_true", help="skip checks that import user classes")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Every topology of the file checked, each one's errors said under its name: one invalid document
    does not hide the next one's errors."""
    documents = load_topologies(args.topology)
    invalid = 0
    for label, load in documents:
        try:
            spec = load()
            check(spec, imports=not args.no_imports)
        except SquallError as exc:
            if len(documents) == 1:
                raise
            invalid += 1
            print(f"squall validate: {label}:\n  " + str(exc).replace("\n", "\n  "), file=sys.stderr)
            continue
        print(f"topology {spec.name!r} is valid: {len(spec.spouts)} spout(s), {len(spec.bolts)} bolt(s), "
              f"{spec.workers} worker(s), {spec.num_ackers} acker(s)")
    if invalid:
        print(f"squall validate: {invalid} of {len(documents)} documents are invalid", file=sys.stderr)
        return 2
    return 0


def load_topologies(path: str) -> list[tuple[str, Callable[[], TopologySpec]]]:
    """The topologies of a topology YAML, or of the Topology resources in a (multi-document) YAML file: each
    named (``document 2, topology 'x'``), with what loads it (raising what is wrong with it)."""
    docs = yaml_documents(path)
    if not (docs and all(isinstance(d, dict) and "kind" in d for d in docs)):
        return [(path, lambda: load_spec(path))]
    return [(f"document {i + 1}, topology {((doc.get('metadata') or {}).get('name') or '(no name)')!r}",
             lambda doc=doc, i=i: _from_resource(doc, path=path, index=i)) for i, doc in enumerate(docs)]


def _from_resource(doc: dict[str, Any], *, path: str, index: int) -> TopologySpec:
    from squall_operator import resource

    if doc.get("kind") != resource.KIND or str(doc.get("apiVersion", "")).split("/")[0] != resource.GROUP:
        raise TopologyError(f"{path}: document {index + 1} is a {doc.get('apiVersion')} {doc.get('kind')}, "
                            f"not a {resource.API_VERSION} {resource.KIND}")
    unknown = sorted(set(doc) - {"apiVersion", "kind", "metadata", "spec", "status"})
    if unknown:
        close = difflib.get_close_matches(unknown[0], ["spec", "metadata"], n=1)
        raise TopologyError(f"{path}: document {index + 1}: unknown key {unknown[0]!r}"
                            + (f"; did you mean {close[0]!r}?" if close else " (a Topology has metadata and spec)"))
    meta = doc.get("metadata") or {}
    if not meta.get("name"):
        raise TopologyError(f"{path}: document {index + 1}: metadata.name is required")
    return resource.parse_spec(meta["name"], doc.get("spec"), namespace=meta.get("namespace"))


def modules(spec: TopologySpec) -> set[str]:
    """The modules of the spec's classes (components, custom groupings)."""
    names = {c.class_name.partition(":")[0] for c in spec.components()}
    names |= {i.grouping.custom_class.partition(":")[0] for b in spec.bolts for i in b.inputs
              if i.grouping.custom_class}
    return {m for m in names if m}


def unimportable(spec: TopologySpec) -> list[str]:
    """The modules of the spec's classes that cannot be imported here."""
    missing = []
    for name in sorted(modules(spec)):
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            found = None
        if found is None:
            missing.append(name)
    return missing


def check(spec: TopologySpec, *, imports: bool) -> None:
    """What ``squall validate`` checks: what the operator checks (wiring, pod templates), and the
    classes with ``imports``."""
    from squall_operator.resource import check as operator_check

    operator_check(spec, imports=imports)
