#!/usr/bin/env bash
# Regenerates everything `make generate` produces into a scratch copy of the module
# and fails if it differs from what is checked in.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT

# Generated paths; the generators only read the module files and these trees.
TREES=(
  reconciler/apiserver/apis
  reconciler/apiserver/openapi
)

cp "${REPO_ROOT}/go.mod" "${REPO_ROOT}/go.sum" "${TMP}/"
for t in "${TREES[@]}"; do
  mkdir -p "${TMP}/$(dirname "${t}")"
  cp -R "${REPO_ROOT}/${t}" "${TMP}/${t}"
done

"${REPO_ROOT}/hack/update-codegen.sh" "${TMP}"
"${REPO_ROOT}/hack/update-openapi.sh" "${TMP}"

status=0
for t in "${TREES[@]}"; do
  if ! diff -ru "${REPO_ROOT}/${t}" "${TMP}/${t}"; then
    status=1
  fi
done
if [[ ${status} -ne 0 ]]; then
  echo "generated files are out of date: run 'make generate'" >&2
fi
exit ${status}
