"""The worker/acker environment contract and the executor assignment every process derives."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from squall.contract import ACKER, WORKER
from squall.errors import ConfigError
from squall.process.pod import ProcessConfig, peer_addresses
from squall.topology import TopologySpec
from squall.topology.assignment import assign, layout

SPEC = {
    "name": "wc", "workers": 2,
    "spouts": [{"name": "sentences", "className": "examples.wordcount:SentenceSpout", "parallelism": 2}],
    "bolts": [
        {"name": "split", "className": "examples.wordcount:SplitSentence", "parallelism": 3, "tasks": 6,
         "inputs": [{"component": "sentences"}]},
        {"name": "count", "className": "examples.wordcount:WordCount", "parallelism": 4,
         "inputs": [{"component": "split", "grouping": {"type": "fields", "fields": ["word"]}}]},
    ],
}


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "wc.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return str(path)


def test_assignment_is_deterministic_balanced_and_complete():
    spec = TopologySpec.from_dict({**SPEC, "workers": 3, "ackers": 2})
    lay = layout(spec)
    first, second = assign(lay), assign(layout(TopologySpec.from_dict({**SPEC, "workers": 3, "ackers": 2})))
    assert first == second
    sizes = [len(execs) for execs in first.executors]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == len(lay.executors) == 9
    owner = first.task_owner()
    assert set(owner) == set(lay.task_component)  # every task, ackers included, runs somewhere
    assert first.acker_tasks == ((lay.acker_tasks[0],), (lay.acker_tasks[1],))
    # Each worker gets a mix of components rather than one component each.
    assert all(len({ex.component for ex in execs}) > 1 for execs in first.executors)


def test_environment_contract(spec_file):
    env = {"SQUALL_TOPOLOGY": spec_file, "HOSTNAME": "wc-worker-1", "SQUALL_NAMESPACE": "prod",
           # not part of the contract any more: the spec file is the only carrier of spec values
           "SQUALL_WORKERS": "5", "SQUALL_MESSAGE_TIMEOUT_SECONDS": "12"}
    cfg = ProcessConfig.from_env(WORKER, env)
    assert (cfg.role, cfg.index, cfg.name) == (WORKER, 1, "worker-1")
    assert cfg.worker_addresses == ["wc-worker-0.wc-worker:7070", "wc-worker-1.wc-worker:7070"]
    assert cfg.acker_addresses == ["wc-acker-0.wc-acker:7070", "wc-acker-1.wc-acker:7070"]
    assert (cfg.spec.workers, cfg.spec.message_timeout_seconds, cfg.spec.num_ackers) == (2, 30, 2)
    assert (cfg.grpc_port, cfg.metrics_port, cfg.bind_host) == (7070, 9090, "0.0.0.0")
    explicit = ProcessConfig.from_env(ACKER, {**env, "SQUALL_ACKER_INDEX": "0",
                                              "SQUALL_WORKER_PEERS": "{topology}-w-{i}.{namespace}:1",
                                              "SQUALL_GRPC_PORT": "7001", "SQUALL_METRICS_PORT": "9001"})
    assert explicit.index == 0 and explicit.worker_addresses == ["wc-w-0.prod:1", "wc-w-1.prod:1"]
    assert explicit.spec_path == Path(spec_file)
    assert (explicit.grpc_port, explicit.metrics_port) == (7001, 9001)


@pytest.mark.parametrize("env, message", [
    ({}, "SQUALL_TOPOLOGY is not set"),
    ({"HOSTNAME": "somehost"}, "set SQUALL_WORKER_INDEX"),
    ({"SQUALL_WORKER_INDEX": "2"}, "worker index 2 is out of range: the topology has 2 worker(s)"),
    ({"SQUALL_WORKER_INDEX": "x"}, "SQUALL_WORKER_INDEX='x' is not an integer"),
    ({"SQUALL_WORKER_INDEX": "-1"}, "SQUALL_WORKER_INDEX=-1 must be >= 0"),
    ({"SQUALL_WORKER_INDEX": "0", "SQUALL_WORKER_PEERS": "127.0.0.1:1"},
     "SQUALL_WORKER_PEERS lists 1 address(es) but there are 2"),
    ({"SQUALL_WORKER_INDEX": "0", "SQUALL_WORKER_PEERS": "{i}-{nope}"}, "SQUALL_WORKER_PEERS: bad template"),
    # found by the configuration audit: gRPC listened on another port, 0 became the default, and a shared
    # port left the process unreachable, its peers waiting for it for good
    ({"SQUALL_WORKER_INDEX": "0", "SQUALL_GRPC_PORT": "70000"},
     "SQUALL_GRPC_PORT=70000 is not a port: use 1 to 65535"),
    ({"SQUALL_WORKER_INDEX": "0", "SQUALL_METRICS_PORT": "0"}, "SQUALL_METRICS_PORT=0 is not a port"),
    ({"SQUALL_WORKER_INDEX": "0", "SQUALL_GRPC_PORT": "9090"},
     "SQUALL_GRPC_PORT and SQUALL_METRICS_PORT are both 9090: give them different ports"),
])
def test_bad_environment_is_refused_with_the_variable_named(spec_file, env, message):
    if env:
        env = {"SQUALL_TOPOLOGY": spec_file, **env}
    with pytest.raises(ConfigError) as err:
        ProcessConfig.from_env(WORKER, env)
    assert message in str(err.value)


def test_peer_list_and_template_forms():
    assert peer_addresses("a:1, b:2", 2, topology="t", namespace="n", var="V") == ["a:1", "b:2"]
    assert peer_addresses("{topology}-{i}:7", 2, topology="t", namespace="n", var="V") == ["t-0:7", "t-1:7"]


def test_wiring_says_who_runs_what_and_who_talks_to_whom():
    """The wiring of each process, computed without starting one (or importing a user class)."""
    assignment = assign(layout(TopologySpec.from_dict({**SPEC, "workers": 2, "ackers": 2})))
    lay = assignment.layout
    sentences, split, count = (set(lay.component_tasks[c]) for c in ("sentences", "split", "count"))
    workers = [assignment.wiring(WORKER, i) for i in range(2)]
    ackers = [assignment.wiring(ACKER, j) for j in range(2)]
    # every spout and bolt task runs in exactly one worker; acker task j in acker process j
    assert set().union(*(w.spout_tasks for w in workers)) == sentences
    assert set().union(*(w.bolt_tasks for w in workers)) == split | count
    assert not workers[0].local_tasks & workers[1].local_tasks
    assert [a.acker_tasks for a in ackers] == [(lay.acker_tasks[0],), (lay.acker_tasks[1],)]
    for w in workers:
        # a worker sends to every task it does not run, and knows which peers are ackers
        assert set(w.owner) == set(lay.task_component) - w.local_tasks
        assert w.ackers == {"acker-0", "acker-1"}
        # the other worker streams to it, and the ackers do too when it runs a spout
        assert w.senders == {"worker-0", "worker-1"} - {w.name} | ({"acker-0", "acker-1"} if w.spout_tasks else set())
    for a in ackers:
        # an acker sends verdicts only, to the spouts' workers, and hears from every worker
        assert set(a.owner) == sentences and a.ackers == frozenset()
        assert a.senders == {"worker-0", "worker-1"} and not a.spout_tasks | a.bolt_tasks
    with pytest.raises(ValueError, match="no worker 2: the topology has 2 worker"):
        assignment.wiring(WORKER, 2)


@pytest.mark.parametrize("spouts, ackers, homes", [
    (2, 2, ["worker-0", "worker-1"]),  # each acker has one spout task: its worker is the acker's home
    (1, 2, ["worker-0", "worker-0"]),  # one spout task draws roots for both ackers
    (2, 1, [None]),  # the acker's spout tasks run on both workers: no home, every worker sends to it
])
def test_a_worker_sends_acker_messages_through_their_ackers_home(spouts, ackers, homes):
    """A worker streams acker messages only to the ackers whose spout tasks all run in it (their home);
    for the others it hands them to the home with its tuples, and the home forwards them."""
    doc = {**SPEC, "workers": 2, "ackers": ackers,
           "spouts": [{**SPEC["spouts"][0], "parallelism": spouts}]}
    assignment = assign(layout(TopologySpec.from_dict(doc)))
    home_of = dict(zip(assignment.layout.acker_tasks, homes, strict=True))
    assert assignment.acker_homes == {a: home for a, home in home_of.items() if home}
    for i in range(2):
        w = assignment.wiring(WORKER, i)
        assert w.acker_via == {a: home for a, home in home_of.items() if home not in (None, w.name)}
        assert w.forwards == {a for a, home in home_of.items() if home == w.name}
    assert all(not assignment.wiring(ACKER, j).acker_via for j in range(ackers))


def test_tls_files_come_from_squall_tls_dir(spec_file, tmp_path):
    from squall.transport.tls import issue

    env = {"SQUALL_TOPOLOGY": spec_file, "SQUALL_WORKER_INDEX": "0"}
    assert ProcessConfig.from_env(WORKER, env).tls is None  # plaintext, as squall run --insecure
    tls = issue("wc")
    tls.write(tmp_path / "tls")
    assert ProcessConfig.from_env(WORKER, {**env, "SQUALL_TLS_DIR": str(tmp_path / "tls")}).tls == tls
    assert (tmp_path / "tls" / "tls.key").stat().st_mode & 0o077 == 0  # the key is its owner's only
    with pytest.raises(ConfigError, match=r"cannot read the topology's TLS files from .*nowhere.*ca\.crt, tls\.crt "
                                          r"and tls\.key"):
        ProcessConfig.from_env(WORKER, {**env, "SQUALL_TLS_DIR": str(tmp_path / "nowhere")})


def test_tls_files_planted_before_neither_keep_their_mode_nor_send_the_key_elsewhere(tmp_path):
    """A run directory in a shared /tmp: a key file another user made world-readable kept its mode, and a
    link sent the key wherever it pointed (found by the security audit)."""
    from squall.transport.tls import issue

    tls_dir, elsewhere = tmp_path / "tls", tmp_path / "stolen"
    tls_dir.mkdir()
    elsewhere.write_bytes(b"")
    (tls_dir / "tls.key").symlink_to(elsewhere)
    (tls_dir / "tls.crt").write_bytes(b"old")
    (tls_dir / "tls.crt").chmod(0o666)
    credentials = issue("wc")
    credentials.write(tls_dir)
    assert elsewhere.read_bytes() == b"" and not (tls_dir / "tls.key").is_symlink()
    assert (tls_dir / "tls.key").read_bytes() == credentials.key
    assert all((tls_dir / name).stat().st_mode & 0o077 == 0 for name in ("tls.key", "tls.crt", "ca.crt"))
    assert sorted(p.name for p in tls_dir.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]  # no file left over
    assert tls_dir.stat().st_mode & 0o077 == 0  # made before, and others could list it


def _worker_0(spec_file: str):
    """Worker 0's process of the spec: its runtime and transport (gRPC on loopback), built, not run."""
    from squall.process.pod import Process
    from squall.process.supervisor import free_ports

    grpc_port, metrics_port = free_ports(2)
    env = {"SQUALL_TOPOLOGY": spec_file, "SQUALL_WORKER_INDEX": "0", "SQUALL_BIND_HOST": "127.0.0.1",
           "SQUALL_GRPC_PORT": str(grpc_port), "SQUALL_METRICS_PORT": str(metrics_port),
           "SQUALL_WORKER_PEERS": "127.0.0.1:1,127.0.0.1:2", "SQUALL_ACKER_PEERS": "127.0.0.1:3,127.0.0.1:4"}
    return Process(ProcessConfig.from_env(WORKER, env))


def test_spouts_held_by_a_rebalance_that_never_comes_back_activate_again(spec_file):
    """An operator that deactivated the spouts for a rebalance and then died (or stays down) never
    switches nor activates them: past twice the message timeout and a margin, they go again by
    themselves (before, they stayed off until the operator came back). The clock is the test's."""
    from squall.process.pod import HOLD_MARGIN
    from squall.proto.squall_pb2 import ControlRequest

    process = _worker_0(spec_file)
    now = [1000.0]
    process.runtime.clock = lambda: now[0]
    try:
        process.activated = True
        process._set_spouts()
        assert process.runtime.spouts and all(s.active for s in process.runtime.spouts)
        process._command(ControlRequest(command=ControlRequest.DEACTIVATE), None)
        assert process.held and not any(s.active for s in process.runtime.spouts)
        limit = 2 * 30 + HOLD_MARGIN  # the spec's message timeout is the default, 30 s
        now[0] += limit - 1
        process._release_hold()
        assert process.held and not any(s.active for s in process.runtime.spouts)  # a long drain is no reason
        now[0] += 1
        process._release_hold()
        assert not process.held and all(s.active for s in process.runtime.spouts)
        process._command(ControlRequest(command=ControlRequest.DEACTIVATE), None)  # the rebalancer is back
        assert process.held and not any(s.active for s in process.runtime.spouts)
    finally:
        process.runtime.close()
        process.transport.close()


def test_an_edit_of_the_spec_file_read_half_written_is_still_followed(spec_file):
    """A file rewritten in place is empty between its truncation and its write, within one tick of the
    file system's clock (a loaded machine can preempt the writer there for long). A process that read
    it then, and went by the time alone, never saw the edit: the whole file had the same time (a flaky
    squall run rebalance test, under make test's load)."""
    import os

    process = _worker_0(spec_file)
    try:
        stamp = os.stat(spec_file).st_mtime_ns + 10**9
        Path(spec_file).write_text("")  # truncated, not yet written
        os.utime(spec_file, ns=(stamp, stamp))
        process._watch_spec()  # "ignoring an unreadable spec update"
        assert not process.suspended
        Path(spec_file).write_text(yaml.safe_dump({**SPEC, "suspended": True}))  # the write, same tick
        os.utime(spec_file, ns=(stamp, stamp))
        process._watch_spec()
        assert process.suspended
    finally:
        process.runtime.close()
        process.transport.close()


def test_sigterm_takes_no_lock_of_the_scheduler_it_interrupts(spec_file):
    """The SIGTERM handler runs on the scheduler's own thread, between any two of its bytecodes, maybe
    while it holds the lock of the work posted to it. It must not take that lock again: posting the
    drain did, and a worker deadlocked, deaf to SIGTERM until its SIGKILL. Here another thread holds the
    lock; ``terminate`` must return without it, and the loop's next look starts the drain. A real
    process's runtime and transport (gRPC on loopback), not run."""
    import threading

    process = _worker_0(spec_file)
    held, returned, waited_out = threading.Event(), threading.Event(), []

    def hold() -> None:
        with process.runtime._posted_lock:  # as the scheduler does in every round
            held.set()
            waited_out.append(not returned.wait(10))

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        process.terminate()
        returned.set()
        holder.join()
        assert waited_out == [False], "terminate waited for the scheduler's lock"
        assert process.draining_since is None
        assert not process._done()  # the loop's next look: draining now, for at least a second
        assert process.draining_since is not None
    finally:
        returned.set()
        holder.join()
        process.runtime.close()
        process.transport.close()
