"""Rule E9: ``simulate`` places a LeaderWorkerSet group by group, the leader then its workers, each pod labelled as
LWS labels it; figures checked against what the real scheduler did in tests/e2e/test_lws_scaledown.py (zones of 3, 2
and 1 Nodes: 12 groups of 2 lead 5/4/3; with the zone packing every group is in one zone, without it none is)."""
from __future__ import annotations

import io
import json
from typing import Any

import pytest

from policylib.cli import main
from policylib.simulate import simulate
from tests.helpers import hpa

ZONE, HOST, RACK = "topology.kubernetes.io/zone", "kubernetes.io/hostname", "example.com/rack"
LEVELS = [{"name": "zone", "nodeLabel": ZONE}, {"name": "rack", "nodeLabel": RACK}, {"name": "host", "nodeLabel": HOST}]
PACKED_IN_ZONE = {"topology": {"levels": LEVELS, "gangs": {"within": "zone", "mode": "required"}}}


def nodes(zones: dict[str, int], cpu: str = "64", racks: bool = False) -> list[dict[str, Any]]:
    out = []
    for zone, count in zones.items():
        for i in range(count):
            labels = {ZONE: f"zone-{zone}", HOST: f"{zone}{i}", **({RACK: f"{zone}{i // 2}"} if racks else {})}
            out.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{zone}{i}", "labels": labels},
                        "status": {"allocatable": {"cpu": cpu, "memory": "256Gi", "pods": "200"}}})
    return out


def lws(groups: int | None, size: int, cpu: str = "100m", scheduler: str | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "s", "image": "serve:1", "resources": {"requests": {"cpu": cpu}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    out: dict[str, Any] = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                           "metadata": {"name": "vllm", "namespace": "serving"},
                           "spec": {"leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": spec}}}}
    if groups is not None:
        out["spec"]["replicas"] = groups
    if annotations:
        out["metadata"]["annotations"] = annotations
    return out


UNEVEN = {"a": 3, "b": 2, "c": 1}


def test_twelve_groups_lead_5_4_3_and_each_stays_in_its_zone_with_the_zone_packing():
    [p] = simulate([lws(12, 2)], nodes(UNEVEN), PACKED_IN_ZONE)
    assert (p.kind, p.replicas, p.pending, p.pending_max) == ("LeaderWorkerSet", 24, 0, 0)
    assert p.groups == {"count": 12, "size": 2, "leaderZones": {"zone-a": 5, "zone-b": 4, "zone-c": 3}, "inOneZone": 12}
    assert p.zones == {"zone-a": 10, "zone-b": 8, "zone-c": 6}
    assert p.reasons == ["12 group(s) of 2: leaders per zone zone-a=5, zone-b=4, zone-c=3; 12 of 12 group(s) with "
                         "every pod in one zone"]


def test_without_packing_the_default_spread_takes_every_worker_out_of_its_leaders_zone():
    """kube-scheduler's system default spread over the worker StatefulSet's pods (which its selector shares with the
    group's leader) scores each worker away from its leader: the leaders as before, no group in one zone."""
    [p] = simulate([lws(12, 2)], nodes(UNEVEN))
    assert p.groups == {"count": 12, "size": 2, "leaderZones": {"zone-a": 5, "zone-b": 4, "zone-c": 3}, "inOneZone": 0}


def test_a_group_larger_than_any_rack_leaves_its_last_workers_pending_behind_the_packing():
    """Racks of two Nodes of 2 CPUs; a group of 5 pods of 1 CPU packed within a rack: the leader and 3 workers
    fill its rack, the last worker has nowhere to go (kube-scheduler binds pod by pod: no gang)."""
    config = {"topology": {"levels": LEVELS, "gangs": {"within": "rack", "mode": "required"}}}
    [p] = simulate([lws(1, 5, cpu="1")], nodes({"a": 4}, cpu="2", racks=True), config)
    assert (p.replicas, sum(p.placed.values()), p.pending) == (5, 4, 1)
    assert len({n[:1] + str(int(n[1:]) // 2) for n in p.placed}) == 1   # one rack
    assert p.reasons[0] == "1 group(s) of 5: leaders per zone zone-a=1; 0 of 1 group(s) with every pod in one zone"
    assert p.reasons[1].startswith("1 worker(s) of group 0: 0/4 nodes are available: "), p.reasons
    assert "didn't match pod affinity rules" in p.reasons[1], p.reasons
    assert p.groups is not None and p.groups["inOneZone"] == 0   # a group with a Pending pod is not whole


def test_the_hpa_minimum_is_the_effective_group_count():
    autoscaler = hpa("vllm", 4, namespace="serving")
    autoscaler["spec"]["scaleTargetRef"] = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                            "name": "vllm"}
    [p] = simulate([lws(2, 3), autoscaler], nodes(UNEVEN), PACKED_IN_ZONE)
    assert p.groups is not None and (p.groups["count"], p.replicas) == (4, 12)


def test_another_scheduler_is_not_simulated():
    [p] = simulate([lws(3, 2, scheduler="volcano")], nodes(UNEVEN))
    assert (p.placed, p.pending, p.pending_max) == ({}, 0, 6)
    assert p.reasons == ["not simulated: schedulerName 'volcano' is not kube-scheduler's default profile"]


@pytest.mark.parametrize("output", ["json", "table"])
def test_the_cli_places_it_and_no_longer_calls_it_unsimulated(tmp_path, output):
    (tmp_path / "lws.json").write_text(json.dumps(lws(12, 2)))
    (tmp_path / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes(UNEVEN)}))
    (tmp_path / "config.json").write_text(json.dumps(PACKED_IN_ZONE))
    out, err = io.StringIO(), io.StringIO()
    code = main(["simulate", "-f", str(tmp_path / "lws.json"), "--nodes", str(tmp_path / "nodes.json"),
                 "--config", str(tmp_path / "config.json"), "-o", output], stdin=io.StringIO(), stdout=out, stderr=err)
    assert (code, err.getvalue()) == (0, "")
    if output == "json":
        [placed] = json.loads(out.getvalue())
        assert placed["groups"] == {"count": 12, "size": 2, "leaderZones": {"zone-a": 5, "zone-b": 4, "zone-c": 3},
                                    "inOneZone": 12}
    else:
        assert "serving/vllm: 12 group(s) of 2: leaders per zone zone-a=5, zone-b=4, zone-c=3; 12 of 12 group(s) " \
               "with every pod in one zone" in out.getvalue()


def test_lws_exclusive_topology_puts_each_group_alone_in_one_domain_and_the_rest_pending():
    """LWS's pod webhook gives every pod of a LeaderWorkerSet annotated ``exclusive-topology: <key>`` a required
    affinity to its own group and anti-affinity to every other group on that key: 5 groups on 3 zones, 3 placed
    (one per zone, each whole), 2 Pending with the scheduler's reason."""
    exclusive = {"leaderworkerset.sigs.k8s.io/exclusive-topology": ZONE}
    [p] = simulate([lws(5, 2, annotations=exclusive)], nodes(UNEVEN))
    assert (p.replicas, p.pending, p.pending_max) == (10, 4, 4)
    assert p.groups == {"count": 5, "size": 2, "leaderZones": {"zone-a": 1, "zone-b": 1, "zone-c": 1}, "inOneZone": 3}
    assert p.zones == {"zone-a": 2, "zone-b": 2, "zone-c": 2}
    assert [r.split(":")[0] for r in p.reasons[1:]] == ["vllm-3", "1 worker(s) of group 3", "vllm-4",
                                                         "1 worker(s) of group 4"]
    assert "didn't match pod anti-affinity rules" in p.reasons[1], p.reasons


def test_scheduling_gates_keep_every_pod_pending():
    gated = lws(2, 2)
    gated["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["schedulingGates"] = [{"name": "example.com/wait"}]
    [p] = simulate([gated], nodes(UNEVEN))
    assert (p.placed, p.pending, p.pending_max) == ({}, 4, 4)
    assert p.reasons == ["SchedulingGated: the pods wait for their scheduling gates (example.com/wait) to be removed"]


def lws_pod(group: int, worker: int, node: str, name: str = "vllm") -> dict[str, Any]:
    pod = f"{name}-{group}" if worker == 0 else f"{name}-{group}-{worker}"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "serving", "labels": {
                "leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": str(group),
                "leaderworkerset.sigs.k8s.io/worker-index": str(worker)}},
            "spec": {"nodeName": node}, "status": {"phase": "Running"}}


#: 6 groups of 2 as the real scheduler left them once (leaders a, b, c, a, b, a; each worker beside its leader's zone)
SIX = [p for g, (leader, worker) in enumerate([("a0", "a1"), ("b0", "b1"), ("c0", "c0"), ("a1", "a2"), ("b1", "b0"),
                                                ("a2", "a0")])
       for p in (lws_pod(g, 0, leader), lws_pod(g, 1, worker))]


def test_scale_removes_the_highest_groups_whole_and_says_what_they_leave(tmp_path):
    (tmp_path / "in.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                                  "items": [lws(6, 2), *SIX, *nodes(UNEVEN)]}))
    out, err = io.StringIO(), io.StringIO()
    code = main(["simulate", "-f", str(tmp_path / "in.json"), "--scale", "serving/vllm=3", "-o", "json"],
                stdin=io.StringIO(), stdout=out, stderr=err)
    assert (code, err.getvalue()) == (0, "")
    assert json.loads(out.getvalue()) == [{
        "kind": "LeaderWorkerSet", "namespace": "serving", "name": "vllm", "replicas": 3, "podsInInput": 12,
        "zonesBefore": {"zone-a": 3, "zone-b": 2, "zone-c": 1}, "removedGroups": [5, 4, 3],
        "removed": ["vllm-5", "vllm-5-1", "vllm-4", "vllm-4-1", "vllm-3", "vllm-3-1"],
        "zones": {"zone-a": 1, "zone-b": 1, "zone-c": 1}, "podZones": {"zone-a": 2, "zone-b": 2, "zone-c": 2},
        "zoneSkew": 0}]
    out = io.StringIO()
    assert main(["simulate", "-f", str(tmp_path / "in.json"), "--scale", "vllm=3"], stdin=io.StringIO(), stdout=out,
                stderr=io.StringIO()) == 0
    assert out.getvalue() == (
        "leaderworkerset serving/vllm: 6 -> 3 groups; leaders per zone now zone-a=3, zone-b=2, zone-c=1\n"
        "  removes group(s) 5, 4, 3 (6 pods: the highest group indices, each leader with its workers; the leader "
        "StatefulSet reads no deletion cost); leaves leaders zone-a=1, zone-b=1, zone-c=1 (zone skew 0), pods "
        "zone-a=2, zone-b=2, zone-c=2\n")


def test_scale_without_its_pods_says_there_is_nothing_to_replay(tmp_path):
    (tmp_path / "in.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [lws(6, 2),
                                                                                                *nodes(UNEVEN)]}))
    out = io.StringIO()
    assert main(["simulate", "-f", str(tmp_path / "in.json"), "--scale", "vllm=3"], stdin=io.StringIO(), stdout=out,
                stderr=io.StringIO()) == 0
    assert out.getvalue() == ("leaderworkerset serving/vllm: no bound pod of it in the input, so no scale-in to 3 "
                              "groups to replay (give its pods: kubectl get pods -o yaml, or --cluster)\n")
