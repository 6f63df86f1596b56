"""Loud where silence hurts: ``preview``'s warnings about the input itself (rules D1, D2) and their exit
status 4 under ``--exit-code`` (D4), the gang scheduler note (D3), a softened required anti-affinity, and
``check --cluster``'s gang schedulers (D5)."""
import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from policylib import load_config
from policylib.check import check
from policylib.notices import gang_scheduler_note, hpa_target_warnings, unknown_field_warning, unknown_fields
from policylib.schedulers import gang_scheduler_findings, running_gang_schedulers
from policylib.shell import schemas
from tests.helpers import deployment, hpa, legacy_anti_affinity

POLICYLIB = str(Path(sys.executable).parent / "policylib")
SOFT = {"hostTopologySpread": {"enforceForRequiredAntiAffinity": False}}


def preview(tmp_path, *objs, config=None, args=("--exit-code",)):
    f = tmp_path / "in.yaml"
    f.write_text("---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objs))
    cfg = []
    if config is not None:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        cfg = ["--config", str(tmp_path / "config.yaml")]
    run = subprocess.run([POLICYLIB, "preview", *cfg, "-f", str(f), "-o", "patch", *args], capture_output=True,
                         text=True, timeout=60)
    return run.returncode, run.stderr.replace(str(f), "in.yaml")


def typo(d: dict) -> dict:
    d = copy.deepcopy(d)
    d["spec"]["replica"] = d["spec"].pop("replicas")
    return d


# --- rule D2: unknown fields --------------------------------------------------------------------------

def test_a_misspelt_replicas_is_named_as_an_unknown_field_and_exits_4(tmp_path):
    code, err = preview(tmp_path, typo(deployment(replicas=5)))
    assert code == 4
    minor = ".".join(schemas.kubernetes_version().split(".")[:2])
    assert err == (f'policylib: warning: in.yaml: Deployment ml/web: unknown field "spec.replica" (did you mean '
                   f'"spec.replicas"?): not in the Kubernetes {minor} API, so the API server refuses the object under '
                   "kubectl's default strict field validation; policylib reads the object without it\n")
    code, err = preview(tmp_path, typo(deployment(replicas=5)), args=())
    assert code == 0 and "unknown field \"spec.replica\"" in err   # warned, exit 0 without --exit-code
    assert preview(tmp_path, deployment(replicas=5)) == (1, "")   # a valid object: only "would change"


def test_every_unknown_field_is_named_with_its_path_and_maps_take_any_key():
    d = deployment()
    d["metadata"]["labels"] = {"any-key": "x"}                       # a map: any key is a field
    d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    d["spec"]["template"]["spec"]["containers"].append({"name": "b", "image": "x", "port": 80})
    d["spec"]["template"]["metadata"]["annotation"] = {"a": "b"}
    d["status"] = {"replicas": 1}
    schema = schemas.kind_schema("Deployment", "apps/v1")
    paths = unknown_fields(d, schema, schemas.definitions())
    assert paths == ["spec.template.metadata.annotation", "spec.template.spec.containers[0].imagePullPolicyy",
                     "spec.template.spec.containers[1].port"]
    message = unknown_field_warning(paths, "1.37.0", schema, schemas.definitions())
    assert message.startswith('unknown field "spec.template.metadata.annotation" (did you mean '
                              '"spec.template.metadata.annotations"?); unknown field '
                              '"spec.template.spec.containers[0].imagePullPolicyy" (did you mean '
                              '"spec.template.spec.containers[0].imagePullPolicy"?); unknown field '
                              '"spec.template.spec.containers[1].port" (did you mean '
                              '"spec.template.spec.containers[1].ports"?): not in the Kubernetes 1.37 API')


def test_custom_resources_and_other_groups_of_the_same_short_name_have_no_schema():
    assert schemas.kind_schema("TFJob", "kubeflow.org/v1") is None
    assert schemas.kind_schema("PodGroup", "scheduling.x-k8s.io/v1alpha1") is None
    assert schemas.kind_schema("Deployment", "example.com/v1") is None
    assert schemas.kind_schema("Pod", "v1") is not None
    assert schemas.kind_schema("HorizontalPodAutoscaler", "autoscaling/v2") is not None


# --- rule D1: an HPA whose target is not in the input ---------------------------------------------------

def test_an_hpa_whose_deployment_is_not_in_the_input_warns_and_exits_4(tmp_path):
    code, err = preview(tmp_path, deployment(replicas=3), hpa("wbe", 6, name="web"))
    assert code == 4
    assert err == ("policylib: warning: in.yaml: HorizontalPodAutoscaler ml/web: spec.scaleTargetRef: Deployment "
                   "ml/wbe is not in the input (did you mean web?): its minReplicas sets the replica count of no "
                   "object here\n")
    assert preview(tmp_path, deployment(replicas=3), hpa("web", 6)) == (1, "")
    code, err = preview(tmp_path, deployment(replicas=3), hpa("web", 6, namespace="other"), args=("-v",))
    assert code == 0 and "HorizontalPodAutoscaler other/web: spec.scaleTargetRef: Deployment other/web is not in " \
                         "the input: its minReplicas" in err


def test_hpa_target_warnings_match_kind_namespace_and_name():
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "ml"}}
    to_sts = hpa("db", 2)
    to_sts["spec"]["scaleTargetRef"]["kind"] = "StatefulSet"
    objs = [deployment(), sts, hpa("web", 2), to_sts, hpa("db", 2, name="db-as-deploy")]
    assert [(h["metadata"]["name"], m.split(":")[1].strip()) for h, m in hpa_target_warnings(objs)] == [
        ("db-as-deploy", "Deployment ml/db is not in the input")]


# --- S18 and S10: a required anti-affinity the policy would soften ----------------------------------------

def test_a_softened_required_anti_affinity_warns_and_exits_4_and_the_default_keeps_it_hard(tmp_path):
    legacy = deployment(replicas=4, pod_spec={"containers": [{"name": "app", "image": "x"}],
                                              "affinity": legacy_anti_affinity({"app": "web"})})
    code, err = preview(tmp_path, legacy, config=SOFT)
    assert code == 4
    assert err == ("policylib: warning: in.yaml: Deployment ml/web: required anti-affinity removed; host spread only "
                   "preferred: set hostTopologySpread.enforceForRequiredAntiAffinity: true\n")
    assert preview(tmp_path, legacy) == (1, "")


def test_check_names_every_deployment_whose_required_anti_affinity_becomes_a_preference():
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "labels": {
        "kubernetes.io/hostname": f"n{i}", "topology.kubernetes.io/zone": "a"}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}} for i in range(4)]
    legacy = [deployment(name=f"d{i}", replicas=2, pod_spec={"containers": [{"name": "app", "image": "x"}],
                                                             "affinity": legacy_anti_affinity({"app": f"d{i}"})})
              for i in range(7)]
    [f] = [f for f in check(SOFT, nodes, legacy) if f.key == "hostTopologySpread.enforceForRequiredAntiAffinity"]
    assert f.message.startswith("7 Deployment(s) lose a required pod anti-affinity to a host spread that is only a "
                                "preference (ml/d0, ml/d1, ml/d2, ml/d3, ml/d4, ml/d5, ml/d6): their replicas may "
                                "share a node; set hostTopologySpread.enforceForRequiredAntiAffinity: true")
    off = {"hostTopologySpread": {"enabled": False}}   # enforcement on, but no host spread at all
    [f] = [f for f in check(off, nodes, legacy[:1]) if f.key == "hostTopologySpread.enforceForRequiredAntiAffinity"]
    assert "(ml/d0)" in f.message and "enable hostTopologySpread to keep the rule hard" in f.message
    assert not [f for f in check(None, nodes, legacy) if f.key.endswith("enforceForRequiredAntiAffinity")]


# --- rule D4: which exit status wins ------------------------------------------------------------------

def test_a_denial_outranks_a_warning_which_outranks_a_change(tmp_path):
    tf = tfjob("default-scheduler")
    tf["spec"]["tfReplicaSpecs"]["PS"] = copy.deepcopy(tf["spec"]["tfReplicaSpecs"]["Worker"])
    tf["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]["priorityClassName"] = "high"
    code, err = preview(tmp_path, tf, typo(deployment()), config={"gang": {"onViolation": "deny"}})
    assert code == 3 and "unknown field" in err and "policylib: denied:" in err
    assert preview(tmp_path, typo(deployment()), deployment(name="b"))[0] == 4


# --- rule D3: gang metadata for a scheduler the input does not name ----------------------------------------

def tfjob(scheduler: str | None) -> dict:
    spec = {"containers": [{"name": "tensorflow", "image": "x"}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf", "namespace": "ml"},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": spec}}}}}


def test_gang_metadata_for_a_scheduler_the_input_does_not_name_gets_a_note_and_no_exit_status(tmp_path):
    code, err = preview(tmp_path, tfjob(None))
    assert code == 1   # a note is not a warning
    assert err == ("policylib: note: in.yaml: TFJob ml/tf: gang.scheduler ack: the gang metadata written is read "
                   "only by ACK's scheduler, the default scheduler of an Alibaba Cloud ACK cluster, which no input "
                   "names: on any other cluster no scheduler reads it and the job's pods start one by one (`policylib "
                   "check --cluster` names the gang schedulers a cluster runs)\n")
    plugins = {"gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}}
    code, err = preview(tmp_path, tfjob(None), config=plugins)
    assert err == ("policylib: note: in.yaml: TFJob ml/tf: gang.scheduler scheduler-plugins: the gang metadata "
                   "written is read only by scheduler-plugins' Coscheduling scheduler, and the replica templates name "
                   "default-scheduler, not scheduler-plugins-scheduler: the job's pods start one by one (set "
                   "spec.schedulerName: scheduler-plugins-scheduler in the templates, or the gang settings for the "
                   "scheduler they name)\n")
    assert preview(tmp_path, tfjob("scheduler-plugins-scheduler"), config=plugins) == (1, "")


@pytest.mark.parametrize("scheduler,names,noted", [
    ("koordinator", "koord-scheduler", False), ("koordinator", None, True),
    ("scheduler-plugins", "scheduler-plugins-scheduler", False), ("scheduler-plugins", "volcano", True),
    ("kube-scheduler", None, False), ("ack", None, True),
    ("volcano", None, False)])   # Volcano's own warning (rule G21) says it
def test_gang_scheduler_note_by_scheduler(scheduler, names, noted):
    assert (gang_scheduler_note(tfjob(names), scheduler) is not None) == noted


# --- rule D5: the gang schedulers a cluster runs ----------------------------------------------------------

def pod(name, image, phase="Running", namespace="sched"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "s", "image": image}]}, "status": {"phase": phase}}


def test_running_gang_schedulers_from_pods_served_apis_and_ack_nodes():
    objs = [pod("volcano-scheduler-5f7-x", "docker.io/volcanosh/vc-scheduler:v1.12.0"),
            pod("sched-0", "registry.k8s.io/scheduler-plugins/kube-scheduler:v0.31.8"),
            pod("koord-scheduler-1", "x", phase="Pending"),                 # not running
            pod("web", "nginx")]
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {
        "alibabacloud.com/nodepool-id": "np1"}}}]
    served = ["apps/v1", "scheduling.k8s.io/v1", "scheduling.volcano.sh/v1beta1", "scheduling.sigs.k8s.io/v1alpha1"]
    assert running_gang_schedulers(objs, nodes, served) == {
        "ack": ["1 Node(s) labelled alibabacloud.com/nodepool-id"],
        "koordinator": ["API scheduling.sigs.k8s.io served"],
        "scheduler-plugins": ["Pod sched/sched-0 running"],
        "volcano": ["Pod sched/volcano-scheduler-5f7-x running", "API scheduling.volcano.sh served"]}
    assert running_gang_schedulers([], [], ["scheduling.k8s.io/v1alpha2"]) == {
        "kube-scheduler": ["API scheduling.k8s.io/v1alpha2 served"]}


def test_check_on_a_cluster_warns_when_the_configured_gang_scheduler_is_absent():
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {}},
              "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}]
    served = ["scheduling.volcano.sh/v1beta1"]
    found = [(f.severity, f.key, f.message) for f in check(None, nodes, [], served_apis=served) if f.key.startswith("gang.")]
    assert found == [
        ("warning", "gang.scheduler", "gang.scheduler: ack targets ACK's scheduler, which this cluster does not run: the "
                                      "gang metadata written for Kubeflow jobs is read by no scheduler and their pods "
                                      "start one by one; set for volcano, gang.method: podgroup, gang.scheduler: volcano"),
        ("info", "gang.scheduler", "gang schedulers this cluster runs: volcano (API scheduling.volcano.sh served)")]
    volcano = load_config({"gang": {"method": "podgroup", "scheduler": "volcano"}})
    assert [f.severity for f in check(volcano, nodes, [], served_apis=served) if f.key.startswith("gang.")] == ["info"]
    assert not [f for f in check(None, nodes, []) if f.key.startswith("gang.")]   # not a live cluster: not known
    operators = load_config({"gang": {"operatorGang": "scheduler-plugins"}})
    assert gang_scheduler_findings(operators, {})[1] == (
        "warning", "gang.operatorGang: scheduler-plugins targets scheduler-plugins' Coscheduling scheduler, which this "
                   "cluster does not run: the gang metadata written for Kubeflow jobs is read by no scheduler and "
                   "their pods start one by one; install a gang scheduler, or set gang.enabled: false")
    assert gang_scheduler_findings(load_config({"gang": {"enabled": False}}), {}) == [
        ("info", "gang schedulers this cluster runs: none")]


def test_check_cluster_reads_the_served_api_groups_and_the_scheduler_pods(tmp_path):
    """The CLI path of rule D5 against a recorded API: /apis, every Pod, the Nodes."""
    import json
    import os

    from tests.fakeapi import FakeAPI, paged_list
    node = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "a"}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}
    scheduler = pod("koord-scheduler-6d9-x", "ghcr.io/koordinator-sh/koord-scheduler:v1.6.0", namespace="koordinator")
    for o in (node, scheduler):
        o.pop("apiVersion", None), o.pop("kind", None)   # list items come without them
    groups = {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]},
        {"name": "scheduling.x-k8s.io", "versions": [{"groupVersion": "scheduling.x-k8s.io/v1alpha1",
                                                      "version": "v1alpha1"}]}]}
    with FakeAPI() as api:
        api.route("GET", "/apis", (200, groups))
        api.route("GET", "/version", (200, {"gitVersion": "v1.36.3"}))
        api.route("GET", "/api/v1/nodes", paged_list("Node", [node], 10))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [scheduler], 10))
        # what every cluster serves and check --cluster also reads (the installed config, the workloads): none here
        api.route("GET", "/apis/apps/v1/deployments", paged_list("Deployment", [], 10))
        api.route("GET", "/api/v1/configmaps", paged_list("ConfigMap", [], 10))
        api.route("GET", "/apis/autoscaling/v2/horizontalpodautoscalers", paged_list("HorizontalPodAutoscaler", [], 10))
        env = dict(os.environ, KUBECONFIG=api.kubeconfig(tmp_path / "kubeconfig"))
        run = subprocess.run([POLICYLIB, "check", "--cluster", "-o", "json"], capture_output=True, text=True, env=env,
                             timeout=60)
    assert run.returncode == 0, run.stderr
    gang = [(f["severity"], f["message"]) for f in json.loads(run.stdout) if f["key"] == "gang.scheduler"]
    assert gang == [
        ("warning", "gang.scheduler: ack targets ACK's scheduler, which this cluster does not run: the gang metadata "
                    "written for Kubeflow jobs is read by no scheduler and their pods start one by one; set for "
                    "koordinator, gang.scheduler: koordinator; or for scheduler-plugins, gang.method: podgroup, "
                    "gang.scheduler: scheduler-plugins"),
        ("info", "gang schedulers this cluster runs: koordinator (Pod koordinator/koord-scheduler-6d9-x running); "
                 "scheduler-plugins (API scheduling.x-k8s.io served)")]
