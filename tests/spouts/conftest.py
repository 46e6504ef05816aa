"""Helpers for the offset spout tests: a hand-driven clock, a recording collector, a real topology
context, and the real embedded log (in a temporary directory) as the source."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from squall.spouts.config import OffsetSpoutConfig
from squall.spouts.core import OffsetCore
from squall.spouts.log import DurableLog, LogSource
from squall.spouts.records import MessageId, TopicPartition
from squall.spouts.retry import RetryPolicy
from squall.spouts.source import CommitError

TOPIC = "t"


class Clock:
    """A clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class Emits:
    """What the core emitted, in order: (values, stream, msg_id); ``observe()`` is recorded at each emit."""

    calls: list[tuple[list[Any], str, MessageId | None]] = field(default_factory=list)
    observe: Callable[[], Any] | None = None
    observed: list[Any] = field(default_factory=list)

    def __call__(self, values: list[Any], stream: str, msg_id: MessageId | None) -> None:
        if self.observe is not None:
            self.observed.append(self.observe())
        self.calls.append((values, stream, msg_id))

    @property
    def offsets(self) -> list[int]:
        return [values[2] for values, _, _ in self.calls]

    @property
    def ids(self) -> list[MessageId | None]:
        return [msg_id for _, _, msg_id in self.calls]


class SpySource(LogSource):
    """The real log source, recording each commit (and failing the next ones when told to)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commits: list[tuple[dict[TopicPartition, int], bool]] = []
        self.fail_commits = 0

    def commit(self, offsets: Any, *, metadata: str, sync: bool) -> None:
        if self.fail_commits:
            self.fail_commits -= 1
            raise CommitError("injected commit failure")
        self.commits.append((dict(offsets), sync))
        super().commit(offsets, metadata=metadata, sync=sync)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "log.db"


def fill(path: Path, *, partitions: int = 1, per_partition: int = 10) -> DurableLog:
    """A log with topic ``t`` whose partition ``p`` holds values ``{"p": p, "i": i}`` at offsets ``i``."""
    log = DurableLog(path, create=True)
    log.create_topic(TOPIC, partitions=partitions)
    # Unkeyed records go round-robin, so record i*partitions + p lands in partition p at offset i.
    log.append(TOPIC, [(None, {"p": p, "i": i}) for i in range(per_partition) for p in range(partitions)])
    return log


@dataclass
class CoreRig:
    core: OffsetCore
    source: SpySource
    emits: Emits
    reports: list[Exception]
    log: DurableLog

    def step(self, times: int = 1) -> None:
        for _ in range(times):
            self.core.next_tuple()

    def drain(self, limit: int = 1000) -> None:
        """Call next_tuple until a call emits nothing (twice in a row, so a poll gets its turn)."""
        idle = 0
        for _ in range(limit):
            idle = 0 if self.core.next_tuple() else idle + 1
            if idle == 2:
                return
        raise AssertionError("the core kept emitting")

    def committed(self, group: str = "g") -> dict[int, int]:
        return {p: c.offset for p, c in self.log.committed(group, TOPIC).items()}


@pytest.fixture
def rig(log_path: Path, clock: Clock) -> Callable[..., CoreRig]:
    """Build an OffsetCore over the real log: ``rig(partitions=1, per_partition=10, **config)``."""
    made: list[CoreRig] = []

    def build(*, partitions: int = 1, per_partition: int = 10, translate: Any = None, topology: str = "topo",
              retry: RetryPolicy | None = None, exactly_once: bool = False, **config: Any) -> CoreRig:
        log = fill(log_path, partitions=partitions, per_partition=per_partition) if not made else made[0].log
        source = SpySource(DurableLog(log_path), topic=TOPIC, group="g", partitions=range(partitions))
        emits, reports = Emits(), []
        extra = {"translate": translate} if translate else {}
        core = OffsetCore(source, config=OffsetSpoutConfig(retry=retry or RetryPolicy(), **config), emit=emits,
                          topology=topology, report=reports.append, now=clock, exactly_once=exactly_once, **extra)
        core.start()
        made.append(CoreRig(core, source, emits, reports, log))
        return made[-1]

    yield build
    for r in made:
        r.source.close()
    if made:
        made[0].log.close()
