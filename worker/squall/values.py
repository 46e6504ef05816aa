"""The value types a tuple may carry: the ones that cross process boundaries safely.

Tuples are checked at emit time in every mode, so a topology that runs in one process
also runs distributed. The wire encoding (msgpack) supports exactly these types.
"""

from __future__ import annotations

from typing import Any

from squall.errors import EmitError

SCALAR_TYPES = frozenset((str, bytes, bool, float, type(None)))
INT_MIN, INT_MAX = -(2**63), 2**64 - 1

MAX_DEPTH = 100  # lists and dicts nested deeper are refused: msgpack refuses to pack ~1,000 levels
SUPPORTED = "str, bytes, bool, int (64-bit), float, None, list and dict"


def utf8_size(text: str) -> int:
    """The bytes ``text`` takes in UTF-8, as the wire carries it; -1 when it does not encode: a lone
    surrogate (what ``os.listdir`` returns for a file name that is not UTF-8)."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        return -1


def _bad(value: Any, depth: int = 0) -> str | None:
    """Describe why ``value`` cannot be carried, or return None when it can."""
    kind = type(value)
    if kind is str:
        return None if utf8_size(value) >= 0 else \
            "a str with a lone surrogate does not encode as UTF-8 (decode its bytes with errors='replace')"
    if kind in SCALAR_TYPES:
        return None
    if kind is int:
        return None if INT_MIN <= value <= INT_MAX else f"int {value} does not fit in 64 bits"
    if (kind is list or kind is dict) and depth >= MAX_DEPTH:
        return f"lists and dicts nested more than {MAX_DEPTH} deep are not supported"
    if kind is list:
        for item in value:
            reason = _bad(item, depth + 1)
            if reason:
                return reason
        return None
    if kind is dict:
        for key, item in value.items():
            reason = _bad(key, depth + 1) or _bad(item, depth + 1)
            if reason:
                return reason
        return None
    return f"{kind.__name__} is not supported"


def size(value: Any) -> int:
    """About how many bytes ``value`` takes on the wire: a str's UTF-8 bytes, bytes, and 8 per other scalar."""
    kind = type(value)
    if kind is str:
        return utf8_size(value)
    if kind is bytes:
        return len(value)
    if kind is list:
        return sum(map(size, value))
    if kind is dict:
        return sum(size(k) + size(v) for k, v in value.items())
    return 8


def check_values(values: list[Any], *, fields: tuple[str, ...], component: str, stream: str,
                 max_bytes: int | None = None) -> None:
    """Raise :class:`EmitError` unless ``values`` matches ``fields``, holds only supported types and,
    with ``max_bytes``, no value larger than that (``transfer.maxValueBytes``)."""
    if len(values) != len(fields):
        raise EmitError(
            f"component {component!r} emitted {len(values)} value(s) on stream {stream!r}, "
            f"which declares {len(fields)} field(s): {', '.join(fields) or '(none)'}"
        )
    for name, value in zip(fields, values, strict=True):
        kind = type(value)
        if kind is str:
            if value.isascii() and (max_bytes is None or len(value) <= max_bytes):
                continue
        elif (kind in SCALAR_TYPES or kind is int and INT_MIN <= value <= INT_MAX) and (
                max_bytes is None or kind is not bytes or len(value) <= max_bytes):
            continue
        reason = _bad(value)
        if not reason and max_bytes is not None and size(value) > max_bytes:
            raise EmitError(
                f"component {component!r} emitted field {name!r} on stream {stream!r}: the value holds about "
                f"{size(value):,} bytes, over transfer.maxValueBytes ({max_bytes:,}); send a reference "
                "(a path, a key) instead, or raise the limit"
            )
        if reason:
            raise EmitError(
                f"component {component!r} emitted field {name!r} on stream {stream!r}: {reason}; "
                f"tuple values may be {SUPPORTED} (convert the value, e.g. to str or a dict)"
            )
