#!/usr/bin/env bash
# Builds upstream kubectl (k8s.io/kubectl, module hack/kubectl) as a static binary
# into bin/kubectl, stamped with the Kubernetes version the API server speaks.
#
# Usage: hack/build-kubectl.sh [output]     (default: <repo>/bin/kubectl)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-${REPO_ROOT}/bin/kubectl}"
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"

if [[ ! "${KUBE_VERSION}" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+ ]]; then
  echo "KUBE_VERSION=${KUBE_VERSION}: want vMAJOR.MINOR.PATCH" >&2
  exit 1
fi
major="${BASH_REMATCH[1]}"
minor="${BASH_REMATCH[2]}"
commit="$(git -C "${REPO_ROOT}" rev-parse HEAD 2>/dev/null || echo unknown)"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

# `kubectl version` reads component-base/version; client-go's copy is what the
# client reports in its User-Agent. Stamp both identically.
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
  ldflags+=" -X ${pkg}.gitMajor=${major}"
  ldflags+=" -X ${pkg}.gitMinor=${minor}"
  ldflags+=" -X ${pkg}.gitCommit=${commit}"
  ldflags+=" -X ${pkg}.gitTreeState=clean"
  ldflags+=" -X ${pkg}.buildDate=${build_date}"
done

mkdir -p "$(dirname "${OUT}")"
cd "${REPO_ROOT}/hack/kubectl"
GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${OUT}" .
echo "built ${OUT} (${KUBE_VERSION})"
