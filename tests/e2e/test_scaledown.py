"""Spread-aware scale-down on the real control plane (rules S23 to S28): the ReplicaSet controller of
kube-controller-manager 1.36 removes the replicas, policylib's webhook and controller run as installed, and
the same scale-downs run with ``controller.spreadAwareScaleDown`` off and on, side by side in one cluster.

Two scenarios, each with at least 30 scale-downs per setting:

- even: 3 zones of 2 Nodes, 12 replicas scaled to 3 (the common complaint upstream);
- uneven: zones of 3, 2 and 1 Nodes, random replica counts from 4 to 30 and several scale-downs in a row.

Each setting has its own webhook, MutatingWebhookConfiguration (its scope, rule W5) and controller with its
own Lease; a namespace per scenario and setting. A scale-down is a violation when it leaves a zone skew
above the zone constraint's maxSkew while the pods it started from allowed one within it
(``least_skew_after`` of tests/test_scaledown.py). The counts are printed; with the setting on there must be
none, and the pod writes are counted from the controller's metric.
"""
from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from policylib.scaledown import DELETION_COST, skew_of
from tests.test_scaledown import least_skew_after

from .harness import CONFIG_LABEL, Cluster, Controller, Webhook, deployment, wait_for

ZONE = "topology.kubernetes.io/zone"
GROUP = "e2e.policylib.io/group"
ZONES = {"even": {"a": 2, "b": 2, "c": 2}, "uneven": {"a": 3, "b": 2, "c": 1}}
MAX_SKEW = 1   # the default zoneTopologySpread.maxSkew the webhook writes
ROUNDS = {"even": 4, "uneven": 2}   # rounds x Deployments (x scale-downs per round) >= 30
DEPLOYMENTS = 8
pytestmark = pytest.mark.timeout(900)


def nodes_file(tmp: Path) -> Path:
    items = []
    for group, zones in ZONES.items():
        for zone, count in zones.items():
            for i in range(count):
                items.append({"kind": "Node", "metadata": {"name": f"{group}-{zone}{i}",
                                                           "labels": {ZONE: f"zone-{zone}", GROUP: group}},
                              "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "200"}}})
    path = tmp / "nodes.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


@pytest.fixture(scope="module")
def setup(harness_built, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scaledown")
    cluster = Cluster(tmp / "c", nodes=nodes_file(tmp))
    running: list = []
    try:
        sides = {}
        for side, on in (("off", False), ("on", True)):
            name = f"sd-{side}"
            hook = Webhook(cluster, name, {}, tmp).start()
            running.append(hook)
            hook.register()
            config = {"controller": {"spreadAwareScaleDown": on, "leaseName": f"policylib-{name}",
                                     "resyncSeconds": 60}}
            ctl = Controller(cluster, config, tmp, name, "default",
                             extra_args=[f"--webhook-configuration=policylib-e2e-{name}"])
            running.append(ctl)
            wait_for(f"controller {name} leads", lambda c=ctl: c.status()["leader"], timeout=60)
            sides[side] = (name, ctl)
        yield cluster, sides
    finally:
        for proc in reversed(running):
            proc.stop()
        cluster.stop()


def pods(cluster: Cluster, ns: str) -> list[dict]:
    return [p for p in cluster.list("pods", ns) if not p["metadata"].get("deletionTimestamp")]


def zones_of(cluster: Cluster, ns: str, app: str, zone_of: dict[str, str], group: str) -> dict[str, int]:
    return all_zones(cluster, ns, zone_of, group, [app])[app]


def all_zones(cluster: Cluster, ns: str, zone_of: dict[str, str], group: str, apps: list[str]) -> dict[str, dict[str, int]]:
    """Bound pods per zone of each app, from one list."""
    counts = {app: dict.fromkeys(sorted({f"zone-{z}" for z in ZONES[group]}), 0) for app in apps}
    for p in pods(cluster, ns):
        app = p["metadata"]["labels"].get("app")
        if app in counts and p["spec"].get("nodeName"):
            counts[app][zone_of[p["spec"]["nodeName"]]] += 1
    return counts


def settled(cluster: Cluster, ns: str, want: dict[str, int], costs: bool) -> bool:
    """Every Deployment has exactly its replicas, all bound, Running, none terminating and (with costs on)
    each with its deletion cost."""
    everything = cluster.list("pods", ns)
    have = Counter()
    for p in everything:
        if p["metadata"].get("deletionTimestamp") or p["status"].get("phase") != "Running":
            return False
        if costs and DELETION_COST not in (p["metadata"].get("annotations") or {}):
            return False
        have[p["metadata"]["labels"]["app"]] += 1
    return dict(have) == {k: v for k, v in want.items() if v}


def scale(cluster: Cluster, ns: str, targets: dict[str, int]) -> None:
    by_count: dict[int, list[str]] = {}
    for app, n in targets.items():
        by_count.setdefault(n, []).append(app)
    for n, apps in by_count.items():
        cluster.kubectl("-n", ns, "scale", "deployment", *apps, f"--replicas={n}")


def run_side(cluster: Cluster, ns: str, group: str, costs: bool, plan: list[list[int]]) -> dict:
    """``plan[round][deployment]``: the replica counts of each round (the first count of a round is a
    scale-up, the rest scale-downs in a row). Returns the counts."""
    zone_of = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in cluster.list("nodes")
               if n["metadata"]["labels"].get(GROUP) == group}
    apps = [f"app{i}" for i in range(DEPLOYMENTS)]
    for app in apps:
        cluster.apply(deployment(app, ns, replicas=0, node_selector={GROUP: group}))
    result = {"scale_downs": 0, "zones_emptied": 0, "violations": 0, "worst_skew": 0, "pods_created": 0,
              "failures": []}
    current = dict.fromkeys(apps, 0)
    for round_ in plan:
        steps = max(len(counts) for counts in round_)
        for step in range(steps):
            targets = {app: counts[min(step, len(counts) - 1)] for app, counts in zip(apps, round_, strict=True)}
            before = all_zones(cluster, ns, zone_of, group, apps)
            scale(cluster, ns, targets)
            wait_for(f"{ns}: {targets}", lambda t=targets: settled(cluster, ns, t, costs), timeout=180, interval=1.0)
            after_all = all_zones(cluster, ns, zone_of, group, apps)
            for app in apps:
                n, was = targets[app], current[app]
                if n > was:
                    result["pods_created"] += n - was
                elif n < was:
                    after = after_all[app]
                    result["scale_downs"] += 1
                    skew = skew_of(after)
                    result["worst_skew"] = max(result["worst_skew"], skew)
                    emptied = [z for z in after if after[z] == 0 and before[app][z] > 0 and n >= len(after)]
                    result["zones_emptied"] += bool(emptied)
                    if skew > MAX_SKEW and least_skew_after(before[app], n) <= MAX_SKEW:
                        result["violations"] += 1
                        result["failures"].append(f"{app} {was}->{n}: {before[app]} -> {after}")
                current[app] = n
    return result


def plans() -> dict[str, list[list[list[int]]]]:
    even = [[[12, 3] for _ in range(DEPLOYMENTS)] for _ in range(ROUNDS["even"])]
    rnd = random.Random(32)
    uneven = []
    for _ in range(ROUNDS["uneven"]):
        round_ = []
        for _ in range(DEPLOYMENTS):
            top = rnd.randint(8, 30)
            downs = sorted({rnd.randint(4, top - 1) for _ in range(3)}, reverse=True)
            round_.append([top, *downs])
        uneven.append(round_)
    return {"even": even, "uneven": uneven}


def test_scale_down_keeps_the_zone_spread_with_the_costs_and_not_without(setup):
    cluster, sides = setup
    table: dict[tuple[str, str], dict] = {}

    def one(group: str, plan: list, side: str, name: str) -> dict:
        ns = cluster.namespace(f"sd-{group}-{side}", config=name)
        started = time.monotonic()
        counts = run_side(cluster, ns, group, side == "on", plan)
        counts["seconds"] = round(time.monotonic() - started, 1)
        return counts
    for group, plan in plans().items():
        # the setting off and on side by side, at once, each against its own controller
        written = {side: ctl.metric("policylib_pod_cost_writes_total", result="written")
                   for side, (_, ctl) in sides.items()}
        with ThreadPoolExecutor(len(sides)) as pool:
            futures = {side: pool.submit(one, group, plan, side, name) for side, (name, _) in sides.items()}
        for side, (_, ctl) in sides.items():
            table[(group, side)] = futures[side].result()
            table[(group, side)]["pod_writes"] = ctl.metric("policylib_pod_cost_writes_total", result="written") \
                - written[side]
    lines = [f"{'scenario':8} {'setting':7} {'scale-downs':>11} {'zones emptied':>13} {'violations':>10} "
             f"{'worst skew':>10} {'pod writes':>10} {'per scale-down':>14} {'per pod created':>15}"]
    for (group, side), c in table.items():
        lines.append(f"{group:8} {side:7} {c['scale_downs']:>11} {c['zones_emptied']:>13} {c['violations']:>10} "
                     f"{c['worst_skew']:>10} {int(c['pod_writes']):>10} {c['pod_writes'] / c['scale_downs']:>14.2f} "
                     f"{c['pod_writes'] / max(1, c['pods_created']):>15.2f}")
    report = "\n".join(lines)
    print("\n" + report, file=sys.stderr)
    print(json.dumps({f"{g}/{s}": {k: v for k, v in c.items() if k != "failures"} for (g, s), c in table.items()}),
          file=sys.stderr)
    for group in ZONES:
        off, on = table[(group, "off")], table[(group, "on")]
        assert off["scale_downs"] >= 30 and on["scale_downs"] >= 30
        assert on["violations"] == 0, (report, on["failures"])
        assert on["zones_emptied"] == 0, (report, on["failures"])
        assert off["pod_writes"] == 0, report
        # about one write per pod created (a new pod on an emptier Node of its zone also moves the pods above
        # its level up by one), and none at steady state: a scale-down removes the top levels
        assert on["pod_writes"] <= 1.25 * on["pods_created"], report
    # the baseline the costs fix: without them the ReplicaSet controller's colocation ranking empties zones
    assert table[("even", "off")]["zones_emptied"] > 0, report


#: The repair profile of docs/concepts/deployments.md ("Repair"), with the namespaces the test's webhook serves.
DESCHEDULER_POLICY = """
apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
  - name: policylib-spread-repair
    pluginConfig:
      - name: DefaultEvictor
        args:
          # only the pods of Deployments (every one carries pod-template-hash) ...
          labelSelector:
            matchExpressions: [{key: pod-template-hash, operator: Exists}]
          # ... in the namespaces policylib's webhook serves (its namespaceSelector)
          namespaceLabelSelector:
            matchLabels: {NAMESPACE_LABELS}
          nodeFit: true
      - name: RemovePodsViolatingTopologySpreadConstraint
        args:
          # policylib's zone spread is a preference (rule S3): ScheduleAnyway constraints are repaired too
          constraints: [DoNotSchedule, ScheduleAnyway]
    plugins:
      balance:
        enabled: [RemovePodsViolatingTopologySpreadConstraint]
"""


def test_the_descheduler_profile_repairs_a_zone_that_came_back(setup, tmp_path):
    """The costs cannot prevent a skew a lost or cordoned zone leaves: the controller reports it (the gauge,
    a SpreadViolated Event) and one run of the descheduler with the documented profile, evicting through
    the Eviction API, repairs it."""
    from .harness import E2E, require_built
    require_built("descheduler")
    cluster, sides = setup
    name, ctl = sides["on"]
    ns = cluster.namespace("sd-repair", config=name)
    zone_of = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in cluster.list("nodes")
               if n["metadata"]["labels"].get(GROUP) == "even"}
    cluster.apply(deployment("repair", ns, replicas=6, node_selector={GROUP: "even"}))
    # no PodDisruptionBudget here: the harness's kube-controller-manager runs no disruption controller, so a
    # budget's status would never allow an eviction (429, which the descheduler's client retries until killed)
    wait_for("6 pods with costs", lambda: settled(cluster, ns, {"repair": 6}, True), timeout=120)
    # zone c goes away (cordoned, its pods deleted and placed in a and b), then comes back
    baseline = ctl.metric("policylib_spread_violated_deployments")   # the other tests' Deployments
    zone_c = [n for n, z in zone_of.items() if z == "zone-c"]
    cluster.kubectl("cordon", *zone_c)
    try:
        for p in pods(cluster, ns):
            if zone_of[p["spec"]["nodeName"]] == "zone-c":
                cluster.kubectl("-n", ns, "delete", "pod", p["metadata"]["name"], "--wait=false")
        wait_for("6 pods in zones a and b", lambda: settled(cluster, ns, {"repair": 6}, True)
                 and zones_of(cluster, ns, "repair", zone_of, "even")["zone-c"] == 0, timeout=120)
    finally:
        cluster.kubectl("uncordon", *zone_c)
    broken = zones_of(cluster, ns, "repair", zone_of, "even")
    assert skew_of(broken) == 3, broken
    wait_for("the violation gauge", lambda: ctl.metric("policylib_spread_violated_deployments") >= baseline + 1,
             timeout=60)
    wait_for("a SpreadViolated Event", lambda: [e for e in cluster.list("events.events.k8s.io", ns)
                                                if e.get("reason") == "SpreadViolated"], timeout=60)
    policy = tmp_path / "descheduler.yaml"
    policy.write_text(DESCHEDULER_POLICY.replace("{NAMESPACE_LABELS}", json.dumps({CONFIG_LABEL: name})))
    import subprocess
    run = subprocess.run([str(E2E / "bin" / "descheduler"), "--kubeconfig", str(cluster.kubeconfig),
                          "--policy-config-file", str(policy), "--descheduling-interval", "0", "--v", "3"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    evicted = run.stderr.count(f'"Evicted pod" pod="{ns}/')   # the other managed namespaces have their own
    wait_for("6 pods again, one zone skew at most 1",
             lambda: settled(cluster, ns, {"repair": 6}, True)
             and skew_of(zones_of(cluster, ns, "repair", zone_of, "even")) <= MAX_SKEW, timeout=120)
    print(f"\ndescheduler: {broken} repaired to {zones_of(cluster, ns, 'repair', zone_of, 'even')} "
          f"({evicted} evictions)", file=sys.stderr)
    assert evicted >= 1, run.stderr[-3000:]
    wait_for("the violation gauge back", lambda: ctl.metric("policylib_spread_violated_deployments") == baseline,
             timeout=60)
