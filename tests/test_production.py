"""Production behaviour of the spread: rollouts only when the user rolls (rule S19), a required
anti-affinity kept hard by choice (rule S18), Deployments admitted without policylib (rule S20)."""
import copy

import pytest

from policylib import ConfigError, load_config, mutate
from policylib.plan import UNRECORDED_REASON, admitted_without_policy, plan, summarize
from policylib.spread import PENDING, RECORD_REPLICAS, RECORD_REQUIRED, pending_rewrite
from tests.controller_driver import deliver, log_entries, sync, work
from tests.helpers import deployment, legacy_anti_affinity
from tests.test_controller import Cluster, controller, record_events

HOST = "kubernetes.io/hostname"
ENFORCE = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}}
NEXT = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "rewrite": "OnNextRollout"}}
REQUIRED = {"hostTopologySpread": {"enforceForRequiredAntiAffinity": True}}
SOFT = {"hostTopologySpread": {"enforceForRequiredAntiAffinity": False}}


def host(d):
    return next(c for c in d["spec"]["template"]["spec"]["topologySpreadConstraints"] if c["topologyKey"] == HOST)


def annotations(d):
    return d["metadata"].get("annotations") or {}


def scaled(d, replicas):
    out = copy.deepcopy(d)
    out["spec"]["replicas"] = replicas
    return out


# --- settings -----------------------------------------------------------------------------------

def test_the_new_settings_defaults_and_reject_unknown_values():
    config = load_config(None)
    assert (config.host.rewrite, config.host.enforceForRequiredAntiAffinity) == ("OnCountChange", True)
    assert load_config(NEXT).host.rewrite == "OnNextRollout"
    with pytest.raises(ConfigError, match=r"hostTopologySpread.rewrite: must be one of OnCountChange, OnNextRollout; "
                                          r"got 'Never'"):
        load_config({"hostTopologySpread": {"rewrite": "Never"}})
    with pytest.raises(ConfigError, match="hostTopologySpread.enforceForRequiredAntiAffinity: must be true or false"):
        load_config({"hostTopologySpread": {"enforceForRequiredAntiAffinity": "yes"}})
    # rewrite decides when, not what: the record's fingerprint stays; the default (true) keeps the fingerprint
    # records had before the setting existed, and false is a setting of its own
    assert load_config(NEXT).spread_fingerprint() == load_config(ENFORCE).spread_fingerprint()
    assert load_config(REQUIRED).spread_fingerprint() == config.spread_fingerprint() == "5c0d6e4e4f28"
    assert load_config(SOFT).spread_fingerprint() != config.spread_fingerprint()


# --- rule S19: rewrite ----------------------------------------------------------------------------

def test_on_count_change_a_scale_up_rewrites_the_template_as_today():
    old = mutate(deployment(replicas=4), load_config(ENFORCE)).object
    r = mutate(scaled(old, 7), load_config(ENFORCE), old=old)
    assert host(r.object)["maxSkew"] == 3 and annotations(r.object)[RECORD_REPLICAS] == "7"
    assert PENDING not in annotations(r.object)


def test_on_next_rollout_a_scale_up_leaves_the_template_and_records_the_pending_change():
    config = load_config(NEXT)
    old = mutate(deployment(replicas=4), config).object
    r = mutate(scaled(old, 7), config, old=old)
    assert r.object["spec"]["template"] == old["spec"]["template"]          # no rollout
    assert all(op["path"].startswith("/metadata/annotations") for op in r.patch)
    assert annotations(r.object)[RECORD_REPLICAS] == "4"                      # what the template says
    assert pending_rewrite(r.object) == ("7 effective replicas (written for 4): kubernetes.io/hostname "
                                         "DoNotSchedule, maxSkew 2, minDomains 3 -> DoNotSchedule, maxSkew 3, "
                                         "minDomains 3")
    assert any("rewrite OnNextRollout: held until the pod template changes" in x for x in r.reasons)
    again = mutate(copy.deepcopy(r.object), config, old=r.object)            # idempotent: nothing more
    assert again.patch == []


def test_on_next_rollout_the_pending_constraints_ride_the_users_next_rollout():
    config = load_config(NEXT)
    old = mutate(deployment(replicas=4), config).object
    held = mutate(scaled(old, 7), config, old=old).object
    new_image = copy.deepcopy(held)
    new_image["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/app:2"
    r = mutate(new_image, config, old=held)
    assert host(r.object)["maxSkew"] == 3 and annotations(r.object)[RECORD_REPLICAS] == "7"
    assert PENDING not in annotations(r.object)
    # kubectl rollout restart changes only a template annotation: the user's way to ask for it now
    restart = copy.deepcopy(held)
    restart["spec"]["template"]["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "2026-12-01"}
    assert host(mutate(restart, config, old=held).object)["maxSkew"] == 3


def test_on_next_rollout_scaling_back_clears_the_pending_record_without_a_rollout():
    config = load_config(NEXT)
    old = mutate(deployment(replicas=4), config).object
    held = mutate(scaled(old, 7), config, old=old).object
    r = mutate(scaled(held, 4), config, old=held)
    assert r.object["spec"]["template"] == old["spec"]["template"]
    assert PENDING not in annotations(r.object) and annotations(r.object)[RECORD_REPLICAS] == "4"


def test_on_next_rollout_a_count_change_that_keeps_the_constraints_is_a_metadata_write():
    config = load_config(NEXT)
    old = mutate(deployment(replicas=4), config).object        # maxSkew ceil(4/3) = 2
    r = mutate(scaled(old, 5), config, old=old)               # ceil(5/3) = 2: nothing to hold
    assert r.object["spec"]["template"] == old["spec"]["template"]
    assert annotations(r.object)[RECORD_REPLICAS] == "5" and PENDING not in annotations(r.object)


def test_plan_under_on_next_rollout_writes_only_the_pending_record_after_a_scale_subresource_write():
    config = load_config(NEXT)
    stored = mutate(deployment(replicas=4), config).object
    stored["metadata"]["resourceVersion"] = "3"
    [w] = plan([scaled(stored, 7)], config)                   # kubectl scale: no admission review
    assert (w.rollout, w.action, w.pending is not None) == (False, "patch", True)
    assert [op["path"] for op in w.patch] == ["/metadata/annotations/policylib.io~1spread-pending"]
    assert "1 Deployment wait for their next rollout" in summarize([w])
    after = copy.deepcopy(scaled(stored, 7))
    after["metadata"]["annotations"][PENDING] = w.pending
    [again] = plan([after], config)                            # recorded already: listed, nothing written
    assert (again.action, again.patch, again.pending) == ("none", [], w.pending)
    [today] = plan([scaled(stored, 7)], load_config(ENFORCE))  # OnCountChange: one rollout, as before
    assert today.rollout and today.pending is None


def test_the_controller_records_a_pending_rewrite_once_with_an_event_and_a_gauge(tmp_path):
    from tests.fakeapi import FakeAPI
    stored = scaled(mutate(deployment(replicas=4), load_config(NEXT)).object, 7)
    stored["metadata"].update(resourceVersion="5", uid="uid-web")
    with FakeAPI() as api:
        cluster = Cluster(api, [stored])
        posted = record_events(api)
        c = controller(api, tmp_path, NEXT)
        c.elector.try_lead()
        sync(c)
        sync(c)                                              # nothing new: no second write, no second Event
    [patch] = cluster.patches()
    assert all(op["path"] in ("/metadata/resourceVersion", "/metadata/annotations/policylib.io~1spread-pending")
               for op in patch["body"])
    assert [(e["reason"], e["type"]) for e in posted] == [("SpreadPending", "Normal")]
    assert c.metrics.pending._value.get() == 1
    assert c.metrics.writes.labels("Deployment", "patch", "false", "false")._value.get() == 1


# --- rule S18: required anti-affinity -----------------------------------------------------------------

def legacy(replicas, preferred=False):
    return deployment(replicas=replicas, pod_spec={"containers": [{"name": "app", "image": "x"}],
                                                   "affinity": legacy_anti_affinity({"app": "web"},
                                                                                    preferred=preferred)})


@pytest.mark.parametrize("replicas,skew", [(1, 1), (2, 1), (4, 2), (7, 3)])
def test_a_replaced_required_anti_affinity_becomes_an_enforced_host_spread_at_any_count(replicas, skew):
    r = mutate(legacy(replicas), load_config(REQUIRED))
    c = host(r.object)
    assert (c["whenUnsatisfiable"], c["maxSkew"], c["minDomains"]) == ("DoNotSchedule", skew, 3)
    assert "affinity" not in r.object["spec"]["template"]["spec"] and r.warnings == []
    assert annotations(r.object)[RECORD_REQUIRED] == "true"


def test_the_record_keeps_it_enforced_when_a_later_count_change_rewrites_it():
    config = load_config(REQUIRED)
    old = mutate(legacy(2), config).object
    r = mutate(scaled(old, 5), config, old=old)
    assert (host(r.object)["whenUnsatisfiable"], host(r.object)["maxSkew"]) == ("DoNotSchedule", 2)


def test_preferred_anti_affinity_keeps_the_preference_and_false_softens_a_required_one():
    assert host(mutate(legacy(4, preferred=True), load_config(REQUIRED)).object)["whenUnsatisfiable"] == "ScheduleAnyway"
    assert host(mutate(legacy(4), load_config(None)).object)["whenUnsatisfiable"] == "DoNotSchedule"   # the default
    r = mutate(legacy(4), load_config(SOFT))
    assert host(r.object)["whenUnsatisfiable"] == "ScheduleAnyway"
    assert r.warnings == ["required anti-affinity removed; host spread only preferred: set "
                          "hostTopologySpread.enforceForRequiredAntiAffinity: true"]
    assert host(mutate(deployment(replicas=4), load_config(REQUIRED)).object)["whenUnsatisfiable"] == "ScheduleAnyway"


# --- rule S20: admitted without policylib --------------------------------------------------------------

def stored(d, uid="u1", namespace=None):
    d = copy.deepcopy(d)
    d["metadata"].update(uid=uid, resourceVersion="3", **({"namespace": namespace} if namespace else {}))
    return d


def test_a_stored_deployment_without_our_record_is_listed_and_manifests_never_are():
    config = load_config(None)
    raw = deployment(replicas=2)
    assert admitted_without_policy(stored(raw), config)
    assert not admitted_without_policy(raw, config)                                    # a manifest: no uid
    assert not admitted_without_policy(stored(raw, namespace="kube-system"), config)   # never sent to us
    assert not admitted_without_policy(stored(mutate(raw, config).object), config)     # carries the record
    [w] = plan([stored(raw)], config)
    assert (w.action, w.unrecorded, w.rollout, w.reasons) == ("none", True, False, [UNRECORDED_REASON])
    assert "1 Deployment without policylib's record" in summarize([w])


def test_the_controller_warns_once_about_an_unrecorded_deployment(tmp_path):
    from tests.fakeapi import FakeAPI
    with FakeAPI() as api:
        cluster = Cluster(api, [stored(deployment(replicas=2))])
        posted = record_events(api)
        c = controller(api, tmp_path)
        c.elector.try_lead()
        sync(c)
        sync(c)
    assert cluster.patches() == []
    assert [(e["reason"], e["type"], e["note"]) for e in posted] == [
        ("AdmittedWithoutPolicy", "Warning", UNRECORDED_REASON)]
    assert c.metrics.unrecorded._value.get() == 1 and c.metrics.unrecorded_seen._value.get() == 1


# --- one verdict: check includes what simulate reports ------------------------------------------------

def test_check_reports_an_error_for_every_workload_simulate_leaves_pending():
    """Differential over the end-to-end simulator scenarios' generator: whenever ``simulate`` would
    exit 3 for a scenario, ``check`` reports an error naming that Deployment."""
    import random
    import re

    from policylib.check import check
    from tests.e2e.test_simulate_differential import random_scenario
    rng, pending = random.Random(20), 0
    for i in range(150):
        s = random_scenario(rng, i)   # Nodes, bound Pods, several Deployments (as the webhook stores them)
        findings = check(s["config"], s["nodes"], [*s["prebound"], *s["deployments"]])
        for p in s["placements"]:
            ref = re.compile(rf"{re.escape(f'{p.namespace}/{p.name}')}(?![\w.-])")
            named = [f for f in findings if f.severity == "error" and ref.search(f.message)]
            if p.pending_max:
                pending += 1
                assert named, (s["id"], p.as_dict(), [f.as_dict() for f in findings])
            else:
                assert not [f for f in named if f.key == "simulate"], (s["id"], p.name)
    assert pending >= 20   # the generator does produce Pending scenarios


def test_check_names_partitions_no_hypernode_holds_as_simulate_does():
    from policylib.check import check
    from policylib.simulate import simulate
    from tests.test_volcano import DISCOVERY, seed_nodes
    config = {"volcano": {"partitionSize": 4, "networkTopologyDiscovery": DISCOVERY}}
    nodes = seed_nodes({"cpu": "8", "memory": "32Gi", "pods": "110"})
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
           "spec": {"tasks": [{"name": "t0", "replicas": 8, "template": {"spec": {"containers": [
               {"name": "c", "image": "x", "resources": {"requests": {"cpu": "8"}}}]}}}]}}
    [p] = simulate([job], nodes, config)
    assert p.pending_max == 8
    [f] = [f for f in check(config, nodes, [job]) if f.key == "simulate"]
    assert (f.severity, f.message) == ("error", "Job ml/train: 8 of its 8 replicas would stay Pending: task t0: 0 of "
                                                "minPartitions 2 partitions placeable: the gang binds nothing, all 8 "
                                                "pods stay Pending")


def test_check_names_the_deployments_that_lose_a_required_anti_affinity():
    from policylib.check import check
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}", "labels": {
        "kubernetes.io/hostname": f"n{i}", "topology.kubernetes.io/zone": "a"}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}} for i in range(4)]
    a, b = legacy(2), legacy(4, preferred=True)
    b["metadata"]["name"] = "b"
    findings = [f for f in check(SOFT, nodes, [a, b]) if f.key == "hostTopologySpread.enforceForRequiredAntiAffinity"]
    assert [f.severity for f in findings] == ["warning"]
    assert findings[0].message.startswith("1 Deployment(s) lose a required pod anti-affinity to a host spread that "
                                          "is only a preference (ml/web)")
    assert not [f for f in check(REQUIRED, nodes, [a, b]) if f.key.endswith("enforceForRequiredAntiAffinity")]
    assert not [f for f in check(None, nodes, [a, b]) if f.key.endswith("enforceForRequiredAntiAffinity")]


def test_check_on_a_cluster_names_pending_pods_and_the_rule_that_holds_them():
    from policylib.check.simulated import check_pending_pods
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "web-5d8f-x", "namespace": "ml", "labels": {"app": "web", "pod-template-hash": "5d8f"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f", "controller": True,
                             "uid": "rs"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                       "reason": "Unschedulable", "message": (
            "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints.")}]}}
    running = copy.deepcopy(pod)
    running["status"] = {"phase": "Running"}
    [f] = check_pending_pods([pod, copy.deepcopy(pod), running])
    assert (f.severity, f.key) == ("error", "pending")
    assert f.message == ("Deployment ml/web: 2 Pod(s) Pending now, held by a DoNotSchedule topology spread "
                         "(hostTopologySpread): 0/3 nodes are available: 3 node(s) didn't match pod topology spread "
                         "constraints.")


# --- rule S21: apply order ----------------------------------------------------------------------------

def _hpa(minimum):
    from tests.helpers import hpa
    return hpa("web", minimum)


def test_preview_says_what_a_deployment_applied_before_its_hpa_goes_through():
    from policylib.order import apply_order_note, helm_sorted
    d, h = deployment(replicas=3), _hpa(6)
    note = apply_order_note([d, h], 0, load_config(ENFORCE))
    assert note == ("applied in this order (the Deployment before HorizontalPodAutoscaler web, as Helm installs them), "
                    "it is first stored with effective replicas 3 (host spread DoNotSchedule, maxSkew 1); the "
                    "controller then rewrites it for 6 (host spread DoNotSchedule, maxSkew 2): one rollout right after "
                    "the first; to store it right at once, apply the HPA first or annotate the Deployment "
                    "policylib.io/autoscaling-min-replicas: \"6\"")
    assert "as pending: it is written on the Deployment's next rollout" in apply_order_note([d, h], 0, load_config(NEXT))
    assert apply_order_note([h, d], 1, load_config(ENFORCE)) is None                  # HPA first: stored right
    assert helm_sorted([h, d]) == [d, h]                                              # Helm: Deployment first
    annotated = deployment(replicas=3, annotations={"policylib.io/autoscaling-min-replicas": "6"})
    assert apply_order_note([annotated, h], 0, load_config(ENFORCE)) is None
    assert apply_order_note([d, _hpa(4)], 0, load_config(None)) is None   # a preference: same template, nothing seen


def test_preview_prints_the_order_note_on_stderr(tmp_path):
    import io

    import yaml

    from policylib.cli import main
    f = tmp_path / "app.yaml"
    f.write_text(yaml.safe_dump_all([deployment(replicas=3), _hpa(6)]))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(ENFORCE))
    out, err = io.StringIO(), io.StringIO()
    assert main(["preview", "--config", str(cfg), "-f", str(f)], io.StringIO(), out, err) == 0
    assert err.getvalue().startswith(f"policylib: note: {f}: Deployment ml/web: applied in this order")
    assert host(yaml.safe_load(out.getvalue()))["maxSkew"] == 2     # what the cluster ends with


# --- smaller items ---------------------------------------------------------------------------------

def _cli(args, stdin=""):
    import io

    from policylib.cli import main
    out, err = io.StringIO(), io.StringIO()
    code = main(args, io.StringIO(stdin), out, err)
    return code, out.getvalue(), err.getvalue()


def test_preview_json_is_one_array_of_the_mutated_objects(tmp_path):
    import json

    import yaml
    f = tmp_path / "d.yaml"
    f.write_text(yaml.safe_dump(deployment(replicas=4)))
    code, out, _ = _cli(["preview", "-f", str(f), "-o", "json"])
    [obj] = json.loads(out)
    assert code == 0 and obj == mutate(deployment(replicas=4), load_config(None)).object


def test_simulate_names_what_it_did_not_simulate(tmp_path):
    import yaml
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
              "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}}]
    sts = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "db", "namespace": "ml"}, "spec": {}}
    tf = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "t", "namespace": "ml"}, "spec": {}}
    f = tmp_path / "w.yaml"
    f.write_text(yaml.safe_dump_all([deployment(replicas=1), sts, tf, _hpa(1)]))
    n = tmp_path / "n.yaml"
    n.write_text(yaml.safe_dump_all(nodes))
    code, _, err = _cli(["simulate", "-f", str(f), "--nodes", str(n)])
    assert code == 0
    assert [line.split(": kind")[0] for line in err.splitlines()] == [
        "policylib: not simulated: DaemonSet ml/db", "policylib: not simulated: CronJob ml/t"]


def test_cluster_commands_take_kubeconfig_and_namespace(tmp_path):
    from policylib.cli import build_parser
    parser = build_parser()
    for command in (["plan", "--cluster"], ["check", "--cluster"], ["simulate", "-f", "x", "--cluster"]):
        args = parser.parse_args(command + ["--kubeconfig", "/k", "-n", "team-a"])
        assert (args.kubeconfig, args.namespace) == ("/k", "team-a")
    code, _, err = _cli(["plan", "--cluster", "--kubeconfig", str(tmp_path / "missing")])
    assert code == 2 and f"no kubeconfig found at {tmp_path / 'missing'}" in err


def test_a_missing_lease_namespace_is_logged_and_readyz_says_why(tmp_path, caplog):
    import json
    import urllib.error
    import urllib.request

    from tests.fakeapi import FakeAPI
    from tests.test_controller import LEASE
    from webhook.controller import serve_health
    with FakeAPI() as api:
        Cluster(api, [])
        api.route("POST", LEASE.rsplit("/", 1)[0], (404, {"kind": "Status", "code": 404, "reason": "NotFound",
                                                          "message": 'namespaces "policylib-system" not found'}))
        c = controller(api, tmp_path)
        with caplog.at_level("ERROR", logger="webhook.controller"):
            assert c.elector.try_lead() is False
    [entry] = [e for e in log_entries(caplog.records) if e["level"] == "error"]
    assert entry["msg"] == "cannot create the Lease" and entry["namespace"] == "policylib-system"
    server = serve_health(c, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/readyz"
        try:
            body = urllib.request.urlopen(url, timeout=5).read()
        except urllib.error.HTTPError as e:
            body = e.read()
        state = json.loads(body)
    finally:
        server.shutdown()
    assert state["leader"] is False
    assert state["reason"].startswith("the Lease namespace policylib-system does not exist")


@pytest.mark.parametrize("change,message", [
    (lambda n: n["status"]["allocatable"].update(cpu="eight"),
     "Node n1: status.allocatable[cpu]: Invalid value: \"eight\": must be a quantity like 8, 500m or 64Gi"),
    (lambda n: n["spec"].update(taints=[{"key": "gpu", "effect": "NoSchedul"}]),
     "Node n1: spec.taints[0].effect: Unsupported value: \"NoSchedul\": supported values: \"NoSchedule\", "
     "\"PreferNoSchedule\", \"NoExecute\""),
    (lambda n: n["metadata"]["labels"].update({"gpu": 8}),
     "Node n1: metadata.labels[gpu]: Invalid value: 8: a label value must be a string (quote it in YAML)"),
])
def test_a_bad_node_file_exits_2_naming_the_node_the_field_and_the_value(tmp_path, change, message):
    import yaml
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}}
    change(node)
    n, f = tmp_path / "nodes.yaml", tmp_path / "w.yaml"
    n.write_text(yaml.safe_dump(node))
    f.write_text(yaml.safe_dump(deployment(replicas=2)))
    for command in ("simulate", "check"):
        code, out, err = _cli([command, "-f", str(f), "--nodes", str(n)])
        assert (code, out) == (2, "")
        assert err == f"policylib: error: {n}: {message}\n", err


def test_run_local_takes_a_config_and_refuses_a_bad_one_before_serving(tmp_path, capsys):
    from webhook.__main__ import main, parser
    good = tmp_path / "c.yaml"
    good.write_text("hostTopologySpread: {rewrite: OnNextRollout}\n")
    assert parser().parse_args(["run-local", "--config", str(good), "--cert-dir", "c"]).config == str(good)
    bad = tmp_path / "bad.yaml"
    bad.write_text("hostTopologySpread: {rewrite: Sometimes}\n")
    assert main(["run-local", "--config", str(bad), "--cert-dir", str(tmp_path / "certs")]) == 2
    err = capsys.readouterr().err
    assert "hostTopologySpread.rewrite: must be one of OnCountChange, OnNextRollout; got 'Sometimes'" in err
    assert not (tmp_path / "certs").exists()


def test_volcano_notes_say_only_what_was_applied_and_why_nothing_was():
    from tests.test_volcano import cfg, job, task
    j = job(task(replicas=4))
    j["spec"]["tasks"][0]["policies"] = [{"event": "PodFailed", "action": "RestartJob"}]
    j["spec"]["policies"] = [{"event": "PodFailed", "action": "RestartPartition"}]
    r = mutate(j, cfg(restartPartitionEvents=[]))   # HyperNodes from label discovery: the hard bound is written
    assert r.object["spec"]["tasks"][0]["policies"] == [{"event": "PodFailed", "action": "RestartJob"}]
    assert r.warnings == ["moved job-level RestartPartition (PodFailed) away: the partitioned tasks handle these "
                          "events already: denied by Volcano's VAP at job level"]
    untouched = mutate(job(task(replicas=4)), load_config(None))
    assert (untouched.patch, untouched.reasons) == ([], [
        "no partitionPolicy: volcano.partitionSize is not set (nor the job's policylib.io/partition-size annotation)"])


def test_k_builds_the_overlay_with_kubectl_kustomize_and_names_what_is_missing(tmp_path, monkeypatch):
    import json
    import os

    import yaml
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: [d.yaml]\n")
    (overlay / "d.yaml").write_text(yaml.safe_dump(deployment(replicas=4)))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "kubectl"   # stands in for kubectl: prints the overlay's one resource, records its arguments
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'args'}\n/bin/cat {overlay / 'd.yaml'}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    code, out, _ = _cli(["preview", "-k", str(overlay), "-o", "json"])
    assert code == 0 and (tmp_path / "args").read_text().split() == ["kustomize", str(overlay)]
    [obj] = json.loads(out)
    assert host(obj)["maxSkew"] == 1 and obj["metadata"]["name"] == "web"
    code, _, err = _cli(["preview", "-f", str(tmp_path), "-R"])
    assert f"policylib: note: -R reads the raw files under {overlay}, not the overlay" in err
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    code, out, err = _cli(["plan", "-k", str(overlay)])
    assert (code, out) == (2, "")
    assert err == (f"policylib: error: -k {overlay}: needs kubectl (kubectl kustomize) or kustomize on PATH; "
                   "neither was found\n")
    assert os.environ["PATH"] == str(tmp_path / "nothing")


def test_a_write_an_admission_webhook_undoes_is_not_retried_until_the_object_changes(tmp_path):
    """On the harness, a controller with rewrite OnCountChange and a webhook with OnNextRollout undid each
    other's writes on every watch event; the controller now notices, plans it again after 5, 20 and 60 s (rule
    S29: the webhook's facts may lag, an HPA minimum it has not seen yet), then waits for a change or a resync."""
    import jsonpatch

    from tests.fakeapi import FakeAPI
    from webhook.controller import undone_by_admission
    stored = scaled(mutate(deployment(replicas=4), load_config(ENFORCE)).object, 7)
    stored["metadata"].update(resourceVersion="5", uid="u")
    with FakeAPI() as api:
        cluster = Cluster(api, [stored])
        record_events(api)

        def revert(name, req):   # a webhook that keeps the old template: only the resourceVersion moves
            current = cluster.deployments[name]
            current["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
            return 200, copy.deepcopy(current)
        api.route("PATCH", "/apis/apps/v1/namespaces/ml/deployments/web", lambda req: revert("web", req))
        c = controller(api, tmp_path, ENFORCE)
        c.elector.try_lead()
        sync(c)
        key = ("apps/v1", "Deployment", "ml", "web")
        deliver(c, api, "MODIFIED", dict(cluster.deployments["web"], apiVersion="apps/v1", kind="Deployment"))
        # the watch event of our own (undone) write: no new write
        assert len(cluster.patches()) == 1 and c.reconciler.undone == {key: "6"}
        assert c.metrics.errors.labels("undone")._value.get() == 1
        queue = c.reconciler.queue
        now = queue.clock()
        for made, delay in enumerate((5.0, 20.0, 60.0), start=1):
            assert c.reconciler.undone_retries[key][0] == made
            queue.clock = lambda at=now + delay - 0.5: at      # not yet due: nothing
            work(c)
            assert len(cluster.patches()) == made
            now += delay
            queue.clock = lambda at=now: at                     # due: planned and written again, undone again
            work(c)
            assert len(cluster.patches()) == made + 1
            deliver(c, api, "MODIFIED", dict(cluster.deployments["web"], apiVersion="apps/v1", kind="Deployment"))
            assert len(cluster.patches()) == made + 1         # its own watch event writes nothing
        assert key not in c.reconciler.undone_retries          # the retries are spent: a change or a resync now
        queue.clock = lambda at=now + 3600: at
        work(c)
        assert len(cluster.patches()) == 4
        sync(c)                                   # a resync tries again
        assert len(cluster.patches()) == 5
    [w] = plan([stored], load_config(ENFORCE))
    assert undone_by_admission(w.patch, stored)
    assert not undone_by_admission(w.patch, jsonpatch.apply_patch(stored, w.patch))


def test_preview_under_on_next_rollout_prints_what_the_cluster_keeps_in_deployment_first_order(tmp_path):
    import yaml
    f = tmp_path / "app.yaml"
    f.write_text(yaml.safe_dump_all([deployment(replicas=3), _hpa(6)]))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(NEXT))
    code, out, err = _cli(["preview", "--config", str(cfg), "-f", str(f)])
    shown = yaml.safe_load(out)
    assert code == 0 and "as pending" in err
    assert host(shown)["maxSkew"] == 1 and annotations(shown)[RECORD_REPLICAS] == "3"      # as first stored
    assert pending_rewrite(shown) == ("6 effective replicas (written for 3): kubernetes.io/hostname DoNotSchedule, "
                                      "maxSkew 1, minDomains 3 -> DoNotSchedule, maxSkew 2, minDomains 3")
    f.write_text(yaml.safe_dump_all([_hpa(6), deployment(replicas=3)]))                    # HPA first: right at once
    code, out, err = _cli(["preview", "--config", str(cfg), "-f", str(f)])
    assert host(yaml.safe_load(out))["maxSkew"] == 2 and err == ""
