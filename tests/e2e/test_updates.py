"""UPDATE semantics against the real API server, its deployment controller and the policylib controller."""
from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from .conftest import CONFIGS
from .harness import Controller, b64, deployment, wait_for
from .util import host_constraint, managed, replicasets, wait_rolled_out

RECORD = "policylib.io/spread-effective-replicas"


@pytest.fixture(scope="module")
def controller(cluster, webhooks, tmp_path_factory):
    """One controller with the enforce config (reconcileDrift off: it only follows count changes)."""
    webhooks("enforce")
    cluster.namespace("policylib-e2e-leases")
    c = Controller(cluster, CONFIGS["enforce"], tmp_path_factory.mktemp("controller"), "updates",
                   "policylib-e2e-leases")
    wait_for("the controller leads and has listed", lambda: c.status().items() >= {
        "leader": True, "synced": True, "firstSync": True, "dryRun": False}.items(), timeout=60)
    yield c
    c.stop()


def test_image_change_rolls_once_and_keeps_placement(cluster, webhooks, ns):
    webhooks("enforce")
    cluster.namespace(ns, config="enforce")
    web = deployment("web", ns, 4)
    cluster.apply(web)
    before = wait_rolled_out(cluster, ns, "web")
    web["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/app:2"
    cluster.apply(web)
    after = wait_rolled_out(cluster, ns, "web")
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert managed(after) == managed(before)
    assert after["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/app:2"
    sets = replicasets(cluster, ns, "web")
    assert sorted(rs["spec"]["replicas"] for rs in sets) == [0, 4], "one rollout: the old and the new ReplicaSet"


def test_scale_subresource_then_controller_rewrites(cluster, controller, ns):
    cluster.namespace(ns, config="enforce")
    cluster.apply(deployment("web", ns, 4))
    assert host_constraint(cluster.get("deployment", "web", ns))["maxSkew"] == 2
    cluster.kubectl("scale", "deployment/web", "-n", ns, "--replicas=9")   # no admission review for scale

    def rewritten():
        d = cluster.get("deployment", "web", ns)
        return d if d["metadata"]["annotations"][RECORD] == "9" else None
    d = wait_for("the controller rewrites the spread for 9 replicas", rewritten, timeout=90)
    assert host_constraint(d)["maxSkew"] == 3
    assert d["spec"]["replicas"] == 9


def test_hpa_minimum_change_then_controller_rewrites(cluster, controller, ns):
    cluster.namespace(ns, config="enforce")
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "web", "namespace": ns},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 3, "maxReplicas": 20}}
    cluster.apply(deployment("web", ns, 3), hpa)
    wait_for("record 3", lambda: cluster.get("deployment", "web", ns)["metadata"]["annotations"][RECORD] == "3")
    cluster.kubectl("patch", "hpa/web", "-n", ns, "--type=merge", "-p", '{"spec": {"minReplicas": 12}}')

    def rewritten():
        d = cluster.get("deployment", "web", ns)
        return d if d["metadata"]["annotations"][RECORD] == "12" else None
    d = wait_for("the controller rewrites the spread for the HPA minimum 12", rewritten, timeout=90)
    assert (host_constraint(d)["maxSkew"], host_constraint(d)["whenUnsatisfiable"]) == (4, "DoNotSchedule")


def test_replace_without_constraints_keeps_them(cluster, webhooks, ns):
    webhooks("enforce")
    cluster.namespace(ns, config="enforce")
    web = deployment("web", ns, 4)
    cluster.apply(web)
    before = wait_rolled_out(cluster, ns, "web")
    sets_before = [rs["metadata"]["uid"] for rs in replicasets(cluster, ns, "web")]
    assert len(sets_before) == 1
    cluster.kubectl("replace", "-f", "-", input=json.dumps(web))   # the manifest, without constraints or record
    after = wait_rolled_out(cluster, ns, "web")
    assert managed(after) == managed(before)
    # The replace drops kubectl's and the deployment controller's annotations, and any annotation change
    # bumps a Deployment's generation (the API server's deployment strategy); the pod template is untouched,
    # so nothing rolls.
    assert after["spec"]["template"] == before["spec"]["template"]
    assert [rs["metadata"]["uid"] for rs in replicasets(cluster, ns, "web")] == sets_before


def test_server_side_dry_run_answers_the_same_and_stores_nothing(cluster, webhooks, ns):
    hook = webhooks("enforce")
    cluster.namespace(ns, config="enforce")
    web = deployment("web", ns, 7)
    dry = json.loads(cluster.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-",
                                     input=json.dumps(web)).stdout)
    assert cluster.get_or_none("deployment", "web", ns) is None
    cluster.apply(web)
    assert managed(dry) == managed(cluster.get("deployment", "web", ns))
    reviews = [r for r in wait_for("two reviews logged", lambda: _reviews(hook, ns, "web", 2))]
    assert [r["dryRun"] for r in reviews] == [True, False]
    assert [r["mutated"] for r in reviews] == [True, True]


def _reviews(hook, namespace, name, count):
    got = [r for r in hook.reviews() if r.get("namespace") == namespace and r.get("name") == name]
    return got if len(got) >= count else None


class _Editor(BaseHTTPRequestHandler):
    """A second mutating webhook: adds an annotation to every object it sees."""

    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        annotations = review["request"]["object"]["metadata"].get("annotations")
        patch = ([{"op": "add", "path": "/metadata/annotations/e2e.policylib.io~1edited", "value": "yes"}]
                 if annotations else
                 [{"op": "add", "path": "/metadata/annotations", "value": {"e2e.policylib.io/edited": "yes"}}])
        if annotations and "e2e.policylib.io/edited" in annotations:
            patch = []
        response = {"uid": review["request"]["uid"], "allowed": True}
        if patch:
            response.update(patchType="JSONPatch", patch=b64(json.dumps(patch)))
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_reinvocation_yields_no_further_patch(cluster, webhooks, ns):
    """Our webhook runs first (its configuration sorts first); the editor then changes the object, so the
    API server calls ours again (reinvocationPolicy IfNeeded): that second review must patch nothing."""
    hook = webhooks("enforce")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Editor)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(hook.cert_dir / "tls.crt", hook.cert_dir / "tls.key")
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    editor = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
              "metadata": {"name": "zz-e2e-editor"},
              "webhooks": [{"name": "editor.e2e.policylib.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                            "failurePolicy": "Fail", "timeoutSeconds": 5, "reinvocationPolicy": "Never",
                            "clientConfig": {"url": f"https://127.0.0.1:{server.server_port}/", "caBundle": hook.ca_bundle},
                            "rules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"],
                                       "operations": ["CREATE"]}],
                            "namespaceSelector": {"matchLabels": {"e2e.policylib.io/editor": ns}}}]}
    try:
        cluster.apply(editor)
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": ns, "labels": {"e2e.policylib.io/config": "enforce", "e2e.policylib.io/editor": ns}}})
        wait_for("the editor webhook is called", lambda: "e2e.policylib.io/edited" in (json.loads(cluster.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(deployment("probe", ns))).stdout)
            ["metadata"].get("annotations") or {}), timeout=60)
        cluster.apply(deployment("web", ns, 4))
        stored = cluster.get("deployment", "web", ns)
        assert stored["metadata"]["annotations"]["e2e.policylib.io/edited"] == "yes"
        assert stored["metadata"]["annotations"][RECORD] == "4"
        reviews = wait_for("the first review and its reinvocation", lambda: _reviews(hook, ns, "web", 2))
        assert [(r["operation"], r["mutated"]) for r in reviews] == [("CREATE", True), ("CREATE", False)]
    finally:
        cluster.kubectl("delete", "mutatingwebhookconfiguration", "zz-e2e-editor", "--ignore-not-found", check=False)
        server.shutdown()


def test_webhook_config_yaml_roundtrip():
    """The configs the scenarios use are valid policylib configs."""
    import policylib
    for config in CONFIGS.values():
        policylib.load_config(yaml.safe_load(yaml.safe_dump(config)))


def test_replace_of_a_pre_existing_deployment_keeps_its_placement(cluster, webhooks, ns):
    """Created before the webhook (no record), with the legacy anti-affinity and its own host constraint; a
    replace by a manifest without either, count unchanged, keeps both (and says so), and nothing rolls."""
    webhooks("default")
    cluster.namespace(ns)                       # no webhook yet
    old = deployment("web", ns, 3)
    old["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    host = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}}}
    old["spec"]["template"]["spec"]["topologySpreadConstraints"] = [host]
    cluster.apply(old)
    before = wait_rolled_out(cluster, ns, "web")
    cluster.namespace(ns, config="default")     # the webhook is installed
    run = cluster.kubectl("replace", "-f", "-", input=json.dumps(deployment("web", ns, 3)))
    assert "kept the dropped placement (anti-affinity; spread on kubernetes.io/hostname)" in run.stderr
    after = wait_rolled_out(cluster, ns, "web")
    assert after["spec"]["template"] == before["spec"]["template"]
    assert len(replicasets(cluster, ns, "web")) == 1
