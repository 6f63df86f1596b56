"""One verdict on a Volcano Job's HyperNodes (rules V25, V26): ``preview``, ``simulate`` and ``check`` read the
same HyperNodes (the input's HyperNode objects, label discovery's) through ``partition_bound``, and a hard
network topology is written only where something gives the scheduler HyperNodes to meet it."""
from __future__ import annotations

import copy
import io
import json

import yaml

from policylib import load_config, mutate
from policylib.cli import main
from policylib.facts import ClusterFacts
from policylib.hypernodes import CLUSTER_TOP_HYPERNODE, discover_hypernodes, partition_bound
from tests.fakeapi import FakeAPI, paged_list
from tests.test_installed import NAMESPACES, install
from tests.test_volcano import DISCOVERY, seed_nodes

WARNING = ("hard volcano.networkTopology not written (no HyperNodes): enable a label source in "
           "volcano.networkTopologyDiscovery")
UNWRITTEN = ("volcano.networkTopology {mode: hard, highestTierAllowed: 1} not written: nothing gives the scheduler "
             "HyperNodes to meet it (no enabled source in volcano.networkTopologyDiscovery, no HyperNode object), and "
             "without any Volcano places every partition anywhere")
NODES = seed_nodes({"cpu": "1", "memory": "4Gi", "pods": "110"})   # 4 tier-1 HyperNodes of 2 nodes, 1 pod each


def vcjob(replicas=4, size="2", **task_extra):
    meta = {"name": "train", "namespace": "default"}
    if size is not None:
        meta["annotations"] = {"policylib.io/partition-size": size}
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta, "spec": {
        "schedulerName": "volcano", "tasks": [{"name": "worker", "replicas": replicas, **task_extra, "template": {
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}]}}


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), io.StringIO(), out, err)
    return code, out.getvalue(), err.getvalue()


def three_verdicts(tmp_path, objects, config=None):
    """(preview's Job, its stderr), simulate's placement (JSON) and exit status, check's findings and exit status,
    on the same objects, Nodes and config."""
    files = tmp_path / "in.yaml"
    files.write_text(yaml.safe_dump_all(objects))
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump_all(NODES))
    conf = ["--config", str(tmp_path / "c.yaml")] if config is not None else []
    if config is not None:
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    code, out, err = cli("preview", "-f", str(files), "-f", str(nodes), "-v", *conf)
    assert code == 0, err
    preview = (next(d for d in yaml.safe_load_all(out) if d and d.get("kind") == "Job"), err)
    s_code, s_out, s_err = cli("simulate", "-f", str(files), "--nodes", str(nodes), "-o", "json", *conf)
    assert s_code in (0, 3), s_err
    c_code, c_out, c_err = cli("check", "-f", str(files), "--nodes", str(nodes), "-o", "json", *conf)
    assert c_code in (0, 3), c_err
    return preview, (json.loads(s_out)[0], s_code), ([f for f in json.loads(c_out) if f["severity"] != "info"], c_code)


def errors(findings):
    return [f["message"] for f in findings if f["severity"] == "error"]


# --- the default config: no HyperNodes, no hard bound, one verdict ------------------------------------------

def test_default_config_writes_no_hard_topology_and_the_three_commands_agree(tmp_path):
    (job, err), (placement, s_code), (findings, c_code) = three_verdicts(tmp_path, [vcjob()])
    assert job["spec"]["tasks"][0]["partitionPolicy"] == {"totalPartitions": 2, "partitionSize": 2,
                                                          "minPartitions": 2}
    assert f"policylib: warning: {tmp_path / 'in.yaml'}: Job default/train: {WARNING}\n" in err
    assert f"policylib: {tmp_path / 'in.yaml'}: Job default/train: {UNWRITTEN}\n" in err   # its reason (-v)
    assert len(WARNING) <= 120   # what an admission warning keeps (rule W3) names the setting
    assert ("Job default/train: task worker: its partitions are not bounded by a HyperNode: no hard "
            "networkTopology\n") in err
    assert (placement["pending"], s_code) == (0, 0)
    assert placement["reasons"] == ["task worker: placed without a HyperNode bound: no hard networkTopology"]
    assert (errors(findings), c_code) == ([], 0)


def test_the_settings_warning_in_check_names_the_setting(tmp_path):
    (_, _), (_, _), (findings, _) = three_verdicts(tmp_path, [vcjob(size=None)], {"volcano": {"partitionSize": 2}})
    assert {"severity": "warning", "key": "volcano.networkTopologyDiscovery",
            "message": f"{WARNING}: {UNWRITTEN}"} in findings


def test_volcano_v1_14_0_gets_no_partition_without_hyper_nodes():
    """Volcano v1.14.0 never schedules a partitioned task without a network topology (volcano issue 4871)."""
    r = mutate(vcjob(), load_config({"volcano": {"version": "v1.14.0"}}))
    assert r.patch == []
    assert r.warnings == ["no partitionPolicy on Volcano v1.14.0 without HyperNodes: enable a label source in "
                          "volcano.networkTopologyDiscovery"]
    assert ("Volcano v1.14.0 never schedules a partitioned task without a network topology (volcano issue 4871, fixed "
            "in v1.14.1), and " + UNWRITTEN) in r.reasons


def test_no_warning_where_no_task_is_partitioned():
    r = mutate(vcjob(replicas=2), load_config(None))
    assert r.warnings == [] and r.patch == []


# --- HyperNodes given: by a label source, or as objects -----------------------------------------------------

def test_a_label_source_writes_the_hard_bound_and_the_three_commands_agree_it_fits(tmp_path):
    (job, err), (placement, s_code), (findings, c_code) = three_verdicts(
        tmp_path, [vcjob()], {"volcano": {"networkTopologyDiscovery": DISCOVERY}})
    assert job["spec"]["tasks"][0]["partitionPolicy"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    assert "not written" not in err
    assert ("task worker: 2 partitions of 2 pods each fit in one tier-1 HyperNode (2 pods by allocatable); 4 tier-1 "
            "HyperNodes hold 8 pods\n") in err
    assert (placement["pending"], s_code, errors(findings), c_code) == (0, 0, [], 0)


def test_a_label_source_and_a_partition_too_big_the_three_commands_agree_it_stays_pending(tmp_path):
    (job, err), (placement, s_code), (findings, c_code) = three_verdicts(
        tmp_path, [vcjob(replicas=8, size="4")], {"volcano": {"networkTopologyDiscovery": DISCOVERY}})
    assert job["spec"]["tasks"][0]["partitionPolicy"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}
    assert ("policylib: warning: " in err and "task worker: 2 partitions of 4 pods each need one tier-1 HyperNode "
            "holding 4 pods; the largest holds 2 pods (by allocatable)\n" in err)
    assert (placement["pending"], s_code) == (8, 3)
    assert placement["reasons"][:2] == ["task worker: partition 1 of 2 (4 pods) fits in no tier-1 HyperNode",
                                        "task worker: partition 2 of 2 (4 pods) fits in no tier-1 HyperNode"]
    assert c_code == 3 and errors(findings) == [
        "Job default/train: 8 of its 8 replicas would stay Pending: task worker: 0 of minPartitions 2 partitions "
        "placeable: the gang binds nothing, all 8 pods stay Pending"]


def test_hypernode_objects_in_the_input_are_read_as_volcano_reads_them(tmp_path):
    """The default config (no discovery) with HyperNode objects among -f: the hard bound is written and all three
    commands judge the partitions against those HyperNodes."""
    hns = discover_hypernodes(NODES, load_config({"volcano": {"networkTopologyDiscovery": DISCOVERY}})
                              .volcano.networkTopologyDiscovery)
    fits = three_verdicts(tmp_path, [vcjob(), *hns])
    assert fits[0][0]["spec"]["tasks"][0]["partitionPolicy"]["networkTopology"] == {"mode": "hard",
                                                                                    "highestTierAllowed": 1}
    assert "not written" not in fits[0][1]
    assert "each fit in one tier-1 HyperNode (2 pods by allocatable); 4 tier-1 HyperNodes hold 8 pods" in fits[0][1]
    assert (fits[1][0]["pending"], fits[1][1], errors(fits[2][0]), fits[2][1]) == (0, 0, [], 0)
    too_big = three_verdicts(tmp_path, [vcjob(replicas=8, size="4"), *hns])
    assert "the largest holds 2 pods (by allocatable)" in too_big[0][1]
    assert (too_big[1][0]["pending"], too_big[1][1], too_big[2][1]) == (8, 3, 3)


def test_hypernodes_selecting_nodes_by_label_and_by_regex_bound_the_partitions(tmp_path):
    """Hand-made tier-1 HyperNodes whose members are a labelMatch and a regexMatch (Volcano's scheduler cache
    selects Node members by either): each partition lands inside one of them, nowhere else."""
    def hypernode(name, selector):
        return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
                "spec": {"tier": 1, "members": [{"type": "Node", "selector": selector}]}}
    racks = [hypernode("rack-a", {"labelMatch": {"matchLabels": {"test-tier-1": "HyperNode0"}}}),
             hypernode("rack-b", {"regexMatch": {"pattern": r"^192\.168\.5\.(83|95)$"}})]
    (job, err), (placement, s_code), (findings, c_code) = three_verdicts(tmp_path, [vcjob(), *racks])
    assert "each fit in one tier-1 HyperNode (2 pods by allocatable); 2 tier-1 HyperNodes hold 4 pods" in err
    assert (placement["pending"], s_code, c_code) == (0, 0, 0)
    assert set(placement["placed"]) == {"192.168.5.17", "192.168.5.224", "192.168.5.83", "192.168.5.95"}


# --- a user's own network topology ------------------------------------------------------------------------

def test_a_users_own_network_topology_is_kept_without_hypernodes(tmp_path):
    own = {"totalPartitions": 2, "partitionSize": 2, "minPartitions": 2,
           "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}
    job = vcjob(size=None, partitionPolicy=copy.deepcopy(own))
    job["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 2}
    r = mutate(job, load_config({"volcano": {"partitionSize": 2}}))
    assert r.object["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}
    assert r.object["spec"]["tasks"][0]["partitionPolicy"] == own
    assert not any(p["path"].endswith("networkTopology") or p["path"].endswith("partitionPolicy") for p in r.patch)
    (kept, err), (placement, s_code), (findings, c_code) = three_verdicts(tmp_path, [job])
    assert kept["spec"]["tasks"][0]["partitionPolicy"] == own
    why = (f"no HyperNode exists: Volcano's {CLUSTER_TOP_HYPERNODE} (tier 1, every Node) meets highestTierAllowed 1, "
           "so the partitions may land on any Node")
    assert f"task worker: its partitions are not bounded by a HyperNode: {why}\n" in err
    assert placement["reasons"] == [f"task worker: placed without a HyperNode bound: {why}"]
    assert (placement["pending"], s_code, errors(findings), c_code) == (0, 0, [], 0)


# --- the scheduler's candidates (rule V26) ----------------------------------------------------------------

def test_the_cluster_top_hypernode_is_one_tier_above_the_highest():
    hns = discover_hypernodes(NODES, load_config({"volcano": {"networkTopologyDiscovery": DISCOVERY}})
                              .volcano.networkTopologyDiscovery)
    every = sorted(n["metadata"]["name"] for n in NODES)
    four = partition_bound({"networkTopology": {"mode": "hard", "highestTierAllowed": 4}}, hns, NODES)
    assert four.bounded and four.domains[-1] == (CLUSTER_TOP_HYPERNODE, 4, every)
    three = partition_bound({"networkTopology": {"mode": "hard", "highestTierAllowed": 3}}, hns, NODES)
    assert [t for _, t, _ in three.domains] == [1, 1, 1, 1, 2, 2, 3]
    zero = partition_bound({"networkTopology": {"mode": "hard", "highestTierAllowed": 0}}, [], NODES)
    assert (zero.bounded, zero.domains) == (True, [])
    soft = partition_bound({"networkTopology": {"mode": "soft"}}, hns, NODES)
    assert (soft.bounded, soft.why) == (False, "no hard networkTopology")


def test_a_tier_zero_bound_without_hypernodes_fits_nowhere_in_all_three(tmp_path):
    own = {"totalPartitions": 2, "partitionSize": 2, "minPartitions": 2,
           "networkTopology": {"mode": "hard", "highestTierAllowed": 0}}
    (_, err), (placement, s_code), (findings, c_code) = three_verdicts(tmp_path, [vcjob(size=None,
                                                                                         partitionPolicy=own)])
    assert "task worker: no HyperNode of tier <= 0 exists\n" in err
    assert (placement["pending"], s_code, c_code) == (4, 3, 3)


def test_hypernode_objects_are_facts():
    hn = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "h"},
          "spec": {"tier": 1, "members": []}}
    assert ClusterFacts.from_objects([hn]).hypernodes == [hn]


# --- check --cluster lists the cluster's HyperNodes ------------------------------------------------------

def test_check_cluster_reads_the_hypernodes_where_served(tmp_path):
    hns = discover_hypernodes(NODES, load_config({"volcano": {"networkTopologyDiscovery": DISCOVERY}})
                              .volcano.networkTopologyDiscovery)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"volcano": {"partitionSize": 4}}))

    def run(serve_hypernodes):
        with FakeAPI() as api:
            install(api, {}, [], NAMESPACES)
            api.route("GET", "/api/v1/nodes", paged_list("Node", NODES, 500))
            api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
            api.route("GET", "/version", (200, {"gitVersion": "v1.36.0"}))
            api.route("GET", "/apis", (200, {"kind": "APIGroupList", "groups": []}))
            if serve_hypernodes:
                api.route("GET", "/apis/topology.volcano.sh/v1alpha1/hypernodes", paged_list("HyperNode", hns, 500))
            code, out, err = cli("check", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"),
                                 "--config", str(config), "-o", "json")
        assert code in (0, 3), err
        return code, [(f["severity"], f["key"], f["message"]) for f in json.loads(out)]

    code, served = run(True)
    assert code == 3 and ("error", "volcano.partitionSize", "partitionSize 4 needs 4 nodes inside one HyperNode of "
                          "tier <= 1; the largest has 2 (counting one pod per node): every partitioned Job would stay "
                          "Pending") in served
    assert not any(key == "volcano.networkTopologyDiscovery" for _, key, _ in served)
    _, unserved = run(False)
    assert ("warning", "volcano.networkTopologyDiscovery", f"{WARNING}: {UNWRITTEN}") in unserved


def test_a_bad_hypernode_in_the_input_is_one_line_naming_its_file_and_fields(tmp_path):
    """Rule V26: a HyperNode the verdict would read is checked as its CRD checks it, every field error at once,
    naming the file, never a traceback blamed on the Job."""
    bad = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": "rack-a"},
           "spec": {"tier": "one", "members": [{"type": "Rack", "selector": {"exactMatch": {"name": "n0"},
                                                                             "regexMatch": {"pattern": "n.*"}}},
                                               {"type": "Node", "selector": {"regexMatch": {"pattern": "("}}}]}}
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([vcjob(), bad]))
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump_all(NODES))
    expected = (f"policylib: error: {path}: HyperNode rack-a: [spec.tier: Invalid value: \"one\": must be an integer "
                ">= 0, spec.members[0].type: Unsupported value: \"Rack\": supported values: \"Node\", \"HyperNode\", "
                "spec.members[0].selector: Invalid value: ")
    for argv in (["preview", "-f", str(path)], ["simulate", "-f", str(path), "--nodes", str(nodes)],
                 ["check", "-f", str(path), "--nodes", str(nodes)]):
        code, out, err = cli(*argv)
        assert (code, out) == (2, ""), argv
        assert err.startswith(expected) and len(err.splitlines()) == 1, err
        assert "spec.members[1].selector.regexMatch.pattern: Invalid value: \"(\": not a regular expression" in err
