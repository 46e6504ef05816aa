"""The drift-repair loop: every Topology the operator knows is reconciled every ``resync_seconds``, for
ever, whatever happened meanwhile (a child deleted or edited unwatched, a certificate due), with its
components' own errors read for the status; and beside those passes, each Topology whose reconcile
asked for another look (:meth:`Operator.later <squall_operator.reconcile.Operator.later>`: a rebalance
step under way, a write refused) when its time comes, so that a pass held up by one slow Topology does
not hold up the steps of another's rebalance.

Not a kopf timer: kopf puts a finalizer on every resource with a timer, and a Topology must go at once
when deleted, even while the operator is down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import kopf

from squall_operator.processes import ASKING
from squall_operator.reconcile import RECHECK, RETRY_DELAY, Operator

log = logging.getLogger(__name__)


class Resync:
    """Reconciles ``operator``'s Topologies every ``settings.resync_seconds``, and those due again."""

    def __init__(self, operator: Operator) -> None:
        self.operator = operator
        self._reconciling: set[tuple[str, str]] = set()  # Topologies a resync or a due step reconciles now
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run in the current event loop until :meth:`stop` or :meth:`cancel`."""
        self._task = asyncio.create_task(self.run(), name="resync")

    async def stop(self) -> None:
        """End the loop, and wait until it has."""
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def cancel(self) -> None:
        """End the loop, without waiting."""
        if self._task is not None:
            self._task.cancel()

    async def run(self) -> None:
        """The passes, and the due steps beside them, until cancelled."""
        await asyncio.gather(self._every(), self._due())

    async def _every(self) -> None:
        # A pass is not waited for by the next: a Topology whose pods are slow to answer holds up its own
        # pass, and the next one goes on without it (see _reconcile_all), not every Topology's.
        passes: set[asyncio.Task[None]] = set()
        try:
            while True:
                await asyncio.sleep(self.operator.settings.resync_seconds)
                task = asyncio.create_task(self._pass(), name="resync pass")
                passes.add(task)
                task.add_done_callback(passes.discard)
        finally:
            for task in passes:
                task.cancel()

    async def _pass(self) -> None:
        if await self._reconcile_all(sorted(self.operator.known), read_errors=True):
            self.operator.metrics.resynced()

    async def _due(self) -> None:
        while True:
            await asyncio.sleep(RECHECK)
            await self._reconcile_all(self.operator.due(time.monotonic()), read_errors=False)

    async def _reconcile_all(self, topologies: list[tuple[str, str]], *, read_errors: bool) -> bool:
        """Reconcile each of ``topologies``, :data:`ASKING` at a time (one whose pods are slow to answer, a
        busy process costs ANSWER_TIMEOUT, does not hold up the others' steps); whether each was reconciled
        without error (one an earlier pass still reconciles was not)."""
        room = asyncio.Semaphore(ASKING)
        operator = self.operator

        async def one(namespace: str, name: str) -> bool:
            if (namespace, name) in self._reconciling:  # an earlier pass's, slow: this one goes on without it
                if not read_errors:
                    operator.later(namespace, name, RECHECK)  # a step due: it comes once that one is done
                return False  # not reconciled by this pass (that one says how it went)
            self._reconciling.add((namespace, name))
            async with room:
                try:
                    await asyncio.to_thread(operator.reconcile, namespace, name, log, read_errors=read_errors)
                except kopf.TemporaryError as exc:  # refused by the API server: in the status and an Event
                    operator.later(namespace, name, exc.delay or RETRY_DELAY)
                    return False
                except Exception:  # one Topology's trouble must not stop the others' repair
                    log.exception("reconcile of Topology %s/%s failed", namespace, name)
                    return False
                finally:
                    self._reconciling.discard((namespace, name))
                return True

        return all(await asyncio.gather(*(one(namespace, name) for namespace, name in topologies)))
