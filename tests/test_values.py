"""Emit checks: only values that cross a process boundary safely, in the declared arity, on a
declared stream; a refused emit sends nothing and says what to change."""

from __future__ import annotations

import pytest

from engine_kit import Numbers, run_until_quiet
from squall import Bolt, EmitError, Spout, TopologyBuilder
from squall.testing import LocalCluster, TestingSink
from squall.values import check_values


class Opaque:
    pass


def nested(depth: int) -> list:
    """A list ``depth`` lists deep."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


BAD = [
    ({1, 2}, "set is not supported"),
    (Opaque(), "Opaque is not supported"),
    (2**64, "does not fit in 64 bits"),
    (-(2**63) - 1, "does not fit in 64 bits"),
    ((1, 2), "tuple is not supported"),
    ([1, [2, {3}]], "set is not supported"),
    ({"k": object()}, "object is not supported"),
    ({(1, 2): "v"}, "tuple is not supported"),
    (1j, "complex is not supported"),
    (b"caf\xe9".decode("utf-8", "surrogateescape"), "a str with a lone surrogate does not encode as UTF-8"),
    (["x", {"k": nested(100)}], "nested more than 100 deep"),
]

GOOD = ["s", b"b", True, False, None, 0.5, float("inf"), 0, 2**64 - 1, -(2**63), [], {},
        [1, "a", None, [2.5, {"k": [b"x"]}]], {"a": 1, 2: [True], "n": {"m": None}}, "café ☕ 東京", nested(100)]


@pytest.mark.parametrize(("value", "reason"), BAD, ids=[repr(v)[:20] for v, _ in BAD])
def test_unsupported_values_are_refused_naming_component_stream_and_field(value, reason):
    with pytest.raises(EmitError) as info:
        check_values(["ok", value], fields=("word", "payload"), component="split", stream="words")
    message = str(info.value)
    supported = "str, bytes, bool, int (64-bit), float, None, list and dict"
    for part in ("'split'", "'payload'", "'words'", reason, supported):
        assert part in message, f"{part!r} missing from: {message}"


@pytest.mark.parametrize("value", GOOD, ids=[repr(v)[:20] for v in GOOD])
def test_supported_values_pass(value):
    check_values([value], fields=("v",), component="c", stream="s")


def test_wrong_arity_is_refused_naming_the_declared_fields():
    with pytest.raises(EmitError) as info:
        check_values(["a", "b", "c"], fields=("word", "count"), component="count", stream="default")
    message = str(info.value)
    for part in ("'count'", "3 value(s)", "'default'", "2 field(s)", "word, count"):
        assert part in message


class BadSpout(Spout):
    """Tries every kind of bad emit once (recording the refusals), then emits one good tuple."""

    outputs = {"default": ["word", "n"], "other": ["x"]}

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.refused: list[str] = []
        self.done = False
        self.acked: list = []

    def next_tuple(self):
        if self.done:
            return
        self.done = True
        for values, stream in [(["w", {1}], "default"), (["w"], "default"), (["w", 1, 2], "default"),
                               (["w", 1], "nope"), ([object()], "other")]:
            try:
                self.collector.emit(values, stream=stream, msg_id=f"bad-{len(self.refused)}")
            except EmitError as exc:
                self.refused.append(str(exc))
        self.collector.emit(["good", 1], msg_id="good")

    def ack(self, msg_id):
        self.acked.append(msg_id)


class BadBolt(Bolt):
    """Emits a value of an unsupported type, without catching the refusal."""

    outputs = ["id"]

    def execute(self, tup):
        self.collector.emit([{tup["id"]}], anchors=tup)
        self.collector.ack(tup)


def test_a_spout_emit_is_refused_and_nothing_is_sent_or_tracked():
    builder = TopologyBuilder("bad-spout")
    builder.set_spout("spout", BadSpout)
    builder.set_bolt("sink", TestingSink).shuffle_grouping("spout").shuffle_grouping("spout", stream="other")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, lambda: spout.acked == ["good"])
        set_value, too_few, too_many, undeclared, obj = spout.refused
        assert "'spout'" in set_value and "'n'" in set_value and "'default'" in set_value and "set" in set_value
        assert "1 value(s)" in too_few and "word, n" in too_few
        assert "3 value(s)" in too_many
        assert "'nope'" in undeclared and "does not declare" in undeclared and "default, other" in undeclared
        assert "'x'" in obj and "'other'" in obj and "object" in obj
        assert cluster.instance("sink").received == [["good", 1]]  # the refused emits sent nothing
        assert cluster.pending() == 0
        assert cluster.counts("spout").emitted == 1


def test_an_uncaught_refusal_in_a_bolt_fails_its_input_and_is_reported():
    builder = TopologyBuilder("bad-bolt")
    builder.set_spout("spout", Numbers, config={"count": 3})
    builder.set_bolt("bad", BadBolt).shuffle_grouping("spout")
    builder.set_bolt("sink", TestingSink).shuffle_grouping("bad")
    with LocalCluster(builder.build()) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, spout.done)
        assert sorted(spout.failed) == [0, 1, 2]
        assert spout.acked == []
        assert cluster.instance("sink").received == []
        errors = cluster.errors("bad")
        assert len(errors) == 3
        assert all(e.error.startswith("EmitError: component 'bad'") and "'id'" in e.error for e in errors)


@pytest.mark.parametrize("value", ["x" * 101, b"x" * 101, ["y" * 60, "z" * 60], {"k": "v" * 100}],
                         ids=["str", "bytes", "list", "dict"])
def test_an_oversized_value_is_refused_at_emit_naming_the_field_and_the_limit(value):
    with pytest.raises(EmitError) as info:
        check_values(["ok", value], fields=("id", "payload"), component="split", stream="words", max_bytes=100)
    message = str(info.value)
    for part in ("'split'", "'payload'", "'words'", "transfer.maxValueBytes (100)"):
        assert part in message, f"{part!r} missing from: {message}"
    check_values(["ok", "x" * 100], fields=("id", "payload"), component="split", stream="words", max_bytes=100)


class RefusedThenFits(Spout):
    """Emits each of ``tries`` once, recording the refusals, then ``fits`` (message id "fits")."""

    tries: tuple[list, ...] = ()
    fits: list = []

    def open(self, conf, context, collector):
        super().open(conf, context, collector)
        self.refused: list[str] = []
        self.acked: list = []
        self.sent = False

    def next_tuple(self):
        if self.sent:
            return
        self.sent = True
        for values in self.tries:
            try:
                self.collector.emit(values, msg_id="refused")
            except EmitError as exc:
                self.refused.append(str(exc))
        self.collector.emit(self.fits, msg_id="fits")

    def ack(self, msg_id):
        self.acked.append(msg_id)


class BigSpout(RefusedThenFits):
    """Values over the limit, in characters or only in UTF-8 bytes, and a str that has no UTF-8, then one at
    the limit."""

    outputs = ["blob"]
    tries = (["x" * 2000], ["é" * 600], [b"caf\xe9".decode("utf-8", "surrogateescape")])
    fits = ["é" * 500]


def test_the_limit_is_the_topologys_transfer_max_value_bytes_in_utf_8_and_a_str_must_have_utf_8():
    """msgpack sends a str in UTF-8: "é" * 600 is 1,200 bytes on the wire. A str with a lone surrogate
    has no UTF-8 at all: before, the emit passed, and the batch it went into raised when it was sent,
    which ended the worker process (in one process the topology ran)."""
    builder = TopologyBuilder("big")
    builder.set_spout("spout", BigSpout)
    builder.set_bolt("sink", TestingSink).shuffle_grouping("spout")
    with LocalCluster(builder.build(transfer={"maxValueBytes": 1000})) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, lambda: spout.acked == ["fits"])
        assert len(spout.refused) == 3
        assert "about 2,000 bytes, over transfer.maxValueBytes (1,000)" in spout.refused[0]
        assert "about 1,200 bytes, over transfer.maxValueBytes (1,000)" in spout.refused[1]
        assert "a str with a lone surrogate does not encode as UTF-8" in spout.refused[2]
        assert cluster.instance("sink").received == [["é" * 500]]


def test_a_value_limit_must_leave_room_in_a_frame():
    from squall import TopologyError, TopologySpec

    with pytest.raises(TopologyError, match="maxValueBytes .70000. must be at most 61371 with maxFrameBytes"):
        TopologySpec.from_dict({"name": "t", "spouts": [{"name": "s", "className": "m:S"}],
                                "transfer": {"maxValueBytes": 70000, "maxFrameBytes": 65536}})


def test_a_full_batch_of_acker_messages_must_fit_in_a_frame():
    """21 bytes a message: 4,096 of them are 86,016 bytes, and gRPC refused such frames, breaking the
    stream (found by the transport audit)."""
    from squall import TopologyError, TopologySpec

    doc = {"name": "t", "spouts": [{"name": "s", "className": "m:S"}]}
    with pytest.raises(TopologyError, match=r"batchSize \(4096\) must be at most 3116 with maxFrameBytes \(65536\)"):
        TopologySpec.from_dict({**doc, "transfer": {"batchSize": 4096, "maxFrameBytes": 65536, "maxValueBytes": 100}})
    TopologySpec.from_dict({**doc, "transfer": {"batchSize": 3116, "maxFrameBytes": 65536, "maxValueBytes": 100}})


def test_size_is_what_msgpack_encodes_headers_and_all():
    """``size`` counted an empty str, bytes, list or dict as 0 bytes and no item's header: [""] * 70,000
    counted 0 and encoded to 70 KB, so it passed maxValueBytes and then no frame (distributed audit)."""
    import msgpack

    from squall.values import content_size, size

    samples = [[""] * 70_000, [b""] * 1000, [[]] * 1000, [{}] * 1000, ["x" * 31, "y" * 32, "z" * 65_536],
               [0, -32, -33, 127, 128, 65_535, 65_536, -32_769, 2**32 - 1, 2**32, -(2**31) - 1, 2**64 - 1, -(2**63)],
               [0.5, None, True, b"b" * 300, "é" * 40], {str(i): [i] * i for i in range(40)}, *GOOD]
    for value in samples:
        encoded = len(msgpack.packb(value))
        assert size(value) == encoded, repr(value)[:60]
    assert content_size([""] * 70_000) == 70_000


class TwoBig(RefusedThenFits):
    """Values that each pass maxValueBytes but not a frame together, then a tuple that fits."""

    outputs = ["a", "b"]
    tries = (["x" * 40_000, "y" * 40_000], [[""] * 35_000, [{}] * 35_000])
    fits = ["x" * 40_000, "y" * 20_000]


def test_the_values_of_a_tuple_together_must_fit_a_frame_in_every_mode():
    """Two values of 40,000 bytes each passed maxValueBytes (50,000): the tuple acked in one process, and
    across processes it was dropped as larger than a frame and its tree failed, at every replay
    (distributed audit). Now the emit is refused in every mode, naming the stream and both limits."""
    builder = TopologyBuilder("two-big")
    builder.set_spout("spout", TwoBig)
    builder.set_bolt("sink", TestingSink).shuffle_grouping("spout")
    with LocalCluster(builder.build(transfer={"maxFrameBytes": 65_536, "maxValueBytes": 50_000})) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, lambda: spout.acked == ["fits"])
        (total, empties) = spout.refused
        assert "'spout'" in total and "'default'" in total and "about 80,006 bytes together" in total
        assert "transfer.maxFrameBytes (65,536)" in total and "raise maxFrameBytes" in total
        assert "about 70,006 bytes together" in empties  # an empty str or dict takes a byte
        assert [len(v) for v in cluster.instance("sink").received[0]] == [40_000, 20_000]


class Gather(Bolt):
    """Holds every input; at the last, emits a large value anchored to them all (refused: their ids do not
    fit in a frame beside it), then anchored to ten of them, each named 30 times (300 anchors in ten trees:
    it fits), and acks them all."""

    outputs = ["blob"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.count = conf["count"]
        self.held: list = []
        self.refused: list[str] = []

    def execute(self, tup):
        self.held.append(tup)
        if len(self.held) < self.count:
            return
        try:
            self.collector.emit(["y" * 58_000], anchors=self.held)
        except EmitError as exc:
            self.refused.append(str(exc))
        self.collector.emit(["y" * 58_000], anchors=self.held[:10] * 30)
        for held in self.held:
            self.collector.ack(held)


def test_a_tuple_anchored_to_more_trees_than_a_frame_has_room_for_is_refused_and_its_anchors_unharmed():
    """A tuple's anchors travel with it (16 bytes per tree): one anchored to 300 trees beside a 58,000-byte
    value does not fit a frame of 64 KiB. The emit is refused before any edge id is drawn, so each input
    can still be acked and every tree completes; anchored to ten trees the same value goes, even when the
    ten inputs are named 300 times (the trees are counted, not the anchors)."""
    builder = TopologyBuilder("gather")
    builder.set_spout("spout", Numbers, config={"count": 300})
    builder.set_bolt("gather", Gather, config={"count": 300}).global_grouping("spout")
    builder.set_bolt("sink", TestingSink).shuffle_grouping("gather")
    with LocalCluster(builder.build(transfer={"maxFrameBytes": 65_536, "maxValueBytes": 60_000})) as cluster:
        spout = cluster.instance("spout")
        run_until_quiet(cluster, lambda: len(spout.acked) == 300)
        (refused,) = cluster.instance("gather").refused
        assert "anchored to 300 trees (16 bytes each past 64)" in refused and "(65,536)" in refused
        assert sorted(spout.acked) == list(range(300)) and spout.failed == []
        assert len(cluster.instance("sink").received) == 1
