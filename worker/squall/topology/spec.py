"""The topology spec: one model for YAML files, ``TopologyBuilder`` and the Topology CR's ``spec``.

Parsing checks shapes, types and bounds (and rejects unknown keys); :func:`squall.topology.validate`
then checks what needs the whole topology: names, inputs, streams, fields and classes.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

import yaml
from pydantic import AfterValidator, Field, PrivateAttr, ValidationError, model_validator

from squall.errors import TopologyError
from squall.state.config import CHECKPOINT_INTERVAL_KEY, DEFAULT_CHECKPOINT_INTERVAL_MS, EXACTLY_ONCE, GUARANTEE_KEY
from squall.state.config import GUARANTEES as STATE_GUARANTEES
from squall.state.config import PROVIDER_KEY as STATE_PROVIDER_KEY
from squall.state.config import PROVIDERS as STATE_PROVIDERS
from squall.system import DEFAULT_STREAM
from squall.topology.k8s import JVM_MEMORY, DisruptionBudget, PodTemplates, Resources, Spark, State
from squall.topology.model import SpecModel
from squall.topology.window import WindowSpec, window_errors
from squall.values import HEADER_BYTES, tuple_budget

# a DNS-1035 label (Services are named after it), within 40 characters (the names derived from it fit 63)
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
NAME_RULE = ("must be lowercase letters, digits and '-', beginning with a letter and ending with a letter or digit "
             "(a DNS-1035 label: the Services are named after it)")
NAME_MAX = 40
COMPONENT_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]*$"
CLASS_PATTERN = r"^[^:\s]+:[^:\s]+$"  # module:Class (squall.topology.plan.import_class)


class GroupingType(StrEnum):
    SHUFFLE = "shuffle"
    FIELDS = "fields"
    ALL = "all"
    GLOBAL = "global"
    NONE = "none"
    DIRECT = "direct"
    LOCAL_OR_SHUFFLE = "localOrShuffle"
    CUSTOM = "custom"


class Grouping(SpecModel):
    """How a stream's tuples are spread over the consuming component's tasks."""

    type: Annotated[GroupingType, Field(strict=False)]  # a str in YAML
    fields: list[str] | None = Field(default=None, description="fields grouping: the key fields")
    custom_class: str | None = Field(default=None, pattern=CLASS_PATTERN, description="custom grouping: 'module:Class'")

    @model_validator(mode="after")
    def _type_specific_keys(self) -> Self:
        if self.type == GroupingType.FIELDS.value and not self.fields:
            raise ValueError("a fields grouping needs 'fields': the non-empty list of key fields")
        if self.type != GroupingType.FIELDS.value and self.fields is not None:
            raise ValueError(f"'fields' is only for the fields grouping, not {self.type!r}; remove it")
        if self.type == GroupingType.CUSTOM.value and not self.custom_class:
            raise ValueError("a custom grouping needs 'customClass': 'module:Class'")
        if self.type != GroupingType.CUSTOM.value and self.custom_class is not None:
            raise ValueError(f"'customClass' is only for the custom grouping, not {self.type!r}; remove it")
        return self


class Input(SpecModel):
    """A subscription of a bolt to one stream of another component."""

    component: str
    stream: str = DEFAULT_STREAM
    grouping: Grouping = Field(default_factory=lambda: Grouping(type=GroupingType.SHUFFLE))


# Storm's settings that the spec has a key of its own for: in ``config`` they would be ignored, silently.
STORM_KEYS = {
    "topology.workers": "workers",
    "topology.acker.executors": "ackers",
    "topology.message.timeout.secs": "messageTimeoutSeconds",
    "topology.max.spout.pending": "maxSpoutPending",
    "topology.tasks": "tasks (of the component)",
    "topology.tick.tuple.freq.secs": "tickFrequencySeconds (of the bolt)",
    "topology.executor.receive.buffer.size": "executorQueueSize",
    "topology.transfer.batch.size": "transfer.batchSize",
    "topology.producer.batch.size": "transfer.batchSize",
    "topology.batch.flush.interval.millis": "transfer.flushIntervalMs",
    "topology.flush.tuple.freq.millis": "transfer.flushIntervalMs",
    "topology.disable.loadaware.messaging": "localityAware.enabled",
    "topology.localityaware.higher.bound": "localityAware.higherBound",
    "topology.localityaware.lower.bound": "localityAware.lowerBound",
    "topology.spout.wait.progressive.level1.count": "spoutWait.level1Count",
    "topology.spout.wait.progressive.level2.count": "spoutWait.level2Count",
    "topology.spout.wait.progressive.level3.sleep.millis": "spoutWait.level3SleepMs",
    "topology.max.error.report.per.interval": "errorReporting.maxPerInterval",
    "topology.error.throttle.interval.secs": "errorReporting.intervalSeconds",
    "topology.spout.wait.strategy": "spoutWait",
}


def _no_storm_keys(config: dict[str, Any]) -> dict[str, Any]:
    for key in config:
        if key in STORM_KEYS:
            raise ValueError(f"{key!r} is Storm's setting for what Squall reads from {STORM_KEYS[key]}, a key of the "
                             "spec: set it there (in config it would be ignored)")
    return config


# A topology's or a component's ``config``: any keys but those.
Config = Annotated[dict[str, Any], AfterValidator(_no_storm_keys)]


class ComponentSpec(SpecModel):
    name: str = Field(pattern=COMPONENT_PATTERN, max_length=63)
    class_name: str = Field(pattern=CLASS_PATTERN, description="'module:Class' of the spout or bolt")
    parallelism: int = Field(default=1, ge=1, description="executors")
    tasks: int | None = Field(default=None, ge=1, description="tasks; default = parallelism")
    config: Config = Field(default_factory=dict, description="merged over the topology config")

    @property
    def num_tasks(self) -> int:
        return self.tasks if self.tasks is not None else self.parallelism


class SpoutSpec(ComponentSpec):
    pass


class BoltSpec(ComponentSpec):
    inputs: list[Input] = Field(min_length=1)
    tick_frequency_seconds: float | None = Field(default=None, gt=0)
    stateful: bool = Field(default=False, description=(
        "true: a squall.StatefulBolt, whose state is checkpointed (the topology gets a checkpoint spout), or a "
        "WindowedBolt whose windows are"))
    window: WindowSpec | None = Field(default=None, description=(
        "a squall.WindowedBolt's windows: by count or duration, sliding or tumbling, on processing or event time"))


class SpoutWait(SpecModel):
    """Storm's progressive wait strategy, for a spout whose ``next_tuple`` emitted nothing.

    A spout with a full pending map is not polled at all until a verdict frees a slot: the
    scheduler sleeps until then, so that wait costs neither CPU nor latency.
    """

    level1_count: int = Field(default=0, ge=0, description="idle calls retried at once")
    level2_count: int = Field(default=0, ge=0, description="then idle calls retried after a yield")
    level3_sleep_ms: float = Field(default=1.0, ge=0, description="then the wait between calls")


class ErrorReporting(SpecModel):
    """Throttling of ``report_error``: at most this many errors are logged and recorded; all are counted."""

    max_per_interval: int = Field(default=5, ge=1)
    interval_seconds: float = Field(default=10.0, gt=0)
    keep_last: int = Field(default=10, ge=1, description="recent errors kept per component")


INT32_MAX = 2**31 - 1  # what gRPC's options and the executors' C counters hold
ACKER_MESSAGE_BYTES = 21  # on the wire: kind 1, root 8, value 8, spout task 4 (squall.transport.codec)
FRAME_OVERHEAD = 64  # a frame's protobuf tags and lengths, with room to spare


class Transfer(SpecModel):
    """Batching of tuples and acker messages between processes."""

    batch_size: int = Field(default=1024, ge=1, le=65536, description="items per frame at most")
    flush_interval_ms: float = Field(default=1.0, ge=0, le=1000.0,
                                     description="a partial batch waits at most this for more items; 0 sends "
                                                 "it at the end of every scheduler round")
    max_frame_bytes: int = Field(default=16 * 1024 * 1024, ge=65536, le=INT32_MAX,
                                 description="larger frames are refused (at most gRPC's limit, 2 GiB - 1)")
    gil_switch_interval_ms: float = Field(default=2.0, gt=0, le=100.0,
                                          description="a worker's or acker's transport threads wait at most "
                                                      "this for the GIL its busy scheduler holds")
    max_value_bytes: int = Field(default=1024 * 1024, ge=1, description="a tuple value (a str's UTF-8 bytes, "
                                 "a bytes' length, a list's or dict's items as encoded) larger than this is "
                                 "refused at emit")

    @model_validator(mode="after")
    def _value_fits_a_frame(self) -> Self:
        most = tuple_budget(self.max_frame_bytes, "") - HEADER_BYTES  # one value, on a stream named in 64 bytes
        if self.max_value_bytes > most:
            raise ValueError(f"maxValueBytes ({self.max_value_bytes}) must be at most {most} with maxFrameBytes "
                             f"({self.max_frame_bytes}): a tuple of one value must fit in a frame, beside "
                             f"the frame's own {self.max_frame_bytes - most:,} bytes; lower maxValueBytes or "
                             "raise maxFrameBytes")
        # a full batch of acker messages, and one more: a young tree's FAIL or RESET brings its INIT along
        if (self.batch_size + 1) * ACKER_MESSAGE_BYTES + FRAME_OVERHEAD > self.max_frame_bytes:
            most = (self.max_frame_bytes - FRAME_OVERHEAD) // ACKER_MESSAGE_BYTES - 1
            raise ValueError(f"batchSize ({self.batch_size}) must be at most {most} with maxFrameBytes "
                             f"({self.max_frame_bytes}): a full batch of acker messages ({ACKER_MESSAGE_BYTES} bytes "
                             "each) must fit in a frame; lower batchSize or raise maxFrameBytes")
        return self


class LocalityAware(SpecModel):
    """Storm 2's locality-aware shuffle: a shuffle grouping sends to the consuming tasks in the
    emitting worker while they keep up, and to every task once they fall behind."""

    enabled: bool = Field(default=True, description="false: a shuffle spreads over every task, wherever it runs")
    higher_bound: float = Field(default=0.8, gt=0, le=1, description=(
        "average inbox fill of the worker's own tasks at which a shuffle widens to every task"))
    lower_bound: float = Field(default=0.2, ge=0, lt=1, description=(
        "average inbox fill below which a widened shuffle keeps to the worker's own tasks again"))

    @model_validator(mode="after")
    def _bounds_in_order(self) -> Self:
        if self.lower_bound >= self.higher_bound:
            raise ValueError(f"lowerBound ({self.lower_bound}) must be below higherBound ({self.higher_bound}), "
                             "or a shuffle would switch back and forth at every check")
        return self


class TopologySpec(SpecModel):
    """A whole topology: its components, their wiring and the knobs of guaranteed processing."""

    name: str = Field(pattern=NAME_PATTERN, max_length=NAME_MAX)
    workers: int = Field(default=1, ge=1)
    ackers: int | None = Field(default=None, ge=0, description="acker tasks; null = one per worker")
    message_timeout_seconds: int = Field(default=30, ge=1)
    max_spout_pending: int | None = Field(default=1000, ge=1, le=INT32_MAX,
                                          description="per spout task; null = no limit")
    executor_queue_size: int = Field(default=1024, ge=1, le=INT32_MAX, description="bounded inbox of each executor")
    spout_wait: SpoutWait = Field(default_factory=SpoutWait)
    error_reporting: ErrorReporting = Field(default_factory=ErrorReporting)
    transfer: Transfer = Field(default_factory=Transfer)
    locality_aware: LocalityAware = Field(default_factory=LocalityAware)
    config: Config = Field(default_factory=dict)
    spouts: list[SpoutSpec] = Field(min_length=1)
    bolts: list[BoltSpec] = Field(default_factory=list)
    # Deployment fields: what a Topology resource adds (their models: squall.topology.k8s). squall run ignores
    # them but suspended, which its processes follow live from the file, as pods do from their ConfigMap.
    image: str | None = Field(default=None, description="container image; default: the operator's")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    resources: Resources | None = Field(default=None, description="every role's container resources")
    pod_template: PodTemplates | None = Field(default=None, description="per-role pod customisation")
    disruption_budget: DisruptionBudget | None = Field(default_factory=DisruptionBudget, description=(
        "a PodDisruptionBudget per role; null: none"))
    suspended: bool = Field(default=False, description="true: spouts deactivated, pods kept")
    upgrade_strategy: Literal["Drain", "Recreate"] = Field(default="Drain", description=(
        "how a spec change reaches running pods. Drain (Storm's rebalance -w): spouts deactivated, trees in "
        "flight finished (at most messageTimeoutSeconds), then every kept pod switched to the new spec in place, "
        "pods added or removed, and pods replaced only if their template changed. Recreate: every pod "
        "of the old spec replaced at once, without draining (trees in flight are replayed)"))
    startup_timeout_seconds: int = Field(default=300, ge=10, le=86400, description=(
        "how long a pod may take to start (imports, prepare() loading a model) before Kubernetes restarts it: "
        "the startupProbe's budget; liveness is checked only after it"))
    spark: Spark | None = Field(default=None, description="Spark on Kubernetes for SparkBolts")
    state: State = Field(default_factory=State, description=(
        "where stateful bolts keep their state in Kubernetes (the claim every worker pod mounts, or Redis's "
        "Secret); squall run keeps it under its run directory"))

    # Classes handed to TopologyBuilder directly, so a topology built in Python (even from
    # classes defined in a test function) runs in-process without importing them by name.
    _classes: dict[str, type] = PrivateAttr(default_factory=dict)

    #: Fields that running processes follow live from the mounted spec (no restart).
    LIVE_FIELDS: ClassVar[frozenset[str]] = frozenset({"suspended"})
    #: Fields of how the operator builds and replaces pods, which processes never read: a change replaces
    #: pods (their template changes) but not the plan they agree on.
    POD_FIELDS: ClassVar[frozenset[str]] = frozenset({
        "image", "image_pull_policy", "resources", "pod_template", "disruption_budget", "startup_timeout_seconds",
        "upgrade_strategy", "state"})

    @property
    def num_ackers(self) -> int:
        return self.workers if self.ackers is None else self.ackers

    def fingerprint(self) -> str:
        """A short hash of everything the processes of a topology must agree on: the spec with its
        worker and acker counts resolved, less the :attr:`LIVE_FIELDS` and :attr:`POD_FIELDS`.

        The operator reports it as ``status.specHash`` and moves pods to a new one with a rebalance;
        processes refuse streams from peers with another fingerprint, so processes of two plans never
        exchange tuples routed by different assignments.
        """
        left_out = {type(self).model_fields[f].alias or f for f in self.LIVE_FIELDS | self.POD_FIELDS}
        doc = {key: value for key, value in self.to_dict().items() if key not in left_out}
        doc["ackers"] = self.num_ackers
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def components(self) -> list[ComponentSpec]:
        return [*self.spouts, *self.bolts]

    @property
    def checkpointing(self) -> bool:
        """A bolt is stateful: the topology runs Storm's checkpoint protocol (``squall.state``)."""
        return any(bolt.stateful for bolt in self.bolts)

    @property
    def exactly_once(self) -> bool:
        """The config asks for exactly-once state (``topology.state.guarantee: exactly_once``)."""
        return self.config.get(GUARANTEE_KEY) == EXACTLY_ONCE

    def component(self, name: str) -> ComponentSpec:
        for comp in self.components():
            if comp.name == name:
                return comp
        raise KeyError(name)

    @model_validator(mode="after")
    def _flush_well_within_the_timeout(self) -> Self:
        # Each hop between processes (a tuple, an ack, a verdict) may wait that long, and a tree makes several.
        if self.transfer.flush_interval_ms * 10 > self.message_timeout_seconds * 1000:
            raise ValueError(f"transfer.flushIntervalMs ({self.transfer.flush_interval_ms:g}) must be at most a tenth "
                             f"of messageTimeoutSeconds ({self.message_timeout_seconds} s): every hop between "
                             "processes may wait that long, and trees would time out; lower it, or raise "
                             "messageTimeoutSeconds")
        return self

    @model_validator(mode="after")
    def _windows_fit(self) -> Self:
        errors = window_errors(self.bolts, message_timeout_seconds=self.message_timeout_seconds,
                               max_spout_pending=self.max_spout_pending,
                               spout_tasks=sum(s.num_tasks for s in self.spouts),
                               max_frame_bytes=self.transfer.max_frame_bytes)
        if errors:
            raise ValueError("; ".join(errors))
        return self

    @model_validator(mode="after")
    def _state_can_be_checkpointed(self) -> Self:
        guarantee = self.config.get(GUARANTEE_KEY)
        if guarantee is not None and guarantee not in STATE_GUARANTEES:
            raise ValueError(f"config {GUARANTEE_KEY}: {guarantee!r} is not a state guarantee; use one of "
                             f"{', '.join(STATE_GUARANTEES)} (default: at_least_once)")
        local = [c.name for c in self.components() if GUARANTEE_KEY in c.config]
        if local:
            raise ValueError(f"component(s) {', '.join(map(repr, local))}: config {GUARANTEE_KEY} is the "
                             "topology's (its checkpoints and its spouts' positions go together); set it in the "
                             "topology's config")
        if self.exactly_once and not self.checkpointing:
            raise ValueError(f"config {GUARANTEE_KEY}: exactly_once is a promise about state, and no bolt is "
                             "stateful; make a bolt stateful (stateful: true), or leave the key out")
        windowed = [b.name for b in self.bolts if b.window is not None]
        if self.exactly_once and windowed:
            raise ValueError(f"config {GUARANTEE_KEY}: exactly_once cannot checkpoint the windows of windowed "
                             f"bolt(s) {', '.join(map(repr, windowed))} yet; use at_least_once (durable windows "
                             "keep every tuple at least once)")
        if not self.checkpointing:
            return self
        stateful = ", ".join(repr(b.name) for b in self.bolts if b.stateful)
        if self.num_ackers == 0:
            raise ValueError(f"stateful bolt(s) {stateful} need ackers: their inputs are acked when the checkpoint "
                             "holding their effect commits, and checkpoints are tuple trees the ackers track; set "
                             "ackers to 1 or more (or leave it out: one per worker)")
        interval = self.config.get(CHECKPOINT_INTERVAL_KEY, DEFAULT_CHECKPOINT_INTERVAL_MS)
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or interval <= 0:
            raise ValueError(f"config {CHECKPOINT_INTERVAL_KEY}: {interval!r} is not a number of milliseconds "
                             "above 0 (default 1000)")
        if interval * 2 >= self.message_timeout_seconds * 1000:
            raise ValueError(f"config {CHECKPOINT_INTERVAL_KEY} ({interval:g} ms) must be under half of "
                             f"messageTimeoutSeconds ({self.message_timeout_seconds} s): a stateful bolt's input is "
                             "acked at the commit after it, up to two intervals later, and would time out first; "
                             "lower the interval or raise messageTimeoutSeconds")
        chosen = self.config.get(STATE_PROVIDER_KEY)
        if chosen is not None and chosen not in STATE_PROVIDERS:
            raise ValueError(f"config {STATE_PROVIDER_KEY}: {chosen!r} is not a state provider; use one of "
                             f"{', '.join(STATE_PROVIDERS)} (default: embedded where a state directory is set, else "
                             "memory)")
        return self

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "topology", camel_case_only: bool = False,
                  strict: bool = True) -> TopologySpec:
        """Parse a document; raise :class:`TopologyError` naming every bad field. ``camel_case_only``: a
        Topology resource's spec, whose schema has no snake_case keys (the API server would drop them).
        ``strict``: a value of another type is refused (``workers: "2"``, ``parallelism: true``), as the
        Topology's CRD refuses it; not strict, as Python code may hand them (numpy ints, ``30.0``, tuples),
        it is converted where that loses nothing."""
        if data is None:
            raise TopologyError(f"{source} is empty: it must be a mapping with name, spouts and bolts")
        if not isinstance(data, dict):
            raise TopologyError(f"{source}: expected a mapping with name, spouts and bolts, got {type(data).__name__}")
        try:
            # strict by the models' own config, where a field (an enum's name) says otherwise
            return cls.model_validate(data, strict=None if strict else False, by_alias=True,
                                      by_name=not camel_case_only)
        except ValidationError as exc:
            problems = "\n".join(_describe(e, data) for e in exc.errors())
            raise TopologyError(f"{source} is invalid:\n{problems}") from None


def file_stamp(path: str | Path) -> tuple[int, int, int] | None:
    """What tells a spec file's versions apart, for those that follow its edits: its inode, size and
    modification time (None: no such file). The time alone is not enough: a file rewritten in place
    is empty between its truncation and its write, both within one tick of the file system's clock,
    and a reader in between would take the empty file for the edit, and miss the edit itself."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class _UniqueKeys(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping (PyYAML keeps the last, in silence)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # <<: keys merged in, which the mapping's own override
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} is given twice in this mapping: remove one (YAML would keep the "
                        "last)", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def yaml_documents(path: str | Path) -> list[Any]:
    """The documents of a YAML file, empty ones left out; :class:`TopologyError` saying where it is not YAML
    (a key given twice in a mapping included)."""
    try:
        return [d for d in yaml.load_all(Path(path).read_text(), Loader=_UniqueKeys) if d is not None]
    except OSError as exc:
        raise TopologyError(f"cannot read topology file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        # Parsed from a string, YAML quotes the lines around the error but names the input "<unicode string>"
        where = str(exc).replace('"<unicode string>"', f'"{path}"')
        problem = str(getattr(exc, "problem", ""))
        hint = ("\ncheck the indentation there: a key indented more or less than the others of its mapping"
                if "block end" in problem or "mapping values are not allowed" in problem else "")
        raise TopologyError(f"{path} is not valid YAML: {where}{hint}") from None


def load_spec(path: str | Path) -> TopologySpec:
    """Load and parse a topology YAML file (structure only; see :func:`squall.topology.validate`)."""
    path = Path(path)
    docs = yaml_documents(path)
    if len(docs) > 1:
        resources = all(isinstance(d, dict) and {"apiVersion", "kind"} <= d.keys() for d in docs)
        raise TopologyError(f"{path} holds {len(docs)} YAML documents, not one topology" + (
            ": they are Kubernetes resources; pass the topology file a Topology was made from (what its spec "
            "holds); squall validate checks resources" if resources else "; keep one per file"))
    data = docs[0] if docs else None
    if isinstance(data, dict) and {"apiVersion", "kind"} <= data.keys():  # what squall submit writes
        raise TopologyError(f"{path} is a Kubernetes resource ({data['apiVersion']} {data['kind']}), not a topology "
                            f"file: pass the topology file it was made from (what its spec holds); squall "
                            f"validate checks a resource")
    return TopologySpec.from_dict(data, source=str(path))


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _model_at(loc: tuple[Any, ...]) -> type[SpecModel] | None:
    """The model class that holds the key at ``loc`` (for suggesting spellings)."""
    model: Any = TopologySpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return None
        annotation = field.annotation
        for arg in getattr(annotation, "__args__", ()) or (annotation,):
            if isinstance(arg, type) and issubclass(arg, SpecModel):
                annotation = arg
        if not (isinstance(annotation, type) and issubclass(annotation, SpecModel)):
            return None
        model = annotation
    return model


def _component_name(loc: tuple[Any, ...], data: dict[str, Any]) -> str:
    """" (bolt 'count')" when ``loc`` is inside a named spout or bolt, so the message names it."""
    if len(loc) < 2 or loc[0] not in ("spouts", "bolts") or not isinstance(loc[1], int):
        return ""
    try:
        name = data[loc[0]][loc[1]]["name"]
    except (KeyError, IndexError, TypeError):
        return ""
    return f" ({loc[0][:-1]} {name!r})" if isinstance(name, str) else ""


def _describe(error: Any, data: dict[str, Any]) -> str:
    loc = tuple(error["loc"])
    where = _path(loc) + _component_name(loc, data)
    if error["type"] == "extra_forbidden":
        model = _model_at(loc)
        fields = model.model_fields if model else {}
        alias = fields[loc[-1]].alias if loc[-1] in fields else None
        if alias and alias in _mapping_at(data, loc[:-1]):  # snake_case beside its camelCase: one would be ignored
            return f"  {where}: given twice, also as {alias!r}; keep one"
        allowed = [f.alias or n for n, f in fields.items()]
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(allowed)}"
        return f"  {where}: unknown key; {hint}"
    if error["type"] == "missing":
        return f"  {where}: required, add it"
    if loc[-1:] == ("[key]",):  # a mapping's key: pydantic puts it after the key itself
        return f"  {_path(loc[:-2])}: key {loc[-2]!r} {_plain(error)}"
    got = error.get("input")
    shown = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
    return f"  {where}: {_plain(error)}{shown}"


def _mapping_at(data: Any, loc: tuple[Any, ...]) -> dict[str, Any]:
    """The mapping of the document at ``loc`` ({} where there is none)."""
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return {}
    return data if isinstance(data, dict) else {}


# What a mapping looks like where a model is expected, by model class (the usual slip: a bare string).
_SHAPES = {
    "SpoutSpec": "{name: sentences, className: 'module:Class'}",
    "BoltSpec": "{name: count, className: 'module:Class', inputs: [{component: sentences}]}",
    "Input": "{component: sentences, grouping: {type: shuffle}}",
    "Grouping": "{type: fields, fields: [word]}",
}
# A bound the value broke, by the validation library's error type: how to say it, and its key in ctx.
_BOUNDS = {"greater_than_equal": ("at least", "ge"), "greater_than": ("above", "gt"),
           "less_than_equal": ("at most", "le"), "less_than": ("below", "lt")}
_PATTERNS = {
    NAME_PATTERN: NAME_RULE,
    COMPONENT_PATTERN: "must begin with a letter, then letters, digits, '_', '.' or '-'",
    CLASS_PATTERN: "must be 'module:Class' (e.g. 'examples.wordcount:SplitSentence')",
    JVM_MEMORY: "must be a JVM memory size: a whole number with k, m, g or t (512m, 2g)",
}


def _plain(error: Any) -> str:
    """The validation library's message for ``error``, said as what the value must be where that is clearer."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in _BOUNDS:
        word, key = _BOUNDS[kind]
        return f"must be {word} {ctx[key]}"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") in _PATTERNS:
        return _PATTERNS[ctx["pattern"]]
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "must be a whole number"
    if kind in ("float_parsing", "float_type"):
        return "must be a number"
    if kind in ("bool_parsing", "bool_type"):
        return "must be true or false"
    if kind == "list_type":
        return "must be a list (in YAML, a '- ' line per item)"
    if kind in ("model_type", "dict_type"):
        shape = _SHAPES.get(ctx.get("class_name", ""))
        return f"must be a mapping of keys{f', e.g. {shape}' if shape else ''}"
    if kind in ("enum", "literal_error"):
        return f"must be {ctx['expected']}"
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} item(s)"
    if kind == "string_type":
        got = error.get("input")
        return "must be a string" + (f" (in YAML, quote it: '{got}')" if isinstance(got, (int, float, bool)) else "")
    if kind == "finite_number":
        return "must be a finite number (not .inf or .nan)"
    return error["msg"].removeprefix("Value error, ")
