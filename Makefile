# `make run` starts the word count topology; `make test` runs the test suite. Both install first.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: install system-packages run test lint bench clean e2e image crd proto

install: $(VENV)/.compiled

$(VENV)/.installed: pyproject.toml setup.py
	@echo "make: installing Squall with everything its tests use (PySpark, kopf, Helm's library...) into $(VENV):"\
	  "about 1.4 GB, a few minutes, once"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install -e '.[all,dev]'
	touch $@

# The compiled hot path (setup.py, Cython) again whenever a source changed: an extension module
# beside its .py is what Python imports, so a stale one would hide the change.
$(VENV)/.compiled: $(VENV)/.installed $(shell find worker -name '*.py' -o -name '*.pxd')
	@echo "make: compiling the hot path (Cython; about a minute when every module changed)"
	$(BIN)/python setup.py --quiet build_ext --inplace
	touch $@

# Debian packages the tests run for real: Prometheus and promtool (the dashboard and alert-rule tests) and
# redis-server (the Redis state store's tests), where apt-get and root are available; elsewhere install
# them yourself (those tests fail, not skip, without them).
SYSTEM_PACKAGES := prometheus:prometheus promtool:prometheus redis-server:redis-server
system-packages:
	@missing=$$(for pair in $(SYSTEM_PACKAGES); do command -v $${pair%%:*} >/dev/null || echo $${pair#*:}; done | sort -u); \
	if [ -z "$$missing" ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "make: missing $$missing and no apt-get as root to install them: the tests that run them will" \
	  "fail; install them yourself (Prometheus: https://prometheus.io/download/, Redis: https://redis.io)" >&2; fi

run: install
	$(BIN)/squall run examples/wordcount.yaml --duration 30

# Six pytest processes on a 2-core machine: most of the suite's time is tests waiting on the processes,
# timeouts and servers they start, not only CPU. Six took 6-7 % less time than four, alternated in one
# session (271 against 292 s, 323 against 345 s), for 4 % more CPU; 7 to 9 minutes under load.
# Worksteal, and the tests marked long start first, one per process (tests/conftest.py).
# Bytecode is cached even where the environment says not to (PYTHONDONTWRITEBYTECODE, which the CI
# machine sets): without it each pytest process rewrote every test module again (6.5 s of CPU to
# collect instead of 3.0) and each of the hundreds of processes the suite starts compiled Squall's
# modules again (0.29 s of CPU to import a pod instead of 0.26).
test: install system-packages
	$(BIN)/ruff check --no-cache worker operator tests examples bench e2e
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 6 --dist worksteal

bench: install
	$(BIN)/python bench/wordcount.py

# End-to-end tests on kind (skipped, with the reason, without docker, kind or kubectl), or on an existing
# cluster: make e2e SQUALL_E2E_KUBECONFIG=path (docs/operations.md, "End-to-end tests")
e2e: install
	bash e2e/run.sh

# The images, tagged as the chart expects: workers and ackers (squall:<version>), and the slim
# operator (squall-operator:<version>), from the same Dockerfile
VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
IMAGE ?= squall:$(VERSION)
OPERATOR_IMAGE ?= squall-operator:$(VERSION)
image:
	docker build --tag $(IMAGE) .
	docker build --target operator --tag $(OPERATOR_IMAGE) .

# Regenerate checked-in generated files after changing the spec model or the .proto
crd: install
	$(BIN)/python -m squall_operator.crd
	cp crds/topology.yaml charts/squall/crds/topology.yaml  # not topology-cel.yaml: Kubernetes < 1.25 refuses it

proto: install
	$(BIN)/python -m squall.proto.generate

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
	find worker \( -name '*.so' -o -name '*.c' -o -name '*.html' \) -delete
