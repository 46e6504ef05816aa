"""The acker executor: feeds batches of acker messages to an :class:`~squall.acker.Acker`."""

from __future__ import annotations

from typing import Any

from squall.acker.acker import AckBatch, Acker, AckerMessage
from squall.executor.base import Executor, Transfer
from squall.system import ACKER_COMPONENT

BUDGET = 4096  # acker messages per scheduler round: large batches are what makes the table fast
MIN_BATCH = 256  # fewer messages wait (at most MAX_DELAY) for more to arrive
MAX_DELAY = 0.002


class AckerExecutor(Executor):
    kind = "acker"

    def __init__(self, *, task: int, transfer: Transfer) -> None:
        super().__init__(component=ACKER_COMPONENT, tasks=(task,), transfer=transfer)
        self.acker = Acker()
        self.last_run = 0.0
        # An inbox smaller than MIN_BATCH would wait MAX_DELAY every time: a full inbox runs at once.
        self.min_batch = min(MIN_BATCH, transfer.capacity)

    def run_once(self, now: float) -> bool:
        if self.overflow and not self.flush():
            return False
        inbox = self.inbox
        # Local acker messages come one by one: wait a moment for a batch worth a vectorised pass.
        # Frames from other processes are batches already.
        if not inbox or (len(inbox) < self.min_batch and type(inbox[0]) is not AckBatch
                         and now - self.last_run < MAX_DELAY):
            return False
        self.last_run = now
        messages: list[AckerMessage] = []
        notes: list[Any] = []
        n = 0
        while inbox and n < BUDGET:
            item = inbox.popleft()
            if type(item) is AckBatch:
                notes += self.acker.process(item.kinds, item.roots, item.vals, item.tasks)
                n += len(item)
            else:
                messages.append(item)
                n += 1
        if messages:
            notes += self.acker.process_messages(messages)
        for note in notes:
            self.send(note.task, note)
        return True

    def wake_at(self) -> float | None:
        return self.last_run + MAX_DELAY if self.inbox else None

    def rotate(self) -> None:
        self.acker.rotate()
