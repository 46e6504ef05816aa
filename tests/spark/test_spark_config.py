"""SparkBolt settings and session properties that are refused or applied before Spark starts (no JVM)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine_kit import Numbers
from squall import ConfigError, TopologyBuilder, TopologyError, direct
from squall.spark import SparkBolt
from squall.spark.bolt import Batching, _Anchoring
from squall.spark.session import CONF_ENV, DEFAULTS, spark_conf
from squall.testing import LocalCluster
from squall.tuples import Fields, Tuple


class Counts(SparkBolt):
    outputs = ["id"]

    def process(self, df):
        return df


class TwoStreams(Counts):
    outputs = {"a": ["id"], "b": ["id"]}


class Direct(Counts):
    outputs = {"default": direct("id")}


class KeyedBy(Counts):
    anchor_by = "id"


def start(bolt: type = Counts, *, timeout: int = 30, **config) -> None:
    builder = TopologyBuilder("spark-config")
    builder.set_spout("spout", Numbers)
    builder.set_bolt("spark", bolt, config=config).shuffle_grouping("spout")
    LocalCluster(builder.build(message_timeout_seconds=timeout)).shutdown()


def test_importing_squall_spark_does_not_import_pyspark():
    code = "import sys, squall, squall.spark; assert 'pyspark' not in sys.modules, 'pyspark was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("value", [0, -5, "100", 2.5, True])
def test_a_bad_batch_size_is_refused_with_the_key(value):
    with pytest.raises(ConfigError, match=r"'spark'.*spark\.batch\.size=.* must be a whole number >= 1"):
        start(**{"spark.batch.size": value})


@pytest.mark.parametrize("value", [0, -1, "1000", float("nan"), None])
def test_a_bad_max_wait_is_refused_with_the_key(value):
    with pytest.raises(ConfigError, match=r"spark\.batch\.max\.wait\.ms=.* must be a number of milliseconds > 0"):
        start(**{"spark.batch.max.wait.ms": value})


def test_a_max_wait_that_does_not_fit_in_the_message_timeout_is_refused():
    with pytest.raises(ConfigError, match=r"spark\.batch\.max\.wait\.ms=5000 is not below the message timeout "
                                          r"\(5 s = 5000 ms\).*lower spark\.batch\.max\.wait\.ms or raise "
                                          r"messageTimeoutSeconds"):
        start(timeout=5, **{"spark.batch.max.wait.ms": 5000})


def test_the_default_max_wait_fits_a_short_message_timeout():
    assert Batching.from_conf({}, component="c", message_timeout=30) == Batching(1000, 1.0, 300.0)
    assert Batching.from_conf({}, component="c", message_timeout=1) == Batching(1000, 0.5, 10.0)
    assert Batching.from_conf({"spark.batch.size": 10, "spark.batch.max.wait.ms": 250, "spark.job.timeout.ms": 800},
                              component="c", message_timeout=1) == Batching(10, 0.25, 0.8)


@pytest.mark.parametrize("value", [0, -1, "1000", float("nan"), float("inf"), None])
def test_a_bad_job_timeout_is_refused_with_the_key(value):
    with pytest.raises(ConfigError, match=r"spark\.job\.timeout\.ms=.* must be a finite number of milliseconds > 0"):
        start(**{"spark.job.timeout.ms": value})


@pytest.mark.parametrize("value", [0, -1, "2", 1.5, True])
def test_a_bad_jobs_in_flight_is_refused_with_the_key(value):
    with pytest.raises(ConfigError, match=r"spark\.jobs\.in\.flight=.* must be a whole number >= 1"):
        start(**{"spark.jobs.in.flight": value})


@pytest.mark.parametrize("value", [0, -1, "500", float("nan"), float("inf")])
def test_a_bad_latency_target_is_refused_with_the_key(value):
    with pytest.raises(ConfigError, match=r"spark\.batch\.target\.ms=.* must be a finite number of milliseconds > 0"):
        start(**{"spark.batch.target.ms": value})


def test_jobs_in_flight_and_the_latency_target_are_read():
    assert Batching.from_conf({"spark.jobs.in.flight": 3, "spark.batch.target.ms": 500}, component="c",
                              message_timeout=30) == Batching(1000, 1.0, 300.0, in_flight=3, target=0.5)


@pytest.mark.parametrize(("key", "meant"), [("spark.batch.sise", "spark.batch.size"),
                                            ("spark.batch.max.wait", "spark.batch.max.wait.ms"),
                                            ("spark.job.in.flight", "spark.jobs.in.flight"),
                                            ("spark.batch.target", "spark.batch.target.ms")])
def test_a_misspelled_batching_key_is_refused_with_the_one_meant(key, meant):
    """Read by no one, it left the batching at its default in silence (found by the configuration audit)."""
    with pytest.raises(ConfigError, match=f"'spark': config key '{key}' is read by no one; did you mean '{meant}'"):
        start(**{key: 10})


def test_a_spark_bolt_emits_on_one_stream_only():
    with pytest.raises(TopologyError, match=r"emits its result rows on one stream.*declares 2 \(a, b\)"):
        start(TwoStreams)
    with pytest.raises(TopologyError, match="cannot emit on the direct stream 'default'"):
        start(Direct)


@pytest.mark.parametrize(("key", "message"), [
    ("user", r"anchor_by names \(user\), not among its output fields \(id\)"),
    (("id", "page"), r"anchor_by names \(page\), not among its output fields \(id\)"),
    (["id"], r"KeyedBy.anchor_by=\['id'\] must be a field name or a tuple of field names"),
    ((), r"must be a field name or a tuple of field names"),
])
def test_an_anchor_key_that_is_not_an_output_field_is_refused(monkeypatch, key, message):
    monkeypatch.setattr(KeyedBy, "anchor_by", key)
    with pytest.raises(TopologyError, match=message):
        start(KeyedBy)
    monkeypatch.setattr(KeyedBy, "anchor_by", ("id",))
    KeyedBy.check_config("spark", {}, message_timeout_seconds=30)  # passes, and starts no Spark


def test_anchoring_by_key_groups_the_inputs_and_falls_back_to_every_input():
    fields = Fields(["key", "id"])
    inputs = [Tuple([i % 2, i], fields, "spout", "default", 1, {100 + i: 1}) for i in range(4)]
    rows = [[0, 2], [1, 2], [7, 0]]
    keyed = _Anchoring.by_key(inputs, rows, ("key",), fields, ("key", "n"), component="spark")
    assert [keyed.anchors(row) for row in rows] == [inputs[0::2], inputs[1::2], inputs]  # 7: no input's key
    assert [keyed.trees(keyed.anchors(row)) for row in rows] == [2, 2, 4]

    # A key that cannot be hashed (a list) anchors every row to every input, as without anchor_by.
    listed = [Tuple([[i % 2], i], fields, "spout", "default", 1, {100 + i: 1}) for i in range(4)]
    unhashable = _Anchoring.by_key(listed, [[[0], 2]], ("key",), fields, ("key", "n"), component="spark")
    assert unhashable.anchors([[0], 2]) == listed

    # Not an input field: the job raises it, and its batch fails (checked at validation only for the outputs).
    with pytest.raises(TopologyError, match=r"anchor_by names \(user\), not among its input fields \(key, id\)"):
        _Anchoring.by_key(inputs, rows, ("user",), fields, ("user", "n"), component="spark")


def test_session_properties_are_the_defaults_overlaid_with_the_environment():
    assert spark_conf({}) == DEFAULTS
    assert DEFAULTS["spark.master"] == "local[*]"
    conf = spark_conf({CONF_ENV: '{"spark.master": "k8s://https://kubernetes.default.svc:443", '
                                 '"spark.executor.instances": 3, "spark.ui.enabled": true}'})
    assert conf["spark.master"] == "k8s://https://kubernetes.default.svc:443"
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.ui.enabled"] == "true"
    assert conf["spark.sql.shuffle.partitions"] == DEFAULTS["spark.sql.shuffle.partitions"]


@pytest.mark.spark
def test_the_driver_jvm_runs_the_parallel_collector(spark):
    """The session's default (spark.driver.defaultJavaOptions) reaches the JVM PySpark starts, not only
    the properties PySpark passes on after the JVM is up."""
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert sorted(bean.getName() for bean in beans) == ["PS MarkSweep", "PS Scavenge"]


@pytest.mark.parametrize(("raw", "message"), [
    ("{not json", "is not valid JSON"),
    ('["spark.master"]', "must be a JSON object of Spark properties, got list"),
    ('{"spark.jars": ["a.jar"]}', "property 'spark.jars' must be a string, number or boolean"),
])
def test_a_bad_spark_conf_environment_is_refused(raw, message):
    with pytest.raises(ConfigError, match=rf"{CONF_ENV}.*{message}"):
        spark_conf({CONF_ENV: raw})


@pytest.mark.spark
def test_a_session_that_fails_to_start_is_tried_again_after_a_growing_delay_not_per_batch(spark, monkeypatch):
    from squall.spark import session

    now = [100.0]
    monkeypatch.setattr(session, "clock", lambda: now[0])
    monkeypatch.setattr(session, "_session", None)
    monkeypatch.setattr(session, "_failure", None)
    monkeypatch.setattr(session, "_retry", session.Backoff(session.FIRST_RETRY, session.LAST_RETRY))
    monkeypatch.setenv(CONF_ENV, "{not json")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        session.get_session()
    now[0] = 100.9
    with pytest.raises(ConfigError, match=r"failed to start \(.*is not valid JSON.*\); next try in 0.1 s"):
        session.get_session()
    now[0] = 101.0  # 1 s after: tried again, fails again; the next try waits 2 s
    with pytest.raises(ConfigError, match="is not valid JSON"):
        session.get_session()
    monkeypatch.setenv(CONF_ENV, json.dumps({"spark.master": "local[2]", "spark.driver.memory": "512m"}))
    now[0] = 102.9
    with pytest.raises(ConfigError, match="next try in 0.1 s"):
        session.get_session()
    now[0] = 103.0
    assert session.get_session() is spark  # PySpark hands back the running session
    assert session._failure is None


@pytest.mark.spark
def test_a_session_whose_context_stopped_or_jvm_died_is_built_again(spark, tmp_path):
    """Its JVM killed or its context stopped, the session failed every batch at once, and each was
    replayed at once, for as long as the process lived (found by the Spark audit). In a process of its
    own: this one's session is the other tests'."""
    script = tmp_path / "again.py"
    script.write_text(
        "import json, os\n"
        "os.environ['SQUALL_SPARK_CONF'] = json.dumps({'spark.master': 'local[1]', 'spark.driver.memory': '512m'})\n"
        "from squall.spark.session import get_session\n"
        "first = get_session()\n"
        "first.sparkContext.stop()\n"
        "second = get_session()\n"
        "print('rows', second.range(3).count(), 'new context', second.sparkContext is not first.sparkContext)\n"
        "second.sparkContext._gateway.proc.kill()\n"  # its JVM killed, as for its memory
        "second.sparkContext._gateway.proc.wait()\n"
        "third = get_session()\n"
        "print('after the JVM died, rows', third.range(4).count())\n"
        # Killed again, and its exit not seen: as while another thread waits for it, poll() says it runs
        "proc = third.sparkContext._gateway.proc\n"
        "proc.kill()\n"
        "os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)\n"  # dead, and not reaped
        "with proc._waitpid_lock:\n"
        "    assert proc.poll() is None\n"
        "    fourth = get_session()\n"
        "print('after an unseen death, rows', fourth.range(5).count())\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert "rows 3 new context True" in done.stdout, done.stderr[-3000:]
    assert "after the JVM died, rows 4" in done.stdout, done.stderr[-3000:]
    assert "after an unseen death, rows 5" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "the SparkSession is gone (its JVM exited or its context stopped): building another" in done.stderr
