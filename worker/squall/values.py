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

# What a frame of tuples holds besides their values (size()): its protobuf tags and routes, and per tuple
# its route and msgpack's headers, with room to spare, room too for a stream name of NAME_IN_ROOM bytes and
# ANCHORS_IN_ROOM trees a tuple is anchored to; past them, the name's bytes and a root and an edge id per
# tree (squall.transport.codec)
FRAME_ROOM = 4096
TUPLE_ROOM = 64
ANCHOR_BYTES = 16
ANCHORS_IN_ROOM = 64
NAME_IN_ROOM = 64
HEADER_BYTES = 5  # msgpack's longest header of a str, bytes, list or dict
SCALAR_BYTES = 9  # a float, or the largest int, with its type byte


def utf8_size(text: str) -> int:
    """The bytes ``text`` takes in UTF-8, as the wire carries it; -1 when it does not encode: a lone
    surrogate (what ``os.listdir`` returns for a file name that is not UTF-8)."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode())
    except UnicodeEncodeError:
        return -1


def unsupported(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` cannot be carried (what no emit lets through, and no decoded frame either), or None
    when it can."""
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
            reason = unsupported(item, depth + 1)
            if reason:
                return reason
        return None
    if kind is dict:
        for key, item in value.items():
            reason = unsupported(key, depth + 1) or unsupported(item, depth + 1)
            if reason:
                return reason
        return None
    return f"{kind.__name__} is not supported"


def size(value: Any) -> int:
    """The bytes ``value`` takes on the wire (msgpack): its content and every header in it."""
    kind = type(value)
    if kind is str:
        n = utf8_size(value)
        return n + _header(n, 32)
    if kind is bytes:
        return len(value) + _header(len(value), 0)
    if kind is list or kind is dict:
        return content_size(value) + _header(len(value), 16)
    if kind is int:
        return (1 if -32 <= value < 128 else 2 if -128 <= value < 256 else 3 if -32768 <= value < 65536
                else 5 if -2**31 <= value < 2**32 else 9)
    return SCALAR_BYTES if kind is float else 1


def content_size(value: Any) -> int:
    """What ``transfer.maxValueBytes`` bounds: a str's UTF-8 bytes, a bytes' length, a list's or dict's
    items as the wire carries them (:func:`size`)."""
    kind = type(value)
    if kind is str:
        return utf8_size(value)
    if kind is bytes:
        return len(value)
    if kind is list:
        return sum(map(size, value))
    if kind is dict:
        return sum(size(k) + size(v) for k, v in value.items())
    return 0


def _header(n: int, fixed: int) -> int:
    """msgpack's header of a str, bytes, list or dict of ``n`` bytes or items: one byte below ``fixed``,
    two below 256 for a str or bytes (lists and dicts have no 8-bit length), three below 65,536."""
    return 1 if n < fixed else 2 if n < 256 and fixed != 16 else 3 if n < 65536 else HEADER_BYTES


def tuple_budget(max_frame: int, stream: str, anchors: int = 0) -> int:
    """The most a tuple's values may take together (by :func:`size`) for the tuple, on ``stream`` and
    anchored to ``anchors`` trees, to fit a frame of ``max_frame`` bytes (``transfer.maxFrameBytes``)."""
    return (max_frame - FRAME_ROOM - TUPLE_ROOM - max(utf8_size(stream) - NAME_IN_ROOM, 0)
            - ANCHOR_BYTES * max(anchors - ANCHORS_IN_ROOM, 0))


def check_values(values: list[Any], *, fields: tuple[str, ...], component: str, stream: str,
                 max_bytes: int | None = None, max_frame: int | None = None, anchors: int = 0) -> None:
    """Raise :class:`EmitError` unless ``values`` matches ``fields``, holds only supported types and,
    with ``max_bytes``, no value larger than that (``transfer.maxValueBytes``), and with ``max_frame``,
    fits a frame of that many bytes (``transfer.maxFrameBytes``), anchored to ``anchors`` trees."""
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
        reason = unsupported(value)
        if reason:
            raise EmitError(
                f"component {component!r} emitted field {name!r} on stream {stream!r}: {reason}; "
                f"tuple values may be {SUPPORTED} (convert the value, e.g. to str or a dict)"
            )
        if max_bytes is not None and content_size(value) > max_bytes:
            raise EmitError(
                f"component {component!r} emitted field {name!r} on stream {stream!r}: the value holds about "
                f"{content_size(value):,} bytes, over transfer.maxValueBytes ({max_bytes:,}); send a "
                "reference (a path, a key) instead, or raise the limit"
            )
    if max_frame is not None:
        total, budget = sum(map(size, values)), tuple_budget(max_frame, stream, anchors)
        if total > budget:
            trees = f", anchored to {anchors:,} trees ({ANCHOR_BYTES} bytes each past {ANCHORS_IN_ROOM})," \
                if anchors > ANCHORS_IN_ROOM else ""
            raise EmitError(
                f"component {component!r} emitted on stream {stream!r} a tuple whose values take about "
                f"{total:,} bytes together{trees} over the {budget:,} a frame of transfer.maxFrameBytes "
                f"({max_frame:,}) leaves them; send references (paths, keys) instead of the largest values, "
                "or raise maxFrameBytes"
            )
