#!/usr/bin/env bash
# End-to-end tests on kind: creates a kind cluster, builds the Squall image and `kind load`s it,
# installs the chart, runs the wordcount and logcount Topologies, scales one, kills a worker pod, and
# deletes them (e2e/test_kind.py; docs/operations.md, "End-to-end tests on kind").
#
#   e2e/run.sh [pytest options]        e.g. e2e/run.sh -x, or e2e/run.sh -k scaling
#
# Needs docker with a running engine, kind and kubectl. Without them every test is skipped and the
# reason is printed (exit status 0). SQUALL_E2E_CLUSTER names the kind cluster (default squall-e2e);
# SQUALL_E2E_KEEP=1 keeps a cluster the run created.
set -euo pipefail
cd "${0%/*}/.."  # no dirname: the script runs even with a PATH stripped down
python="${PYTHON:-.venv/bin/python}"
if [[ ! -x "$python" ]]; then
    echo "e2e: $python not found: run 'make install' first (or set PYTHON)" >&2
    exit 2
fi
exec "$python" -m pytest e2e -v -rs "$@"
