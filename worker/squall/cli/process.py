"""``squall worker`` and ``squall acker``: the process entrypoints pods run (configured by environment)."""

from __future__ import annotations

import argparse
import os

from squall.contract import role_env

ENV_HELP = """configuration (environment; every topology setting comes from the spec file):
  SQUALL_TOPOLOGY        path to the topology YAML (required)
  {INDEX}this process's index (default: the -N ordinal of HOSTNAME)
  SQUALL_WORKER_PEERS    template with {i} or comma list of worker addresses
                         (default {topology}-worker-{i}.{topology}-worker:7070)
  SQUALL_ACKER_PEERS     the same for ackers
  SQUALL_GRPC_PORT       gRPC port (default 7070); SQUALL_METRICS_PORT (default 9090)
  SQUALL_BIND_HOST       listen address (default 0.0.0.0)
  SQUALL_TLS_DIR         directory of ca.crt, tls.crt, tls.key: mutual TLS (default: plaintext gRPC)
  SQUALL_NAMESPACE       the {namespace} of the peer templates (default default)
every variable, and what squall run and the operator set: docs/processes.md
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    for role, what in (("worker", "run this process's spout and bolt executors"),
                       ("acker", "run this process's acker task")):
        p = subparsers.add_parser(role, help=f"{what} (a pod's entrypoint)",
                                  epilog=ENV_HELP.replace("{INDEX}", f"SQUALL_{role.upper()}_INDEX".ljust(23)),
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(func=lambda _args, r=role: _run(r))


def _run(role: str) -> int:
    """A process started by hand gets what ``squall run`` and the operator give theirs (see
    ``contract.role_env``) where its environment does not say otherwise, before numpy is imported
    (gRPC's variable, before gRPC, is :func:`squall.cli.main`'s)."""
    for name, value in role_env(role).items():
        os.environ.setdefault(name, value)
    from squall.process.pod import main

    return main(role)
