#!/usr/bin/env bash
# The demo site. Today it starts one host on loopback; the "End to end" issue turns it into a
# 3-host site in network namespaces deploying examples/hello from a local git repository.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEMO_DIR="${DEMO_DIR:-${REPO_ROOT}/demo}"
FLOTILLA_BIN="${FLOTILLA_BIN:-${REPO_ROOT}/bin/flotilla}"
KUBECTL="${KUBECTL:-${REPO_ROOT}/bin/kubectl}"
PIDFILE="${DEMO_DIR}/host-1.pid"

down() {
  if [[ -f "${PIDFILE}" ]]; then
    pid="$(cat "${PIDFILE}")"
    if kill -0 "${pid}" 2>/dev/null; then
      kill -TERM "${pid}"
      for _ in $(seq 1 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.2; done
    fi
    rm -f "${PIDFILE}"
  fi
  rm -rf "${DEMO_DIR}"
  echo "demo removed"
}

up() {
  if [[ -f "${PIDFILE}" ]] && kill -0 "$(cat "${PIDFILE}")" 2>/dev/null; then
    echo "the demo is already running (pid $(cat "${PIDFILE}")); 'make demo-down' removes it"
  else
    mkdir -p "${DEMO_DIR}/host-1"
    rm -f "${DEMO_DIR}/host-1/kubeconfig"
    nohup "${FLOTILLA_BIN}" agent --data-dir "${DEMO_DIR}/host-1" --name host-1 \
      --listen-address 127.0.0.1 --api-port 6443 >"${DEMO_DIR}/host-1.log" 2>&1 &
    echo $! >"${PIDFILE}"
    printf 'starting host-1 (etcd + Kubernetes API)'
    for _ in $(seq 1 300); do
      [[ -f "${DEMO_DIR}/host-1/kubeconfig" ]] && break
      if ! kill -0 "$(cat "${PIDFILE}")" 2>/dev/null; then
        echo; echo "host-1 exited; its log:"; tail -n 30 "${DEMO_DIR}/host-1.log"; exit 1
      fi
      printf '.'; sleep 0.5
    done
    echo
  fi
  kc="${DEMO_DIR}/host-1/kubeconfig"
  [[ -f "${kc}" ]] || { echo "host-1 did not become ready; see ${DEMO_DIR}/host-1.log"; exit 1; }
  "${KUBECTL}" --kubeconfig "${kc}" get namespaces
  cat <<MSG

One host is running: etcd and the Kubernetes API (log: ${DEMO_DIR}/host-1.log).
  export KUBECONFIG=${kc}
  ${KUBECTL} get all -A
Not done yet (later issues): the 3-host site in network namespaces, gitsync from a local git
repo, controllers, scheduler, containers, Service IPs, DNS and ingress, so no app URL answers yet.
'make demo-down' removes the demo.
API URL: https://127.0.0.1:6443
MSG
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
