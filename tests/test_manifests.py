"""manifests/: rendered with ``kubectl kustomize``, validated against the Kubernetes OpenAPI
schemas (kubernetes-validate, strict), and checked for the fields that keep a cluster safe."""
from __future__ import annotations

import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

import policylib
from tests.helpers import REPO

K8S_VERSION = "1.30.0"  # the oldest minor these manifests target; kubernetes-validate ships its schemas
NAMESPACE, SERVICE = "policylib-system", "policylib-webhook"
EXCLUDED = ["kube-system", "kube-node-lease", NAMESPACE]

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None,
                                reason="kubectl is not installed: `kubectl kustomize` renders the manifests")


def render(path: str) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(REPO / path)], capture_output=True, text=True, check=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict], kind: str, name: str | None = None) -> dict:
    """The one object of ``kind`` (named ``name`` when several share the kind)."""
    (obj,) = [o for o in by_kind(objs, kind) if name is None or o["metadata"]["name"] == name]
    return obj


@pytest.fixture(scope="module")
def base():
    return render("manifests")


@pytest.fixture(scope="module")
def cert_manager():
    return render("manifests/cert-manager")


def test_default_install_is_the_base(base):
    assert base == render("manifests/base")
    assert sorted((o["kind"], o["metadata"]["name"].split("-")[1]) for o in base if o["kind"] != "ConfigMap") == sorted([
        ("Namespace", "system"), ("ServiceAccount", "webhook"), ("ClusterRole", "webhook"),
        ("ClusterRoleBinding", "webhook"), ("Service", "webhook"), ("Deployment", "webhook"),
        ("PodDisruptionBudget", "webhook"), ("MutatingWebhookConfiguration", "webhook"),
        ("ServiceAccount", "controller"), ("ClusterRole", "controller"), ("ClusterRoleBinding", "controller"),
        ("Role", "controller"), ("RoleBinding", "controller"), ("Deployment", "controller")])


def test_every_object_is_valid_in_strict_mode(base):
    for obj in base:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_cert_manager_overlay_validates_core_objects_and_wires_the_ca(cert_manager):
    for obj in cert_manager:
        if not obj["apiVersion"].startswith("cert-manager.io/"):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    webhook = one(cert_manager, "MutatingWebhookConfiguration")
    assert webhook["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{SERVICE}"}
    certs = {c["metadata"]["name"]: c for c in by_kind(cert_manager, "Certificate")}
    serving = certs[SERVICE]
    assert serving["spec"]["secretName"] == f"{SERVICE}-tls"
    assert f"{SERVICE}.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    assert "server auth" in serving["spec"]["usages"]
    assert serving["spec"]["issuerRef"] == {"kind": "Issuer", "name": f"{SERVICE}-ca"}
    assert certs[f"{SERVICE}-ca"]["spec"]["isCA"] is True
    assert {i["metadata"]["name"] for i in by_kind(cert_manager, "Issuer")} == {"policylib-selfsigned", f"{SERVICE}-ca"}


def test_webhook_configuration_cannot_block_the_cluster(base):
    config = one(base, "MutatingWebhookConfiguration")
    hooks = {w["name"]: w for w in config["webhooks"]}
    assert set(hooks) == {"deployments.policylib.io", "volcano-jobs.policylib.io", "kubeflow-jobs.policylib.io"}
    for hook in hooks.values():
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["failurePolicy"] == "Ignore"
        assert hook["timeoutSeconds"] <= 5
        assert hook["reinvocationPolicy"] == "IfNeeded"
        assert hook["matchPolicy"] == "Equivalent"
        assert hook["clientConfig"] == {"service": {"name": SERVICE, "namespace": NAMESPACE, "path": "/mutate",
                                                    "port": 443}}
        assert hook["namespaceSelector"] == {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": EXCLUDED},
            {"key": "policylib.io/skip", "operator": "NotIn", "values": ["true"]}]}
        assert hook["objectSelector"] == {"matchExpressions": [
            {"key": "policylib.io/skip", "operator": "NotIn", "values": ["true"]}]}
    rules = {name: [(r["apiGroups"], r["apiVersions"], r["resources"], r["operations"]) for r in hook["rules"]]
             for name, hook in hooks.items()}
    assert rules == {
        "deployments.policylib.io": [(["apps"], ["v1"], ["deployments"], ["CREATE", "UPDATE"])],
        "volcano-jobs.policylib.io": [(["batch.volcano.sh"], ["v1alpha1"], ["jobs"], ["CREATE"])],
        "kubeflow-jobs.policylib.io": [(["kubeflow.org"], ["v1"], ["tfjobs", "pytorchjobs", "mpijobs"],
                                        ["CREATE", "UPDATE"])],
    }


def test_rbac_is_least_privilege(base):
    assert one(base, "ClusterRole", SERVICE)["rules"] == [
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list", "watch"]}]
    binding = one(base, "ClusterRoleBinding", SERVICE)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVICE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE, "namespace": NAMESPACE}]


CONTROLLER = "policylib-controller"


def test_controller_rbac_is_exactly_the_verbs_it_uses(base):
    assert one(base, "ClusterRole", CONTROLLER)["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list", "watch"]},
        {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs", "pytorchjobs", "mpijobs"], "verbs": ["list", "watch"]},
        {"apiGroups": ["scheduling.x-k8s.io", "scheduling.sigs.k8s.io"], "resources": ["podgroups"],
         "verbs": ["get", "list", "watch", "create", "patch"]}]
    role = one(base, "Role", f"{CONTROLLER}-lease")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [CONTROLLER],
         "verbs": ["get", "update"]}]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        name = CONTROLLER if kind == "ClusterRoleBinding" else f"{CONTROLLER}-lease"
        assert one(base, kind, name)["subjects"] == [{"kind": "ServiceAccount", "name": CONTROLLER,
                                                      "namespace": NAMESPACE}]


def test_controller_deployment_is_leader_elected_and_locked_down(base):
    from policylib import load_config
    deployment = one(base, "Deployment", CONTROLLER)
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["serviceAccountName"] == CONTROLLER
    (container,) = pod["containers"]
    assert container["args"][0] == "controller"
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert env["POD_NAME"] == "metadata.name" and env["POD_NAMESPACE"] == "metadata.namespace"
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert load_config(None).controller.leaseName == CONTROLLER


def test_deployment_is_highly_available_and_locked_down(base):
    deployment = one(base, "Deployment", SERVICE)
    spec, pod = deployment["spec"], deployment["spec"]["template"]["spec"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert {c["topologyKey"] for c in pod["topologySpreadConstraints"]} == {"kubernetes.io/hostname",
                                                                           "topology.kubernetes.io/zone"}
    assert pod["serviceAccountName"] == SERVICE
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert {e["name"]: e["value"] for e in container["env"]}["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")
    assert volumes[mounts["/etc/policylib/tls"]]["secret"]["secretName"] == f"{SERVICE}-tls"
    config_map = one(base, "ConfigMap")
    assert volumes[mounts["/etc/policylib/config"]]["configMap"]["name"] == config_map["metadata"]["name"]
    assert "--config=/etc/policylib/config/config.yaml" in container["args"]
    assert pod["terminationGracePeriodSeconds"] > 20 + 5  # drain (--graceful-timeout) after the preStop sleep


def test_pdb_and_service_select_the_webhook_pods(base):
    labels = one(base, "Deployment", SERVICE)["spec"]["template"]["metadata"]["labels"]
    pdb = one(base, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    service = one(base, "Service")
    for selector in (pdb["spec"]["selector"]["matchLabels"], service["spec"]["selector"]):
        assert selector.items() <= labels.items()
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]


def test_namespace_opts_itself_out(base):
    namespace = one(base, "Namespace")
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["policylib.io/skip"] == "true"
    assert all(o["metadata"].get("namespace") in (None, NAMESPACE) for o in base)


def test_configmap_holds_the_seed_shaped_config_with_the_defaults(base):
    data = one(base, "ConfigMap")["data"]
    document = yaml.safe_load(data["config.yaml"])
    assert {"zoneTopologySpread", "hostTopologySpread", "webhook"} <= set(document)
    assert policylib.load_config(document) == policylib.load_config(None)
