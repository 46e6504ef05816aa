"""``squall executor``: start a Spark executor in a Squall image.

Spark on Kubernetes starts executor pods from ``spark.kubernetes.container.image`` with the single
argument ``executor`` and describes the executor in environment variables. Squall's image has
``squall`` as its entrypoint, so this command plays the part of Spark's own image entrypoint: it
turns that environment into the JVM command of Spark's Kubernetes executor backend and execs it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from squall.errors import ConfigError

BACKEND = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"

# backend flag → the environment variable Spark's driver sets on the executor pod
ARGUMENTS = {
    "--driver-url": "SPARK_DRIVER_URL",
    "--executor-id": "SPARK_EXECUTOR_ID",
    "--cores": "SPARK_EXECUTOR_CORES",
    "--app-id": "SPARK_APPLICATION_ID",
    "--hostname": "SPARK_EXECUTOR_POD_IP",
    "--resourceProfileId": "SPARK_RESOURCE_PROFILE_ID",
    "--podName": "SPARK_EXECUTOR_POD_NAME",
}


def spark_jars() -> Path:
    """The jars directory of the installed pyspark (Spark's runtime ships inside the wheel)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def executor_command(env: dict[str, str], *, jars: Path) -> list[str]:
    """The executor JVM's command line, from the environment Spark gives an executor pod."""
    missing = [var for var in ["SPARK_EXECUTOR_MEMORY", *ARGUMENTS.values()] if not env.get(var)]
    if missing:
        raise ConfigError(f"squall executor is started by Spark on Kubernetes, which sets {', '.join(missing)}; "
                          "they are missing (to run a topology use `squall worker`)")
    java = str(Path(env["JAVA_HOME"]) / "bin" / "java") if env.get("JAVA_HOME") else shutil.which("java")
    if not java:
        raise ConfigError("no Java runtime: set JAVA_HOME or put java on PATH")
    # Spark numbers its JVM options SPARK_JAVA_OPT_0, _1, ...: their order matters.
    numbered = sorted((int(m.group(1)), value) for name, value in env.items()
                      if (m := re.fullmatch(r"SPARK_JAVA_OPT_(\d+)", name)))
    classpath = [p for p in (env.get("SPARK_CONF_DIR"), f"{jars}/*", env.get("SPARK_EXTRA_CLASSPATH"),
                             env.get("SPARK_DIST_CLASSPATH")) if p]
    memory = env["SPARK_EXECUTOR_MEMORY"]
    command = [java, *(value for _, value in numbered), f"-Xms{memory}", f"-Xmx{memory}",
               "-cp", ":".join(classpath), BACKEND]
    for flag, var in ARGUMENTS.items():
        command += [flag, env[var]]
    return command


def main() -> int:
    command = executor_command(dict(os.environ), jars=spark_jars())
    os.execv(command[0], command)  # the executor takes over this process, as in Spark's own images
    return 0
