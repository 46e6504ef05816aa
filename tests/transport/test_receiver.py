"""A process's receiving side: who may stream to it, its commands, its count of open streams, its threads."""

from __future__ import annotations

from typing import Any

import pytest
from transport_support import Taking, decoder

from squall.proto.squall_pb2 import Batch
from squall.transport import Transport


def test_a_command_the_process_refuses_says_so_and_one_it_never_answered_does_not(plan):
    """A rebalance sends again a command a process never answered (squall.process.supervisor._answered),
    never one it refused: a real receiver's Control service refuses with its reason; a port nobody
    listens on is unanswered."""
    from squall.errors import CommandError
    from squall.process.control import ControlClient
    from squall.process.supervisor import free_ports

    def refuse(request: Any) -> Any:
        raise CommandError("worker-1 cannot run the spec to switch to: no such class")

    process = Transport(name="worker-1", fingerprint="p", owner={}, addresses={}, senders=frozenset(),
                        ackers=frozenset(), bind="127.0.0.1:0", decoder=decoder(plan), batch_size=10,
                        flush_interval=0.001, max_frame=1 << 20, control=refuse)
    process.attach(transfer=Taking(), wake=lambda: None, frames=8)
    try:
        with ControlClient(f"127.0.0.1:{process.receiver.port}", timeout=10) as client:
            with pytest.raises(CommandError, match="cannot run the spec") as refused:
                client.status()
        assert refused.value.refused is True
    finally:
        process.close()
    with ControlClient(f"127.0.0.1:{free_ports(1)[0]}", timeout=2) as nobody:
        with pytest.raises(CommandError) as unanswered:
            nobody.status()
    assert unanswered.value.refused is False


def test_an_acker_takes_the_streams_of_every_worker_and_still_answers_commands(plan):
    """An acker sends only to its spouts' workers, and every worker streams to it. Its gRPC server was sized
    from the first: with 5 workers (here the acker sends to none), streams were refused as over the limit
    of concurrent calls for good, the acker never ready and the spouts' worker never activated; with 4
    and one spout worker, the streams fit and its commands were refused. Found by the wire audit."""
    import threading

    from squall.process.control import ControlClient, ProcessState

    state = ProcessState(fingerprint="p1", active=True, held=False, connected=True, pending=0, in_flight=0, member=True)
    common = {"fingerprint": "p1", "decoder": decoder(plan), "ackers": frozenset(), "bind": "127.0.0.1:0",
              "batch_size": 1, "flush_interval": 0.001, "max_frame": 1 << 20}
    workers = [f"worker-{i}" for i in range(5)]
    acker = Transport(name="acker-0", owner={}, addresses={}, senders=frozenset(workers),
                      control=lambda request: state.message(), **common)
    acker.attach(transfer=Taking(), wake=lambda: None, frames=8)
    address = f"127.0.0.1:{acker.receiver.port}"
    senders = [Transport(name=w, owner={100: "acker-0"}, addresses={"acker-0": address}, senders=frozenset(),
                         **common) for w in workers]
    try:
        for sender in senders:
            sender.attach(transfer=Taking(), wake=lambda: None, frames=8)
        for _ in range(600):  # each stream opens once its link connects: 30 s at most
            if acker.all_connected():
                break
            threading.Event().wait(0.05)
        assert acker.all_connected(), acker.missing()
        with ControlClient(address, timeout=10) as client:
            assert client.status() == state
    finally:
        for transport in (*senders, acker):
            transport.close()


def test_a_stream_from_a_name_that_is_no_sender_of_the_plan_is_refused_and_leaves_no_trace(plan):
    """The ``squall-sender`` header, unchecked, became the ``peer`` label of the received-batches metric and
    a key the receiver kept for good: a client holding the topology's certificate (any client, without
    TLS) could make up as many as it liked (found by the observability audit). Only the plan's processes
    that stream to this one are taken in; real loopback gRPC."""
    import grpc

    from squall.proto.squall_pb2 import TransferSummary
    from squall.transport.links import PLAN_KEY

    receiver = Transport(name="worker-1", fingerprint="p1", owner={}, addresses={}, senders=frozenset({"worker-0"}),
                         decoder=decoder(plan), ackers=frozenset(), bind="127.0.0.1:0", batch_size=1,
                         flush_interval=0.001, max_frame=1 << 20)
    receiver.attach(transfer=Taking(), wake=lambda: None, frames=8)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{receiver.receiver.port}") as channel:
            call = channel.stream_unary("/squall.v1.Squall/Transfer", request_serializer=None,
                                        response_deserializer=TransferSummary.FromString)

            def send(sender: str) -> TransferSummary:
                metadata = (("squall-lane", "data"), ("squall-sender", sender), (PLAN_KEY, receiver.fingerprint))
                return call(iter([Batch().SerializeToString()]), metadata=metadata, timeout=10)

            with pytest.raises(grpc.RpcError) as refused:
                send("worker-7")
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "'worker-7' names no process of plan" in refused.value.details()
            assert "(worker-0)" in refused.value.details()
            assert send("worker-0").batches == 1
        assert set(receiver.receiver.stats.batches) == {("worker-0", "data")}
        assert set(receiver.receiver.accepted) == {"worker-0"}
    finally:
        receiver.close()


def test_a_senders_old_stream_that_ends_after_its_new_one_opened_leaves_the_new_one_counted(plan):
    """A sender reconnects while its old stream is still being served (half-open, say), on real loopback
    gRPC. The receiver kept the (sender, lane) of its streams in a set, so the old stream's end removed
    the key the new one shares: the process stayed not ready (``all_connected`` False, ``/readyz``
    failing) until that new stream happened to break. Found by the transport audit."""
    import queue
    import time

    import grpc

    from squall.proto.squall_pb2 import TransferSummary
    from squall.transport.links import PLAN_KEY

    receiver = Transport(name="worker-1", fingerprint="p1", owner={}, addresses={}, senders=frozenset({"worker-0"}),
                         decoder=decoder(plan), ackers=frozenset(), bind="127.0.0.1:0", batch_size=1,
                         flush_interval=0.001, max_frame=1 << 20)
    receiver.attach(transfer=Taking(), wake=lambda: None, frames=8)
    metadata = (("squall-lane", "data"), ("squall-sender", "worker-0"), (PLAN_KEY, receiver.fingerprint))
    channels = []

    def open_stream() -> tuple[queue.Queue, grpc.Future]:
        channel = grpc.insecure_channel(f"127.0.0.1:{receiver.receiver.port}")
        channels.append(channel)
        frames: queue.Queue = queue.Queue()
        call = channel.stream_unary("/squall.v1.Squall/Transfer", request_serializer=None,
                                    response_deserializer=TransferSummary.FromString)
        return frames, call.future(iter(frames.get, None), metadata=metadata)

    try:
        streams = [open_stream(), open_stream()]
        deadline = time.monotonic() + 10
        for n, (frames, _) in enumerate(streams, 1):
            frames.put(Batch().SerializeToString())  # read by the stream's own reader: it is counted by then
            while receiver.receiver.stats.batches.get(("worker-0", "data"), 0) < n and time.monotonic() < deadline:
                time.sleep(0.001)
        (old_frames, old_call), (new_frames, new_call) = streams
        old_frames.put(None)
        old_call.result(timeout=10)  # answered after the receiver let the old stream go
        assert not new_call.done()
        assert ("worker-0", "data") in receiver.receiver.open_streams
        new_frames.put(None)
        new_call.result(timeout=10)
        assert ("worker-0", "data") not in receiver.receiver.open_streams
    finally:
        receiver.close()
        for channel in channels:
            channel.close()


def test_a_closed_receiver_leaves_no_thread_behind(plan):
    """gRPC leaves its server's thread pool to its owner: each rebalance switch of a process left the
    old plan's receiver threads running (3 more a switch in the lifecycle audit's worker)."""
    import time

    receiver = Transport(name="worker-1", fingerprint="p", owner={}, addresses={}, senders=frozenset({"worker-0"}),
                         decoder=decoder(plan), ackers=frozenset(), bind="127.0.0.1:0", batch_size=1,
                         flush_interval=0.001, max_frame=1 << 20)
    receiver.attach(transfer=Taking(), wake=lambda: None, frames=8)
    sender = Transport(name="worker-0", fingerprint="p", owner={plan.component_tasks["upper"][0]: "worker-1"},
                       senders=frozenset(), addresses={"worker-1": f"127.0.0.1:{receiver.receiver.port}"},
                       bind="127.0.0.1:0", decoder=decoder(plan), ackers=frozenset(), batch_size=1,
                       flush_interval=0.001, max_frame=1 << 20)
    sender.attach(transfer=Taking(), wake=lambda: None, frames=8)
    deadline = time.monotonic() + 30
    while not receiver.all_connected() and time.monotonic() < deadline:
        time.sleep(0.01)
    threads = list(receiver.receiver._pool._threads)  # its streams are served on the pool's threads
    assert threads
    receiver.close()
    sender.close()
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.is_alive() for t in threads)
