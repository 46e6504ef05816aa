"""User code in a worker may start subprocesses while the worker's gRPC streams run: PySpark starts its
JVM so, with a ``preexec_fn`` (a fork, not a spawn). Real gRPC, real forks; nothing is mocked."""

from __future__ import annotations

import os
import subprocess
import sys

from squall import contract

# A process streaming frames to itself over gRPC while its main thread forks and execs children, as a
# worker does whose bolt starts a subprocess. With gRPC's fork support on, a child crashed (SIGSEGV or
# SIGABRT in gRPC's fork handlers) after 3 to 161 forks in five runs out of five.
FORKING = r"""
import os, signal, subprocess, sys
from concurrent import futures
import grpc

def drain(frames, _context):
    for _ in frames:
        pass
    return b""

server = grpc.server(futures.ThreadPoolExecutor(4))
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
    "t.Frames", {"Transfer": grpc.stream_unary_rpc_method_handler(drain)}),))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
channel = grpc.insecure_channel(f"127.0.0.1:{port}")
grpc.channel_ready_future(channel).result(timeout=10)

def frames():
    while True:
        yield b"x" * 2000

streaming = channel.stream_unary("/t.Frames/Transfer").future(frames())
for n in range(int(sys.argv[1])):
    child = subprocess.Popen(["true"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    if child.wait() != 0:
        print(f"fork {n}: the child ended with {child.returncode}", flush=True)
        os._exit(3)
print("all forks ran", flush=True)
os._exit(0)  # gRPC's threads and the open stream end with the process
"""


def test_a_worker_process_starts_subprocesses_while_its_grpc_streams_run():
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"} | contract.role_env(contract.WORKER)
    done = subprocess.run([sys.executable, "-c", FORKING, "500"], env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "all forks ran"), done.stderr[-2000:]
