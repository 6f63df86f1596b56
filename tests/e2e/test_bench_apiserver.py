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
    for arm in ("none", "noop", "policylib"):
        assert re.search(rf"^\| {arm} \| [\d.]+ \|", report, re.M), report
        assert figures["creates_per_s_c8"][arm] > 0
        assert figures["real_creates_per_s"][arm] > 0
    assert "policylib/noop: added latency at c=1" in report
    # the API server reuses its connections to the webhook: a handful of handshakes for 11+8 reviews at most
    assert figures["tls_handshakes"] is not None and figures["tls_handshakes"] <= 8, report
