"""``squall executor``: the Spark executor entrypoint of executor pods (Spark on Kubernetes)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("executor", help="run a Spark executor (Spark on Kubernetes starts it in executor "
                              "pods; configured by the SPARK_* environment Spark sets)")
    p.set_defaults(func=lambda _args: _run())


def _run() -> int:
    from squall.spark.executor import main

    return main()
