"""The acker task: applies ``__ack_init`` / ``__ack_ack`` / ``__ack_fail`` / ``__ack_reset_timeout``
messages to its pending trees and tells each tree's spout task when the tree is decided."""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import NamedTuple

from squall.acker.table import ACK, FAIL, INIT, NO_VERDICT, RESET, PendingTrees

__all__ = ["ACK", "FAIL", "INIT", "RESET", "AckBatch", "Acker", "AckerMessage", "Notification", "notification"]


class AckerMessage(NamedTuple):
    """A message to an acker task. ``val``: the XOR contribution; ``task``: the spout task (init only)."""

    kind: int
    root: int
    val: int
    task: int = -1


class AckBatch:
    """Acker messages that arrived from another process in one frame (see the transport), in order, as
    the frame's columns: kinds (uint8), roots and values (uint64) and spout tasks (int32) arrays."""

    __slots__ = ("kinds", "roots", "vals", "tasks")

    def __init__(self, kinds: array, roots: array, vals: array, tasks: array) -> None:
        self.kinds, self.roots, self.vals, self.tasks = kinds, roots, vals, tasks

    def __len__(self) -> int:
        return len(self.kinds)

    @property
    def messages(self) -> list[tuple[int, int, int, int]]:
        """The messages one by one, as :class:`AckerMessage` fields."""
        return list(zip(self.kinds, self.roots, self.vals, self.tasks, strict=True))


class Notification(NamedTuple):
    """From an acker to a spout task: tree ``root`` was acked (ACK), failed (FAIL) or reset (RESET)."""

    kind: int
    root: int
    task: int


_new_tuple = tuple.__new__
_NO_VERDICT = NO_VERDICT  # a C constant where compiled (acker.pxd)


def notification(kind: int, root: int, task: int) -> Notification:
    """``Notification(kind, root, task)`` without calling the named tuple's ``__new__``, which runs as
    interpreted Python: a verdict is made once a tree at its acker, and again where a worker decodes it."""
    return _new_tuple(Notification, (kind, root, task))


class Acker:
    """One acker task's state; pure, so the runtime feeds it messages and routes what it returns."""

    def __init__(self) -> None:
        self.trees = PendingTrees()
        self.expired = 0

    def process_messages(self, messages: Iterable[tuple[int, int, int, int]]) -> list[Notification]:
        """Apply messages given as :class:`AckerMessage` tuples, one by one in order."""
        return [notification(kind, root, task) for kind, root, task in self.trees.apply(messages)]

    def process_message(self, kind: int, root: int, val: int, task: int) -> Notification | None:
        """Apply one message: the verdict it makes, or None."""
        verdict = self.trees.update(kind, root, val, task)
        if verdict == _NO_VERDICT:
            return None
        return notification(verdict >> 16, root, verdict & 0xFFFF)

    def process_batch(self, batch: AckBatch) -> list[Notification]:
        """Apply a frame's messages, in order, from its columns."""
        return [notification(kind, root, task) for kind, root, task in
                self.trees.apply_columns(batch.kinds, batch.roots, batch.vals, batch.tasks)]

    def rotate(self) -> None:
        """Called every message timeout: trees untouched for three rotations are forgotten."""
        self.expired += self.trees.rotate()

    @property
    def pending(self) -> int:
        return len(self.trees)
