"""The examples: every topology file validates; the word count acks every sentence with exact counts, and
the stateful word count commits them to its store, where the next run resumes them."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import yaml
from examples.wordcount import SENTENCES, WordCount
from pydantic import BaseModel

from engine_kit import run_until_quiet
from squall import TopologySpec, load_spec, validate
from squall.cli.state import read, stateful_tasks, summed
from squall.testing import LocalCluster
from squall.topology.spec import BoltSpec, ErrorReporting, LocalityAware, SpoutSpec, SpoutWait, Transfer
from squall.topology.window import WindowExtent, WindowSpec

REPO = Path(__file__).resolve().parents[1]
YAML = REPO / "examples" / "wordcount.yaml"
STATEFUL_YAML = REPO / "examples" / "statefulwordcount.yaml"


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_validates(path):
    validate(load_spec(path))


def wordcount(sentences: int, **overrides) -> TopologySpec:
    doc = load_spec(YAML).to_dict()
    doc["config"] = {"wordcount.sentences": sentences}
    doc.update(overrides)
    return TopologySpec.from_dict(doc)


def counted(cluster: LocalCluster) -> tuple[Counter, list[set[str]]]:
    bolts = cluster.instances("count")
    return sum((Counter(b.counts) for b in bolts), Counter()), [set(b.counts) for b in bolts]


def test_the_yaml_loads_and_validates():
    spec = load_spec(YAML)
    validate(spec)
    assert spec.name == "wordcount"
    assert [s.name for s in spec.spouts] == ["sentences"]
    assert [b.name for b in spec.bolts] == ["split", "count"]
    count = spec.component("count")
    assert count.inputs[0].grouping.type == "fields" and count.inputs[0].grouping.fields == ["word"]


def test_wordcount_acks_every_sentence_and_counts_every_word_exactly_once():
    with LocalCluster(wordcount(300)) as cluster:
        spout = cluster.instance("sentences")
        run_until_quiet(cluster, lambda: cluster.counts("sentences").acked == 300)
        # the spout picks sentences with Random(task id): replay its choices for the expected counts
        rng = random.Random(spout.context.task_id)
        expected = Counter(word for _ in range(300) for word in rng.choice(SENTENCES).split())

        total, per_task = counted(cluster)
        assert total == expected
        assert not set.intersection(*per_task)  # fields grouping: each word counted by one task only
        assert all(per_task)
        counts = cluster.counts("sentences")
        assert (counts.acked, counts.failed, counts.timed_out) == (300, 0, 0)
        assert spout.pending == {} and not spout.replays
        assert cluster.counts("split").executed == 300
        assert cluster.counts("count").emitted == sum(expected.values())
        assert cluster.pending() == 0


class FlakyCount(WordCount):
    """Fails the first tuple of each of the words in ``FLAKY``: their sentences are replayed."""

    FLAKY = {"moon", "seven"}

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.failed_once: set[str] = set()

    def execute(self, tup):
        word = tup["word"]
        if word in self.FLAKY and word not in self.failed_once:
            self.failed_once.add(word)
            self.collector.fail(tup)
            return
        super().execute(tup)


def test_failed_sentences_are_replayed_until_acked():
    spec = wordcount(100)
    spec.component("count").class_name = "test_examples:FlakyCount"
    with LocalCluster(spec) as cluster:
        spout = cluster.instance("sentences")
        cluster.run_until(lambda: cluster.counts("sentences").acked == 100 and cluster.pending() == 0)
        failed = cluster.counts("sentences").failed
        flaky = [b for b in cluster.instances("count") if b.failed_once]
        assert flaky and failed == sum(len(b.failed_once) for b in flaky)  # one replay per failed tuple
        assert spout.pending == {} and not spout.replays

        rng = random.Random(spout.context.task_id)
        expected = Counter(word for _ in range(100) for word in rng.choice(SENTENCES).split())
        total, _ = counted(cluster)
        # at least once: every word counted, replayed sentences' words possibly twice
        assert all(total[word] >= n for word, n in expected.items())
        assert set(total) == set(expected)


def _keys(doc) -> set[str]:
    """Every mapping key anywhere in ``doc``."""
    if isinstance(doc, dict):
        return set(doc) | set().union(*(_keys(v) for v in doc.values()))
    if isinstance(doc, list):
        return set().union(*(_keys(v) for v in doc)) if doc else set()
    return set()


def test_the_configuration_references_complete_example_is_valid_and_spells_out_every_engine_key():
    """docs/configuration.md promises every key of the engine in its example: a field added to the spec
    must be added there too, and the example must stay a topology that validates."""
    text = (REPO / "docs" / "configuration.md").read_text()
    example = text[text.index("## A complete example"):].split("```yaml\n", 1)[1].split("```", 1)[0]
    doc = yaml.safe_load(example)
    validate(TopologySpec.from_dict(doc))

    def aliases(model: type[BaseModel], leave_out: frozenset[str] = frozenset()) -> set[str]:
        return {field.alias or name for name, field in model.model_fields.items() if name not in leave_out}

    deployment = TopologySpec.POD_FIELDS | TopologySpec.LIVE_FIELDS | {"spark"}
    engine = aliases(TopologySpec, deployment)
    for section in (SpoutWait, ErrorReporting, Transfer, LocalityAware, SpoutSpec, BoltSpec, WindowSpec, WindowExtent):
        engine |= aliases(section)
    assert engine - _keys(doc) == set()


def test_the_stateful_word_count_commits_its_counts_and_the_next_run_resumes_them(tmp_path):
    doc = load_spec(STATEFUL_YAML).to_dict()
    doc["config"] = {"wordcount.sentences": 300, "topology.state.dir": str(tmp_path)}  # unthrottled
    spec = TopologySpec.from_dict(doc)
    assert spec.component("count").stateful

    def run() -> tuple[Counter, bool, int]:
        """One run of 300 sentences: the counts committed, and whether no sentence was replayed (a replay
        counts its words again, as at least once allows)."""
        with LocalCluster(spec) as cluster:
            run_until_quiet(cluster, lambda: cluster.counts("sentences").acked == 300)
            task = cluster.instance("sentences").context.task_id
            sentences = cluster.counts("sentences")
            once = sentences.failed == sentences.timed_out == 0
        # a sentence is acked once the commit holding its words is written: the store has them all
        states = [read(spec, c, t, run_dir=tmp_path) for c, t in stateful_tasks(spec)]
        assert all(s.missing is None for s in states)
        return Counter(summed(states)), once, task

    first, once, task = run()
    rng = random.Random(task)  # the spout picks sentences with Random(task id): the same ones in each run
    expected = Counter(word for _ in range(300) for word in rng.choice(SENTENCES).split())
    assert first == expected if once else all(first[w] >= n for w, n in expected.items())
    second, once, _ = run()
    doubled = Counter({w: 2 * n for w, n in expected.items()})
    assert second == doubled if once else all(second[w] >= n for w, n in doubled.items())
