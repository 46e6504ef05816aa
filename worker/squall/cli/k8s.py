"""``squall render`` and ``squall submit``: a topology file as Kubernetes manifests.

``render`` prints the objects the operator creates for a topology; ``submit`` prints the Topology
resource to hand to ``kubectl apply`` (``squall submit wordcount.yaml | kubectl apply -f -``). Both
check the topology as the operator does first (structure, wiring, pod templates); ``submit`` checks
the classes too, as ``squall validate`` does, where their modules can be imported here.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from squall.cli.validate import check, modules, unimportable
from squall.topology import load_spec
from squall.topology.k8s import DNS_LABEL

NAMESPACE = re.compile(rf"^{DNS_LABEL}$")
IN_THE_IMAGE = ("squall", "examples")  # the packages of the worker image (the Dockerfile), any image's default


def _namespace(value: str) -> str:
    if not NAMESPACE.match(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a namespace name: lowercase letters, digits and '-', "
                                         "beginning and ending with a letter or digit, at most 63")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("render", help="print the Kubernetes objects the operator creates for a topology")
    p.add_argument("topology", help="path to the topology YAML")
    p.add_argument("-n", "--namespace", default="default", type=_namespace,
                   help="the namespace they go to (default: default)")
    p.add_argument("--image", help="container image when the spec has none (the operator's SQUALL_OPERATOR_IMAGE)")
    p.add_argument("--podmonitor", action="store_true", help="include the prometheus-operator PodMonitor")
    p.add_argument("--insecure", action="store_true",
                   help="plaintext gRPC between the pods: no TLS Secret (default: a new CA, as the operator makes)")
    p.add_argument("--metrics-from", action="append", metavar="NAMESPACE", default=None,
                   help="include the NetworkPolicy, letting this namespace reach the metrics port (repeatable)")
    p.set_defaults(func=run_render)

    p = subparsers.add_parser("submit", help="check a topology as squall validate does, and write its Topology "
                              "resource for kubectl apply")
    p.add_argument("topology", help="path to the topology YAML")
    p.add_argument("--image", help="set spec.image: the image with your spouts and bolts")
    p.add_argument("-n", "--namespace", type=_namespace, help="set metadata.namespace (default: kubectl's namespace)")
    p.add_argument("-o", "--output", type=Path, help="write to this file instead of standard output")
    p.set_defaults(func=run_submit)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the spec in the ConfigMap) as readable ``|`` blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(docs: list[dict[str, Any]]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, width=120)


def run_render(args: argparse.Namespace) -> int:
    from squall.transport.tls import issue
    from squall_operator.render import render, resolve_image
    from squall_operator.resource import check_name

    spec = load_spec(args.topology)
    check_name(spec.name, where=f"{args.topology}: name")
    check(spec, imports=False)
    manifests = render(spec, namespace=args.namespace, image=resolve_image(spec, args.image),
                       podmonitor=args.podmonitor, tls=None if args.insecure else issue(spec.name),
                       metrics_from=args.metrics_from)
    print("# The operator also sets each object's ownerReferences to the Topology.")
    print(_dump(manifests), end="")
    return 0


def run_submit(args: argparse.Namespace) -> int:
    from squall_operator.resource import check_name, to_resource

    spec = load_spec(args.topology)
    check_name(spec.name, where=f"{args.topology}: name")
    if args.image:
        spec.image = args.image
    own = sorted(m for m in modules(spec) if m.partition(".")[0] not in IN_THE_IMAGE)
    if not spec.image and own:
        print(f"squall submit: warning: no image: the pods will run the operator's default image, which holds "
              f"squall and its examples only, not {', '.join(own)}: build an image FROM it with your modules "
              "and give --image (or set image: in the topology file)", file=sys.stderr)
    missing = unimportable(spec)
    if missing:
        print(f"squall submit: warning: cannot import {', '.join(missing)} here, so the classes are not checked "
              "(the pods import them from their image)", file=sys.stderr)
    check(spec, imports=not missing)
    text = _dump([to_resource(spec, namespace=args.namespace)])
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
        print(f"wrote {args.output}: kubectl apply -f {args.output}", file=sys.stderr)
    return 0
