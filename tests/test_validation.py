"""Topology validation: every mistake is refused with a message that names the component or field
and says what to change."""

from __future__ import annotations

import copy
import sys

import pytest

from engine_kit import Numbers, PassBolt
from squall import Bolt, Spout, TopologyBuilder, TopologyError, TopologySpec, direct, load_spec, validate
from squall.testing import LocalCluster
from squall.topology.spec import yaml_documents

GOOD = {
    "name": "wc",
    "spouts": [{"name": "sentences", "className": "examples.wordcount:SentenceSpout"}],
    "bolts": [
        {"name": "split", "className": "examples.wordcount:SplitSentence", "parallelism": 2,
         "inputs": [{"component": "sentences"}]},
        {"name": "count", "className": "examples.wordcount:WordCount",
         "inputs": [{"component": "split", "grouping": {"type": "fields", "fields": ["word"]}}]},
    ],
}


def check(doc: dict) -> None:
    validate(TopologySpec.from_dict(doc))


def error_of(mutate) -> str:
    doc = copy.deepcopy(GOOD)
    mutate(doc)
    with pytest.raises(TopologyError) as info:
        check(doc)
    return str(info.value)


def count_input(doc: dict) -> dict:
    return doc["bolts"][1]["inputs"][0]


def assert_mentions(message: str, *parts: str) -> None:
    for part in parts:
        assert part in message, f"{part!r} missing from: {message}"


def test_the_good_topology_is_valid():
    check(GOOD)
    spec = TopologySpec.from_dict(GOOD)
    assert spec.message_timeout_seconds == 30 and spec.num_ackers == 1


def test_duplicate_names():
    message = error_of(lambda d: d["bolts"].append(copy.deepcopy(d["bolts"][0])))
    assert_mentions(message, "'split'", "defined twice", "unique name")


def test_a_spout_and_a_bolt_may_not_share_a_name():
    message = error_of(lambda d: d["bolts"][0].update(name="sentences"))
    assert_mentions(message, "'sentences'", "defined twice")


def test_more_tasks_than_an_acker_can_track_is_refused():
    message = error_of(lambda d: d["bolts"][0].update(tasks=70_000))
    assert_mentions(message, "70,003 tasks", "65,534", "parallelism or tasks")


def test_unknown_input_component():
    message = error_of(lambda d: count_input(d).update(component="splt"))
    assert_mentions(message, "bolt 'count'", "unknown component 'splt'", "count, sentences, split")


def test_a_stream_subscribed_to_twice_by_one_bolt_is_refused():
    """Accepted, the bolt was given every tuple of the stream twice, each copy an edge of its tree: counts
    doubled silently (found by the Storm-semantics audit)."""
    again = {"component": "split", "grouping": {"type": "shuffle"}}
    message = error_of(lambda d: d["bolts"][1]["inputs"].append(again))
    assert_mentions(message, "bolt 'count' inputs[1]", "stream 'default' of 'split' is subscribed to already",
                    "by inputs[0]", "keep one of the two groupings")
    builder = TopologyBuilder("twice")
    builder.set_spout("s", Numbers)
    builder.set_bolt("b", PassBolt).shuffle_grouping("s").all_grouping("s")
    with pytest.raises(TopologyError, match="stream 'default' of 's' is subscribed to already"):
        LocalCluster(builder.build())


def test_unknown_input_stream():
    message = error_of(lambda d: count_input(d).update(stream="words"))
    assert_mentions(message, "bolt 'count'", "'split'", "does not declare stream 'words'", "declared: default")


def test_fields_grouping_on_undeclared_fields():
    message = error_of(lambda d: count_input(d)["grouping"].update(fields=["word", "wrd"]))
    assert_mentions(message, "bolt 'count'", "'wrd'", "'split'", "declared: word")
    assert "'word'," not in message  # only the missing field is blamed


def test_direct_grouping_on_a_stream_that_is_not_direct():
    message = error_of(lambda d: count_input(d).update(grouping={"type": "direct"}))
    assert_mentions(message, "bolt 'count'", "not direct", "squall.direct(", "another grouping")


class DirectOut(Spout):
    outputs = {"default": ["x"], "only": direct("x")}


def test_a_direct_stream_consumed_with_another_grouping():
    builder = TopologyBuilder("direct-shuffle")
    builder.set_spout("spout", DirectOut)
    builder.set_bolt("bolt", PassBolt).shuffle_grouping("spout", stream="only")
    with pytest.raises(TopologyError) as info:
        validate(builder.build())
    assert_mentions(str(info.value), "bolt 'bolt'", "'only'", "is direct", "direct grouping")


@pytest.mark.parametrize("value", [0, -1])
def test_parallelism_below_one(value):
    message = error_of(lambda d: d["bolts"][1].update(parallelism=value))
    assert_mentions(message, "bolts[1].parallelism", "bolt 'count'", "must be at least 1", f"got {value}")


@pytest.mark.parametrize(("edit", "where", "expected"), [
    (lambda d: d.update(workers="2"), "workers", "must be a whole number (got '2')"),
    (lambda d: d["bolts"][1].update(parallelism=True), "bolts[1].parallelism", "must be a whole number (got True)"),
    (lambda d: d.update(suspended="yes"), "suspended", "must be true or false (got 'yes')"),
    (lambda d: d.update(messageTimeoutSeconds=2.5), "messageTimeoutSeconds", "must be a whole number (got 2.5)"),
])
def test_a_value_of_the_wrong_type_is_refused_not_converted(edit, where, expected):
    """``workers: "2"`` became 2 and ``parallelism: true`` 1: squall validate called such a file valid, and the
    Topology's CRD, whose fields are integers and booleans, then refused it at kubectl apply (found by the
    docs audit)."""
    assert_mentions(error_of(edit), where, expected)


def test_the_builder_takes_what_python_code_hands_it():
    """Documents are checked strictly (above); Python code is not: numpy ints, a whole float, a tuple of
    fields, a read-only mapping are what they say (found by the review of the strict documents)."""
    import types

    import numpy as np

    builder = TopologyBuilder("python")
    builder.set_spout("spout", Numbers, parallelism=np.int64(2))
    builder.set_bolt("bolt", PassBolt).grouping("spout", {"type": "fields", "fields": ("id",)})
    spec = builder.build(workers=np.int64(2), message_timeout_seconds=30.0, config=types.MappingProxyType({"a": 1}))
    assert (spec.workers, spec.message_timeout_seconds, spec.config) == (2, 30, {"a": 1})
    # but not what would be lost: True is no count, "no" no truth value (found by the configuration audit)
    for settings, message in (({"workers": True}, "workers: must be a whole number (got True)"),
                              ({"suspended": "no"}, "suspended: must be true or false (got 'no')"),
                              ({"max_spout_pending": False}, "maxSpoutPending: must be a whole number (got False)")):
        with pytest.raises(TopologyError) as info:
            builder.build(**settings)
        assert_mentions(str(info.value), message)
    assert spec.spouts[0].parallelism == 2 and spec.bolts[0].inputs[0].grouping.fields == ["id"]


def test_parallelism_below_one_from_the_builder():
    builder = TopologyBuilder("zero")
    builder.set_spout("spout", Numbers, parallelism=0)
    with pytest.raises(TopologyError) as info:
        builder.build()
    assert_mentions(str(info.value), "spout 'spout'", "parallelism", "must be at least 1")


@pytest.mark.parametrize(("settings", "lower"), [
    ({"workers": 70_000}, "lower ackers (one per worker unless set)"),
    ({"ackers": 70_000}, "lower ackers"),
])
def test_too_many_tasks_names_what_made_them(settings, lower):
    """It said to lower the components' parallelism when the ackers made them (the configuration audit)."""
    builder = TopologyBuilder("many")
    builder.set_spout("spout", Numbers)
    with pytest.raises(TopologyError) as info:
        validate(builder.build(**settings))
    assert_mentions(str(info.value), "the topology has 70,001 tasks (1 of its components, 70,000 acker(s)); at most",
                    lower)


def test_fewer_tasks_than_parallelism():
    message = error_of(lambda d: d["bolts"][1].update(parallelism=3, tasks=2))
    assert_mentions(message, "'count'", "tasks (2)", "parallelism (3)", "set tasks >= parallelism")


@pytest.mark.parametrize(("class_name", "expected"), [
    ("examples.nope:WordCount", ["'examples.nope'", "cannot import", "PYTHONPATH"]),
    ("examples.wordcount:WordCounter", ["'examples.wordcount'", "has no 'WordCounter'"]),
    ("examples.wordcount.WordCount", ["'module:Class'", "e.g."]),
    ("examples.wordcount:SENTENCES", ["is not a class"]),
    ("examples.wordcount:SentenceSpout", ["is not a Bolt or BasicBolt subclass", "derive it from squall.Bolt"]),
])
def test_a_bolt_class_name_that_does_not_resolve_to_a_bolt(class_name, expected):
    message = error_of(lambda d: d["bolts"][1].update(className=class_name))
    assert_mentions(message, "'count'", *expected)


def test_a_spout_class_name_that_is_not_a_spout():
    message = error_of(lambda d: d["spouts"][0].update(className="examples.wordcount:WordCount"))
    assert_mentions(message, "'sentences'", "is not a Spout subclass", "derive it from squall.Spout")


class NotABolt:
    outputs = ["x"]


def test_a_class_given_to_the_builder_that_is_not_a_bolt():
    builder = TopologyBuilder("not-a-bolt")
    builder.set_spout("spout", Numbers)
    builder.set_bolt("bolt", NotABolt).shuffle_grouping("spout")
    with pytest.raises(TopologyError) as info:
        LocalCluster(builder.build())
    assert_mentions(str(info.value), "'bolt'", "NotABolt", "not a Bolt or BasicBolt subclass")


class BadOutputs(Bolt):
    outputs = "word"


def test_outputs_that_are_not_a_list_or_dict():
    builder = TopologyBuilder("bad-outputs")
    builder.set_spout("spout", Numbers)
    builder.set_bolt("bolt", BadOutputs).shuffle_grouping("spout")
    with pytest.raises(TopologyError) as info:
        validate(builder.build())
    assert_mentions(str(info.value), "'bolt'", "outputs must be a list of field names")


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d.update(messageTimeout=5), ["messageTimeout: unknown key", "did you mean 'messageTimeoutSeconds'"]),
    (lambda d: d["bolts"][1].update(paralelism=2),
     ["bolts[1].paralelism", "bolt 'count'", "did you mean 'parallelism'"]),
    (lambda d: count_input(d)["grouping"].update(feilds=["word"]), ["grouping.feilds", "did you mean 'fields'"]),
    (lambda d: count_input(d).update(zzz=1), ["inputs[0].zzz", "unknown key", "allowed keys: component, stream"]),
    # both spellings: it said to use the one already there (found by the configuration audit)
    (lambda d: d.update(messageTimeoutSeconds=5, message_timeout_seconds=6),
     ["message_timeout_seconds: given twice, also as 'messageTimeoutSeconds'; keep one"]),
    (lambda d: d["bolts"][1].update(tickFrequencySeconds=1, tick_frequency_seconds=2),
     ["bolts[1].tick_frequency_seconds", "given twice, also as 'tickFrequencySeconds'"]),
])
def test_unknown_keys(mutate, expected):
    assert_mentions(error_of(mutate), *expected)


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d["bolts"][1].update(parallelism="two"),
     ["bolts[1].parallelism", "bolt 'count'", "must be a whole number", "'two'"]),
    (lambda d: d.update(messageTimeoutSeconds="soon"), ["messageTimeoutSeconds", "must be a whole number", "'soon'"]),
    (lambda d: d["bolts"][1].update(inputs="split"), ["bolts[1].inputs", "bolt 'count'", "must be a list"]),
    (lambda d: count_input(d)["grouping"].update(type="hash"),
     ["grouping.type", "must be 'shuffle', 'fields'", "'hash'"]),
    (lambda d: d.update(config={"topology.message.timeout.secs": 5}),
     ["config: 'topology.message.timeout.secs' is Storm's setting", "from messageTimeoutSeconds", "set it there"]),
    (lambda d: d["bolts"][1].update(config={"topology.tick.tuple.freq.secs": 1}),
     ["bolts[1].config", "bolt 'count'", "tickFrequencySeconds (of the bolt)"]),
    (lambda d: d.update(imagePullPolicy="Sometimes"),
     ["imagePullPolicy: must be 'Always', 'IfNotPresent' or 'Never'", "'Sometimes'"]),
    (lambda d: d.update(config=["a"]), ["config", "must be a mapping of keys"]),
    (lambda d: d.update(spouts={"name": "x"}), ["spouts", "must be a list"]),
    (lambda d: d.update(maxSpoutPending=0), ["maxSpoutPending", "must be at least 1"]),
    (lambda d: d.update(ackers=-1), ["ackers", "must be at least 0"]),
    (lambda d: d["bolts"][1].update(tickFrequencySeconds=0), ["tickFrequencySeconds", "must be above 0"]),
    (lambda d: d.update(localityAware={"higherBound": 1.5}), ["localityAware.higherBound", "must be at most 1"]),
    (lambda d: d.update(localityAware={"lowerBound": 0.9}), ["localityAware", "lowerBound (0.9) must be below "
                                                             "higherBound (0.8)"]),
    (lambda d: d.update(messageTimeoutSeconds=5, transfer={"flushIntervalMs": 600}),
     ["transfer.flushIntervalMs (600) must be at most a tenth of messageTimeoutSeconds (5 s)", "lower it"]),
    (lambda d: d.update(transfer={"flushIntervalMs": 1001}),
     ["transfer.flushIntervalMs", "must be at most 1000"]),
    # Found by the configuration audit: each passed every check, then failed in the processes or the cluster.
    # gRPC's options are 32-bit: every process crashed at start, for good
    (lambda d: d.update(transfer={"maxFrameBytes": 2**32}), ["transfer.maxFrameBytes", "must be at most 2147483647"]),
    # the executors' counters are C integers: OverflowError at start
    (lambda d: d.update(maxSpoutPending=2**63), ["maxSpoutPending", "must be at most 2147483647"]),
    (lambda d: d.update(executorQueueSize=2**63), ["executorQueueSize", "must be at most 2147483647"]),
    # a spout that idled once was never called again
    (lambda d: d.update(spoutWait={"level3SleepMs": float("inf")}),
     ["spoutWait.level3SleepMs", "must be a finite number (not .inf or .nan)"]),
    (lambda d: d.update(errorReporting={"intervalSeconds": float("nan")}),
     ["errorReporting.intervalSeconds", "must be a finite number"]),
    (lambda d: d["bolts"][1].update(tickFrequencySeconds=float("inf")), ["tickFrequencySeconds", "finite"]),
    # Storm's names of spec keys, taken and ignored in config
    (lambda d: d.update(config={"topology.disable.loadaware.messaging": True}),
     ["'topology.disable.loadaware.messaging' is Storm's setting", "localityAware.enabled"]),
    (lambda d: d.update(config={"topology.spout.wait.progressive.level3.sleep.millis": 5}),
     ["spoutWait.level3SleepMs"]),
    (lambda d: d.update(config={"topology.flush.tuple.freq.millis": 5}), ["transfer.flushIntervalMs"]),
    # Kubernetes refuses these: the pods were never made
    (lambda d: d.update(resources={"requests": {"cpu": "-500m"}}),
     ["resources.requests.cpu: a quantity is 0 or more (got '-500m')"]),
    (lambda d: d.update(resources={"limits": {"memory": -1}}), ["resources.limits.memory: a quantity is 0 or more"]),
    (lambda d: d.update(resources={"requests": {"cpus": "1"}}),
     ["resources.requests: 'cpus' is not a resource Kubernetes knows: use cpu, memory, ephemeral-storage"]),
    (lambda d: d.update(disruptionBudget={"maxUnavailable": "150%"}),
     ["disruptionBudget.maxUnavailable", "from 1% to 100%"]),
    # messages that name the fix
    (lambda d: d.update(config={200: "ok"}), ["config: key 200 must be a string (in YAML, quote it: '200')"]),
    (lambda d: d.update(spark={"executorMemory": "2gb"}),
     ["spark.executorMemory: must be a JVM memory size: a whole number with k, m, g or t (512m, 2g)"]),
    (lambda d: d.update(spark={"conf": {"spark.executor.cores": 4}}),
     ["spark.conf.spark.executor.cores: must be a string (in YAML, quote it: '4')"]),
])
def test_wrong_types_and_bounds(mutate, expected):
    assert_mentions(error_of(mutate), *expected)


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d.pop("name"), ["name: required, add it"]),
    (lambda d: d.pop("spouts"), ["spouts: required"]),
    (lambda d: d["spouts"][0].pop("className"), ["spouts[0].className", "spout 'sentences'", "required"]),
    (lambda d: d["bolts"][1].pop("inputs"), ["bolts[1].inputs", "bolt 'count'", "required"]),
    (lambda d: count_input(d)["grouping"].pop("fields"), ["fields grouping needs 'fields'"]),
    (lambda d: count_input(d).update(grouping={"type": "shuffle", "fields": ["word"]}),
     ["'fields' is only for the fields grouping", "remove it"]),
    (lambda d: count_input(d).update(grouping={"type": "custom"}), ["custom grouping needs 'customClass'"]),
    (lambda d: count_input(d).update(grouping={"type": "custom", "customClass": "examples.wordcount:WordCount"}),
     ["bolt 'count'", "has no choose_tasks"]),
    (lambda d: count_input(d).update(grouping={"type": "custom", "customClass": "examples.nope:G"}),
     ["customClass", "cannot import module 'examples.nope'"]),
])
def test_missing_and_grouping_specific_keys(mutate, expected):
    assert_mentions(error_of(mutate), *expected)


def test_every_error_is_reported_at_once():
    def two_mistakes(doc):
        count_input(doc).update(component="splt")
        doc["bolts"][0]["inputs"][0].update(component="sentence")

    message = error_of(two_mistakes)
    assert_mentions(message, "'splt'", "'sentence'")


def test_a_document_that_is_not_a_mapping():
    with pytest.raises(TopologyError, match="expected a mapping"):
        TopologySpec.from_dict(["name", "spouts"])


def test_builder_settings_are_validated_like_yaml_fields():
    builder = TopologyBuilder("settings")
    builder.set_spout("spout", Numbers)
    with pytest.raises(TopologyError) as info:
        builder.build(message_timeout=3)
    assert_mentions(str(info.value), "messageTimeout: unknown key", "did you mean 'messageTimeoutSeconds'")
    with pytest.raises(TopologyError) as info:
        builder.build(message_timeout_seconds="soon")
    assert_mentions(str(info.value), "messageTimeoutSeconds", "must be a whole number")
    assert builder.build(message_timeout_seconds=5).message_timeout_seconds == 5


def test_structural_validation_without_imports_skips_class_checks_only():
    doc = copy.deepcopy(GOOD)
    doc["bolts"][1]["className"] = "not_installed.module:Bolt"
    validate(TopologySpec.from_dict(doc), imports=False)
    doc["bolts"][1]["inputs"][0]["component"] = "splt"
    with pytest.raises(TopologyError, match="unknown component 'splt'"):
        validate(TopologySpec.from_dict(doc), imports=False)


def test_load_spec_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(TopologyError, match="cannot read topology file .*missing.yaml"):
        load_spec(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(TopologyError, match="broken.yaml is not valid YAML"):
        load_spec(broken)
    # the lines around the error name the file too, not "<unicode string>" (found by the newcomer audit)
    indented = tmp_path / "indented.yaml"
    indented.write_text("name: x\nbolts:\n  - name: b\n   className: m:B\n")
    with pytest.raises(TopologyError) as info:
        load_spec(indented)
    message = str(info.value)
    assert f'in "{indented}", line 4' in message and "<unicode string>" not in message
    assert message.endswith("check the indentation there: a key indented more or less than the others of its "
                            "mapping")
    # the last of two was kept in silence (found by the configuration audit); keys merged in with << are not twice
    twice = tmp_path / "twice.yaml"
    twice.write_text("name: x\nspouts:\n  - name: s\n    className: m:S\n    parallelism: 4\n    parallelism: 1\n")
    with pytest.raises(TopologyError, match=r"key 'parallelism' is given twice in this mapping: remove one \(YAML "
                                            r"would keep the last\)\n  in \".*twice.yaml\", line 6"):
        load_spec(twice)
    merged = tmp_path / "merged.yaml"
    merged.write_text("name: x\nbase: &base {className: 'm:S', parallelism: 4}\n"
                      "spouts:\n  - {<<: *base, name: s, parallelism: 1}\n")
    assert yaml_documents(merged)[0]["spouts"] == [{"className": "m:S", "parallelism": 1, "name": "s"}]
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nspouts: []\n")
    with pytest.raises(TopologyError) as info:
        load_spec(bad)
    assert_mentions(str(info.value), "bad.yaml", "spouts")


def test_an_invalid_topology_cannot_be_run():
    builder = TopologyBuilder("unrunnable")
    builder.set_spout("spout", Numbers)
    builder.set_bolt("bolt", PassBolt).fields_grouping("spout", ["nope"])
    with pytest.raises(TopologyError, match="'nope'"):
        LocalCluster(builder.build())


def test_a_topology_resource_given_where_a_topology_file_goes_is_refused_saying_so(tmp_path):
    """squall run and render take the topology file; the resource squall submit writes from it is refused with
    what to pass instead, not with the spec's required keys and the resource's unknown ones."""
    path = tmp_path / "topology.yaml"
    path.write_text("apiVersion: squall.dev/v1alpha1\nkind: Topology\nmetadata: {name: wc}\n"
                    "spec: {spouts: [{name: s, className: 'm:S'}]}\n")
    with pytest.raises(TopologyError, match=r"is a Kubernetes resource \(squall\.dev/v1alpha1 Topology\), not a "
                                            r"topology file: pass the topology file it was made from"):
        load_spec(path)


def test_a_file_of_several_documents_is_refused_saying_what_it_holds(tmp_path):
    """It was refused as "not valid YAML: expected a single document", which it is."""
    path = tmp_path / "topology.yaml"
    resource = "apiVersion: squall.dev/v1alpha1\nkind: Topology\nmetadata: {name: wc}\nspec: {}\n"
    path.write_text(f"{resource}---\n{resource}")
    with pytest.raises(TopologyError, match=r"holds 2 YAML documents, not one topology: they are Kubernetes "
                                            r"resources; pass the topology file"):
        load_spec(path)
    path.write_text("name: a\n---\nname: b\n")
    with pytest.raises(TopologyError, match=r"holds 2 YAML documents, not one topology; keep one per file"):
        load_spec(path)


def test_a_bolt_subscribed_to_a_component_that_declares_no_outputs_is_refused_naming_the_class():
    """A spout class that never set ``outputs`` emits on a stream of no fields: every emit would fail at run
    time. Declaring no fields on purpose (``outputs = []``) stays allowed."""

    class Silent(Spout):
        def next_tuple(self):
            self.collector.emit(["x"])

    class Signals(Spout):
        outputs: list[str] = []

        def next_tuple(self):
            pass

    for source, refused in ((Silent, True), (Signals, False)):
        builder = TopologyBuilder("outputs")
        builder.set_spout("source", source)
        builder.set_bolt("sink", PassBolt).shuffle_grouping("source")
        if refused:
            with pytest.raises(TopologyError, match=r"Silent, the class of 'source', declares no outputs; set "
                                                    r"outputs = \['field', \.\.\.\] on it"):
                validate(builder.build())
        else:
            validate(builder.build())


SPOUT = {"name": "s", "className": "m:S"}


@pytest.mark.parametrize("doc,line", [
    ({"name": "Word_Count", "spouts": [SPOUT]},
     "name: must be lowercase letters, digits and '-', beginning with a letter and ending with a letter or digit "
     "(a DNS-1035 label: the Services are named after it) (got 'Word_Count')"),
    ({"name": "1wc", "spouts": [SPOUT]},
     "name: must be lowercase letters, digits and '-', beginning with a letter and ending with a letter or digit "
     "(a DNS-1035 label: the Services are named after it) (got '1wc')"),
    ({"name": "wc", "workers": 0, "spouts": [SPOUT]}, "workers: must be at least 1 (got 0)"),
    ({"name": "wc", "spouts": [{"name": "s", "className": "m.S"}]},
     "spouts[0].className (spout 's'): must be 'module:Class' (e.g. 'examples.wordcount:SplitSentence') (got 'm.S')"),
    ({"name": "wc", "messageTimeoutSeconds": "x", "spouts": [SPOUT]},
     "messageTimeoutSeconds: must be a whole number (got 'x')"),
    ({"name": "wc", "spouts": "s"}, "spouts: must be a list (in YAML, a '- ' line per item) (got 's')"),
    ({"name": "wc", "spouts": []}, "spouts: must have at least 1 item(s)"),
    ({"name": "wc", "spouts": [SPOUT], "bolts": [{"name": "b", "className": "m:B", "inputs": ["s"]}]},
     "bolts[0].inputs[0] (bolt 'b'): must be a mapping of keys, e.g. {component: sentences, grouping: {type: shuffle}} "
     "(got 's')"),
    ({"name": "wc", "spouts": [{"name": "1s", "className": "m:S"}]},
     "spouts[0].name (spout '1s'): must begin with a letter, then letters, digits, '_', '.' or '-' (got '1s')"),
])
def test_a_bad_value_is_refused_saying_what_it_must_be(doc, line):
    with pytest.raises(TopologyError) as refused:
        TopologySpec.from_dict(doc)
    assert f"  {line}" in str(refused.value).splitlines()


@pytest.mark.parametrize(("body", "raised"), [
    ("import sys\nsys.exit(3)\n", "SystemExit: 3"),  # a script's code at module level
    ("raise RuntimeError('no config file')\n", "RuntimeError: no config file"),
])
def test_a_component_module_that_fails_while_imported_is_named_with_what_it_raised(tmp_path, monkeypatch, body,
                                                                                  raised):
    """A SystemExit from a module's top level ended `squall run` with its code and no message."""
    (tmp_path / "exits_on_import.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "exits_on_import", raising=False)
    message = error_of(lambda d: d["spouts"][0].update(className="exits_on_import:Spout"))
    assert_mentions(message, "importing module 'exits_on_import' raised " + raised, "if __name__ == '__main__':")
