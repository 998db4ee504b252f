# ringmaster — make help lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN := $(CURDIR)/bin
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(BIN)/controller-gen
# Go test flags; e.g. make test TESTFLAGS='-run TestX -v'.
TESTFLAGS ?=
# Flags of make bench-fleet and make demo, e.g. FLEETFLAGS='-n 8 -clients 32 -tls 1.2';
# go run ./hack/fleet bench -h (or demo -h) lists them.
FLEETFLAGS ?=
# Benchmark time per variant, and runs per benchmark (benchratio takes medians).
BENCHTIME ?= 1s
BENCHCOUNT ?= 5

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRDs and RBAC from the API markers.
	$(CONTROLLER_GEN) crd rbac:roleName=ringmaster-manager paths="{./api/...,./controllers/...,./internal/...}" \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

.PHONY: generate
generate: controller-gen ## Generate the deepcopy code of the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet -tags integration,e2e ./...

.PHONY: test
test: manifests generate vet envtest vault cert-manager servers ## Run every test: pure packages, envtest suites on a real API server, real Vault, real cert-manager, agent over real TLS, the sidecar with real nginx and HAProxy.
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" RINGMASTER_VAULT="$$(hack/vault.sh)" RINGMASTER_CERT_MANAGER="$$(hack/certmanager.sh)" go test -tags integration,e2e ./... -count=1 $(TESTFLAGS)

.PHONY: test-e2e
test-e2e: manifests generate envtest servers ## Run only the end-to-end suite (make test runs it too): control plane, operator binary, a fleet of agent servers under load.
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" go test -tags e2e ./test/e2e/ -count=1 -v -ginkgo.v $(TESTFLAGS)

.PHONY: bench
bench: ## Run the agent benchmarks and print the ratios against the baselines of the same run.
	@mkdir -p $(BIN)
	go test ./pkg/agent/ -run '^$$' -bench . -benchtime $(BENCHTIME) -count $(BENCHCOUNT) -benchmem | tee $(BIN)/bench.txt | go run ./hack/benchratio

.PHONY: bench-fleet
bench-fleet: envtest servers ## Compare a fleet's resumption and server CPU: ringmaster's staged ring, per-replica keys, shared keys without staging, and nginx with the sidecar or its own keys; TLS 1.3 and 1.2.
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" go run ./hack/fleet bench $(FLEETFLAGS)

.PHONY: verify
verify: manifests generate fmt ## Regenerate everything and fail if the tree changes.
	go mod tidy
	git diff --exit-code || { echo "generated files are stale: run make manifests generate fmt and commit"; exit 1; }

##@ Build

.PHONY: build
build: ## Build the operator into bin/ringmaster.
	go build -o $(BIN)/ringmaster .

.PHONY: run
run: manifests generate ## Run the operator against the current kubeconfig.
	go run . --leader-elect=false

.PHONY: demo
demo: ## The fleet story: control plane, operator, a ring, four agent servers behind a load balancer resuming through rotations; then all stopped.
	DEMOFLAGS="$(FLEETFLAGS)" hack/demo.sh

##@ Deployment

.PHONY: install
install: manifests ## Install the CRDs into the current kubeconfig's cluster.
	kubectl apply --server-side -f config/crd/bases

.PHONY: uninstall
uninstall: manifests ## Remove the CRDs.
	kubectl delete --ignore-not-found -f config/crd/bases

##@ Tools

.PHONY: envtest
envtest: ## Build kube-apiserver, kubectl and etcd from source (cached); print the KUBEBUILDER_ASSETS directory.
	@hack/envtest.sh

.PHONY: vault
vault: ## Build the Vault server used by the tests (cached; about 12 minutes cold).
	@hack/vault.sh >/dev/null

.PHONY: cert-manager
cert-manager: ## Build cert-manager's controllers for the certificate tests (cached; about 6-9 minutes cold).
	@hack/certmanager.sh >/dev/null

.PHONY: servers
servers: ## Install nginx and HAProxy from Debian's packages where missing, for the sidecar's interop tests (needs root or sudo once).
	@hack/debian.sh nginx haproxy

.PHONY: controller-gen
controller-gen: ## Build controller-gen (cached).
	@hack/gotool.sh controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen $(CONTROLLER_GEN_VERSION) >/dev/null
