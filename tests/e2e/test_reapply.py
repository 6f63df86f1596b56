"""Re-applying an unchanged manifest on the real API server changes nothing (rule S22).

A Deployment with a required self anti-affinity (the webhook removes it and writes the spread) is
applied 5 times, unchanged, by client-side apply, server-side apply and ``kubectl replace``, with
``reconcileDrift`` off and on (a controller with that setting runs), under both values of
``hostTopologySpread.enforceForRequiredAntiAffinity``. Each ends with one ReplicaSet and generation
1, no write by the controller, and ``kubectl diff`` (client-side and server-side) showing nothing.
The table is printed at the end of the module (``-s`` shows it).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from policylib import load_config
from policylib.plan import plan

from .harness import SHARED, Cluster, Controller, Webhook, deployment, wait_for
from .util import managed, preview, replicasets, wait_rolled_out

METHODS = ("client-side apply", "server-side apply", "kubectl replace")
APPLIES = 5
LEASES = "policylib-e2e-reapply"
#: (enforceForRequiredAntiAffinity, reconcileDrift, method) -> (ReplicaSets, generation, kubectl's words)
TABLE: dict[tuple[bool, bool, str], tuple[int, int, str]] = {}
#: method -> generation after the same applies in a namespace without the webhook
TABLE_BASELINE: dict[str, int] = {}


def settings(enforce: bool, drift: bool) -> dict:
    return {"hostTopologySpread": {"enforceForRequiredAntiAffinity": enforce, "reconcileDrift": drift}}


def manifest(namespace: str) -> dict:
    d = deployment("web", namespace, 3, node_selector={"e2e.policylib.io/group": "three"})
    d["spec"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    return d


def apply(cluster: Cluster, method: str, path: Path, first: bool) -> str:
    """One apply of the file by ``method``; returns kubectl's word for it (configured, unchanged, ...)."""
    args = {"client-side apply": ("apply", "-f", str(path)),
            "server-side apply": ("apply", "--server-side", "-f", str(path)),
            "kubectl replace": ("create" if first else "replace", "-f", str(path))}[method]
    return cluster.kubectl(*args).stdout.strip().rsplit(" ", 1)[-1]


def idle(cluster: Cluster, spaces: list[str], config: dict, controller: Controller | None) -> list[dict]:
    """Every Deployment's generation observed, and the controller (where it runs) with an empty queue and
    nothing left to write: its own plan of what is stored is empty, so it cannot write."""
    cfg = load_config(config)

    def done():
        ds = [cluster.get("deployment", "web", ns) for ns in spaces]
        if any(d.get("status", {}).get("observedGeneration", 0) < d["metadata"]["generation"] for d in ds):
            return None
        if controller is not None and (controller.metric("policylib_controller_queue_depth") != 0
                                       or [w for w in plan(ds, cfg) if w.action != "none"]):
            return None
        return ds
    return wait_for(f"the Deployments of {spaces} settled", done, timeout=120)


#: The diff that matches each apply method: ``kubectl diff`` sends a dry-run of the patch client-side
#: apply would send; ``kubectl diff --server-side`` a dry-run server-side apply (what Argo CD's Server-Side
#: Diff and Flux compare). Across methods kubectl's own bookkeeping differs: a server-side apply rewrites
#: a client-side last-applied annotation (and a Deployment's generation counts annotation changes), a
#: client-side diff adds one to an object that has none. Over ``kubectl replace``'s fields a server-side
#: apply conflicts (its manager still owns the anti-affinity the webhook removed): forced, as Argo CD does.
DIFFS = {"client-side apply": (), "server-side apply": ("--server-side",),
         "kubectl replace": ("--server-side", "--force-conflicts")}


def no_diff(cluster: Cluster, method: str, path: Path) -> None:
    """The dry run goes through the webhook and finds nothing to change."""
    run = cluster.kubectl("diff", *DIFFS[method], "-f", str(path), check=False)
    assert (run.returncode, run.stdout) == (0, ""), f"kubectl diff {' '.join(DIFFS[method])}: {run.stdout}{run.stderr}"


def remove_deployments(cluster: Cluster, spaces: list[str]) -> None:
    """A controller is cluster-wide: the next one, with other settings, must not see these."""
    for ns in spaces:
        cluster.kubectl("delete", "deployment", "web", "-n", ns, "--ignore-not-found", "--wait=true", timeout=120)


@pytest.fixture(scope="module")
def table():
    yield TABLE
    if TABLE:
        rows = ["apply method x reconcileDrift (enforceForRequiredAntiAffinity): ReplicaSets, generation after "
                f"{APPLIES} applies of an unchanged manifest"]
        for (enforce, drift, method), (sets, generation, words) in sorted(TABLE.items()):
            rows.append(f"  {method:18} reconcileDrift={str(drift).lower():5} enforce={str(enforce).lower():5}  "
                        f"ReplicaSets {sets}  generation {generation}  kubectl: {words}")
        rows += [f"  {m:18} without the webhook (Kubernetes alone): generation {g}" for m, g in TABLE_BASELINE.items()]
        print("\n" + "\n".join(rows))


def test_reapplying_an_unchanged_manifest_changes_nothing(cluster, ns, tmp_path, table):
    hooks = {enforce: Webhook(cluster, f"reapply-{str(enforce).lower()}", settings(enforce, False), tmp_path).start()
             for enforce in (False, True)}
    made: list[str] = []
    try:
        for hook in hooks.values():
            hook.register()
        baseline = without_webhook(cluster, f"{ns}-base", tmp_path, made)
        for drift in (False, True):
            for enforce, hook in hooks.items():
                if drift:
                    remove_deployments(cluster, made)
                run_scenarios(cluster, f"{ns}-{int(drift)}{int(enforce)}", hook, enforce, drift, tmp_path, made)
    finally:
        for hook in hooks.values():
            cluster.kubectl("delete", "mutatingwebhookconfiguration", f"policylib-e2e-{hook.name}", "--ignore-not-found",
                            check=False)
            hook.stop()
        if made:
            cluster.kubectl("delete", "namespace", *made, "--ignore-not-found", "--wait=false", check=False)
    # kubectl replace drops the deployment controller's deployment.kubernetes.io/revision annotation, and a
    # Deployment's generation counts annotation changes: each replace adds one without the webhook too
    assert baseline == {"client-side apply": 1, "server-side apply": 1, "kubectl replace": APPLIES}
    assert {k: v[:2] for k, v in TABLE.items()} == {(e, d, m): (1, baseline[m]) for e in (False, True)
                                                    for d in (False, True) for m in METHODS}


def without_webhook(cluster: Cluster, base: str, tmp: Path, made: list[str]) -> dict[str, int]:
    """The generation each method leaves on a Deployment in a namespace no webhook serves (the same
    manifest, its anti-affinity kept): what Kubernetes itself does with 5 applies."""
    out = {}
    for i, m in enumerate(METHODS):
        space = cluster.namespace(f"{base}-{i}")
        made.append(space)
        path = tmp / f"{space}.yaml"
        path.write_text(yaml.safe_dump(manifest(space)))
        for n in range(APPLIES):
            apply(cluster, m, path, first=n == 0)
        d = idle(cluster, [space], {}, None)[0]
        assert len(replicasets(cluster, space, "web")) == 1
        out[m] = d["metadata"]["generation"]
        TABLE_BASELINE[m] = out[m]
    return out


def run_scenarios(cluster: Cluster, base: str, hook: Webhook, enforce: bool, drift: bool, tmp: Path,
                  made: list[str]) -> None:
    config = settings(enforce, drift)
    spaces = {m: cluster.namespace(f"{base}-{i}", config=hook.name) for i, m in enumerate(METHODS)}
    made += spaces.values()
    paths = {}
    for m, space in spaces.items():
        paths[m] = tmp / f"{space}.yaml"
        paths[m].write_text(yaml.safe_dump(manifest(space)))
    controller = None
    if drift:
        cluster.namespace(LEASES)
        controller = Controller(cluster, config, tmp, f"reapply-{int(enforce)}", LEASES)
    try:
        if controller is not None:
            wait_for("the controller leads and has listed", lambda: controller.status().items() >= {
                "leader": True, "synced": True, "firstSync": True, "dryRun": False}.items(), timeout=60)
        words: dict[str, list[str]] = {m: [] for m in METHODS}
        for i in range(APPLIES):
            for m in METHODS:
                words[m].append(apply(cluster, m, paths[m], first=i == 0))
            if i == 0:
                for space in spaces.values():
                    wait_rolled_out(cluster, space, "web")
            idle(cluster, list(spaces.values()), config, controller)
        stored = idle(cluster, list(spaces.values()), config, controller)
        for m, d in zip(METHODS, stored, strict=True):
            pod = d["spec"]["template"]["spec"]
            assert "affinity" not in pod, (m, pod["affinity"])
            host = next(c for c in pod["topologySpreadConstraints"] if c["topologyKey"] == "kubernetes.io/hostname")
            assert host["whenUnsatisfiable"] == ("DoNotSchedule" if enforce else "ScheduleAnyway")
            TABLE[(enforce, drift, m)] = (len(replicasets(cluster, spaces[m], "web")), d["metadata"]["generation"],
                                          ",".join(words[m]))
            no_diff(cluster, m, paths[m])
        # policylib preview --old (the stored object) -f (the manifest) says what the API server stored
        shown = preview([manifest(spaces[METHODS[0]])], config, tmp, old=[stored[0]])
        assert [managed(d) for d in shown] == [managed(stored[0])]
        if controller is not None:
            writes = [e for e in controller.log_entries("write") if e.get("namespace") in spaces.values()]
            assert writes == [], json.dumps(writes)[:2000]
    finally:
        if controller is not None:
            controller.stop()


VOLCANO_JOB = {
    "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "partitioned"},
    "spec": {"schedulerName": "volcano", "minAvailable": 4,
             "policies": [{"event": "PodEvicted", "action": "RestartPartition"}],
             "tasks": [{"name": "t0", "replicas": 4, "template": {"spec": {
                 "containers": [{"name": "c", "image": "registry.example/app:1"}]}}}]}}
JOB_CRDS = ("schemas/volcano/batch.volcano.sh_jobs.yaml", "schemas/kubeflow/kubeflow.org_pytorchjobs.yaml")


@pytest.fixture(scope="module")
def job_crds(cluster):
    if not (SHARED / JOB_CRDS[0]).exists():
        pytest.skip("../shared/ (upstream CRDs) is not beside the project")
    return cluster.install_crds(*JOB_CRDS)


def test_reapplying_volcano_and_kubeflow_jobs_changes_nothing(cluster, webhooks, job_crds, ns, tmp_path):
    """Rules V17 and G11: a Volcano Job (the webhook adds a partitionPolicy and task RestartPartition
    policies and moves the job-level one) and a PyTorchJob (gang labels on its templates), re-applied
    3 times by each method: the stored spec and generation stay as the first apply left them."""
    webhooks("gang")
    pytorch = yaml.safe_load((SHARED / "examples/kubeflow/pytorchjob-simple.yaml").read_text())
    rows = []
    for i, method in enumerate(METHODS):
        space = cluster.namespace(f"{ns}-{i}", config="gang")
        try:
            for obj, resource in ((VOLCANO_JOB, "jobs.batch.volcano.sh"), (pytorch, "pytorchjobs.kubeflow.org")):
                body = json.loads(json.dumps(obj))
                body["metadata"]["namespace"] = space
                path = tmp_path / f"{space}-{obj['kind']}.yaml"
                path.write_text(yaml.safe_dump(body))
                words = [apply(cluster, method, path, first=True)]
                first = cluster.get(resource, body["metadata"]["name"], space)
                assert first["spec"] != body["spec"]   # the webhook wrote on CREATE
                words += [apply(cluster, method, path, first=False) for _ in range(2)]
                stored = cluster.get(resource, body["metadata"]["name"], space)
                assert (stored["spec"], stored["metadata"]["generation"]) == (first["spec"], 1), (method, obj["kind"])
                rows.append(f"  {method:18} {obj['kind']:11} generation {stored['metadata']['generation']}  "
                            f"kubectl: {','.join(words)}")
        finally:
            cluster.kubectl("delete", "namespace", space, "--wait=false", check=False)
    print("\n" + "\n".join(["Jobs re-applied 3 times (method, kind): generation"] + rows))
