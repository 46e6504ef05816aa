"""``squall validate TOPOLOGY.yaml``: check a topology without running it."""

from __future__ import annotations

import argparse

from squall.topology import load_spec, validate


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("validate", help="check a topology file (structure, streams, fields, classes)")
    p.add_argument("topology", help="path to the topology YAML")
    p.add_argument("--no-imports", action="store_true", help="skip checks that import user classes")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    spec = load_spec(args.topology)
    validate(spec, imports=not args.no_imports)
    print(f"topology {spec.name!r} is valid: {len(spec.spouts)} spout(s), {len(spec.bolts)} bolt(s), "
          f"{spec.workers} worker(s), {spec.num_ackers} acker(s)")
    return 0
