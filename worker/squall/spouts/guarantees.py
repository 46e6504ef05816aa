"""When offsets are committed and where a spout starts reading: the two choices every offset spout makes."""

from __future__ import annotations

from enum import StrEnum


class ProcessingGuarantee(StrEnum):
    """When an offset counts as processed, so that it may be committed.

    - ``AT_LEAST_ONCE`` (default): only once its tuple tree is acked. Failed and timed-out
      tuples are retried with backoff; the contiguous acked prefix is committed synchronously
      every commit period.
    - ``AT_MOST_ONCE``: as soon as it is polled. The polled position is committed synchronously
      right after each poll, before anything is emitted; tuples are never retried.
    - ``NO_GUARANTEE``: as soon as it is polled, but the polled position is committed
      asynchronously every commit period, so a record may be processed 0, 1 or more times.
    """

    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"
    NO_GUARANTEE = "no_guarantee"


class FirstPollOffsetStrategy(StrEnum):
    """Where a partition is first read from when it is assigned to the spout.

    - ``EARLIEST`` / ``LATEST``: the beginning / end of the partition, ignoring offsets that
      were committed for the group by another topology; offsets committed by this topology
      (a restarted task) are resumed from.
    - ``UNCOMMITTED_EARLIEST`` (default) / ``UNCOMMITTED_LATEST``: the group's committed offset,
      whoever committed it; the beginning / end when nothing was committed yet.
    """

    EARLIEST = "earliest"
    LATEST = "latest"
    UNCOMMITTED_EARLIEST = "uncommitted_earliest"
    UNCOMMITTED_LATEST = "uncommitted_latest"

    @property
    def from_beginning(self) -> bool:
        """Whether to start at the beginning (rather than the end) when no commit applies."""
        return self in (FirstPollOffsetStrategy.EARLIEST, FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST)

    @property
    def resumes_any_commit(self) -> bool:
        """Whether any commit of the group is resumed from, not only this topology's own."""
        return self in (FirstPollOffsetStrategy.UNCOMMITTED_EARLIEST,
                        FirstPollOffsetStrategy.UNCOMMITTED_LATEST)
