#!/usr/bin/env bash
# Regenerates the deepcopy functions of Flotilla's own API types
# (reconciler/apiserver/apis/...) with k8s.io/code-generator's deepcopy-gen.
#
# Usage: hack/update-codegen.sh [output-root]
#   output-root defaults to the repository; hack/verify-generate.sh passes a copy.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_ROOT="${1:-${REPO_ROOT}}"
CODE_GENERATOR_VERSION="${CODE_GENERATOR_VERSION:-v0.37.2}"
MODULE="github.com/flotilla-dev/flotilla"

# Every package under apis/ with a +k8s:deepcopy-gen tag.
API_PKGS=(
  "${MODULE}/reconciler/apiserver/apis/flotilla/v1alpha1"
)

cd "${OUT_ROOT}"
GOWORK=off go run "k8s.io/code-generator/cmd/deepcopy-gen@${CODE_GENERATOR_VERSION}" \
  --go-header-file "${REPO_ROOT}/hack/boilerplate.go.txt" \
  --output-file zz_generated.deepcopy.go \
  "${API_PKGS[@]}"
