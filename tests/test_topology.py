"""The one topology declaration (rules N1-N8): the levels, the older keys read as special cases of it, and each
scheduler's words for "keep each gang within one domain of level L", required and preferred."""
import copy
from pathlib import Path

import kubernetes_validate
import pytest

from policylib import ConfigError, load_config, mutate
from policylib.errors import FieldPath
from policylib.jobset import EXCLUSIVE_TOPOLOGY
from policylib.topology import Level, placement
from policylib.topology.kueue import (
    PREFERRED_TOPOLOGY,
    REQUIRED_TOPOLOGY,
    validate_podset_annotations,
)
from tests.crd import crd_validator, file_validator
from tests.test_gang_schemas import job_errors
from tests.test_gang_workload import MINORS, on, tfjob
from tests.test_jobset import JOBSET_CRD, jobset, rjob

LEVELS = [{"name": "zone", "nodeLabel": "topology.kubernetes.io/zone"},
          {"name": "block", "nodeLabel": "example.com/block"},
          {"name": "rack", "nodeLabel": "example.com/rack"},
          {"name": "host", "nodeLabel": "kubernetes.io/hostname"}]
RACKS = {"networkTopologyDiscovery": [{"source": "label", "config": {"networkTopologyTypes": {"racks": [
    {"nodeLabel": "example.com/block"}, {"nodeLabel": "example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}}}]}
QUEUE = {"kueue.x-k8s.io/queue-name": "team-a"}
#: The Volcano PodGroup CRD of the harness's Volcano (v1.14.1), copied there by the harness's make target.
VOLCANO_CRD = Path(__file__).resolve().parent.parent / "e2e/bin/volcano/crd/scheduling.volcano.sh_podgroups.yaml"


def declared(within="rack", mode="required", **more):
    return {"topology": {"levels": LEVELS, "gangs": {"within": within, "mode": mode}}, **more}


def errors_of(config):
    with pytest.raises(ConfigError) as e:
        load_config(config)
    return [(err.field, err.message) for err in e.value.errors]


def kueue_job(**meta):
    job = tfjob(workers=3)
    job["metadata"]["labels"] = dict(QUEUE)
    job["metadata"].update(meta)
    return job


# --- N1, N2, N3: the declaration ----------------------------------------------------------------

def test_the_declared_levels_carry_volcanos_tier_numbers_and_the_placement():
    """Rules N1 and N3: widest first; the Volcano tier is the distance from the nodes (the host level has none)."""
    p = placement(load_config(declared("block", "preferred")))
    assert p.levels == (Level("zone", "topology.kubernetes.io/zone", 3, "topology.levels[0]"),
                        Level("block", "example.com/block", 2, "topology.levels[1]"),
                        Level("rack", "example.com/rack", 1, "topology.levels[2]"),
                        Level("host", "kubernetes.io/hostname", None, "topology.levels[3]"))
    assert (p.within.name, p.mode, p.within_setting, p.job_per_domain, p.declared) == (
        "block", "preferred", "topology.gangs.within", None, True)
    # without a host level the narrowest level is tier 1
    two = placement(load_config({"topology": {"levels": LEVELS[:2]}}))
    assert [lv.tier for lv in two.levels] == [2, 1] and two.within is None


def test_without_topology_the_levels_are_the_older_keys():
    """Rule N2: the zone key, Volcano's label discovery's tiers, the host key; gang.topology and
    gang.jobSetExclusiveTopology are the placement."""
    config = load_config({"volcano": RACKS, "gang": {"method": "workload", "scheduler": "kube-scheduler",
                                                     "topology": "tier-1", "jobSetExclusiveTopology": "tier-2"}})
    p = placement(config)
    assert [(lv.name, lv.node_label, lv.tier) for lv in p.levels] == [
        ("zone", "topology.kubernetes.io/zone", None), ("tier-2", "example.com/block", 2),
        ("tier-1", "example.com/rack", 1), ("host", "kubernetes.io/hostname", None)]
    assert (p.within.node_label, p.mode, p.within_setting, p.job_per_domain.node_label, p.declared) == (
        "example.com/rack", "required", "gang.topology", "example.com/block", False)
    assert placement(load_config(None)).within is None


def test_a_bad_declaration_is_refused_with_every_error_and_its_field_path():
    """Rule N1: every error at once, each naming its key and value."""
    assert errors_of({"topology": {"levels": [{"name": "Zone", "nodeLabel": "a b"}, {"name": "r"}],
                                   "gangs": {"within": "Rack", "mode": "always"}, "jobSets": 3}}) == [
        ("topology.gangs.mode", "must be one of required, preferred; got 'always'"),
        ("topology.gangs.within", "must be none or the name of a level of topology.levels"),
        ("topology.jobSets", "must be a mapping like {jobPerDomain: rack}; got 3"),
        ("topology.levels[0].name", "must be a level name of lowercase letters, digits and '-'"),
        ("topology.levels[0].nodeLabel", "'a b' is not a valid label key: name part must consist of alphanumeric "
                                         "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                                         "character"),
        ("topology.levels[1]", "each level is {name: <level name>, nodeLabel: <node label key>}")]
    assert errors_of({"topology": {"levels": [{"name": "host", "nodeLabel": "kubernetes.io/hostname"},
                                              {"name": "rack", "nodeLabel": "example.com/rack"},
                                              {"name": "rack", "nodeLabel": "example.com/rack"}],
                                   "gangs": {"within": "block"}, "jobSets": {"jobPerDomain": "zone"}}}) == [
        ("topology.levels[0].nodeLabel", "kubernetes.io/hostname is the node level and may only be the last level"),
        ("topology.levels[2].name", "names a level twice: 'rack'"),
        ("topology.levels[2].nodeLabel", "lists a node label twice: 'example.com/rack'"),
        ("topology.gangs.within", "must be none or a level of topology.levels (host, rack, rack); got 'block'"),
        ("topology.jobSets.jobPerDomain", "must be none or a level of topology.levels (host, rack, rack); got 'zone'")]


def test_older_keys_beside_the_declaration_must_agree_every_disagreement_at_once():
    """Rule N2: each older key given names both keys and both values."""
    volcano = {"networkTopologyDiscovery": [{"source": "label", "config": {"networkTopologyTypes": {"racks": [
        {"nodeLabel": "example.com/rack"}, {"nodeLabel": "example.com/block"},
        {"nodeLabel": "kubernetes.io/hostname"}]}}}], "networkTopology": {"mode": "hard", "highestTierAllowed": 4}}
    assert errors_of(declared("rack", gang={"method": "workload", "scheduler": "kube-scheduler", "topology": "zone",
                                            "jobSetExclusiveTopology": "example.com/rack"},
                              zoneTopologySpread={"topologyKey": "example.com/zone"}, volcano=volcano)) == [
        ("gang.topology", "'zone' disagrees with topology.gangs.within 'rack': it names no level of topology.levels "
                          "(levels: zone topology.kubernetes.io/zone, block example.com/block, rack example.com/rack, "
                          "host kubernetes.io/hostname) (give only topology.gangs.within, or make them agree)"),
        ("gang.jobSetExclusiveTopology", "'example.com/rack' disagrees with topology.jobSets.jobPerDomain 'none': "
                                         "'example.com/rack' is level rack (example.com/rack) (give only "
                                         "topology.jobSets.jobPerDomain, or make them agree)"),
        ("zoneTopologySpread.topologyKey", "'example.com/zone' disagrees with topology.levels[0].nodeLabel "
                                           "'topology.kubernetes.io/zone': the level named zone is the zone spread's "
                                           "key (give only topology.levels[0].nodeLabel, or make them agree)"),
        ("volcano.networkTopologyDiscovery[0].config.networkTopologyTypes.racks[1].nodeLabel",
         "'example.com/block' disagrees with topology.levels[1].nodeLabel 'example.com/block': it is Volcano tier 1 "
         "here and tier 2 in topology.levels (give only topology.levels[1].nodeLabel, or make them agree)"),
        ("volcano.networkTopologyDiscovery[0].config.networkTopologyTypes.racks[0].nodeLabel",
         "'example.com/rack' disagrees with topology.levels[2].nodeLabel 'example.com/rack': it is Volcano tier 2 "
         "here and tier 1 in topology.levels (give only topology.levels[2].nodeLabel, or make them agree)"),
        ("volcano.networkTopology.highestTierAllowed", "4 disagrees with topology.levels ['zone', 'block', 'rack', "
                                                       "'host']: the declared levels have tiers 1 to 3 (give only "
                                                       "topology.levels, or make them agree)")]
    # with an error of another rule, every error still at once
    assert [f for f, _ in errors_of(declared("rack", gang={"method": "labels", "scheduler": "scheduler-plugins"},
                                             zoneTopologySpread={"topologyKey": "example.com/zone"}))] == [
        "gang.method and gang.scheduler", "zoneTopologySpread.topologyKey"]
    assert errors_of(declared("rack", "preferred", gang={"method": "workload", "scheduler": "kube-scheduler",
                                                         "topology": "tier-1"})) == [
        ("gang.topology", "'tier-1' disagrees with topology.gangs.mode 'preferred': gang.topology is a required "
                          "placement (give only topology.gangs.mode, or make them agree)")]


def test_older_keys_that_agree_load_and_the_spreads_take_the_levels_node_labels():
    """Rule N2: agreeing keys load; a spread key not given is the node label of the level named zone or host."""
    config = load_config(declared("rack", gang={"method": "workload", "scheduler": "kube-scheduler",
                                                "topology": "tier-1", "jobSetExclusiveTopology": "example.com/block"},
                                  volcano=RACKS, hostTopologySpread={"topologyKey": "kubernetes.io/hostname"}) |
                         {"topology": {"levels": LEVELS, "gangs": {"within": "rack"},
                                       "jobSets": {"jobPerDomain": "block"}}})
    assert placement(config).within.name == "rack"
    custom = load_config({"topology": {"levels": [{"name": "zone", "nodeLabel": "example.com/zone"},
                                                  {"name": "host", "nodeLabel": "example.com/node"}]}})
    assert (custom.zoneTopologySpread.topologyKey, custom.hostTopologySpread.topologyKey) == (
        "example.com/zone", "example.com/node")


def test_the_older_key_alone_keeps_its_meaning_and_output():
    """Rule N2: gang.topology without a declaration writes kube-scheduler's words only, with the reasons it had."""
    config = {"gang": {"method": "workload", "scheduler": "kube-scheduler", "topology": "tier-1"}, "volcano": RACKS}
    result = mutate(kueue_job(), config, facts=on(37))
    assert [o["spec"].get("schedulingConstraints") for o in result.extra_objects] == [None, {
        "topology": [{"key": "example.com/rack"}]}]
    assert not [r for r in result.reasons if "Kueue" in r]
    assert all(REQUIRED_TOPOLOGY not in str(op) for op in result.patch)


# --- N4: kube-scheduler -------------------------------------------------------------------------

@pytest.mark.parametrize("minor", sorted(MINORS))
def test_native_words_required_and_none_for_preferred(minor):
    """Rule N4: schedulingConstraints.topology for a required placement (valid in the minor's OpenAPI schema);
    nothing for a preferred one, with the reason."""
    gang = {"method": "workload", "scheduler": "kube-scheduler"}
    result = mutate(tfjob(), declared("rack", gang=gang), facts=on(minor))
    workload, podgroup = result.extra_objects
    assert podgroup["spec"]["schedulingConstraints"] == {"topology": [{"key": "example.com/rack"}]}
    assert workload["spec"]["podGroupTemplates"][0]["schedulingConstraints"] == {
        "topology": [{"key": "example.com/rack"}]}
    assert ("schedulingConstraints.topology [example.com/rack]: the gang's pods all in one example.com/rack domain "
            "(topology.gangs.within rack: topology.levels[2] nodeLabel example.com/rack; kube-scheduler needs the "
            "TopologyAwareWorkloadScheduling gate)") in result.reasons
    for obj in result.extra_objects:
        kubernetes_validate.validate(obj, MINORS[minor][1], strict=True)
    soft = mutate(tfjob(), declared("rack", "preferred", gang=gang), facts=on(minor))
    assert [o["spec"].get("schedulingConstraints") for o in soft.extra_objects] == [None, None]
    assert ("topology.gangs.within rack (example.com/rack, Volcano tier 1), preferred: kube-scheduler: "
            "schedulingConstraints.topology not written: it is a required placement only, and kube-scheduler has "
            "no preferred word") in soft.reasons


# --- N5: Volcano ---------------------------------------------------------------------------------

VOLCANO_GANG = {"method": "podgroup", "scheduler": "volcano"}


def volcano_job():
    job = tfjob(workers=3)
    for spec in job["spec"]["tfReplicaSpecs"].values():
        spec["template"]["spec"]["schedulerName"] = "volcano"
    return job


@pytest.mark.parametrize("mode,word", [("required", "hard"), ("preferred", "soft")])
@pytest.mark.parametrize("within,tier", [("rack", 1), ("block", 2), ("zone", 3)])
def test_volcano_words_are_the_podgroups_network_topology_at_the_levels_tier(mode, word, within, tier):
    """Rule N5: {mode: hard|soft, highestTierAllowed: tier(L)} on the PodGroup the controller makes, valid in
    Volcano's PodGroup CRD (../shared/schemas and the harness's v1.14.1 copy)."""
    result = mutate(volcano_job(), declared(within, mode, gang=VOLCANO_GANG))
    [pg] = result.extra_objects
    assert pg["spec"] == {"minMember": 4, "networkTopology": {"mode": word, "highestTierAllowed": tier}}
    assert (f"topology.gangs.within {within} ({LEVELS[3 - tier]['nodeLabel']}, Volcano tier {tier}), {mode}: "
            f"Volcano: PodGroup spec.networkTopology {{mode: {word}, highestTierAllowed: {tier}}} ({within} is tier "
            f"{tier})") in result.reasons
    errors = list(crd_validator("schemas", "volcano", "scheduling.volcano.sh_podgroups.yaml",
                                version="v1beta1").iter_errors(pg))
    assert errors == []
    assert list(file_validator(VOLCANO_CRD, "v1beta1").iter_errors(pg)) == []


def test_volcano_has_no_tier_for_the_host_level_and_other_schedulers_no_words():
    """Rules N5 and N4: the node level is no HyperNode tier (a reason, nothing written); scheduler-plugins' gang
    has no topology words (a reason)."""
    host = mutate(volcano_job(), declared("host", gang=VOLCANO_GANG))
    assert host.extra_objects[0]["spec"] == {"minMember": 4}
    assert ("topology.gangs.within host (kubernetes.io/hostname), required: Volcano: networkTopology not written: "
            "host is the node level, which no HyperNode tier is") in host.reasons
    plugins = mutate(tfjob(workers=3), declared("rack", gang={"method": "podgroup", "scheduler": "scheduler-plugins"}))
    assert plugins.extra_objects[0]["spec"] == {"scheduleTimeoutSeconds": 10, "minMember": 4}
    assert ("topology.gangs.within rack (example.com/rack, Volcano tier 1), required: scheduler-plugins: nothing "
            "written: its gang (method podgroup) has no topology words") in plugins.reasons


def test_a_jobsets_volcano_podgroup_carries_the_network_topology():
    """Rule N5 on a JobSet's gang."""
    obj = jobset(rjob("w", replicas=2, parallelism=2, pod_spec={"schedulerName": "volcano"}))
    [pg] = mutate(obj, declared("block", gang=VOLCANO_GANG)).extra_objects
    assert pg["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}


# --- N6, N8: Kueue ------------------------------------------------------------------------------

def test_kueue_words_on_every_pod_template_of_a_kueue_managed_job_once():
    """Rule N6: required and preferred on each pod template of a queue-labelled job; a second admission is an
    empty patch; what is written passes the port of Kueue's checks."""
    for mode, key in (("required", REQUIRED_TOPOLOGY), ("preferred", PREFERRED_TOPOLOGY)):
        config = declared("rack", mode, gang={"method": "labels", "scheduler": "ack"})
        result = mutate(kueue_job(), config)
        for name, spec in result.object["spec"]["tfReplicaSpecs"].items():
            annotations = spec["template"]["metadata"]["annotations"]
            assert annotations == {key: "example.com/rack"}
            assert validate_podset_annotations(annotations, FieldPath("spec", name, "metadata")) == []
        assert (f"topology.gangs.within rack (example.com/rack, Volcano tier 1), {mode}: Kueue: {key}: "
                "example.com/rack on the pod templates of PS, Worker") in result.reasons
        assert mutate(result.object, config).patch == []
        assert job_errors(result.object) == []   # training-operator's TFJob CRD (../shared/schemas)


def test_kueue_words_are_not_written_on_a_job_kueue_does_not_manage():
    result = mutate(tfjob(workers=3), declared("rack", gang={"method": "labels", "scheduler": "ack"}))
    assert all("kueue" not in str(op) for op in result.patch)
    assert ("topology.gangs.within rack (example.com/rack, Volcano tier 1), required: Kueue: "
            "kueue.x-k8s.io/podset-required-topology not written: the object has no kueue.x-k8s.io/queue-name label, "
            "and Kueue reads its podset annotations only on the jobs it manages") in result.reasons


def test_a_users_own_kueue_placement_is_kept_with_a_warning_when_it_disagrees():
    """Rule N8."""
    job = kueue_job()
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {PREFERRED_TOPOLOGY: "example.com/block"}}
    result = mutate(job, declared("rack", gang={"method": "labels", "scheduler": "ack"}))
    specs = result.object["spec"]["tfReplicaSpecs"]
    assert specs["Worker"]["template"]["metadata"]["annotations"] == {PREFERRED_TOPOLOGY: "example.com/block"}
    assert specs["PS"]["template"]["metadata"]["annotations"] == {REQUIRED_TOPOLOGY: "example.com/rack"}
    assert ("Worker: keeps its own Kueue placement (kueue.x-k8s.io/podset-preferred-topology: example.com/block); "
            "topology.gangs.within says kueue.x-k8s.io/podset-required-topology: example.com/rack") in result.warnings


def test_a_null_metadata_or_annotations_reads_as_empty_and_the_patch_applies():
    """Rule N6: a template whose metadata or annotations are null gets the word; the patch turns the object into
    the mutated one (RFC 6902, applied by jsonpatch)."""
    import jsonpatch
    job = kueue_job()
    job["spec"]["tfReplicaSpecs"]["PS"]["template"]["metadata"] = None
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"] = {"annotations": None}
    result = mutate(job, declared("rack", gang={"method": "workload", "scheduler": "kube-scheduler"}), facts=on(37))
    assert jsonpatch.apply_patch(job, result.patch) == result.object
    for spec in result.object["spec"]["tfReplicaSpecs"].values():
        assert spec["template"]["metadata"]["annotations"] == {REQUIRED_TOPOLOGY: "example.com/rack"}


def test_on_update_kueue_words_are_only_the_stored_ones():
    """Rule N6: a re-applied manifest without the annotation gets the stored one back; a job stored without one
    gets none."""
    config = declared("rack", gang={"method": "labels", "scheduler": "ack"})
    stored = mutate(kueue_job(), config).object
    reapplied = copy.deepcopy(stored)
    del reapplied["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][REQUIRED_TOPOLOGY]
    back = mutate(reapplied, config, old=stored)
    assert back.object["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][
        REQUIRED_TOPOLOGY] == "example.com/rack"
    bare = kueue_job()
    none = mutate(bare, config, old=bare)
    assert all("kueue" not in str(op) for op in none.patch)
    assert ("topology.gangs.within rack (example.com/rack, Volcano tier 1), required: Kueue: UPDATE: "
            "kueue.x-k8s.io/podset-required-topology not added (only a stored value is kept)") in none.reasons


def test_a_jobsets_kueue_words_are_on_its_replicated_jobs_pod_templates_and_valid_in_its_crd():
    obj = jobset(rjob("leader"), rjob("workers", replicas=2, parallelism=2), meta={"labels": dict(QUEUE)})
    result = mutate(obj, declared("block", "preferred", gang={"method": "labels", "scheduler": "ack"}))
    for rj in result.object["spec"]["replicatedJobs"]:
        assert rj["template"]["spec"]["template"]["metadata"]["annotations"][PREFERRED_TOPOLOGY] == "example.com/block"
    assert list(file_validator(JOBSET_CRD, "v1alpha2").iter_errors(result.object)) == []


@pytest.mark.parametrize("annotations,expected", [
    ({REQUIRED_TOPOLOGY: "example.com/rack"}, []),
    ({REQUIRED_TOPOLOGY: "example.com/rack", PREFERRED_TOPOLOGY: "example.com/rack"},
     ['m.annotations: Invalid value: must not contain more than one topology annotation: '
      '["kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology", '
      '"kueue.x-k8s.io/podset-unconstrained-topology"]']),
    ({PREFERRED_TOPOLOGY: "a b"}, ["m.annotations[kueue.x-k8s.io/podset-preferred-topology]: Invalid value: \"a b\": "
                                   "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                                   "start and end with an alphanumeric character"]),
    ({"kueue.x-k8s.io/podset-unconstrained-topology": "yes"},
     ['m.annotations[kueue.x-k8s.io/podset-unconstrained-topology]: Invalid value: "yes": must be a boolean value']),
    ({"kueue.x-k8s.io/podset-slice-required-topology": "example.com/rack"},
     ["m.annotations[kueue.x-k8s.io/podset-slice-size]: Required value: must be set when "
      "'kueue.x-k8s.io/podset-slice-required-topology' is specified"]),
    ({"kueue.x-k8s.io/podset-slice-size": "0", "kueue.x-k8s.io/podset-slice-required-topology": "example.com/rack"},
     ['m.annotations[kueue.x-k8s.io/podset-slice-size]: Invalid value: "0": must be greater than or equal to 1']),
    ({"kueue.x-k8s.io/podset-group-name": "12"},
     ['m.annotations[kueue.x-k8s.io/podset-group-name]: Invalid value: "12": must not be a number',
      "m.annotations[kueue.x-k8s.io/podset-group-name]: Forbidden: may not be set when neither "
      "'kueue.x-k8s.io/podset-preferred-topology' nor 'kueue.x-k8s.io/podset-required-topology' is specified"]),
])
def test_the_port_of_kueues_podset_checks(annotations, expected):
    """Kueue v0.19.2 ValidateTASPodSetRequest, on the cases its own tests cover."""
    assert [str(e) for e in validate_podset_annotations(annotations, FieldPath("m"))] == expected


# --- N7: JobSet -----------------------------------------------------------------------------------

def test_jobset_words_from_job_per_domain_keep_the_deadlock_rule():
    """Rule N7 (and J5): jobPerDomain is the exclusive-topology annotation, only where it cannot deadlock."""
    config = {"topology": {"levels": LEVELS, "jobSets": {"jobPerDomain": "rack"}},
              "gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}
    single = mutate(jobset(rjob("w", replicas=4)), config)
    assert single.object["metadata"]["annotations"] == {EXCLUSIVE_TOPOLOGY: "example.com/rack"}
    assert (f"metadata.annotations {EXCLUSIVE_TOPOLOGY}: example.com/rack: each Job alone in one example.com/rack "
            "domain (topology.jobSets.jobPerDomain rack: topology.levels[2] nodeLabel example.com/rack; enforced by "
            "JobSet's pod webhooks)") in single.reasons
    multi = mutate(jobset(rjob("w", replicas=2, parallelism=2)), config)
    assert "annotations" not in multi.object["metadata"]
    assert multi.warnings[0].startswith("topology.jobSets.jobPerDomain example.com/rack: not written: the Jobs of w "
                                        "(2 pods per Job) would deadlock")


# --- TrainJobs: the runtime patch and the PodGroup ----------------------------------------------

def test_a_trainjobs_words_are_in_its_runtime_patch_and_podgroup_valid_in_trainers_crd():
    """Rules N5 and N6 on a TrainJob: Kueue's word in policylib's runtime patch (pod template annotations of each
    replicated job), Volcano's on the PodGroup; the TrainJob stays valid in Trainer v2.3.0's CRD; a runtime's own
    Kueue placement is kept."""
    from policylib.facts import ClusterFacts
    from tests.test_trainjob import TORCH, TRAINJOB_CRD, trainjob
    facts = ClusterFacts.from_objects([TORCH])
    obj = trainjob()
    obj["metadata"]["labels"] = dict(QUEUE)
    result = mutate(obj, declared("rack", "preferred", gang=VOLCANO_GANG), facts=facts)
    [patch] = result.object["spec"]["runtimePatches"]
    [node] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert node["template"]["spec"]["template"]["metadata"] == {"annotations": {
        "scheduling.k8s.io/group-name": "llama", PREFERRED_TOPOLOGY: "example.com/rack"}}
    assert result.extra_objects[0]["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 1}
    assert ("topology.gangs.within rack (example.com/rack, Volcano tier 1), preferred: Kueue: "
            "kueue.x-k8s.io/podset-preferred-topology: example.com/rack on the pod templates of node (runtime patch)"
            ) in result.reasons
    assert list(file_validator(TRAINJOB_CRD, "v1alpha1").iter_errors(result.object)) == []
    assert mutate(result.object, declared("rack", "preferred", gang=VOLCANO_GANG), facts=facts).patch == []
    runtime = copy.deepcopy(TORCH)
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {
        "annotations": {REQUIRED_TOPOLOGY: "example.com/block"}}
    own = mutate(obj, declared("rack", gang=VOLCANO_GANG), facts=ClusterFacts.from_objects([runtime]))
    [patch] = own.object["spec"]["runtimePatches"]
    assert REQUIRED_TOPOLOGY not in str(patch)
    assert own.warnings[-1:] == ["node: keeps its own Kueue placement (kueue.x-k8s.io/podset-required-topology: "
                            "example.com/block); topology.gangs.within says kueue.x-k8s.io/podset-required-topology: "
                            "example.com/rack"]


# --- N9: preview -v -----------------------------------------------------------------------------

def test_preview_verbose_says_which_words_were_written_for_which_scheduler_and_why(tmp_path):
    """Rule N9: one reason per decision, per scheduler: Volcano's PodGroup words, Kueue's annotation, JobSet's
    exclusive placement refused (a warning naming the deadlock)."""
    import io

    import yaml

    from policylib.cli import main
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({**declared("rack", gang=VOLCANO_GANG),
                                   "topology": {"levels": LEVELS, "gangs": {"within": "rack"},
                                                "jobSets": {"jobPerDomain": "rack"}}}))
    src = tmp_path / "js.yaml"
    src.write_text(yaml.safe_dump(jobset(rjob("workers", replicas=2, parallelism=2,
                                              pod_spec={"schedulerName": "volcano"}), meta={"labels": dict(QUEUE)})))
    out, err = io.StringIO(), io.StringIO()
    assert main(["preview", "--config", str(cfg), "-f", str(src), "-o", "diff", "-v"], stdout=out, stderr=err) == 0
    where = f"policylib: {src}: JobSet ml/train: "
    assert err.getvalue().splitlines() == [
        f"policylib: warning: {src}: JobSet ml/train: topology.jobSets.jobPerDomain example.com/rack: not written: "
        "the Jobs of workers (2 pods per Job) would deadlock (JobSet's pod webhook creates a Job's other pods only "
        "once its first pod is bound, and the gang binds none until all exist); it is written only where every Job "
        "of a gang has one pod",
        where + "start waves (no dependsOn: all start together): 1: workers (4 pods, gang train)",
        where + "method podgroup, scheduler volcano: gang train (min-available 4 of 4 pods: workers)",
        where + "topology.gangs.within rack (example.com/rack, Volcano tier 1), required: Volcano: PodGroup "
                "spec.networkTopology {mode: hard, highestTierAllowed: 1} (rack is tier 1)",
        where + "topology.gangs.within rack (example.com/rack, Volcano tier 1), required: Kueue: "
                "kueue.x-k8s.io/podset-required-topology: example.com/rack on the pod templates of workers"]
    assert "+              kueue.x-k8s.io/podset-required-topology: example.com/rack" in out.getvalue().splitlines()
    assert "+    highestTierAllowed: 1" in out.getvalue().splitlines()


# --- N10: check --cluster -----------------------------------------------------------------------

def _node(name, **labels):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "z1", **labels}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


def _pod(name, image, namespace="kube-system"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": image}]}, "status": {"phase": "Running"}}


def _hypernode(name, tier):
    return {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode", "metadata": {"name": name},
            "spec": {"tier": tier, "members": []}}


def test_check_on_a_cluster_names_the_readers_and_warns_of_words_nobody_reads():
    """Rule N10: the readers found (Pods by their upstream names or images, served APIs, HyperNodes), and a warning
    for a level no Node carries, Kueue words without Kueue, jobPerDomain without JobSet, a Volcano tier no
    HyperNode has."""
    from policylib.check import check
    config = {"topology": {"levels": LEVELS, "gangs": {"within": "rack"}, "jobSets": {"jobPerDomain": "rack"}},
              "gang": VOLCANO_GANG}
    nodes = [_node("n1", **{"example.com/rack": "r1"}), _node("n2", **{"example.com/rack": "r2"})]
    objects = [_pod("kubeflow-trainer-controller-manager-7d9-x", "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0",
                    "kubeflow-system"), _hypernode("rack-1", 2), volcano_job() | {"metadata": {
                        "name": "train", "namespace": "ml", "labels": dict(QUEUE)}}]
    served = ["trainer.kubeflow.org/v1alpha1", "topology.volcano.sh/v1alpha1", "scheduling.volcano.sh/v1beta1"]
    found = [(f.severity, f.key, f.message) for f in check(config, nodes, objects, served_apis=served)
             if f.key.startswith("topology")]
    assert found == [
        ("warning", "topology.levels[1]", "level block: no Node carries the label example.com/block: no scheduler can "
                                          "place anything within one block"),
        ("warning", "topology.gangs.within", "Kueue's podset topology annotations are written on 1 queue-labelled "
                                             "job(s) (TFJob ml/train), but this cluster runs no Kueue: nobody reads "
                                             "them"),
        ("warning", "topology.jobSets.jobPerDomain", "JobSet's exclusive-topology annotation is enforced by JobSet's "
                                                     "pod webhooks, but this cluster runs no JobSet controller: "
                                                     "nobody reads it"),
        ("warning", "topology.gangs.within", "rack is Volcano tier 1 in topology.levels, but no HyperNode has tier 1 "
                                             "(their tiers: 2): the declared levels disagree with the HyperNodes"),
        ("info", "topology", "readers of topology words this cluster runs: Trainer (Pod kubeflow-system/"
                             "kubeflow-trainer-controller-manager-7d9-x running, API trainer.kubeflow.org/v1alpha1 "
                             "served); Volcano network topology (API topology.volcano.sh/v1alpha1 served, 1 "
                             "HyperNode(s))")]
    everyone = objects[:2] + [_hypernode("rack-a", 1), _pod("kueue-controller-manager-1", "registry.k8s.io/kueue/kueue:v0.19.2"),
                              _pod("jobset-controller-manager-2", "registry.k8s.io/jobset/jobset:v0.12.0")]
    nodes = [_node("n1", **{"example.com/rack": "r1", "example.com/block": "b1"})]
    quiet = [f.severity for f in check(config, nodes, everyone, served_apis=served) if f.key.startswith("topology")]
    assert quiet == ["info"]
    assert not [f for f in check(config, nodes, everyone) if f.key.startswith("topology")]   # not a live cluster


def test_a_trainjob_whose_runtime_makes_the_volcano_podgroup_gets_the_words_named_for_the_runtime():
    """Rule N5: Trainer's own Volcano PodGroup (runtime podGroupPolicy.volcano) takes networkTopology from the
    runtime, which a TrainJob cannot patch: a warning naming what to set there, or a reason when it says so already."""
    from policylib.facts import ClusterFacts
    from tests.test_trainjob import TORCH, trainjob
    runtime = copy.deepcopy(TORCH)
    runtime["spec"]["podGroupPolicy"] = {"volcano": {}}
    config = declared("block", gang=VOLCANO_GANG)
    result = mutate(trainjob(), config, facts=ClusterFacts.from_objects([runtime]))
    assert (result.patch, result.extra_objects) == ([], [])
    assert result.warnings == [
        "topology.gangs.within block (example.com/block, Volcano tier 2), required: Volcano: networkTopology not "
        "written: Trainer's PodGroup takes it from the runtime's podGroupPolicy.volcano.networkTopology, which a "
        "TrainJob cannot patch: set {mode: hard, highestTierAllowed: 2} there"]
    runtime["spec"]["podGroupPolicy"]["volcano"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 2}
    said = mutate(trainjob(), config, facts=ClusterFacts.from_objects([runtime]))
    assert said.warnings == []
    assert said.reasons[-1] == ("topology.gangs.within block (example.com/block, Volcano tier 2), required: Volcano: "
                                "the runtime's podGroupPolicy.volcano.networkTopology says {mode: hard, "
                                "highestTierAllowed: 2} already (Trainer copies it to its PodGroup)")


#: Kueue v0.19.2's Topology CRD, from its Go module (`go mod download sigs.k8s.io/kueue@v0.19.2`).
KUEUE_TOPOLOGY_CRD = Path("/root/go/pkg/mod/sigs.k8s.io/kueue@v0.19.2/config/components/crd/bases/"
                          "kueue.x-k8s.io_topologies.yaml")


def _kueue_topology(name, *labels):
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": label} for label in labels]}}


def test_check_compares_the_declared_levels_with_kueues_topologies():
    """Rule N10: a Kueue Topology whose levels run in another order, and a gang level no Topology has (Kueue keeps
    such workloads inadmissible), are warnings; the Topologies read are Kueue v0.19.2's shape (its CRD)."""
    from policylib.check import check
    validator = file_validator(KUEUE_TOPOLOGY_CRD, "v1beta2")
    swapped = _kueue_topology("dc", "topology.kubernetes.io/zone", "example.com/rack", "example.com/block")
    same = _kueue_topology("default", "topology.kubernetes.io/zone", "example.com/block", "kubernetes.io/hostname")
    for topology in (swapped, same):
        assert list(validator.iter_errors(topology)) == []
    nodes = [_node("n1", **{"example.com/rack": "r1", "example.com/block": "b1"})]
    served = ["kueue.x-k8s.io/v1beta2"]
    found = [(f.severity, f.key, f.message) for f in check(declared("rack"), nodes, [swapped, same], served_apis=served)
             if f.key.startswith("topology") and f.severity == "warning"]
    assert found == [("warning", "topology.levels", "Kueue Topology dc orders its levels topology.kubernetes.io/zone, "
                                                    "example.com/rack, example.com/block; topology.levels orders them "
                                                    "topology.kubernetes.io/zone, example.com/block, example.com/rack")]
    only_same = [(f.key, f.message) for f in check(declared("rack"), nodes, [same], served_apis=served)
                 if f.severity == "warning" and f.key.startswith("topology")]
    assert only_same == [("topology.gangs.within", "example.com/rack is a level of no Kueue Topology (default): Kueue "
                                                   "keeps the workloads that ask for it inadmissible (no requested "
                                                   "topology level)")]


def test_check_cluster_reads_kueues_topologies_where_the_declaration_is_given(tmp_path):
    """Rule N10 through ``check --cluster``: with a declared topology the CLI lists Kueue's Topologies (served by
    the fake API server as Kueue v0.19.2 serves them) and the findings name what disagrees."""
    import io
    import json

    from policylib.cli import main
    from tests.fakeapi import FakeAPI, paged_list
    from tests.test_installed import NAMESPACES, install
    swapped = _kueue_topology("dc", "topology.kubernetes.io/zone", "example.com/rack", "example.com/block")
    node = _node("n1", **{"example.com/rack": "r1", "example.com/block": "b1"})
    with FakeAPI() as api:
        install(api, {"rel": ("policylib", declared("rack"))}, [], NAMESPACES)
        api.route("GET", "/apis/kueue.x-k8s.io/v1beta2/topologies", paged_list("Topology", [swapped], 500))
        api.route("GET", "/api/v1/nodes", paged_list("Node", [node], 500))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
        api.route("GET", "/version", (200, {"gitVersion": "v1.37.0"}))
        api.route("GET", "/apis", (200, {"kind": "APIGroupList", "groups": [
            {"name": "kueue.x-k8s.io", "versions": [{"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}]}]}))
        out, err = io.StringIO(), io.StringIO()
        code = main(["check", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"), "-o", "json"],
                    io.StringIO(), out, err)
    assert code == 0, err.getvalue()
    assert [f for f in json.loads(out.getvalue()) if f["key"].startswith("topology")] == [
        {"severity": "warning", "key": "topology.levels",
         "message": "Kueue Topology dc orders its levels topology.kubernetes.io/zone, example.com/rack, "
                    "example.com/block; topology.levels orders them topology.kubernetes.io/zone, example.com/block, "
                    "example.com/rack"},
        {"severity": "info", "key": "topology",
         "message": "readers of topology words this cluster runs: Kueue (API kueue.x-k8s.io/v1beta2 served)"}]


def test_a_jobsets_own_exclusive_topology_is_kept_with_a_warning_when_it_names_another_level():
    """Rules N8 and J5."""
    config = {"topology": {"levels": LEVELS, "jobSets": {"jobPerDomain": "rack"}}}
    mine = jobset(rjob("w", replicas=4), meta={"annotations": {EXCLUSIVE_TOPOLOGY: "example.com/block"}})
    result = mutate(mine, config)
    assert result.object["metadata"]["annotations"] == {EXCLUSIVE_TOPOLOGY: "example.com/block"}
    assert result.warnings == [f"{EXCLUSIVE_TOPOLOGY} is kept as the JobSet sets it (example.com/block); "
                               "topology.jobSets.jobPerDomain says example.com/rack"]
    agreeing = jobset(rjob("w", replicas=4), meta={"annotations": {EXCLUSIVE_TOPOLOGY: "example.com/rack"}})
    assert mutate(agreeing, config).warnings == []


def test_a_kueue_managed_trainjob_without_policylibs_runtime_patch_says_why_kueues_word_is_missing():
    """Rule N6: no runtime patch of policylib's (the runtime's podGroupPolicy, no gang), no Kueue word: a reason."""
    from policylib.facts import ClusterFacts
    from tests.test_trainjob import TORCH, trainjob
    runtime = copy.deepcopy(TORCH)
    runtime["spec"]["podGroupPolicy"] = {"coscheduling": {}}
    obj = trainjob()
    obj["metadata"]["labels"] = dict(QUEUE)
    config = declared("rack", gang={"method": "podgroup", "scheduler": "scheduler-plugins"})
    result = mutate(obj, config, facts=ClusterFacts.from_objects([runtime]))
    assert result.reasons[-1] == ("topology.gangs.within rack (example.com/rack, Volcano tier 1), required: Kueue: "
                                  "kueue.x-k8s.io/podset-required-topology not written: policylib writes no runtime "
                                  "patch for this TrainJob (its runtime has podGroupPolicy.coscheduling)")
    single = trainjob(num_nodes=1)
    single["metadata"]["labels"] = dict(QUEUE)
    assert mutate(single, config, facts=ClusterFacts.from_objects([TORCH])).reasons[-1].endswith(
        "policylib writes no runtime patch for this TrainJob (no gang)")
