"""Self-managed certificates end to end (webhook/controller/certrotator.py, docs/operations.md "Certificates"): the real
controller process (leader, ``--certificates self``) with short lifetimes makes the CA, the serving Secret and
the caBundle of a real webhook configuration, renews the serving certificate several times and rotates the CA
once, while Deployments are created one after another; a kubelet stand-in copies the Secret into the
webhook's certificate directory the way the kubelet updates a Secret volume (a new directory, then an atomic
symlink swap). Every create must come back mutated, and the API server's own fail-open and rejection counters
for the webhook must not move."""
from __future__ import annotations

import base64
import hashlib
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from policylib.shell import kube

from .harness import CONFIG_LABEL, ROOT, Controller, deployment, free_port, wait_for, webhook_rules

NS = "certs-rotation"          # the Secrets and the Lease
LOAD_NS = "certs-rotation-load"
CONFIG = "policylib-rotation-e2e"
HOOK = "deployments.rotation.e2e.policylib.io"
ANNOTATION = "policylib.io/spread-effective-replicas"
SECRETS = kube.Resource("", "v1", "secrets", "Secret")
#: serving 30 s (renewed at 20 s), CA 90 s (rotated at 60 s), 5 s for the API server and the "kubelet".
ROTATOR_ARGS = ["--certificates=self", "--certificates-service=localhost", f"--certificates-webhook-configuration={CONFIG}",
                "--certificates-serving-duration=30s", "--certificates-ca-duration=90s", "--certificates-propagation=5s"]


class SecretVolume:
    """The kubelet's part: poll the Secret, write a changed one into a new directory, swap the symlink."""

    def __init__(self, api: kube.Api, directory: Path):
        self.api, self.dir = api, directory
        self.link = directory / "current"
        self.seen: list[str] = []          # sha256 of each serving certificate (DER) written
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def sync(self) -> None:
        try:
            secret = self.api.get(SECRETS, NS, "policylib-webhook-tls")
        except kube.NotFound:
            return
        data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
        digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(data["tls.crt"].decode())).hexdigest()
        if self.seen and self.seen[-1] == digest:
            return
        target = self.dir / f"data-{len(self.seen)}"
        target.mkdir()
        for name, content in data.items():
            (target / name).write_bytes(content)
        tmp = self.dir / "current.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target.name)
        os.replace(tmp, self.link)
        self.seen.append(digest)

    def run(self) -> None:
        while not self.stop.wait(0.3):
            self.sync()


def apiserver_counter(cluster, metric: str, hook: str) -> float:
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(metric + "{") and f'name="{hook}"' in line)


def rotation_story(cluster, controller, webhook_log: Path, port: int) -> str:
    try:
        return _rotation_story(cluster, controller, webhook_log, port)
    except Exception as e:  # noqa: BLE001 -- the story must not hide the failure it explains
        return f"(the logs could not be read: {type(e).__name__}: {e})"


def _rotation_story(cluster, controller, webhook_log: Path, port: int) -> str:
    """What a failed admission's reason needs: the API server's words about calling the webhook (it logs each
    failure, with the error, at its default verbosity), the controller's certificate steps, the webhook's
    reloads and warnings, each with its time, and the webhook's connection counters (a connection it closed as too
    slow is logged at debug only)."""
    apiserver = (cluster.dir / "kube-apiserver.log").read_text(errors="replace").splitlines()
    called = [line[:400] for line in apiserver if HOOK in line][-8:]
    steps = [f"{e.get('time')} {e.get('action')}: {e.get('reason')}"
             for e in controller.log_entries("certificates")]
    served = [line[:300] for line in webhook_log.read_text(errors="replace").splitlines()
              if any(word in line for word in ("certificate", '"level":"warning"', '"level":"error"', "[WARNING]",
                                                "[ERROR]", "[CRITICAL]", "Booting worker", "Worker exiting"))][-12:]
    try:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE   # our own test server's counters
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context, timeout=10) as answer:
            counters = [line for line in answer.read().decode().splitlines()
                        if line.startswith(("policylib_webhook_slow_clients_total", "policylib_webhook_tls_handshakes_total",
                                            "policylib_webhook_connection_limit_reached_total"))]
    except OSError as e:
        counters = [f"(metrics unreadable: {e})"]
    return ("the API server on the webhook:\n  " + "\n  ".join(called or ["(nothing)"])
            + "\nthe controller's steps:\n  " + "\n  ".join(steps or ["(none)"])
            + "\nthe webhook:\n  " + "\n  ".join(served or ["(nothing)"])
            + "\nits counters:\n  " + "\n  ".join(counters or ["(none)"]))


def served_fingerprint(port: int) -> str:
    der = ssl.get_server_certificate(("127.0.0.1", port))
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(der)).hexdigest()


@pytest.mark.timeout(400)
def test_rotation_under_load_never_fails_an_admission(cluster, tmp_path):
    api = kube.Api(kube.api_client(None, str(cluster.kubeconfig)))
    cluster.namespace(NS)
    cluster.namespace(LOAD_NS, config="rotation")
    port = free_port()
    hook = dict(webhook_rules()[0], name=HOOK, timeoutSeconds=5, failurePolicy="Ignore",
                clientConfig={"url": f"https://localhost:{port}/mutate"},
                namespaceSelector={"matchLabels": {CONFIG_LABEL: "rotation"}})
    cluster.apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                   "metadata": {"name": CONFIG}, "webhooks": [hook]})
    volume = SecretVolume(api, tmp_path)
    controller = Controller(cluster, {}, tmp_path, "rotator-0", NS, extra_args=ROTATOR_ARGS)
    webhook = None
    log = open(tmp_path / "webhook.log", "a")  # noqa: SIM115 -- the process's log
    stop_load = threading.Event()
    results: list[tuple[str, bool, str]] = []
    when: dict[str, str] = {}      # each admission's start, as the logs write time
    try:
        wait_for("the serving Secret", lambda: (volume.sync(), volume.seen)[1], timeout=60)
        volume.thread.start()
        webhook = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--cert-dir", str(volume.link), "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1", "--facts", "none", "--log-level", "info"],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        started = time.monotonic()

        def mutated(name: str) -> bool:
            body = api.create(kube.DEPLOYMENTS, LOAD_NS, deployment(name, LOAD_NS, replicas=0))
            return ANNOTATION in (body["metadata"].get("annotations") or {})

        probes = iter(range(10_000))
        wait_for("the API server calls the webhook with the controller's caBundle",
                 lambda: mutated(f"probe-{next(probes)}"), timeout=60, interval=0.5)
        fail_open = apiserver_counter(cluster, "apiserver_admission_webhook_fail_open_count", HOOK)
        rejected = apiserver_counter(cluster, "apiserver_admission_webhook_rejection_count", HOOK)
        serving_before = len(volume.seen)
        assert controller.metric("policylib_controller_certificate_steps_total", action="rotate-ca") == 0

        def load() -> None:
            i = 0
            while not stop_load.is_set():
                name = f"load-{i}"
                now = time.time()
                when[name] = time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"
                try:
                    results.append((name, mutated(name), ""))
                except Exception as e:  # noqa: BLE001 -- a refused create is a failed admission: recorded
                    results.append((name, False, str(e)[:300]))
                i += 1
                stop_load.wait(0.05)

        loader = threading.Thread(target=load, daemon=True)
        loader.start()

        def steps(action: str) -> float:
            return controller.metric("policylib_controller_certificate_steps_total", action=action)

        wait_for("a CA rotation completed (the old CA left the bundle)", lambda: steps("drop-previous") >= 1,
                 timeout=150, interval=1)
        after_rotation = len(results)
        wait_for("admissions on the new CA alone", lambda: len(results) >= after_rotation + 20, timeout=60)
        stop_load.set()
        loader.join(30)
        elapsed = time.monotonic() - started

        failed = [r for r in results if not r[1]]
        assert failed == [], (f"{len(failed)} of {len(results)} admissions failed or were not mutated: "
                              f"{[(*r, when[r[0]]) for r in failed[:5]]}\n"
                              + rotation_story(cluster, controller, tmp_path / "webhook.log", port))
        assert apiserver_counter(cluster, "apiserver_admission_webhook_fail_open_count", HOOK) - fail_open == 0
        assert apiserver_counter(cluster, "apiserver_admission_webhook_rejection_count", HOOK) - rejected == 0
        assert (steps("rotate-ca"), steps("create-ca")) == (1, 1)
        # Under load (none had happened when it started, checked above): at least one renewal from the first CA
        # and the certificate of the new one. How many more depends on the controller's timing against the load's
        # (a renewal due as the CA rotates is issued by the new CA: one certificate, not two).
        renewals = len(volume.seen) - serving_before
        assert renewals >= 2, (len(volume.seen), renewals)
        # The webhook serves the newest certificate (the next renewal is at least 20 s away), issued by the one CA
        # left in the bundle, which is not the CA the load started with.
        assert served_fingerprint(port) == volume.seen[-1]
        bundle = cluster.get("mutatingwebhookconfiguration", CONFIG)["webhooks"][0]["clientConfig"]["caBundle"]
        (ca,) = x509.load_pem_x509_certificates(base64.b64decode(bundle))
        newest = x509.load_pem_x509_certificate((volume.dir / f"data-{len(volume.seen) - 1}" / "tls.crt").read_bytes())
        first = x509.load_pem_x509_certificate((volume.dir / "data-0" / "tls.crt").read_bytes())
        newest.verify_directly_issued_by(ca)
        with pytest.raises((ValueError, InvalidSignature)):  # another CA's name, or its signature: either way not it
            first.verify_directly_issued_by(ca)
        print(f"\nrotation: {len(results)} admissions in {elapsed:.0f}s, {len(volume.seen)} serving certificates "
              f"({renewals} under load), 1 CA rotation, fail-open 0, rejected 0")
    finally:
        stop_load.set()
        volume.stop.set()
        controller.stop()
        if webhook and webhook.poll() is None:
            webhook.terminate()
            webhook.wait(30)
        log.close()
        cluster.kubectl("delete", "mutatingwebhookconfiguration", CONFIG, "--ignore-not-found")
        cluster.kubectl("delete", "namespace", LOAD_NS, NS, "--wait=false", "--ignore-not-found")
