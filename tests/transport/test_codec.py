"""Frames on the wire: tuples, acker messages, verdicts and congestion encoded and decoded; malformed
and random frames refused with a reason; the proto's generated code."""

from __future__ import annotations

import filecmp
import tempfile
from array import array
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from transport_support import Upper, Words, decoder

from squall import TopologyBuilder
from squall.acker import AckBatch
from squall.acker.acker import ACK, FAIL, INIT, RESET, AckerMessage, Notification
from squall.proto import generate
from squall.proto.squall_pb2 import AckerColumns, Batch, Congestion, TupleColumns
from squall.topology import Plan
from squall.transport.codec import (
    Decoder,
    FrameError,
    encode_acker,
    encode_congestion,
    encode_tuples,
    encode_verdicts,
    lost_trees,
)
from squall.transport.outbox import AckerOutbox
from squall.tuples import Fields, Tuple
from squall.values import check_values


def test_tuples_round_trip_with_values_and_anchors(plan):
    spout_task = plan.component_tasks["words"][0]
    bolt_task = plan.component_tasks["upper"][1]
    values = ["héllo", {"b": b"\x00\xff", "n": [1, 2.5, None, True, -(2**63), 2**64 - 1]}]
    sent = Tuple(values, Fields(["word", "meta"]), "words", "default", spout_task, {2**63 + 5: 77, 9: 2**64 - 1},
                 bolt_task)
    [got] = decoder(plan).decode(encode_tuples([sent]))
    assert got.task == bolt_task
    assert got.values == values
    assert got["word"] == "héllo" and got.fields.names == ("word", "meta")
    assert (got.source_component, got.source_stream, got.source_task) == ("words", "default", spout_task)
    assert got.anchors == {2**63 + 5: 77, 9: 2**64 - 1}


@pytest.mark.parametrize("anchors", [{}, {2**64 - 1: 2**63}, {12: 34, 2**63: 0, 5: 2**64 - 1}])
def test_a_tuple_in_no_one_or_several_trees_keeps_its_anchors_through_a_frame(plan, anchors):
    """A tuple of one tree keeps its ids without a dict (``root``, ``edge``); users read ``anchors``
    the same whatever the number of trees."""
    spout_task, bolt_task = plan.component_tasks["words"][0], plan.component_tasks["upper"][0]
    sent = Tuple(["w", None], Fields(["word", "meta"]), "words", "default", spout_task, anchors, bolt_task)
    [got] = decoder(plan).decode(encode_tuples([sent]))
    for tup in (sent, got):
        assert tup.anchors == anchors
        assert tup.tracked() == bool(anchors)
        assert sorted(tup.roots()) == sorted(anchors)
        assert (tup.root, tup.edge) == ((*anchors.items(),)[0] if len(anchors) == 1 else (None, 0))


def test_the_tuples_of_a_tree_that_come_together_share_its_root_and_others_keep_their_own(plan):
    spout_task, bolt_task = plan.component_tasks["words"][0], plan.component_tasks["upper"][0]
    fields = Fields(["word", "meta"])
    anchors = [{2**64 - 2: 1}, {2**64 - 2: 2}, {2**63 + 7: 3}, {2**64 - 2: 4}, {}, {2**64 - 2: 5}]
    sent = [Tuple([str(i), None], fields, "words", "default", spout_task, a, bolt_task) for i, a in enumerate(anchors)]
    got = decoder(plan).decode(encode_tuples(sent))
    assert [t.anchors for t in got] == anchors
    assert got[0].root is got[1].root  # one int for a tree's tuples that came together
    assert [t.values[0] for t in got] == [str(i) for i in range(len(anchors))]


def test_acker_columns_round_trip(plan):
    spout_task = plan.component_tasks["words"][0]
    msgs = [AckerMessage(INIT, 2**64 - 3, 123, spout_task), AckerMessage(ACK, 99, 2**63, -1),
            AckerMessage(FAIL, 7, 0, -1)]
    [(task, batch)] = decoder(plan).decode(encode_acker(msgs))
    assert task == plan.acker_tasks[0]
    assert isinstance(batch, AckBatch)
    assert batch.messages == [tuple(m) for m in msgs]


def test_a_congestion_frame_reaches_its_listener_and_carries_no_items(plan):
    """A peer's congestion is a state for each task it lists, handed to the transport as it is decoded."""
    dec = decoder(plan)
    heard = []
    dec.on_congestion = heard.append
    upper, last = plan.component_tasks["upper"][0], plan.component_tasks["last"][0]
    assert dec.decode(encode_congestion({upper: True, last: False})) == []
    assert heard == [{upper: True, last: False}]
    assert lost_trees(encode_congestion({upper: True})) == []  # a lost one fails no tree


def test_verdicts_round_trip(plan):
    spout_task = plan.component_tasks["words"][0]
    notes = [Notification(ACK, 2**64 - 1, spout_task), Notification(FAIL, 5, spout_task)]
    assert [item for _, item in decoder(plan).decode(encode_verdicts(notes))] == notes


def test_a_data_frame_carries_tuples_and_the_acker_messages_its_worker_forwards(plan):
    """Acker messages for an acker whose home is another worker go there with the tuples, folded per tree;
    the home hands each to its acker task, and a worker that is not the home refuses them."""
    from squall.transport.outbox import DataOutbox

    spout_task, bolt_task = plan.component_tasks["words"][0], plan.component_tasks["upper"][0]
    acker = plan.acker_tasks[0]
    box = DataOutbox(link=None, capacity=8, max_frame=1 << 20)
    tup = Tuple(["w", None], Fields(["word", "meta"]), "words", "default", spout_task, {40: 3}, bolt_task)
    for item in [(INIT, 41, 0b11, spout_task), tup, (ACK, 40, 0b01, -1), (ACK, 41, 0b01, -1)]:
        box.add(item)
    box.message(ACK, 40, 0b10, -1)  # as a worker's own acks come: the fields, no tuple
    assert box.size == 3  # the tuple; 41's INIT with its ACK; 40's two ACKs as one
    frame = box.frame()
    assert box.size == 0
    bolts = frozenset(plan.component_tasks["upper"] + plan.component_tasks["last"])
    home = Decoder(plan, bolt_tasks=bolts, spout_tasks=frozenset(), acker_tasks=frozenset(),
                   forwards=frozenset({acker}))
    items = home.decode(frame)
    assert [(got.task, got.values) for got in items[:1]] == [(bolt_task, ["w", None])]
    assert items[1:] == [(acker, (INIT, 41, 0b10, spout_task)), (acker, (ACK, 40, 0b11, -1))]
    assert sorted(lost_trees(frame)) == [(-1, 40), (spout_task, 41)]  # the tuple's tree, and the INIT's

    other = Decoder(plan, bolt_tasks=bolts, spout_tasks=frozenset(), acker_tasks=frozenset())
    with pytest.raises(FrameError, match="neither runs nor forwards"):
        other.decode(frame)


def test_the_trees_of_a_lost_frame_of_acks_resets_and_fails_fail_at_their_acker():
    """A lost ACK left its tree to time out, and a lost RESET let it time out early (found by the
    cross-process audit): their trees fail at their ackers at once, as a lost tuple's do."""

    box = AckerOutbox(link=None, capacity=8)
    for message in [(ACK, 50, 0b1, -1), (RESET, 51, 0, -1), (FAIL, 52, 0, -1), (ACK, 51, 0b1, -1)]:
        box.add(message)
    assert sorted(lost_trees(box.frame())) == [(-1, 50), (-1, 51), (-1, 52)]


def _tuples(*rows) -> bytes:
    """A frame of tuples given as rows [task, source_task, stream, values, [root, edge, root, edge, ...]]."""
    routes, index, anchored, roots, edges = [], [], [], [], []
    for task, source, stream, _values, flat in rows:
        if [task, source, stream] not in routes:
            routes.append([task, source, stream])
        index.append(routes.index([task, source, stream]))
        anchored.append(len(flat) // 2)
        roots += flat[::2]
        edges += flat[1::2]
    return _columns(routes=msgpack.packb(routes), route=array("I", index).tobytes(),
                    values=msgpack.packb([row[3] for row in rows]), anchored=array("I", anchored).tobytes(),
                    root=array("Q", roots).tobytes(), edge=array("Q", edges).tobytes())


def _columns(**columns: bytes) -> bytes:
    return Batch(tuples=TupleColumns(**columns)).SerializeToString()


def _one(bolt: int, spout: int, **column: bytes) -> bytes:
    """A frame of one valid tuple anchored to one tree, with ``column`` replaced."""
    valid = Batch.FromString(_tuples([bolt, spout, "default", ["w", None], [5, 2]])).tuples
    return _columns(**{name: column.get(name, getattr(valid, name)) for name in
                       ("routes", "route", "values", "anchored", "root", "edge")})


def _acker(kind: bytes, root: bytes, val: bytes, task: bytes) -> bytes:
    return Batch(acker=AckerColumns(kind=kind, root=root, val=val, task=task)).SerializeToString()


# Each case builds a frame from (a bolt task, the spout task) of the plan.
MALFORMED = {
    "garbage": (lambda b, s: b"\xff\xff\xff\xff", "not a Batch protobuf"),
    "bad msgpack": (lambda b, s: _one(b, s, routes=b"\xc1"), "routes is not valid msgpack"),
    "msgpack ext": (lambda b, s: _one(b, s, values=msgpack.packb([msgpack.ExtType(1, b"x")])), "extension type"),
    "not an array": (lambda b, s: _one(b, s, values=msgpack.packb({"a": 1})), "values must be a msgpack array"),
    "short route": (lambda b, s: _one(b, s, routes=msgpack.packb([[b, s]])), "each route must be"),
    "foreign task": (lambda b, s: _tuples([999, s, "default", ["w", None], []]), "not a bolt task of this worker"),
    "unknown source": (lambda b, s: _tuples([b, 999, "default", ["w", None], []]), "unknown source task"),
    "unknown stream": (lambda b, s: _tuples([b, s, "nope", ["w", None], []]), "declares no stream"),
    "arity": (lambda b, s: _tuples([b, s, "default", ["only-one"], []]), "must have 2 values"),
    "values not an array": (lambda b, s: _one(b, s, values=msgpack.packb(["w"])), "must have 2 values"),
    "task not a number": (lambda b, s: _tuples([[b], s, "default", ["w", None], []]), "not a bolt task"),
    "source not a number": (lambda b, s: _tuples([b, [s], "default", ["w", None], []]), "unknown source task"),
    "route out of range": (lambda b, s: _one(b, s, route=array("I", [1]).tobytes()), "not among the frame's 1 routes"),
    "ragged tuple columns": (lambda b, s: _one(b, s, anchored=b""), "tuple columns have different lengths"),
    "torn anchor column": (lambda b, s: _one(b, s, root=b"\x05" * 7), "whole number"),
    "anchored beyond the pairs": (lambda b, s: _one(b, s, anchored=array("I", [2]).tobytes()), "more trees than"),
    "pairs of no tuple": (lambda b, s: _one(b, s, anchored=array("I", [0]).tobytes()), "no tuple is anchored by"),
    "torn column": (lambda b, s: _acker(b"\x00", b"\x01" * 7, b"", b""), "whole number"),
    "ragged columns": (lambda b, s: _acker(b"\x00\x01", b"\x01" * 8, b"\x00" * 8, b"\x00" * 4), "different lengths"),
    "unknown kind": (lambda b, s: _acker(b"\x09", b"\x01" * 8, b"\x00" * 8, b"\x00" * 4), "unknown acker message kind"),
    # an INIT naming a bolt task: its verdict would be routed nowhere (it used to end the acker process)
    "init for a bolt task": (lambda b, s: encode_acker([AckerMessage(INIT, 5, 1, b)]), "not a spout task"),
    "ack with a task": (lambda b, s: encode_acker([AckerMessage(ACK, 5, 1, s)]), "only an acker INIT"),
    "reserved root": (lambda b, s: encode_acker([AckerMessage(ACK, 1, 1, -1)]), "reserved"),
    # a tuple of tree 0 or 1: its bolt's ack went into the worker's acker frame, which the acker then refused
    # whole, so the trees of every other ack in it timed out (found by the transport audit)
    "tuple of a reserved root": (lambda b, s: _tuples([b, s, "default", ["w", None], [1, 7]]), "reserved"),
    "tuple of trees with a reserved root": (lambda b, s: _tuples([b, s, "default", ["w", None], [5, 7, 0, 3]]),
                                            "reserved"),
    # decoded as one tree with the last edge, the first lost: the tree could only time out (the wire audit)
    "tuple anchored to one tree twice": (lambda b, s: _tuples([b, s, "default", ["w", None], [5, 7, 5, 9]]),
                                         "anchored to one tree twice"),
    # it blamed the (valid) source task (the wire audit)
    "stream not a string": (lambda b, s: _tuples([b, s, 7, ["w", None], []]), "on stream 7: a stream is a string"),
    # msgpack decodes its timestamp type itself, never calling ext_hook (found by the transport audit)
    "msgpack timestamp": (lambda b, s: _one(b, s, values=msgpack.packb([["w", {"at": msgpack.Timestamp(1)}]])),
                          "values holds what no tuple value is: Timestamp is not supported"),
    # the same timestamp in headers msgpack never writes, but reads (found by the review)
    "timestamp in ext 8": (lambda b, s: _one(b, s, values=b"\x91\x92\xa1w\xc7\x04\xff\x00\x00\x00\x01"),
                           "values holds what no tuple value is: Timestamp is not supported"),
    "timestamp in ext 32": (lambda b, s: _one(b, s, values=b"\x91\x92\xa1w\xc9\x00\x00\x00\x04\xff\x00\x00\x00\x01"),
                            "values holds what no tuple value is: Timestamp is not supported"),
    # walked for timestamps (it holds a 0xff byte), it overflowed the stack: the reader thread died with a
    # RecursionError, the frame counted as nothing (found by the security audit)
    "nested 500 deep": (lambda b, s: _one(b, s, values=b"\x91\x92\xa1w" + b"\x91" * 500 + b"\xc4\x01\xff"),
                        "nested more than 100 deep"),
    "nested 101 deep": (lambda b, s: _one(b, s, values=b"\x91\x92\xa1w" + b"\x91" * 101 + b"\xc4\x01\xff"),
                        "nested more than 100 deep"),
    # only a column holding a 0xff byte was walked: deeper values than an emit allows came through (the review)
    "nested 101 deep, no 0xff": (lambda b, s: _one(b, s, values=b"\x91\x92\xa1w" + b"\x91" * 101 + b"\xc0"),
                                 "nested more than 100 deep"),
    "nested 1,000 deep, no 0xff": (lambda b, s: _one(b, s, values=b"\x91\x92\xa1w" + b"\x91" * 1000 + b"\xc0"),
                                   "nested more than 100 deep"),
    "timestamp as a map key": (lambda b, s: _one(b, s, values=msgpack.packb([["w", {msgpack.Timestamp(1): 1}]])),
                               "values holds what no tuple value is: Timestamp is not supported"),
    # the error's repr of the task recursed out: RecursionError, which named no field (the review)
    "task nested 1,000 deep": (lambda b, s: _one(b, s, routes=b"\x91\x93" + b"\x91" * 1000 + b"\xc0" +
                                                 msgpack.packb(s) + msgpack.packb("default")),
                               "not a bolt task of this worker"),
    "verdict for a bolt": (lambda b, s: encode_verdicts([Notification(ACK, 5, b)]), "not a spout task of this worker"),
    "unknown verdict": (lambda b, s: encode_verdicts([Notification(7, 5, s)]), "unknown verdict kind"),
    "congestion of no task": (lambda b, s: encode_congestion({999: True}), "not a task of this topology"),
    "congestion flag 2": (lambda b, s: Batch(congestion=Congestion(task=array("i", [b]).tobytes(),
                                                                   congested=b"\x02")).SerializeToString(),
                          r"must be 0 \(clear\) or 1 \(congested\)"),
    "congestion columns": (lambda b, s: Batch(congestion=Congestion(task=array("i", [b, s]).tobytes(),
                                                                    congested=b"\x01")).SerializeToString(),
                           "columns have different lengths"),
}


def test_a_value_nested_as_deep_as_an_emit_allows_decodes_though_its_column_is_walked(plan):
    """The walk for timestamps counted from the column, two levels above a value: a value nested 100 deep,
    which an emit allows, closed its stream as malformed when its column held a 0xff byte (found by the
    review)."""
    value: list = [b"\xff"]
    for _ in range(99):
        value = [value]
    check_values(["w", value], fields=("word", "meta"), component="c", stream="s")  # an emit takes it
    upper, words = plan.component_tasks["upper"][0], plan.component_tasks["words"][0]
    [tup] = decoder(plan).decode(_one(upper, words, values=msgpack.packb([["w", value]])))
    assert tup.values[1] == value


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_frames_are_refused_with_a_reason(plan, case):
    make, message = MALFORMED[case]
    frame = make(plan.component_tasks["upper"][0], plan.component_tasks["words"][0])
    with pytest.raises(FrameError, match=message):
        decoder(plan).decode(frame)


def test_a_refused_frame_names_what_the_network_sent_in_a_few_characters(plan):
    """An error quoted the stream the peer named in full: a megabyte in every log line of it."""
    upper, words = plan.component_tasks["upper"][0], plan.component_tasks["words"][0]
    with pytest.raises(FrameError, match="declares no stream 'xxx") as refused:
        decoder(plan).decode(_tuples([upper, words, "x" * 1_000_000, ["w", None], []]))
    assert len(str(refused.value)) < 200


def test_an_acker_refuses_messages_for_the_trees_another_acker_tracks():
    """A tree's messages go to acker task ``acker_tasks[root % n]``; one that came to another would be a tree
    its spout hears nothing of (found by the wire audit: the acker's decoder took them)."""
    builder = TopologyBuilder("wire")
    builder.set_spout("words", Words)
    builder.set_bolt("upper", Upper).shuffle_grouping("words")
    two = Plan(builder.build(ackers=2))
    spout, (first, second) = two.spout_tasks[0], two.acker_tasks
    at_first = Decoder(two, bolt_tasks=frozenset(), spout_tasks=frozenset(), acker_tasks=frozenset([first]))
    [(task, batch)] = at_first.decode(encode_acker([AckerMessage(INIT, 2000, 3, spout)]))  # 2000 % 2: the first's
    assert task == first and list(batch.roots) == [2000]
    with pytest.raises(FrameError, match=f"root 2001, which acker task {second} tracks, sent to acker task {first}"):
        at_first.decode(encode_acker([AckerMessage(INIT, 2000, 3, spout), AckerMessage(INIT, 2001, 3, spout)]))


def test_a_tuple_on_a_stream_its_bolt_does_not_subscribe_to_is_refused(plan):
    words, upper, last = (plan.component_tasks[c][0] for c in ("words", "upper", "last"))
    dec = decoder(plan)
    with pytest.raises(FrameError, match=rf"tuple on words/default for task {last} of bolt 'last', which does "
                                         r"not subscribe to it \(it consumes upper/default\)"):
        dec.decode(_tuples([last, words, "default", ["w", None], []]))
    with pytest.raises(FrameError, match=rf"tuple on words/counts for task {upper} of bolt 'upper', which does "
                                         r"not subscribe to it \(it consumes words/default\)"):
        dec.decode(_tuples([upper, words, "counts", [3], []]))  # a declared stream no bolt consumes
    # A valid first row does not carry a bad second one, and the routes of the plan still decode.
    with pytest.raises(FrameError, match="does not subscribe"):
        dec.decode(_tuples([upper, words, "default", ["w", None], []], [last, words, "default", ["w", None], []]))
    items = dec.decode(_tuples([last, upper, "default", ["W"], []], [upper, words, "default", ["w", None], []]))
    assert [(t.task, t.source_component, t.source_stream) for t in items] == \
        [(last, "upper", "default"), (upper, "words", "default")]
    with pytest.raises(FrameError, match="does not subscribe"):  # still refused once its source's routes are known
        dec.decode(_tuples([last, words, "default", ["w", None], []]))


def test_generated_proto_code_is_current():
    """squall_pb2.py must be what `python -m squall.proto.generate` produces from squall.proto."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate.generate(Path(tmp))
        assert filecmp.cmp(fresh, Path(generate.__file__).with_name("squall_pb2.py"), shallow=False), \
            "squall_pb2.py is stale: run `python -m squall.proto.generate`"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=st.binary(max_size=512))
def test_random_bytes_decode_or_are_refused_never_anything_else(plan, frame):
    try:
        decoder(plan).decode(frame)
    except FrameError:
        pass


_ints = st.integers(-(2**63), 2**64 - 1)  # what msgpack can carry


_values = st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=8) | st.binary(max_size=8)
                       | st.integers(-(2**63), 2**64 - 1),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                    max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(routes=[[2, 4, "default"]], tuples=[(0, [None, None], 0)], pairs=0)  # one that decodes: words → upper
@given(routes=st.lists(st.one_of(
    st.lists(st.one_of(_ints, st.text(max_size=8), _values), max_size=4),
    st.tuples(st.sampled_from([1, 2, 3, 4, 99, -1]), st.sampled_from([1, 2, 3, 4, 99]),
              st.sampled_from(["default", "x", ""])).map(list)), max_size=3),
    tuples=st.lists(st.tuples(st.integers(0, 3), st.one_of(_values, st.lists(_values, max_size=3)),
                              st.integers(0, 3)), max_size=5),
    pairs=st.integers(0, 8))
def test_structured_tuple_frames_decode_or_are_refused(plan, routes, tuples, pairs):
    """Frames whose columns are valid of almost the right shape: every field is checked against the plan."""
    frame = _columns(routes=msgpack.packb(routes), route=array("I", [t[0] for t in tuples]).tobytes(),
                     values=msgpack.packb([t[1] for t in tuples]),
                     anchored=array("I", [t[2] for t in tuples]).tobytes(),
                     root=array("Q", range(2, 2 + pairs)).tobytes(), edge=array("Q", range(pairs)).tobytes())
    try:
        items = decoder(plan).decode(frame)
    except FrameError:
        return
    consumes = subscriptions(plan)
    # a frame of tuples decodes to Tuples only, each for a task that consumes its stream
    assert all(type(tup) is Tuple and len(tup.values) == len(tup.fields) and (tup.source_component,
               tup.source_stream) in consumes.get(plan.task_component[tup.task], ()) for tup in items)
    assert sum(len(tup.anchors) for tup in items) == pairs


def subscriptions(plan: Plan) -> dict[str, set[tuple[str, str]]]:
    """What each bolt consumes, read from the spec: (source component, stream) of its inputs."""
    return {bolt.name: {(i.component, i.stream) for i in bolt.inputs} for bolt in plan.spec.bolts}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_well_formed_tuples_decode_only_on_the_routes_of_the_plan(plan, data):
    """Tuples of the right arity with valid anchors, between any tasks on any stream: each decodes exactly
    when it goes to a bolt task of this worker whose bolt subscribes to its source's stream, whatever
    the same decoder accepted or refused before; a frame decodes when all its tuples do."""
    local = set(plan.component_tasks["upper"] + plan.component_tasks["last"])
    consumes = subscriptions(plan)
    tasks = [*plan.task_component, 999]
    streams = sorted({s for outputs in plan.outputs.values() for s in outputs}) + ["nope"]

    def arity(source: int, stream: str) -> int:
        try:
            return len(plan.stream_fields(plan.task_component[source], stream))
        except KeyError:
            return 1

    row = st.tuples(st.sampled_from(tasks), st.sampled_from(tasks), st.sampled_from(streams)).map(
        lambda r: [*r, [None] * arity(r[1], r[2]), [5, 7]])
    rows = data.draw(st.lists(row, min_size=1, max_size=8))

    def routed(r: list) -> bool:
        task, source, stream = r[:3]
        return task in local and (plan.task_component.get(source), stream) in consumes[plan.task_component[task]]

    dec = decoder(plan)
    for r in rows:
        try:
            [tup] = dec.decode(_tuples(r))
        except FrameError:
            assert not routed(r), r
        else:
            assert routed(r) and (tup.task, tup.source_task, tup.source_stream) == tuple(r[:3])
    try:
        dec.decode(_tuples(*rows))
    except FrameError:
        assert not all(map(routed, rows))
    else:
        assert all(map(routed, rows))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.integers(0, 255), max_size=6), roots=st.lists(st.integers(0, 2**64 - 1), max_size=6),
       tasks=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6), verdict=st.booleans())
def test_acker_and_verdict_columns_decode_or_are_refused(plan, kinds, roots, tasks, verdict):
    n = min(len(kinds), len(roots), len(tasks))
    rows = list(zip(kinds[:n], roots[:n], tasks[:n], strict=True))
    try:
        if verdict:
            items = decoder(plan).decode(encode_verdicts([Notification(k, r, t) for k, r, t in rows]) if rows else b"")
        else:
            items = decoder(plan).decode(encode_acker([AckerMessage(k, r, 0, t) for k, r, t in rows]) if rows else b"")
    except (FrameError, OverflowError):  # OverflowError: the test's own encoder, not the decoder
        return
    spouts = set(plan.component_tasks["words"])
    for _, item in items:
        if isinstance(item, AckBatch):
            for kind, root, _, task in item.messages:
                assert (task in spouts) if kind == INIT else task == -1
                assert kind <= RESET and root >= 2
        else:
            assert item.task in spouts and 1 <= item.kind <= 3
