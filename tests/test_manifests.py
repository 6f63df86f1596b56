"""manifests/: rendered with ``kubectl kustomize``, validated against the Kubernetes OpenAPI
schemas (kubernetes-validate, strict), and checked for the fields that keep a cluster safe."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import fields
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

import policylib
from tests.helpers import REPO

K8S_VERSION = "1.27.0"  # the oldest minor these manifests target (docs/install.md); kubernetes-validate ships its schemas
NAMESPACE, SERVICE = "policylib-system", "policylib-webhook"
EXCLUDED = ["kube-system", "kube-node-lease", NAMESPACE]

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None,
                                reason="kubectl is not installed: `kubectl kustomize` renders the manifests")


def render(path: str | Path) -> list[dict]:
    out = subprocess.run(["kubectl", "kustomize", str(REPO / path)], capture_output=True, text=True, check=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def overlay(directory: Path, body: str, *, repo: Path = REPO) -> list[dict]:
    """Render a user's overlay in ``directory``: ``body`` is its kustomization.yaml, with ``{repo}`` standing
    for the policylib checkout (kustomize takes relative paths only)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(body.replace("{repo}", os.path.relpath(repo, directory)))
    return render(directory)


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
        ("Role", "controller"), ("RoleBinding", "controller"), ("Deployment", "controller"),
        ("PodDisruptionBudget", "controller")])
    assert by_kind(base, "NetworkPolicy") == []  # an opt-in component (test_network_policy_component_...)


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
    assert set(hooks) == {"deployments.policylib.io", "volcano-jobs.policylib.io", "kubeflow-jobs.policylib.io",
                          "jobsets.policylib.io", "gang-pods.policylib.io", "trainjobs.policylib.io",
                          "statefulsets.policylib.io", "leaderworkersets.policylib.io"}
    gang_pods = hooks.pop("gang-pods.policylib.io")
    # Rule G17: only Pods labelled policylib.io/scheduling-group reach it, on CREATE; it fails closed (a gang
    # pod admitted without its immutable schedulingGroup would be scheduled alone), which can block no other pod.
    assert (gang_pods["failurePolicy"], gang_pods["sideEffects"], gang_pods["timeoutSeconds"]) == ("Fail", "None", 3)
    assert [(r["apiGroups"], r["apiVersions"], r["resources"], r["operations"]) for r in gang_pods["rules"]] == [
        ([""], ["v1"], ["pods"], ["CREATE"])]
    assert gang_pods["objectSelector"] == {"matchExpressions": [
        {"key": "policylib.io/scheduling-group", "operator": "Exists"},
        {"key": "policylib.io/skip", "operator": "NotIn", "values": ["true"]}]}
    assert gang_pods["namespaceSelector"] == hooks["deployments.policylib.io"]["namespaceSelector"]
    assert gang_pods["clientConfig"] == hooks["deployments.policylib.io"]["clientConfig"]
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
        "volcano-jobs.policylib.io": [(["batch.volcano.sh"], ["v1alpha1"], ["jobs"], ["CREATE", "UPDATE"])],
        "kubeflow-jobs.policylib.io": [(["kubeflow.org"], ["v1", "v2beta1"], ["tfjobs", "pytorchjobs", "mpijobs"],
                                        ["CREATE", "UPDATE"])],
        "jobsets.policylib.io": [(["jobset.x-k8s.io"], ["v1alpha2"], ["jobsets"], ["CREATE", "UPDATE"])],
        "trainjobs.policylib.io": [(["trainer.kubeflow.org"], ["v1alpha1"], ["trainjobs"], ["CREATE", "UPDATE"])],
        "statefulsets.policylib.io": [(["apps"], ["v1"], ["statefulsets"], ["CREATE", "UPDATE"])],
        "leaderworkersets.policylib.io": [(["leaderworkerset.x-k8s.io"], ["v1"], ["leaderworkersets"],
                                           ["CREATE", "UPDATE"])],
    }
    assert [w["name"] for w in config["webhooks"]].index("statefulsets.policylib.io") == 6
    assert [w["name"] for w in config["webhooks"]].index("leaderworkersets.policylib.io") == 7


def test_rbac_is_least_privilege(base):
    assert one(base, "ClusterRole", SERVICE)["rules"] == [
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list", "watch"]},
        # rule T6: Trainer's runtimes watched, and one the watch has not brought read by name
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainingruntimes", "clustertrainingruntimes"],
         "verbs": ["get", "list", "watch"]}]
    binding = one(base, "ClusterRoleBinding", SERVICE)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVICE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE, "namespace": NAMESPACE}]


CONTROLLER = "policylib-controller"


def test_controller_rbac_is_exactly_the_verbs_it_uses(base):
    assert one(base, "ClusterRole", CONTROLLER)["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list", "watch"]},
        {"apiGroups": ["kubeflow.org"], "resources": ["tfjobs", "pytorchjobs", "mpijobs"], "verbs": ["list", "watch"]},
        {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list", "watch"]},
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs", "trainingruntimes", "clustertrainingruntimes"],
         "verbs": ["list", "watch"]},
        {"apiGroups": ["scheduling.x-k8s.io", "scheduling.sigs.k8s.io", "scheduling.volcano.sh"], "resources": ["podgroups"],
         "verbs": ["get", "list", "watch", "create", "patch"]},
        # gang method workload (rules G18, G19): Kubernetes' own Workload and PodGroup, created; in v1beta1 a changed
        # minCount is patched (guarded: a 409 is read again)
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["workloads", "podgroups"],
         "verbs": ["get", "list", "watch", "create", "patch"]},
        # events.k8s.io/v1 Events (reason SpreadRewritten) on rewritten objects, in any namespace; created only
        # (no series is ever updated).
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
        # rule S23: the pods of Deployments (their deletion cost) and the Nodes' zone labels
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        # its scope (rule W5): the webhook configuration's selectors, by name, and the Namespaces' labels
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
         "resourceNames": ["policylib-webhook"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}]
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


GANG_CONFIGS = [{"method": "podgroup", "scheduler": "scheduler-plugins"}, {"method": "podgroup", "scheduler": "koordinator"},
                {"method": "podgroup", "scheduler": "volcano"}, {"method": "workload", "scheduler": "kube-scheduler"}]


@pytest.mark.parametrize("gang", GANG_CONFIGS, ids=lambda g: f"{g['method']}-{g['scheduler']}")
def test_controller_rbac_covers_every_resource_it_watches(base, gang):
    """Whatever the gang settings, the ClusterRole lets the controller list and watch what it watches (the
    e2e harness runs the controller as cluster-admin, so only this catches a missing rule)."""
    from webhook.controller import watched_resources
    rules = one(base, "ClusterRole", CONTROLLER)["rules"]
    config = policylib.load_config({"gang": {"enabled": True, **gang}})
    assert watched_resources(config)
    for res in watched_resources(config):
        granted = {v for r in rules if res.group in r["apiGroups"] and res.plural in r["resources"] for v in r["verbs"]}
        assert {"list", "watch"} <= granted, f"{res.group}/{res.plural}: the ClusterRole grants only {sorted(granted)}"


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
    # liveness is the listener alone: a flood of new TLS connections, which an HTTPS probe waits behind, never has
    # the kubelet restart a busy server; it starts once the startup probe passes, so a slow cold start is waited for
    assert container["livenessProbe"] == {"tcpSocket": {"port": "https"}, "initialDelaySeconds": 5,
                                          "periodSeconds": 10, "timeoutSeconds": 2, "failureThreshold": 3}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 60
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert {e["name"]: e["value"] for e in container["env"]}["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")
    assert volumes[mounts["/etc/policylib/tls"]]["secret"]["secretName"] == f"{SERVICE}-tls"
    # the key readable by root (the files' owner) and the pod's fsGroup, the server's group, only
    assert volumes[mounts["/etc/policylib/tls"]]["secret"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"] == 65532
    config_map = one(base, "ConfigMap")
    assert volumes[mounts["/etc/policylib/config"]]["configMap"]["name"] == config_map["metadata"]["name"]
    assert "--config=/etc/policylib/config/config.yaml" in container["args"]
    assert pod["terminationGracePeriodSeconds"] > 20 + 5  # drain (--graceful-timeout) after the preStop sleep


def test_pdb_and_service_select_the_webhook_pods(base):
    labels = one(base, "Deployment", SERVICE)["spec"]["template"]["metadata"]["labels"]
    pdb = one(base, "PodDisruptionBudget", SERVICE)
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


#: manifests/base/config.yaml before it showed every section: the ConfigMap must still load to this.
CONFIG_BEFORE_ALL_SECTIONS = """\
zoneTopologySpread:
  enabled: true
  topologyKey: topology.kubernetes.io/zone
  maxSkew: 1
  matchLabelKeys: pod-template-hash
hostTopologySpread:
  enabled: true
  whenUnsatisfiable: ScheduleAnyway
  topologyKey: kubernetes.io/hostname
  maxSkew: 1
  minDomains: 3
  hardMinReplicas: 3
  enableReplicaDerivedMaxSkewRule: true
  matchLabelKeys: pod-template-hash
  reconcileDrift: false
webhook:
  failureMode: open
  maxRequestBytes: 6356992
"""


def test_configmap_loads_to_exactly_todays_config(base, tmp_path):
    text = one(base, "ConfigMap")["data"]["config.yaml"]
    assert text == (REPO / "manifests/base/config.yaml").read_text()
    (tmp_path / "config.yaml").write_text(text)  # what the pods read with --config
    (tmp_path / "before.yaml").write_text(CONFIG_BEFORE_ALL_SECTIONS)
    loaded = policylib.load_config(tmp_path / "config.yaml")
    assert loaded == policylib.load_config(tmp_path / "before.yaml") == policylib.load_config(None)
    assert loaded == policylib.load_config(REPO / "manifests/base/config.yaml")


def test_configmap_shows_every_section_and_key_with_a_comment(base):
    from policylib.config import config_schema, section_classes
    text = one(base, "ConfigMap")["data"]["config.yaml"]
    document = yaml.safe_load(text)
    # The seed's nesting, as before: the sections at the top level (not under lrs-operator.operator.config).
    assert list(document) == ["zoneTopologySpread", "hostTopologySpread", "removePodAntiAffinity", "volcano",
                              "gang", "topology", "controller", "statefulSets", "leaderWorkerSets", "webhook"]
    assert set(document) == set(config_schema()["properties"])
    for name, cls in section_classes().items():  # every key the section stores, none left to a hidden default
        assert set(document[name]) == {f.name for f in fields(cls)}, name
    assert document["volcano"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    assert document["gang"]["method"] == "labels" and "every TFJob, PyTorchJob and MPIJob gets gang metadata" in text
    # Each key is explained: a comment on its line or right above it.
    previous = ""
    for line in text.splitlines():
        if re.match(r"\s*[A-Za-z]\w*:", line):
            assert "#" in line or previous.lstrip().startswith("#"), f"no comment for: {line}"
        if line.strip():
            previous = line


CONTROLLER_OBJECTS = [("ServiceAccount", CONTROLLER), ("ClusterRole", CONTROLLER), ("ClusterRoleBinding", CONTROLLER),
                      ("Role", f"{CONTROLLER}-lease"), ("RoleBinding", f"{CONTROLLER}-lease"),
                      ("Deployment", CONTROLLER), ("PodDisruptionBudget", CONTROLLER)]
WEBHOOK_OBJECTS = [("Namespace", NAMESPACE), ("ServiceAccount", SERVICE), ("ClusterRole", SERVICE),
                   ("ClusterRoleBinding", SERVICE), ("Service", SERVICE), ("Deployment", SERVICE),
                   ("PodDisruptionBudget", SERVICE), ("MutatingWebhookConfiguration", SERVICE), ("ConfigMap", None)]


def test_controller_objects_carry_the_controllers_name_like_its_pods(base):
    for kind, name in CONTROLLER_OBJECTS:
        assert one(base, kind, name)["metadata"]["labels"] == {
            "app.kubernetes.io/name": CONTROLLER, "app.kubernetes.io/component": "controller",
            "app.kubernetes.io/part-of": "policylib"}, (kind, name)
    for kind, name in WEBHOOK_OBJECTS:
        labels = one(base, kind, name)["metadata"]["labels"]
        assert (labels["app.kubernetes.io/name"], labels["app.kubernetes.io/part-of"]) == (SERVICE, "policylib")
    # Selectors are immutable: exactly the ones installed before; each Deployment's own name label is its pods'.
    for name in (SERVICE, CONTROLLER):
        deployment = one(base, "Deployment", name)
        assert deployment["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": name}}
        assert deployment["spec"]["template"]["metadata"]["labels"] == {"app.kubernetes.io/name": name}
        assert deployment["metadata"]["labels"]["app.kubernetes.io/name"] == name


def test_both_deployments_have_a_pod_disruption_budget(base):
    for name in (SERVICE, CONTROLLER):
        deployment, pdb = one(base, "Deployment", name), one(base, "PodDisruptionBudget", name)
        assert pdb["metadata"]["namespace"] == NAMESPACE
        assert pdb["spec"] == {"minAvailable": 1, "selector": deployment["spec"]["selector"]}
        assert deployment["spec"]["replicas"] == 2  # one can be evicted at a time


def test_both_deployments_run_at_system_cluster_critical_and_an_overlay_can_change_it(base, tmp_path):
    for name in (SERVICE, CONTROLLER):
        assert one(base, "Deployment", name)["spec"]["template"]["spec"]["priorityClassName"] == \
            "system-cluster-critical"
    # The patch docs/webhook.md ("Priority class") shows.
    objs = overlay(tmp_path / "priority", """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {repo}/manifests
patches:
  - target:
      kind: Deployment
      labelSelector: app.kubernetes.io/part-of=policylib
    patch: |-
      - op: replace
        path: /spec/template/spec/priorityClassName
        value: policylib-critical
""")
    assert {d["metadata"]["name"]: d["spec"]["template"]["spec"]["priorityClassName"]
            for d in by_kind(objs, "Deployment")} == {SERVICE: "policylib-critical", CONTROLLER: "policylib-critical"}


NETWORK_POLICY_OVERLAY = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {repo}/manifests{variant}
components:
  - {repo}/manifests/components/network-policy
"""


def test_network_policy_component_admits_only_the_webhook_port(base, tmp_path):
    component = yaml.safe_load((REPO / "manifests/components/network-policy/kustomization.yaml").read_text())
    assert (component["apiVersion"], component["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
    objs = overlay(tmp_path / "np", NETWORK_POLICY_OVERLAY.replace("{variant}", ""))
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    policy = one(objs, "NetworkPolicy")
    assert [o for o in objs if o["kind"] != "NetworkPolicy"] == base  # it only adds the policy
    assert policy["metadata"]["name"] == SERVICE and policy["metadata"]["namespace"] == NAMESPACE
    webhook = one(base, "Deployment", SERVICE)
    assert policy["spec"]["podSelector"] == webhook["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress"] and "egress" not in policy["spec"]
    # Every rule admits TCP to the webhook's container port only: the API server's calls, and the probes
    # and /metrics, which the webhook serves on that same port.
    (container,) = webhook["spec"]["template"]["spec"]["containers"]
    (port,) = container["ports"]
    assert (port["name"], port["containerPort"]) == ("https", 8443)
    assert container["readinessProbe"]["httpGet"]["port"] == "https"
    assert container["livenessProbe"]["tcpSocket"]["port"] == "https"
    assert webhook["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "8443"
    # Only the API server's traffic (the issue: "admits only the API server's traffic on the webhook port");
    # Prometheus is the user's to add (the file says how).
    assert policy["spec"]["ingress"] == [{"from": [{"ipBlock": {"cidr": "192.0.2.0/24"}}],  # a placeholder
                                          "ports": [{"protocol": "TCP", "port": 8443}]}]
    # The controller's pods are not selected (no rule may leave them unreachable for probes and metrics).
    assert policy["spec"]["podSelector"]["matchLabels"] != one(base, "Deployment", CONTROLLER)["spec"]["selector"][
        "matchLabels"]


def test_client_ca_component_requires_the_api_servers_client_certificate(base, tmp_path):
    """The component adds ``--client-ca`` and mounts ``ca.crt`` of the Secret policylib-webhook-client-ca (0440), and
    changes nothing else."""
    objs = overlay(tmp_path / "client-ca", """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {repo}/manifests
components:
  - {repo}/manifests/components/client-ca
""")
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    webhook, before = one(objs, "Deployment", SERVICE), one(base, "Deployment", SERVICE)
    pod, pod_before = webhook["spec"]["template"]["spec"], before["spec"]["template"]["spec"]
    (container,), (container_before,) = pod["containers"], pod_before["containers"]
    assert container["args"] == container_before["args"] + ["--client-ca=/etc/policylib/client-ca/ca.crt"]
    assert container["volumeMounts"] == container_before["volumeMounts"] + [
        {"name": "client-ca", "mountPath": "/etc/policylib/client-ca", "readOnly": True}]
    assert pod["volumes"] == pod_before["volumes"] + [
        {"name": "client-ca", "secret": {"secretName": "policylib-webhook-client-ca", "defaultMode": 0o440,
                                         "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]
    assert [o for o in objs if o is not webhook] == [o for o in base if o is not before]


def test_network_policy_component_with_cert_manager_and_the_users_api_server(tmp_path):
    objs = overlay(tmp_path / "np", NETWORK_POLICY_OVERLAY.replace("{variant}", "/cert-manager") + """\
patches:
  - target: {kind: NetworkPolicy, name: policylib-webhook}
    patch: |-
      - op: replace
        path: /spec/ingress/0/from
        value: [{ipBlock: {cidr: 10.0.0.0/28}}]
""")
    assert {c["metadata"]["name"] for c in by_kind(objs, "Certificate")} == {SERVICE, f"{SERVICE}-ca"}
    policy = one(objs, "NetworkPolicy")
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    assert policy["spec"]["ingress"][0] == {"from": [{"ipBlock": {"cidr": "10.0.0.0/28"}}],
                                            "ports": [{"protocol": "TCP", "port": 8443}]}


def images(objs: list[dict]) -> dict[str, list[str]]:
    return {d["metadata"]["name"]: [c["image"] for c in d["spec"]["template"]["spec"]["containers"]]
            for d in by_kind(objs, "Deployment")}


def test_images_entry_names_both_deployments_image(base, cert_manager):
    kustomization = yaml.safe_load((REPO / "manifests/base/kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "policylib", "newName": "policylib-webhook", "newTag": "0.1.0"}]
    for source in ("deployment.yaml", "controller.yaml"):
        assert re.findall(r"image: (\S+)", (REPO / "manifests/base" / source).read_text()) == ["policylib"]
    # The default install keeps the image it always had (docs/webhook.md builds policylib-webhook:0.1.0).
    for objs in (base, cert_manager):
        assert images(objs) == {SERVICE: ["policylib-webhook:0.1.0"], CONTROLLER: ["policylib-webhook:0.1.0"]}


#: What `kustomize edit set image policylib=registry.example.com/policylib:1.2.3` leaves in the base.
SET_IMAGE = [{"name": "policylib", "newName": "registry.example.com/policylib", "newTag": "1.2.3"}]
USERS_IMAGE = ["registry.example.com/policylib:1.2.3"]


def test_setting_the_image_in_the_base_moves_both_deployments(tmp_path):
    copy = tmp_path / "policylib"
    shutil.copytree(REPO / "manifests", copy / "manifests")
    path = copy / "manifests/base/kustomization.yaml"
    kustomization = yaml.safe_load(path.read_text())
    kustomization["images"] = SET_IMAGE
    path.write_text(yaml.safe_dump(kustomization, sort_keys=False))
    for variant in ("manifests", "manifests/cert-manager"):
        assert images(render(copy / variant)) == {SERVICE: USERS_IMAGE, CONTROLLER: USERS_IMAGE}


def test_setting_the_image_in_an_overlay_moves_both_deployments(tmp_path):
    objs = overlay(tmp_path / "mine", """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {repo}/manifests
images:
  - name: policylib-webhook
    newName: registry.example.com/policylib
    newTag: 1.2.3
""")
    assert images(objs) == {SERVICE: USERS_IMAGE, CONTROLLER: USERS_IMAGE}


@pytest.mark.skipif(shutil.which("kustomize") is None, reason="the kustomize CLI (for `kustomize edit`) is not on PATH")
def test_kustomize_edit_set_image_as_documented(tmp_path):
    copy = tmp_path / "policylib"
    shutil.copytree(REPO / "manifests", copy / "manifests")
    subprocess.run(["kustomize", "edit", "set", "image", "policylib=registry.example.com/policylib:1.2.3"],
                   cwd=copy / "manifests/base", check=True, capture_output=True)
    assert yaml.safe_load((copy / "manifests/base/kustomization.yaml").read_text())["images"] == SET_IMAGE
    assert images(render(copy / "manifests")) == {SERVICE: USERS_IMAGE, CONTROLLER: USERS_IMAGE}
    mine = tmp_path / "mine"
    overlay(mine, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                  "resources:\n  - {repo}/manifests\n")
    subprocess.run(["kustomize", "edit", "set", "image", "policylib-webhook=registry.example.com/policylib:1.2.3"],
                   cwd=mine, check=True, capture_output=True)
    assert images(render(mine)) == {SERVICE: USERS_IMAGE, CONTROLLER: USERS_IMAGE}


def test_alerts_and_dashboard_name_every_webhook_of_ours(base):
    """The API server's fail-open and rejection metrics are labelled by webhook name: every query that
    selects ours by name names all of them (a webhook left out fails open, or closed, unseen)."""
    names = {w["name"].removesuffix(".policylib.io") for w in one(base, "MutatingWebhookConfiguration")["webhooks"]}
    files = [REPO / "manifests/components/prometheus-rule/prometheusrule.yaml",
             REPO / "charts/policylib/files/prometheus-rules.yaml", REPO / "charts/policylib/files/dashboard.json"]
    for path in files:
        selections = re.findall(r'name=~\\*"\(([a-z|-]+)\)', path.read_text())
        assert selections, path
        assert all(set(s.split("|")) == names for s in selections), (path, selections, names)
