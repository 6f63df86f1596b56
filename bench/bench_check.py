"""Benchmark: ``check`` of 1,000 Deployments and 4 PyTorchJobs on 500 Nodes, with the host spread enforced.

Run by hand: ``.venv/bin/python bench/bench_check.py [--runs N] [--baseline TREE] [--jobs N] [--jobsets N]``. The Nodes and
Deployments of ``bench_simulate.py`` (3 zones, 5 node groups; 1 to 12 replicas each, a fifth pinned to a node
group) and ``--jobs`` PyTorchJobs (default 4; a Master and 4 Workers each): every verdict that asks where the
workloads land runs (``hostTopologySpread.minDomains`` with the Pending counts, the simulated outcomes, each
job's gang capacity; the last job never fits, so both report it). ``--jobsets N`` (default 0) adds N JobSets
of two start waves (a launcher, then 4 workers of 8 cpu under ``dependsOn``) with gang method podgroup: each
wave's gang capacity (rule G26) runs too; the last JobSet's workers never fit.
Reports the median wall and CPU time of ``policylib.check.check`` per run, each in a fresh process.
``--baseline TREE`` (a checkout of another commit, e.g. ``git worktree add /tmp/base HEAD~3``) runs that tree's
``check`` too, the two alternated run by run: on a shared machine only a side-by-side run counts.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
if __name__ == "__main__" and "--tree" in sys.argv:
    sys.path.insert(0, sys.argv[sys.argv.index("--tree") + 1])
else:
    sys.path.insert(0, str(HERE.parent.parent))
import numpy  # noqa: E402,F401 -- the engine imports it on first use: a process start cost, like the imports here

from policylib.check import check  # noqa: E402  -- before bench_simulate, which puts this checkout first on sys.path

sys.path.insert(0, str(HERE.parent))
from bench_simulate import cluster, ratio, side_by_side, timing, workloads  # noqa: E402

CONFIG = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}
_jobs = argparse.ArgumentParser(add_help=False)
_jobs.add_argument("--jobs", type=int, default=4)
_jobs.add_argument("--jobsets", type=int, default=0)
JOBS, JOBSETS = _jobs.parse_known_args()[0].jobs, _jobs.parse_known_args()[0].jobsets


def pytorch_job(i: int) -> dict:
    """A Master and 4 Workers of 8 cpu each; the last job's Workers ask more cpu than any Node has (a gang that
    never fits: an error from the gang capacity and from the simulation)."""
    cpu = "96" if i == JOBS - 1 else "8"

    def replica(n: int) -> dict:
        return {"replicas": n, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "32Gi"}}}]}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": f"train-{i}", "namespace": "ml"},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(4)}}}


def jobset(i: int) -> dict:
    """A launcher, then 4 workers of 8 cpu once it is ready (two start waves, each a gang); the last JobSet's
    workers ask more cpu than any Node has."""
    cpu = "96" if i == JOBSETS - 1 else "8"

    def rjob(name: str, pods: int, after: str | None = None) -> dict:
        pod = {"spec": {"containers": [{"name": "c", "image": "x",
                                        "resources": {"requests": {"cpu": cpu, "memory": "32Gi"}}}]}}
        return {"name": name, "template": {"spec": {"parallelism": pods, "template": pod}},
                **({"dependsOn": [{"name": after, "status": "Ready"}]} if after else {})}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": f"js-{i}", "namespace": "ml"},
            "spec": {"replicatedJobs": [rjob("launcher", 2), rjob("workers", 4, "launcher")]}}


def once() -> dict:
    nodes, objs = cluster(), workloads() + [pytorch_job(i) for i in range(JOBS)] + [jobset(i) for i in range(JOBSETS)]
    config = {**CONFIG, "gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}} if JOBSETS else CONFIG
    t0, c0 = time.perf_counter(), time.process_time()
    findings = check(config, nodes, objs)
    return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0,
            "findings": [f.as_dict() for f in findings]}


def main() -> None:
    runs = side_by_side(HERE, once)
    if runs is None:
        return
    for name, results in runs.items():
        print(f"check ({name}): 1,000 Deployments, {JOBS} PyTorchJobs and {JOBSETS} JobSets on 500 Nodes: "
              f"{timing(results)}; "
              f"{len(results[0]['findings'])} findings")
    if "baseline" in runs:
        same = all(r["findings"] == runs["baseline"][0]["findings"] for rs in runs.values() for r in rs)
        print(f"{ratio(runs)}; findings {'identical' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
