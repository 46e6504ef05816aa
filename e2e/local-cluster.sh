#!/usr/bin/env bash
# The end-to-end suite on a real one-node Kubernetes 1.20 built on this machine by the k8s-local
# scripts (no Docker, no registry): down --purge, build (cached after the first run), up, the suite
# (its images built with buildah by image.sh and loaded by load-image.sh), down. `.ci/run` calls it
# when the machine has those scripts; docs/operations.md, "End-to-end tests".
#
#   e2e/local-cluster.sh [pytest options]
#
# Runs as root (the k8s-local scripts need it). K8S_LOCAL names the scripts' directory (default:
# ../shared/k8s-local from the repository root). Prints how long each step took.
set -euo pipefail
cd "${0%/*}/.."
root=$PWD
k8s=${K8S_LOCAL:-$root/../shared/k8s-local}
k8s=$(cd "$k8s" && pwd)
prefix=${K8S_LOCAL_PREFIX:-/opt/k8s-local}
[[ $(id -u) == 0 ]] || { echo "local-cluster: the k8s-local scripts run as root" >&2; exit 2; }

t0=$(date +%s)
step() { echo "local-cluster: [$(( $(date +%s) - t0 )) s] $*"; }

step "down --purge (a stale cluster from a stopped run goes too)"
"$k8s/down.sh" --purge
step "build Kubernetes (cached under $prefix after the first run)"
"$k8s/build.sh"
"$k8s/build.sh" kube-proxy
step "up"
"$k8s/up.sh" --no-smoke
trap 'step "down"; "$k8s/down.sh"' EXIT

step "e2e suite"
export PATH=$prefix/bin:$PATH  # kubectl 1.20, the cluster's own
export SQUALL_E2E_KUBECONFIG=/var/lib/k8s-local/admin.kubeconfig
export SQUALL_E2E_BUILD="'$k8s/image.sh' . squall:e2e && buildah bud --pull=never --quiet \
--build-arg BASE=localhost/squall:e2e --tag squall-topologies:e2e e2e/image"
export SQUALL_E2E_LOAD="'$k8s/load-image.sh'"
status=0
e2e/run.sh "$@" || status=$?
step "e2e suite done (exit status $status)"
exit $status
