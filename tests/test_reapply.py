"""Re-applying an unchanged manifest changes nothing (rules S22, V17, G11).

The API server stores what the webhook made of the manifest on CREATE. A re-apply sends an UPDATE
whose incoming object is, for ``kubectl apply`` (client-side), the live object with the manifest
merged in three ways (what the last-applied annotation has and the live object lacks comes back),
and for server-side apply and ``kubectl replace`` the manifest itself. Each must leave the stored
object, and so the pod template hash, as it is.
"""
from __future__ import annotations

import copy
import subprocess
import sys

import jsonpatch
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policylib import load_config, mutate
from policylib.plan import plan
from policylib.spread import RECORD_REQUIRED
from tests.helpers import REPO, by_key, deployment, legacy_anti_affinity, pod_spec
from tests.test_gang import bare_seed_job, labels_of
from tests.test_gang import cfg as gang_cfg
from tests.test_volcano import cfg as volcano_cfg
from tests.test_volcano import job, task, tasks_of

HOST = "kubernetes.io/hostname"
ENFORCE = (False, True)   # hostTopologySpread.enforceForRequiredAntiAffinity: the rule holds under both


def three_way(last_applied: dict, manifest: dict, live: dict) -> dict:
    """What ``kubectl apply`` (client-side) sends: ``live`` with the manifest merged in three ways.
    Keys the last-applied configuration had and the manifest dropped are deleted, the manifest's
    values are set, keys only the live object has (the webhook's additions) stay; a list is
    replaced whole (a JSON merge patch, kubectl's patch for custom resources; for built-in kinds the
    strategic merge patch gives the same here, the manifest's lists being what the user wrote)."""
    out = copy.deepcopy(live)
    for key in last_applied:
        if key not in manifest:
            out.pop(key, None)
    for key, value in manifest.items():
        before = last_applied.get(key)
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = three_way(before if isinstance(before, dict) else {}, value, out[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


def incoming(method: str, manifest: dict, stored: dict) -> dict:
    """The object an UPDATE brings for a re-apply of ``manifest`` over ``stored``."""
    if method == "client-side apply":
        return three_way(manifest, manifest, stored)
    return copy.deepcopy(manifest)   # server-side apply of fields the applier owns, kubectl replace


METHODS = ("client-side apply", "server-side apply / replace")


def with_anti_affinity(replicas: int | None = 3, preferred: bool = False) -> dict:
    return deployment(replicas=replicas, pod_spec={"containers": [{"name": "app", "image": "registry.example/app:1"}],
                                                   "affinity": legacy_anti_affinity({"app": "web"}, preferred=preferred)})


def config(enforce: bool, **host) -> object:
    return load_config({"hostTopologySpread": {"enforceForRequiredAntiAffinity": enforce, **host}})


@pytest.mark.parametrize("enforce", ENFORCE)
@pytest.mark.parametrize("method", METHODS)
def test_reapplying_a_manifest_whose_anti_affinity_went_leaves_the_stored_deployment(enforce, method):
    cfg = config(enforce)
    manifest = with_anti_affinity()
    stored = mutate(manifest, cfg).object
    assert "affinity" not in pod_spec(stored)
    assert by_key(stored)[HOST]["whenUnsatisfiable"] == ("DoNotSchedule" if enforce else "ScheduleAnyway")
    update = incoming(method, manifest, stored)
    assert pod_spec(update)["affinity"] == legacy_anti_affinity({"app": "web"})   # brought back
    r = mutate(update, cfg, old=stored)
    assert r.object["spec"] == stored["spec"]
    assert r.object["metadata"]["annotations"] == stored["metadata"]["annotations"]
    assert jsonpatch.apply_patch(update, r.patch) == r.object
    assert any(x.startswith("removed 1 pod anti-affinity term(s) selecting the Deployment's own pods that the "
                            "update brought back") for x in r.reasons)
    # as on CREATE: a required term replaced by a mere preference warns each time
    weakened = [w for w in r.warnings if w.startswith("required anti-affinity removed")]
    assert weakened == ([] if enforce else ["required anti-affinity removed; host spread only preferred: "
                                            "set hostTopologySpread.enforceForRequiredAntiAffinity: true"])
    # the next re-apply is the same no-op: the webhook's answer is a fixed point
    again = mutate(incoming(method, manifest, r.object), cfg, old=r.object)
    assert again.object["spec"] == stored["spec"]


@pytest.mark.parametrize("enforce", ENFORCE)
def test_reapply_under_reconcile_drift_gives_the_controller_nothing_to_do(enforce):
    cfg = config(enforce, reconcileDrift=True, whenUnsatisfiable="DoNotSchedule")
    manifest = with_anti_affinity(replicas=4)
    created = mutate(manifest, cfg).object
    stored = {**created, "metadata": {**created["metadata"], "uid": "u1"}}
    for method in METHODS:
        r = mutate(incoming(method, manifest, stored), cfg, old=stored)
        assert r.object["spec"] == stored["spec"]
        assert plan([r.object], cfg) == []


def test_a_required_anti_affinity_added_by_an_update_is_written_as_on_create():
    """Not a re-apply: the record does not say a required term was replaced (S18), so the update gets
    the whole CREATE treatment: the term goes, the record says so, and the host spread is enforced."""
    cfg = config(True)
    stored = mutate(deployment(replicas=3), cfg).object
    assert by_key(stored)[HOST]["whenUnsatisfiable"] == "ScheduleAnyway"
    new = copy.deepcopy(stored)
    pod_spec(new)["affinity"] = legacy_anti_affinity({"app": "web"})
    r = mutate(new, cfg, old=stored)
    assert "affinity" not in pod_spec(r.object)
    host = by_key(r.object)[HOST]
    assert (host["whenUnsatisfiable"], host["maxSkew"], host["minDomains"]) == ("DoNotSchedule", 1, 3)
    assert r.object["metadata"]["annotations"][RECORD_REQUIRED] == "true"
    assert "the update adds a required anti-affinity the spread replaces: written as on CREATE" in r.reasons


def test_an_update_of_a_deployment_policylib_never_wrote_keeps_its_anti_affinity():
    legacy = with_anti_affinity(replicas=4)
    new = copy.deepcopy(legacy)
    new["metadata"]["labels"] = {"team": "ml"}
    assert mutate(new, config(False), old=legacy).patch == []


def test_preview_with_old_agrees_with_what_the_cluster_stores(tmp_path):
    manifest = with_anti_affinity()
    stored = mutate(manifest, load_config(None)).object
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(stored))
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(manifest))
    run = subprocess.run([sys.executable, "-m", "policylib.cli", "preview", "--old", str(tmp_path / "old.yaml"),
                          "-f", str(tmp_path / "new.yaml")], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert run.returncode == 0, run.stderr
    shown = [d for d in yaml.safe_load_all(run.stdout) if d]
    assert [d["spec"] for d in shown] == [stored["spec"]]
    assert shown[0]["metadata"]["annotations"] == stored["metadata"]["annotations"]


# --- the property ------------------------------------------------------------------------------

TERMS = st.sampled_from(["none", "required", "preferred", "both", "other app", "required and other app"])
USER_CONSTRAINTS = st.sampled_from(["none", "other key", "host key"])


def manifest_of(replicas: int | None, terms: str, constraints: str) -> dict:
    anti: dict = {}
    own = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOST}
    other = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}
    if terms in ("required", "both", "required and other app"):
        anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(own)
    if terms in ("preferred", "both"):
        anti["preferredDuringSchedulingIgnoredDuringExecution"] = [{"weight": 50, "podAffinityTerm": own}]
    if terms in ("other app", "required and other app"):
        anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(other)
    spec: dict = {"containers": [{"name": "app", "image": "registry.example/app:1"}]}
    if anti:
        spec["affinity"] = {"podAntiAffinity": anti}
    key = {"other key": "example.com/rack", "host key": HOST}.get(constraints)
    if key:
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
                                              "labelSelector": {"matchLabels": {"app": "web"}}}]
    return deployment(replicas=replicas, pod_spec=spec)


SETTINGS = st.fixed_dictionaries({
    "zoneTopologySpread": st.fixed_dictionaries({"enabled": st.booleans()}),
    "hostTopologySpread": st.fixed_dictionaries({
        "enabled": st.booleans(), "enforceForRequiredAntiAffinity": st.booleans(),
        "whenUnsatisfiable": st.sampled_from(["ScheduleAnyway", "DoNotSchedule"]),
        "rewrite": st.sampled_from(["OnCountChange", "OnNextRollout"]), "reconcileDrift": st.booleans()}),
    "removePodAntiAffinity": st.sampled_from(["own", "all"]),
})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replicas=st.one_of(st.none(), st.integers(0, 12)), terms=TERMS, constraints=USER_CONSTRAINTS,
       settings_=SETTINGS, method=st.sampled_from(METHODS), times=st.integers(1, 3))
def test_property_reapplying_an_unchanged_manifest_never_changes_the_stored_template(
        replicas, terms, constraints, settings_, method, times):
    cfg = load_config(settings_)
    manifest = manifest_of(replicas, terms, constraints)
    stored = mutate(manifest, cfg).object
    stored = {**stored, "metadata": {**stored["metadata"], "uid": "u1", "resourceVersion": "1"}}
    # what the controller writes (reconcileDrift, a count change) is stored before the re-applies
    for write in plan([stored], cfg):
        if write.patch:
            after = jsonpatch.apply_patch(stored, write.patch)
            stored = mutate(after, cfg, old=stored).object
    current = stored
    for _ in range(times):
        update = incoming(method, manifest, current)
        r = mutate(update, cfg, old=current)
        assert r.object["spec"]["template"] == stored["spec"]["template"]
        assert jsonpatch.apply_patch(update, r.patch) == r.object
        current = r.object
        # the controller has nothing to roll: it does not fight the re-apply
        assert [w for w in plan([current], cfg) if w.rollout] == []
    assert current is not stored, "no re-apply was checked"


# --- Volcano Jobs and Kubeflow gang metadata ------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_reapplying_a_volcano_job_leaves_the_stored_policies_and_partitions(method):
    manifest = job(task(replicas=4), policies=[{"event": "PodEvicted", "action": "RestartPartition"}])
    stored = mutate(manifest, volcano_cfg()).object
    assert "partitionPolicy" in tasks_of(stored)[0] and "policies" not in stored["spec"]
    update = incoming(method, manifest, stored)
    assert "partitionPolicy" not in tasks_of(update)[0] and update["spec"]["policies"]   # the lists came back whole
    r = mutate(update, volcano_cfg(), old=stored)
    assert r.object["spec"] == stored["spec"]
    assert jsonpatch.apply_patch(update, r.patch) == r.object
    assert r.reasons[0].startswith("UPDATE re-applies what CREATE wrote")


def test_a_volcano_update_that_changes_the_policies_is_still_never_patched():
    stored = mutate(job(task(replicas=4)), volcano_cfg()).object
    changed = job(task(replicas=4, policies=[{"event": "PodFailed", "action": "AbortJob"}]))
    r = mutate(changed, volcano_cfg(), old=stored)
    assert r.patch == [] and r.object is changed
    assert r.reasons == ["UPDATE: Volcano rejects changes to policies and partitionPolicy; not mutated"]


@pytest.mark.parametrize("method", METHODS)
def test_reapplying_a_kubeflow_job_leaves_the_gang_metadata(method):
    manifest = bare_seed_job()
    stored = mutate(manifest, gang_cfg()).object
    r = mutate(incoming(method, manifest, stored), gang_cfg(), old=stored)
    assert r.object["spec"] == stored["spec"]
    assert {t: labels_of(r.object, t) for t in ("PS", "Worker")} == {t: labels_of(stored, t) for t in ("PS", "Worker")}
