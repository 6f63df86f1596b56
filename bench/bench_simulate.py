"""Benchmark: ``simulate`` of 1,000 Deployments on 500 Nodes (target: under 0.5 s).

Run by hand: ``.venv/bin/python bench/bench_simulate.py [--runs N] [--baseline TREE]``. Nodes in 3 zones and
5 node groups with different sizes; Deployments of 1 to 12 replicas with requests, a fifth pinned to a node
group, with the host spread enforced (so ranges are searched too). Reports the median wall and CPU time of
the runs. ``--baseline TREE`` (a checkout of another commit, e.g. ``git worktree add /tmp/base HEAD~3``) runs
that tree's ``simulate`` too, the two alternated run by run in fresh processes, and prints both medians and
the ratio: on a shared machine only a side-by-side run counts.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve()
if __name__ == "__main__" and "--tree" in sys.argv:
    sys.path.insert(0, sys.argv[sys.argv.index("--tree") + 1])
else:
    sys.path.insert(0, str(HERE.parent.parent))
import numpy  # noqa: E402,F401 -- the engine imports it on first use: a process start cost, like the imports here

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


def once() -> dict:
    nodes, objs = cluster(), workloads()
    t0, c0 = time.perf_counter(), time.process_time()
    placements = simulate(objs, nodes, CONFIG)
    return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0,
            "pods": sum(p.replicas for p in placements), "pending": sum(p.pending for p in placements)}


def side_by_side(script: Path, once: Callable[[], dict]) -> dict[str, list[dict]] | None:
    """The command line of this benchmark and of ``bench_check.py``: with ``--once`` (the child), one measurement
    printed as JSON and None returned; else ``--runs`` measurements of this tree, and of ``--baseline``'s when
    given, alternated run by run, each a fresh process of ``script``, by arm ("this tree", "baseline"). Flags
    this parser does not know are the script's own, passed on to each run."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", help="a tree (checkout) whose policylib to measure side by side")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args, own = parser.parse_known_args()
    if args.once:
        print(json.dumps(once()))
        return None
    arms = {"this tree": str(script.parent.parent)}
    if args.baseline:
        arms["baseline"] = args.baseline
    runs: dict[str, list[dict]] = {k: [] for k in arms}
    for _ in range(args.runs):
        for name, tree in arms.items():
            out = subprocess.run([sys.executable, str(script), "--once", "--tree", tree, *own], capture_output=True,
                                 text=True, check=True)
            runs[name].append(dict(json.loads(out.stdout)))
    return runs


def timing(results: list[dict]) -> str:
    """The median wall and CPU time of an arm's runs, with the fastest and slowest wall time."""
    walls = [r["wall"] for r in results]
    return (f"median {statistics.median(walls):.2f} s wall, {statistics.median(r['cpu'] for r in results):.2f} s CPU "
            f"over {len(results)} runs (min {min(walls):.2f}, max {max(walls):.2f})")


def ratio(runs: dict[str, list[dict]]) -> str:
    """This tree's median wall time over the baseline's."""
    this, base = (statistics.median(r["wall"] for r in runs[k]) for k in ("this tree", "baseline"))
    return f"ratio this tree / baseline (median wall): {this / base:.2f}"


def main() -> None:
    runs = side_by_side(HERE, once)
    if runs is None:
        return
    for name, results in runs.items():
        print(f"simulate ({name}): 1,000 Deployments ({results[0]['pods']:,} replicas) on 500 Nodes: "
              f"{timing(results)}; {results[0]['pending']} Pending")
    if "baseline" in runs:
        print(ratio(runs))


if __name__ == "__main__":
    main()
