"""LeaderWorkerSets through policylib's webhook and the real LWS controller (``testcluster --lws``, LWS v0.9.0), on
both minors: policylib writes the leaders' zone spread and each group's packing into one rack on the LWS (rules
E2-E6), LWS's controller and the StatefulSet controller make the pods from it, and kube-scheduler places every group
within one rack, the groups' leaders in three zones."""
from __future__ import annotations

import pytest

from .harness import NODE_GROUP_LABEL, Cluster, Webhook, wait_for
from .leaderworkersets import (
    GROUP_KEY,
    HOST,
    LWS_RESOURCE,
    PACKED_CONFIG,
    RACK,
    RACKS,
    WORKER_INDEX,
    ZONE,
    create_lws,
    lws,
    racks_per_group,
    wait_running,
    write_rack_nodes,
)


@pytest.fixture(scope="module")
def lws_with_policylib(harness_built, tmp_path_factory, minor):
    """A cluster of each minor running LWS's manager and webhooks, and policylib's webhook with the rack packing."""
    tmp = tmp_path_factory.mktemp(f"lws-policylib-{minor}")
    c = Cluster(tmp / "c", nodes=write_rack_nodes(tmp), minor=minor, lws=True)
    hook = None
    try:
        hook = Webhook(c, "lws", PACKED_CONFIG, tmp).start()
        hook.register()
        yield c
    finally:
        if hook:
            hook.stop()
        assert c.stop() == 0


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="kube-scheduler; Nodes in 4 racks of 2 Nodes with 2 CPUs (two racks in zone a, one in b, one in c)",
    settings="defaults, `topology.gangs.within: rack` (required)",
    operator="LeaderWorkerSet v0.9.0 manager and webhooks",
    jobs="LeaderWorkerSet of 3 groups of 3 pods (1 CPU each), no leaderTemplate",
    outcome=("policylib generates the leaderTemplate with the leaders' zone and host spread and writes the group "
             "packing (pod affinity on the rack label, keyed on `group-key`) in both templates; every group's pods "
             "bind within one rack, the 3 leaders in 3 zones"))
@pytest.mark.timeout(600)
def test_each_lws_group_lands_in_one_rack_and_the_leaders_in_three_zones(lws_with_policylib, report):
    c = lws_with_policylib
    ns = c.namespace("lws-packed", config="lws")
    stored = create_lws(c, lws("vllm", ns, size=3, replicas=3, cpu="1", node_selector={NODE_GROUP_LABEL: "lws"}))
    template = stored["spec"]["leaderWorkerTemplate"]
    assert stored["metadata"]["annotations"]["policylib.io/leader-template"] == "generated"
    leaders = {s["topologyKey"]: s for s in template["leaderTemplate"]["spec"]["topologySpreadConstraints"]}
    assert sorted(leaders) == [HOST, ZONE]
    assert leaders[ZONE]["labelSelector"] == {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "vllm",
                                                              WORKER_INDEX: "0"}}
    packing = {"labelSelector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": "vllm"}},
               "matchLabelKeys": [GROUP_KEY], "topologyKey": RACK}
    for which in ("leaderTemplate", "workerTemplate"):
        terms = template[which]["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms == [packing], (which, terms)
    assert stored["spec"]["rolloutStrategy"]["type"] == "RollingUpdate"   # LWS's own defaulter ran too

    pods = wait_running(c, ns, "vllm", size=3, replicas=3)
    node_rack = {n["metadata"]["name"]: n["metadata"]["labels"][RACK] for n in c.list("nodes")}
    by_group = racks_per_group(c, pods)
    assert all(len(racks) == 1 for racks in by_group.values()), by_group
    assert len({racks[0] for racks in by_group.values()}) == 3, by_group   # no rack holds two groups
    leader_zones = sorted(RACKS[node_rack[p["spec"]["nodeName"]]] for p in pods
                          if p["metadata"]["labels"][WORKER_INDEX] == "0")
    assert leader_zones == ["a", "b", "c"], by_group
    # the stored pods carry the packing with the group's own key merged in by the API server (matchLabelKeys)
    for p in pods:
        [term] = p["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        expressions = term["labelSelector"].get("matchExpressions") or []
        assert {"key": GROUP_KEY, "operator": "In", "values": [p["metadata"]["labels"][GROUP_KEY]]} in expressions, term
    wait_for("the LWS reports 3 ready groups",
             lambda: (c.get(LWS_RESOURCE, "vllm", ns).get("status") or {}).get("readyReplicas") == 3, timeout=120)
    report(f"Kubernetes {c.minor}: LWS {ns}/vllm 3 groups of 3: racks per group {by_group}, leaders in zones "
           f"{leader_zones}")
