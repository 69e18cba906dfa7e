#!/usr/bin/env bash
# The demo site: `flotilla dev up` starts 3 hosts in network namespaces on a private bridge
# (root is needed), side-loads the example images (bin/images, from hack/pack-images.sh) and
# deploys examples/hello from a local git repository; it ends with the URL that answers.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEMO_DIR="${DEMO_DIR:-${REPO_ROOT}/demo}"
FLOTILLA_BIN="${FLOTILLA_BIN:-${REPO_ROOT}/bin/flotilla}"
KUBECTL="${KUBECTL:-${REPO_ROOT}/bin/kubectl}"

case "${1:-up}" in
  up) exec "${FLOTILLA_BIN}" dev up --dir "${DEMO_DIR}" --hosts "${HOSTS:-3}" --kubectl "${KUBECTL}" \
        --images "${REPO_ROOT}/bin/images" --app "${REPO_ROOT}/examples/hello" ;;
  down) exec "${FLOTILLA_BIN}" dev down --dir "${DEMO_DIR}" ;;
  status) exec "${FLOTILLA_BIN}" dev status --dir "${DEMO_DIR}" ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
