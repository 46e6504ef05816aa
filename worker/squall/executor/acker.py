"""The acker executor: feeds acker messages to an :class:`~squall.acker.Acker` as they come."""

from __future__ import annotations

from squall.acker.acker import AckBatch, Acker, AckerMessage, Notification
from squall.executor.base import Executor, Transfer
from squall.system import ACKER_COMPONENT

BUDGET = 4096  # acker messages per scheduler round, so the acker cannot starve the other executors


class AckerExecutor(Executor):
    kind = "acker"
    takes_messages = True

    def __init__(self, *, task: int, transfer: Transfer) -> None:
        super().__init__(component=ACKER_COMPONENT, tasks=(task,), transfer=transfer)
        self.acker = Acker()

    def run_once(self, now: float) -> bool:
        if self.overflow and not self.flush():
            return False
        inbox, acker = self.inbox, self.acker
        if not inbox:
            return False
        # In arrival order: messages of this process one by one, those of other processes a frame at a time.
        notes: list[Notification] = []
        messages: list[AckerMessage] = []
        n = 0
        popleft = inbox.popleft  # looked up once a round, not once a message
        while inbox and n < BUDGET:
            item = popleft()
            if type(item) is AckBatch:
                if messages:
                    notes += acker.process_messages(messages)
                    messages = []
                notes += acker.process_batch(item)
                n += len(item)
            else:
                messages.append(item)
                n += 1
        if messages:
            notes += acker.process_messages(messages)
        for note in notes:
            self.send(note.task, note)
        return True

    def take_message(self, kind: int, root: int, val: int, spout: int) -> None:
        """A message from this process's executors, applied at once: the scheduler thread that sends it
        runs this executor too, and the outcome is the same in any order (see PendingTrees)."""
        note = self.acker.process_message(kind, root, val, spout)
        if note is not None:
            self.send(note.task, note)

    def take_waiting(self) -> None:
        """Apply every message waiting in the inbox (as far as the verdicts can go out)."""
        while self.inbox and self.run_once(0.0):
            pass

    def rotate(self) -> None:
        self.acker.rotate()
