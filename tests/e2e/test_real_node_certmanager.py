"""The cert-manager install paths on the real node against cert-manager itself, each in a cluster of its own: the
README's second path, ``kubectl apply -k manifests/cert-manager``, and the chart's ``certificates.mode: cert-manager``
(``helm install -f docs/examples/values-cert-manager.yaml``, the documented values file as it is). cert-manager's
controller and cainjector are built from the release's Go module (``make cert-manager``, e2e/cert-manager/go.mod
pins it) and run out of cluster against the harness's API server, the release's CRDs installed (docs/e2e.md,
"cert-manager in the harness"). The image ``make image`` builds runs the webhook on ``real-0`` as
test_real_node_kustomize.py runs it; here cert-manager, not ``python -m webhook certs`` or the controller, makes
the CA, the serving certificate and the ``caBundle``:

- both Certificates Ready, the Secret holding ``tls.crt``/``tls.key``/``ca.crt``, the cainjector's ``caBundle`` equal
  to the CA Secret's ``ca.crt``, the webhook pods Ready, a Deployment stored exactly as ``policylib preview`` says;
- a renewal triggered as ``cmctl renew`` triggers it (the Certificate's ``Issuing`` condition) while
  :class:`~tests.e2e.day2load.AdmissionLoad` creates Deployments continuously: a new serial and a new key
  (``rotationPolicy: Always``), every pod serving it (the kubelet's Secret volume, the webhook's file reload),
  0 failed, 0 admitted unmutated, 0 fail-open, 0 rejected.
"""
from __future__ import annotations

import base64
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from tests.helmtool import CHART, helm_binary
from tests.test_image import ARCHIVE

from .day2load import AdmissionLoad
from .harness import E2E, ROOT, Cluster, deployment, require_built, wait_for
from .test_real_node import built  # noqa: F401 -- the fixture: real nodes can run here, their binaries exist
from .test_real_node_chart import CRDS, FAKE_ZONE, NAMESPACE, pods, ready, stored_as_preview
from .test_real_node_day2 import served_certificate
from .util import managed

pytestmark = pytest.mark.timeout(900)
CERT_MANAGER = E2E / "bin" / "cert-manager"
SHIPPED = yaml.safe_load((ROOT / "manifests/base/config.yaml").read_text())
SERVING, CA = "policylib-webhook", "policylib-webhook-ca"   # the Certificates (and the CA's Secret)
SECRET = "policylib-webhook-tls"
LOAD_NS = "certmanager-load"
LEASES = "cert-manager"   # the namespace of the cainjector's leader-election Lease


class CertManager:
    """cert-manager's controller and cainjector, processes on the host with the cluster's kubeconfig."""

    def __init__(self, c: Cluster, tmp: Path):
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        args = {"controller": ["--cluster-resource-namespace", LEASES],
                "cainjector": ["--leader-election-namespace", LEASES]}
        for name, extra in args.items():
            self.logs[name] = tmp / f"cert-manager-{name}.log"
            with open(self.logs[name], "w") as log:
                self.procs[name] = subprocess.Popen(
                    [str(CERT_MANAGER / name), "--kubeconfig", str(c.kubeconfig), *extra],
                    stdout=log, stderr=subprocess.STDOUT)

    def running(self) -> None:
        """Fails, with its log, when a process has exited."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"cert-manager {name} exited {proc.returncode}: {self.log(name)[-3000:]}")

    def log(self, name: str) -> str:
        return self.logs[name].read_text()

    def stop(self) -> dict[str, int]:
        """SIGTERM to both, a kill after 30 s; their exit statuses."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        return {name: proc.returncode for name, proc in self.procs.items()}


def install_cert_manager_crds(c: Cluster) -> None:
    path = CERT_MANAGER / "crd" / "cert-manager.crds.yaml"
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(path.read_text()) if d]
    # Certificates, CertificateRequests, Issuers, ClusterIssuers, Orders, Challenges
    assert len(names) == 6, names
    c.kubectl("apply", "--server-side", "-f", str(path))
    c.kubectl("wait", "--for=condition=Established", *[f"crd/{n}" for n in names], "--timeout=120s")


#: The chart's documented values file for this mode (docs/helm.md, "cert-manager"), installed as it is.
CHART_VALUES = ROOT / "docs/examples/values-cert-manager.yaml"
#: The policylib config each path installs (what ``policylib preview`` is given).
CONFIGS = {"kustomize": SHIPPED, "chart": yaml.safe_load(CHART_VALUES.read_text()).get("config") or {}}


def install(c: Cluster, path: str) -> None:
    """``kubectl apply -k manifests/cert-manager``, or ``helm install`` of the chart with the documented values file
    (``--wait``: both Deployments rolled out, which needs the Secret cert-manager issues)."""
    if path == "kustomize":
        c.kubectl("apply", "-k", str(ROOT / "manifests/cert-manager"))
        return
    run = subprocess.run([str(helm_binary()), "install", "policylib", str(CHART), "-n", NAMESPACE, "--create-namespace",
                          "-f", str(CHART_VALUES), "--wait", "--timeout", "480s"],
                         capture_output=True, text=True, env=c.env, timeout=540)
    assert run.returncode == 0, (run.stdout, run.stderr, c.kubectl("-n", NAMESPACE, "get", "pods,certificates",
                                                                   "-o", "wide").stdout)


@pytest.fixture(scope="module", params=["kustomize", "chart"])
def cert_manager_install(built, tmp_path_factory, request):  # noqa: F811
    """One real-node cluster per install path (pytest ends the first before it starts the second)."""
    if not ARCHIVE.is_file():
        pytest.fail(f"{ARCHIVE.relative_to(ROOT)} missing: `make image` builds it", pytrace=False)
    require_built("cert-manager")
    path = request.param
    tmp = tmp_path_factory.mktemp(f"real-certmanager-{path}")
    c = Cluster(tmp / "c", extra_args=("--real-node", "--image", str(ARCHIVE)))
    cm: CertManager | None = None
    try:
        for node in c.list("nodes"):
            if node["metadata"]["name"] != "real-0":
                c.kubectl("cordon", node["metadata"]["name"])
        install_cert_manager_crds(c)
        c.install_crds(*CRDS)
        c.kubectl("create", "namespace", LEASES)
        c.kubectl("create", "namespace", LOAD_NS)
        cm = CertManager(c, tmp)
        install(c, path)
        wait_for(f"cert-manager issued Secret {SECRET}", lambda: cm.running() or c.get_or_none("secret", SECRET, NAMESPACE),
                 timeout=180, interval=0.5)
        for name in ("policylib-webhook", "policylib-controller"):
            c.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{name}", "--timeout=480s", timeout=510)
        cm.running()
        yield c, tmp, cm, path
    finally:
        stopped = cm.stop() if cm else {}
        code = c.stop(timeout=120)
        assert code == 0, c.stderr_text()
        # both ended on SIGTERM by themselves (not killed), before the API server went away
        assert stopped == dict.fromkeys(stopped, 0), (stopped, {n: cm.log(n)[-2000:] for n in stopped} if cm else {})


def condition(obj: dict, kind: str) -> str | None:
    return {x["type"]: x["status"] for x in (obj.get("status") or {}).get("conditions") or []}.get(kind)


def secret_data(c: Cluster, name: str) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (c.get("secret", name, NAMESPACE).get("data") or {}).items()}


def ca_bundle(c: Cluster) -> set[bytes]:
    hooks = c.get("mutatingwebhookconfiguration", "policylib-webhook")["webhooks"]
    return {base64.b64decode(h["clientConfig"].get("caBundle") or "") for h in hooks}


def public_key(cert: x509.Certificate) -> bytes:
    return cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


def test_issued_injected_and_admitting(cert_manager_install):
    c, tmp, cm, path = cert_manager_install
    if path == "chart":   # the chart's objects, as its mode renders them: no certificate of the controller's
        annotations = c.get("mutatingwebhookconfiguration", "policylib-webhook")["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{SERVING}"
        args = c.get("deployment", "policylib-controller", NAMESPACE)["spec"]["template"]["spec"]["containers"][0]["args"]
        assert not [a for a in args if a.startswith("--certificates")], args
        assert {i["metadata"]["name"] for i in c.list("issuers", NAMESPACE)} == {"policylib-selfsigned", CA}
    for name in (CA, SERVING):
        cert = wait_for(f"Certificate {name} Ready", lambda n=name: (
            got if condition(got := c.get("certificate", n, NAMESPACE), "Ready") == "True" else None), timeout=120)
        assert cert["status"]["revision"] == 1, cert["status"]
    tls, ca = secret_data(c, SECRET), secret_data(c, CA)
    assert set(tls) == {"tls.crt", "tls.key", "ca.crt"}, sorted(tls)
    assert tls["ca.crt"] == ca["ca.crt"] == ca["tls.crt"]   # the self-signed CA signed the serving certificate
    serving = x509.load_pem_x509_certificate(tls["tls.crt"])
    assert serving.issuer == x509.load_pem_x509_certificate(ca["ca.crt"]).subject
    assert set(serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)) == {"policylib-webhook", "policylib-webhook.policylib-system",
                           "policylib-webhook.policylib-system.svc",
                           "policylib-webhook.policylib-system.svc.cluster.local"}
    # the cainjector, reading cert-manager.io/inject-ca-from, wrote the CA into every webhook's caBundle
    assert wait_for("caBundle injected", lambda: ca_bundle(c) == {ca["ca.crt"]} or None, timeout=120)
    webhooks = pods(c, "policylib-webhook")
    assert len(webhooks) == 2 and all(p["spec"]["nodeName"] == "real-0" and ready(p) for p in webhooks), webhooks
    for p in webhooks:
        assert served_certificate(p["status"]["podIP"]) == serving.public_bytes(Encoding.DER)
    c.kubectl("create", "namespace", "apps")
    got, expected = stored_as_preview(c, tmp, deployment("web", "apps", 3, node_selector=FAKE_ZONE), "deployment",
                                      CONFIGS[path])
    assert managed(got) == managed(expected)
    cm.running()


def test_a_renewal_under_load_fails_no_admission(cert_manager_install):
    c, _, cm, path = cert_manager_install
    wait_for("Certificate Ready", lambda: condition(c.get("certificate", SERVING, NAMESPACE), "Ready") == "True",
             timeout=120)
    before = x509.load_pem_x509_certificate(secret_data(c, SECRET)["tls.crt"])
    bundle = ca_bundle(c)
    webhooks = pods(c, "policylib-webhook")
    ips = [p["status"]["podIP"] for p in webhooks]
    assert len(ips) == 2 and {served_certificate(ip) for ip in ips} == {before.public_bytes(Encoding.DER)}
    revision = c.get("certificate", SERVING, NAMESPACE)["status"]["revision"]
    with AdmissionLoad(c, LOAD_NS) as load:
        wait_for("creates admitted before the renewal", lambda: load.result.sent >= 20, timeout=60)
        # what `cmctl renew` does: the Issuing condition, added through the status subresource
        issuing = {"type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
                   "message": "Certificate re-issuance manually triggered",
                   "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        c.kubectl("-n", NAMESPACE, "patch", "certificate", SERVING, "--subresource=status", "--type=json", "-p",
                  json.dumps([{"op": "add", "path": "/status/conditions/-", "value": issuing}]))
        triggered = time.monotonic()
        after = wait_for("a new certificate in the Secret", lambda: (
            new if (new := x509.load_pem_x509_certificate(secret_data(c, SECRET)["tls.crt"])).serial_number
            != before.serial_number else None), timeout=120, interval=0.5)
        issued = time.monotonic() - triggered
        new_der = after.public_bytes(Encoding.DER)
        delays: dict[str, float] = {}

        def served() -> bool:
            for ip in ips:
                if ip not in delays and served_certificate(ip) == new_der:
                    delays[ip] = time.monotonic() - triggered
            return len(delays) == len(ips)

        wait_for("every webhook pod serving the renewed certificate", served, timeout=300, interval=0.5)
        sent = load.result.sent
        wait_for("creates admitted after the renewal", lambda: load.result.sent >= sent + 20, timeout=60)
    print(f"cert-manager renewal ({path}): {load.result}")
    print(f"renewal triggered -> new certificate in the Secret {issued:.1f} s; served by every pod "
          f"{', '.join(f'{d:.1f} s' for d in sorted(delays.values()))}")
    cert = c.get("certificate", SERVING, NAMESPACE)
    assert cert["status"]["revision"] == revision + 1 and condition(cert, "Ready") == "True", cert["status"]
    assert public_key(after) != public_key(before)   # rotationPolicy: Always, a new private key
    assert after.issuer == before.issuer and ca_bundle(c) == bundle   # same CA: the caBundle stands
    # the same pods, not restarted: the files changed under them
    after_pods = pods(c, "policylib-webhook")
    assert {p["metadata"]["uid"] for p in after_pods} == {p["metadata"]["uid"] for p in webhooks}
    assert all(s["restartCount"] == 0 for p in after_pods for s in p["status"]["containerStatuses"]), after_pods
    load.result.assert_clean(least=50)
    cm.running()
