"""The Kubernetes-only parts of the topology spec: what a Topology resource adds for its pods (their
resources, templates and disruption budgets, Spark's executor pods), which the operator renders and
processes never read (``squall run`` ignores them). :class:`squall.topology.spec.TopologySpec` holds
them as its deployment fields.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, field_validator

from squall.topology.model import SpecModel

DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"  # a Kubernetes DNS-1123 label: a namespace's or a Service's name
# Kubernetes' resource.Quantity, as its OpenAPI schema spells it (an integer, or a string such as 500m), not
# negative: no container may request or be limited to less than nothing
QUANTITY_PATTERN = (r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


def _quantity(value: Any) -> Any:
    if isinstance(value, float):
        raise ValueError(f"a fractional quantity must be a string; write '{value}' (or in milli-units, 500m)")
    if isinstance(value, str) and value.startswith("-") or isinstance(value, int) and value < 0:
        raise ValueError("a quantity is 0 or more")
    if isinstance(value, str) and not re.match(QUANTITY_PATTERN, value):
        raise ValueError("not a Kubernetes quantity; write it as 500m, 2, '1.5' or 1Gi")
    return value


Quantity = Annotated[int | str, BeforeValidator(_quantity), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": QUANTITY_PATTERN}]})]
# What a container may request: Kubernetes' own resources, and extended ones named with their domain
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")


JVM_MEMORY = r"^[0-9]+[kmgtKMGT]?$"  # as Spark's spark.*.memory: a whole number with a unit letter


class Spark(SpecModel):
    """Spark for SparkBolts in Kubernetes: the worker pod is the driver, executors are pods."""

    executor_image: str | None = Field(default=None, description="default: the topology's image")
    executors: int = Field(default=2, ge=1, description="spark.executor.instances")
    executor_cores: int = Field(default=1, ge=1)
    executor_memory: str = Field(default="1g", pattern=JVM_MEMORY)
    driver_memory: str = Field(default="1g", pattern=JVM_MEMORY)
    conf: dict[str, str] = Field(default_factory=dict, description="extra spark.* settings")

    @field_validator("conf")
    @classmethod
    def _no_pod_settings(cls, conf: dict[str, str]) -> dict[str, str]:
        # Spark would make its executor pods from these, past the operator's pod template checks: a
        # hostPath volume of the node's root filesystem, another pod template, another account
        for key in conf:
            if _SPARK_POD_SETTINGS.match(key):
                raise ValueError(f"{key} is not allowed: Spark would make its pods with it, past the pod template "
                                 "checks (Pod Security Standard restricted); give volumes and other pod settings "
                                 "in podTemplate.sparkExecutors")
        return conf


_SPARK_POD_SETTINGS = re.compile(r"spark\.kubernetes\.((driver|executor)\.(volumes\.|podTemplate|annotation\."
                                 r"container\.apparmor)|authenticate\.)")


class Resources(SpecModel):
    """Kubernetes' core/v1 ResourceRequirements: what a container requests and its limits."""

    requests: dict[str, Quantity] | None = Field(default=None, description="e.g. {cpu: 500m, memory: 1Gi}")
    limits: dict[str, Quantity] | None = Field(default=None, description="e.g. {memory: 1Gi}")

    @field_validator("requests", "limits")
    @classmethod
    def _known_resources(cls, amounts: dict[str, Any] | None) -> dict[str, Any] | None:
        for name in amounts or ():
            if not (name in STANDARD_RESOURCES or name.startswith("hugepages-") or "/" in name):
                raise ValueError(f"{name!r} is not a resource Kubernetes knows: use {', '.join(STANDARD_RESOURCES)}, "
                                 "hugepages-<size>, or an extended resource named with its domain (example.com/gpu)")
        return amounts


def _int_or_percent(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("use a number of pods (1) or a percentage ('25%')")
    if isinstance(value, int) and value < 1:
        raise ValueError("at least 1 pod must be allowed to go, or a node could never be drained")
    if isinstance(value, str) and not re.fullmatch(PERCENT, value):
        raise ValueError("a percentage is written as '25%', from 1% to 100%")
    return value


PERCENT = r"([1-9][0-9]?|100)%"
IntOrPercent = Annotated[int | str, BeforeValidator(_int_or_percent), WithJsonSchema(
    {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": f"^{PERCENT}$"}]})]


class DisruptionBudget(SpecModel):
    """A PodDisruptionBudget for each role: how many of its pods voluntary disruptions (drains) may take."""

    max_unavailable: IntOrPercent = Field(default=1, description="pods of one role that may be down at once: "
                                          "a number, or a percentage such as '25%'")


class PodMetadata(SpecModel):
    labels: dict[str, str] = Field(default_factory=dict, description="added to the pods' labels")
    annotations: dict[str, str] = Field(default_factory=dict, description="added to the pods' annotations")


class PodTemplate(SpecModel):
    """What one role's pods add to, or change in, the pods the operator renders (a strategic merge)."""

    metadata: PodMetadata | None = None
    spec: dict[str, Any] | None = Field(default=None, description=(
        "a core/v1 PodSpec fragment merged strategically over the rendered pod: lists of named items "
        "(containers, env, volumes, volumeMounts, imagePullSecrets) merge by name, other lists replace. "
        "The container named after the role (worker, acker, spark-kubernetes-executor) is the main one; "
        "its command, ports, the spec mount and the non-root security context are the operator's"))
    resources: Resources | None = Field(default=None, description="the main container's resources; "
                                        "default: spec.resources")


class PodTemplates(SpecModel):
    """A pod template for each role: worker pods, acker pods and Spark executor pods."""

    workers: PodTemplate | None = None
    ackers: PodTemplate | None = None
    spark_executors: PodTemplate | None = Field(default=None, description="Spark executor pods (with spark)")


READ_WRITE_ONCE, READ_WRITE_MANY = "ReadWriteOnce", "ReadWriteMany"
# a Secret's name (a DNS-1123 subdomain) and a key of its data
DNS_SUBDOMAIN = rf"^{DNS_LABEL}(\.{DNS_LABEL})*$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"


class SecretKey(SpecModel):
    """A key of a Secret in the Topology's namespace."""

    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253, description="the Secret's name")
    key: str = Field(default="url", pattern=SECRET_KEY, max_length=253, description="the key of its data")


class State(SpecModel):
    """Where stateful bolts keep their state in Kubernetes: one PersistentVolumeClaim per topology,
    ``<topology>-state``, mounted by every worker pod (the embedded store's SQLite files: a rescale moves
    tasks between pods, and a task finds its file wherever it goes), or a Redis URL from a Secret."""

    size: Quantity = Field(default="1Gi", description="the claim's storage request")
    storage_class_name: str | None = Field(default=None, max_length=253, description=(
        "the claim's StorageClass; default: the cluster's default class"))
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = Field(default=READ_WRITE_ONCE, description=(
        "ReadWriteOnce: any storage class can give it, and the worker pods are placed together on one node "
        "(required pod affinity), the one that mounts the volume. ReadWriteMany: the worker pods spread over "
        "nodes; needs a class that gives it (NFS, CephFS, EFS, Filestore, Azure Files)"))
    delete_claim_with_topology: bool = Field(default=False, description=(
        "true: the claim is the Topology's child, deleted with it. false: it is kept, and a Topology applied "
        "again under the same name resumes its state (kubectl delete pvc <topology>-state drops it)"))
    redis_secret: SecretKey | None = Field(default=None, description=(
        "with topology.state.provider redis: the Secret key holding the Redis URL, given to the worker pods as "
        "SQUALL_STATE_REDIS_URL"))
