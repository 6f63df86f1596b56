"""Benchmark: ``simulate`` of 1,000 Deployments on 500 Nodes (target: under 2 s).

Run by hand: ``.venv/bin/python bench/bench_simulate.py``. Nodes in 3 zones and 5 node groups with
different sizes; Deployments of 1 to 12 replicas with requests, a fifth pinned to a node group, with
the host spread enforced (so ranges are searched too). Reports the median of 3 runs.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from policylib.simulate import simulate  # noqa: E402

CONFIG = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}


def cluster(n_nodes: int = 500) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i:04d}", "labels": {
        "kubernetes.io/hostname": f"node-{i:04d}", "topology.kubernetes.io/zone": f"zone-{'abc'[i % 3]}",
        "pool": f"pool-{i % 5}"}}, "status": {"allocatable": {"cpu": str(16 + 16 * (i % 5)), "memory": "128Gi",
                                                                 "pods": "110"}}}
            for i in range(n_nodes)]


def workloads(n: int = 1_000) -> list[dict]:
    out = []
    for i in range(n):
        spec = {"containers": [{"name": "app", "image": "x", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}
        if i % 5 == 0:
            spec["nodeSelector"] = {"pool": f"pool-{i % 5}"}
        out.append({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": f"svc-{i}", "namespace": f"team-{i % 20}"},
                    "spec": {"replicas": 1 + i % 12, "selector": {"matchLabels": {"app": f"svc-{i}"}},
                             "template": {"metadata": {"labels": {"app": f"svc-{i}"}}, "spec": spec}}})
    return out


def main() -> None:
    nodes, objs = cluster(), workloads()
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        placements = simulate(objs, nodes, CONFIG)
        runs.append(time.perf_counter() - t0)
    pods = sum(p.replicas for p in placements)
    pending = sum(p.pending for p in placements)
    print(f"simulate: {len(objs):,} Deployments ({pods:,} replicas) on {len(nodes)} Nodes: median "
          f"{statistics.median(runs):.2f} s (min {min(runs):.2f}, max {max(runs):.2f}); {pending} Pending")


if __name__ == "__main__":
    main()
