# ringmaster — make help lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN := $(CURDIR)/bin
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(BIN)/controller-gen
HELM_VERSION := v3.22.0
HELM := $(BIN)/helm
# The release version, written in internal/version/VERSION only: the
# binaries' --version, the images' tag, the chart's version (without the v)
# and appVersion (a test keeps Chart.yaml and config/samples in step).
VERSION := $(shell cat internal/version/VERSION)
# Tag of the images make images builds: the version, which the chart and
# config/samples use by default, so both start on these images.
IMAGE_TAG ?= $(VERSION)
# cyclonedx-gomod, which writes the images' SBOMs.
CYCLONEDX_GOMOD_VERSION := v1.10.0
CYCLONEDX_GOMOD := $(BIN)/cyclonedx-gomod
# Where make release writes the release.
RELEASE_DIR ?= $(BIN)/release
# Helm built from source assumes Kubernetes v1.20 unless told.
# The Kubernetes version, written in hack/tools/kube/go.mod only (hack/lib.sh
# reads it there too).
KUBE_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" && $$2 ~ /^v/ {sub(/^v/, "", $$2); print $$2; exit}' hack/tools/kube/go.mod)
# Go test flags; e.g. make test-integration PKG=./internal/controller/ TESTFLAGS='-ginkgo.focus "rotates now"'.
TESTFLAGS ?=
# The packages a test target runs; e.g. make test-unit PKG=./internal/keyring/.
PKG ?= ./...
# The real components the integration suites use (each built and cached by hack/).
TOOLS_ENV = KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" RINGMASTER_VAULT="$$(hack/vault.sh)" RINGMASTER_CERT_MANAGER="$$(hack/certmanager.sh)" RINGMASTER_HELM=$(HELM) \
	RINGMASTER_CYCLONEDX_GOMOD=$(CYCLONEDX_GOMOD) RINGMASTER_COSIGN="$$(hack/cosign.sh)" RINGMASTER_COSIGN_KEY="$$(hack/cosign.sh test-key)/cosign.key" RINGMASTER_REGISTRY="$$(hack/registry.sh)"
# Flags of make bench-fleet and make demo, e.g. FLEETFLAGS='-n 8 -clients 32 -tls 1.2';
# go run ./hack/fleet bench -h (or demo -h) lists them.
FLEETFLAGS ?=
# Flags of make deploy, e.g. HELMFLAGS='--set image.pullPolicy=Never' (make images tags the chart's appVersion).
HELMFLAGS ?=
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
manifests: controller-gen ## Generate the CRDs and RBAC from the API markers, and the chart's CRD and RBAC templates from them.
	$(CONTROLLER_GEN) crd rbac:roleName=ringmaster-manager paths="{./api/...,./internal/...}" \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	go run ./hack/chart -crds config/crd/bases -rbac config/rbac/role.yaml -admission config/admission/policy.yaml -pod-admission config/admission/pods.yaml -pod-certificate-admission config/admission/podcertificates.yaml -chart charts/ringmaster

.PHONY: generate
generate: controller-gen ## Generate the deepcopy code of the API types.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: fmt
fmt: ## Run go fmt.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet -tags integration,e2e,cluster ./...

.PHONY: test
test: test-tools manifests generate vet ## Run the unit, integration and end-to-end tests (one go test run; real API server, Vault, cert-manager, nginx, HAProxy, Knot, Prometheus), the images' and the release's, and Caddy's. The README's and CI's test command; make test-cluster runs the chart in a real cluster.
	$(TOOLS_ENV) go test -tags integration,e2e $(PKG) -count=1 -timeout 25m $(TESTFLAGS)
	@$(MAKE) --no-print-directory test-caddy

.PHONY: test-caddy
test-caddy: ## Run the Caddy STEK provider's tests (its own module, ./caddy): builds Caddy with tls.stek.ringmaster and runs two instances on one ring.
	cd caddy && go test ./... -count=1 $(TESTFLAGS)

.PHONY: test-gateways
test-gateways: ## Run the gateway modules' tests, each a Go module of its own: Envoy Gateway's translator on docs/gateways.md's manifests (./gateways/envoygateway), Cilium's agent code serving a ring's cilium projection over SDS (./gateways/cilium).
	cd gateways/envoygateway && go test ./... -count=1 $(TESTFLAGS)
	cd gateways/cilium && go test ./... -count=1 $(TESTFLAGS)

.PHONY: measure-gateways
measure-gateways: servers ## Measure resumption across 3 real HAProxy instances in the ingress controllers' shape through 10 rotations: the ring through the sidecar, HAProxy's own keys, tickets off, side by side (MEASURE lines; docs/gateways.md quotes them).
	go test -tags integration ./cmd/ringmaster-agent/ -run '^TestHAProxyIngressFleet$$' -count=1 -v -args -ingress-rotations=10 | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|MEASURE|Error|error'

.PHONY: test-unit
test-unit: ## Run the pure tests: domain packages, the agent over real TLS, the chart generator. Needs nothing built; seconds.
	go test $(PKG) -count=1 $(TESTFLAGS)

.PHONY: test-integration
test-integration: envtest vault cert-manager servers helm sbom-tool cosign registry ## Run the unit tests and the suites on a real API server, with a real Vault and real cert-manager controllers; and the images' and the release's tests (cross builds, SBOMs, cosign, a registry).
	$(TOOLS_ENV) go test -tags integration $(PKG) -count=1 $(TESTFLAGS)

.PHONY: test-cluster
test-cluster: manifests generate servers helm images cosign cluster-build kube-router ## Run the cluster suite: install the chart into a real single-node cluster and drive a fleet through it, with the fault specs that fit (about 15 min warm; its node, containerd, kube-router and images take about 20 min more to build cold, which is why make test leaves it out). Needs root.
	@$(MAKE) --no-print-directory run-test-cluster

.PHONY: test-faults
test-faults: manifests generate servers helm images cosign cluster-build vault kube-router ## Run the cluster suite's fault specs make test-cluster leaves out for time (containerd restarted, Vault unreachable, helm upgrade, node restart, each during a rotation under load, invariants checked). Needs root.
	@RINGMASTER_VAULT="$$(hack/vault.sh)" $(MAKE) --no-print-directory run-test-cluster CLUSTER_LABELS=faults-long

# The cluster suite's specs that make test-cluster runs: all
# but the long fault specs, which make test-faults runs, and the
# measurements, which make measure-cluster runs.
CLUSTER_LABELS ?= !faults-long && !measure

# The cluster suite runs alone: its cluster and fleet want the machine's 2
# cores, and would slow the timing-sensitive suites beside it. Its cluster
# is stopped afterwards even if the test binary was killed.
.PHONY: run-test-cluster
run-test-cluster:
	status=0; SYNC_FREQUENCY=$(SYNC_FREQUENCY) RINGMASTER_HELM=$(HELM) RINGMASTER_KUBE_ROUTER=$(BIN)/kube-router RINGMASTER_COSIGN="$$(hack/cosign.sh)" RINGMASTER_COSIGN_KEY="$$(hack/cosign.sh test-key)/cosign.key" RINGMASTER_IMAGES=$(BIN)/images RINGMASTER_IMAGE_TAG=$(IMAGE_TAG) go test -tags cluster ./test/cluster/ -count=1 -timeout $(CLUSTER_TIMEOUT) -v -ginkgo.v -ginkgo.label-filter='$(CLUSTER_LABELS)' $(TESTFLAGS) || status=$$?; \
		RINGMASTER_CLUSTER=ringmaster-e2e hack/cluster/down.sh; exit $$status

# The cluster suite's measurements (label measure) are left out of make test-cluster:
# they take about an hour. SYNC_FREQUENCY is the kubelet's (hack/cluster/up.sh).
SYNC_FREQUENCY ?= 10s
CLUSTER_TIMEOUT ?= 30m

.PHONY: measure-cluster
measure-cluster: manifests generate servers helm images cosign cluster-build kube-router ## Measure in the real single-node cluster (root; about an hour), each figure with nudging on and then off (helm upgrade --set nudge.enabled=false), side by side: revoke latency with the suite's kubelet (syncFrequency 10s), then with the kubelet's default (1m) the refresh lag and resumption of a fleet through rotations under the API's default activationDelay, revoke latency again, and confirmation under spec.confirmation. Figures in the log (MEASURE lines).
	@$(MAKE) --no-print-directory run-test-cluster SYNC_FREQUENCY=10s CLUSTER_LABELS='measure && revoke' CLUSTER_TIMEOUT=30m
	@$(MAKE) --no-print-directory run-test-cluster SYNC_FREQUENCY=1m CLUSTER_LABELS='measure' CLUSTER_TIMEOUT=90m

.PHONY: test-e2e
test-e2e: manifests generate envtest vault servers helm ## Run the end-to-end suites on loopback (make test runs them too): control plane, operator binary, a fleet of agent servers under load; and a ring shared by two clusters through Vault.
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" RINGMASTER_VAULT="$$(hack/vault.sh)" RINGMASTER_HELM=$(HELM) go test -tags e2e ./test/e2e/... ./test/multicluster/... -count=1 -v -ginkgo.v $(TESTFLAGS)

.PHONY: bench
bench: ## Run the agent benchmarks and print the ratios against the baselines of the same run.
	@mkdir -p $(BIN)
	go test ./pkg/agent/ -run '^$$' -bench . -benchtime $(BENCHTIME) -count $(BENCHCOUNT) -benchmem | tee $(BIN)/bench.txt | go run ./hack/benchratio

.PHONY: bench-fleet
bench-fleet: envtest servers ## Compare a fleet's resumption and server CPU: ringmaster's staged ring (TLS 1.3 also with X25519 resumption), per-replica keys, shared keys without staging, and nginx with the sidecar or its own keys; TLS 1.3 and 1.2.
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" go run ./hack/fleet bench $(FLEETFLAGS)

# Flags of make bench-http3, e.g. H3FLAGS='-n 4 -clients 8'; go run ./hack/fleet bench-http3 -h lists them.
H3FLAGS ?=

.PHONY: bench-http3
bench-http3: ## Compare HTTP/3 (quic-go) and HTTPS resumption and server CPU per reconnect of agent-backed replicas on one rotating ring against per-replica keys (no control plane: the ring is written into the volumes).
	go run ./hack/fleet bench-http3 $(H3FLAGS)

# Flags of make bench-attack, e.g. ATTACKFLAGS='-scenarios idle,tkr,tkr-small -window 20s'; go run ./hack/attack -h lists them.
ATTACKFLAGS ?=
# The operator build make bench-attack compares this tree's with: a git revision or tag, built from git archive.
# The last release tag by default; BEFORE= measures this tree's alone, e.g. make bench-attack BEFORE=<rev>.
BEFORE ?= $(shell git describe --tags --abbrev=0 2>/dev/null)

.PHONY: bench-attack
bench-attack: envtest ## Measure the operator's memory (RSS and Go heap), running and restarted among them, under a tenant's large objects: 1 MiB pods under a probing ring, TLS Secrets of 15,500 SANs under a CertificatePolicy, oversized request annotations, rings of the most metadata the API takes (each beside small ones, and all at once); this tree's operator beside BEFORE's (the last release tag; BEFORE= for this tree's alone). Reports figures, asserts none.
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" go run ./hack/attack -before '$(BEFORE)' $(ATTACKFLAGS)

# How long make soak runs once its rings are ready, e.g. make soak SOAK_DURATION=1h;
# SOAKFLAGS reach hack/soak (go run ./hack/soak -h lists them), e.g. SOAKFLAGS='-rings 100'.
SOAK_DURATION ?= 5m
SOAKFLAGS ?=

.PHONY: soak
soak: envtest ## Soak the operator: a few hundred rings rotating every minute, a fleet under load, the invariants checked throughout; reports rotations, violations (fails on any), memory and goroutines over time, API requests per rotation, resumption.
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" go run ./hack/soak -duration $(SOAK_DURATION) $(SOAKFLAGS)

# Flags of make bench-scale, e.g. SCALEFLAGS='-rings 10000 -namespaces 100';
# go run ./hack/scale -h lists them.
SCALEFLAGS ?=

.PHONY: bench-scale
bench-scale: envtest ## Measure one operator under many rings (not in make test): time until all are Ready, a new ring's latency during the bulk, RSS and heap, API requests per ring by verb, a rotate-now and a revoke of every ring at once.
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" go run ./hack/scale $(SCALEFLAGS)

.PHONY: helm-lint
helm-lint: helm ## Lint the chart, with its default values and with every option on.
	$(HELM) lint charts/ringmaster --strict --kube-version $(KUBE_VERSION)
	$(HELM) lint charts/ringmaster --strict --kube-version $(KUBE_VERSION) \
		--set metrics.serviceMonitor.enabled=true,metrics.tls.certManager.enabled=true,metrics.prometheusRule.enabled=true,podDisruptionBudget.enabled=true,grafana.dashboards.enabled=true

.PHONY: chart-dryrun
chart-dryrun: helm envtest ## Validate the rendered chart with a server-side dry run against the local control plane.
	hack/chart-dryrun.sh

.PHONY: lint
lint: golangci-kal ## Run golangci-lint (.golangci.yml) on every build tag's files, and kube-api-linter (.golangci-kal.yml) on api/: one build of golangci-lint, with the kube-api-linter plugin compiled in.
	$(BIN)/golangci-kal run --allow-parallel-runners --build-tags integration,e2e,cluster ./...
	$(BIN)/golangci-kal run --allow-parallel-runners -c .golangci-kal.yml ./api/...

# The tools of make verify and of make test, each built (or installed) by a
# script of its own into the tool cache, under a lock of its own: built side
# by side, so that on a cold machine one tool's downloads and link overlap
# another's compiles.
VERIFY_TOOLS = controller-gen golangci-kal helm envtest
TEST_TOOLS = envtest vault cert-manager servers helm sbom-tool cosign registry

.PHONY: verify-tools test-tools
verify-tools: ## Build make verify's tools side by side (cached).
	@$(MAKE) --no-print-directory -j4 $(VERIFY_TOOLS)

test-tools: ## Build make test's tools side by side (cached).
	@$(MAKE) --no-print-directory -j4 $(TEST_TOOLS)

.PHONY: verify
verify: verify-tools manifests generate fmt lint helm-lint chart-dryrun ## Regenerate everything, lint the code and the chart, dry-run the chart, and fail if the tree changed or holds untracked files.
	go mod tidy
	@git diff --exit-code || { echo "generated files are stale: run make manifests generate fmt and commit"; exit 1; }
	@untracked=$$(git ls-files --others --exclude-standard); [ -z "$$untracked" ] || { echo "untracked files (generated and not committed?):"; echo "$$untracked"; exit 1; }

##@ Build

.PHONY: build
build: ## Build the operator into bin/ringmaster.
	go build -o $(BIN)/ringmaster .

.PHONY: build-plugin
build-plugin: ## Build the kubectl plugin into bin/kubectl-ringmaster; with bin/ on the PATH, run kubectl ringmaster.
	go build -o $(BIN)/kubectl-ringmaster ./cmd/kubectl-ringmaster

.PHONY: images
images: sbom-tool ## Build the operator, ringmaster-agent (sidecar) and examples/server images without Docker: reproducible OCI layouts in tar files in bin/images, each one image index for linux/amd64 and linux/arm64 with an SBOM per platform, tagged IMAGE_TAG (default: VERSION, which the chart and config/samples use).
	go run ./hack/images -out $(BIN)/images -tag $(IMAGE_TAG) -sbom $(CYCLONEDX_GOMOD)

.PHONY: release
release: helm sbom-tool cosign registry ## Build and sign a release into RELEASE_DIR (bin/release): image layouts with indexes, SBOMs and signatures, the chart .tgz and its signature, cosign.pub, SHA256SUMS; prints versions and digests. Signs with COSIGN_KEY (COSIGN_PASSWORD), else the test key.
	RINGMASTER_HELM=$(HELM) RINGMASTER_CYCLONEDX_GOMOD=$(CYCLONEDX_GOMOD) hack/release.sh $(RELEASE_DIR)

.PHONY: run
run: manifests generate ## Run the operator against the current kubeconfig.
	go run . --leader-elect=false --cluster-resource-namespace ringmaster-system --metrics-insecure --metrics-bind-address 127.0.0.1:8080

.PHONY: demo
demo: ## The fleet story: control plane, operator, a ring, four agent servers behind a load balancer resuming through rotations; then all stopped.
	DEMOFLAGS="$(FLEETFLAGS)" hack/demo.sh

##@ Deployment

.PHONY: install
install: manifests ## Install the CRDs into the current kubeconfig's cluster.
	kubectl apply --server-side -f config/crd/bases

.PHONY: deploy
deploy: helm ## Install or upgrade the chart into the current kubeconfig's cluster (HELMFLAGS, e.g. --set image.pullPolicy=Never).
	$(HELM) upgrade --install ringmaster charts/ringmaster --namespace ringmaster-system --create-namespace --wait $(HELMFLAGS)

.PHONY: undeploy
undeploy: helm ## Uninstall the chart (the CRDs stay).
	$(HELM) uninstall ringmaster --namespace ringmaster-system --wait

.PHONY: sample-cert
sample-cert: ## Make the web-tls Secret config/samples' Deployments mount, without cert-manager (openssl; NAMESPACE, default kubectl's); its CA goes to bin/sample-ca.crt.
	hack/sample-cert.sh $(NAMESPACE)

.PHONY: uninstall
uninstall: manifests ## Remove the CRDs.
	kubectl delete --ignore-not-found -f config/crd/bases

##@ Single-node cluster (root)

.PHONY: cluster
cluster: images ## Start a real single-node cluster in network namespace ringmaster-node, with its registry, and push the images to it (bin/ringmaster-node/kubeconfig, bin/ringmaster-node/registry).
	RINGMASTER_LOADING=1 hack/cluster/up.sh >/dev/null
	go run ./hack/images push -registry "$$(cat $(BIN)/ringmaster-node/registry)" $(BIN)/images/*.tar

.PHONY: cluster-down
cluster-down: ## Stop the single-node cluster and remove everything it created.
	hack/cluster/down.sh

.PHONY: cluster-build
cluster-build: ## Build kubelet, kube-controller-manager, kube-scheduler, kube-proxy, containerd and the registry (cached), and install runc, CNI plugins, iptables and conntrack from Debian if missing.
	@hack/cluster/build.sh >/dev/null

##@ Tools

.PHONY: envtest
envtest: ## Build kube-apiserver, kubectl and etcd from source (cached); print the KUBEBUILDER_ASSETS directory.
	@hack/envtest.sh

.PHONY: vault
vault: ## Build the Vault server used by the tests: Vault's minimal build and Kubernetes auth (cached; about 10 minutes cold, empty module cache included).
	@hack/vault.sh >/dev/null

.PHONY: cert-manager
cert-manager: ## Build cert-manager's controllers for the certificate tests (cached; about 6-9 minutes cold).
	@hack/certmanager.sh >/dev/null

.PHONY: helm
helm: ## Build Helm (cached).
	@hack/gotool.sh helm helm.sh/helm/v3/cmd/helm $(HELM_VERSION) >/dev/null

.PHONY: sbom-tool
sbom-tool: ## Build cyclonedx-gomod, which writes the images' SBOMs (cached).
	@hack/gotool.sh cyclonedx-gomod github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod $(CYCLONEDX_GOMOD_VERSION) >/dev/null

.PHONY: cosign
cosign: ## Build cosign, which signs and verifies the images and the chart (cached; hack/cosign.sh test-key makes the tests' key).
	@hack/cosign.sh >/dev/null

.PHONY: registry
registry: ## Build the CNCF distribution registry, the single-node cluster's and make release's (cached).
	@hack/registry.sh >/dev/null

.PHONY: golangci-kal
golangci-kal: ## Build golangci-lint with the kube-api-linter plugin (hack/tools/golangci-kal; cached).
	@hack/golangci-kal.sh >/dev/null


.PHONY: servers
servers: ## Install nginx, HAProxy, Prometheus and Knot DNS from Debian's packages where missing, for the sidecar's interop tests, the alert-rule tests and ECH's DNS publishing (needs root or sudo once).
	@hack/debian.sh nginx haproxy prometheus knot

.PHONY: kube-router
kube-router: ## Build kube-router (cached) and install Debian's ipset: the NetworkPolicy controller the cluster suite runs to enforce config/samples' NetworkPolicy.
	@hack/kube-router.sh >/dev/null

.PHONY: controller-gen
controller-gen: ## Build controller-gen (cached).
	@hack/gotool.sh controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen $(CONTROLLER_GEN_VERSION) >/dev/null
