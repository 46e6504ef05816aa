"""The Dockerfile's invariants, checked without building it: multi-stage with no compilers in the final
stage, a non-root user, nothing to write on the root filesystem, and every dependency pinned."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

import yaml
from chart_support import CHART, REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from squall_operator.render import RUN_AS

DOCKERFILE = (REPO / "Dockerfile").read_text()
LOCK = REPO / "requirements.lock"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# packages that compile code, or are compilers
COMPILERS = re.compile(r"\b(gcc|g\+\+|cc|clang|make|build-essential|cargo|rustc|golang|[\w.+-]+-dev|"
                       r"openjdk-\d+-jdk[\w-]*)\b")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for instruction in instructions(DOCKERFILE):
        if instruction[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(instruction)
    return out


def args(stage: list[tuple[str, str]], word: str) -> list[str]:
    return [rest for w, rest in stage if w == word]


def lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.!+_-]+)", line)
        assert match, f"requirements.lock: {line!r} is not pinned as name==version"
        name = canonicalize_name(match.group(1))
        assert name not in pins, f"requirements.lock pins {name} twice"
        pins[name] = match.group(2)
    return pins


def installed_requirements() -> tuple[set[str], list[str]]:
    """The extras of squall and the other packages the build stage installs (`pip install ... "squall[...]" X`)."""
    (install,) = [r for w, r in stages()[0] if w == "RUN" and "pip install" in r]
    assert "--no-index" in install and "--constraint requirements.lock" in install, (
        "the image must install only the pinned wheels: pip install --no-index --constraint requirements.lock")
    extras = re.search(r'"squall\[([\w,]+)\]"', install)
    assert extras, install
    others = [w for w in install.split(extras.group(0))[1].split("&&")[0].split() if not w.startswith("-")]
    return set(extras.group(1).split(",")), others


def test_it_is_multi_stage_with_a_slim_final_stage_without_compilers():
    build, *rest = stages()
    assert rest, "a build stage and a final stage"
    final = rest[-1]
    assert re.fullmatch(r"python:\$\{PYTHON_VERSION\}-bookworm AS build", args(build, "FROM")[0])
    assert args(final, "FROM") == ["python:${PYTHON_VERSION}-slim-bookworm"]
    assert re.search(r"^ARG PYTHON_VERSION=3\.11$", DOCKERFILE, re.M)
    for run in args(final, "RUN"):
        installs = re.findall(r"apt-get install ([^&]*)", run)
        for packages in installs:
            assert "--no-install-recommends" in packages
            assert not COMPILERS.search(packages.replace("--no-install-recommends", "")), packages
        assert "pip install" not in run and "pip wheel" not in run, "the final stage installs nothing with pip"
    assert any("openjdk-17-jre-headless" in run for run in args(final, "RUN")), "a Java 17 runtime for Spark"
    copied = [c for c in args(final, "COPY") if c.startswith("--from=")]
    assert copied == ["--from=build /opt/squall /opt/squall"], "only the virtualenv comes from the build stage"


def test_it_runs_as_the_non_root_user_the_manifests_expect():
    final = stages()[-1]
    users = args(final, "USER")
    assert users == [f"{RUN_AS}:{RUN_AS}"], users
    order = [w for w, _ in final]
    assert order.index("USER") < order.index("ENTRYPOINT")
    assert args(final, "ENTRYPOINT") == ['["squall"]']
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == RUN_AS


def test_nothing_is_written_to_the_root_filesystem_at_run_time():
    env = " ".join(args(stages()[-1], "ENV"))
    for setting in ("HOME=/tmp", "PYTHONDONTWRITEBYTECODE=1", "SPARK_LOCAL_DIRS=/tmp/spark"):
        assert setting in env, setting
    spark_defaults = re.search(r"printf '%s\\n' (.*) > /opt/spark-conf/spark-defaults.conf", DOCKERFILE.replace(
        "\\\n", " "))
    assert spark_defaults, "spark-defaults.conf"
    settings = dict(s.strip("'").split(" ", 1) for s in re.findall(r"'[^']*'", spark_defaults.group(1)))
    assert all(path.startswith("/tmp/") for path in settings.values()), settings
    assert {"spark.local.dir", "spark.jars.ivy", "spark.sql.warehouse.dir"} <= set(settings)
    assert "SPARK_CONF_DIR=/opt/spark-conf" in env
    assert args(stages()[-1], "WORKDIR") == ["/app"]
    assert "examples ./examples" in args(stages()[-1], "COPY"), "the example topologies' classNames import from /app"


def test_every_runtime_dependency_is_pinned_in_requirements_lock():
    pins = lock()
    extras, others = installed_requirements()
    assert extras <= set(PYPROJECT["optional-dependencies"]), f"unknown extras {extras}"
    wanted = [Requirement(r) for r in PYPROJECT["dependencies"]]
    for extra in sorted(extras):
        wanted += [Requirement(r) for r in PYPROJECT["optional-dependencies"][extra]]
    wanted += [Requirement(r) for r in others]
    for req in wanted:
        if canonicalize_name(req.name) == "squall":
            continue  # an extra that includes other extras
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} (pyproject.toml or the Dockerfile) is not pinned in requirements.lock"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"requirements.lock pins {name}=={pins[name]}, which does not satisfy {req}")


def test_the_lock_is_closed_under_the_dependencies_of_its_packages():
    """Every dependency of a pinned package is pinned too (checked for the packages installed here at the
    pinned version; the image build's `pip install --no-index` checks them all)."""
    pins = lock()
    checked = 0
    for name, version in pins.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            assert canonicalize_name(req.name) in pins, f"{name} needs {req}, which requirements.lock does not pin"
    assert checked >= len(pins) // 2, "too few pinned packages installed here to check the lock"


def test_dockerignore_sends_only_what_the_dockerfile_copies():
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    rules = [line for line in lines if line and not line.startswith("#")]
    assert rules[0] == "*", "ignore everything, then allow what the build needs"
    allowed = {rule[1:] for rule in rules if rule.startswith("!")}
    copied = set()
    for stage in stages():
        for copy in args(stage, "COPY"):
            if not copy.startswith("--from="):
                copied |= {source.removeprefix("./") for source in copy.split()[:-1]}
    assert allowed == copied, f".dockerignore allows {sorted(allowed)}, the Dockerfile copies {sorted(copied)}"


def test_make_image_tags_the_image_the_chart_runs_by_default():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == PYPROJECT["version"], "the chart's default image is squall:<appVersion>"
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^VERSION := \$\(shell sed -n 's/\^version = .*pyproject\.toml\)$", makefile, re.M)
    assert "IMAGE ?= squall:$(VERSION)" in makefile and "OPERATOR_IMAGE ?= squall-operator:$(VERSION)" in makefile
    assert "docker build --tag $(IMAGE) ." in makefile
    assert "docker build --target operator --tag $(OPERATOR_IMAGE) ." in makefile
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert (values["image"]["repository"], values["operatorImage"]["repository"]) == ("squall", "squall-operator")


def test_the_operator_target_is_slim():
    """`--target operator`: the operator's own virtualenv, without Java, PySpark or the Kafka client."""
    (operator,) = [stage for stage in stages() if args(stage, "FROM")[0].endswith(" AS operator")]
    assert args(operator, "FROM") == ["python:${PYTHON_VERSION}-slim-bookworm AS operator"]
    assert not any("apt-get" in run or "pip install" in run for run in args(operator, "RUN"))
    assert [c for c in args(operator, "COPY") if c.startswith("--from=")] == [
        "--from=build /opt/squall-operator /opt/squall"]
    assert args(operator, "USER") == [f"{RUN_AS}:{RUN_AS}"]
    assert args(operator, "ENTRYPOINT") == ['["python", "-m", "squall_operator"]']
    (install,) = [r for w, r in stages()[0] if w == "RUN" and "pip install" in r]
    slim = install.split("/opt/squall-operator/bin/pip install")[1].split("&&")[0]
    assert '"squall[operator]"' in slim and "pyspark" not in slim and "kafka" not in slim
    assert stages()[-1] != operator, "the worker image stays the default target"
