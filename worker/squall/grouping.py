"""Stream groupings: which of a consuming component's tasks receive each tuple.

Every grouper answers ``choose(values) -> list of task ids``. The fields grouping hashes the key
values with CRC-32 of their msgpack encoding, so equal keys reach the same task in every process
and every run (Python's ``hash`` is salted per process and cannot be used).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping, Sequence, Sized
from typing import Any, Protocol

import msgpack

from squall.errors import EmitError
from squall.topology.plan import Subscriber, import_class
from squall.topology.spec import GroupingType
from squall.tuples import Fields

try:
    import cython

    _COMPILED = cython.compiled
except ImportError:  # interpreted, with no Cython installed (a SQUALL_PURE_PYTHON=1 install)
    _COMPILED = False


class CustomStreamGrouping(Protocol):
    """What a ``custom`` grouping class implements (Storm's ``CustomStreamGrouping``)."""

    def prepare(self, context: Any, stream: tuple[str, str], target_tasks: list[int]) -> None: ...

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]: ...


def _canonical(value: Any) -> Any:
    """``value`` with every dict replaced by its items sorted by encoded key: equal dicts, one encoding."""
    kind = type(value)
    if kind is dict:
        items = [(msgpack.packb(_canonical(k)), _canonical(v)) for k, v in value.items()]
        items.sort(key=lambda item: item[0])
        return items
    if kind is list:
        return [_canonical(item) for item in value]
    return value


def stable_hash(values: Sequence[Any]) -> int:
    """A hash of tuple values that is the same in every process and every run.

    Equal values hash equally: dicts built in different orders are encoded in one canonical order.
    """
    for value in values:
        if type(value) in (dict, list):  # rare in keys: only then pay for the canonical copy
            return zlib.crc32(msgpack.packb(_canonical(list(values))))
    return zlib.crc32(msgpack.packb(values))


class Grouper:
    """Chooses the receiving tasks of each tuple of one (emitting task, subscriber) pair."""

    __slots__ = ()

    def choose(self, values: list[Any]) -> list[int]:
        raise NotImplementedError


class Shuffle(Grouper):
    """Round-robin over a shuffled list of tasks, reshuffled each pass: even and unpredictable."""

    __slots__ = ("tasks", "order", "pos", "rng")

    def __init__(self, tasks: Sequence[int], rng: random.Random) -> None:
        self.tasks = list(tasks)
        self.rng = rng
        self.order = self.tasks[:]
        self.pos = len(self.order)

    def choose(self, values: list[Any]) -> list[int]:
        if self.pos >= len(self.order):
            if len(self.order) > 1:  # one task (a locality-aware shuffle's own, often) needs no shuffling
                self.rng.shuffle(self.order)
            self.pos = 0
        task = self.order[self.pos]
        self.pos += 1
        return [task]


class Locality:
    """Where a worker's locality-aware shuffles read how busy its own tasks are: the inboxes of this
    process (filled in as its executors are built) and their capacity, and the bounds of
    ``localityAware``."""

    __slots__ = ("inboxes", "capacity", "higher", "lower")

    def __init__(self, inboxes: Mapping[int, Sized], capacity: int, higher: float, lower: float) -> None:
        self.inboxes, self.capacity, self.higher, self.lower = inboxes, capacity, higher, lower


# Tuples between two looks at the local tasks' inboxes: often enough to widen before an inbox fills
# (executorQueueSize is 1024 by default), rarely enough that the look costs nothing per tuple.
CHECK_EVERY = 32


class LocalityShuffle(Grouper):
    """Storm 2's locality-aware shuffle (``LoadAwareShuffleGrouping``'s scopes, worker and everything):
    a shuffle over the receiving tasks in this worker while they keep up, over every task once their
    inboxes are on average ``higher`` full or more, and back to this worker's below ``lower``.

    Crossing to another worker costs encoding, a frame and decoding; a local hop is an append to an
    inbox. Storm also weighs the remote tasks by the load they report; Squall does not exchange loads,
    so a widened shuffle spreads evenly, as a plain shuffle does.
    """

    __slots__ = ("near", "far", "locality", "wide", "countdown")

    def __init__(self, local: Sequence[int], everything: Sequence[int], rng: random.Random,
                 locality: Locality) -> None:
        self.near = Shuffle(local, rng)
        self.far = Shuffle(everything, rng)
        self.locality = locality
        self.wide = False
        self.countdown = 0

    def load(self) -> float:
        """The local receiving tasks' average inbox fill, 0 (empty) to 1 (full)."""
        inboxes, local = self.locality.inboxes, self.near.tasks
        queued = 0
        for task in local:
            queued += len(inboxes[task])
        return queued / (self.locality.capacity * len(local))

    def choose(self, values: list[Any]) -> list[int]:
        self.countdown -= 1
        if self.countdown <= 0:
            self.countdown = CHECK_EVERY
            load = self.load()
            self.wide = load >= self.locality.lower if self.wide else load >= self.locality.higher
        return self.far.choose(values) if self.wide else self.near.choose(values)


def _one_str_prefix_crc(size: int) -> int:
    """CRC-32 of what msgpack writes before the bytes of ``[s]``, for a str ``s`` of ``size`` bytes."""
    if size < 32:
        header = bytes([0xA0 | size])
    elif size < 2**8:
        header = b"\xd9" + size.to_bytes(1, "big")
    elif size < 2**16:
        header = b"\xda" + size.to_bytes(2, "big")
    else:
        header = b"\xdb" + size.to_bytes(4, "big")
    return zlib.crc32(b"\x91" + header)  # 0x91: an array of one element


_PREFIX_CRC = [_one_str_prefix_crc(n) for n in range(256)]


def _prefix_crc(size: int) -> int:
    """:func:`_one_str_prefix_crc`, from the table for the usual sizes."""
    return _PREFIX_CRC[size] if size < 256 else _one_str_prefix_crc(size)


def _crc_table() -> list[int]:
    """zlib's CRC-32 (the reflected IEEE polynomial) a byte at a time: entry b is the CRC of byte b."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xEDB88320 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def _crc32_chars(p: Any, size: int, crc: int) -> int:
    """``zlib.crc32`` of the ``size`` bytes at ``p`` (a C pointer: compiled only), continuing ``crc``: a
    table lookup per byte. A fields grouping's key is a few bytes, for which calling into zlib cost
    more than the CRC."""
    table = _CRC_TABLE
    crc = ~crc  # a C unsigned int here: the same 32 bits as crc ^ 0xFFFFFFFF
    for i in range(size):
        crc = table[(crc ^ cython.cast(cython.uchar, p[i])) & 0xFF] ^ (crc >> 8)
    return ~crc


class FieldsHash(Grouper):
    __slots__ = ("tasks", "indices", "single")

    def __init__(self, tasks: Sequence[int], indices: list[int]) -> None:
        self.tasks = list(tasks)
        self.indices = indices
        self.single = indices[0] if len(indices) == 1 else -1

    def choose(self, values: list[Any]) -> list[int]:
        if self.single >= 0:
            key = values[self.single]
            if type(key) is str:
                # The hot case, one str key: stable_hash([key]) without building its msgpack bytes.
                if _COMPILED:  # the str's own UTF-8 (an ASCII str's characters): no bytes object
                    size = 0
                    chars = PyUnicode_AsUTF8AndSize(key, cython.address(size))  # noqa: F821 (grouping.pxd)
                    return [self.tasks[_crc32_chars(chars, size, _prefix_crc(size)) % len(self.tasks)]]
                data = key.encode("utf-8")
                return [self.tasks[zlib.crc32(data, _prefix_crc(len(data))) % len(self.tasks)]]
        return [self.tasks[stable_hash([values[i] for i in self.indices]) % len(self.tasks)]]


class Fixed(Grouper):
    """The same tasks every time: ``all`` (every task) and ``global`` (the lowest task id)."""

    __slots__ = ("tasks",)

    def __init__(self, tasks: Sequence[int]) -> None:
        self.tasks = list(tasks)

    def choose(self, values: list[Any]) -> list[int]:
        return list(self.tasks)  # a new list each time: an emit returns it to user code


class Custom(Grouper):
    """A user's grouping, held to what Storm's contract says: the tasks it chooses are among those it
    was given. Any other (a task that does not subscribe, the emitter's own) is refused at the emit, as
    ``emit_direct`` to such a task is, instead of reaching a task that cannot take the tuple."""

    __slots__ = ("impl", "task_id", "targets", "name", "stream")

    def __init__(self, impl: CustomStreamGrouping, task_id: int, targets: Sequence[int], name: str,
                 stream: tuple[str, str]) -> None:
        self.impl = impl
        self.task_id = task_id
        self.targets = frozenset(targets)
        self.name = name
        self.stream = stream

    def choose(self, values: list[Any]) -> list[int]:
        chosen = self.impl.choose_tasks(self.task_id, values)
        try:
            tasks = list(chosen)
            if self.targets.issuperset(tasks) and _ints(tasks):
                return tasks
        except TypeError:  # not iterable, or an unhashable task
            pass
        raise EmitError(f"custom grouping {self.name} chose {chosen!r} for stream {'/'.join(self.stream)}: "
                        f"choose_tasks must return a list of ids of the tasks it was given in prepare "
                        f"({sorted(self.targets)})")


def _ints(items: list[Any]) -> bool:
    for item in items:
        if type(item) is not int:
            return False
    return True


def make_grouper(sub: Subscriber, *, source: tuple[str, str], fields: Fields, task_id: int,
                 local_tasks: frozenset[int], context: Any, rng: random.Random,
                 locality: Locality | None = None) -> Grouper | None:
    """The grouper a task uses to send ``source`` (component, stream) tuples to ``sub``.

    Returns None for a direct grouping: those tuples only go where ``emit_direct`` says. With
    ``locality``, a shuffle whose receiving tasks run partly in this worker is locality-aware.
    """
    grouping = sub.input.grouping
    kind = grouping.type
    if kind == GroupingType.DIRECT.value:
        return None
    if kind == GroupingType.FIELDS.value:
        return FieldsHash(sub.tasks, [fields.index(f) for f in grouping.fields or ()])
    if kind == GroupingType.ALL.value:
        return Fixed(sub.tasks)
    if kind == GroupingType.GLOBAL.value:
        return Fixed([min(sub.tasks)])
    if kind == GroupingType.LOCAL_OR_SHUFFLE.value:
        local = [t for t in sub.tasks if t in local_tasks]
        return Shuffle(local or sub.tasks, rng)
    if kind == GroupingType.CUSTOM.value:
        impl = import_class(grouping.custom_class or "", what=f"bolt {sub.component!r} customClass")()
        if hasattr(impl, "prepare"):
            impl.prepare(context, source, list(sub.tasks))
        return Custom(impl, task_id, sub.tasks, grouping.custom_class or "", source)
    if kind == GroupingType.SHUFFLE.value and locality is not None:
        local = [t for t in sub.tasks if t in local_tasks]
        if local and len(local) < len(sub.tasks):
            return LocalityShuffle(local, sub.tasks, rng, locality)
    # shuffle, and none (which Storm implements as a random choice, not a locality-aware one)
    return Shuffle(sub.tasks, rng)
