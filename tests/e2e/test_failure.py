"""Failures never block the cluster: a stopped webhook, a stalled webhook, certificates renewed under load."""
from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time

from .harness import ROOT, Webhook, deployment, wait_for

RECORD = "policylib.io/spread-effective-replicas"


def mutated(obj: dict) -> bool:
    return RECORD in (obj["metadata"].get("annotations") or {})


def test_stopped_webhook_admits_unchanged(cluster, tmp_path, ns):
    hook = Webhook(cluster, "stopped", {}, tmp_path).start()
    hook.register()
    hook.stop()
    cluster.namespace(ns, config="stopped")
    started = time.monotonic()
    cluster.apply(deployment("web", ns, 3))
    elapsed = time.monotonic() - started
    assert not mutated(cluster.get("deployment", "web", ns))
    assert elapsed < hook.configuration()["webhooks"][0]["timeoutSeconds"] + 10, elapsed


def test_stalled_webhook_times_out_and_admits(cluster, tmp_path, ns):
    """A webhook that accepts connections and never answers: the API server gives up at timeoutSeconds."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.5)
        while not stop.is_set():
            with contextlib.suppress(OSError):   # the accept timed out: look at stop again
                held.append(listener.accept()[0])
    threading.Thread(target=accept, daemon=True).start()
    hook = Webhook(cluster, "stalled", {}, tmp_path)
    config = hook.configuration(url=f"https://127.0.0.1:{listener.getsockname()[1]}/mutate", timeout=2)
    try:
        cluster.apply(config)
        cluster.namespace(ns, config="stalled")
        # The API server may take a moment to load the configuration; then every call stalls to the timeout.
        def probe():
            cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(deployment("probe", ns)))
            return held
        wait_for("the API server calls the stalled webhook", probe, timeout=60)
        started = time.monotonic()
        cluster.apply(deployment("web", ns, 3))
        elapsed = time.monotonic() - started
        assert not mutated(cluster.get("deployment", "web", ns))
        assert 1.5 < elapsed < 2 + 20, f"apply took {elapsed:.1f}s against a 2s webhook timeout"
    finally:
        stop.set()
        cluster.kubectl("delete", "mutatingwebhookconfiguration", config["metadata"]["name"], check=False)
        for s in held:
            s.close()
        listener.close()


def test_certificate_renewed_during_reviews(cluster, webhooks, ns):
    """New serving certificates land while the API server sends reviews: no review is lost (a lost one
    would be admitted unmutated under failurePolicy Ignore)."""
    hook = webhooks("default")
    cluster.namespace(ns, config="default")
    done = threading.Event()
    errors: list[str] = []

    def renew():
        for _ in range(5):
            run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(hook.cert_dir), "--renew",
                                  "--local"],
                                 capture_output=True, text=True, cwd=ROOT, timeout=60)
            if run.returncode:
                errors.append(run.stderr)
            if done.wait(0.3):
                return
    renewer = threading.Thread(target=renew)
    renewer.start()
    names = [f"web-{i}" for i in range(20)]
    try:
        for name in names:
            cluster.apply(deployment(name, ns, 3))
    finally:
        done.set()
        renewer.join(120)
    assert errors == []
    unmutated = [n for n in names if not mutated(cluster.get("deployment", n, ns))]
    assert unmutated == []
