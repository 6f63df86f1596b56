"""The kustomize install with self-managed certificates, run as docs/webhook.md writes it (the shell block is
read from the page, so a change to the docs is what this tests), then an object of every kind each webhook of
the installed configuration matches: none is refused, and each one reached the webhook through the caBundle
the documented steps wrote.

The harness runs no kubelet for the webhook's image, so after the documented steps the test serves the webhook
on loopback with a serving certificate from the same CA (``certs --local`` keeps the CA, so the caBundle the steps
wrote is the one that must verify it) and points each webhook's clientConfig at that address, keeping its
caBundle. A webhook the steps left without a caBundle then fails TLS: ``gang-pods`` (failurePolicy Fail) refuses
its pod, and the other kinds arrive unreviewed; both fail here."""
from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.helpers import documented_install_steps

from .harness import E2E, ROOT, SHARED, deployment, free_port, wait_for
from .leaderworkersets import lws

#: The steps and the webhook configuration they write go through the API server of each minor.
pytestmark = pytest.mark.minors()

NS = "policylib-system"
CONFIGURATION = "policylib-webhook"
#: The upstream CRDs of the kinds the webhooks match beyond Deployments and Pods (kubeflow.org's MPIJob v1: one
#: CRD may hold the name mpijobs.kubeflow.org, and the shared cluster's other tests install this one).
CRDS = ("schemas/volcano/batch.volcano.sh_jobs.yaml", "schemas/kubeflow/kubeflow.org_tfjobs.yaml",
        "schemas/kubeflow/kubeflow.org_pytorchjobs.yaml", "schemas/kubeflow/kubeflow.org_mpijobs.yaml")
#: Upstream examples, one per custom kind: (file under ../shared/examples, the webhook that matches it).
EXAMPLES = (("volcano/job-basic.yaml", "volcano-jobs.policylib.io"),
            ("kubeflow/tfjob-multi-worker-strategy.yaml", "kubeflow-jobs.policylib.io"),
            ("kubeflow/pytorchjob-simple.yaml", "kubeflow-jobs.policylib.io"),
            ("kubeflow/mpijob-v1-tensorflow-mnist.yaml", "kubeflow-jobs.policylib.io"))


def jobset(namespace: str) -> dict:
    """A JobSet of two ReplicatedJobs' worth of pods (jobset.x-k8s.io/v1alpha2, the CRD of ``make jobset-crd``)."""
    pod = {"spec": {"restartPolicy": "Never", "containers": [{"name": "worker", "image": "registry.k8s.io/pause:3.10"}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "train", "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2,
                                         "template": {"spec": {"parallelism": 2, "completions": 2, "template": pod}}}]}}


def trainjob(namespace: str) -> dict:
    """A TrainJob (trainer.kubeflow.org/v1alpha1, the CRD of ``make trainer-crd``) whose runtime the cluster does not
    have: the webhook reads it once, finds none, writes nothing and admits it (rule T6)."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "tune", "namespace": namespace},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}}


def statefulset(namespace: str) -> dict:
    """A 3-replica StatefulSet (apps/v1): the Deployment's spread, rules A1-A9."""
    obj = deployment("cache", namespace, 3)
    obj["kind"] = "StatefulSet"
    obj["spec"]["serviceName"] = "cache"
    obj["spec"].pop("strategy", None)
    return obj


def gang_pod(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "gang-member", "namespace": namespace,
                         "labels": {"policylib.io/scheduling-group": "trainer"}},
            "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}


@pytest.fixture(scope="module")
def installed(cluster, tmp_path_factory):
    if not SHARED.is_dir():
        pytest.skip("../shared/ (upstream CRDs and examples) is not beside the project")
    cluster.install_crds(*CRDS)
    cluster.install_built_crds("jobset-crd")
    cluster.install_built_crds("trainer-crd")
    cluster.install_built_crds("testcluster-lws", "lws/crd/leaderworkerset.x-k8s.io_leaderworkersets.yaml")
    work = tmp_path_factory.mktemp("install-steps")
    # The paths the steps name, relative to a checkout: a copy of the manifests, the project's environment.
    shutil.copytree(ROOT / "manifests", work / "manifests")
    (work / ".venv").symlink_to(ROOT / ".venv")
    # the minor's kubectl first
    env = dict(cluster.env, PATH=os.pathsep.join((str(cluster.kubectl_path.parent), str(E2E / "bin"), os.environ["PATH"])))
    steps = subprocess.run(["bash", "-euo", "pipefail", "-c", documented_install_steps()], cwd=work, env=env,
                           capture_output=True, text=True, timeout=300)
    try:
        assert steps.returncode == 0, f"the documented steps failed ({steps.returncode}):\n{steps.stdout}\n{steps.stderr}"
        yield cluster, work, steps
    finally:
        # Leave the shared cluster as it was: the installed configuration intercepts every namespace.
        cluster.kubectl("delete", "-k", str(ROOT / "manifests"), "--ignore-not-found", "--wait=false", check=False)
        cluster.kubectl("wait", "--for=delete", f"namespace/{NS}", "--timeout=180s", check=False)
        # and without the configuration a controller reads its scope from by default (rule W5)
        wait_for("the webhook configuration is gone",
                 lambda: cluster.get_or_none("mutatingwebhookconfiguration", CONFIGURATION) is None, timeout=60)


def test_the_documented_steps_put_the_ca_bundle_on_every_webhook(installed):
    cluster, work, steps = installed
    bundle = base64.b64encode((work / "certs" / "ca.crt").read_bytes()).decode()
    hooks = cluster.get("mutatingwebhookconfiguration", CONFIGURATION)["webhooks"]
    shipped = yaml.safe_load((ROOT / "manifests/base/mutatingwebhookconfiguration.yaml").read_text())["webhooks"]
    assert [h["name"] for h in hooks] == [h["name"] for h in shipped]
    assert {h["name"]: h["clientConfig"].get("caBundle") for h in hooks} == {h["name"]: bundle for h in hooks}
    assert f"the caBundle is set on {len(hooks)} of them ({len(hooks)} webhooks: " in steps.stderr, steps.stderr
    secret = cluster.get("secret", "policylib-webhook-tls", NS)
    assert base64.b64decode(secret["data"]["tls.crt"]) == (work / "certs" / "tls.crt").read_bytes()


def _reviews(log: Path) -> list[dict]:
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("{") and '"msg":"review"' in line.replace(" ", ""):
            out.append(json.loads(line))
    return out


def test_an_object_of_every_kind_each_webhook_matches_is_admitted_through_the_documented_ca_bundle(
        installed, ns, tmp_path):
    cluster, work, _ = installed
    # The same CA, a serving certificate the API server can reach on loopback: the caBundle must not change.
    bundle = base64.b64encode((work / "certs" / "ca.crt").read_bytes()).decode()
    local = subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(work / "certs"), "--local"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert local.stdout.strip() == bundle
    port, log = free_port(), tmp_path / "webhook.log"
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-m", "webhook", "serve", "--cert-dir", str(work / "certs"),
                                   "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                                   "--kubeconfig", str(cluster.kubeconfig)], stdout=out, stderr=subprocess.STDOUT,
                                  cwd=ROOT)
    try:
        def ready() -> bool:
            assert server.poll() is None, f"the webhook exited {server.returncode}: {log.read_text()[-2000:]}"
            context = ssl.create_default_context(cafile=str(work / "certs" / "ca.crt"))
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context, timeout=5) as r:
                return r.status == 200
        wait_for("the webhook is ready", ready, timeout=60)
        hooks = cluster.get("mutatingwebhookconfiguration", CONFIGURATION)["webhooks"]
        patch = []
        for i, hook in enumerate(hooks):
            patch += [{"op": "test", "path": f"/webhooks/{i}/name", "value": hook["name"]},
                      {"op": "remove", "path": f"/webhooks/{i}/clientConfig/service"},
                      {"op": "add", "path": f"/webhooks/{i}/clientConfig/url", "value": f"https://127.0.0.1:{port}/mutate"}]
        cluster.kubectl("patch", "mutatingwebhookconfiguration", CONFIGURATION, "--type=json", "-p", json.dumps(patch))
        repointed = cluster.get("mutatingwebhookconfiguration", CONFIGURATION)["webhooks"]
        assert [h["clientConfig"].get("caBundle") for h in repointed] == [h["clientConfig"].get("caBundle") for h in hooks]

        cluster.namespace(ns)
        objects = [(deployment("web", ns, 3), "deployments.policylib.io")]
        for path, hook in EXAMPLES:
            obj = yaml.safe_load((SHARED / "examples" / path).read_text())
            obj["metadata"]["namespace"] = ns
            objects.append((obj, hook))
        objects.append((jobset(ns), "jobsets.policylib.io"))
        objects.append((gang_pod(ns), "gang-pods.policylib.io"))
        objects.append((trainjob(ns), "trainjobs.policylib.io"))
        objects.append((statefulset(ns), "statefulsets.policylib.io"))
        objects.append((lws("serving", ns, size=2, replicas=3), "leaderworkersets.policylib.io"))
        assert {hook for _, hook in objects} == {h["name"] for h in hooks}, "a webhook without an object here"
        refused = []
        for obj, _ in objects:
            run = cluster.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
            if run.returncode != 0:
                refused.append(f"{obj['kind']}/{obj['metadata']['name']}: {run.stderr.strip()}")
        assert refused == []

        def reviewed() -> set[tuple[str, str]]:
            return {(r["kind"], r["name"]) for r in _reviews(log) if r["namespace"] == ns and r["allowed"]
                    and r["operation"] == "CREATE" and not r["dryRun"]}
        wanted = {(obj["kind"], obj["metadata"]["name"]) for obj, _ in objects}
        wait_for("a review of every object", lambda: wanted <= reviewed(), timeout=30)
        stored = cluster.get("deployment", "web", ns)
        assert "policylib.io/spread-effective-replicas" in stored["metadata"]["annotations"]
        stored = cluster.get("statefulset", "cache", ns)
        assert stored["metadata"]["annotations"]["policylib.io/spread-effective-replicas"] == "3"
        stored = cluster.get("leaderworkersets.leaderworkerset.x-k8s.io", "serving", ns)
        assert stored["metadata"]["annotations"]["policylib.io/spread-effective-replicas"] == "3"
        assert stored["metadata"]["annotations"]["policylib.io/leader-template"] == "generated"
    finally:
        server.terminate()
        server.wait(30)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
