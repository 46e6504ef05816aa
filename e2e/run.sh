#!/usr/bin/env bash
# End-to-end tests on kind or on an existing cluster: builds the Squall images and loads them, installs
# the chart, runs the wordcount and logcount Topologies, replaces a worker pod, scales one, and deletes
# them (e2e/test_cluster.py; docs/operations.md, "End-to-end tests").
#
#   e2e/run.sh [pytest options]        e.g. e2e/run.sh -x, or e2e/run.sh -k scaling
#
# On kind: needs docker with a running engine, kind and kubectl; without them every test is skipped and
# the reason is printed (exit status 0). SQUALL_E2E_CLUSTER names the kind cluster (default squall-e2e);
# SQUALL_E2E_KEEP=1 keeps a cluster the run created. On an existing cluster: SQUALL_E2E_KUBECONFIG, and
# the build and load hooks SQUALL_E2E_BUILD and SQUALL_E2E_LOAD (e2e/conftest.py; e2e/local-cluster.sh
# sets them for this machine's k8s-local cluster).
set -euo pipefail
cd "${0%/*}/.."  # no dirname: the script runs even with a PATH stripped down
python="${PYTHON:-.venv/bin/python}"
if [[ ! -x "$python" ]]; then
    echo "e2e: $python not found: run 'make install' first (or set PYTHON)" >&2
    exit 2
fi
exec "$python" -m pytest e2e -v -rs "$@"
