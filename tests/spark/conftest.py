"""Spark test setup: the ``spark`` marker, and one small local SparkSession for the whole test run.

The JVM takes seconds to start, so every Spark test shares the session that
``squall.spark.session.get_session`` builds (``local[2]``, through ``SQUALL_SPARK_CONF``, as a worker
would get it). Select or skip these tests with ``-m spark`` / ``-m 'not spark'``.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest


@pytest.fixture(scope="session")
def java() -> None:
    """Skips the test where PySpark or Java is missing."""
    pytest.importorskip("pyspark", reason="the Spark tests need PySpark (pip install pyspark)")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("the Spark tests need Java 17+ (on PATH or in JAVA_HOME)")


@pytest.fixture(scope="session")
def spark(java):
    from squall.spark.session import CONF_ENV, get_session

    before = os.environ.get(CONF_ENV)
    os.environ[CONF_ENV] = json.dumps({"spark.master": "local[2]", "spark.driver.memory": "512m"})
    try:
        yield get_session()
    finally:
        # The session lives on until exit (a worker's does too); only the environment is restored.
        if before is None:
            os.environ.pop(CONF_ENV, None)
        else:
            os.environ[CONF_ENV] = before
