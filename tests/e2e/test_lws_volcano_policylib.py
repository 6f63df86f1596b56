"""LeaderWorkerSet groups packed by policylib and gang-scheduled by Volcano, together, on both minors: the real LWS
manager with its Volcano provider (``testcluster --volcano --lws --lws-gang volcano``: one PodGroup per group,
``minMember`` the group's size), policylib's webhook writing each group's packing into one rack (rules E5, E6), and
Volcano's scheduler, which honours the packing's pod affinity (its ``predicates`` plugin) inside the gang: a group
binds whole within one rack, or not at all, even where the cluster has room for it across racks."""
from __future__ import annotations

import pytest

from .harness import NODE_GROUP_LABEL, Cluster, Webhook, bound, wait_for
from .leaderworkersets import (
    GROUP_INDEX,
    NAME_LABEL,
    PACKED_CONFIG,
    VC_PODGROUP,
    create_lws,
    lws,
    lws_pods,
    racks_per_group,
    wait_running,
    write_rack_nodes,
)


@pytest.fixture(scope="module")
def lws_volcano_packed(harness_built, tmp_path_factory, minor):
    """Volcano, LWS's manager with its Volcano provider, and policylib's webhook with the rack packing, on a cluster
    of each minor: Nodes in 4 racks of 2 Nodes of 2 CPUs."""
    tmp = tmp_path_factory.mktemp(f"lws-volcano-policylib-{minor}")
    c = Cluster(tmp / "c", nodes=write_rack_nodes(tmp), extra_args=("--volcano",), minor=minor, lws=True,
                lws_gang="volcano")
    hook = None
    try:
        hook = Webhook(c, "lwsvc", PACKED_CONFIG, tmp).start()
        hook.register()
        yield c
    finally:
        if hook:
            hook.stop()
        assert c.stop() == 0


def podgroups(c: Cluster, ns: str, name: str) -> dict[str, dict]:
    """The LWS's Volcano PodGroups by the group-index label LWS puts on them."""
    return {g["metadata"]["labels"].get(GROUP_INDEX, ""): g
            for g in c.list(VC_PODGROUP, ns, selector=f"{NAME_LABEL}={name}")}


@pytest.mark.minors()
@pytest.mark.proves(
    scheduler="Volcano (gang, predicates); Nodes in 4 racks of 2 Nodes with 2 CPUs (two racks in zone a, one in b, one in c)",
    settings="defaults, `topology.gangs.within: rack` (required)",
    operator="LeaderWorkerSet v0.9.0 manager and webhooks, Volcano provider (one PodGroup per group)",
    jobs="LeaderWorkerSet of 3 groups of 3 pods (1 CPU each); then one of 1 group of 5",
    outcome=("each group of 3 binds whole within one rack, no rack holds two; the group of 5, which fits in the "
             "cluster's 7 free CPUs but in no one rack, binds none of its pods and its PodGroup is Unschedulable"))
@pytest.mark.timeout(600)
def test_volcano_binds_each_packed_group_whole_within_one_rack_or_not_at_all(lws_volcano_packed, report):
    c = lws_volcano_packed
    ns = c.namespace("lws-volcano-packed", config="lwsvc")
    stored = create_lws(c, lws("vllm", ns, size=3, replicas=3, cpu="1", scheduler="volcano",
                               node_selector={NODE_GROUP_LABEL: "lws"}))
    assert stored["metadata"]["annotations"]["policylib.io/leader-template"] == "generated"
    pods = wait_running(c, ns, "vllm", size=3, replicas=3, timeout=300)
    pgs = podgroups(c, ns, "vllm")
    assert {g: pg["spec"]["minMember"] for g, pg in pgs.items()} == {"0": 3, "1": 3, "2": 3}
    by_group = racks_per_group(c, pods)
    assert all(len(racks) == 1 for racks in by_group.values()), by_group
    assert len({racks[0] for racks in by_group.values()}) == 3, by_group   # no rack holds two groups

    # 7 CPUs are free (the empty rack's 4, one in each other rack): enough for 5 pods of 1 CPU across racks, not in one
    create_lws(c, lws("wide", ns, size=5, replicas=1, cpu="1", scheduler="volcano",
                      node_selector={NODE_GROUP_LABEL: "lws"}))
    ever: set[str] = set()

    def unschedulable():
        wide = lws_pods(c, ns, "wide")
        ever.update(bound(wide))
        pg = podgroups(c, ns, "wide").get("0")
        status = (pg or {}).get("status") or {}
        marked = [x for x in status.get("conditions") or [] if x.get("type") == "Unschedulable"]
        return ever or (marked if len(wide) == 5 and "5 Pending" in str(marked) else None)
    conditions = wait_for("Volcano marks the group of 5's PodGroup Unschedulable for its 5 pods", unschedulable,
                          timeout=180)
    assert not ever, f"pods of a group that fits in no one rack were bound: {sorted(ever)}"
    assert bound(lws_pods(c, ns, "wide")) == []
    assert bound(lws_pods(c, ns, "vllm")) == sorted(p["metadata"]["name"] for p in pods)   # the others stay bound
    report(f"Kubernetes {c.minor}, Volcano gangs + policylib rack packing: LWS {ns}/vllm 3 groups of 3, racks per "
           f"group {by_group}; {ns}/wide's group of 5 (7 CPUs free, at most 4 in one rack): none bound, "
           f"{conditions[0].get('message', '')!r}")
