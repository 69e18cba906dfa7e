# bin/kubectl: upstream kubectl built from module hack/kubectl (hack/build-kubectl.sh).
# Only for a Makefile that has no kubectl target of its own; the top-level Makefile has one.

KUBECTL_REPO_ROOT := $(patsubst %/,%,$(dir $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))))
KUBE_VERSION ?= v1.37.2

.PHONY: kubectl

kubectl: $(KUBECTL_REPO_ROOT)/bin/kubectl

$(KUBECTL_REPO_ROOT)/bin/kubectl: $(addprefix $(KUBECTL_REPO_ROOT)/hack/,kubectl/go.mod kubectl/go.sum kubectl/main.go build-kubectl.sh)
	KUBE_VERSION=$(KUBE_VERSION) $(KUBECTL_REPO_ROOT)/hack/build-kubectl.sh $@
