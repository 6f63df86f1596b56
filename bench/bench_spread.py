"""Benchmark: policylib's Deployment spread policy (issue: target <= 100 us per call).

Run by hand: ``make bench`` or ``.venv/bin/python bench/bench_spread.py``.
Reports medians over repeated batches measured in this one run, and the ratio
to the naive approach (deepcopy plus a whole-object jsonpatch diff).
"""
from __future__ import annotations

import copy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jsonpatch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from policylib import load_config, mutate  # noqa: E402

CONFIG = load_config({"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}})


def realistic_deployment(name: str = "llm-serving", replicas: int = 7) -> dict:
    """Two containers, probes, volumes, resources and a legacy self anti-affinity."""
    labels = {"app": name, "app.kubernetes.io/part-of": "inference", "tier": "serving"}
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10, "failureThreshold": 3}
    container = {
        "name": "server", "image": "registry.example/llm:1.4.2", "args": ["--port=8080", "--model=/models/m"],
        "ports": [{"containerPort": 8080, "name": "http"}],
        "env": [{"name": f"VAR_{i}", "value": str(i)} for i in range(8)],
        "resources": {"requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"},
                      "limits": {"memory": "32Gi", "nvidia.com/gpu": "1"}},
        "livenessProbe": probe, "readinessProbe": dict(probe, periodSeconds=5), "startupProbe": probe,
        "volumeMounts": [{"name": "models", "mountPath": "/models"}, {"name": "shm", "mountPath": "/dev/shm"}],
    }
    sidecar = {"name": "metrics", "image": "registry.example/exporter:0.9", "ports": [{"containerPort": 9100}],
               "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}, "readinessProbe": probe}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "models", "labels": labels,
                     "annotations": {"deployment.kubernetes.io/revision": "3"}},
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels, "annotations": {"prometheus.io/scrape": "true"}},
                "spec": {
                    "containers": [container, sidecar],
                    "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
                                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
                    "nodeSelector": {"nvidia.com/gpu.product": "A100"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": "kubernetes.io/hostname"}]}},
                },
            },
        },
    }


def per_call_us(fn, calls: int = 2000, repeats: int = 15) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return out


def naive(d: dict) -> list:
    mutated = copy.deepcopy(d)
    mutated = mutate(mutated, CONFIG).object
    return jsonpatch.make_patch(d, mutated).patch


def main() -> None:
    d = realistic_deployment()
    result = mutate(d, CONFIG)
    assert result.patch and jsonpatch.apply_patch(d, result.patch) == result.object
    ours = per_call_us(lambda: mutate(d, CONFIG))
    noop = per_call_us(lambda: mutate(result.object, CONFIG))
    base = per_call_us(lambda: naive(d), calls=500)
    m_ours, m_noop, m_base = (statistics.median(x) for x in (ours, noop, base))
    print(f"mutate() realistic Deployment, CREATE incl. patch: median {m_ours:.1f} us/call "
          f"(min {min(ours):.1f}, max {max(ours):.1f})")
    print(f"mutate() already-compliant Deployment (empty patch): median {m_noop:.1f} us/call")
    print(f"naive deepcopy + whole-object jsonpatch diff:       median {m_base:.1f} us/call "
          f"(ours is {m_base / m_ours:.1f}x faster)")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "deployments.yaml"
        docs = [realistic_deployment(f"svc-{i}", replicas=1 + i % 12) for i in range(1000)]
        path.write_text("---\n".join(yaml.safe_dump(x, sort_keys=False) for x in docs))
        exe = str(Path(sys.executable).parent / "policylib")
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run([exe, "preview", "-f", str(path), "-o", "patch"], check=True, stdout=subprocess.DEVNULL)
            runs.append(time.perf_counter() - t0)
        print(f"policylib preview -o patch, 1,000 Deployments (whole process): median {statistics.median(runs):.2f} s "
              f"over {len(runs)} runs")
        runs = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([exe, "preview", "-f", str(path)], check=True, stdout=subprocess.DEVNULL)
            runs.append(time.perf_counter() - t0)
        print(f"policylib preview -o yaml,  1,000 Deployments (whole process): median {statistics.median(runs):.2f} s")


if __name__ == "__main__":
    main()
