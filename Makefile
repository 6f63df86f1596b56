# Fresh machine: `make run` (the webhook, embedded default config, self-generated
# certificates) and `make test` (the whole suite). Both create .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
HOST   ?= 127.0.0.1
PORT   ?= 8443
GO     ?= go
GO_BIN := $(shell command -v $(GO) 2>/dev/null)
# The harness's binaries carry no symbol table or DWARF (-s -w): a link takes about 40% less time (kubectl: 3.3 s
# against 5.6 s of CPU), which every fresh clone pays for every binary; a panic's stack trace is unchanged.
GO_LDFLAGS ?= -s -w
AS_ROOT := $(filter 0,$(shell id -u))

.PHONY: run test dist docs bench bench-webhook bench-apiserver bench-scale bench-review-size install clean testcluster testcluster-coscheduling testcluster-volcano noop-webhook e2e helm descheduler

# One resolution for everything: the development and test install, the image and the wheel tests all install
# exactly constraints.txt (every direct and transitive dependency, the build backend included), so what a
# contributor tests is what ships and no upstream release turns main red without a commit. PIP_CONSTRAINT reaches
# the isolated build environment of the editable install too. tests/test_webhook_packaging.py fails when an
# installed distribution differs from its pin.
PIN := PIP_CONSTRAINT=$(CURDIR)/constraints.txt PIP_BUILD_CONSTRAINT=$(CURDIR)/constraints.txt
$(STAMP): setup.cfg pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIN) $(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]' setuptools wheel
	touch $(STAMP)

install: $(STAMP)

# Moving the pins on is a deliberate step (docs/testing.md, "Dependencies"): resolve the newest release of
# everything setup.cfg allows into constraints.txt and the image's hashed requirements from it (requirements/), then
# run the whole suite on them; commit the files when it passes.
.PHONY: constraints test-latest
constraints:
	$(PYTHON) tools/pin_constraints.py --out constraints.txt
	$(MAKE) image-requirements
	$(MAKE) test

# The newest releases setup.cfg allows, unpinned, in their own venv (.venv-latest): the suite that users of
# `pip install policylib` meet tomorrow. Advisory, not part of `make test` or CI: it shows the next break before
# users see it. PYTEST_ARGS as for `make test` (default: the unit tests).
LATEST := .venv-latest
test-latest:
	rm -rf $(LATEST) && $(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip -e '.[test]' setuptools wheel
	mkdir -p build && $(LATEST)/bin/python -m pip freeze --all --exclude-editable > build/latest-freeze.txt
	$(LATEST)/bin/python tools/pin_constraints.py --compare build/latest-freeze.txt
	POLICYLIB_UNPINNED=1 $(LATEST)/bin/python -m pytest $(or $(PYTEST_ARGS),tests --ignore=tests/e2e)

run: $(STAMP)
	$(BIN)/python -m webhook run-local --cert-dir certs --host $(HOST) --port $(PORT)

# Every component of the end-to-end harness is built here, before pytest starts (never inside a test's
# timeout), wherever go is on PATH; elsewhere the tests that need one skip with that reason. Each build
# is a file target on its module's go.mod/go.sum, its own Go sources and the go binary: nothing to do
# when warm (`make -B harness` forces them). Where make runs as root, the image too (`make image`, below).
test: $(STAMP) $(if $(GO_BIN),harness) $(if $(AS_ROOT),image)
	$(BIN)/python tools/test_streams.py $(PYTEST_ARGS)

# A release: the sdist, and the wheel built from it, by python -m build in an isolated environment
# (the build backend at constraints.txt's pins), then twine check. The version is setup.cfg's alone.
# tests/test_distribution.py does the same in a temporary directory and installs the wheel.
dist: $(STAMP)
	rm -rf dist
	PIP_CONSTRAINT=$(CURDIR)/constraints.txt $(BIN)/python -m build --outdir dist .
	$(BIN)/python -m twine check --strict dist/*

# The reference pages generated from the code (docs/reference/), then the site into site/, strictly
# (tests/test_docs.py does the same in a temporary directory, and fails on a stale page).
docs: $(STAMP)
	$(BIN)/python tools/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(BIN)/python bench/bench_spread.py

# Load over TLS against a local webhook; uses `hey` (apt-get install hey) when present.
bench-webhook: $(STAMP)
	$(BIN)/python bench/bench_webhook.py

# Time per review against the object's size: every family's largest objects (3 MiB on one list), in-process and
# through `webhook serve` over TLS; BENCH_ARGS="--repo . --repo /tmp/before" for a before/after, "--load" for the
# two-client run, "--memory" for the largest review's peak RSS (docs/benchmarks.md).
bench-review-size: $(STAMP)
	$(BIN)/python bench/bench_review_size.py $(BENCH_ARGS)

# Through the harness's real API server: none / a Go no-op webhook / policylib (/ Kyverno when
# KYVERNO=path/to/kyverno). Builds what it needs; docs/performance.md has the figures.
bench-apiserver: $(STAMP) testcluster noop-webhook
	$(BIN)/python bench/bench_apiserver.py $(BENCH_ARGS)

# Memory and time as the cluster grows (controller, webhook HPA cache, plan --cluster), through the
# harness's real API server; BENCH_ARGS="--sizes 1000,10000,50000" (docs/figures.md, "Scale").
bench-scale: $(STAMP) testcluster
	$(BIN)/python bench/bench_scale.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(LATEST) *.egg-info .pytest_cache .hypothesis site dist build

# The end-to-end harness: a control plane built from Go modules (docs/e2e.md). The first build
# compiles kube-apiserver, kube-controller-manager and kube-scheduler: many minutes on 2 cores
# (measured: docs/figures.md). Two Kubernetes minors (`testcluster --kubernetes`): the default one's
# binaries in e2e/bin/, each other minor's (K8S_MINORS) in e2e/bin/MINOR/, and only what a minor needs
# there: testcluster and kubectl, and the kubelet where the real node runs.
K8S_MINORS := 1.36
HARNESS := testcluster $(addprefix testcluster-,$(K8S_MINORS)) noop-webhook helm trainer-crd testcluster-coscheduling \
	testcluster-volcano testcluster-training-operator testcluster-mpi-operator testcluster-koordinator descheduler \
	cert-manager jobset-crd testcluster-trainer testcluster-lws $(if $(AS_ROOT),testcluster-real-node $(addprefix testcluster-real-node-,$(K8S_MINORS)))
.PHONY: harness
harness: $(HARNESS)

# What a build depends on: its module's go.mod and go.sum ($(1)), the .go files under $(2), the go binary.
gosrc = $(1)/go.mod $(1)/go.sum $(shell find $(2) -name '*.go' 2>/dev/null) $(GO_BIN)

# A Kubernetes build of the module in the current directory, $(1) its go.mod (`-modfile=...` for another minor's):
# `$$ld`, the version flags from the module's k8s.io/kubernetes release (what `kubectl version` and the components
# report), then `go build $(1) -ldflags ...` with the rest of the line.
k8s_build = v=$$($(GO) list $(1) -m -f '{{.Version}}' k8s.io/kubernetes) && m=$${v\#v} && \
	  ld="-X k8s.io/component-base/version.gitVersion=$$v -X k8s.io/component-base/version.gitMajor=$${m%%.*}" && \
	  ld="$$ld -X k8s.io/component-base/version.gitMinor=$$(echo $$m | cut -d. -f2) -X k8s.io/client-go/pkg/version.gitVersion=$$v" && \
	  $(GO) build $(1) -ldflags "$(GO_LDFLAGS) $$ld"

# The default minor's control plane (testcluster) and kubectl, from e2e/go.mod; one `go build` of both, so their
# links overlap.
testcluster: e2e/bin/testcluster e2e/bin/kubectl
e2e/bin/testcluster e2e/bin/kubectl &: $(call gosrc,e2e,e2e/cmd/testcluster)
	cd e2e && $(call k8s_build,) -o bin/ ./cmd/testcluster k8s.io/kubernetes/cmd/kubectl
	touch e2e/bin/testcluster e2e/bin/kubectl

# Another minor's: the same sources against e2e/go.k8s-MINOR.mod (the e2e module at that release's modules), into
# e2e/bin/MINOR/; e2e/bin/testcluster --kubernetes MINOR runs it.
define k8s_minor
.PHONY: testcluster-$(1) kubelet-$(1) testcluster-real-node-$(1)
testcluster-$(1): e2e/bin/$(1)/testcluster e2e/bin/$(1)/kubectl
e2e/bin/$(1)/testcluster e2e/bin/$(1)/kubectl &: e2e/go.k8s-$(1).mod e2e/go.k8s-$(1).sum $(filter-out e2e/go.mod e2e/go.sum,$(call gosrc,e2e,e2e/cmd/testcluster))
	mkdir -p e2e/bin/$(1) && cd e2e && $$(call k8s_build,-modfile=go.k8s-$(1).mod) -o bin/$(1)/ ./cmd/testcluster \
	  k8s.io/kubernetes/cmd/kubectl
	touch e2e/bin/$(1)/testcluster e2e/bin/$(1)/kubectl
kubelet-$(1): e2e/bin/$(1)/kubelet
e2e/bin/$(1)/kubelet: e2e/kubelet/go.k8s-$(1).mod e2e/kubelet/go.k8s-$(1).sum $(GO_BIN)
	cd e2e/kubelet && $$(call k8s_build,-modfile=go.k8s-$(1).mod) -o ../bin/$(1)/kubelet k8s.io/kubernetes/cmd/kubelet
	touch $$@
# The real node of that minor: its kubelet, with what every minor's real node shares.
testcluster-real-node-$(1): testcluster-$(1) testcluster-real-node kubelet-$(1)
endef
$(foreach m,$(K8S_MINORS),$(eval $(call k8s_minor,$(m))))

# The floor of bench/bench_apiserver.py: a webhook on Go's standard library that admits everything
# unchanged (e2e/cmd/noopwebhook; seconds to build, no dependency).
noop-webhook: e2e/bin/noopwebhook
e2e/bin/noopwebhook: $(call gosrc,e2e,e2e/cmd/noopwebhook)
	cd e2e && $(GO) build -ldflags "$(GO_LDFLAGS)" -o bin/noopwebhook ./cmd/noopwebhook
	touch $@

# `testcluster --coscheduling` runs a second scheduler: kube-scheduler with the Coscheduling plugin,
# from the sigs.k8s.io/scheduler-plugins module in e2e/coscheduling (its own module: Kubernetes 1.34).
# It reports the Kubernetes version it is built on (its compatibility checks need one).
testcluster-coscheduling: testcluster e2e/bin/scheduler-plugins-scheduler
e2e/bin/scheduler-plugins-scheduler: $(call gosrc,e2e/coscheduling,e2e/coscheduling)
	cd e2e/coscheduling && v=$$($(GO) list -m -f '{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' k8s.io/kubernetes) && \
	  m=$${v#v} && ld="-X k8s.io/component-base/version.gitVersion=$$v -X k8s.io/component-base/version.gitMajor=$${m%%.*}" && \
	  ld="$$ld -X k8s.io/component-base/version.gitMinor=$$(echo $$m | cut -d. -f2)" && \
	  $(GO) build -ldflags "$(GO_LDFLAGS) $$ld" -o ../bin/scheduler-plugins-scheduler sigs.k8s.io/scheduler-plugins/cmd/scheduler
	touch $@

# Volcano's scheduler, controller manager and admission webhooks for `testcluster --volcano`, from
# the volcano.sh/volcano module (e2e/volcano/go.mod says which release and why), with the CRDs and
# ValidatingAdmissionPolicies of that release's module. Its own module (Kubernetes 1.34), so
# separate binaries in e2e/bin/volcano/ that testcluster starts. Many minutes cold on 2 cores.
testcluster-volcano: testcluster e2e/bin/volcano/vc-scheduler
e2e/bin/volcano/vc-scheduler: $(call gosrc,e2e/volcano,e2e/volcano)
	cd e2e/volcano && v=$$($(GO) list -m -f '{{.Version}}' volcano.sh/volcano) && \
	  for c in scheduler controller-manager webhook-manager; do \
	    CGO_ENABLED=0 $(GO) build -ldflags "$(GO_LDFLAGS) -X volcano.sh/volcano/pkg/version.Version=$$v" \
	      -o ../bin/volcano/vc-$$c volcano.sh/volcano/cmd/$$c || exit 1; done && \
	  src=$$($(GO) list -m -f '{{.Dir}}' volcano.sh/volcano) && \
	  rm -rf ../bin/volcano/crd ../bin/volcano/policy && mkdir -p ../bin/volcano/crd ../bin/volcano/policy && \
	  install -m 644 $$src/config/crd/volcano/bases/*.yaml ../bin/volcano/crd/ && \
	  install -m 644 $$src/installer/helm/chart/volcano/policy/*.yaml ../bin/volcano/policy/
	touch $@

# helm, for the chart's tests (charts/policylib; docs/helm.md): its own module, e2e/helm/go.mod pins the
# release. About 3 minutes cold on 2 cores, nothing to do warm. `make test` builds it first.
helm: e2e/bin/helm
e2e/bin/helm: $(call gosrc,e2e/helm,e2e/helm)
	cd e2e/helm && v=$$($(GO) list -m -f '{{.Version}}' helm.sh/helm/v3) && \
	  k=$$($(GO) list -m -f '{{.Version}}' k8s.io/client-go) && k=$${k#v0.} && \
	  ld="-X helm.sh/helm/v3/internal/version.version=$$v -X helm.sh/helm/v3/internal/version.metadata=" && \
	  for p in pkg/lint/rules pkg/chartutil; do \
	    ld="$$ld -X helm.sh/helm/v3/$$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$$p.k8sVersionMinor=$${k%%.*}"; done && \
	  $(GO) build -ldflags "$(GO_LDFLAGS) $$ld" -o ../bin/helm helm.sh/helm/v3/cmd/helm
	touch $@

# Kubeflow Trainer's TrainJob CRD (trainer.kubeflow.org/v1alpha1) from the github.com/kubeflow/trainer/v2 module
# e2e/trainer/go.mod pins (v2.3.0, its manifests/base/crds), for the tests that send a TrainJob through the API server
# and the webhook without running Trainer. A module download, no build.
.PHONY: trainer-crd
trainer-crd: e2e/bin/trainer/crd/trainer.kubeflow.org_trainjobs.yaml
e2e/bin/trainer/crd/trainer.kubeflow.org_trainjobs.yaml: e2e/trainer/go.mod e2e/trainer/go.sum $(GO_BIN)
	d=$$(cd e2e/trainer && $(GO) mod download -json github.com/kubeflow/trainer/v2 | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
	  test -n "$$d" && mkdir -p $(@D) && install -m 644 $$d/manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml $@

# The descheduler (sigs.k8s.io/descheduler; e2e/descheduler/go.mod pins v0.36.0 and repeats its kube-openapi
# replace) for the repair profile's end-to-end test (docs/concepts/deployments.md, tests/e2e/test_scaledown.py).
# Measured cold, modules downloaded too: 17 min wall (3m53s user) on 2 busy cores; nothing to do warm.
descheduler: e2e/bin/descheduler
e2e/bin/descheduler: $(call gosrc,e2e/descheduler,e2e/descheduler)
	cd e2e/descheduler && v=$$($(GO) list -m -f '{{.Version}}' sigs.k8s.io/descheduler) && \
	  $(GO) build -ldflags "$(GO_LDFLAGS) -X sigs.k8s.io/descheduler/pkg/version.version=$$v" -o ../bin/descheduler \
	    sigs.k8s.io/descheduler/cmd/descheduler
	touch $@

# cert-manager (github.com/cert-manager/cert-manager; e2e/cert-manager/go.mod pins the release) for
# tests/e2e/test_real_node_certmanager.py: its controller and cainjector, from the small mains in
# e2e/cert-manager (the release's own mains are nested modules the module proxy does not serve), run out of
# cluster by the test; the CRDs rendered from the release's chart (deploy/charts/cert-manager in its module,
# crds.enabled=true, as its cert-manager.crds.yaml is made) by e2e/bin/helm (docs/e2e.md).
.PHONY: cert-manager
cert-manager: e2e/bin/cert-manager/controller
e2e/bin/cert-manager/controller e2e/bin/cert-manager/cainjector &: $(call gosrc,e2e/cert-manager,e2e/cert-manager) | e2e/bin/helm
	cd e2e/cert-manager && $(GO) build -ldflags "$(GO_LDFLAGS)" -o ../bin/cert-manager/ ./controller ./cainjector && \
	  d=$$($(GO) list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)/deploy/charts/cert-manager && \
	  mkdir -p ../bin/cert-manager/crd && ../bin/helm template cert-manager $$d --namespace cert-manager \
	    --set crds.enabled=true $$(cd $$d && printf -- '--show-only %s ' templates/crd-*.yaml) \
	    > ../bin/cert-manager/crd/cert-manager.crds.yaml
	touch e2e/bin/cert-manager/controller e2e/bin/cert-manager/cainjector

# JobSet's CRD (jobset.x-k8s.io/v1alpha2) from the sigs.k8s.io/jobset module e2e/trainer/go.mod pins (v0.12.0, its
# config/components/crd/bases), for the tests that send a JobSet through the API server without running its
# controller. A module download, no build: under a second warm.
.PHONY: jobset-crd
jobset-crd: e2e/bin/jobset/crd/jobset.x-k8s.io_jobsets.yaml
e2e/bin/jobset/crd/jobset.x-k8s.io_jobsets.yaml: e2e/trainer/go.mod e2e/trainer/go.sum $(GO_BIN)
	d=$$(cd e2e/trainer && $(GO) mod download -json sigs.k8s.io/jobset | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
	  test -n "$$d" && mkdir -p $(@D) && install -m 644 $$d/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml $@

# Kubeflow Trainer v2's controller manager and JobSet's controller for `testcluster --trainer` / `--jobset`, from
# the github.com/kubeflow/trainer/v2 and sigs.k8s.io/jobset modules in e2e/trainer (one module, so the libraries
# both share compile once), with Trainer's CRDs (TrainJob, TrainingRuntime, ClusterTrainingRuntime:
# manifests/base/crds) and JobSet's (config/components/crd/bases) into e2e/bin/trainer/crd/. Cold: about
# 4 minutes of CPU on 2 cores (docs/figures.md); nothing to do warm.
.PHONY: testcluster-trainer
testcluster-trainer: testcluster e2e/bin/trainer/trainer-controller-manager
e2e/bin/trainer/trainer-controller-manager e2e/bin/trainer/jobset &: $(call gosrc,e2e/trainer,e2e/trainer)
	cd e2e/trainer && \
	  $(GO) build -ldflags "$(GO_LDFLAGS)" -o ../bin/trainer/ github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager \
	    sigs.k8s.io/jobset && \
	  t=$$($(GO) list -m -f '{{.Dir}}' github.com/kubeflow/trainer/v2) && j=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/jobset) && \
	  mkdir -p ../bin/trainer/crd && \
	  install -m 644 $$t/manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml \
	    $$t/manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml \
	    $$t/manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml \
	    $$j/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml ../bin/trainer/crd/
	touch e2e/bin/trainer/trainer-controller-manager e2e/bin/trainer/jobset

# LeaderWorkerSet's manager for `testcluster --lws` (leaderworkerset.x-k8s.io/v1: its controllers and the webhooks
# that default an LWS and label its pods), from the sigs.k8s.io/lws module e2e/lws/go.mod pins (v0.9.0: the module
# proxy refuses v0.10.0's zip), with its version variables set to the release's tag, commit and tag date (upstream's
# Makefile sets them from git) instead of "v0.0.0-main"; its CRDs (config/crd/bases, without the kustomize conversion
# patch: one served version needs none) into e2e/bin/lws/crd/ and its webhook manifests (config/webhook/
# manifests.yaml, which testcluster registers by URL) into e2e/bin/lws/webhook/. Cold and warm: docs/figures.md.
.PHONY: testcluster-lws
testcluster-lws: testcluster e2e/bin/lws/lws-manager
e2e/bin/lws/lws-manager: $(call gosrc,e2e/lws,e2e/lws)
	cd e2e/lws && v=$$($(GO) list -m -f '{{.Version}}' sigs.k8s.io/lws) && \
	  t=$$($(GO) list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' sigs.k8s.io/lws) && \
	  h=$$($(GO) mod download -json sigs.k8s.io/lws@$$v | sed -n 's/^\t\t"Hash": "\(.*\)",$$/\1/p') && test -n "$$h" && \
	  p=sigs.k8s.io/lws/pkg/version && mkdir -p ../bin/lws && \
	  $(GO) build -ldflags "$(GO_LDFLAGS) -X $$p.GitVersion=$$v -X $$p.GitCommit=$$h -X $$p.BuildDate=$$t" \
	    -o ../bin/lws/lws-manager sigs.k8s.io/lws/cmd && \
	  src=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/lws) && \
	  rm -rf ../bin/lws/crd ../bin/lws/webhook && mkdir -p ../bin/lws/crd ../bin/lws/webhook && \
	  install -m 644 $$src/config/crd/bases/*.yaml ../bin/lws/crd/ && \
	  install -m 644 $$src/config/webhook/manifests.yaml ../bin/lws/webhook/
	touch $@

e2e: $(STAMP) testcluster $(addprefix testcluster-,$(K8S_MINORS))
	$(BIN)/python -m pytest tests/e2e $(PYTEST_ARGS)

# Kubeflow training-operator (v1 API: TFJob, PyTorchJob) for `testcluster --training-operator`, from the
# github.com/kubeflow/training-operator module in e2e/training-operator (its own module), with the CRDs
# of that release's module (manifests/base/crds). About 4 minutes cold on 2 cores.
.PHONY: testcluster-training-operator
testcluster-training-operator: testcluster e2e/bin/training-operator/training-operator
e2e/bin/training-operator/training-operator: $(call gosrc,e2e/training-operator,e2e/training-operator)
	cd e2e/training-operator && \
	  $(GO) build -ldflags "$(GO_LDFLAGS)" -o ../bin/training-operator/training-operator github.com/kubeflow/training-operator/cmd/training-operator.v1 && \
	  src=$$($(GO) list -m -f '{{.Dir}}' github.com/kubeflow/training-operator) && \
	  rm -rf ../bin/training-operator/crd && mkdir -p ../bin/training-operator/crd && \
	  install -m 644 $$src/manifests/base/crds/kubeflow.org_tfjobs.yaml $$src/manifests/base/crds/kubeflow.org_pytorchjobs.yaml \
	    ../bin/training-operator/crd/
	touch $@

# The MPI Operator (MPIJob kubeflow.org/v2beta1) for `testcluster --mpi-operator`: its own controller
# from the github.com/kubeflow/mpi-operator module, run by e2e/mpi-operator/main.go (its cmd serves
# /healthz on the fixed port 8080), with that release's MPIJob CRD. About 5 minutes cold on 2 cores.
.PHONY: testcluster-mpi-operator
testcluster-mpi-operator: testcluster e2e/bin/mpi-operator/mpi-operator
e2e/bin/mpi-operator/mpi-operator: $(call gosrc,e2e/mpi-operator,e2e/mpi-operator)
	cd e2e/mpi-operator && \
	  $(GO) build -ldflags "$(GO_LDFLAGS)" -o ../bin/mpi-operator/mpi-operator . && \
	  src=$$($(GO) list -m -f '{{.Dir}}' github.com/kubeflow/mpi-operator) && \
	  rm -rf ../bin/mpi-operator/crd && mkdir -p ../bin/mpi-operator/crd && \
	  install -m 644 $$src/manifests/base/kubeflow.org_mpijobs.yaml ../bin/mpi-operator/crd/
	touch $@

# koord-scheduler for `testcluster --koordinator`, from the github.com/koordinator-sh/koordinator module
# in e2e/koordinator (its own module, with Koordinator's own replace block: Kubernetes 1.35), with every
# CRD of that release (config/crd/bases: its informers watch them). About 8 minutes cold on 2 cores.
.PHONY: testcluster-koordinator
testcluster-koordinator: testcluster e2e/bin/koordinator/koord-scheduler
e2e/bin/koordinator/koord-scheduler: $(call gosrc,e2e/koordinator,e2e/koordinator)
	cd e2e/koordinator && \
	  $(GO) build -ldflags "$(GO_LDFLAGS)" -o ../bin/koordinator/koord-scheduler github.com/koordinator-sh/koordinator/cmd/koord-scheduler && \
	  src=$$($(GO) list -m -f '{{.Dir}}' github.com/koordinator-sh/koordinator) && \
	  rm -rf ../bin/koordinator/crd && mkdir -p ../bin/koordinator/crd && \
	  install -m 644 $$src/config/crd/bases/*.yaml ../bin/koordinator/crd/
	touch $@

# The real node (`testcluster --real-node`, docs/e2e.md): Debian's container runtime and CNI plugins, installed
# once (apt-get update only when one is missing; nothing to do when all are there), ...
NODE_PACKAGES := containerd runc containernetworking-plugins iproute2 mount
.PHONY: node-packages
node-packages:
	@missing=$$(for p in $(NODE_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -qx 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then echo "apt-get install" $$missing; \
	  apt-get -o DPkg::Lock::Timeout=600 update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $$missing; fi

# ... the kubelet at the control plane's release, from k8s.io/kubernetes/cmd/kubelet (e2e/kubelet: its own module),
# and the node's sandbox ("pause") image: e2e/cmd/pause, a static binary that waits for SIGTERM, packed by
# e2e/cmd/imagepack as a one-layer image archive that testcluster imports into its containerd.
.PHONY: kubelet pause-image testcluster-real-node
kubelet: e2e/bin/kubelet
e2e/bin/kubelet: $(call gosrc,e2e/kubelet,e2e/kubelet)
	cd e2e/kubelet && $(call k8s_build,) -o ../bin/kubelet k8s.io/kubernetes/cmd/kubelet
	touch $@
pause-image: e2e/bin/pause
e2e/bin/pause: $(call gosrc,e2e,e2e/cmd/pause)
	cd e2e && CGO_ENABLED=0 $(GO) build -ldflags "$(GO_LDFLAGS)" -o bin/pause ./cmd/pause
	touch $@

# Everything `testcluster --real-node` needs. Part of `make test` only where make runs as root (running
# containers needs root; elsewhere the real-node tests skip with that reason).
testcluster-real-node: testcluster node-packages kubelet pause-image

# The webhook/controller image without a registry (docs/install.md, "The image without a registry"): the server's
# install on Debian 13's python3, what the Dockerfile builds where a registry is reachable. A Debian root filesystem
# from Debian's packages (mmdebstrap: minbase, the variant of debian:trixie-slim, with IMAGE_DEBIAN_PACKAGES, then
# tools/image_debian.py removes every package the server never runs), requirements/image.txt and the project's wheel
# installed hash-checked for the image's Python (tools/image_requirements.py --install), finished by the image's own
# python3 (tools/image_site.py: kubernetes.aio out, bytecode compiled), and the Dockerfile's USER, WORKDIR, ENV,
# EXPOSE, ENTRYPOINT and CMD, written as an image archive that docker load, podman load, kind load image-archive and
# ctr images import read. The Dockerfile installs the same packages and runs the same two scripts (tests/test_image.py).
VERSION       := $(shell sed -n 's/^version = //p' setup.cfg)
IMAGE         ?= policylib-webhook:$(VERSION)
IMAGE_ARCHIVE ?= dist/policylib-webhook-$(VERSION).tar
# Debian's current stable and its python3; libstdc++6: the C++ runtime greenlet's manylinux wheel links.
DEBIAN_SUITE  := trixie
IMAGE_DEBIAN_PACKAGES := python3,python-is-python3,libstdc++6
IMAGE_SITE    := usr/local/lib/python3.13/dist-packages
# The Debian archive this machine's apt uses: its sources file, read as the mirror list with this machine's release
# replaced by DEBIAN_SUITE.
DEBIAN_SOURCES ?= $(firstword $(wildcard /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list))
HOST_CODENAME  := $(shell . /etc/os-release 2>/dev/null && echo $$VERSION_CODENAME)
# chroot, for the image's own python3 (root; elsewhere in a user namespace, as mmdebstrap's unshare mode)
IMAGE_CHROOT  := $(if $(AS_ROOT),chroot,unshare --map-root-user chroot)
.PHONY: image image-packages image-requirements
image-packages:
	@dpkg-query -W -f='$${Status}\n' mmdebstrap 2>/dev/null | grep -qx 'install ok installed' || { \
	  apt-get -o DPkg::Lock::Timeout=600 update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends mmdebstrap; }
image: $(IMAGE_ARCHIVE)
# The hashed requirements the image installs, from setup.cfg, pyproject.toml and constraints.txt (downloads the
# wheels to hash them; `make constraints` runs it too). tests/test_image.py fails when they no longer match.
image-requirements: $(STAMP)
	$(BIN)/python tools/image_requirements.py --write
# The Debian part, made once (it changes with this recipe or tools/image_debian.py: `rm build/image-base.tar` to
# refresh the packages). This machine's resolv.conf and hostname, which mmdebstrap copies in, emptied: the container
# runtime provides both.
build/image-base.tar: tools/image_debian.py | image-packages
	mkdir -p build
	sed -E 's/\b$(HOST_CODENAME)\b/$(DEBIAN_SUITE)/g' $(DEBIAN_SOURCES) > build/image-debian.sources
	mmdebstrap --quiet --format=tar --variant=minbase --include=$(IMAGE_DEBIAN_PACKAGES) \
	  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
	  --dpkgopt='path-exclude=/usr/share/locale/*' \
	  --customize-hook='copy-in tools/image_debian.py /tmp' \
	  --customize-hook='chroot "$$1" python3 /tmp/image_debian.py' --skip=cleanup/apt --skip=cleanup/mmdebstrap \
	  --customize-hook='rm -rf "$$1"/etc/apt "$$1"/var/lib/apt "$$1"/var/cache/apt "$$1"/var/log/*' \
	  --customize-hook='truncate -s 0 "$$1"/etc/resolv.conf "$$1"/etc/hostname' \
	  $(DEBIAN_SUITE) $@.tmp build/image-debian.sources && mv $@.tmp $@
# setuptools builds the wheel through build/lib, which it never empties: a module deleted from the tree would
# stay in the wheel, so the recipe starts without it.
$(IMAGE_ARCHIVE): $(STAMP) build/image-base.tar Dockerfile requirements/image.txt setup.cfg pyproject.toml $(shell find policylib webhook -name '*.py' -o -name '*.json') tools/image_archive.py tools/image_requirements.py tools/image_site.py
	rm -rf build/image build/lib build/bdist.* && mkdir -p build/image/wheel build/image/rootfs
	$(BIN)/python -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation -w build/image/wheel .
	tar -C build/image/rootfs -xf build/image-base.tar
	$(BIN)/python tools/image_requirements.py --install build/image/rootfs/$(IMAGE_SITE) build/image/wheel/policylib-*.whl
	cp tools/image_site.py build/image/rootfs/tmp/
	$(IMAGE_CHROOT) build/image/rootfs python3 /tmp/image_site.py /$(IMAGE_SITE)
	rm build/image/rootfs/tmp/image_site.py
	$(BIN)/python tools/image_archive.py --rootfs build/image/rootfs --dockerfile Dockerfile --ref $(IMAGE) --out $@
