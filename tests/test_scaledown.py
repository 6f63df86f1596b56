"""Spread-aware scale-down (rules S23 to S28): the deletion costs, the ReplicaSet controller's ranking
replayed, and the skew a Deployment's pods have now."""
from __future__ import annotations

import datetime as dt
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policylib.scaledown import (
    DELETION_COST,
    FIELD_MANAGER,
    cost_owner,
    cost_writes,
    deployment_name,
    desired_costs,
    pods_to_delete,
    project_pod,
    scale_down,
    skew_of,
    spread_violations,
)


def least_skew_after(counts: dict[str, int], remaining: int) -> int:
    """The least zone skew any choice of pods to delete can leave with ``remaining`` pods kept (pods are
    only removed): fill the zones level by level, each up to what it has. The oracle the costs' scale-downs
    are held to."""
    keep = dict.fromkeys(counts, 0)
    left = min(remaining, sum(counts.values()))
    while left:
        open_ = sorted((keep[z], z) for z in counts if keep[z] < counts[z])
        keep[open_[0][1]] += 1
        left -= 1
    return skew_of(keep)


NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.timezone.utc)
ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def node(name: str, zone: str | None) -> dict[str, Any]:
    labels = {HOST: name, **({ZONE: zone} if zone is not None else {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def pod(name: str, node_name: str, *, rs: str = "web-abc", uid: str | None = None, cost: str | None = None,
        manager: str | None = FIELD_MANAGER, age_s: int = 3600, ready: bool = True, phase: str = "Running",
        ns: str = "default") -> dict[str, Any]:
    created = (NOW - dt.timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", "resourceVersion": "7",
                            "creationTimestamp": created,
                            "labels": {"app": "web", "pod-template-hash": rs.rsplit("-", 1)[1]},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                                                 "uid": f"rs-{rs}", "controller": True}]}
    if cost is not None:
        meta["annotations"] = {DELETION_COST: cost}
        if manager:
            meta["managedFields"] = [
                {"manager": "kube-controller-manager", "operation": "Update",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}},
                {"manager": manager, "operation": "Update",
                 "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{DELETION_COST}": {}}}}}]
    status: dict[str, Any] = {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": created}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": node_name}, "status": status}


def deployment(constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"topologySpreadConstraints": constraints or []}}}}


def zone_constraint(max_skew: int = 1, keys: list[str] | None = None) -> dict[str, Any]:
    return {"maxSkew": max_skew, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": keys or ["pod-template-hash"]}


NODES = [node(f"{z}{i}", z) for z in "abc" for i in (1, 2)]
ZONE_OF = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE] for n in NODES}


def with_costs(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods as the controller leaves them: every cost write applied."""
    by_uid = {w.uid: w.cost for w in cost_writes(pods, ZONE_OF)}
    out = []
    for p in pods:
        uid = p["metadata"]["uid"]
        if uid in by_uid:
            p = pod(p["metadata"]["name"], p["spec"]["nodeName"], uid=uid, cost=str(by_uid[uid]),
                    age_s=int((NOW - dt.datetime.fromisoformat(
                        p["metadata"]["creationTimestamp"].replace("Z", "+00:00"))).total_seconds()))
        out.append(p)
    return out


def twelve() -> list[dict[str, Any]]:
    """12 pods bound 4-4-4 as the scheduler leaves them, node a1 with three (a colocation the ranking reads)."""
    layout = ["a1", "a1", "a1", "a2", "b1", "b1", "b2", "b2", "c1", "c1", "c2", "c2"]
    return [pod(f"web-{i}", n, age_s=3600 + i) for i, n in enumerate(layout)]


def zones_left(pods: list[dict[str, Any]], removed: list[Any]) -> dict[str, int]:
    gone = {p["metadata"]["uid"] for p in removed}
    counts = dict.fromkeys("abc", 0)
    for p in pods:
        if p["metadata"]["uid"] not in gone:
            counts[ZONE_OF[p["spec"]["nodeName"]]] += 1
    return counts


def test_levels_are_round_robin_over_nodes_and_costs_are_minus_the_level():
    costs = desired_costs(twelve(), ZONE_OF)
    # zone a: a1 holds web-0,1,2 (web-2 the oldest) and a2 web-3: a1's oldest, a2's, then a1's others
    assert [costs[f"uid-web-{i}"] for i in range(4)] == [-3, -2, 0, -1]
    assert sorted(costs[f"uid-web-{i}"] for i in range(4, 8)) == [-3, -2, -1, 0]
    assert len(costs) == 12


def test_scale_down_twelve_to_three_keeps_one_per_zone_with_costs_and_empties_a_zone_without():
    pods = twelve()
    # without costs the ranking prefers the pods of the fullest Node (a1) and then the newest: a zone is not read
    plain = pods_to_delete(pods, pods, 9, NOW, {})
    costed = with_costs(pods)
    chosen = pods_to_delete(costed, costed, 9, NOW, {p["metadata"]["uid"]: int(p["metadata"]["annotations"]
                                                                                [DELETION_COST]) for p in costed})
    assert zones_left(costed, chosen) == {"a": 1, "b": 1, "c": 1}
    assert zones_left(pods, plain) == {"a": 1, "b": 0, "c": 2}


def test_a_cost_another_manager_owns_is_left_alone_and_not_counted():
    pods = twelve()
    pods[0] = pod("web-0", "a1", cost="100", manager="karpenter")
    pods[1] = pod("web-1", "a1", cost="5", manager=None)   # no managedFields: not ours either
    assert cost_owner(pods[0]) == "karpenter"
    writes = cost_writes(pods, ZONE_OF)
    assert {w.name for w in writes}.isdisjoint({"web-0", "web-1"})
    assert {w.uid for w in writes} <= set(desired_costs(pods, ZONE_OF))


def test_steady_state_writes_nothing_and_a_new_pod_is_one_write():
    pods = with_costs(twelve())
    assert cost_writes(pods, ZONE_OF) == []
    new = pod("web-new", "b2", age_s=1)
    writes = cost_writes(pods + [new], ZONE_OF)
    # b1 and b2 held two each: the new pod is b2's third, the last of zone b
    assert [(w.name, w.cost) for w in writes] == [("web-new", -4)]
    assert writes[0].patch() == {"metadata": {"annotations": {DELETION_COST: "-4"}, "resourceVersion": "7",
                                              "uid": "uid-web-new"}}


def test_removing_the_top_levels_changes_no_other_cost():
    pods = with_costs(twelve())
    kept = [p for p in pods if int(p["metadata"]["annotations"][DELETION_COST]) > -2]
    assert len(kept) == 6
    assert cost_writes(kept, ZONE_OF) == []


def test_unbound_terminating_and_finished_pods_get_no_cost():
    pods = [pod("p", ""), pod("q", "a1", phase="Succeeded"), pod("r", "a1")]
    pods[2]["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    assert desired_costs(pods, ZONE_OF) == {}


def test_projection_keeps_only_the_cost_and_its_owner():
    p = pod("web-0", "a1", cost="-1")
    p["metadata"]["annotations"]["big"] = "x" * 1000
    p["spec"]["containers"] = [{"name": "c", "image": "i"}]
    kept = project_pod(p)
    assert kept["metadata"]["annotations"] == {DELETION_COST: "-1"}
    assert [m["manager"] for m in kept["metadata"]["managedFields"]] == [FIELD_MANAGER]
    assert cost_owner(kept) == FIELD_MANAGER
    assert kept["spec"] == {"nodeName": "a1"} and kept["status"] == {"phase": "Running"}
    assert desired_costs([kept], ZONE_OF) == desired_costs([p], ZONE_OF)
    assert deployment_name(kept) == "web"


def test_ranking_replays_the_replicaset_controllers_order():
    ready, unready = pod("r", "a1"), pod("u", "a2", ready=False)
    unbound, pending = pod("x", ""), pod("p", "b1", phase="Pending")
    low, high = pod("low", "c1"), pod("high", "c2")
    pods = [high, low, ready, unready, pending, unbound]
    order = [p["metadata"]["name"] for p in pods_to_delete(pods, pods, 5, NOW, {"uid-low": -5, "uid-high": 5})]
    # unassigned, Pending, not ready, then the lower cost first
    assert order == ["x", "p", "u", "low", "r"]
    # equal costs: the pod with more of the Deployment's pods on its Node goes first, then the newer
    crowded = [pod("c1", "a1", age_s=100000), pod("c2", "a1", age_s=100000), pod("lone", "b1", age_s=100000)]
    assert pods_to_delete(crowded[2:], crowded, 1, NOW, {}) == [crowded[2]]
    assert pods_to_delete(crowded, crowded, 1, NOW, {})[0]["spec"]["nodeName"] == "a1"
    young, old = pod("young", "a1", age_s=10), pod("old", "b1", age_s=10 ** 6)
    assert pods_to_delete([old, young], [old, young], 1, NOW, {}) == [young]


def test_simulate_scale_answers_with_and_without_the_costs():
    result = scale_down(deployment([zone_constraint()]), twelve(), NODES, 3, ZONE, now=NOW)
    assert result.before == {"a": 4, "b": 4, "c": 4}
    assert result.after_with == {"a": 1, "b": 1, "c": 1}
    assert result.after_without == {"a": 1, "b": 0, "c": 2}
    assert len(result.removed_with) == len(result.removed_without) == 9
    assert result.as_dict()["withCosts"]["zoneSkew"] == 0 and result.as_dict()["withoutCosts"]["zoneSkew"] == 2


def test_violations_name_the_constraint_skew_and_every_domain():
    pods = [pod("p1", "a1"), pod("p2", "a2"), pod("p3", "c1")]
    found = spread_violations(deployment([zone_constraint()]), pods, NODES)
    assert len(found) == 1
    v = found[0]
    assert (v.topology_key, v.skew, v.max_skew, v.counts) == (ZONE, 2, 1, {"a": 2, "b": 0, "c": 1})
    assert v.message() == ("deployment default/web (pod-template-hash=abc): topology.kubernetes.io/zone skew 2 > "
                           "maxSkew 1 (ScheduleAnyway); pods per domain: a=2, b=0, c=1")
    assert spread_violations(deployment([zone_constraint(max_skew=2)]), pods, NODES) == []


def test_host_violation_counts_empty_nodes():
    host = dict(zone_constraint(), topologyKey=HOST, whenUnsatisfiable="DoNotSchedule")
    pods = [pod("p1", "a1"), pod("p2", "a1")]
    (v,) = spread_violations(deployment([host]), pods, NODES)
    assert v.skew == 2 and v.counts["a1"] == 2 and v.counts["c2"] == 0


def test_least_skew_after():
    assert least_skew_after({"a": 4, "b": 4, "c": 4}, 3) == 0
    assert least_skew_after({"a": 4, "b": 4, "c": 1}, 5) == 1
    assert least_skew_after({"a": 4, "b": 4, "c": 0}, 5) == 3   # an empty zone counts: deletion cannot fill it
    assert least_skew_after({"a": 6, "b": 1, "c": 1}, 6) == 3
    assert skew_of({"a": 2, "b": 2}, min_domains=3) == 2


@st.composite
def clusters(draw):
    zones = draw(st.integers(2, 4))
    nodes_per = [draw(st.integers(1, 3)) for _ in range(zones)]
    names = [(f"z{z}", f"z{z}n{i}") for z in range(zones) for i in range(nodes_per[z])]
    replicas = draw(st.integers(1, 30))
    seed = draw(st.integers(0, 2 ** 16))
    steps = draw(st.lists(st.integers(1, 30), min_size=1, max_size=4))
    return names, replicas, seed, steps


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_after_any_scale_down_with_costs_the_zone_skew_is_the_least_possible(cluster):
    """Property: the ReplicaSet controller, ranking the controller's costs, leaves the least zone skew any
    choice could (so at most maxSkew whenever the remaining replicas allow it), after every one of
    several consecutive scale-downs, and the host skew within each zone the least possible there too."""
    names, replicas, seed, steps = cluster
    rnd = random.Random(seed)
    zone_of = dict((n, z) for z, n in names)
    pods = [pod(f"p{i}", rnd.choice(names)[1], age_s=rnd.randint(100, 10 ** 6)) for i in range(replicas)]
    for target in steps:
        old = pods
        costs = desired_costs(pods, zone_of)
        current = {uid: c for uid, c in costs.items()}
        before = _counts(pods, zone_of, names)
        diff = max(0, len(pods) - target)
        removed = {p["metadata"]["uid"] for p in pods_to_delete(pods, pods, diff, NOW, current)}
        pods = [p for p in pods if p["metadata"]["uid"] not in removed]
        after = _counts(pods, zone_of, names)
        assert skew_of(after) == least_skew_after(before, len(pods))
        for z in before:   # within a zone, the Nodes are levelled the same way
            was = _counts(_in_zone(pods + [q for q in old if q["metadata"]["uid"] in removed], zone_of, z),
                          {n: n for n in zone_of}, [(n, n) for zz, n in names if zz == z])
            now = _counts(_in_zone(pods, zone_of, z), {n: n for n in zone_of}, [(n, n) for zz, n in names if zz == z])
            assert skew_of(now) == least_skew_after(was, after[z])
        # the controller then writes the costs; the next scale-down starts from them
        pods = _apply(pods, costs)
    assert len(pods) == min([replicas, *steps])   # every step ran, each to its target


def _counts(pods, zone_of, names) -> dict[str, int]:
    counts = {z: 0 for z, _ in names}
    for p in pods:
        counts[zone_of[p["spec"]["nodeName"]]] += 1
    return counts


def _in_zone(pods, zone_of, zone):
    return [p for p in pods if zone_of[p["spec"]["nodeName"]] == zone]


def _apply(pods, costs):
    out = []
    for p in pods:
        uid = p["metadata"]["uid"]
        q = dict(p, metadata=dict(p["metadata"], annotations={DELETION_COST: str(costs[uid])},
                                  managedFields=[{"manager": FIELD_MANAGER, "fieldsV1": {"f:metadata": {
                                      "f:annotations": {f"f:{DELETION_COST}": {}}}}}]))
        out.append(q)
    return out


# --- the CLI ---------------------------------------------------------------------------------------------

def _cli(*args: str) -> tuple[int, str, str]:
    import io

    from policylib.cli import main
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), io.StringIO(), out, err)
    return code, out.getvalue(), err.getvalue()


def test_simulate_scale_prints_the_victims_with_and_without_the_costs(tmp_path):
    import yaml
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([deployment([zone_constraint()]), *NODES, *twelve()]))
    code, out, err = _cli("simulate", "-f", str(path), "--scale", "web=3")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "deployment default/web: 12 -> 3 replicas; pods per zone now a=4, b=4, c=4"
    assert lines[1].endswith("leaves a=1, b=0, c=2 (zone skew 2)") and lines[1].startswith("  without the costs: removes")
    assert lines[2].endswith("leaves a=1, b=1, c=1 (zone skew 0)") and lines[2].startswith("  with the costs: removes")
    code, out, _ = _cli("simulate", "-f", str(path), "--scale", "default/web=3", "-o", "json")
    assert code == 0
    import json
    (result,) = json.loads(out)
    assert result["withCosts"]["zones"] == {"a": 1, "b": 1, "c": 1} and len(result["withCosts"]["removed"]) == 9


def test_simulate_scale_of_a_deployment_without_pods_in_the_input_says_so(tmp_path):
    import yaml
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([deployment([zone_constraint()]), *NODES]))
    code, out, err = _cli("simulate", "-f", str(path), "--scale", "web=3")
    assert (code, err) == (0, "")
    assert out == ("deployment default/web: no bound pod of it in the input, so no scale-down to 3 to replay (give "
                   "its pods: kubectl get pods -o yaml, or --cluster)\n")


def test_simulate_scale_refuses_an_unknown_name_and_a_bad_count(tmp_path):
    import yaml
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([deployment([zone_constraint()]), *NODES]))
    code, _, err = _cli("simulate", "-f", str(path), "--scale", "api=3")
    assert code == 2 and ("--scale api=3: no Deployment, StatefulSet or LeaderWorkerSet named api in the input; "
                          "Deployments, StatefulSets and LeaderWorkerSets: default/web") in err
    code, _, err = _cli("simulate", "-f", str(path), "--scale", "web=-1")
    assert code == 2 and "--scale web=-1: expected NAME=N" in err


def statefulset(name: str = "db", start: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": 9, "serviceName": name, "selector": {"matchLabels": {"app": name}},
                            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": []}}}
    if start is not None:
        spec["ordinals"] = {"start": start}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": "default"},
            "spec": spec}


def statefulset_pod(name: str, node_name: str, app: str = "db", **kw: Any) -> dict[str, Any]:
    p = pod(name, node_name, **kw)
    p["metadata"]["labels"] = {"app": app, "apps.kubernetes.io/pod-index": name.rsplit("-", 1)[1]}
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": app,
                                         "uid": f"sts-{app}", "controller": True}]
    return p


#: Nine ordinals on zones a, b, c: the first three in three zones, the rest all in zone a (cost annotations and
#: colocation that would steer the ReplicaSet controller mean nothing to the StatefulSet controller).
NINE = ["a1", "b1", "c1", "a1", "a2", "a1", "a2", "a1", "a2"]


def test_a_statefulset_scale_in_removes_the_highest_ordinals_whatever_their_zones_and_costs():
    from policylib.scaledown.ordinals import scale_in
    pods = [statefulset_pod(f"db-{i}", n, cost="-1000" if i == 8 else None) for i, n in enumerate(NINE)]
    pods.append(statefulset_pod("db-9", "b2", phase="Succeeded"))            # finished: not a pod it removes
    pods.append(statefulset_pod("other-1", "b2", app="db"))                 # matched by the selector, not its name
    pods.append(pod("web-0", "c2"))                                          # another workload
    out = scale_in(statefulset(), pods, ZONE_OF, 4)
    assert out.removed == ["db-8", "db-7", "db-6", "db-5", "db-4"]
    assert (out.found, out.before, out.after) == (9, {"a": 7, "b": 1, "c": 1}, {"a": 2, "b": 1, "c": 1})
    assert scale_in(statefulset(), pods, ZONE_OF, 2).after == {"a": 1, "b": 1, "c": 0}   # zone c emptied
    assert scale_in(statefulset(), pods, ZONE_OF, 12).removed == []
    # spec.ordinals.start: the ordinals kept are [start, start + replicas)
    shifted = [statefulset_pod(f"db-{i + 5}", n) for i, n in enumerate(NINE)]
    out = scale_in(statefulset(start=5), shifted, ZONE_OF, 3)
    assert out.removed == [f"db-{i}" for i in range(13, 7, -1)] and out.after == {"a": 1, "b": 1, "c": 1}


def test_simulate_scale_of_a_statefulset_prints_the_ordinals_it_removes_or_that_it_has_no_pods(tmp_path):
    import json

    import yaml
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([statefulset(), *NODES,
                                        *[statefulset_pod(f"db-{i}", n) for i, n in enumerate(NINE)]]))
    code, out, err = _cli("simulate", "-f", str(path), "--scale", "db=4")
    assert code == 0, err
    assert out.splitlines() == [
        "statefulset default/db: 9 -> 4 replicas; pods per zone now a=7, b=1, c=1",
        "  removes db-8, db-7, db-6, db-5, db-4 (the highest ordinals: the StatefulSet controller reads no deletion "
        "cost); leaves a=2, b=1, c=1 (zone skew 1)"]
    code, out, _ = _cli("simulate", "-f", str(path), "--scale", "default/db=2", "-o", "json")
    assert code == 0
    assert json.loads(out) == [{"kind": "StatefulSet", "namespace": "default", "name": "db", "replicas": 2,
                                "podsInInput": 9, "zonesBefore": {"a": 7, "b": 1, "c": 1},
                                "removed": [f"db-{i}" for i in range(8, 1, -1)], "zones": {"a": 1, "b": 1, "c": 0},
                                "zoneSkew": 1}]
    path.write_text(yaml.safe_dump_all([statefulset(), *NODES]))
    code, out, err = _cli("simulate", "-f", str(path), "--scale", "db=4")
    assert code == 0, err
    assert out == ("statefulset default/db: no bound pod of it in the input, so no scale-in to 4 to replay (give its "
                   "pods: kubectl get pods -o yaml, or --cluster)\n")


def test_cluster_report_lists_violations_and_foreign_costs_of_managed_deployments_only():
    from policylib.scaledown import cluster_report
    managed = deployment([zone_constraint()])
    managed["metadata"]["annotations"] = {"policylib.io/spread-effective-replicas": "3"}
    pods = [pod("p1", "a1", cost="7", manager="karpenter"), pod("p2", "a2"), pod("p3", "c1")]
    violations, notes = cluster_report([managed, *pods], NODES)
    assert [v.skew for v in violations] == [2]
    assert notes == ["deployment default/web: 1 pod(s) carry a controller.kubernetes.io/pod-deletion-cost set by "
                     "karpenter; policylib leaves their cost alone, so a scale-down may not keep the zone spread"]
    assert cluster_report([deployment([zone_constraint()]), *pods], NODES) == ([], [])


def test_cluster_report_names_a_managed_statefulset_whose_ordinals_break_its_zone_spread():
    """Rule S28 for StatefulSets: after a scale-in removed the highest ordinals, what is left breaks the zone spread;
    the StatefulSet is named as such (the constraint has no revision key, rule A3)."""
    from policylib.scaledown import cluster_report
    managed = statefulset()
    managed["metadata"]["annotations"] = {"policylib.io/spread-effective-replicas": "3"}
    managed["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        dict(zone_constraint(), labelSelector={"matchLabels": {"app": "db"}}, matchLabelKeys=[])]
    left = [statefulset_pod(f"db-{i}", n) for i, n in enumerate(("a1", "a2", "b1"))]
    violations, notes = cluster_report([managed, *left], NODES)
    assert [(v.message(), v.as_dict()["kind"]) for v in violations] == [(
        "statefulset default/db: topology.kubernetes.io/zone skew 2 > maxSkew 1 (ScheduleAnyway); pods per domain: "
        "a=2, b=1, c=0", "statefulset")]
    assert notes == []
    unmanaged = statefulset()
    unmanaged["spec"]["template"]["spec"]["topologySpreadConstraints"] = managed["spec"]["template"]["spec"][
        "topologySpreadConstraints"]
    assert cluster_report([unmanaged, *left], NODES) == ([], [])


def test_cluster_report_reads_each_deployment_s_pods_by_namespace_and_selector():
    from policylib.scaledown import cluster_report

    def managed(ns: str, selector: dict[str, Any] | None = None) -> dict[str, Any]:
        d = deployment([zone_constraint()])
        d["metadata"].update(namespace=ns, annotations={"policylib.io/spread-effective-replicas": "3"})
        d["spec"]["selector"] = selector or d["spec"]["selector"]
        return d
    balanced = [pod("p1", "a1"), pod("p2", "b1"), pod("p3", "c1")]
    skewed = [pod(f"q{i}", n, ns=ns) for ns in ("other", "third") for i, n in enumerate(("a1", "a2", "c1"))]
    expressions = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}
    violations, _ = cluster_report([managed("default"), managed("other"), managed("third", expressions),
                                    *balanced, *skewed], NODES)
    assert [(v.namespace, v.skew, v.counts) for v in violations] == [("other", 2, {"a": 2, "b": 0, "c": 1}),
                                                                     ("third", 2, {"a": 2, "b": 0, "c": 1})]


def test_violations_count_only_the_nodes_the_inclusion_policies_admit():
    host = dict(zone_constraint(), topologyKey=HOST, nodeTaintsPolicy="Honor")
    tainted = node("cp", "a")
    tainted["spec"] = {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}
    tainted["metadata"]["labels"]["pool"] = "cpu"
    other = node("gpu", "b")
    other["metadata"]["labels"]["pool"] = "gpu"
    for n in NODES:
        n["metadata"]["labels"]["pool"] = "cpu"
    d = deployment([host])
    d["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "cpu"}
    pods = [pod(f"p{i}{j}", n["metadata"]["name"]) for i, n in enumerate(NODES) for j in range(2)]
    try:
        assert spread_violations(d, pods, NODES + [tainted, other]) == []
        d["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]   # the control plane counts now
        (v,) = spread_violations(d, pods, NODES + [tainted, other])
        assert v.counts["cp"] == 0 and "gpu" not in v.counts
    finally:
        for n in NODES:
            del n["metadata"]["labels"]["pool"]


def test_violations_count_the_domains_the_scheduler_s_plugin_counts():
    """Rule S28 through the registry's PodTopologySpread: required node affinity is an inclusion policy too
    (nodeAffinityPolicy Honor), and a node without the key of another of the template's constraints is no
    domain of any of them."""
    pods = [pod("p1", "a1"), pod("p2", "a2"), pod("p3", "b1")]
    d = deployment([zone_constraint()])
    (v,) = spread_violations(d, pods, NODES)
    assert (v.skew, v.counts) == (2, {"a": 2, "b": 1, "c": 0})
    not_c = {"matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["c"]}]}
    d["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [not_c]}}}
    assert spread_violations(d, pods, NODES) == []                      # zone c admits no pod: a=2, b=1
    d["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["nodeAffinityPolicy"] = "Ignore"
    assert [v.counts for v in spread_violations(d, pods, NODES)] == [{"a": 2, "b": 1, "c": 0}]
    del d["spec"]["template"]["spec"]["affinity"]
    rack = dict(zone_constraint(max_skew=5), topologyKey="rack")
    nodes = [dict(n, metadata=dict(n["metadata"], labels=dict(n["metadata"]["labels"], rack="r"))) for n in NODES
             if n["metadata"]["name"] != "c1"]
    d["spec"]["template"]["spec"]["topologySpreadConstraints"] = [zone_constraint(), rack]
    (v,) = spread_violations(d, pods, nodes + [next(n for n in NODES if n["metadata"]["name"] == "c1")])
    assert v.counts == {"a": 2, "b": 1, "c": 0} and v.topology_key == ZONE      # c2 carries the rack: zone c counts
    nodes = [n for n in nodes if n["metadata"]["name"] != "c2"]
    assert spread_violations(d, pods, nodes + [n for n in NODES if n["metadata"]["name"] in ("c1", "c2")]) == []


def test_the_cli_s_live_pods_keep_whose_cost_it_is():
    """``simulate --cluster --scale`` reads Pods through ``strip_pod``: a cost the controller wrote stays the
    controller's (rule S25), another manager's stays foreign."""
    from policylib.cli.cluster import strip_pod
    from policylib.projection import strip
    from policylib.scaledown import FIELD_MANAGER, foreign_cost
    ours = pod("web-0", "a1", cost="-1", manager=FIELD_MANAGER)
    theirs = pod("web-1", "a1", cost="100", manager="karpenter")
    assert foreign_cost(strip(ours)) is True   # what the plain projection lost
    assert (foreign_cost(strip_pod(ours)), foreign_cost(strip_pod(theirs))) == (False, True)
