"""The acker task: applies ``__ack_init`` / ``__ack_ack`` / ``__ack_fail`` / ``__ack_reset_timeout``
messages to its pending trees and tells each tree's spout task when the tree is decided."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from squall.acker.table import ACK, FAIL, INIT, RESET, PendingTrees

__all__ = ["ACK", "FAIL", "INIT", "RESET", "AckBatch", "Acker", "AckerMessage", "Notification"]


class AckerMessage(NamedTuple):
    """A message to an acker task. ``val``: the XOR contribution; ``task``: the spout task (init only)."""

    kind: int
    root: int
    val: int
    task: int = -1


class AckBatch:
    """Acker messages that arrived from another process, already as columns (see the transport)."""

    __slots__ = ("kinds", "roots", "vals", "tasks")

    def __init__(self, kinds: np.ndarray, roots: np.ndarray, vals: np.ndarray, tasks: np.ndarray) -> None:
        self.kinds, self.roots, self.vals, self.tasks = kinds, roots, vals, tasks

    def __len__(self) -> int:
        return len(self.roots)


class Notification(NamedTuple):
    """From an acker to a spout task: tree ``root`` was acked (ACK), failed (FAIL) or reset (RESET)."""

    kind: int
    root: int
    task: int


class Acker:
    """One acker task's state; pure, so the runtime feeds it messages and routes what it returns."""

    def __init__(self) -> None:
        self.trees = PendingTrees()
        self.expired = 0

    def process(self, kinds: np.ndarray, roots: np.ndarray, vals: np.ndarray, tasks: np.ndarray) -> list[Notification]:
        """Apply messages given as columns (an :class:`AckBatch` from another process)."""
        return self.process_messages(zip(kinds.tolist(), roots.tolist(), vals.tolist(), tasks.tolist(), strict=True))

    def process_messages(self, messages: Iterable[tuple[int, int, int, int]]) -> list[Notification]:
        """Apply messages given as :class:`AckerMessage` tuples, one by one in order."""
        return [Notification(kind, root, task) for kind, root, task in self.trees.apply(messages)]

    def rotate(self) -> None:
        """Called every message timeout: trees untouched for three rotations are forgotten."""
        self.expired += self.trees.rotate()

    @property
    def pending(self) -> int:
        return len(self.trees)
