"""The worker process's one SparkSession: built on first use, shared by every SparkBolt task, stopped at exit.

Spark's properties are :data:`DEFAULTS` (a small local Spark) overlaid with the JSON object in the
environment variable ``SQUALL_SPARK_CONF``. In Kubernetes the operator renders that variable
(``spark.master=k8s://...``, the driver's host and ports, the executors' image and count...), so
this module needs no knowledge of where it runs.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from squall.backoff import Backoff
from squall.contract import SPARK_CONF
from squall.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

CONF_ENV = SPARK_CONF

#: Sized for a worker that shares its machine with other work; every key can be overridden.
DEFAULTS: dict[str, str] = {
    "spark.master": "local[*]",
    "spark.app.name": "squall",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",  # micro-batches are small: the default 200 is mostly overhead
    # Each SparkBolt's jobs in a pool of their own, pools sharing the executors fairly: one bolt's jobs in
    # flight never hold another bolt's behind them, as Spark's default FIFO would.
    "spark.scheduler.mode": "FAIR",
    "spark.driver.memory": "1g",
    # The driver plans and schedules a job per batch: with the parallel collector its JVM took a quarter
    # to a half less CPU per click than with G1 (bench/HISTORY.md). Default options: a user's
    # spark.driver.extraJavaOptions come after them.
    "spark.driver.defaultJavaOptions": "-XX:+UseParallelGC",
    "spark.log.level": "WARN",
}

FIRST_RETRY, LAST_RETRY = 1.0, 60.0  # seconds between tries to build a session that failed

_lock = threading.Lock()
_session: SparkSession | None = None
clock = time.monotonic


_retry = Backoff(FIRST_RETRY, LAST_RETRY)
_failure: BaseException | None = None  # why the last build failed, while its retry is not due


def spark_conf(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark properties a session is built with: :data:`DEFAULTS` overlaid with ``SQUALL_SPARK_CONF``."""
    env = os.environ if env is None else env
    conf = dict(DEFAULTS)
    raw = env.get(CONF_ENV, "").strip()
    if not raw:
        return conf
    try:
        overlay = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{CONF_ENV} is not valid JSON ({exc}); set it to an object such as "
                          '{"spark.master": "local[2]"}') from None
    if not isinstance(overlay, dict):
        raise ConfigError(f"{CONF_ENV} must be a JSON object of Spark properties, got {type(overlay).__name__}")
    for key, value in overlay.items():
        if isinstance(value, (dict, list)) or value is None:
            raise ConfigError(f"{CONF_ENV}: property {key!r} must be a string, number or boolean, "
                              f"got {json.dumps(value)}")
        # JSON true/false become Spark's "true"/"false", not Python's "True"/"False"
        conf[key] = json.dumps(value) if isinstance(value, bool) else str(value)
    return conf


def get_session() -> SparkSession:
    """This process's SparkSession, built (thread-safely) on the first call; later calls return it.

    Building it starts the JVM and takes seconds: call it from a background thread, never from an
    executor's thread.

    A session that fails to start is tried again after 1 s, then twice as long each time up to a
    minute; until then every call raises at once (each batch fails and is replayed, without a
    JVM started per batch).
    """
    global _session, _failure
    with _lock:
        if _session is not None:
            if _alive(_session):
                return _session
            # Its JVM died (killed for memory, say) or its context stopped: every batch would fail at once,
            # and be replayed at once, for as long as the process lives. Another is built, as at the start.
            log.warning("the SparkSession is gone (its JVM exited or its context stopped): building another")
            _forget(_session)
            _session = None
        now = clock()
        if _failure is not None and not _retry.due(now):
            raise ConfigError(f"the SparkSession failed to start ({_failure}); next try in "
                              f"{_retry.retry_at - now:.1f} s") from _failure
        try:
            _session = _build(spark_conf())
        except Exception as exc:
            _failure = exc
            _retry.failed(clock())  # from the failure: a start takes seconds
            raise
        _failure = None
        _retry.succeeded()
        return _session


def _forget(session: SparkSession) -> None:
    """Drop what PySpark keeps of a session that is gone."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    with contextlib.suppress(Exception):  # its JVM may be gone: nothing to stop there
        session.stop()
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = SparkSession._activeSession = None


def _drop_dead_gateway() -> None:
    """PySpark builds every session on its one gateway to the JVM. If that JVM no longer answers (killed
    for its memory, or exiting), every build on it is refused, for as long as the process lives: it is
    dropped, so the build starts another JVM. Asked, not read from the JVM's process: an exit that the
    process table does not show yet (another thread waiting for it, a JVM still shutting down) kept the
    dead gateway, and the bolt failed every batch for good (tests/spark/test_jvm_gone.py, 1 run in 3)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    try:
        gateway.jvm.java.lang.System.nanoTime()
    except Exception:  # noqa: BLE001 - py4j raises several kinds when its JVM is gone
        SparkContext._gateway = SparkContext._jvm = None


def _alive(session: SparkSession) -> bool:
    """Whether the session's SparkContext still runs in a JVM that answers."""
    try:
        jsc = session.sparkContext._jsc
        return jsc is not None and not jsc.sc().isStopped()
    except Exception:  # noqa: BLE001 - py4j raises several kinds when its JVM is gone
        return False


def active_session() -> SparkSession | None:
    """The session if :func:`get_session` has built it, else None (never builds one)."""
    return _session


def stop_session() -> None:
    """Stop the session if there is one (registered with ``atexit`` when it is built)."""
    global _session
    with _lock:
        session, _session = _session, None
    if session is not None:
        log.info("stopping the SparkSession")
        session.stop()


def _build(conf: dict[str, str]) -> SparkSession:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigError("SparkBolt needs PySpark in the worker's environment: pip install pyspark") from None
    if conf["spark.master"].startswith("local"):
        # Local Python workers must be this interpreter (PySpark's default is whatever 'python3' is
        # on PATH, which may lack PySpark or be another version). In a cluster the executor image
        # decides, so the operator sets PYSPARK_PYTHON there if it needs to.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    _drop_dead_gateway()
    log.info("starting a SparkSession with master %s", conf["spark.master"])
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    # Registered after PySpark's own exit handlers, so it runs before them (atexit is LIFO),
    # while the JVM is still there to stop cleanly; once (a session built again is stopped by it too).
    atexit.unregister(stop_session)
    atexit.register(stop_session)
    log.info("SparkSession ready: master %s, Spark %s", session.sparkContext.master, session.version)
    return session
