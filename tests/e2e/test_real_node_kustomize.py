"""``kubectl apply -k manifests/`` on the real node, verbatim, the way the README installs it: the image ``make image``
builds (``policylib-webhook:0.1.0``, imported into the node's containerd; the manifests' ``IfNotPresent`` finds it),
the TLS Secret made by ``python -m webhook certs`` and its ``caBundle`` patched in by the same command
(docs/webhook.md, "Certificates"). The harness's fake nodes are cordoned, so the pods can only land on ``real-0``.
The webhook and controller pods run Running and Ready; the API server calls the webhook through its Service; a
Deployment, a Volcano Job and a TFJob created with ``kubectl apply`` are stored exactly as ``policylib preview``
says with the shipped config (``manifests/base/config.yaml``: gang labels for Kubeflow jobs, Volcano Jobs left
alone until ``volcano.partitionSize`` is set) (docs/e2e.md, "A real node")."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.test_image import ARCHIVE

from .harness import ROOT, Cluster, deployment
from .test_real_node import built  # noqa: F401 -- the fixture: real nodes can run here, their binaries exist
from .test_real_node_chart import (
    CRDS,
    FAKE_ZONE,
    NAMESPACE,
    TFJOB,
    VOLCANO_JOB,
    contains,
    jobs_in,
    pods,
    policylib_metadata,
    ready,
    stored_as_preview,
    wait_for_reviews,
)
from .util import managed, preview

pytestmark = pytest.mark.timeout(900)
SHIPPED = yaml.safe_load((ROOT / "manifests/base/config.yaml").read_text())


@pytest.fixture(scope="module")
def kustomize_on_real_node(built, tmp_path_factory):  # noqa: F811
    if not ARCHIVE.is_file():
        pytest.fail(f"{ARCHIVE.relative_to(ROOT)} missing: `make image` builds it", pytrace=False)
    tmp = tmp_path_factory.mktemp("real-kustomize")
    c = Cluster(tmp / "c", extra_args=("--real-node", "--image", str(ARCHIVE)))
    try:
        for node in c.list("nodes"):
            if node["metadata"]["name"] != "real-0":
                c.kubectl("cordon", node["metadata"]["name"])
        c.install_crds(*CRDS)
        c.kubectl("apply", "-k", str(ROOT / "manifests"))
        certs = tmp / "certs"
        run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--service", "policylib-webhook",
                              "--namespace", NAMESPACE, "--out", str(certs)], capture_output=True, text=True,
                             cwd=ROOT, timeout=60)
        assert run.returncode == 0, run.stderr
        c.kubectl("-n", NAMESPACE, "create", "secret", "tls", "policylib-webhook-tls",
                  "--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key"))
        run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--service", "policylib-webhook",
                              "--namespace", NAMESPACE, "--out", str(certs), "--patch-configuration",
                              "policylib-webhook"], capture_output=True, text=True, cwd=ROOT, env=c.env, timeout=60)
        assert run.returncode == 0, run.stderr
        for name in ("policylib-webhook", "policylib-controller"):
            c.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{name}", "--timeout=480s", timeout=510)
        yield c, tmp
    finally:
        code = c.stop(timeout=120)
        assert code == 0, c.stderr_text()


def test_the_pods_run_on_the_real_node(kustomize_on_real_node):
    c, _ = kustomize_on_real_node
    for app in ("policylib-webhook", "policylib-controller"):
        running = pods(c, app)
        assert len(running) == 2, app
        for pod in running:
            assert pod["spec"]["nodeName"] == "real-0" and ready(pod), pod["status"]
            (status,) = pod["status"]["containerStatuses"]
            assert status["restartCount"] == 0 and status["image"].endswith("policylib-webhook:0.1.0"), status
    leases = c.list("leases", NAMESPACE)
    assert [lease["spec"].get("holderIdentity") for lease in leases if lease["metadata"]["name"] ==
            "policylib-controller"][0] in {p["metadata"]["name"] for p in pods(c, "policylib-controller")}


def test_objects_created_with_kubectl_are_stored_as_preview_says(kustomize_on_real_node):
    c, tmp = kustomize_on_real_node
    c.kubectl("create", "namespace", "apps")
    got, expected = stored_as_preview(c, tmp, deployment("web", "apps", 3, node_selector=FAKE_ZONE), "deployment",
                                      SHIPPED)
    assert managed(got) == managed(expected)
    got, expected = stored_as_preview(c, tmp, jobs_in(TFJOB, "apps"), "tfjobs.kubeflow.org", SHIPPED)
    assert contains(got["spec"], expected["spec"]) and policylib_metadata(got) == policylib_metadata(expected)
    # Volcano Jobs: the shipped config leaves them alone; stored as sent, and the webhook was asked
    job = jobs_in(VOLCANO_JOB, "apps")
    assert preview([job], SHIPPED, tmp)[0] == job
    c.kubectl("apply", "-f", "-", input=json.dumps(job))
    stored = c.get("jobs.batch.volcano.sh", job["metadata"]["name"], "apps")
    assert contains(stored["spec"], job["spec"]) and policylib_metadata(stored) == policylib_metadata(job)
    wait_for_reviews(c, "apps", {("Deployment", "web", True), ("TFJob", "tfjob-simple", True), ("Job", "test-job", False)})
