"""A real Redis for the Redis store's tests: Debian's redis-server (make test installs it), for the session."""

from __future__ import annotations

import pytest

from squall.testing import RedisServer


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    with RedisServer(tmp_path_factory.mktemp("redis")) as redis:
        yield redis.url
