"""Reading an offset spout's settings from the component's ``conf``, with errors that name the key."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from squall.errors import ConfigError
from squall.spouts.guarantees import FirstPollOffsetStrategy, ProcessingGuarantee
from squall.spouts.retry import RetryPolicy

E = TypeVar("E", bound=StrEnum)

#: The keys every offset spout reads (defaults in :meth:`OffsetSpoutConfig.from_conf`).
COMMON_KEYS = frozenset({
    "processing.guarantee", "first.poll.offset.strategy", "offset.commit.period.ms",
    "max.uncommitted.offsets", "poll.max.records", "retry.initial.delay.ms", "retry.delay.period.ms",
    "retry.max.retries", "retry.max.delay.ms",
})


@dataclass(frozen=True)
class OffsetSpoutConfig:
    """The settings of the offset core; durations in seconds."""

    guarantee: ProcessingGuarantee = ProcessingGuarantee.AT_LEAST_ONCE
    first_poll: FirstPollOffsetStrategy = FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST
    commit_period: float = 30.0
    max_uncommitted_offsets: int = 10_000_000
    max_poll_records: int = 500
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> OffsetSpoutConfig:
        """Read the common keys (see :data:`COMMON_KEYS`); raise :class:`ConfigError` naming a bad one."""
        return cls(
            guarantee=get_enum(conf, "processing.guarantee", ProcessingGuarantee,
                               ProcessingGuarantee.AT_LEAST_ONCE),
            first_poll=get_enum(conf, "first.poll.offset.strategy", FirstPollOffsetStrategy,
                                FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST),
            commit_period=get_ms(conf, "offset.commit.period.ms", 30_000),
            max_uncommitted_offsets=get_int(conf, "max.uncommitted.offsets", 10_000_000, minimum=1),
            max_poll_records=get_int(conf, "poll.max.records", 500, minimum=1),
            retry=RetryPolicy(
                initial_delay=get_ms(conf, "retry.initial.delay.ms", 0),
                delay_period=get_ms(conf, "retry.delay.period.ms", 2),
                max_retries=get_int(conf, "retry.max.retries", None, minimum=0),
                max_delay=get_ms(conf, "retry.max.delay.ms", 10_000),
            ),
        )


def get_str(conf: Mapping[str, Any], key: str, default: str | None = None, *, hint: str = "") -> str:
    """A non-empty string; without a default the key is required (``hint`` tells what to set)."""
    value = conf.get(key, default)
    if value is None:
        raise ConfigError(f"{key} is required; set it in the spout's config{': ' + hint if hint else ''}")
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return value


def get_int(conf: Mapping[str, Any], key: str, default: int | None, *, minimum: int) -> Any:
    """A whole number >= ``minimum``; ``None`` only when the default is ``None`` (meaning no limit)."""
    value = conf.get(key, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        unset = " or leave it unset for no limit" if default is None else f" (default {default})"
        raise ConfigError(f"{key} must be a whole number >= {minimum}, got {value!r}; fix it{unset}")
    return value


def get_ms(conf: Mapping[str, Any], key: str, default_ms: float) -> float:
    """A duration given in milliseconds (finite, >= 0), returned in seconds."""
    value = conf.get(key, default_ms)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ConfigError(f"{key} must be a finite number of milliseconds >= 0, got {value!r} "
                          f"(default {default_ms})")
    return value / 1000.0


def get_enum(conf: Mapping[str, Any], key: str, enum: type[E], default: E) -> E:
    """One of ``enum``'s values, case-insensitive (``AT_LEAST_ONCE`` and ``at_least_once`` both work)."""
    value = conf.get(key, default)
    if isinstance(value, str):
        try:
            return enum(value.lower())
        except ValueError:
            pass
    choices = ", ".join(m.value for m in enum)
    raise ConfigError(f"{key} must be one of {choices}, got {value!r} (default {default.value})")
