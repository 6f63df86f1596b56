"""The chart the way users install it, on the real node: ``helm install charts/policylib`` with the image ``make image``
builds (imported into the node's containerd), the webhook pod Running and Ready with the chart's securityContext
(non-root, read-only root filesystem) and probes, the API server calling the webhook through its Service (its ready
endpoint, the pod IP), and a Deployment created with ``kubectl apply`` stored mutated exactly as ``policylib preview``
says (docs/e2e.md, "A real node").

Not here yet: the controller (it needs the API server from inside a pod: a service-account token and a route to
the API server, which the harness does not give pods), the self-managed certificates (the controller makes them), two
replicas (one real node) and the NetworkPolicy (no network plugin here enforces one).
"""
from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest
import yaml

from tests.helmtool import CHART, helm_binary
from tests.test_image import ARCHIVE

from .harness import ROOT, Cluster, deployment, wait_for
from .test_real_node import built  # noqa: F401 -- the fixture: real nodes can run here, their binaries exist
from .util import managed, preview

pytestmark = pytest.mark.timeout(600)
NAMESPACE = "policylib-system"


@pytest.fixture(scope="module")
def chart_on_real_node(built, tmp_path_factory):  # noqa: F811
    if not ARCHIVE.is_file():
        pytest.fail(f"{ARCHIVE.relative_to(ROOT)} missing: `make image` builds it", pytrace=False)
    tmp = tmp_path_factory.mktemp("real-chart")
    certs = tmp / "certs"
    run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(certs)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    c = Cluster(tmp / "c", extra_args=("--real-node", "--image", str(ARCHIVE)))
    try:
        c.kubectl("create", "namespace", NAMESPACE)
        c.kubectl("-n", NAMESPACE, "create", "secret", "tls", "policylib-webhook-tls",
                  "--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key"))
        values = {
            "certificates": {"mode": "existingSecret", "existingSecret": {
                "name": "policylib-webhook-tls",
                "caBundle": base64.b64encode((certs / "ca.crt").read_bytes()).decode()}},
            "controller": {"enabled": False},
            "webhook": {"replicas": 1, "nodeSelector": {"kubernetes.io/hostname": "real-0"}},
            "image": {"pullPolicy": "Never"},
        }
        (tmp / "values.yaml").write_text(yaml.safe_dump(values))
        install = subprocess.run([str(helm_binary()), "install", "policylib", str(CHART), "-n", NAMESPACE,
                                  "-f", str(tmp / "values.yaml"), "--wait", "--timeout", "240s"],
                                 capture_output=True, text=True, env=c.env, timeout=300)
        assert install.returncode == 0, (install.stdout, install.stderr,
                                         c.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide").stdout)
        yield c, tmp
    finally:
        code = c.stop(timeout=90)
        assert code == 0, c.stderr_text()


def test_the_webhook_pod_runs_the_image_on_the_real_node(chart_on_real_node):
    c, _ = chart_on_real_node
    pods = json.loads(c.kubectl("-n", NAMESPACE, "get", "pods", "-o", "json").stdout)["items"]
    assert len(pods) == 1
    pod = pods[0]
    assert pod["spec"]["nodeName"] == "real-0"
    assert {x["type"]: x["status"] for x in pod["status"]["conditions"]}["Ready"] == "True"
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] and status["restartCount"] == 0, status
    assert status["image"].endswith("policylib-webhook:0.1.0")
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    slices = json.loads(c.kubectl("-n", NAMESPACE, "get", "endpointslices", "-o", "json").stdout)["items"]
    addresses = {a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]}
    assert addresses == {pod["status"]["podIP"]}


def test_a_deployment_created_with_kubectl_is_mutated_as_preview_says(chart_on_real_node):
    c, tmp = chart_on_real_node
    c.kubectl("create", "namespace", "apps")
    body = deployment("web", "apps", 3)
    expected = preview([body], {}, tmp)[0]
    assert managed(expected) != managed(body), "preview changes nothing: the comparison could not fail"

    def created():
        c.kubectl("apply", "-f", "-", input=json.dumps(body))
        got = json.loads(c.kubectl("-n", "apps", "get", "deployment", "web", "-o", "json").stdout)
        if managed(got) == managed(body):  # admitted unchanged (failurePolicy Ignore): not yet reachable
            c.kubectl("-n", "apps", "delete", "deployment", "web", "--wait=true")
            return None
        return got

    got = wait_for("the Deployment mutated by the webhook through its Service", created, timeout=120)
    assert managed(got) == managed(expected)
