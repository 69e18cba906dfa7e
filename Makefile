# Flotilla build, test and demo. Every target installs what it needs (Debian packages, Go
# modules) so that it works on a fresh Debian 12 machine as root.

SHELL        := /bin/bash
GO           ?= go
KUBE_VERSION ?= v1.37.2
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT       := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BIN          := $(CURDIR)/bin
export CGO_ENABLED := 0
export GOFLAGS     := -buildvcs=false

# Debian packages needed at run time and by the tests (see docs/architecture.md).
DEB_PACKAGES := containerd runc containernetworking-plugins nftables iproute2 git ca-certificates \
	qemu-system-x86 busybox-static

KUBE_LDFLAGS := $(foreach p,k8s.io/client-go/pkg/version k8s.io/component-base/version,\
	-X $(p).gitVersion=$(KUBE_VERSION) -X $(p).gitMajor=1 -X $(p).gitMinor=37 \
	-X $(p).gitCommit=$(COMMIT) -X $(p).gitTreeState=clean)
LDFLAGS := -s -w $(KUBE_LDFLAGS) -X main.flotillaVersion=$(VERSION)

GO_TEST_TIMEOUT ?= 50m
# Where a failed end-to-end test leaves its hosts' whole logs (kept after the run).
E2E_LOGS ?= /var/tmp/flotilla-e2e-logs

# BENCHRUN runs a benchmark command printing only its figures and failures (no component logs).
BENCHRUN := $(CURDIR)/hack/bench-run.sh

.PHONY: all deps build kubectl images generate verify-generate test unit-test lint demo demo-down bench bench-api bench-scheduler bench-proxy bench-ingress bench-e2e bench-robustness bench-endurance bench-policies bench-fleet clean

all: build

## deps: install the Debian packages (once) and download the Go modules.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	$(GO) mod download

## build: bin/flotilla, static (CGO_ENABLED=0), version-stamped for `kubectl version`.
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/flotilla ./cmd/flotilla

## kubectl: bin/kubectl from k8s.io/kubectl $(KUBE_VERSION) (module hack/kubectl).
kubectl: $(BIN)/kubectl
$(BIN)/kubectl: hack/kubectl/go.mod hack/kubectl/main.go
	KUBE_VERSION=$(KUBE_VERSION) hack/build-kubectl.sh $(BIN)/kubectl

include mk/generate.mk

## lint: go vet and a gofmt check.
lint:
	$(GO) vet ./...
	@bad=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^hack/kubectl/')); \
	if [ -n "$$bad" ]; then echo "gofmt would change: $$bad"; exit 1; fi

## unit-test: the tests that need nothing but Go.
unit-test:
	$(GO) test -count=1 ./reconciler/... ./cmd/...

## test: everything, against real processes (etcd, the agent, kubectl).
## The figures the tests measure (framework.Figure) are printed at the end, pass or fail.
test: deps build kubectl images lint
	@rm -f $(BIN)/figures.txt
	@rc=0; FLOTILLA_BIN=$(BIN)/flotilla KUBECTL=$(BIN)/kubectl FLOTILLA_IMAGES=$(BIN)/images FLOTILLA_FIGURES=$(BIN)/figures.txt \
		FLOTILLA_E2E_LOGS=$(E2E_LOGS) $(GO) test -count=1 -timeout $(GO_TEST_TIMEOUT) -p 1 ./... || rc=$$?; \
	$(BIN)/flotilla policy test policies/library || rc=$$?; \
	echo; echo "== figures measured by the tests =="; cat $(BIN)/figures.txt 2>/dev/null || echo "(none)"; \
	exit $$rc

## images: the example images as OCI tarballs in bin/images (no registry needed).
images: build
	FLOTILLA_BIN=$(BIN)/flotilla hack/pack-images.sh

## demo: start a site and print how to use it (see README).
demo: deps build kubectl images
	FLOTILLA_BIN=$(BIN)/flotilla KUBECTL=$(BIN)/kubectl hack/demo.sh up

demo-down:
	FLOTILLA_BIN=$(BIN)/flotilla hack/demo.sh down

## bench: measurements that are too slow for `make test`; prints only figures and failures
## (the preparing targets run silently, each benchmark through $(BENCHRUN)).
BENCHES := bench-api bench-scheduler bench-proxy bench-ingress bench-e2e bench-robustness bench-endurance bench-policies bench-fleet
bench:
	@$(MAKE) -s --no-print-directory deps build kubectl images >/dev/null
	@$(MAKE) -s --no-print-directory $(BENCHES)

## bench-api: API round trips on one agent (ConfigMap create and get, Service create), a new
## CRD to its first custom resource, RBAC authorization, and ConfigMap create p50/p99 on a
## 3-host site (etcd with 3 voters) as the admin and as an RBAC-authorized user
## (FLOTILLA_BENCH_WRITES, default 600).
bench-api: deps build kubectl images
	@FLOTILLA_BIN=$(BIN)/flotilla KUBECTL=$(BIN)/kubectl $(BENCHRUN) \
		$(GO) test -run '^$$' -bench 'BenchmarkAPI$$' -benchtime 200x -timeout 20m ./test/api/
	@FLOTILLA_BIN=$(BIN)/flotilla KUBECTL=$(BIN)/kubectl $(BENCHRUN) \
		$(GO) test -run '^$$' -bench BenchmarkCRDToFirstCustomResource -benchtime 1x -timeout 20m ./test/api/
	@$(BENCHRUN) $(GO) test -run '^$$' -bench . -timeout 20m ./reconciler/...
	@FLOTILLA_BIN=$(BIN)/flotilla KUBECTL=$(BIN)/kubectl FLOTILLA_IMAGES=$(BIN)/images $(BENCHRUN) \
		$(GO) test -run '^$$' -bench BenchmarkMutatingAPI -benchtime 1x -timeout 30m ./test/e2e/

## bench-scheduler: FLOTILLA_BENCH_NODES Node objects (1,000) and FLOTILLA_BENCH_PODS pods
## (10,000) against one agent and a 3-host site: create-to-bound pods/s and creates/s (burst),
## committed bindings/s with the pods already pending (backlog).
bench-scheduler: deps build kubectl
	@FLOTILLA_BIN=$(BIN)/flotilla KUBECTL=$(BIN)/kubectl FLOTILLA_BENCH_NODES=$${FLOTILLA_BENCH_NODES:-1000} \
		FLOTILLA_BENCH_PODS=$${FLOTILLA_BENCH_PODS:-10000} $(BENCHRUN) \
		$(GO) test -run '^$$' -bench BenchmarkScheduler -benchtime 1x -timeout 30m ./test/scheduler/

## bench-proxy: nftables full sync and one changed Service (ms/full-sync, ms/one-change; 1,000
## and 10,000 Services x 10 endpoints, in a test namespace), the same for the IPVS compile path,
## NetworkPolicy full sync and one-pod change (1,000 policies, 5,000 pods), DNS answers and the
## Ingress proxy per request.
bench-proxy: deps build
	@FLOTILLA_BIN=$(BIN)/flotilla $(BENCHRUN) $(GO) test -run '^$$' -bench . -benchtime 3x -timeout 30m ./proxy/services/
	@FLOTILLA_BIN=$(BIN)/flotilla $(BENCHRUN) $(GO) test -run '^$$' -bench . -benchtime 5x -timeout 20m ./proxy/netpol/
	@FLOTILLA_BIN=$(BIN)/flotilla $(BENCHRUN) $(GO) test -run '^$$' -bench . -skip BenchmarkIngressVsNginx -timeout 10m ./proxy/dns/ ./proxy/ingress/

## bench-ingress: the Ingress proxy against nginx in front of the same backend pod, both driven
## by wrk (FLOTILLA_BENCH_WRK_DURATION, _CONNECTIONS, _THREADS; FLOTILLA_BENCH_PAIRS ABBA rounds):
## requests/s and p99 of each and their ratio (goal >= 0.9x nginx). Installs wrk and nginx when
## missing, with a policy-rc.d that keeps the package from starting a system nginx on port 80.
bench-ingress: deps build
	@if ! command -v wrk >/dev/null || [ ! -x /usr/sbin/nginx ]; then \
		echo "installing Debian packages: wrk nginx"; \
		export DEBIAN_FRONTEND=noninteractive; guard=""; \
		if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; guard=1; fi; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends wrk nginx >/dev/null; rc=$$?; \
		[ -z "$$guard" ] || rm -f /usr/sbin/policy-rc.d; \
		if [ $$rc -eq 0 ] && [ -d /run/systemd/system ]; then systemctl disable --now nginx >/dev/null 2>&1 || true; fi; \
		exit $$rc; \
	fi
	@$(BENCHRUN) $(GO) test -run '^$$' -bench BenchmarkIngressVsNginx -benchtime 1x -timeout 20m ./proxy/ingress/

## bench-e2e: a 3-host site: git commit -> new version answering through every ingress, and
## the memory (RSS) of each host's agent, containerd and shims and the agent's live Go heap,
## with 50 pods on it (FLOTILLA_BENCH_PODS_PER_HOST, FLOTILLA_BENCH_ROUNDS;
## FLOTILLA_BENCH_PROFILES=DIR saves each agent's heap profile and memory map).
bench-e2e: deps build kubectl images
	@FLOTILLA_BIN=$(BIN)/flotilla KUBECTL=$(BIN)/kubectl FLOTILLA_IMAGES=$(BIN)/images $(BENCHRUN) \
		$(GO) test -run '^$$' -bench 'BenchmarkGitOps' -benchtime 1x -timeout 40m ./test/e2e/

## bench-robustness: a 3-host site under faults (partitions, kill -9 of voters) for
## FLOTILLA_LINEARIZABILITY_DURATION (default 10m) while clients on every host create, update,
## read and delete ConfigMaps; prints operations, faults, linearizability violations (must be 0)
## and the p99 latency of acknowledged writes.
bench-robustness: deps build kubectl
	@FLOTILLA_BIN=$(BIN)/flotilla KUBECTL=$(BIN)/kubectl \
		FLOTILLA_LINEARIZABILITY_DURATION=$${FLOTILLA_LINEARIZABILITY_DURATION:-10m} $(BENCHRUN) \
		$(GO) test -run '^$$' -bench BenchmarkLinearizability -benchtime 1x -timeout 40m ./test/e2e/

## bench-endurance: the disk write budget of an idle 3-host site running 20 pods: bytes each host
## (agent with etcd, containerd, shims) sends to storage per second and per idle hour over
## FLOTILLA_ENDURANCE_WINDOW (default 10m), and which etcd keys were written.
bench-endurance: deps build kubectl images
	@FLOTILLA_BIN=$(BIN)/flotilla KUBECTL=$(BIN)/kubectl FLOTILLA_IMAGES=$(BIN)/images \
		FLOTILLA_ENDURANCE_WINDOW=$${FLOTILLA_ENDURANCE_WINDOW:-10m} $(BENCHRUN) \
		$(GO) test -run '^$$' -bench BenchmarkIdleWrites -benchtime 1x -timeout 40m ./test/e2e/

## bench-policies: API write latency (p50, p99) of Deployment creates without admission policies
## and with the restricted library set, alternating (ABBA rounds; FLOTILLA_BENCH_WRITES per round, default 500, FLOTILLA_BENCH_PAIRS rounds per side, default 3);
## the offline plan of a 2,001-object revision without and with the set, and the evaluation alone.
bench-policies: deps build
	@FLOTILLA_BIN=$(BIN)/flotilla $(BENCHRUN) $(GO) test -run '^$$' -bench BenchmarkPolicyWriteLatency -benchtime 1x -timeout 20m ./test/api/
	@$(BENCHRUN) $(GO) test -run '^$$' -bench BenchmarkPlanOfflinePolicies -benchtime 1x -timeout 20m ./gitsync/

## bench-fleet: 100 sites push their fleet status to one bare repository at once (file://, the
## git binary's receive-pack), 5 rounds: reports lost (must be 0), the time of the writes of a
## round and of one read of the 100 statuses, and the pushes retried.
bench-fleet: deps
	@$(BENCHRUN) $(GO) test -run '^$$' -bench BenchmarkFleetStatus100Sites -benchtime 5x -timeout 10m ./fleet/

clean:
	rm -rf $(BIN)
