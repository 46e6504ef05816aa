"""Per-partition bookkeeping of emitted and acked offsets, and the next offset that may be committed."""

from __future__ import annotations

from bisect import bisect_left, insort


class OffsetManager:
    """Offsets of one partition emitted and acked since the last commit.

    Only the contiguous acked prefix is committable: a commit says "everything before this offset
    is done". Offsets that were never emitted because they no longer exist (compaction, retention)
    are skipped rather than waited for.
    """

    def __init__(self, committed: int) -> None:
        #: The committed offset: the first offset not known to be processed.
        self.committed = committed
        # Sorted; new offsets arrive in increasing order, so appends are the common case.
        self._emitted: list[int] = []
        # Always a subset of the emitted offsets.
        self._acked: set[int] = set()

    def add_emitted(self, offset: int) -> None:
        """Track ``offset`` as emitted (idempotent: a retried offset is already tracked)."""
        if not self._emitted or offset > self._emitted[-1]:
            self._emitted.append(offset)
        elif not self.is_emitted(offset):
            insort(self._emitted, offset)

    def ack(self, offset: int) -> None:
        """Mark an emitted ``offset`` as processed."""
        self._acked.add(offset)

    def is_emitted(self, offset: int) -> bool:
        i = bisect_left(self._emitted, offset)
        return i < len(self._emitted) and self._emitted[i] == offset

    def is_acked(self, offset: int) -> bool:
        return offset in self._acked

    @property
    def num_uncommitted(self) -> int:
        """Offsets emitted since the last commit (acked or not): what ``max.uncommitted.offsets`` limits."""
        return len(self._emitted)

    def nth_uncommitted(self, n: int) -> int:
        """The ``n``-th (1-based) emitted offset after the committed one: the offset at the limit."""
        return self._emitted[n - 1]

    def emitted_between(self, start: int, end: int) -> list[int]:
        """The emitted offsets in ``[start, end)``."""
        return self._emitted[bisect_left(self._emitted, start):bisect_left(self._emitted, end)]

    def next_commit_offset(self) -> int:
        """The offset a commit may advance to: past every acked offset with no unacked one before it.

        Emitted offsets are walked in order, so offsets that were never emitted (a gap left by
        compaction) do not hold the commit back; the first emitted-but-unacked offset does.
        """
        nxt = self.committed
        for offset in self._emitted:
            if offset not in self._acked:
                break
            nxt = offset + 1
        return nxt

    def commit(self, offset: int) -> None:
        """Record that ``offset`` was committed; forget everything before it."""
        self.committed = offset
        cut = bisect_left(self._emitted, offset)
        for done in self._emitted[:cut]:
            self._acked.discard(done)
        del self._emitted[:cut]
