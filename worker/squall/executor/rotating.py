"""Storm's ``RotatingMap``: entries expire after a fixed number of rotations without a lookup cost."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any


class RotatingMap:
    """Keys live in the newest bucket; ``rotate`` drops the oldest bucket and returns what it held.

    With ``buckets`` buckets rotated every T seconds, an entry expires after ((buckets-1)·T, buckets·T].
    """

    def __init__(self, buckets: int) -> None:
        if buckets < 2:
            raise ValueError("a RotatingMap needs at least 2 buckets")
        self._buckets: list[dict[Hashable, Any]] = [{} for _ in range(buckets)]

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets)

    def put(self, key: Hashable, value: Any) -> None:
        """Insert or move ``key`` into the newest bucket (restarting its clock)."""
        for bucket in self._buckets[1:]:
            bucket.pop(key, None)
        self._buckets[0][key] = value

    def pop(self, key: Hashable) -> Any | None:
        for bucket in self._buckets:
            if key in bucket:
                return bucket.pop(key)
        return None

    def touch(self, key: Hashable) -> bool:
        """Restart ``key``'s clock; False when it is not (or no longer) present."""
        value = self.pop(key)
        if value is None:
            return False
        self._buckets[0][key] = value
        return True

    def rotate(self) -> dict[Hashable, Any]:
        expired = self._buckets.pop()
        self._buckets.insert(0, {})
        return expired
