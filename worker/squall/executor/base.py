"""What every executor shares: a bounded inbox, an overflow of sends that found a full queue, and
the routing of outgoing items to local inboxes or to the remote transfer.

All executors of a process run on one scheduler thread, so none of this needs locks. A send that
finds its destination full parks in the sender's overflow (Storm's ``pendingEmits``); an executor
with a non-empty overflow consumes no more input until it drains: that is the backpressure.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from squall.backoff import Backoff

# A spout's open() or a bolt's prepare() that raised is called again this many seconds later, twice as
# long after each further failure in a row, at most RETRY_LAST: a source that is down when its process
# starts (a broker, a database) is used once it is back, as Storm's restarted worker would, while the
# process's other tasks go on.
RETRY_FIRST, RETRY_LAST = 1.0, 60.0


class SetupRetries:
    """An executor's tasks whose setup call (a spout's ``open()``, a bolt's ``prepare()``) raised, each with
    its growing wait, until a call returns; each raise, and the return at last, is logged."""

    def __init__(self, component: str, call: str, log: logging.Logger) -> None:
        self.component, self.call, self.log = component, call, log
        self.waits: dict[int, Backoff] = {}  # task → its wait

    def failed(self, task_id: int, now: float) -> float:
        """Count a raise of the task's call at ``now``; when to call it again."""
        retry = self.waits.get(task_id)
        if retry is None:
            retry = self.waits[task_id] = Backoff(RETRY_FIRST, RETRY_LAST)
        retry.failed(now)
        self.log.error("%s task %d: %s() raised; it is called again in %.0f s", self.component, task_id,
                       self.call, retry.delay)
        return retry.retry_at

    def returned(self, task_id: int) -> bool:
        """The task's call returned: its raises are forgotten. True if there were any."""
        if self.waits.pop(task_id, None) is None:
            return False
        self.log.info("%s task %d: %s() returned at last", self.component, task_id, self.call)
        return True


class Remote:
    """The link to other processes (``squall.transport.Transport``), which a :class:`Transfer` hands what
    is for a task of another process; None when everything is local. A class, not a protocol: compiled,
    every acker message and crossing tuple reaches it through a C call."""

    def try_send(self, task: int, item: Any) -> bool:
        """Take ``item`` for ``task``, a task of another process; False when it has no room now."""
        raise NotImplementedError

    def try_message(self, task: int, kind: int, root: int, val: int, spout: int) -> bool:
        """Take the acker message ``(kind, root, val, spout)`` for acker task ``task`` of another process,
        as :meth:`try_send` would take it as a tuple (a transport folds it without one)."""
        return self.try_send(task, (kind, root, val, spout))


class Transfer:
    """Delivers an item to the inbox of the task's executor, or hands it to the remote link."""

    def __init__(self, *, capacity: int, remote: Remote | None = None) -> None:
        self.capacity = capacity
        self.inboxes: dict[int, deque] = {}
        # The same inboxes as lists indexed by task id (None where a task is not in this process), and
        # their bound appends: the hot path neither boxes a task id to hash it nor looks up `append`.
        self.local: list[deque | None] = []
        self.appends: list[Any] = []
        # An acker of this process by its task id (None elsewhere): it applies a local acker message
        # at once, where queueing it took a tuple, two ints, an inbox slot and a round of its executor.
        self.ackers: list[Executor | None] = []
        self.remote = remote

    def register(self, task: int, inbox: deque, acker: Executor | None = None) -> None:
        """Make ``inbox`` the inbox of ``task``, a task of this process; ``acker``: the task's executor,
        if it is an acker that takes messages directly (see :meth:`Executor.take_message`)."""
        self.inboxes[task] = inbox
        if task >= len(self.local):
            grow = [None] * (task + 1 - len(self.local))
            self.local.extend(grow)  # in place: executors hold these lists
            self.appends.extend(grow)
            self.ackers.extend(grow)
        self.local[task] = inbox
        self.appends[task] = inbox.append
        self.ackers[task] = acker

    def try_send(self, task: int, item: Any) -> bool:
        """Append ``item`` to the inbox of ``task`` if it has room, or hand it to the remote link for a
        task of another process; False: no room now. The transport's inbound path uses it too: what
        arrives goes out again only as an acker message this worker forwards to its acker (see
        ``Assignment.acker_homes``)."""
        inbox = self.local[task] if 0 <= task < len(self.local) else None
        if inbox is None:
            if self.remote is None:
                raise KeyError(f"task {task} is not in this process and there is no remote link")
            return self.remote.try_send(task, item)
        return self._append(task, inbox, item)

    def try_local(self, task: int, item: Any) -> bool:
        """Append ``item`` to the inbox of ``task`` if that is a task of this process with room; False
        otherwise (a task of another process, or a full inbox)."""
        inbox = self.local[task] if 0 <= task < len(self.local) else None
        return inbox is not None and self._append(task, inbox, item)

    def _append(self, task: int, inbox: Any, item: Any) -> bool:
        """Append ``item`` to ``inbox``, the inbox of ``task``, if it has room."""
        if len(inbox) >= self.capacity:
            return False
        self.appends[task](item)
        return True


class Executor:
    """Base of the spout, bolt and acker executors."""

    kind = "executor"
    takes_messages = False  # an acker's executor, which applies acker messages sent to it at once

    def __init__(self, *, component: str, tasks: tuple[int, ...], transfer: Transfer) -> None:
        self.component = component
        self.task_ids = tasks
        self.transfer = transfer
        self.inbox: deque = deque()
        self.overflow: deque[tuple[int, Any]] = deque()
        self._local, self._appends, self._ackers = transfer.local, transfer.appends, transfer.ackers
        self._capacity = transfer.capacity
        for task in tasks:
            transfer.register(task, self.inbox, self if self.takes_messages else None)

    def send(self, task: int, item: Any) -> None:
        """Send ``item`` to ``task``; never blocks (a full destination parks it in the overflow)."""
        if not self.overflow:
            inbox = self._local[task] if 0 <= task < len(self._local) else None
            if inbox is not None:  # the hot path, inlined: a local inbox with room
                if len(inbox) < self._capacity:
                    self._appends[task](item)
                    return
            elif self.transfer.try_send(task, item):
                return
        self.overflow.append((task, item))

    def send_message(self, task: int, kind: int, root: int, val: int, spout: int) -> None:
        """Send the acker message ``(kind, root, val, spout)`` to acker task ``task``, as :meth:`send`. One
        for an acker of another process goes to the remote link as its fields: in a worker every ack
        does, and building, unpacking and freeing a tuple for each cost more than folding it."""
        if not self.overflow:
            inbox = self._local[task] if 0 <= task < len(self._local) else None
            if inbox is None:
                remote = self.transfer.remote
                if remote is not None:
                    if not remote.try_message(task, kind, root, val, spout):  # no room: it waits
                        self.overflow.append((task, (kind, root, val, spout)))
                    return
            else:
                acker = self._ackers[task]
                if acker is not None:
                    acker.take_message(kind, root, val, spout)
                    return
                if len(inbox) < self._capacity:
                    self._appends[task]((kind, root, val, spout))
                    return
        self.send(task, (kind, root, val, spout))  # it waits in the overflow (or, with no remote, raises)

    def take_message(self, kind: int, root: int, val: int, spout: int) -> None:
        """Apply the acker message ``(kind, root, val, spout)`` now, as one sent by this process's
        executors (see :attr:`takes_messages`)."""
        raise NotImplementedError

    def flush(self) -> bool:
        """Move parked sends on in order; True when the overflow is empty."""
        overflow, try_send = self.overflow, self.transfer.try_send
        while overflow:
            task, item = overflow[0]
            if not try_send(task, item):
                return False
            overflow.popleft()
        return True

    def run_once(self, now: float) -> bool:
        """Do a bounded slice of work; return whether anything happened."""
        raise NotImplementedError

    def wake_at(self) -> float | None:
        """The earliest time this executor has work without new input (None: only on input)."""
        return None

    def start(self) -> None:
        """Open or prepare the task instances."""

    def stop(self) -> None:
        """Close or clean up the task instances."""
