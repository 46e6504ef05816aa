#!/usr/bin/env bash
# The end-to-end suite on a real one-node Kubernetes 1.20 built on this machine by the k8s-local
# scripts (no Docker, no registry): down --purge, build (cached after the first run), up, the suite
# (its images, the operator's among them, built with buildah by image.sh and loaded by load-image.sh), down. `.ci/run` calls it
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

# A full disk fails the run late and obscurely: the kubelet evicts every pod and admits none below 2 %
# free (DiskPressure), so the chart's operator never becomes ready. The two images need about 5 GB
# while they are built and loaded; ask for twice that up front (SQUALL_E2E_DISK_GB).
need_gb=${SQUALL_E2E_DISK_GB:-10}
free_gb=$(( $(df --output=avail -k /var/lib | tail -1) / 1024 / 1024 ))
if (( free_gb < need_gb )); then
    echo "local-cluster: only $free_gb GB free on /var/lib, and the image builds and the cluster need" \
         "$need_gb GB: free some first (buildah rmi --prune drops superseded images and build cache)" >&2
    exit 2
fi
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
# The operator's image is the Dockerfile's operator target, as the chart's default is: its build stage
# is image.sh's, cached (--layers), and image.sh's mounts let a build that misses the cache reach PyPI;
# then drop the images the new tags superseded, and the build cache: each run would otherwise leave
# about 2 GB behind in buildah's storage, and a disk filled by them failed CI (see the check above).
# The prune is housekeeping, so it cannot fail the run: buildah refuses it outright while a working
# container left by a killed build still holds an image, and that failed CI at eeb036e.
export SQUALL_E2E_BUILD="'$k8s/image.sh' . squall:e2e && buildah bud --pull=never --layers --quiet \
--network host -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca/ca-certificates.crt:ro \
-v /var/lib/k8s-local/images/pip.conf:/etc/pip.conf:ro --target operator --tag squall-operator:e2e . && \
{ buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep squall-operator || true; } && \
buildah bud --pull=never --quiet \
--build-arg BASE=localhost/squall:e2e --tag squall-topologies:e2e e2e/image && \
{ buildah rmi --prune >/dev/null || echo 'local-cluster: buildah rmi --prune failed (above); the images \
are built, and the disk check of the next run says when to free space' >&2; }"
export SQUALL_E2E_LOAD="'$k8s/load-image.sh'"
status=0
e2e/run.sh "$@" || status=$?
step "e2e suite done (exit status $status)"
exit $status
