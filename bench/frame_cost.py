"""What moving one frame between two processes costs when each process's main thread is busy.

Two processes; each main thread runs rounds of busy Python work (``--work-ms``), as a scheduler
thread does. Between rounds the sender offers a frame (``--size`` bytes, at most ``--rate`` a
second, one waiting at a time) and the receiver takes what arrived. Two transports:

- ``sync``: as Squall's links and receiver are built, grpc's sync API: a client stream fed from a
  one-slot queue (gRPC's own thread consumes it), a server whose handler thread hands frames over
  through a queue;
- ``loop``: grpc.aio, the client call and the server on an asyncio loop that the main thread itself
  runs for one iteration between rounds (no Python thread of ours between the network and it);
- ``pull``: the link turned around: the receiver dials the sender and reads a response stream with
  gRPC's single-threaded unary-stream option (its reading thread polls the call: no server polling
  thread), the sender serves it from a handler thread fed by a one-slot queue;
- ``unary``: a unary call per frame, started by the sender's main thread (no thread of ours feeds
  gRPC), the next once the one before is answered; the receiver's handler threads hand frames over.

Each process prints the frames it moved, its CPU beyond the busy work per frame (every thread, from
/proc), and its context switches per frame. Figures only; nothing is asserted.

    python bench/frame_cost.py sync|loop|pull|unary [--seconds 8] [--rate 2000] [--size 8000] [--work-ms 0.8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import grpc.experimental
from wordcount import cpu_seconds  # this script's directory is on the path: it is bench/

SERVICE, METHOD = "bench.Frames", "/bench.Frames/Transfer"
QUIET = 1.0  # seconds without a frame after which the receiver counts the sender as done


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(50):
            x += i * i


def cpu_and_switches() -> tuple[float, int]:
    """CPU seconds of this process, and the context switches (voluntary and not) of its threads."""
    switches = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                switches += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
        except OSError:  # a thread that ended meanwhile
            pass
    return cpu_seconds([os.getpid()]), switches


class Meter:
    """Counts frames, and the busy work's own CPU, from the first frame on: for ``seconds`` (the
    sender), or until frames stop coming (the receiver, ``seconds`` None)."""

    def __init__(self, role: str, seconds: float | None, work: float) -> None:
        self.role, self.seconds, self.work = role, seconds, work
        self.frames, self.busy, self.start, self.last, self.base = 0, 0.0, 0.0, 0.0, (0.0, 0)
        self.give_up = time.monotonic() + 30  # no frame came at all

    def round(self) -> None:
        t = time.thread_time()
        busy(self.work)
        self.busy += time.thread_time() - t

    def count(self, n: int) -> None:
        if n:
            self.last = time.monotonic()
            if not self.start:
                self.start, self.base, self.busy = self.last, cpu_and_switches(), 0.0
        self.frames += n

    def over(self) -> bool:
        now = time.monotonic()
        if now >= self.give_up or not self.start:
            return now >= self.give_up
        return now - self.start >= self.seconds if self.seconds else now - self.last >= QUIET

    def report(self) -> None:
        cpu, switches = cpu_and_switches()
        n = max(self.frames, 1)
        print(f"{self.role}: {self.frames} frames in {self.last - self.start:.1f} s; CPU beyond the work "
              f"{(cpu - self.base[0] - self.busy) / n * 1e6:.1f} µs per frame; "
              f"{(switches - self.base[1]) / n:.1f} context switches per frame", flush=True)


def _handlers(handler, kind=grpc.stream_unary_rpc_method_handler) -> tuple:
    return (grpc.method_handlers_generic_handler(SERVICE, {"Transfer": kind(handler)}),)


def _take_rounds(meter: Meter, arrived: queue.Queue[bytes]) -> None:
    """The receiver's main thread: busy rounds, taking what arrived between them."""
    while not meter.over():
        meter.round()
        n = 0
        while True:
            try:
                arrived.get_nowait()
            except queue.Empty:
                break
            n += 1
        meter.count(n)


def _offer_rounds(meter: Meter, slot: queue.Queue[bytes], frame: bytes, rate: float) -> None:
    """The sender's main thread: busy rounds, offering a frame between them while the slot is free."""
    due = time.monotonic()
    while not meter.over():
        meter.round()
        if time.monotonic() >= due and not slot.full():
            slot.put_nowait(frame)
            meter.count(1)
            due += 1 / rate


def sync_receiver(port: int, meter: Meter) -> None:
    arrived: queue.Queue[bytes] = queue.Queue(4)

    def transfer(frames, _context) -> bytes:
        for frame in frames:
            arrived.put(frame)
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers(_handlers(transfer))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    _take_rounds(meter, arrived)


def sync_sender(port: int, meter: Meter, rate: float, frame: bytes) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=10)
    slot: queue.Queue[bytes] = queue.Queue(1)

    def frames():
        while True:
            yield slot.get()

    _call = channel.stream_unary(METHOD).future(frames())  # kept: a call collected is a call cancelled
    _offer_rounds(meter, slot, frame, rate)


def unary_receiver(port: int, meter: Meter) -> None:
    arrived: queue.Queue[bytes] = queue.Queue(4)

    def transfer(frame, _context) -> bytes:
        arrived.put(frame)
        return b""

    server = grpc.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers(_handlers(transfer, grpc.unary_unary_rpc_method_handler))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    _take_rounds(meter, arrived)


def unary_sender(port: int, meter: Meter, rate: float, frame: bytes) -> None:
    """A unary call per frame, started by the main thread itself (no thread of ours feeds gRPC); the
    next frame waits for the answer to the one before, so frames stay in order."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=10)
    transfer = channel.unary_unary(METHOD)
    call = None
    due = time.monotonic()
    while not meter.over():
        meter.round()
        if time.monotonic() >= due and (call is None or call.done()):
            call = transfer.future(frame)
            meter.count(1)
            due += 1 / rate


def pull_receiver(port: int, meter: Meter) -> None:
    """The receiver dials the sender and reads a response stream; with gRPC's single-threaded
    unary-stream option the reading thread polls the call itself (no server polling thread)."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}",
                                    options=[(grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)])
    arrived: queue.Queue[bytes] = queue.Queue(4)
    print("ready", flush=True)  # the sender, the server here, starts next
    grpc.channel_ready_future(channel).result(timeout=20)
    call = channel.unary_stream(METHOD)(b"")

    def read() -> None:
        for frame in call:
            arrived.put(frame)

    threading.Thread(target=read, daemon=True).start()
    _take_rounds(meter, arrived)


def pull_sender(port: int, meter: Meter, rate: float, frame: bytes) -> None:
    """The sender serves the stream its receiver reads: a handler thread yields frames from a one-slot queue."""
    slot: queue.Queue[bytes] = queue.Queue(1)

    def transfer(_request, _context):
        while True:
            yield slot.get()

    server = grpc.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers(_handlers(transfer, grpc.unary_stream_rpc_method_handler))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    _offer_rounds(meter, slot, frame, rate)


def _one_iteration(loop: asyncio.AbstractEventLoop) -> None:
    loop.call_soon(loop.stop)
    loop.run_forever()


def loop_receiver(port: int, meter: Meter) -> None:
    loop = asyncio.new_event_loop()
    inbox: list[bytes] = []

    async def transfer(frames, _context) -> bytes:
        async for frame in frames:
            inbox.append(frame)
        return b""

    async def serve() -> grpc.aio.Server:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(_handlers(transfer))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        return server

    _server = loop.run_until_complete(serve())
    print("ready", flush=True)
    while not meter.over():
        meter.round()
        _one_iteration(loop)
        meter.count(len(inbox))
        inbox.clear()


def loop_sender(port: int, meter: Meter, rate: float, frame: bytes) -> None:
    loop = asyncio.new_event_loop()

    async def connect():
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        await channel.channel_ready()
        return channel, channel.stream_unary(METHOD)()

    _channel, call = loop.run_until_complete(connect())
    writing = None
    due = time.monotonic()
    while not meter.over():
        meter.round()
        if time.monotonic() >= due and (writing is None or writing.done()):
            writing = loop.create_task(call.write(frame))
            meter.count(1)
            due += 1 / rate
        _one_iteration(loop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("transport", choices=("sync", "loop", "pull", "unary"))
    parser.add_argument("--role", choices=("sender", "receiver"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=50777)
    parser.add_argument("--seconds", type=float, default=8.0, help="how long the sender sends")
    parser.add_argument("--rate", type=float, default=2000.0, help="frames a second at most")
    parser.add_argument("--size", type=int, default=8000, help="bytes per frame")
    parser.add_argument("--work-ms", type=float, default=0.8, help="busy work per round of the main thread")
    args = parser.parse_args()
    if args.role:
        meter = Meter(args.role, args.seconds if args.role == "sender" else None, args.work_ms / 1000)
        receive, send = {"sync": (sync_receiver, sync_sender), "loop": (loop_receiver, loop_sender),
                         "pull": (pull_receiver, pull_sender),
                         "unary": (unary_receiver, unary_sender)}[args.transport]
        if args.role == "receiver":
            receive(args.port, meter)
        else:
            send(args.port, meter, args.rate, b"x" * args.size)
        meter.report()
        os._exit(0)  # gRPC's threads and the open call end with the process
    common = [sys.executable, __file__, args.transport, "--port", str(args.port), "--rate", str(args.rate),
              "--size", str(args.size), "--work-ms", str(args.work_ms)]
    receiver = subprocess.Popen([*common, "--role", "receiver"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
    assert receiver.stdout is not None and receiver.stdout.readline().strip() == "ready"
    sender = subprocess.Popen([*common, "--role", "sender", "--seconds", str(args.seconds)],
                              stderr=subprocess.DEVNULL)
    sender.wait()  # it reports first; the receiver once frames have stopped coming
    print(receiver.stdout.read(), end="")
    receiver.wait()


if __name__ == "__main__":
    main()
