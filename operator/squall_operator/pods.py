"""Per-role pod templates (``spec.podTemplate``): checked, then merged strategically over rendered pods.

A template is a core/v1 PodSpec fragment. :func:`check` refuses unknown fields (as the API server's
strict field validation would, on every Kubernetes version) and what the operator must own, whether
overridden or removed with a ``null``: the main container's command, ports and environment
contract, the spec mount and volumes, the non-root security context and the selector labels; and
what Kubernetes' Pod Security Standard ``restricted`` forbids (the node's namespaces, hostPath and
other node-bound volumes, host ports, added capabilities, unconfined profiles), so that whoever may
create a Topology gets no more from its pods than a restricted namespace would allow. Containers a
template adds run with the main container's hardening unless they set otherwise where allowed.
:func:`merge` applies it as ``kubectl patch --type strategic`` would: maps merge, lists of named
items merge by their key, other lists replace, and ``null`` removes a key.
"""

from __future__ import annotations

import copy
import difflib
import logging
from typing import Any

from squall.contract import ACKER, LOG_LEVEL, SPEC_DIR, STATE_MOUNT, TLS_MOUNT, WORKER
from squall.errors import TopologyError
from squall.topology.k8s import PodTemplate, Resources
from squall.topology.spec import TopologySpec

WORKERS, ACKERS, SPARK_EXECUTORS = "workers", "ackers", "sparkExecutors"
# the main container of each role's pods, the one the template's same-named container merges into
MAIN_CONTAINER = {WORKERS: WORKER, ACKERS: ACKER, SPARK_EXECUTORS: "spark-kubernetes-executor"}
OWNED_VOLUMES = ("spec", "tmp", "tls", "state")
OWNED_MOUNTS = (SPEC_DIR, TLS_MOUNT, STATE_MOUNT, "/tmp")  # the main container's volumeMounts merge by mountPath
ENV_PREFIX = "SQUALL_"
USER_VARS = {LOG_LEVEL}  # of the process contract's variables, those a template may set
# Kubernetes' patchMergeKey of the PodSpec lists that merge item by item (the others replace)
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
              "volumes": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
              "ports": "containerPort", "imagePullSecrets": "name", "topologySpreadConstraints": "topologyKey",
              "hostAliases": "ip", "resourceClaims": "name"}
# what the main container must not set, and why
_OWNED_CONTAINER_FIELDS = {
    "command": "the operator sets the command",
    "args": "the operator sets the command",
    "ports": "the ports are the pod contract's: 7070 gRPC and 9090 metrics",
    "resources": "use podTemplate.<role>.resources (typed) or spec.resources instead",
    "livenessProbe": "the operator sets the probes",
    "readinessProbe": "the operator sets the probes",
    "startupProbe": "the operator sets the probes",
}
_SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
# A ``null`` removes what it names (see merge): where that is something the operator renders and owns,
# it is refused, and why. Keys of a security context not listed (runAsUser, runAsGroup, fsGroup,
# readOnlyRootFilesystem) may be removed: the pods stay non-root and restricted without them.
_OWNED_POD_NULLS = {
    "containers": "would remove the main container; list only the containers you add or change "
                  "(they merge by name)",
    "volumes": "would remove the operator's volumes (the spec, TLS, /tmp); list only yours (they merge by name)",
    "securityContext": "would remove the pods' non-root security context; set only the keys you change",
}
_OWNED_CONTAINER_NULLS = {
    "image": "would remove the image; spec.image sets it",
    "env": "would remove the process contract's SQUALL_* variables; list only yours (they merge by name)",
    "volumeMounts": "would remove the spec mount (/etc/squall), the TLS mount and /tmp; list only yours "
                    "(they merge by mountPath)",
    "securityContext": "would remove the non-root security context (runAsNonRoot, no privilege escalation, "
                       "every capability dropped); set only the keys you change, e.g. readOnlyRootFilesystem: false",
}
_OWNED_POD_CONTEXT = ("runAsNonRoot", "seccompProfile")
_OWNED_CONTAINER_CONTEXT = ("runAsNonRoot", "allowPrivilegeEscalation", "capabilities")
# Pod Security Standard "restricted": the volume types it allows, the sysctls it calls safe, the one
# capability a container may add, the SELinux types it allows
_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected",
                 "secret"}
_SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                 "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                 "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                 "net.ipv4.tcp_keepalive_probes"}
_ADDABLE_CAPABILITIES = {"NET_BIND_SERVICE"}
_SELINUX_TYPES = {"container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
_RESTRICTED = "Kubernetes' Pod Security Standard restricted, which the operator keeps"


def templates(spec: TopologySpec) -> dict[str, PodTemplate]:
    """The pod templates the spec sets, by role (``workers``, ``ackers``, ``sparkExecutors``)."""
    if spec.pod_template is None:
        return {}
    given = {WORKERS: spec.pod_template.workers, ACKERS: spec.pod_template.ackers,
             SPARK_EXECUTORS: spec.pod_template.spark_executors}
    return {role: template for role, template in given.items() if template is not None}


def check(spec: TopologySpec) -> None:
    """Raise :class:`TopologyError` naming every unknown or operator-owned field of the pod templates."""
    problems = _over_limits(spec.resources, "resources")
    if spec.pod_template is not None and spec.pod_template.spark_executors is not None and spec.spark is None:
        problems.append("podTemplate.sparkExecutors: there are no Spark executors without spec.spark; "
                        "remove it or add spark")
    for role, template in templates(spec).items():
        where = f"podTemplate.{role}"
        problems += _over_limits(template.resources, f"{where}.resources")
        labels = template.metadata.labels if template.metadata else {}
        problems += [f"{where}.metadata.labels.{key}: the selector labels are the operator's; remove it"
                     for key in _SELECTOR_LABELS if key in labels]
        annotations = (template.metadata.annotations if template.metadata else None) or {}
        problems += [f"{where}.metadata.annotations.{key}: unconfined is not allowed ({_RESTRICTED}); remove it"
                     for key, value in annotations.items()
                     if key.startswith(_APPARMOR_ANNOTATION) and str(value).lower() == "unconfined"]
        if template.spec is not None:
            problems += _unknown_fields(template.spec, "V1PodSpec", f"{where}.spec") if _models() else []
            problems += _owned(template.spec, role, f"{where}.spec")
    if problems:
        raise TopologyError(f"topology {spec.name!r} pod templates are invalid:\n" +
                            "\n".join(f"  {p}" for p in problems))


def _over_limits(resources: Resources | None, path: str) -> list[str]:
    """A request above its limit, which Kubernetes refuses in a pod (the StatefulSet's write would fail)."""
    if resources is None or not resources.requests or not resources.limits:
        return []
    from kubernetes.utils import parse_quantity

    return [f"{path}.requests.{name}: {request} is above its limit ({resources.limits[name]}), which Kubernetes "
            "refuses; lower the request or raise the limit"
            for name, request in resources.requests.items()
            if name in resources.limits and parse_quantity(request) > parse_quantity(resources.limits[name])]


def _models() -> Any:
    """The ``kubernetes`` client's models, or None (with a warning) where it is not installed: a worker
    image may lack the operator's dependencies, and the operator itself always has them."""
    try:
        from kubernetes.client import models
    except ImportError:
        logging.getLogger(__name__).warning("the kubernetes package is not installed: pod template fields are "
                                            "not checked for typos here (the operator checks them)")
        return None
    return models


def _unknown_fields(value: Any, type_name: str, path: str) -> list[str]:
    """Fields of ``value`` that the core/v1 type ``type_name`` has not (the ``kubernetes`` client's models)."""
    generic = type_name.lower()  # the client spells them List[X] and Dict[str, X] (older ones list[X], dict(str, X))
    if generic.startswith("list[") and isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _unknown_fields(item, type_name[5:-1], f"{path}[{i}]")]
    if generic.startswith(("dict(", "dict[")) and isinstance(value, dict):
        inner = type_name[5:-1].split(",", 1)[1].strip()
        return [p for key, item in value.items() for p in _unknown_fields(item, inner, f"{path}.{key}")]
    model = getattr(_models(), type_name, None)
    if model is None or value is None:
        return []  # a scalar: its type is the API server's to check
    if not isinstance(value, dict):
        return [f"{path}: expected a mapping ({type_name.removeprefix('V1')}), got {type(value).__name__}"]
    fields = {json: py for py, json in model.attribute_map.items()}
    problems = []
    for key, item in value.items():
        if key in fields:
            problems += _unknown_fields(item, model.openapi_types[fields[key]], f"{path}.{key}")
            continue
        close = difflib.get_close_matches(str(key), fields, n=1)
        problems.append(f"{path}.{key}: unknown field of {type_name.removeprefix('V1')}; " +
                        (f"did you mean {close[0]!r}?" if close else f"allowed: {', '.join(sorted(fields))}"))
    return problems


def _owned(pod: dict[str, Any], role: str, path: str) -> list[str]:
    problems = _nulls(pod, _OWNED_POD_NULLS, path)
    problems += _non_root(pod.get("securityContext"), f"{path}.securityContext")
    problems += _context_nulls(pod.get("securityContext"), _OWNED_POD_CONTEXT, f"{path}.securityContext")
    problems += _restricted_pod(pod, path)
    for i, volume in enumerate(pod.get("volumes") or ()):
        if isinstance(volume, dict) and volume.get("name") in OWNED_VOLUMES:
            problems.append(f"{path}.volumes[{i}]: the volume {volume['name']!r} is the operator's; "
                            "name yours differently")
    for kind in _CONTAINER_LISTS:
        for i, container in enumerate(pod.get(kind) or ()):
            if not isinstance(container, dict):
                continue
            where = f"{path}.{kind}[{i}]"
            problems += _non_root(container.get("securityContext"), f"{where}.securityContext")
            problems += _restricted_container(container, where)
            if kind != "containers" or container.get("name") != MAIN_CONTAINER[role]:
                continue
            problems += [f"{where}.{key}: {why}; remove it"
                         for key, why in _OWNED_CONTAINER_FIELDS.items() if key in container]
            problems += _nulls(container, _OWNED_CONTAINER_NULLS, where)
            problems += _context_nulls(container.get("securityContext"), _OWNED_CONTAINER_CONTEXT,
                                       f"{where}.securityContext")
            for j, mount in enumerate(container.get("volumeMounts") or ()):
                if isinstance(mount, dict) and (mount.get("mountPath") in OWNED_MOUNTS
                                                or mount.get("name") in OWNED_VOLUMES):
                    problems.append(f"{where}.volumeMounts[{j}]: the spec mount ({SPEC_DIR}), the TLS mount "
                                    f"({TLS_MOUNT}), the state mount ({STATE_MOUNT}) and /tmp are the "
                                    "operator's; mount yours elsewhere")
            for j, var in enumerate(container.get("env") or ()):
                name = str(var.get("name", "")) if isinstance(var, dict) else ""
                if name.startswith(ENV_PREFIX) and name not in USER_VARS:
                    problems.append(f"{where}.env[{j}]: {name} is the process contract's (the mounted "
                                    f"spec carries the topology's settings); remove it ({', '.join(USER_VARS)} "
                                    "may be set)")
    return problems


def _restricted_pod(pod: dict[str, Any], path: str) -> list[str]:
    """What the restricted standard forbids at the pod's level."""
    problems = [f"{path}.{key}: the pods do not share the node's namespaces ({_RESTRICTED}); remove it"
                for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key) is True]
    for i, volume in enumerate(pod.get("volumes") or ()):
        kinds = [k for k in volume if k != "name"] if isinstance(volume, dict) else []
        problems += [f"{path}.volumes[{i}].{kind}: {kind} volumes are not allowed ({_RESTRICTED}); use one of "
                     f"{', '.join(sorted(_VOLUME_TYPES))}" for kind in kinds if kind not in _VOLUME_TYPES]
    context = pod.get("securityContext")
    if isinstance(context, dict):
        problems += _profiles(context, f"{path}.securityContext")
        problems += [f"{path}.securityContext.sysctls[{i}]: {s.get('name')} is not a safe sysctl ({_RESTRICTED}); "
                     "remove it" for i, s in enumerate(context.get("sysctls") or ())
                     if isinstance(s, dict) and s.get("name") not in _SAFE_SYSCTLS]
    return problems


def _restricted_container(container: dict[str, Any], path: str) -> list[str]:
    """What the restricted standard forbids in one container."""
    problems = [f"{path}.ports[{i}].hostPort: the pods take no port of the node ({_RESTRICTED}); remove it"
                for i, port in enumerate(container.get("ports") or ())
                if isinstance(port, dict) and port.get("hostPort")]
    context = container.get("securityContext")
    if not isinstance(context, dict):
        return problems
    where = f"{path}.securityContext"
    problems += _profiles(context, where)
    capabilities = context.get("capabilities")
    if isinstance(capabilities, dict) and "drop" in capabilities and "ALL" not in (capabilities["drop"] or ()):
        problems.append(f"{where}.capabilities.drop: the pods drop ALL capabilities; keep ALL in the list or "
                        "remove it (add what you need under capabilities.add)")
    added = (capabilities.get("add") or ()) if isinstance(capabilities, dict) else ()
    problems += [f"{where}.capabilities.add: {cap} is not allowed ({_RESTRICTED}, which allows only "
                 f"{', '.join(sorted(_ADDABLE_CAPABILITIES))}); remove it"
                 for cap in added if cap not in _ADDABLE_CAPABILITIES]
    if context.get("procMount") not in (None, "Default"):
        problems.append(f"{where}.procMount: only Default is allowed ({_RESTRICTED}); remove it")
    if (context.get("windowsOptions") or {}).get("hostProcess") is True:
        problems.append(f"{where}.windowsOptions.hostProcess: not allowed ({_RESTRICTED}); remove it")
    return problems


def _profiles(context: dict[str, Any], path: str) -> list[str]:
    """Unconfined seccomp or AppArmor, and SELinux options beyond the container types."""
    problems = [f"{path}.{key}.type: Unconfined is not allowed ({_RESTRICTED}); use RuntimeDefault or Localhost"
                for key in ("seccompProfile", "appArmorProfile")
                if isinstance(context.get(key), dict) and context[key].get("type") == "Unconfined"]
    selinux = context.get("seLinuxOptions")
    if isinstance(selinux, dict) and (selinux.get("user") or selinux.get("role")
                                      or selinux.get("type") not in (None, *_SELINUX_TYPES)):
        problems.append(f"{path}.seLinuxOptions: only the types {', '.join(sorted(_SELINUX_TYPES))} and a level "
                        f"are allowed ({_RESTRICTED}); remove the rest")
    return problems


def _nulls(given: dict[str, Any], owned: dict[str, str], path: str) -> list[str]:
    return [f"{path}.{key}: null {why}" for key, why in owned.items() if key in given and given[key] is None]


def _context_nulls(context: Any, owned: tuple[str, ...], path: str) -> list[str]:
    """A ``null`` on a key of the operator's security context that keeps the pods non-root and restricted."""
    if not isinstance(context, dict):
        return []
    return [f"{path}.{key}: null would remove the operator's {key}; remove the null"
            for key in owned if key in context and context[key] is None]


def _non_root(context: Any, path: str) -> list[str]:
    if not isinstance(context, dict):
        return []
    problems = []
    if context.get("runAsNonRoot") is False:
        problems.append(f"{path}.runAsNonRoot: the pods run as non-root; remove it")
    if context.get("runAsUser") == 0:
        problems.append(f"{path}.runAsUser: 0 is root, and the pods run as non-root; use another user or remove it")
    if context.get("privileged") is True or context.get("allowPrivilegeEscalation") is True:
        key = "privileged" if context.get("privileged") is True else "allowPrivilegeEscalation"
        problems.append(f"{path}.{key}: the pods run unprivileged; remove it")
    return problems


def merge(base: Any, patch: Any, *, key: str = "") -> Any:
    """``base`` with the strategic merge patch ``patch`` applied (neither is modified)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for name, value in patch.items():
            if value is None:
                out.pop(name, None)
            else:
                out[name] = merge(base.get(name), value, key=name)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_KEYS:
        by, out = MERGE_KEYS[key], copy.deepcopy(base)
        for item in patch:
            at = next((i for i, mine in enumerate(out) if isinstance(item, dict) and isinstance(mine, dict)
                       and mine.get(by) == item.get(by)), None)
            if at is None:
                out.append(merge(None, item, key=key))
            else:
                out[at] = merge(out[at], item)
        return out
    # Nothing of base to merge into: a null in the patch still means absent (Helm's toYaml writes them for
    # empty values), as the API server stores it; kept, the object never read back as rendered
    if isinstance(patch, dict):
        return merge({}, patch, key=key)
    if isinstance(patch, list):
        return [merge(None, item, key=key) for item in patch]
    return copy.deepcopy(patch)


def resources(spec: TopologySpec, role: str, default: dict[str, Any]) -> dict[str, Any]:
    """The main container's resources: the role's own, else the topology's, else ``default``."""
    chosen = getattr(templates(spec).get(role), "resources", None) or spec.resources
    return chosen.model_dump(by_alias=True, exclude_none=True) if chosen is not None else default


def customise(pod: dict[str, Any], template: PodTemplate | None) -> dict[str, Any]:
    """The rendered pod template ``pod`` (metadata and spec) with a role's ``template`` merged over it."""
    if template is None:
        return pod
    pod = copy.deepcopy(pod)
    if template.metadata is not None:
        meta = pod.setdefault("metadata", {})
        for part in ("labels", "annotations"):
            extra = getattr(template.metadata, part)
            if extra:
                meta[part] = {**extra, **meta.get(part, {})}  # the operator's own keys win
    if template.spec:
        pod["spec"] = harden(_without_empty_maps(merge(pod["spec"], template.spec)))
    return pod


def harden(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` (a PodSpec) whose every container runs without privilege escalation and drops every
    capability (what it adds it keeps), as the operator's own: a sidecar or an init container a template
    adds got the runtime's defaults, escalation allowed. Settings a template may not make are refused by
    :func:`check`; a key it left out is filled in."""
    for kind in _CONTAINER_LISTS:
        for container in spec.get(kind) or ():
            if not isinstance(container, dict):
                continue
            context = container.get("securityContext")
            if not isinstance(context, dict):  # none, or a null in a container the template adds
                context = container["securityContext"] = {}
            context.setdefault("allowPrivilegeEscalation", False)
            if not isinstance(context.get("capabilities"), dict):
                context["capabilities"] = {}
            context["capabilities"].setdefault("drop", ["ALL"])
    return spec


def _without_empty_maps(value: Any, key: str = "") -> Any:
    """``value`` less the maps a ``null`` in a template emptied (the API server drops them; the operator
    compares what it renders with what it reads back); ``emptyDir: {}`` means something and stays."""
    if isinstance(value, dict):
        return {k: v for k, v in ((k, _without_empty_maps(v, k)) for k, v in value.items())
                if v != {} or k == "emptyDir"}
    if isinstance(value, list):
        return [_without_empty_maps(v, key) for v in value]
    return value
