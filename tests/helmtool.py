"""helm for the chart's tests: ``make helm`` builds ``e2e/bin/helm`` from its own Go module (e2e/helm/go.mod);
the tests call it through :func:`helm_binary`; ``make test`` builds it before pytest starts, and a missing one fails them."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e.harness import DEFAULT_MINOR

ROOT = Path(__file__).resolve().parents[1]
HELM = ROOT / "e2e" / "bin" / "helm"
CHART = ROOT / "charts" / "policylib"
#: What ``helm template`` renders for: the end-to-end tests' default Kubernetes minor (inside the chart's kubeVersion).
KUBE_VERSION = f"{DEFAULT_MINOR}.0"
NAMESPACE = "policylib-system"


def helm_binary() -> Path:
    """``e2e/bin/helm``, built by ``make helm`` (which ``make test`` runs before pytest starts): skipped without
    Go, a failure when go is on PATH and it is missing."""
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH: helm is built from its Go module (make helm)")
    if not HELM.is_file():
        pytest.fail(f"{HELM.relative_to(ROOT)} missing: `make helm` builds it (`make test` builds it before pytest starts)",
                    pytrace=False)
    return HELM


def helm(*args: str, input: str | None = None, check: bool = True, env: dict | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    run = subprocess.run([str(helm_binary()), *args], input=input, capture_output=True, text=True, timeout=timeout,
                         env=env)
    if check and run.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr}")
    return run


def values_args(values: dict | None) -> list[str]:
    return ["-f", "-"] if values else []


def render(values: dict | None = None, *, release: str = "policylib", namespace: str = NAMESPACE,
           check: bool = True, kube_version: str = KUBE_VERSION) -> list[dict] | subprocess.CompletedProcess:
    """``helm template`` of the chart with ``values`` (YAML on stdin) for Kubernetes ``kube_version``: the objects,
    or the failed run."""
    run = helm("template", release, str(CHART), "--namespace", namespace, "--kube-version", kube_version,
               *values_args(values), input=json.dumps(values) if values else None, check=check)
    if run.returncode != 0:
        return run
    return [d for d in yaml.safe_load_all(run.stdout) if d]


def by_kind_name(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


#: The values CI renders, lints and dry-runs on the API server.
CA_BUNDLE = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="
MATRIX: dict[str, dict] = {
    "defaults": {},
    "cert-manager": {"certificates": {"mode": "cert-manager"}},
    "cert-manager-issuer": {"certificates": {"mode": "cert-manager",
                                             "certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "corp-ca"}}}},
    "existing-secret-no-controller": {"controller": {"enabled": False},
                                      "certificates": {"mode": "existingSecret",
                                                       "existingSecret": {"name": "my-tls", "caBundle": CA_BUNDLE}}},
    "opt-in": {"webhook": {"namespaceMode": "opt-in"}},
    "opt-in-confined": {"webhook": {"namespaceMode": "opt-in"},
                        "controller": {"rbac": {"namespaces": ["policylib-chart-team"]}}},
    "families-off": {"webhook": {"families": {"deployments": False, "volcanoJobs": False, "kubeflowJobs": False,
                                              "jobSets": False, "gangPods": False, "trainJobs": False,
                                              "statefulSets": False, "leaderWorkerSets": False}}},
    "ha-off": {"webhook": {"replicas": 1}, "controller": {"replicas": 1}},
    "monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
                   "grafanaDashboard": {"enabled": True}, "networkPolicy": {"enabled": True}},
    "config-and-image": {"config": {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"},
                                    "controller": {"leaseName": "my-lease"}},
                         "image": {"registry": "registry.example.com", "digest": "sha256:" + "a" * 64,
                                   "pullSecrets": [{"name": "regcred"}]},
                         "webhook": {"failurePolicy": "Fail", "timeoutSeconds": 5,
                                     "matchConditions": [{"name": "not-dry-run", "expression": "true"}],
                                     "tolerations": [{"key": "dedicated", "operator": "Exists"}]}},
    "hardened": {"webhook": {"maxConnections": 500, "firstRequestTimeoutSeconds": 3,
                             "tls": {"minVersion": "1.3", "clientCASecret": "apiserver-client-ca"}}},
    "helm-nesting": {"config": {"lrs-operator": {"operator": {"config": {
        "hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}}}}},
}
