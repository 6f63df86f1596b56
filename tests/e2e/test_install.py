"""The production install against the real API server: every overlay is accepted, RBAC grants exactly
the verbs the webhook and the controller use, and an unreachable in-cluster webhook never blocks."""
from __future__ import annotations

import json
import os
import time

import pytest
import yaml

from policylib.constants import WEBHOOK_CONFIGURATION

from .harness import ROOT, deployment, schemaless_crds, wait_for

#: Every overlay, its webhook configuration and RBAC, against the API server of each minor.
pytestmark = pytest.mark.minors()

NS = "policylib-system"
WEBHOOK_SA = f"system:serviceaccount:{NS}:policylib-webhook"
CONTROLLER_SA = f"system:serviceaccount:{NS}:policylib-controller"

#: cert-manager is not part of the harness: its two kinds are installed as schemaless CRDs so the
#: overlay's objects reach the API server (their own schemas are cert-manager's to check).
CERT_MANAGER_CRDS = schemaless_crds("cert-manager.io", (("certificates", "Certificate"), ("issuers", "Issuer")))


@pytest.fixture(scope="module")
def installed(cluster):
    cluster.apply(*CERT_MANAGER_CRDS)
    cluster.kubectl("wait", "--for=condition=Established", "crd/certificates.cert-manager.io",
                    "crd/issuers.cert-manager.io", "--timeout=60s")
    yield cluster
    # Leave the shared cluster as it was: the in-cluster webhook configuration intercepts every namespace.
    for overlay in ("manifests/cert-manager", "manifests"):
        cluster.kubectl("delete", "-k", str(ROOT / overlay), "--ignore-not-found", "--wait=false", check=False)
    cluster.kubectl("wait", "--for=delete", f"namespace/{NS}", "--timeout=180s", check=False)
    # and without the configuration a controller reads its scope from by default (rule W5)
    wait_for("the webhook configuration is gone",
             lambda: installed_configuration(cluster) is None, timeout=60)


def installed_configuration(cluster) -> dict | None:
    """The MutatingWebhookConfiguration manifests/ and the chart install (the controller's default scope)."""
    return cluster.get_or_none("mutatingwebhookconfiguration", WEBHOOK_CONFIGURATION)


@pytest.mark.parametrize("overlay", ["manifests", "manifests/cert-manager"])
def test_every_overlay_is_accepted(installed, overlay):
    run = installed.kubectl("apply", "-k", str(ROOT / overlay))
    assert "Warning" not in run.stderr, run.stderr
    for kind, name in (("deployment", "policylib-webhook"), ("deployment", "policylib-controller"),
                       ("service", "policylib-webhook"), ("poddisruptionbudget", "policylib-webhook"),
                       ("poddisruptionbudget", "policylib-controller")):
        assert installed.get(kind, name, NS)["metadata"]["name"] == name
    hook = installed.get("mutatingwebhookconfiguration", "policylib-webhook")
    # gang-pods fails closed: a gang pod admitted without its immutable schedulingGroup would run alone (rule G17)
    assert [(w["name"], w["failurePolicy"]) for w in hook["webhooks"]] == [
        ("deployments.policylib.io", "Ignore"), ("volcano-jobs.policylib.io", "Ignore"),
        ("kubeflow-jobs.policylib.io", "Ignore"), ("jobsets.policylib.io", "Ignore"), ("gang-pods.policylib.io", "Fail"),
        ("trainjobs.policylib.io", "Ignore"), ("statefulsets.policylib.io", "Ignore"),
        ("leaderworkersets.policylib.io", "Ignore")]
    # The manifests are what the API server stores: nothing to diff (kubectl apply would still say
    # "configured" for the PodDisruptionBudget, a client-side no-op patch of its int-or-string field).
    diff = installed.kubectl("diff", "-k", str(ROOT / overlay), check=False)
    assert (diff.returncode, diff.stdout) == (0, ""), diff.stdout + diff.stderr


def test_network_policy_component_is_accepted(installed, tmp_path):
    """The opt-in component (manifests/components/network-policy) in a user's overlay, checked by the API server."""
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {os.path.relpath(ROOT / 'manifests', tmp_path)}\n"
        f"components:\n  - {os.path.relpath(ROOT / 'manifests/components/network-policy', tmp_path)}\n")
    run = installed.kubectl("apply", "--dry-run=server", "-k", str(tmp_path), "-o", "name")
    assert "networkpolicy.networking.k8s.io/policylib-webhook" in run.stdout.split()
    assert "Warning" not in run.stderr, run.stderr


def can_i(cluster, who: str, verb: str, resource: str, namespace: str | None = None, name: str | None = None) -> bool:
    """A SubjectAccessReview, as ``kubectl auth can-i --as`` sends it, with the group spelled out (so it
    answers for custom resources whose CRDs are not installed too)."""
    plural, _, group = resource.partition(".")
    attributes = {"verb": verb, "resource": plural, "group": group, "namespace": namespace or "", "name": name or ""}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": who, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}",
                                               "system:authenticated"], "resourceAttributes": attributes}}
    run = cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review))
    return json.loads(run.stdout)["status"].get("allowed", False)


ALLOWED = [
    (WEBHOOK_SA, "list", "horizontalpodautoscalers.autoscaling", None, None),
    (WEBHOOK_SA, "watch", "horizontalpodautoscalers.autoscaling", None, None),
    (CONTROLLER_SA, "get", "deployments.apps", None, None),
    (CONTROLLER_SA, "list", "deployments.apps", None, None),
    (CONTROLLER_SA, "watch", "deployments.apps", None, None),
    (CONTROLLER_SA, "patch", "deployments.apps", None, None),
    (CONTROLLER_SA, "list", "horizontalpodautoscalers.autoscaling", None, None),
    (CONTROLLER_SA, "watch", "horizontalpodautoscalers.autoscaling", None, None),
    (CONTROLLER_SA, "list", "tfjobs.kubeflow.org", None, None),
    (CONTROLLER_SA, "watch", "pytorchjobs.kubeflow.org", None, None),
    (CONTROLLER_SA, "watch", "mpijobs.kubeflow.org", None, None),
    (CONTROLLER_SA, "create", "podgroups.scheduling.x-k8s.io", None, None),
    (CONTROLLER_SA, "patch", "podgroups.scheduling.sigs.k8s.io", None, None),
    (CONTROLLER_SA, "get", "podgroups.scheduling.x-k8s.io", None, None),
    (CONTROLLER_SA, "create", "leases.coordination.k8s.io", NS, None),
    (CONTROLLER_SA, "get", "leases.coordination.k8s.io", NS, "policylib-controller"),
    (CONTROLLER_SA, "update", "leases.coordination.k8s.io", NS, "policylib-controller"),
    # Events (reason SpreadRewritten) on the objects it rewrites, in any namespace, via events.k8s.io/v1.
    (CONTROLLER_SA, "create", "events.events.k8s.io", "default", None),
    (CONTROLLER_SA, "create", "events.events.k8s.io", None, None),
]
DENIED = [
    (WEBHOOK_SA, "get", "secrets", NS, None),
    (WEBHOOK_SA, "patch", "deployments.apps", None, None),
    (WEBHOOK_SA, "list", "deployments.apps", None, None),
    (CONTROLLER_SA, "delete", "deployments.apps", None, None),
    (CONTROLLER_SA, "update", "deployments.apps", None, None),
    (CONTROLLER_SA, "list", "secrets", None, None),
    (CONTROLLER_SA, "patch", "tfjobs.kubeflow.org", None, None),
    (CONTROLLER_SA, "update", "leases.coordination.k8s.io", "kube-system", "kube-scheduler"),
    (CONTROLLER_SA, "update", "leases.coordination.k8s.io", NS, "another-lease"),
    (CONTROLLER_SA, "list", "events.events.k8s.io", None, None),
    (CONTROLLER_SA, "patch", "events.events.k8s.io", "ml-team", None),   # it never updates a series
    (CONTROLLER_SA, "delete", "events.events.k8s.io", "default", None),
    (CONTROLLER_SA, "update", "events.events.k8s.io", "default", None),
    (CONTROLLER_SA, "create", "events", "default", None),  # the core v1 group is not granted
    (WEBHOOK_SA, "create", "events.events.k8s.io", "default", None),
]


def test_rbac_exactly_the_verbs_used(installed):
    installed.kubectl("apply", "-k", str(ROOT / "manifests"))
    assert [a for a in ALLOWED if not can_i(installed, *a)] == []
    assert [d for d in DENIED if can_i(installed, *d)] == []


def test_namespaced_writes_component_confines_the_writes_to_the_bound_namespaces(installed, tmp_path):
    """manifests/components/namespaced-writes with a RoleBinding in one namespace (docs/rbac.md): the controller
    still reads everywhere, writes only there, and records its scope's Events in its own namespace."""
    (tmp_path / "rolebindings.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "policylib-controller-writes", "namespace": "team-a"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "policylib-controller-writes"},
         "subjects": [{"kind": "ServiceAccount", "name": "policylib-controller", "namespace": NS}]}))
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {os.path.relpath(ROOT / 'manifests', tmp_path)}\n  - rolebindings.yaml\n"
        f"components:\n  - {os.path.relpath(ROOT / 'manifests/components/namespaced-writes', tmp_path)}\n")
    installed.namespace("team-a")
    installed.kubectl("apply", "-k", str(tmp_path))
    try:
        reads = [("list", "deployments.apps", None, None), ("watch", "pods", None, None),
                 ("get", "podgroups.scheduling.x-k8s.io", None, None), ("list", "nodes", None, None)]
        writes = [("patch", "deployments.apps"), ("patch", "pods"), ("create", "podgroups.scheduling.volcano.sh"),
                  ("patch", "podgroups.scheduling.x-k8s.io"), ("create", "workloads.scheduling.k8s.io"),
                  ("create", "events.events.k8s.io")]
        assert [r for r in reads if not can_i(installed, CONTROLLER_SA, *r)] == []
        assert [w for w in writes if not can_i(installed, CONTROLLER_SA, *w, "team-a")] == []
        assert [w for w in writes if can_i(installed, CONTROLLER_SA, *w, "kube-system")] == []
        assert [w for w in writes if can_i(installed, CONTROLLER_SA, *w, "team-b")] == []
        assert not can_i(installed, CONTROLLER_SA, "patch", "deployments.apps", None)
        assert can_i(installed, CONTROLLER_SA, "create", "events.events.k8s.io", NS)
    finally:   # the base's own ClusterRole again, for the tests after this one
        installed.kubectl("delete", "clusterrole", "policylib-controller-writes", "--ignore-not-found")
        installed.kubectl("delete", "-n", NS, "role,rolebinding", "policylib-controller-events", "--ignore-not-found")
        installed.kubectl("delete", "namespace", "team-a", "--wait=false")
        installed.kubectl("apply", "-k", str(ROOT / "manifests"))


def test_unreachable_webhook_never_blocks(installed, ns):
    """No kubelet runs the webhook's pods, so its Service has no endpoints: failurePolicy Ignore admits."""
    installed.kubectl("apply", "-k", str(ROOT / "manifests"))
    installed.namespace(ns)
    started = time.monotonic()
    installed.apply(deployment("web", ns, 3))
    elapsed = time.monotonic() - started
    stored = installed.get("deployment", "web", ns)
    assert "policylib.io/spread-effective-replicas" not in (stored["metadata"].get("annotations") or {})
    assert "topologySpreadConstraints" not in stored["spec"]["template"]["spec"]
    timeout = installed.get("mutatingwebhookconfiguration", "policylib-webhook")["webhooks"][0]["timeoutSeconds"]
    assert elapsed < timeout + 10, f"apply took {elapsed:.1f}s with a {timeout}s webhook timeout"
