# Fresh machine: `make run` (the webhook, embedded default config, self-generated
# certificates) and `make test` (the whole suite). Both create .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
HOST   ?= 127.0.0.1
PORT   ?= 8443

.PHONY: run test dist docs bench bench-webhook bench-apiserver bench-scale install clean testcluster testcluster-coscheduling testcluster-volcano noop-webhook e2e helm

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m webhook run-local --cert-dir certs --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

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

# Through the harness's real API server: none / a Go no-op webhook / policylib (/ Kyverno when
# KYVERNO=path/to/kyverno). Builds what it needs; docs/performance.md has the figures.
bench-apiserver: $(STAMP) testcluster noop-webhook
	$(BIN)/python bench/bench_apiserver.py $(BENCH_ARGS)

# Memory and time as the cluster grows (controller, webhook HPA cache, plan --cluster), through the
# harness's real API server; BENCH_ARGS="--sizes 1000,10000,50000" (docs/figures.md, "Scale").
bench-scale: $(STAMP) testcluster
	$(BIN)/python bench/bench_scale.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis site dist build

# The end-to-end harness: a control plane built from Go modules (docs/e2e.md). The first build
# compiles kube-apiserver, kube-controller-manager and kube-scheduler: many minutes on 2 cores
# (measured: docs/figures.md).
GO ?= go
testcluster:
	cd e2e && v=$$($(GO) list -m -f '{{.Version}}' k8s.io/kubernetes) && m=$${v#v} && \
	  ld="-X k8s.io/component-base/version.gitVersion=$$v -X k8s.io/component-base/version.gitMajor=$${m%%.*}" && \
	  ld="$$ld -X k8s.io/component-base/version.gitMinor=$$(echo $$m | cut -d. -f2) -X k8s.io/client-go/pkg/version.gitVersion=$$v" && \
	  $(GO) build -ldflags "$$ld" -o bin/testcluster ./cmd/testcluster && \
	  $(GO) build -ldflags "$$ld" -o bin/kubectl k8s.io/kubernetes/cmd/kubectl

# The floor of bench/bench_apiserver.py: a webhook on Go's standard library that admits everything
# unchanged (e2e/cmd/noopwebhook; seconds to build, no dependency).
noop-webhook:
	cd e2e && $(GO) build -o bin/noopwebhook ./cmd/noopwebhook

# `testcluster --coscheduling` runs a second scheduler: kube-scheduler with the Coscheduling plugin,
# from the sigs.k8s.io/scheduler-plugins module in e2e/coscheduling (its own module: Kubernetes 1.34).
# It reports the Kubernetes version it is built on (its compatibility checks need one).
testcluster-coscheduling: testcluster
	cd e2e/coscheduling && v=$$($(GO) list -m -f '{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' k8s.io/kubernetes) && \
	  m=$${v#v} && ld="-X k8s.io/component-base/version.gitVersion=$$v -X k8s.io/component-base/version.gitMajor=$${m%%.*}" && \
	  ld="$$ld -X k8s.io/component-base/version.gitMinor=$$(echo $$m | cut -d. -f2)" && \
	  $(GO) build -ldflags "$$ld" -o ../bin/scheduler-plugins-scheduler sigs.k8s.io/scheduler-plugins/cmd/scheduler

# Volcano's scheduler, controller manager and admission webhooks for `testcluster --volcano`, from
# the volcano.sh/volcano module (e2e/volcano/go.mod says which release and why), with the CRDs and
# ValidatingAdmissionPolicies of that release's module. Its own module (Kubernetes 1.34), so
# separate binaries in e2e/bin/volcano/ that testcluster starts. Many minutes cold on 2 cores.
testcluster-volcano: testcluster
	cd e2e/volcano && v=$$($(GO) list -m -f '{{.Version}}' volcano.sh/volcano) && \
	  for c in scheduler controller-manager webhook-manager; do \
	    CGO_ENABLED=0 $(GO) build -ldflags "-X volcano.sh/volcano/pkg/version.Version=$$v" \
	      -o ../bin/volcano/vc-$$c volcano.sh/volcano/cmd/$$c || exit 1; done && \
	  src=$$($(GO) list -m -f '{{.Dir}}' volcano.sh/volcano) && \
	  rm -rf ../bin/volcano/crd ../bin/volcano/policy && mkdir -p ../bin/volcano/crd ../bin/volcano/policy && \
	  install -m 644 $$src/config/crd/volcano/bases/*.yaml ../bin/volcano/crd/ && \
	  install -m 644 $$src/installer/helm/chart/volcano/policy/*.yaml ../bin/volcano/policy/

# helm, for the chart's tests (charts/policylib; docs/helm.md): its own module, e2e/helm/go.mod pins the
# release. About 3 minutes cold on 2 cores, seconds warm. The tests run this target themselves.
helm:
	cd e2e/helm && v=$$($(GO) list -m -f '{{.Version}}' helm.sh/helm/v3) && \
	  k=$$($(GO) list -m -f '{{.Version}}' k8s.io/client-go) && k=$${k#v0.} && \
	  ld="-X helm.sh/helm/v3/internal/version.version=$$v -X helm.sh/helm/v3/internal/version.metadata=" && \
	  for p in pkg/lint/rules pkg/chartutil; do \
	    ld="$$ld -X helm.sh/helm/v3/$$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$$p.k8sVersionMinor=$${k%%.*}"; done && \
	  $(GO) build -ldflags "$$ld" -o ../bin/helm helm.sh/helm/v3/cmd/helm

e2e: $(STAMP) testcluster
	$(BIN)/python -m pytest tests/e2e $(PYTEST_ARGS)

# Kubeflow training-operator (v1 API: TFJob, PyTorchJob) for `testcluster --training-operator`, from the
# github.com/kubeflow/training-operator module in e2e/training-operator (its own module), with the CRDs
# of that release's module (manifests/base/crds). About 4 minutes cold on 2 cores.
.PHONY: testcluster-training-operator
testcluster-training-operator: testcluster
	cd e2e/training-operator && \
	  $(GO) build -o ../bin/training-operator/training-operator github.com/kubeflow/training-operator/cmd/training-operator.v1 && \
	  src=$$($(GO) list -m -f '{{.Dir}}' github.com/kubeflow/training-operator) && \
	  rm -rf ../bin/training-operator/crd && mkdir -p ../bin/training-operator/crd && \
	  install -m 644 $$src/manifests/base/crds/kubeflow.org_tfjobs.yaml $$src/manifests/base/crds/kubeflow.org_pytorchjobs.yaml \
	    ../bin/training-operator/crd/

# The MPI Operator (MPIJob kubeflow.org/v2beta1) for `testcluster --mpi-operator`: its own controller
# from the github.com/kubeflow/mpi-operator module, run by e2e/mpi-operator/main.go (its cmd serves
# /healthz on the fixed port 8080), with that release's MPIJob CRD. About 5 minutes cold on 2 cores.
.PHONY: testcluster-mpi-operator
testcluster-mpi-operator: testcluster
	cd e2e/mpi-operator && \
	  $(GO) build -o ../bin/mpi-operator/mpi-operator . && \
	  src=$$($(GO) list -m -f '{{.Dir}}' github.com/kubeflow/mpi-operator) && \
	  rm -rf ../bin/mpi-operator/crd && mkdir -p ../bin/mpi-operator/crd && \
	  install -m 644 $$src/manifests/base/kubeflow.org_mpijobs.yaml ../bin/mpi-operator/crd/

# koord-scheduler for `testcluster --koordinator`, from the github.com/koordinator-sh/koordinator module
# in e2e/koordinator (its own module, with Koordinator's own replace block: Kubernetes 1.35), with every
# CRD of that release (config/crd/bases: its informers watch them). About 8 minutes cold on 2 cores.
.PHONY: testcluster-koordinator
testcluster-koordinator: testcluster
	cd e2e/koordinator && \
	  $(GO) build -o ../bin/koordinator/koord-scheduler github.com/koordinator-sh/koordinator/cmd/koord-scheduler && \
	  src=$$($(GO) list -m -f '{{.Dir}}' github.com/koordinator-sh/koordinator) && \
	  rm -rf ../bin/koordinator/crd && mkdir -p ../bin/koordinator/crd && \
	  install -m 644 $$src/config/crd/bases/*.yaml ../bin/koordinator/crd/
