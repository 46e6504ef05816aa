# The image of Squall's workers and ackers (entrypoint `squall`; it can run the operator too), with a
# Java 17 runtime for the Spark bolt, and a slim image of the operator alone (`--target operator`).
# Build both from the repository root: `make image` (tags squall:<version> and squall-operator:<version>).
#
# Size, measured with buildah (docs/operations.md, "The image"): 1.61 GB uncompressed (JRE about
# 0.21 GB, virtualenv about 0.93 GB of which PySpark is 0.49 GB and pyarrow, the Spark bolt's Arrow
# input, about 0.18 GB).
#
# At run time nothing is written outside /tmp, so pods run with a read-only root filesystem and an
# emptyDir on /tmp (the operator renders exactly that for workers and ackers, the chart for itself).

ARG PYTHON_VERSION=3.11

# ---- build: wheels for every pinned dependency and for squall itself, installed into a virtualenv.
# The full (non-slim) image has compilers, in case a wheel must be built from source (PySpark ships
# only a source distribution, pure Python); none of them reaches the final image.
FROM python:${PYTHON_VERSION}-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements.lock ./
RUN pip wheel --no-deps --wheel-dir /wheels -r requirements.lock
COPY pyproject.toml setup.py README.md ./
COPY worker ./worker
COPY operator ./operator
RUN pip wheel --no-deps --wheel-dir /wheels .
# --no-index: only the wheels built above, so a dependency missing from requirements.lock fails here;
# pip compiles every module, so nothing needs to write bytecode at run time.
# The operator's own virtualenv holds only what it imports: no PySpark, no Kafka or Redis client, and,
# once pip check has passed, neither numpy (only an acker's table uses it), the Kubernetes client's
# unused asyncio twin (kubernetes.aio, half its size), packages' test suites, nor pip itself; importing
# the operator's entrypoint and every module of squall_operator proves nothing it needs went.
RUN python -m venv /opt/squall \
    && /opt/squall/bin/pip install --no-index --find-links /wheels --constraint requirements.lock \
        "squall[kafka,operator,redis,spark]" \
    && /opt/squall/bin/pip check \
    && python -m venv /opt/squall-operator \
    && /opt/squall-operator/bin/pip install --no-index --find-links /wheels --constraint requirements.lock \
        "squall[operator]" \
    && /opt/squall-operator/bin/pip check \
    && /opt/squall-operator/bin/pip uninstall --yes --quiet numpy setuptools pip \
    && site=$(/opt/squall-operator/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") \
    && rm -rf "$site/kubernetes/aio" \
    && find "$site" -depth -type d \( -name tests -o -name test \) -path "$site/*/*" -exec rm -rf {} + \
    && /opt/squall-operator/bin/python -c "import pkgutil, importlib, squall_operator, squall_operator.__main__; \
[importlib.import_module(m.name) for m in pkgutil.walk_packages(squall_operator.__path__, 'squall_operator.')]"

# ---- operator: the slim image of the operator alone, `docker build --target operator` (`make image`
# tags it squall-operator:<version>; the chart runs it). No Java runtime, no PySpark, no numpy (see the
# build stage): 383 MB uncompressed as buildah measured it, against 1.61 GB for the worker image
# (docs/operations.md, "The image").
FROM python:${PYTHON_VERSION}-slim-bookworm AS operator
RUN groupadd --system --gid 10001 squall \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
        --shell /usr/sbin/nologin squall
COPY --from=build /opt/squall-operator /opt/squall
ENV PATH=/opt/squall/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
# 8080: the operator's /healthz; 9090: its /metrics; 9443: its admission webhook
EXPOSE 8080 9090 9443
ENTRYPOINT ["python", "-m", "squall_operator"]

# ---- final (the default target): the worker image. Slim Python, a headless Java 17 runtime, the
# virtualenv and the examples. No compilers.
FROM python:${PYTHON_VERSION}-slim-bookworm
# Debian's JRE package links its man pages into /usr/share/man/man1, which slim images leave out.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" /usr/lib/jvm/java-17 \
    && groupadd --system --gid 10001 squall \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
        --shell /usr/sbin/nologin squall
COPY --from=build /opt/squall /opt/squall
# Spark writes its scratch files, its Ivy cache and its SQL warehouse under /tmp, never the root fs.
RUN mkdir -p /opt/spark-conf \
    && printf '%s\n' 'spark.local.dir /tmp/spark' 'spark.jars.ivy /tmp/.ivy2' \
        'spark.sql.warehouse.dir /tmp/spark-warehouse' > /opt/spark-conf/spark-defaults.conf
WORKDIR /app
# the example topologies' classNames (examples.wordcount:SentenceSpout) import from here: squall puts
# the working directory first on the import path
COPY examples ./examples
RUN /opt/squall/bin/python -m compileall -q /app/examples
ENV PATH=/opt/squall/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    JAVA_HOME=/usr/lib/jvm/java-17 \
    SPARK_CONF_DIR=/opt/spark-conf \
    SPARK_LOCAL_DIRS=/tmp/spark \
    PYSPARK_PYTHON=/opt/squall/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/squall/bin/python
USER 10001:10001
# 7070: gRPC between workers and ackers; 9090: /metrics and /healthz; 8080: the operator's /healthz
EXPOSE 7070 9090 8080
ENTRYPOINT ["squall"]
CMD ["--help"]
