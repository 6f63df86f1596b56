"""bench/bench_apiserver.py runs end to end against the session's cluster: a few creates per arm.

The figures themselves are reported by hand (docs/performance.md), never asserted here.
"""
from __future__ import annotations

import copy
import http.client
import json
import re
import ssl
import subprocess

import pytest

import policylib
from bench import bench_apiserver
from tests.webhook_support import patch_of, review_of
from webhook.admission import review

from . import harness
from .harness import require_built

pytestmark = pytest.mark.timeout(900)


def test_bench_apiserver_smoke(cluster, tmp_path):
    require_built("noop-webhook")
    args = bench_apiserver.parse_args(["--smoke", "--replicas", "0"])
    report, figures = bench_apiserver.run(cluster, args, tmp_path)
    for arm in ("none", "noop", "go-spread", "go-spread-read", "policylib", "policylib-nohpa"):
        assert re.search(rf"^\| {arm} \| [\d.]+ \|", report, re.M), report
        assert figures["creates_per_s_c8"][arm] > 0
        assert figures["real_creates_per_s"][arm] > 0
    assert "policylib/noop: added latency at c=1" in report
    assert "policylib/go-spread-read: added latency at c=1" in report and "(targets: <= 1.25x, >= 0.90x)" in report
    assert "policylib-nohpa/go-spread: added latency at c=1" in report
    assert not any(figures["unpatched"].values()), report   # every create answered by its arm
    # the API server reuses its connections to the webhook: a handful of handshakes for 11+8 reviews at most
    assert figures["tls_handshakes"] is not None and figures["tls_handshakes"] <= 8, report


def test_bench_apiserver_replicas_smoke(cluster, tmp_path):
    """``--scale``: policylib as 1 and 2 servers behind one URL (SO_REUSEPORT), creates/s at two concurrencies."""
    require_built("noop-webhook")
    args = bench_apiserver.parse_args(["--smoke", "--replicas", "0", "--scale", "1,2", "--scale-concurrency", "2,4"])
    report, figures = bench_apiserver.run(cluster, args, tmp_path)
    rates = figures["scale_creates_per_s"]
    assert set(rates) == {"none", "go-spread-read", "policylib-x1", "policylib-x2"}, report
    assert all(rates[arm][c] > 0 for arm in rates for c in (2, 4)), report


def go_floor_variants() -> list[dict]:
    """Deployments as the API server hands them to a webhook, in the shapes the Go floor must answer as policylib."""
    base = bench_apiserver.deployment("web", "bench-x")
    no_annotations = copy.deepcopy(base)
    del no_annotations["metadata"]["annotations"]
    no_replicas = copy.deepcopy(base)
    del no_replicas["spec"]["replicas"]
    one_label = copy.deepcopy(base)
    one_label["spec"]["selector"]["matchLabels"] = {"app": "web"}
    one_label["spec"]["template"]["metadata"]["labels"] = {"app": "web"}
    return [base, no_annotations, no_replicas, one_label]


def test_the_go_floor_answers_exactly_as_policylib(tmp_path):
    """``noopwebhook --spread`` gives policylib's default answer: the same JSON patch (compared as JSON) and
    the same ``reasons`` audit annotation, for each shape the benchmark's Deployments could take."""
    require_built("noop-webhook")
    certs = tmp_path / "certs"
    bench_apiserver.make_certs(certs)
    port = harness.free_port()
    log = tmp_path / "go.log"
    proc = subprocess.Popen([str(bench_apiserver.NOOP), "--cert", str(certs / "tls.crt"), "--key",
                             str(certs / "tls.key"), "--addr", f"127.0.0.1:{port}", "--http1", "--spread",
                             "--settings-hash", bench_apiserver.settings_hash()],
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        bench_apiserver.wait_https(f"https://127.0.0.1:{port}/healthz", certs / "ca.crt", "noopwebhook", proc, log)
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30,
                                           context=ssl.create_default_context(cafile=str(certs / "ca.crt")))
        config = policylib.load_config(None)
        variants = go_floor_variants()
        assert len(variants) == 4
        for obj in variants:
            body = json.dumps(review_of(obj)).encode()
            conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            go = json.loads(conn.getresponse().read())["response"]
            req = review.parse_review(body)
            ours = review.response_review(req, review.decide(req, config))["response"]
            assert patch_of(go) == patch_of(ours), obj
            assert go["auditAnnotations"] == ours["auditAnnotations"], obj
            assert go["allowed"] is True and go["uid"] == ours["uid"]
    finally:
        proc.terminate()
        proc.wait(30)
