"""Benchmark: what spread-aware scale-down (rules S23 to S27) costs the controller per 1,000 managed pods.

Run by hand: ``.venv/bin/python bench/bench_podcost.py [--pods 1000] [--seed 32]``.

- memory: the pod watch's store (:class:`webhook.informer.Store` with :func:`policylib.scaledown.project_pod`)
  holding N pods shaped as the API server returns them (managedFields of kubelet, kube-controller-manager,
  the scheduler and ours, containers, status conditions), measured with tracemalloc, per 1,000 pods;
- API writes: N pods of 50 Deployments (3 ReplicaSets' worth of churn) bind one by one over 3 zones of
  unequal size, placed as the scheduler's zone and host spread scoring would (the emptiest zone, then
  its emptiest Node, ties at random); the controller's plan (:func:`policylib.scaledown.cost_writes`) runs
  after every bind, as the worker does, and each write it asks for is counted. Then every Deployment is
  scaled down by a third (the ReplicaSet controller's choice replayed), then a Node is lost, then a
  resync with nothing changed. Writes per 1,000 pods, per phase.
"""
from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from policylib.scaledown import (  # noqa: E402
    DELETION_COST,
    FIELD_MANAGER,
    cost_writes,
    desired_costs,
    pods_to_delete,
    project_pod,
)
from webhook.controller.podcost import pod_key  # noqa: E402
from webhook.informer import Store  # noqa: E402

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
ZONES = {"a": 8, "b": 6, "c": 4}   # Nodes per zone


def api_pod(i: int, deployment: str, node: str) -> dict:
    """A pod as the API server returns it, with what a real one carries that the projection drops."""
    created = (NOW - dt.timedelta(seconds=10_000 - i)).strftime("%Y-%m-%dT%H:%M:%SZ")
    managers = [{"manager": m, "operation": "Update", "apiVersion": "v1", "time": created, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}, "f:pod-template-hash": {}}},
                              "f:spec": {"f:containers": {'k:{"name":"model"}': {".": {}, "f:image": {}}}},
                              "f:status": {"f:conditions": {}, "f:phase": {}}}}
                for m in ("kube-controller-manager", "kube-scheduler", "kubelet")]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{deployment}-5c7d8-{i:05d}", "namespace": "ml", "uid": f"uid-{i:06d}",
                         "resourceVersion": str(1000 + i), "creationTimestamp": created,
                         "labels": {"app": deployment, "pod-template-hash": "5c7d8"},
                         "annotations": {"kubectl.kubernetes.io/restartedAt": created},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{deployment}-5c7d8",
                                              "uid": f"rs-{deployment}", "controller": True, "blockOwnerDeletion": True}],
                         "managedFields": managers},
            "spec": {"nodeName": node, "containers": [
                {"name": "model", "image": "registry.example/infer:1", "args": ["--port", "8080"] * 4,
                 "env": [{"name": f"V{k}", "value": "x" * 20} for k in range(10)],
                 "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1", "hostIP": "192.168.0.1", "startTime": created,
                       "conditions": [{"type": t, "status": "True", "lastTransitionTime": created}
                                      for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                       "containerStatuses": [{"name": "model", "ready": True, "restartCount": 0,
                                              "image": "registry.example/infer:1", "imageID": "sha256:" + "0" * 64,
                                              "containerID": "containerd://" + "1" * 64,
                                              "state": {"running": {"startedAt": created}}}]}}


def memory(n: int) -> tuple[float, float]:
    """(bytes per pod in the store, bytes per pod of the pods as the API returns them)."""
    pods = [api_pod(i, f"svc-{i % 50}", f"n{i % 18}") for i in range(n)]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    store = Store({"deployment": lambda p: [k] if (k := pod_key(p)) else []}, project=project_pod)
    for p in pods:
        store.apply("ADDED", p)
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    import json
    raw = sum(len(json.dumps(p)) for p in pods)
    return held / n, raw / n


def applied(pod: dict, cost: int) -> dict:
    meta = dict(pod["metadata"], annotations={DELETION_COST: str(cost)},
                managedFields=[{"manager": FIELD_MANAGER, "fieldsV1": {"f:metadata": {"f:annotations": {
                    f"f:{DELETION_COST}": {}}}}}])
    return dict(pod, metadata=meta)


def writes(n: int, seed: int) -> dict[str, int]:
    rnd = random.Random(seed)
    nodes = {f"{z}{i}": z for z, count in ZONES.items() for i in range(count)}
    deployments = [f"svc-{k}" for k in range(50)]
    pods: dict[str, list[dict]] = {d: [] for d in deployments}
    counts = {"bind": 0, "scale-down": 0, "node lost": 0, "resync": 0}

    def plan(d: str, phase: str) -> None:
        ws = cost_writes(pods[d], nodes)
        counts[phase] += len(ws)
        by_uid = {w.uid: w.cost for w in ws}
        pods[d] = [applied(p, by_uid[p["metadata"]["uid"]]) if p["metadata"]["uid"] in by_uid else p for p in pods[d]]

    for i in range(n):
        d = rnd.choice(deployments)
        per_zone = {z: 0 for z in ZONES}
        per_node = {node: 0 for node in nodes}
        for p in pods[d]:
            per_zone[nodes[p["spec"]["nodeName"]]] += 1
            per_node[p["spec"]["nodeName"]] += 1
        least = min(per_zone.values())
        zone = rnd.choice([z for z, c in per_zone.items() if c == least])
        in_zone = {node: c for node, c in per_node.items() if nodes[node] == zone}
        low = min(in_zone.values())
        node = rnd.choice([x for x, c in in_zone.items() if c == low])
        pods[d].append(api_pod(i, d, node))
        plan(d, "bind")
    for d in deployments:
        costs = desired_costs(pods[d], nodes)
        gone = {p["metadata"]["uid"] for p in pods_to_delete(pods[d], pods[d], len(pods[d]) // 3, NOW, costs)}
        pods[d] = [p for p in pods[d] if p["metadata"]["uid"] not in gone]
        plan(d, "scale-down")
    lost = "a0"
    for d in deployments:
        pods[d] = [p for p in pods[d] if p["spec"]["nodeName"] != lost]
        plan(d, "node lost")
    for d in deployments:
        plan(d, "resync")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=32)
    args = parser.parse_args()
    held, raw = memory(args.pods)
    print(f"memory: {held:.0f} bytes per pod held ({held * 1000 / 2**20:.2f} MiB per 1,000 pods); "
          f"the pods as served: {raw:.0f} bytes of JSON each")
    counts = writes(args.pods, args.seed)
    per = 1000 / args.pods
    print(f"API writes per 1,000 pods ({args.pods} pods, 50 Deployments, zones of {', '.join(map(str, ZONES.values()))} Nodes):")
    for phase, c in counts.items():
        print(f"  {phase:10} {c * per:8.1f}")


if __name__ == "__main__":
    main()
