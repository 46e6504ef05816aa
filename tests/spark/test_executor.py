"""`squall executor`: the command a Spark executor pod runs in a Squall image."""

from pathlib import Path

import pytest

from squall.cli import main
from squall.spark.executor import BACKEND, executor_command, spark_jars

ENV = {
    "JAVA_HOME": "/usr/lib/jvm/java-17", "SPARK_EXECUTOR_MEMORY": "2g", "SPARK_DRIVER_URL": "spark://d:7078",
    "SPARK_EXECUTOR_ID": "3", "SPARK_EXECUTOR_CORES": "2", "SPARK_APPLICATION_ID": "spark-app-1",
    "SPARK_EXECUTOR_POD_IP": "10.1.2.3", "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "wc-exec-3",
    "SPARK_CONF_DIR": "/opt/spark-conf", "SPARK_JAVA_OPT_10": "-Dlast", "SPARK_JAVA_OPT_2": "-Dsecond",
    "SPARK_JAVA_OPT_0": "-Dfirst",
}


def test_the_executor_backend_command_from_sparks_environment():
    cmd = executor_command(ENV, jars=Path("/venv/pyspark/jars"))
    assert cmd[:6] == ["/usr/lib/jvm/java-17/bin/java", "-Dfirst", "-Dsecond", "-Dlast", "-Xms2g", "-Xmx2g"]
    assert cmd[6:9] == ["-cp", "/opt/spark-conf:/venv/pyspark/jars/*", BACKEND]
    args = dict(zip(cmd[9::2], cmd[10::2], strict=True))
    assert args == {"--driver-url": "spark://d:7078", "--executor-id": "3", "--cores": "2",
                    "--app-id": "spark-app-1", "--hostname": "10.1.2.3", "--resourceProfileId": "0",
                    "--podName": "wc-exec-3"}


def test_the_backend_class_ships_with_the_installed_pyspark():
    jars = spark_jars()
    assert any(p.name.startswith("spark-kubernetes_") for p in jars.glob("*.jar")), \
        "pyspark's jars lack Spark's Kubernetes backend"


def test_run_outside_a_spark_executor_pod_it_says_what_is_missing(monkeypatch, capsys):
    for var in ENV:
        monkeypatch.delenv(var, raising=False)
    assert main(["executor"]) == 2
    err = capsys.readouterr().err
    assert "SPARK_DRIVER_URL" in err and "squall worker" in err


@pytest.mark.parametrize("var", ["SPARK_EXECUTOR_MEMORY", "SPARK_DRIVER_URL", "SPARK_EXECUTOR_POD_NAME"])
def test_each_missing_variable_is_named(var):
    from squall.errors import ConfigError

    with pytest.raises(ConfigError, match=var):
        executor_command({k: v for k, v in ENV.items() if k != var}, jars=Path("/j"))
