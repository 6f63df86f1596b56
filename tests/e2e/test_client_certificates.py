"""Caller authentication end to end (docs/webhook.md, "Caller authentication"; rule W13): the harness's API server
started with an AdmissionConfiguration whose webhook kubeconfig gives it a client certificate for one webhook
(``users[].name`` the webhook's host and port, as the API server looks it up), and two local webhooks serving with
``--client-ca``:

- ``verified``: the client CA signed the API server's certificate. The API server's reviews are answered (a
  Deployment is stored mutated); a caller without a certificate gets 403.
- ``refusing``: its client CA is another one, and the API server has no certificate for it. Each review is
  refused, so the API server applies the webhook's ``failurePolicy: Ignore`` (its fail-open counter moves) and the
  Deployment is stored unchanged.
"""
from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest
import yaml
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.test_webhook_tls import new_ca, new_leaf, write

from .harness import Cluster, Webhook, deployment, free_port, wait_for
from .test_certificates_e2e import apiserver_counter

pytestmark = pytest.mark.timeout(600)
ANNOTATION = "policylib.io/spread-effective-replicas"


def admission_configuration(tmp, port: int, client: tuple) -> str:
    """The AdmissionConfiguration (MutatingAdmissionWebhook) and its kubeconfig: the client certificate for the
    webhook at 127.0.0.1:port (a webhook behind a Service would be ``policylib-webhook.policylib-system.svc``)."""
    kubeconfig = tmp / "webhook-kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "users": [
        {"name": f"127.0.0.1:{port}", "user": {"client-certificate": str(client[0]), "client-key": str(client[1])}}]}))
    config = tmp / "admission.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
        "plugins": [{"name": "MutatingAdmissionWebhook", "configuration": {
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(kubeconfig)}}]}))
    return str(config)


def webhook_metric(hook: Webhook, name: str) -> float:
    context = ssl.create_default_context(cafile=str(hook.cert_dir / "ca.crt"))
    with urllib.request.urlopen(f"https://127.0.0.1:{hook.port}/metrics", context=context, timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


@pytest.fixture(scope="module")
def setup(harness_built, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("client-certs")
    ca, other_ca = new_ca("apiserver-client-ca"), new_ca("another-client-ca")
    ca_path = write(tmp / "ca", "client-ca", ca[0])[0]
    other_path = write(tmp / "other", "client-ca", other_ca[0])[0]
    client = write(tmp, "apiserver-client", *new_leaf(ca, "kube-apiserver", ExtendedKeyUsageOID.CLIENT_AUTH))
    port = free_port()
    cluster = Cluster(tmp / "c", extra_args=("--admission-control-config-file",
                                             admission_configuration(tmp, port, client)))
    hooks = []
    try:
        verified = Webhook(cluster, "verified", {}, tmp, port=port, extra=("--client-ca", str(ca_path))).start()
        hooks.append(verified)
        refusing = Webhook(cluster, "refusing", {}, tmp, extra=("--client-ca", str(other_path))).start()
        hooks.append(refusing)
        verified.register()   # waits until a review the API server sends comes back mutated
        cluster.apply(refusing.configuration())
        yield cluster, verified, refusing
    finally:
        for hook in hooks:
            hook.stop()
        assert cluster.stop() == 0, cluster.stderr_text()


def test_the_api_server_presents_its_client_certificate_and_its_reviews_are_answered(setup):
    cluster, verified, _ = setup
    ns = cluster.namespace("client-cert-verified", config="verified")
    cluster.apply(deployment("web", ns, replicas=3))
    stored = cluster.get("deployment", "web", ns)
    assert stored["metadata"]["annotations"][ANNOTATION] == "3"
    # the review's log line follows its answer: it may come a moment after the API server stored the object
    logged = wait_for("the webhook logs its review of web",
                      lambda: [r["name"] for r in verified.reviews() if r.get("namespace") == ns], timeout=60)
    assert logged == ["web"]


def test_a_caller_without_the_certificate_gets_403(setup):
    _, verified, _ = setup
    context = ssl.create_default_context(cafile=str(verified.cert_dir / "ca.crt"))
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "anonymous", "operation": "CREATE", "namespace": "x",
                          "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                          "object": deployment("forged", "x")}}
    request = urllib.request.Request(f"https://127.0.0.1:{verified.port}/mutate", data=json.dumps(review).encode(),
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, context=context, timeout=10)
    assert refused.value.code == 403
    assert json.loads(refused.value.read())["error"].startswith("a client certificate verified by")
    assert "anonymous" not in {r["uid"] for r in verified.reviews()}


def test_a_webhook_whose_client_ca_did_not_sign_the_api_servers_certificate_refuses_its_reviews(setup):
    """No certificate for this webhook in the API server's kubeconfig: the webhook answers 403, the API server
    counts a fail-open (failurePolicy Ignore) and stores the Deployment without policy."""
    cluster, _, refusing = setup
    ns = cluster.namespace("client-cert-refused", config="refusing")
    hook = "deployments.refusing.e2e.policylib.io"
    before = apiserver_counter(cluster, "apiserver_admission_webhook_fail_open_count", hook)
    cluster.apply(deployment("web", ns, replicas=3))
    stored = cluster.get("deployment", "web", ns)
    assert ANNOTATION not in (stored["metadata"].get("annotations") or {})
    assert apiserver_counter(cluster, "apiserver_admission_webhook_fail_open_count", hook) >= before + 1
    wait_for("the refusing webhook counted a 403",
             lambda: webhook_metric(refusing, 'policylib_webhook_bad_requests_total{code="403"}') >= 1, timeout=30)
    assert refusing.reviews() == []
