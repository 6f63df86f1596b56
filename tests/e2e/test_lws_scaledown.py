"""What a LeaderWorkerSet scale-in leaves per zone, measured on the real LWS controller (``testcluster --lws``, LWS
v0.9.0), the StatefulSet controller and kube-scheduler of both minors, with and without policylib's webhook.

Zones of unequal size, as the StatefulSet and Deployment scale-down tests (tests/e2e/test_statefulset_scaledown.py):
zone-a 3 Nodes, zone-b 2, zone-c 1, a set of them per LeaderWorkerSet. Groups of 2 pods (a leader and a worker).
LWS makes its leader StatefulSet with ``podManagementPolicy: Parallel`` (always: an LWS has no setting for it), so
Parallel is the one policy measured. For each scale-in (12 -> 3, 9 -> 4, 12 -> 6) ``TRIALS`` LeaderWorkerSets are
created with no group, scaled up through their scale subresource (waited on: every group's pods Running and Ready, the
LWS's ``status.readyReplicas``), then scaled in. Twice: in a namespace policylib serves (rules E2-E6: the leaders' zone
and host spread counting groups, each group within one zone by ``topology.gangs.within: zone``) and in one it does
not (kube-scheduler's defaults alone). The leaders per zone after each step are printed (``-s`` shows them;
docs/concepts/leaderworkersets.md gives them), with how many groups have all their pods in one zone, and the test
asserts:

- a scale-in removes exactly the highest group indices, leader and workers, and the groups it keeps are the same
  pods on the same Nodes (the leader StatefulSet removes its highest ordinals, and reads no
  ``controller.kubernetes.io/pod-deletion-cost``): what a scale-in leaves per zone is decided by where each group was
  placed;
- with policylib, every group's pods are in one zone, the first three groups' leaders in three zones, so no scale-in
  to 3 or more groups empties a zone, and one to 3 or 4 leaves the zones within one group of each other;
- ``policylib simulate --scale`` on each LeaderWorkerSet's pods before the scale-in names the groups it removed and
  the leaders per zone it left (rule S26);
- ``policylib simulate`` of each served LeaderWorkerSet (rule E9: group by group) on its Nodes puts every group in one
  zone as the real scheduler did, the leaders of 12 groups 5/4/3 as it did every time, and of 9 within one of it in
  every zone (kube-scheduler breaks the tie of the last leaders at random).
"""
from __future__ import annotations

import io
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from policylib.cli.app import main as policylib
from policylib.scaledown import skew_of

from .harness import Cluster, Webhook, wait_for
from .leaderworkersets import GROUP_INDEX, LWS_RESOURCE, WORKER_INDEX, lws, lws_pods

ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
GROUP = "e2e.policylib.io/group"
ZONES = {"a": 3, "b": 2, "c": 1}
SIZE = 2
#: (scale-up groups, scale-in groups): the StatefulSet test's three
STEPS = ((12, 3), (9, 4), (12, 6))
TRIALS = 3
#: (mode, the namespace's webhook config or None): served by policylib, or by kube-scheduler's defaults alone
MODES = (("policylib", "lwsdown"), ("defaults", None))
CONFIG = {"topology": {"levels": [{"name": "zone", "nodeLabel": ZONE}, {"name": "host", "nodeLabel": HOST}],
                       "gangs": {"within": "zone", "mode": "required"}}}
pytestmark = pytest.mark.timeout(900)


def group_of(mode: str, up: int, down: int, trial: int) -> str:
    """Each LWS on Nodes of its own (its nodeSelector): no trial's pods change another's scores."""
    return f"{mode[0]}{up}-{down}-{trial}"


def nodes_file(tmp: Path) -> Path:
    items = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": f"{group}-{zone}{i}", "labels": {ZONE: f"zone-{zone}", GROUP: group}},
              "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "200"}}}
             for group in (group_of(m, up, down, t) for m, _ in MODES for up, down in STEPS for t in range(TRIALS))
             for zone, count in ZONES.items() for i in range(count)]
    path = tmp / "nodes.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


@pytest.fixture(scope="module")
def setup(harness_built, tmp_path_factory, minor):
    tmp = tmp_path_factory.mktemp(f"lws-scaledown-{minor}")
    cluster = Cluster(tmp / "c", nodes=nodes_file(tmp), minor=minor, lws=True)
    hook = None
    try:
        hook = Webhook(cluster, "lwsdown", CONFIG, tmp).start()
        hook.register()
        yield cluster, tmp
    finally:
        if hook:
            hook.stop()
        assert cluster.stop() == 0


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def placement(cluster: Cluster, ns: str, name: str, groups: int) -> dict[int, dict[int, tuple[str, str]]] | None:
    """group index -> worker index (0: the leader) -> (Node, pod uid), once the LWS has exactly groups
    0..groups-1 of ``SIZE`` pods, every pod bound, Running and Ready, none terminating, and its status says so;
    None before."""
    status = cluster.get(LWS_RESOURCE, name, ns).get("status") or {}
    if status.get("replicas", 0) != groups or status.get("readyReplicas", 0) != groups:
        return None
    out: dict[int, dict[int, tuple[str, str]]] = {}
    for p in lws_pods(cluster, ns, name):
        labels = p["metadata"]["labels"]
        if p["metadata"].get("deletionTimestamp") or p["status"].get("phase") != "Running" or not ready(p) \
                or not p["spec"].get("nodeName"):
            return None
        out.setdefault(int(labels[GROUP_INDEX]), {})[int(labels[WORKER_INDEX])] = (p["spec"]["nodeName"],
                                                                                     p["metadata"]["uid"])
    whole = sorted(out) == list(range(groups)) and all(sorted(g) == list(range(SIZE)) for g in out.values())
    return out if whole else None


def leaders_per_zone(where: dict[int, dict[int, tuple[str, str]]], zone_of: dict[str, str]) -> dict[str, int]:
    counts = dict.fromkeys(sorted(set(zone_of.values())), 0)
    for group in where.values():
        counts[zone_of[group[0][0]]] += 1
    return counts


def zones_text(counts: dict[str, int]) -> str:
    return "/".join(str(n) for n in counts.values())


def run_mode(cluster: Cluster, mode: str, config: str | None, zone_of: dict[str, str]) -> list[dict]:
    """Every trial of one mode, at once in its namespace: created at 0 groups, scaled up, waited on, scaled in,
    waited on. Returns one record per LeaderWorkerSet."""
    ns = cluster.namespace(f"lws-down-{mode}", config=config)
    sets = [(f"l{up}-{down}-{t}", up, down, group_of(mode, up, down, t)) for up, down in STEPS for t in range(TRIALS)]
    records = []
    for name, up, down, group in sets:
        obj = lws(name, ns, size=SIZE, replicas=0, node_selector={GROUP: group})
        cluster.kubectl("create", "-f", "-", input=json.dumps(obj))
        records.append({"mode": mode, "namespace": ns, "name": name, "up": up, "down": down, "group": group,
                        "stored": cluster.get(LWS_RESOURCE, name, ns)})
    started = time.monotonic()
    for up in {up for _, up, _, _ in sets}:
        cluster.kubectl("-n", ns, "scale", LWS_RESOURCE, *[n for n, u, _, _ in sets if u == up], f"--replicas={up}")
    for r in records:
        r["placed"] = wait_for(f"LWS {ns}/{r['name']}: {r['up']} groups Ready", lambda r=r: placement(
            cluster, ns, r["name"], r["up"]), timeout=400, interval=1.0)
    scaled_up = time.monotonic()
    for r in records:   # the input of ``simulate --scale``: the LWS and its pods as the cluster has them
        r["snapshot"] = [cluster.get(LWS_RESOURCE, r["name"], ns), *lws_pods(cluster, ns, r["name"])]
    for down in {down for _, _, down, _ in sets}:
        cluster.kubectl("-n", ns, "scale", LWS_RESOURCE, *[n for n, _, d, _ in sets if d == down],
                        f"--replicas={down}")
    for r in records:
        r["kept"] = wait_for(f"LWS {ns}/{r['name']}: {r['down']} groups Ready", lambda r=r: placement(
            cluster, ns, r["name"], r["down"]), timeout=300, interval=1.0)
    done = time.monotonic()
    for r in records:
        r["zones_up"] = leaders_per_zone(r["placed"], zone_of)
        r["zones_down"] = leaders_per_zone(r["kept"], zone_of)
        r["order"] = "".join(zone_of[r["placed"][g][0][0]][-1] for g in range(r["up"]))
        r["whole"] = sum(len({zone_of[node] for node, _ in g.values()}) == 1 for g in r["placed"].values())
        r["seconds_up"], r["seconds_down"] = round(scaled_up - started, 1), round(done - scaled_up, 1)
    return records


def simulated_scale_in(cluster: Cluster, record: dict, tmp: Path) -> dict:
    """``policylib simulate --scale NS/NAME=N -o json`` on the LeaderWorkerSet and its pods before the scale-in."""
    objects, nodes = tmp / f"{record['name']}-{record['mode']}-pods.json", tmp / f"{record['name']}-{record['mode']}-nodes.json"
    objects.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": record["snapshot"]}))
    nodes.write_text(cluster.kubectl("get", "nodes", "-l", f"{GROUP}={record['group']}", "-o", "json").stdout)
    out, err = io.StringIO(), io.StringIO()
    code = policylib(["simulate", "-f", str(objects), "--nodes", str(nodes), "--scale",
                      f"{record['namespace']}/{record['name']}={record['down']}", "-o", "json"],
                     stdin=io.StringIO(), stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    [answer] = json.loads(out.getvalue())
    return answer


def simulated_groups(cluster: Cluster, record: dict, tmp: Path) -> dict:
    """``policylib simulate -o json``'s ``groups`` for the LeaderWorkerSet with its scale-up count of groups, on its
    Nodes as the cluster has them, with the webhook's settings."""
    nodes, obj, config = (tmp / f"{record['name']}-{kind}.json" for kind in ("nodes", "lws", "config"))
    nodes.write_text(cluster.kubectl("get", "nodes", "-l", f"{GROUP}={record['group']}", "-o", "json").stdout)
    obj.write_text(json.dumps(lws(record["name"], record["namespace"], size=SIZE, replicas=record["up"],
                                  node_selector={GROUP: record["group"]})))
    config.write_text(json.dumps(CONFIG))
    out, err = io.StringIO(), io.StringIO()
    code = policylib(["simulate", "-f", str(obj), "--nodes", str(nodes), "--config", str(config), "-o", "json"],
                     stdin=io.StringIO(), stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    [placed] = json.loads(out.getvalue())
    return placed["groups"]


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="kube-scheduler; per LeaderWorkerSet 6 Nodes: zone-a 3, zone-b 2, zone-c 1",
    settings="defaults, `topology.gangs.within: zone` (required); and, as the baseline, no policylib",
    operator="LeaderWorkerSet v0.9.0 manager and webhooks; kube-controller-manager's StatefulSet controller",
    jobs="LeaderWorkerSets of groups of 2 scaled 0 -> 12 -> 3, 0 -> 9 -> 4, 0 -> 12 -> 6 through the scale subresource",
    outcome=("a scale-in removes the highest group indices and keeps every other pod where it was; with policylib "
             "each group is in one zone, groups 0-2 lead in three zones, and scale-ins to 3 and 4 groups leave "
             "every zone a leader, zones within one group of each other; `simulate` places the groups as the real "
             "scheduler did (every group in one zone, 12 leaders 5/4/3)"))
def test_lws_scale_in_removes_the_highest_groups_wherever_they_are(setup):
    cluster, tmp = setup
    zone_of = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in cluster.list("nodes")}

    with ThreadPoolExecutor(len(MODES)) as pool:
        records = [r for rs in pool.map(lambda m: run_mode(cluster, m[0], m[1], zone_of), MODES) for r in rs]

    assert len(records) == len(MODES) * len(STEPS) * TRIALS
    lines = [f"{'mode':9} {'lws':9} {'groups':>7} {'a/b/c up':>9} {'a/b/c in':>9} {'skew in':>7} "
             f"{'in 1 zone':>9} {'leader zones (group 0..n-1)':28} {'up s':>5} {'in s':>5}"]
    for r in records:
        lines.append(f"{r['mode']:9} {r['name']:9} {r['up']:>3}->{r['down']:<3} {zones_text(r['zones_up']):>9} "
                     f"{zones_text(r['zones_down']):>9} {skew_of(r['zones_down']):>7} "
                     f"{str(r['whole']) + '/' + str(r['up']):>9} {r['order']:28} "
                     f"{r['seconds_up']:>5} {r['seconds_down']:>5}")
    report = "\n".join(lines)
    print(f"\nKubernetes {cluster.minor}: leaders per zone, LeaderWorkerSet scale-in (Parallel):\n{report}",
          file=sys.stderr)

    for r in records:
        served = r["mode"] == "policylib"
        written = r["stored"]["metadata"].get("annotations") or {}
        assert ("policylib.io/spread-effective-replicas" in written) is served, (r["name"], written)
        leaders = (r["stored"]["spec"]["leaderWorkerTemplate"].get("leaderTemplate") or {}).get("spec") or {}
        assert [(c["topologyKey"], c["whenUnsatisfiable"], c["maxSkew"])
                for c in leaders.get("topologySpreadConstraints") or []] == (
            [(ZONE, "ScheduleAnyway", 1), (HOST, "ScheduleAnyway", 1)] if served else []), (r["name"], leaders)
        # the highest groups go, whole, and the lower ones stay as they were: the same pods on the same Nodes
        assert sorted(r["kept"]) == list(range(r["down"])), report
        assert all(r["kept"][g] == r["placed"][g] for g in r["kept"]), (report, r["name"])
        # so the zones a scale-in leaves are those of the groups placed first
        assert r["zones_down"] == leaders_per_zone({g: r["placed"][g] for g in range(r["down"])}, zone_of), report
        # and simulate --scale on the pods before the scale-in names the same groups and the same zones (rule S26)
        answer = simulated_scale_in(cluster, r, tmp)
        assert answer["removedGroups"] == list(range(r["up"] - 1, r["down"] - 1, -1)), (r["name"], answer)
        assert (answer["zones"], answer["podsInInput"]) == (r["zones_down"], r["up"] * SIZE), (report, answer)
        if served:
            # each group within one zone (its worker followed its leader), and the leaders of groups 0-2 (the
            # leader StatefulSet's first two batches, of 1 and 2) in the three zones
            assert r["whole"] == r["up"], (r["name"], r["placed"])
            assert len({zone_of[r["placed"][g][0][0]] for g in range(3)}) == 3, (report, r["name"])
            assert min(r["zones_down"].values()) >= 1, report
            if r["down"] in (3, 4):
                assert skew_of(r["zones_down"]) <= 1, report
            # rule E9: simulate places the groups as the real scheduler did
            sim = simulated_groups(cluster, r, tmp)
            assert (sim["count"], sim["inOneZone"]) == (r["up"], r["up"]), (r["name"], sim)
            if r["up"] == 12:
                assert sim["leaderZones"] == r["zones_up"] == {"zone-a": 5, "zone-b": 4, "zone-c": 3}, (report, sim)
            else:
                assert all(abs(sim["leaderZones"][z] - r["zones_up"][z]) <= 1 for z in r["zones_up"]), (report, sim)
