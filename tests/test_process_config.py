"""The worker/acker environment contract and the executor assignment every process derives."""

from __future__ import annotations

import pytest
import yaml

from squall.errors import ConfigError
from squall.process import ACKER, WORKER, ProcessConfig, peer_addresses
from squall.topology import Plan, TopologySpec
from squall.topology.assignment import assign

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
    plan = Plan(TopologySpec.from_dict({**SPEC, "workers": 3, "ackers": 2}))
    first, second = assign(plan), assign(Plan(TopologySpec.from_dict({**SPEC, "workers": 3, "ackers": 2})))
    assert first == second
    sizes = [len(execs) for execs in first.executors]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == len(plan.executors) == 9
    owner = first.task_owner()
    assert set(owner) == set(plan.task_component)  # every task, ackers included, runs somewhere
    assert first.acker_tasks == ((plan.acker_tasks[0],), (plan.acker_tasks[1],))
    # Each worker gets a mix of components rather than one component each.
    assert all(len({ex.component for ex in execs}) > 1 for execs in first.executors)


def test_environment_contract(spec_file):
    env = {"SQUALL_TOPOLOGY": spec_file, "HOSTNAME": "wc-worker-1", "SQUALL_WORKERS": "2",
           "SQUALL_ACKERS": "1", "SQUALL_NAMESPACE": "prod", "SQUALL_MESSAGE_TIMEOUT_SECONDS": "12",
           "SQUALL_MAX_SPOUT_PENDING": "77"}
    cfg = ProcessConfig.from_env(WORKER, env)
    assert (cfg.role, cfg.index, cfg.name) == (WORKER, 1, "worker-1")
    assert cfg.worker_addresses == ["wc-worker-0.wc-worker:7070", "wc-worker-1.wc-worker:7070"]
    assert cfg.acker_addresses == ["wc-acker-0.wc-acker:7070"]
    assert (cfg.spec.message_timeout_seconds, cfg.spec.max_spout_pending, cfg.spec.num_ackers) == (12, 77, 1)
    assert (cfg.grpc_port, cfg.metrics_port, cfg.bind_host) == (7070, 9090, "0.0.0.0")
    explicit = ProcessConfig.from_env(ACKER, {**env, "SQUALL_ACKER_INDEX": "0",
                                              "SQUALL_WORKER_PEERS": "{topology}-w-{i}.{namespace}:1",
                                              "SQUALL_GRPC_PORT": "7001", "SQUALL_METRICS_PORT": "9001"})
    assert explicit.index == 0 and explicit.worker_addresses == ["wc-w-0.prod:1", "wc-w-1.prod:1"]
    assert (explicit.grpc_port, explicit.metrics_port) == (7001, 9001)


@pytest.mark.parametrize("env, message", [
    ({}, "SQUALL_TOPOLOGY is not set"),
    ({"HOSTNAME": "somehost"}, "set SQUALL_WORKER_INDEX"),
    ({"SQUALL_WORKER_INDEX": "2"}, "worker index 2 is out of range: the topology has 2 worker(s)"),
    ({"SQUALL_WORKER_INDEX": "x"}, "SQUALL_WORKER_INDEX='x' is not an integer"),
    ({"SQUALL_WORKER_INDEX": "0", "SQUALL_WORKERS": "0"}, "SQUALL_WORKERS=0 must be >= 1"),
    ({"SQUALL_WORKER_INDEX": "0", "SQUALL_WORKER_PEERS": "127.0.0.1:1"},
     "SQUALL_WORKER_PEERS lists 1 address(es) but there are 2"),
    ({"SQUALL_WORKER_INDEX": "0", "SQUALL_WORKER_PEERS": "{i}-{nope}"}, "SQUALL_WORKER_PEERS: bad template"),
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
