#!/usr/bin/env bash
# Regenerates the OpenAPI definitions the API server serves and builds its
# server-side-apply type converter from:
#   reconciler/apiserver/openapi/zz_generated.openapi.go        (GetOpenAPIDefinitions)
#   reconciler/apiserver/apis/<group>/<version>/zz_generated.model_name.go
#                                                            (OpenAPIModelName methods)
# API rule violations go to reconciler/apiserver/openapi/api_violations.report
# and never fail the run.
#
# Usage: hack/update-openapi.sh [output-root]
#   output-root defaults to the repository; hack/verify-generate.sh passes a copy.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_ROOT="${1:-${REPO_ROOT}}"
# The kube-openapi version k8s.io/apiserver v0.37.2 requires (see go.mod).
KUBE_OPENAPI_VERSION="${KUBE_OPENAPI_VERSION:-v0.0.0-20260721132016-d427ff9ee9ad}"
MODULE="github.com/flotilla-dev/flotilla"
OUT_DIR="reconciler/apiserver/openapi"

# Packages we only read: they ship their own zz_generated.model_name.go.
K8S_PKGS=(
  k8s.io/api/core/v1
  k8s.io/api/apps/v1
  k8s.io/api/batch/v1
  k8s.io/api/autoscaling/v1
  k8s.io/api/autoscaling/v2
  k8s.io/api/discovery/v1
  k8s.io/api/networking/v1
  k8s.io/api/coordination/v1
  k8s.io/api/policy/v1
  k8s.io/api/events/v1
  k8s.io/api/admissionregistration/v1
  k8s.io/api/authentication/v1
  k8s.io/api/authorization/v1
  k8s.io/api/storage/v1
  k8s.io/api/rbac/v1
  k8s.io/api/scheduling/v1
  k8s.io/api/node/v1
  k8s.io/api/certificates/v1
  k8s.io/metrics/pkg/apis/metrics/v1beta1
  # Not served, but batch/v1 JobSchedulingConfiguration refers to its types.
  k8s.io/api/scheduling/v1alpha3
  k8s.io/apimachinery/pkg/apis/meta/v1
  k8s.io/apimachinery/pkg/runtime
  k8s.io/apimachinery/pkg/version
  k8s.io/apimachinery/pkg/util/intstr
  k8s.io/apimachinery/pkg/api/resource
)
# Our own API packages: model name methods are generated into them.
OWN_PKGS=(
  "${MODULE}/reconciler/apiserver/apis/flotilla/v1alpha1"
)

readonly_flags=()
for p in "${K8S_PKGS[@]}"; do
  readonly_flags+=(--readonly-pkg "${p}")
done

cd "${OUT_ROOT}"
GOWORK=off go run "k8s.io/kube-openapi/cmd/openapi-gen@${KUBE_OPENAPI_VERSION}" \
  --go-header-file "${REPO_ROOT}/hack/boilerplate.go.txt" \
  --output-dir "${OUT_DIR}" \
  --output-pkg "${MODULE}/${OUT_DIR}" \
  --output-file zz_generated.openapi.go \
  --output-model-name-file zz_generated.model_name.go \
  --report-filename "${OUT_DIR}/api_violations.report" \
  "${readonly_flags[@]}" \
  "${K8S_PKGS[@]}" "${OWN_PKGS[@]}"
