"""Fixtures for the operator tests: an emulated API server, and operators started against it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import kmock
import pytest_asyncio
from operator_kit import ApiServer, OperatorThread, declare_resources

from squall_operator.settings import Settings


@pytest_asyncio.fixture
async def api() -> AsyncIterator[ApiServer]:
    """kmock's Kubernetes emulator, serving HTTP on a local port."""
    server = ApiServer()
    declare_resources(server)
    async with server, kmock.Server(server):
        yield server


@pytest_asyncio.fixture
async def start_operator(api: ApiServer) -> AsyncIterator[Callable[..., Awaitable[OperatorThread]]]:
    """``await start_operator(**settings)`` starts an operator against ``api``; all are stopped at the end."""
    running: list[OperatorThread] = []

    async def start(*, ready: bool = True, **settings: Any) -> OperatorThread:
        op = OperatorThread(str(api.url), Settings(**{"image": "squall:test", **settings}))
        running.append(op)
        await op.start(ready=ready)
        return op

    yield start
    for op in running:
        if op.thread.is_alive():
            await op.stop()
