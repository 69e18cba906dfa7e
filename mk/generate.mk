# Code generation. Included by the top-level Makefile.
#
#   make generate         deepcopy + OpenAPI for reconciler/apiserver (commit the output)
#   make verify-generate  fail if the checked-in generated files are stale

GENERATE_REPO_ROOT := $(patsubst %/,%,$(dir $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))))

.PHONY: generate verify-generate

generate:
	$(GENERATE_REPO_ROOT)/hack/update-codegen.sh
	$(GENERATE_REPO_ROOT)/hack/update-openapi.sh

verify-generate:
	$(GENERATE_REPO_ROOT)/hack/verify-generate.sh
