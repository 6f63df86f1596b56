"""``policylib simulate`` against the real kube-scheduler, on scenarios like a real cluster's: Nodes with
random allocatable, unequal zones (some Nodes without the zone label), NoSchedule, PreferNoSchedule and
NoExecute taints, cordoned Nodes; pods already bound to them (some with anti-affinity of their own); then
2-4 Deployments created one after another on the same Nodes, with random requests, sidecars, pod-level
resources, tolerations, pod affinity and anti-affinity (required and preferred), user spread constraints
(including an empty selector and one that does not select the pod) and random policylib settings (some
with both spreads off, where the scheduler's System default spreading applies).

Many scenarios run at once in one cluster, each in its own namespace on its own Nodes (every pod selects
its scenario's Nodes; zone values are per scenario), Deployments created in rounds: round k creates the
k-th Deployment of every scenario of a batch, and the next round starts when every pod of the round is
bound or marked Unschedulable by the scheduler (polled, never slept). Nothing is deleted between batches
(the cluster is the test's own and is stopped at the end): deleting thousands of pods would take the
controller-manager's API budget from the next batch.

Agreement: the Pending count of every Deployment (inside the simulator's range); the per-node placement
of every Deployment whose placement the simulator found deterministic (no tie broken, in it and every
Deployment before it in the scenario). The seed is printed (POLICYLIB_SIM_SEED replays it).
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from policylib import load_config, mutate
from policylib.simulate import DO_NOT_SCHEDULE, NodeState, PodShape, simulate, tolerates

from .harness import Cluster, wait_for

SCENARIOS = int(os.environ.get("POLICYLIB_SIM_SCENARIOS", "320"))
BATCH = int(os.environ.get("POLICYLIB_SIM_BATCH", "110"))
SIM_LABEL = "e2e.policylib.io/sim"
BATCH_LABEL = "e2e.policylib.io/batch"
SCENARIO_LABEL = "e2e.policylib.io/scenario"
GROUP_LABEL = "e2e.policylib.io/group"
DEDICATED = {"key": "e2e.policylib.io/dedicated", "value": "gpu", "effect": "NoSchedule"}
SPOT = {"key": "e2e.policylib.io/spot", "value": "true", "effect": "PreferNoSchedule"}
DRAINING = {"key": "e2e.policylib.io/draining", "value": "true", "effect": "NoExecute"}
#: Agreement the test requires: Pending for 99% of Deployments; placement where deterministic.
PENDING_AGREEMENT = 0.99
PLACEMENT_AGREEMENT = 0.97


def _requests(rng: random.Random) -> dict:
    out = {}
    if rng.random() < 0.75:
        out["cpu"] = rng.choice(["100m", "250m", "500m", "1", "2"])
    if rng.random() < 0.5:
        out["memory"] = rng.choice(["256Mi", "1Gi", "3Gi"])
    return out


def _millis(cpu: str) -> int:
    return int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000


def _container(name: str, requests: dict) -> dict:
    return {"name": name, "image": "registry.example/app:1", "resources": {"requests": requests} if requests else {}}


def _term(app: str, key: str, weight: int | None = None) -> dict:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
    return {"weight": weight, "podAffinityTerm": term} if weight else term


def random_scenario(rng: random.Random, index: int, batch: int = 0) -> dict:
    sid = f"s{index}"
    ns = f"sim-{sid}"
    zones = [f"{sid}-zone-{c}" for c in "abc"[:rng.randint(1, 3)]]
    zone_weights = [rng.randint(1, 4) for _ in zones]                  # unequal zones
    groups = [f"g{i}" for i in range(rng.randint(1, 2))]
    nodes = []
    for j in range(rng.randint(2, 8)):
        labels = {"kubernetes.io/hostname": f"{sid}-n{j}", SCENARIO_LABEL: sid, GROUP_LABEL: rng.choice(groups)}
        if rng.random() < 0.88:
            labels["topology.kubernetes.io/zone"] = rng.choices(zones, zone_weights)[0]
        spec: dict = {}
        taints = [t for t, p in ((DEDICATED, 0.15), (SPOT, 0.15), (DRAINING, 0.05)) if rng.random() < p]
        if taints:
            spec["taints"] = [dict(t) for t in taints]
        if rng.random() < 0.08:
            spec["unschedulable"] = True
        nodes.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{sid}-n{j}", "labels": labels},
                      "spec": spec, "status": {"allocatable": {"cpu": rng.choice(["2", "4", "8"]),
                                                               "memory": rng.choice(["4Gi", "8Gi", "32Gi"]),
                                                               "pods": str(rng.choice([4, 8, 110]))}}})
    apps = [f"w{k}" for k in range(rng.randint(2, 4))]
    prebound = []
    for k in range(rng.randint(0, 3)):
        app = rng.choice(["pre", "pre", apps[0]])
        spec = {"nodeName": rng.choice(nodes)["metadata"]["name"], "containers": [_container("c", _requests(rng))],
                "tolerations": [{"operator": "Exists"}]}
        if rng.random() < 0.3:
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                _term(rng.choice(apps), rng.choice(["kubernetes.io/hostname", "topology.kubernetes.io/zone"]))]}}
        prebound.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"pre-{k}", "namespace": ns, "labels": {"app": app, SIM_LABEL: "pre"}}, "spec": spec})
    config = {"zoneTopologySpread": {"enabled": rng.random() < 0.7},
              "hostTopologySpread": {"whenUnsatisfiable": rng.choice([DO_NOT_SCHEDULE, DO_NOT_SCHEDULE, "ScheduleAnyway"]),
                                     "maxSkew": rng.choice([1, 1, 2]), "minDomains": rng.randint(1, 3),
                                     "hardMinReplicas": rng.randint(1, 4),
                                     "enableReplicaDerivedMaxSkewRule": rng.random() < 0.7}}
    if rng.random() < 0.15:
        config = {"zoneTopologySpread": {"enabled": False}, "hostTopologySpread": {"enabled": False}}
    deployments = []
    for k, app in enumerate(apps):
        requests = _requests(rng)
        pod: dict = {"containers": [_container("app", requests)], "nodeSelector": {SCENARIO_LABEL: sid}}
        sidecar = rng.choice(["250m", "500m", "1"]) if rng.random() < 0.2 else None
        if sidecar:
            pod["initContainers"] = [dict(_container("proxy", {"cpu": sidecar}), restartPolicy="Always")]
        if rng.random() < 0.15:     # pod-level requests: at least what the containers request (API validation)
            millis = sum(_millis(x) for x in (requests.get("cpu"), sidecar) if x)
            pod["resources"] = {"requests": {"cpu": f"{millis + rng.choice([250, 500, 1000])}m"}}
        if rng.random() < 0.25:
            pod["nodeSelector"][GROUP_LABEL] = rng.choice(groups)
        tolerations = []
        if rng.random() < 0.3:
            tolerations.append({"key": DEDICATED["key"], "operator": "Exists", "effect": "NoSchedule"})
        if rng.random() < 0.1:
            tolerations.append({"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"})
        if rng.random() < 0.04:
            tolerations.append({"operator": "Exists"})
        if tolerations:
            pod["tolerations"] = tolerations
        affinity: dict = {}
        if rng.random() < 0.2:      # toward itself, an earlier Deployment or the bound pods
            target = rng.choice(apps[:k + 1] + ["pre"])
            affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(
                target, rng.choice(["kubernetes.io/hostname", "kubernetes.io/hostname", "topology.kubernetes.io/zone"]))]}
        if rng.random() < 0.08 and (k or prebound):
            affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_term(
                rng.choice(apps[:k] + ["pre"]), "topology.kubernetes.io/zone")]}
        elif rng.random() < 0.12:
            affinity["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [_term(
                rng.choice(apps[:k + 1] + ["pre"]), "kubernetes.io/hostname", rng.choice([10, 100]))]}
        if affinity:
            pod["affinity"] = affinity
        if rng.random() < 0.2:
            selector = rng.choice([{}, {"matchLabels": {"app": app}}, {"matchLabels": {"app": "other"}}])
            pod["topologySpreadConstraints"] = [{"maxSkew": rng.choice([1, 2]), "whenUnsatisfiable": DO_NOT_SCHEDULE,
                                                 "topologyKey": rng.choice(["kubernetes.io/hostname",
                                                                            "topology.kubernetes.io/zone"]),
                                                 "labelSelector": selector}]
        labels = {"app": app, SIM_LABEL: "1", BATCH_LABEL: str(batch)}
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app, "namespace": ns},
                      "spec": {"replicas": rng.randint(1, 8), "selector": {"matchLabels": {"app": app}},
                               "template": {"metadata": {"labels": labels}, "spec": pod}}}
        deployments.append(mutate(deployment, load_config(config)).object)   # what the webhook would store
    placements = simulate([*prebound, *deployments], nodes, config)
    return {"id": sid, "ns": ns, "nodes": nodes, "prebound": prebound, "deployments": deployments,
            "config": config, "placements": placements}


OFF = {"zoneTopologySpread": {"enabled": False}, "hostTopologySpread": {"enabled": False}}


def fixed_scenarios() -> list[dict]:
    """The minimal cases of each rule the widened differential first found wrong, run on the harness too."""
    def node(sid: str, j: int, cpu: str = "2", zone: bool = True, **spec) -> dict:
        labels = {"kubernetes.io/hostname": f"{sid}-n{j}", SCENARIO_LABEL: sid}
        if zone:
            labels["topology.kubernetes.io/zone"] = f"{sid}-zone-a"
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{sid}-n{j}", "labels": labels},
                "spec": spec, "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}}

    def deployment(sid: str, replicas: int, **pod) -> dict:
        spec = {"containers": [_container("app", {"cpu": "500m"})], "nodeSelector": {SCENARIO_LABEL: sid}, **pod}
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w0", "namespace": f"sim-{sid}"},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "w0"}},
                         "template": {"metadata": {"labels": {"app": "w0", SIM_LABEL: "1", BATCH_LABEL: "0"}},
                                      "spec": spec}}}

    def spread(key: str, selector: dict, when: str = DO_NOT_SCHEDULE) -> list:
        return [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when, "labelSelector": selector}]

    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        _term("w0", "kubernetes.io/hostname")]}}
    cases = {   # id: (nodes, deployment, expected (placed, pending))
        "f-sidecar": (lambda i: [node(i, 0)], lambda i: deployment(i, 2, initContainers=[dict(
            _container("proxy", {"cpu": "1"}), restartPolicy="Always")]), ({"f-sidecar-n0": 1}, 1)),
        "f-podlevel": (lambda i: [node(i, 0)], lambda i: deployment(i, 2, resources={"requests": {"cpu": "1500m"}}),
                       ({"f-podlevel-n0": 1}, 1)),
        "f-anti": (lambda i: [node(i, 0, "4"), node(i, 1, "4")], lambda i: deployment(i, 3, affinity=anti),
                   ({"f-anti-n0": 1, "f-anti-n1": 1}, 1)),
        "f-empty": (lambda i: [node(i, 0, "4"), node(i, 1, "4", taints=[dict(DEDICATED)])],
                    lambda i: deployment(i, 4, topologySpreadConstraints=spread("kubernetes.io/hostname", {})),
                    ({"f-empty-n0": 4}, 0)),
        "f-foreign": (lambda i: [node(i, 0, "4"), node(i, 1, "4", taints=[dict(DEDICATED)])],
                      lambda i: deployment(i, 4, topologySpreadConstraints=spread(
                          "kubernetes.io/hostname", {"matchLabels": {"app": "other"}})), ({"f-foreign-n0": 4}, 0)),
        "f-cordon": (lambda i: [node(i, 0, unschedulable=True)],
                     lambda i: deployment(i, 1, tolerations=[{"operator": "Exists"}]), ({"f-cordon-n0": 1}, 0)),
        "f-zoneless": (lambda i: [node(i, 0, "4", zone=False), node(i, 1, "4")],
                       lambda i: deployment(i, 1, topologySpreadConstraints=spread(
                           "topology.kubernetes.io/zone", {"matchLabels": {"app": "w0"}}, "ScheduleAnyway")),
                       ({"f-zoneless-n1": 1}, 0)),
    }
    out = []
    for sid, (nodes_of, deployment_of, expected) in cases.items():
        nodes, d = nodes_of(sid), mutate(deployment_of(sid), load_config(OFF)).object
        out.append({"id": sid, "ns": f"sim-{sid}", "nodes": nodes, "prebound": [], "deployments": [d],
                    "config": OFF, "placements": simulate([d], nodes, OFF), "expected": expected})
    return out


@pytest.fixture(scope="module")
def sim_cluster(harness_built, tmp_path_factory):
    """A cluster of its own: other tests' pods must not take the scenario Nodes' capacity."""
    c = Cluster(tmp_path_factory.mktemp("sim") / "c")
    api_client = k8s_config.new_client_from_config(config_file=str(c.kubeconfig))
    c.core, c.apps = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client)
    yield c
    assert c.stop() == 0


def _quiet(call, *args) -> None:
    """An API call whose response is not needed: not deserialised (the client's models are slow)."""
    response = call(*args, _preload_content=False)
    response.read()          # the whole body, so the connection can be reused
    response.release_conn()


def create_base(c: Cluster, s: dict) -> None:
    for node in s["nodes"]:
        _quiet(c.core.create_node, {k: v for k, v in node.items() if k != "status"})
        status = dict(node["status"], capacity=node["status"]["allocatable"],
                      conditions=[{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "e2e"}])
        _quiet(c.core.patch_node_status, node["metadata"]["name"], {"status": status})
    _quiet(c.core.create_namespace, {"metadata": {"name": s["ns"]}})
    for pod in s["prebound"]:
        _quiet(c.core.create_namespaced_pod, s["ns"], pod)


def in_parallel(fn, items) -> None:
    """Requests from a few threads: the API server's latency overlaps (every call still completes or raises)."""
    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(fn, items))


def real_pods(c: Cluster, batch: int) -> dict[tuple[str, str], list]:
    resp = c.core.list_pod_for_all_namespaces(label_selector=f"{SIM_LABEL}=1,{BATCH_LABEL}={batch}",
                                              _preload_content=False)
    out: dict[tuple[str, str], list] = {}
    for p in json.loads(resp.data)["items"]:
        meta = p["metadata"]
        if not meta.get("deletionTimestamp"):
            out.setdefault((meta["namespace"], meta["labels"].get("app")), []).append(p)
    return out


def node_of(pod: dict) -> str | None:
    return pod["spec"].get("nodeName")


def unschedulable(pod: dict) -> bool:
    return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def outcome(pods: list) -> tuple[int, int, int]:
    """(pods, bound, Unschedulable)."""
    bound = sum(1 for p in pods if node_of(p))
    return len(pods), bound, sum(1 for p in pods if not node_of(p) and unschedulable(p))


def settled(round_items: list[tuple[dict, int]], c: Cluster, batch: int) -> bool:
    by_app = real_pods(c, batch)
    for s, k in round_items:
        p = s["placements"][k]
        total, bound, waiting = outcome(by_app.get((s["ns"], p.name), []))
        if total != p.replicas or bound + waiting != total:
            return False
    return True


def constraint_violations(s: dict, k: int, pods: list) -> list[str]:
    """The Deployment's DoNotSchedule constraints that select its own app, checked on the real placement (its
    pods and the bound pods of the app; eligible domains by the inclusion policies)."""
    d = s["deployments"][k]
    shape = PodShape.of_template(d["spec"]["template"], s["ns"], "x")
    nodes = {n["metadata"]["name"]: NodeState.of(n) for n in s["nodes"]}
    counts = Counter(node_of(p) for p in pods if node_of(p))
    problems = [f"a pod on {name}, which its node selector excludes" for name in counts
                if name not in nodes or not shape.matches_affinity(nodes[name])]
    counts.update(p["spec"]["nodeName"] for p in s["prebound"] if p["metadata"]["labels"]["app"] == d["metadata"]["name"])
    for c in shape.constraints:
        selector = c.get("labelSelector") or {}
        if c["whenUnsatisfiable"] != DO_NOT_SCHEDULE or selector != {"matchLabels": {"app": d["metadata"]["name"]}} \
                or c.get("matchLabelKeys"):
            continue
        honor_taints = c.get("nodeTaintsPolicy") == "Honor"
        eligible = [n for n in nodes.values() if shape.matches_affinity(n) and c["topologyKey"] in n.labels and not (
            honor_taints and any(t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(shape.tolerations, t)
                                 for t in n.taints))]
        per_domain: Counter = Counter({n.labels[c["topologyKey"]]: 0 for n in eligible})
        for n in eligible:
            per_domain[n.labels[c["topologyKey"]]] += counts.get(n.name, 0)
        low = min(per_domain.values()) if len(per_domain) >= c.get("minDomains", 1) else 0
        if per_domain and max(per_domain.values()) - low > c["maxSkew"]:
            problems.append(f"skew {max(per_domain.values()) - low} > maxSkew {c['maxSkew']} on {c['topologyKey']}")
    return problems


def describe(s: dict, k: int, pods: list) -> str:
    total, bound, waiting = outcome(pods)
    p = s["placements"][k]
    real = dict(sorted(Counter(node_of(x) for x in pods if node_of(x)).items()))
    return (f"{s['id']}/{p.name}: simulate {p.pending_range} Pending of {p.replicas} {p.placed} "
            f"{'deterministic' if p.deterministic else 'tie-broken'}; scheduler bound {bound} of {total} {real}, "
            f"{waiting} Unschedulable; reasons {p.reasons}")


def test_simulate_agrees_with_the_real_scheduler(sim_cluster):
    seed = int(os.environ.get("POLICYLIB_SIM_SEED", str(int(time.time()))))
    print(f"differential test: seed {seed} (replay: POLICYLIB_SIM_SEED={seed})")
    rng = random.Random(seed)
    fixed = fixed_scenarios()
    for s in fixed:
        p = s["placements"][0]
        assert (p.placed, p.pending) == s["expected"], f"{s['id']}: simulate {p.placed} {p.pending} Pending"
    scenarios = [random_scenario(rng, i, (len(fixed) + i) // BATCH) for i in range(SCENARIOS)]
    deployments = sum(len(s["deployments"]) for s in scenarios)
    scenarios = fixed + scenarios
    with_pending = sum(1 for s in scenarios for p in s["placements"] if p.pending_max)
    assert with_pending >= deployments // 10, "the generator should produce Deployments with Pending replicas"
    pending_failures: list[str] = []
    placement_failures: list[str] = []
    broken: list[str] = []
    fixed_failures: list[str] = []
    compared = tie_broken = 0
    for start in range(0, len(scenarios), BATCH):
        batch = scenarios[start:start + BATCH]
        in_parallel(lambda s: create_base(sim_cluster, s), batch)
        for k in range(max(len(s["deployments"]) for s in batch)):
            round_items = [(s, k) for s in batch if k < len(s["deployments"])]
            in_parallel(lambda item: _quiet(sim_cluster.apps.create_namespaced_deployment, item[0]["ns"],
                                            item[0]["deployments"][item[1]]), round_items)
            with contextlib.suppress(AssertionError):   # reported per Deployment below
                wait_for(f"seed {seed}: scenarios {start}-{start + len(batch) - 1}, round {k}: every pod bound or "
                         "Unschedulable", lambda items=round_items, b=start // BATCH: settled(items, sim_cluster, b),
                         timeout=240, interval=2.0)
        by_app = real_pods(sim_cluster, start // BATCH)
        for s in batch:
            chain_deterministic = True
            for k, p in enumerate(s["placements"]):
                pods = by_app.get((s["ns"], p.name), [])
                total, bound, waiting = outcome(pods)
                if "expected" in s:
                    real = dict(Counter(node_of(x) for x in pods if node_of(x)))
                    if (real, total - bound) != s["expected"]:
                        fixed_failures.append(describe(s, k, pods))
                    continue
                pending_ok = total == p.replicas and waiting == total - bound and \
                    p.pending <= total - bound <= p.pending_max
                if not pending_ok:
                    pending_failures.append(describe(s, k, pods))
                chain_deterministic = chain_deterministic and p.deterministic
                if chain_deterministic and pending_ok:
                    compared += 1
                    real = dict(Counter(node_of(x) for x in pods if node_of(x)))
                    if real != p.placed:
                        placement_failures.append(describe(s, k, pods))
                else:
                    tie_broken += 1
                broken += [f"{problem}: {describe(s, k, pods)}" for problem in constraint_violations(s, k, pods)]
    pending_rate = 1 - len(pending_failures) / deployments
    placement_rate = 1 - len(placement_failures) / compared if compared else 1.0
    print(f"differential test: seed {seed}: {SCENARIOS} scenarios, {deployments} Deployments; Pending agrees for "
          f"{deployments - len(pending_failures)} ({pending_rate:.1%}); placement compared for {compared} "
          f"deterministic Deployments, agrees for {compared - len(placement_failures)} ({placement_rate:.1%}); "
          f"{tie_broken} tie-broken or after a tie (Pending only)")
    for line in pending_failures + placement_failures:
        print("  disagreement: " + line)
    assert fixed_failures == [], "the scheduler differs on a minimal case:\n" + "\n".join(fixed_failures)
    assert broken == [], f"seed {seed}: the scheduler broke a DoNotSchedule constraint?\n" + "\n".join(broken[:5])
    assert pending_rate >= PENDING_AGREEMENT, f"seed {seed}: Pending differs for {len(pending_failures)} of " \
        f"{deployments} Deployments:\n" + "\n".join(pending_failures[:10])
    assert placement_rate >= PLACEMENT_AGREEMENT, f"seed {seed}: placement differs for {len(placement_failures)} of " \
        f"{compared} deterministic Deployments:\n" + "\n".join(placement_failures[:10])
