"""What the scenarios compare: policylib's own answer (``policylib preview``) and the managed fields."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import yaml

from .harness import ROOT, Cluster, wait_for

POLICYLIB = [sys.executable, "-m", "policylib.cli"]


def preview(objs: list[dict], config: dict, tmp: Path, old: list[dict] | None = None) -> list[dict]:
    """``policylib preview -o yaml`` of ``objs`` with ``config``: the objects as policylib mutates them."""
    src, cfg = tmp / "preview-in.yaml", tmp / "preview-config.yaml"
    src.write_text(yaml.safe_dump_all(objs))
    cfg.write_text(yaml.safe_dump(config))
    args = [*POLICYLIB, "preview", "--config", str(cfg), "-f", str(src)]
    if old:
        (tmp / "preview-old.yaml").write_text(yaml.safe_dump_all(old))
        args += ["--old", str(tmp / "preview-old.yaml")]
    run = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert run.returncode == 0, run.stderr
    return [d for d in yaml.safe_load_all(run.stdout) if d]


def managed(deploy: dict) -> dict:
    """The fields policylib owns on a Deployment."""
    annotations = deploy["metadata"].get("annotations") or {}
    pod = deploy["spec"]["template"]["spec"]
    return {"annotations": {k: v for k, v in annotations.items() if k.startswith("policylib.io/")},
            "topologySpreadConstraints": pod.get("topologySpreadConstraints"),
            "affinity": pod.get("affinity")}


def host_constraint(deploy: dict) -> dict:
    return next(c for c in deploy["spec"]["template"]["spec"]["topologySpreadConstraints"]
                if c["topologyKey"] == "kubernetes.io/hostname")


def pods_of(cluster: Cluster, namespace: str, app: str) -> list[dict]:
    return [p for p in cluster.list("pods", namespace, f"app={app}") if not p["metadata"].get("deletionTimestamp")]


def unschedulable(pod: dict) -> bool:
    return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
               for c in pod.get("status", {}).get("conditions", []))


def settle_placement(cluster: Cluster, namespace: str, app: str, replicas: int, bound: int,
                     timeout: float = 180) -> list[dict]:
    """Wait until ``replicas`` pods exist, exactly ``bound`` are bound to nodes and the scheduler has
    marked every other one Unschedulable; returns the pods."""
    def settled():
        pods = pods_of(cluster, namespace, app)
        placed = [p for p in pods if p["spec"].get("nodeName")]
        waiting = [p for p in pods if not p["spec"].get("nodeName")]
        state = (len(pods), len(placed), sum(map(unschedulable, waiting)))
        return pods if state == (replicas, bound, replicas - bound) else None
    try:
        return wait_for(f"{namespace}/{app}: {replicas} pods, {bound} bound, the rest Unschedulable", settled, timeout)
    except AssertionError:
        pods = pods_of(cluster, namespace, app)
        got = Counter(p["spec"].get("nodeName") or "Pending" for p in pods)
        raise AssertionError(f"{namespace}/{app}: wanted {bound} of {replicas} bound, got {dict(got)}") from None


def per_node(pods: list[dict]) -> Counter:
    return Counter(p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName"))


def stored_deployment(cluster: Cluster, namespace: str, name: str) -> dict:
    return cluster.get("deployment", name, namespace)


def wait_rolled_out(cluster: Cluster, namespace: str, name: str, timeout: float = 180) -> dict:
    """As ``kubectl rollout status``: the new generation observed, every replica updated and available."""
    def done():
        d = cluster.get("deployment", name, namespace)
        s, want = d.get("status", {}), d["spec"].get("replicas", 1)
        ok = (s.get("observedGeneration", 0) >= d["metadata"]["generation"] and s.get("updatedReplicas", 0) == want
              and s.get("availableReplicas", 0) == want and s.get("replicas", 0) == want)
        return d if ok else None
    return wait_for(f"rollout of {namespace}/{name}", done, timeout)


def replicasets(cluster: Cluster, namespace: str, app: str) -> list[dict]:
    return cluster.list("replicasets", namespace, f"app={app}")


def as_json(obj) -> str:
    return json.dumps(obj, sort_keys=True)
