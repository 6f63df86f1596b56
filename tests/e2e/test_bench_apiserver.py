"""bench/bench_apiserver.py runs end to end against the session's cluster: a few creates per arm.

The figures themselves are reported by hand (docs/performance.md), never asserted here.
"""
from __future__ import annotations

import re

import pytest

from bench import bench_apiserver

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
