"""Volcano's scheduler with no HyperNode (rules V25, V26): ``testcluster --volcano`` without label discovery, on
Nodes without topology labels. A partition bounded hard to tier 1 is placed anyway (the scheduler's virtual
``<cluster-top-hypernode>`` holds every Node and has tier 1 when there is no HyperNode), which is what
``policylib simulate`` says for it, and why policylib writes no hard bound where nothing gives HyperNodes."""
from __future__ import annotations

import json

import pytest
import yaml

from .harness import Cluster, require_built, wait_for
from .test_volcano_e2e import SPEC_JOB, job_pods, policylib, running


def plain_nodes() -> dict:
    """Four Nodes of one ``huawei.com/ascend-1980`` job pod each (16 units), no topology label."""
    allocatable = {"cpu": "32", "memory": "256Gi", "pods": "110", "huawei.com/ascend-1980": "16"}
    return {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node{i}", "labels": {}},
         "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable)}} for i in range(4)]}


@pytest.fixture(scope="module")
def bare_volcano(harness_built, tmp_path_factory) -> Cluster:
    require_built("testcluster-volcano")
    tmp = tmp_path_factory.mktemp("volcano-bare")
    nodes = tmp / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(plain_nodes()))
    c = Cluster(tmp / "c", nodes=nodes, extra_args=("--volcano",))
    c.nodes_file = nodes
    yield c
    assert c.stop() == 0, c.stderr_text()


def test_a_hard_tier_one_partition_binds_anywhere_without_hypernodes(bare_volcano):
    """The specification's Job (partitions of 2, hard, highestTierAllowed 1) on four Nodes in no HyperNode: all
    four pods bind, on four Nodes no HyperNode groups; policylib simulate says the same, and why."""
    assert bare_volcano.list("hypernodes.topology.volcano.sh") == []
    ns = "no-hypernodes"
    bare_volcano.namespace(ns)
    job = json.loads(json.dumps(SPEC_JOB))
    job["metadata"]["namespace"] = ns
    bare_volcano.kubectl("create", "-f", "-", input=json.dumps(job))
    pods = wait_for(f"{ns}: 4 pods of the specification's Job Running",
                    lambda: running(bare_volcano, ns, "network-topology-job", 4), timeout=180)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["node0", "node1", "node2", "node3"]
    assert len(job_pods(bare_volcano, ns, "network-topology-job")) == 4
    run = policylib("simulate", "-f", "-", "--nodes", str(bare_volcano.nodes_file), "-o", "json",
                    input=yaml.safe_dump(SPEC_JOB))
    assert run.returncode == 0, run.stderr
    [placement] = json.loads(run.stdout)
    assert (placement["pending"], sum(placement["placed"].values())) == (0, 4)
    assert placement["reasons"] == [
        "task t0: placed without a HyperNode bound: no HyperNode exists: Volcano's <cluster-top-hypernode> (tier 1, "
        "every Node) meets highestTierAllowed 1, so the partitions may land on any Node"]
