"""``simulate`` and ``check`` read a gang's topology level from the words written on its own objects (rules R17,
R18, G26): Kubernetes' PodGroup ``schedulingConstraints.topology``, Volcano's hard ``networkTopology`` (Trainer's
PodGroup of a runtime's podGroupPolicy, a Volcano Job's, or a PodGroup as a writer gives it), for JobSets,
TrainJobs and Volcano Jobs; ``check`` says which gang, per start wave, cannot fit."""
from __future__ import annotations

import copy

from policylib.check import check
from policylib.config import load_config
from policylib.hypernodes import cluster_hypernodes
from policylib.kubescheduler.snapshot import node_states
from policylib.simulate import simulate
from policylib.simulate.gangs import trainer_podgroup
from policylib.simulate.topology import gang_level, label_domains
from tests.crd import assert_valid
from tests.test_jobset import CPU, jobset, node, rjob
from tests.test_trainjob import TORCH, trainjob

RACK = "example.com/rack"
RACKS = {"networkTopologyDiscovery": [{"source": "label", "config": {"networkTopologyTypes": {"racks": [
    {"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]}}}]}
NATIVE = {"gang": {"method": "workload", "scheduler": "kube-scheduler", "topology": "tier-1"}, "volcano": RACKS}
#: Two racks of two 2-CPU Nodes: 4 CPUs a rack, 8 in all.
NODES = [node("a1", 2, "rack-a"), node("a2", 2, "rack-a"), node("b1", 2, "rack-b"), node("b2", 2, "rack-b")]
VOLCANO_RUNTIME = copy.deepcopy(TORCH)
VOLCANO_RUNTIME["spec"]["podGroupPolicy"] = {"volcano": {"networkTopology": {"mode": "hard",
                                                                              "highestTierAllowed": 1}}}
#: Label discovery's rack HyperNodes (rule H1), named by a hash of their topology, key and value.
HN_A, HN_B = "hypernode-racks-tier1-6hz8r", "hypernode-racks-tier1-jhdsw"


def workers(pods: int, name: str = "train") -> dict:
    return jobset(rjob("workers", parallelism=pods, pod_spec=CPU), name=name)


def racks(placed: dict[str, int]) -> set[str]:
    return {n[0] for n in placed}


def test_a_jobset_that_fits_one_rack_lands_in_one_rack():
    """Rule R17: the JobSet's PodGroup carries schedulingConstraints.topology [rack]: all 3 pods in one rack (a
    tie, named); without the level they would spread over both."""
    [p] = simulate([workers(3)], NODES, NATIVE)
    assert (p.pending, p.placed) == (0, {"a1": 2, "a2": 1})
    assert p.reasons == [
        f"wave 1: topology {RACK}: placed in {RACK}=rack-a (2 of 2 domains hold the gang; placement score 138)",
        f"wave 1: topology {RACK}: domains rack-a, rack-b score the same (138): kube-scheduler picks one at random; "
        "simulated in rack-a"]


def test_a_jobset_that_fits_only_across_racks_stays_pending_with_the_schedulers_reason():
    """Rule R17: 5 pods of 1 CPU fit the cluster (8) but no rack (4): none binds, kube-scheduler's reason."""
    [p] = simulate([workers(5)], NODES, NATIVE)
    assert (p.pending, p.placed) == (5, {})
    assert p.reasons == [
        f"wave 1: topology {RACK}: 0/2 placements are available: no {RACK} domain holds the gang's minimum 5 pods at "
        "once (pods placeable per domain: rack-a 4, rack-b 4)",
        "wave 1 (workers): gang train: 0 of its minimum 5 pods placeable at once: the gang binds nothing"]
    [spread] = simulate([workers(5)], NODES, {"gang": {"method": "workload", "scheduler": "kube-scheduler"}})
    assert (spread.pending, racks(spread.placed)) == (0, {"a", "b"})


def test_a_trainjob_under_trainers_volcano_podgroup_stays_in_one_hypernode():
    """Rule R18: the runtime's podGroupPolicy.volcano.networkTopology (hard, tier 1) is on Trainer's PodGroup; the
    configuration names no level at all: 3 pods in one rack HyperNode, 5 in none (Volcano's gang condition)."""
    config = {"volcano": RACKS}
    [fits] = simulate([VOLCANO_RUNTIME, trainjob(num_nodes=3)], NODES, config)
    assert (fits.kind, fits.pending, fits.placed) == ("TrainJob", 0, {"a1": 2, "a2": 1})
    assert fits.reasons[0] == (f"wave 1: networkTopology hard highestTierAllowed 1: placed in HyperNode {HN_A} (tier 1; "
                               "2 of 2 tier-1 HyperNodes hold the gang)")
    [short] = simulate([VOLCANO_RUNTIME, trainjob(num_nodes=5)], NODES, config)
    assert (short.pending, short.placed) == (5, {})
    assert short.reasons == [
        f"wave 1: networkTopology hard highestTierAllowed 1: no HyperNode of tier <= 1 holds the gang's minimum 5 pods "
        f"at once (pods placeable per HyperNode: {HN_A} 4, {HN_B} 4): Volcano's PodGroup stays Unschedulable "
        "(reason NotEnoughResources, \"tasks in gang unschedulable\")",
        "wave 1 (node): gang llama: 0 of its minimum 5 pods placeable at once: the gang binds nothing"]


def test_soft_mode_is_a_preference_not_a_constraint():
    """Rule R18: networkTopology mode soft holds the gang nowhere: 5 pods bind across both racks."""
    soft = copy.deepcopy(VOLCANO_RUNTIME)
    soft["spec"]["podGroupPolicy"]["volcano"]["networkTopology"]["mode"] = "soft"
    [p] = simulate([soft, trainjob(num_nodes=5)], NODES, {"volcano": RACKS})
    assert (p.pending, racks(p.placed)) == (0, {"a", "b"})
    assert not any("networkTopology" in r for r in p.reasons)


def test_trainers_podgroup_is_one_volcanos_crd_accepts():
    pg = trainer_podgroup("llama", "ml", VOLCANO_RUNTIME, "volcano")
    assert pg["spec"] == {"networkTopology": {"mode": "hard", "highestTierAllowed": 1}}
    assert_valid(pg, "schemas", "volcano", "scheduling.volcano.sh_podgroups.yaml", version="v1beta1")


def test_a_podgroups_tier_name_is_read_as_volcano_resolves_it():
    """Rule R18: highestTierName (the words a writer gives a Volcano PodGroup for a level) resolves through the
    HyperNodes' tierName, label discovery's being the node label key: the rack HyperNodes, lowest tier first."""
    states = node_states(NODES, [])
    hypernodes = cluster_hypernodes(load_config({"volcano": RACKS}).volcano.networkTopologyDiscovery, NODES, [])
    pg = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "g"},
          "spec": {"minMember": 3, "networkTopology": {"mode": "hard", "highestTierName": RACK}}}
    level = gang_level(pg, states, NODES, hypernodes)
    assert level is not None and (level.scheduler, level.words, level.tier) == (
        "volcano", f"networkTopology hard highestTierName {RACK}", 1)
    assert list(level.domains) == [(HN_A, 1, ("a1", "a2")), (HN_B, 1, ("b1", "b2"))]
    unknown = copy.deepcopy(pg)
    unknown["spec"]["networkTopology"]["highestTierName"] = "example.com/spine"
    assert gang_level(unknown, states, NODES, hypernodes) is None   # Volcano only logs: no constraint
    assert label_domains(states, RACK) == {"rack-a": [0, 1], "rack-b": [2, 3]}


def volcano_job(replicas: int, topology: dict | None = None) -> dict:
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "vj", "namespace": "ml"},
           "spec": {"schedulerName": "volcano", "minAvailable": replicas, "tasks": [
               {"name": "w", "replicas": replicas, "template": {"spec": {**CPU, "restartPolicy": "Never"}}}]}}
    if topology is not None:
        job["spec"]["networkTopology"] = topology
    return job


def test_a_volcano_jobs_hard_network_topology_holds_it_in_one_hypernode():
    """Rule R18: a Volcano Job's spec.networkTopology (copied to its PodGroup by Volcano's controller)."""
    config = {"volcano": {**RACKS, "enabled": True}}
    hard = {"mode": "hard", "highestTierAllowed": 1}
    job = volcano_job(3, hard)
    assert_valid(job, "schemas", "volcano", "batch.volcano.sh_jobs.yaml")
    [fits] = simulate([job], NODES, config)
    assert (fits.pending, racks(fits.placed), fits.reasons[0]) == (
        0, {"a"}, f"networkTopology hard highestTierAllowed 1: placed in HyperNode {HN_A} (tier 1)")
    [short] = simulate([volcano_job(5, hard)], NODES, config)
    assert (short.pending, short.placed, short.reasons) == (5, {}, [
        f"networkTopology hard highestTierAllowed 1: no HyperNode of tier <= 1 holds the Job's minimum 5 pods at once "
        f"(pods placeable per HyperNode: {HN_A} 4, {HN_B} 4): Volcano's PodGroup stays Unschedulable "
        "(reason NotEnoughResources, \"tasks in gang unschedulable\")"])
    [anywhere] = simulate([volcano_job(5)], NODES, config)
    assert (anywhere.pending, racks(anywhere.placed)) == (0, {"a", "b"})
    assert [f.message for f in check(config, NODES, [volcano_job(5, hard)]) if f.key.startswith("gang")] == [
        "Job ml/vj: its gang needs 5 pods at once; the one HyperNode of tier <= 1 can hold 4 of them now: Volcano "
        "would keep its PodGroup Unschedulable and start none of them"]


def gang_findings(config: dict, objects: list[dict], nodes: list[dict] = NODES) -> list[tuple[str, str]]:
    return [(f.key, f.message) for f in check(config, nodes, objects) if f.key.startswith("gang.")
            and f.severity == "error"]


def test_check_names_a_jobset_and_a_trainjob_whose_gang_cannot_fit():
    """Rule G26: the same finding as a Kubeflow job's (rule G14), from the model simulate runs, on the Nodes as
    the one simulation leaves them with the job's own pods released."""
    assert gang_findings(NATIVE, [workers(5)]) == [("gang.topology", (
        "JobSet ml/train: its gang needs 5 pods at once; the one example.com/rack domain can hold 4 of them now: "
        "kube-scheduler would keep its PodGroup Unschedulable and bind none of them"))]
    assert gang_findings(NATIVE, [workers(3)]) == []
    podgroup = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}
    assert gang_findings(podgroup, [TORCH, trainjob(num_nodes=9)]) == [("gang.method", (
        "TrainJob ml/llama: its gang needs 9 pods at once; the Nodes can hold 8 of them now: it would wait for its "
        "scheduleTimeout and never start"))]
    assert gang_findings({"volcano": RACKS}, [VOLCANO_RUNTIME, trainjob(num_nodes=5)]) == [("gang.topology", (
        "TrainJob ml/llama: its gang needs 5 pods at once; the one HyperNode of tier <= 1 can hold 4 of them now: "
        "Volcano would keep its PodGroup Unschedulable and start none of them"))]


def test_check_judges_each_start_wave_with_the_waves_before_it_running():
    """Rule G26: a JobSet whose second wave (dependsOn) is a gang: wave 1's pods hold their CPUs when wave 2
    starts, so 3 launchers + 6 workers on 8 CPUs: the second wave's gang is named, the first is not."""
    waves = jobset(rjob("launcher", parallelism=3, pod_spec=CPU),
                   rjob("workers", parallelism=6, pod_spec=CPU, depends_on=["launcher"]), name="waves")
    podgroup = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}
    assert gang_findings(podgroup, [waves]) == [("gang.method", (
        "JobSet ml/waves: its gang waves-workers (wave 2 of 2: workers) needs 6 pods at once; the Nodes can hold 5 "
        "of them now: it would wait for its scheduleTimeout and never start"))]
    never = copy.deepcopy(TORCH)
    never["spec"]["podGroupPolicy"] = {"coscheduling": {}}
    never["spec"]["template"]["spec"]["replicatedJobs"].append(
        {"name": "launcher", "dependsOn": [{"name": "node", "status": "Ready"}],
         "template": {"spec": {"template": {"spec": CPU}}}})
    assert gang_findings(podgroup, [never, trainjob(num_nodes=2)]) == [("gang.method", (
        "TrainJob ml/llama: runtime ClusterTrainingRuntime torch-distributed has podGroupPolicy.coscheduling: "
        "Trainer's PodGroup counts the pods of all 2 start waves, which never exist together: nothing binds"))]


def test_check_releases_the_jobs_own_pods_and_counts_the_others():
    """Rule G26 as G14: a JobSet simulate places is no gang error, though its own pods fill the Nodes; a second
    one placed after it is judged with the first's pods in place."""
    podgroup = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}
    first, second = workers(6, "first"), workers(4, "second")
    [a, b] = simulate([first, second], NODES, podgroup)
    assert (a.pending, b.pending) == (0, 4)
    assert gang_findings(podgroup, [first, second]) == [("gang.method", (
        "JobSet ml/second: its gang needs 4 pods at once; the Nodes can hold 2 of them now: it would wait for its "
        "scheduleTimeout and never start"))]


def test_simulate_cluster_places_a_trainjob_with_the_clusters_runtime(tmp_path):
    """Rules T1, T5: with ``--cluster`` the runtimes are the cluster's (TrainingRuntimes of every namespace and
    ClusterTrainingRuntimes, each where it is served): the TrainJob given with -f is placed with its runtime; a
    runtime the cluster does not have is named in the reason."""
    import io
    import json

    import yaml

    from policylib.cli import main
    from tests.fakeapi import FakeAPI, paged_list
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}))
    files = tmp_path / "trainjobs.yaml"
    files.write_text(yaml.safe_dump_all([trainjob(num_nodes=3), {**trainjob(runtime="other"),
                                                                 "metadata": {"name": "lost", "namespace": "ml"}}]))
    runtime = {k: v for k, v in TORCH.items() if k not in ("apiVersion", "kind")}   # list items omit them
    with FakeAPI() as api:
        api.route("GET", "/api/v1/nodes", paged_list("Node", NODES, 500))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
        api.route("GET", "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes",
                  paged_list("ClusterTrainingRuntime", [runtime], 500))
        api.route("GET", "/version", (200, {"gitVersion": "v1.37.0"}))
        out, err = io.StringIO(), io.StringIO()
        code = main(["simulate", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"), "--config", str(cfg),
                     "-f", str(files), "-o", "json"], io.StringIO(), out, err)
        paths = {r["path"] for r in api.requests}
    assert code == 0, err.getvalue()
    placed, lost = json.loads(out.getvalue())
    assert (placed["kind"], placed["name"], placed["replicas"], placed["pending"]) == ("TrainJob", "llama", 3, 0)
    assert lost["reasons"] == ["not simulated: runtime ClusterTrainingRuntime other is not known (not among the -f "
                               "objects, nor the cluster's with --cluster)"]
    assert {"/apis/trainer.kubeflow.org/v1alpha1/trainingruntimes",
            "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"} <= paths
    forbidden = (403, {"kind": "Status", "apiVersion": "v1", "code": 403, "reason": "Forbidden",
                       "message": "clustertrainingruntimes.trainer.kubeflow.org is forbidden"})
    with FakeAPI() as api:   # a user who may not list them: a warning, and the TrainJob is named, not placed
        api.route("GET", "/api/v1/nodes", paged_list("Node", NODES, 500))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
        api.route("GET", "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", forbidden)
        api.route("GET", "/version", (200, {"gitVersion": "v1.37.0"}))
        out, err = io.StringIO(), io.StringIO()
        code = main(["simulate", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"), "--config", str(cfg),
                     "-f", str(files), "-o", "json"], io.StringIO(), out, err)
    assert code == 0, err.getvalue()
    assert [line for line in err.getvalue().splitlines() if "clustertrainingruntimes" in line] == [
        "policylib: warning: cannot list clustertrainingruntimes.trainer.kubeflow.org: HTTP 403 Forbidden: "
        "clustertrainingruntimes.trainer.kubeflow.org is forbidden; a TrainJob that names a ClusterTrainingRuntime "
        "is not placed"]
    assert [p["replicas"] for p in json.loads(out.getvalue())] == [0, 0]


EXCLUSIVE = {"annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": RACK}}
PODGROUP = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}
NO_GANG = {"gang": {"enabled": False}}


def test_jobsets_exclusive_topology_puts_each_job_alone_in_one_domain():
    """Rule R19, as JobSet's pod webhooks do it: each Job's first pod in a rack no other Job's pods are in, its
    other pods created after it, in its rack. Two single-pod Jobs under a gang: one per rack, bound together;
    three: the third has no free rack, so the gang binds nothing (without a gang the two others run)."""
    two = jobset(rjob("w", replicas=2, pod_spec=CPU), meta=EXCLUSIVE)
    [p] = simulate([two], NODES, PODGROUP)
    assert (p.pending, racks(p.placed), p.reasons) == (0, {"a", "b"}, [
        f"wave 1: alpha.jobset.sigs.k8s.io/exclusive-topology {RACK}: the Jobs of w each alone in one domain: "
        "rack-a, rack-b"])
    three = jobset(rjob("w", replicas=3, pod_spec=CPU), meta=EXCLUSIVE)
    [gang] = simulate([three], NODES, PODGROUP)
    assert (gang.pending, gang.placed, gang.reasons[0], gang.reasons[-1]) == (3, {}, (
        f"wave 1: Job train-w-2: alpha.jobset.sigs.k8s.io/exclusive-topology {RACK}: every {RACK} domain holds "
        "another Job's pods (its first pod's pod anti-affinity): its pods are not created"),
        "wave 1 (w): gang train: 2 of its minimum 3 pods placeable at once: the gang binds nothing")
    [alone] = simulate([three], NODES, NO_GANG)
    assert (alone.pending, racks(alone.placed)) == (1, {"a", "b"})


def test_exclusive_topology_with_a_gang_of_multi_pod_jobs_deadlocks():
    """Rule R19: JobSet's pod webhook refuses a Job's other pods until its first is bound, and the gang binds
    none until all exist: nothing binds, and check names it; without a gang each Job fills its own rack."""
    multi = jobset(rjob("w", replicas=2, parallelism=3, pod_spec=CPU), meta=EXCLUSIVE)
    [p] = simulate([multi], NODES, PODGROUP)
    never = ("alpha.jobset.sigs.k8s.io/exclusive-topology: JobSet's pod webhook creates a Job's other pods only once "
             "its first pod is bound (\"follower pod node selector not set\"), and gang train binds none until all 6 "
             "exist: the Jobs of w (3 pods per Job) deadlock")
    assert (p.pending, p.placed, p.reasons) == (6, {}, [f"wave 1 (w): {never}"])
    assert gang_findings(PODGROUP, [multi]) == [("gang.method", f"JobSet ml/train: {never}")]
    [free] = simulate([multi], NODES, NO_GANG)
    assert (free.pending, free.placed) == (0, {"a1": 2, "a2": 1, "b1": 2, "b2": 1})


def test_a_trainjobs_exclusive_topology_rides_its_runtime_patch():
    """Rule R19 for a TrainJob: the annotation on a runtime patch's JobSet metadata reaches the JobSet Trainer
    makes, and its one Job of 5 pods stays in one rack (4 fit, 1 Pending); under a gang it would deadlock."""
    patch = {"manager": "example.com/placement", "trainingRuntimeSpec": {"template": {"metadata": EXCLUSIVE}}}
    tj = trainjob(num_nodes=5, patches=[patch])
    [p] = simulate([TORCH, tj], NODES, NO_GANG)
    assert (p.kind, p.pending, sum(p.placed.values()), len(racks(p.placed))) == ("TrainJob", 1, 4, 1)
    assert p.reasons[-1] == (f"wave 1: alpha.jobset.sigs.k8s.io/exclusive-topology {RACK}: the Jobs of node each "
                             "alone in one domain: rack-a")
    [gang] = simulate([TORCH, tj], NODES, PODGROUP)
    assert (gang.pending, gang.placed) == (5, {})
    assert "deadlock" in gang.reasons[0]


def test_the_node_selector_strategy_is_named_not_modelled():
    """Rule R19: with alpha.jobset.sigs.k8s.io/node-selector JobSet's pod webhooks leave the pods alone (each Job
    selects Nodes labelled for it beforehand): no exclusive placement, and the reason says it is not modelled."""
    flagged = {"annotations": {**EXCLUSIVE["annotations"], "alpha.jobset.sigs.k8s.io/node-selector": "true"}}
    [p] = simulate([jobset(rjob("w", replicas=3, pod_spec=CPU), meta=flagged)], NODES, NO_GANG)
    assert (p.pending, p.reasons) == (0, [
        "alpha.jobset.sigs.k8s.io/node-selector: each Job's pods select the Nodes labelled for it beforehand "
        "(alpha.jobset.sigs.k8s.io/namespaced-job): not modelled, placed without it"])


# --- the outcomes the real controllers and schedulers gave on the 1.36.3 harness (fake Nodes n1-n4 of 2 CPUs,
# racks r1 = {n1, n2} and r2 = {n3, n4}; JobSet v0.12.0's webhooks, scheduler-plugins' Coscheduling, kube-scheduler
# with TopologyAwareWorkloadScheduling): simulate gives the same verdicts --------------------------------------

HARNESS = [node("n1", 2, "r1"), node("n2", 2, "r1"), node("n3", 2, "r2"), node("n4", 2, "r2")]


def load(name: str, node_name: str, cpu: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "other"},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x",
                                                            "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}}


def test_the_harness_native_gang_with_no_rack_of_room_stays_pending():
    """A JobSet of 5 one-CPU pods under a PodGroup with schedulingConstraints.topology [rack], 4 CPUs free in r1
    and 1 in r2: the scheduler answered "0/2 placements are available" and bound none."""
    busy = [load("x", "n3", "2"), load("y", "n4", "1")]
    [p] = simulate([workers(5, "js-m"), *busy], HARNESS, NATIVE)
    assert (p.pending, p.placed) == (5, {})
    assert p.reasons[0].startswith(f"wave 1: topology {RACK}: 0/2 placements are available")


def test_the_harness_exclusive_jobset_of_single_pod_jobs_binds_one_per_rack():
    """js-d: exclusive on the rack, 2 Jobs of 1 pod, Coscheduling minMember 2: bound together on n1 (r1) and n3
    (r2)."""
    [p] = simulate([jobset(rjob("w", replicas=2, pod_spec=CPU), name="js-d", meta=EXCLUSIVE)], HARNESS, PODGROUP)
    assert (p.pending, p.placed) == (0, {"n1": 1, "n3": 1})


def test_the_harness_exclusive_jobset_of_two_pod_jobs_deadlocks_under_a_gang():
    """js-c: exclusive on the rack, 2 Jobs of 2 pods, Coscheduling minMember 4: the followers were refused
    ("follower pod node selector not set"), the leaders waited for siblings, nothing bound."""
    js = jobset(rjob("w", replicas=2, parallelism=2, pod_spec=CPU), name="js-c", meta=EXCLUSIVE)
    [p] = simulate([js], HARNESS, PODGROUP)
    assert (p.pending, p.placed) == (4, {})
    assert "follower pod node selector not set" in p.reasons[0]


def test_check_judges_a_trainjobs_runtime_waves():
    """Rule G26 on a TrainJob: its runtime starts a launcher Job of 4 pods once the 5 node pods run (dependsOn):
    each wave is a gang of policylib's runtime patch, and the second is judged with the first in place."""
    runtime = copy.deepcopy(TORCH)
    runtime["spec"]["template"]["spec"]["replicatedJobs"].append(
        {"name": "launcher", "dependsOn": [{"name": "node", "status": "Ready"}],
         "template": {"spec": {"parallelism": 4, "template": {"spec": CPU}}}})
    assert gang_findings(PODGROUP, [runtime, trainjob(num_nodes=5)]) == [("gang.method", (
        "TrainJob ml/llama: its gang llama-launcher (wave 2 of 2: launcher) needs 4 pods at once; the Nodes can hold "
        "3 of them now: it would wait for its scheduleTimeout and never start"))]
    [p] = simulate([runtime, trainjob(num_nodes=5)], NODES, PODGROUP)
    assert (p.replicas, p.pending, sum(p.placed.values())) == (9, 4, 5)


def test_a_trainjob_under_policylibs_native_podgroup_lands_in_one_rack():
    """Rule R17 on a TrainJob: the Workload and PodGroup policylib makes for its gang carry the rack: 3 pods in
    one rack, 5 in none (kube-scheduler's reason), and check names it."""
    [fits] = simulate([TORCH, trainjob(num_nodes=3)], NODES, NATIVE)
    assert (fits.pending, len(racks(fits.placed))) == (0, 1)
    [short] = simulate([TORCH, trainjob(num_nodes=5)], NODES, NATIVE)
    assert (short.pending, short.reasons[0]) == (5, (
        f"wave 1: topology {RACK}: 0/2 placements are available: no {RACK} domain holds the gang's minimum 5 pods at "
        "once (pods placeable per domain: rack-a 4, rack-b 4)"))
    assert gang_findings(NATIVE, [TORCH, trainjob(num_nodes=5)]) == [("gang.topology", (
        "TrainJob ml/llama: its gang needs 5 pods at once; the one example.com/rack domain can hold 4 of them now: "
        "kube-scheduler would keep its PodGroup Unschedulable and bind none of them"))]
