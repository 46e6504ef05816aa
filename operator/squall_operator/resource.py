"""The Topology custom resource: its identity, and its ``spec`` as Squall's own spec model.

A Topology's ``spec`` is a topology YAML document; its name is the resource's ``metadata.name``
(``spec.name`` may be left out, and must match when given).
"""

from __future__ import annotations

import re
from typing import Any

from squall.errors import TopologyError
from squall.state.config import PROVIDER_KEY, REDIS, REDIS_URL_KEY
from squall.topology.plan import validate
from squall.topology.spec import NAME_MAX, NAME_PATTERN, NAME_RULE, TopologySpec
from squall_operator import pods

GROUP = "squall.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "Topology"
PLURAL = "topologies"
SINGULAR = "topology"
SHORT_NAMES = ["topo"]
TAKEN = "default"  # the name of a ServiceAccount every namespace has: a Topology's own would be it


def parse_spec(name: str, spec: Any, *, namespace: str | None = None) -> TopologySpec:
    """The spec of Topology ``name`` as a :class:`TopologySpec`; :class:`TopologyError` if it does not parse."""
    where = f"Topology {namespace}/{name}" if namespace else f"Topology {name}"
    if not isinstance(spec, dict):
        raise TopologyError(f"{where}: spec must be a mapping with spouts and bolts, got {type(spec).__name__}")
    if len(name) > NAME_MAX or not re.fullmatch(NAME_PATTERN, name):
        raise TopologyError(f"{where}: metadata.name {NAME_RULE}, at most {NAME_MAX} characters (got {name!r}); "
                            "create the Topology under such a name")
    check_name(name, where=f"{where}: metadata.name")
    given = spec.get("name")
    if given is not None and given != name:
        raise TopologyError(f"{where}: spec.name {given!r} differs from metadata.name {name!r}; "
                            "remove spec.name (the resource's name is the topology's name)")
    return TopologySpec.from_dict({**spec, "name": name}, source=f"{where} spec", camel_case_only=True)


def check_name(name: str, *, where: str) -> None:
    """Refuse a name a Topology cannot have in a cluster though a topology file may (``squall run`` runs it)."""
    if name == TAKEN:
        raise TopologyError(f"{where} {TAKEN!r} is taken: the Topology's ServiceAccount bears its name, and every "
                            f"namespace has its own ServiceAccount {TAKEN!r}; give the topology another name")


def check_spec(name: str, spec: Any, *, namespace: str | None = None) -> TopologySpec:
    """Parse and validate the spec as the operator does: structure, wiring and pod templates, without
    importing user code."""
    parsed = parse_spec(name, spec, namespace=namespace)
    check(parsed, imports=False)
    check_redis_url(parsed, where=f"Topology {namespace}/{name}" if namespace else f"Topology {name}")
    return parsed


def check_redis_url(spec: TopologySpec, *, where: str) -> None:
    """Refuse a stateful bolt kept in Redis with no URL: in a cluster the pods' environment is the
    operator's, so the URL comes from the config or from ``state.redisSecret``."""
    for bolt in spec.bolts:
        conf = {**spec.config, **bolt.config}
        if bolt.stateful and conf.get(PROVIDER_KEY) == REDIS and not conf.get(REDIS_URL_KEY) and \
                spec.state.redis_secret is None:
            raise TopologyError(f"{where}: stateful bolt {bolt.name!r} keeps its state in Redis ({PROVIDER_KEY}: "
                                f"{REDIS}) and nothing gives its URL: set spec.state.redisSecret (the name and key "
                                f"of a Secret holding redis://...) or config {REDIS_URL_KEY}")


def check(spec: TopologySpec, *, imports: bool) -> None:
    """Everything ``squall validate`` checks of a parsed spec: wiring (and classes with ``imports``), and
    the pod templates; :class:`TopologyError` naming each problem."""
    validate(spec, imports=imports)
    pods.check(spec)


def to_resource(spec: TopologySpec, *, namespace: str | None = None) -> dict[str, Any]:
    """The Topology resource for ``spec``, for ``kubectl apply``: the spec as written (camelCase, no defaults
    filled in, so the CRD's and the model's defaults apply), named by ``metadata.name``."""
    body = spec.model_dump(by_alias=True, mode="json", exclude_unset=True)
    body.pop("name", None)
    metadata: dict[str, Any] = {"name": spec.name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": body}
