"""A SparkBolt whose first job stops (SIGSTOP: a long pause) or kills (the OOM killer) Spark's JVM and then
waits in Python: run by tests/spark/test_jvm_gone.py in a process of its own, since it takes the JVM
that the other tests share. Prints, per mode given, how long after the job began its batch failed (its
job timeout is 3 s) and what was acked in the end."""

import json
import os
import signal
import sys
import threading
import time

from pyspark import SparkContext

from squall import TopologyBuilder
from squall.spark import SparkBolt
from squall.spark.session import CONF_ENV, get_session
from squall.testing import LocalCluster, TestingSpout


class Ids(TestingSpout):
    outputs = ["id"]

    def items(self):
        return ([i] for i in range(10))


class Stuck(SparkBolt):
    """Its first job stops or kills the JVM, then waits for ``release``."""

    outputs = ["n"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.started, self.release, self.wake = None, threading.Event(), None

    def process(self, df):
        if self.started is None:
            self.started = time.monotonic()
            jvm = SparkContext._gateway.proc
            if self.conf["mode"] == "stop":
                os.kill(jvm.pid, signal.SIGSTOP)
                self.wake = threading.Timer(45, os.kill, (jvm.pid, signal.SIGCONT))  # were the loop stuck
                self.wake.start()
            else:
                jvm.kill()
                jvm.wait()
            self.release.wait(60)
        return df.selectExpr("count(*) AS n")


def run(mode: str) -> dict:
    builder = TopologyBuilder("stuck")
    builder.set_spout("spout", Ids)
    builder.set_bolt("spark", Stuck, config={"mode": mode, "spark.batch.size": 5, "spark.batch.max.wait.ms": 200,
                                              "spark.job.timeout.ms": 3000}).shuffle_grouping("spout")
    with LocalCluster(builder.build(message_timeout_seconds=30, max_spout_pending=1000)) as cluster:
        (spout,), (bolt,) = cluster.instances("spout"), cluster.instances("spark")
        cluster.run(until=lambda c: bolt.started is not None, seconds=60)
        cluster.run(until=lambda c: len(spout.failed) >= 5, seconds=30)
        failed_after = time.monotonic() - bolt.started if len(spout.failed) >= 5 else None
        if mode == "stop":
            bolt.wake.cancel()
            os.kill(SparkContext._gateway.proc.pid, signal.SIGCONT)
        bolt.release.set()
        cluster.run(until=lambda c: len(spout.acked) == 10, seconds=120)
        return {"mode": mode, "failed_after": failed_after, "acked": sorted(spout.acked)}


if __name__ == "__main__":
    os.environ[CONF_ENV] = json.dumps({"spark.master": "local[1]", "spark.driver.memory": "512m"})
    get_session().range(1).count()
    for given in sys.argv[1:]:
        print(json.dumps(run(given)), flush=True)
