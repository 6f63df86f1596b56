"""``--cluster`` reads through one client, and only the cluster's failures are user errors: an error the API
server answers, a kubeconfig that is not there, a server that does not answer are one line and exit 2; a bug
in this program is not dressed up as one (it raises, with its traceback)."""
from __future__ import annotations

import io

import pytest

from policylib.cli import main
from policylib.shell import kube
from tests.fakeapi import FakeAPI, paged_list
from tests.test_installed import NAMESPACES, WORKLOADS, install


def cli(argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, io.StringIO(), out, err)
    return code, out.getvalue(), err.getvalue()


def test_an_error_the_api_server_answers_is_one_line_naming_it(tmp_path):
    with FakeAPI() as api:
        install(api, {}, WORKLOADS, NAMESPACES)
        api.route("GET", "/apis/apps/v1/deployments", (500, {"kind": "Status", "apiVersion": "v1", "code": 500,
                                                             "reason": "InternalError", "message": "etcd unavailable"}))
        code, out, err = cli(["plan", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k")])
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == "policylib: error: cannot read the cluster: HTTP 500 InternalError: etcd unavailable"


def test_a_server_that_does_not_answer_is_one_line(tmp_path):
    with FakeAPI() as api:
        config = api.kubeconfig(tmp_path / "k")
    code, out, err = cli(["check", "--cluster", "--kubeconfig", config])   # the server is gone: refused
    assert (code, out) == (2, "")
    assert err.startswith("policylib: error: cannot read the cluster: ") and len(err.splitlines()) == 1


def test_a_programming_error_is_not_a_user_error(tmp_path, monkeypatch):
    """The old broad ``except Exception`` turned this into "cannot read the cluster: ..." and exit 2."""
    def broken(*args, **kwargs):
        raise TypeError("snapshot() got an unexpected keyword argument 'limit'")
    monkeypatch.setattr(kube, "snapshot", broken)
    with FakeAPI() as api:
        install(api, {}, WORKLOADS, NAMESPACES)
        with pytest.raises(TypeError, match="unexpected keyword"):
            cli(["plan", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k")])


def test_one_client_reads_the_config_the_scope_and_the_objects(tmp_path, monkeypatch):
    built = []
    real = kube.api_client

    def counting(*args, **kwargs):
        built.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(kube, "api_client", counting)
    with FakeAPI() as api:
        install(api, {}, WORKLOADS, NAMESPACES)
        api.route("GET", "/api/v1/nodes", paged_list("Node", [], 500))
        code, _, err = cli(["plan", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k")])
    assert code == 0, err
    assert len(built) == 1
    assert {r["path"] for r in api.requests} >= {"/apis/apps/v1/deployments", "/api/v1/namespaces"}


def test_check_cluster_holds_the_simulated_projection_of_each_deployment_and_hpa(tmp_path, monkeypatch):
    """Rule W7: what ``check --cluster`` hands its rules is, of each Deployment and HPA the API server
    returns, only what the planners and the scheduler's replay read (``project_simulated``): these keys and
    no other, never the containers' images, environment or probes, ``managedFields`` or the status's
    conditions."""
    import importlib

    from bench.scale_objects import LAST_APPLIED, deployment_as_stored, hpa_as_stored
    from policylib.projection import project_simulated
    from tests.test_installed import ns
    served = [deployment_as_stored(i) for i in range(3)]
    hpas = [hpa_as_stored(0)]
    held: list = []

    def check(config, nodes, objects, **kwargs):
        held.extend(objects)
        return []
    monkeypatch.setattr(importlib.import_module("policylib.check"), "check", check)
    node = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
    with FakeAPI() as api:
        install(api, {}, served, [ns(f"scale-{i:02d}") for i in range(3)])
        api.route("GET", "/apis/autoscaling/v2/horizontalpodautoscalers", paged_list("HorizontalPodAutoscaler", hpas, 500))
        api.route("GET", "/api/v1/nodes", paged_list("Node", [node], 500))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
        api.route("GET", "/version", (200, {"gitVersion": "v1.36.0"}))
        api.route("GET", "/apis", (200, {"kind": "APIGroupList", "groups": []}))
        code, out, err = cli(["check", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"), "-o", "json"])
    assert (code, out) == (0, "[]\n"), err
    deployments = [o for o in held if o["kind"] == "Deployment"]
    assert deployments == [project_simulated(d) for d in served]
    for d in deployments:
        assert set(d) == {"apiVersion", "kind", "metadata", "spec", "status"}
        assert set(d["metadata"]) <= {"name", "namespace", "uid", "resourceVersion", "generation", "labels",
                                      "annotations"}
        assert set(d["spec"]) == {"replicas", "selector", "template"}
        assert set(d["spec"]["template"]) == {"metadata", "spec"}
        assert set(d["spec"]["template"]["spec"]) == {"containers", "volumes", "schedulerName"}
        assert [set(c) for c in d["spec"]["template"]["spec"]["containers"]] == [{"resources", "ports"}] * 2
        assert d["spec"]["template"]["spec"]["volumes"] == [{}]
        assert set(d["status"]) == {"observedGeneration", "replicas", "updatedReplicas", "availableReplicas"}
    assert deployments[1]["metadata"]["annotations"] == {LAST_APPLIED: ""}
    [hpa] = [o for o in held if o["kind"] == "HorizontalPodAutoscaler"]
    assert set(hpa) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(hpa["metadata"]) == {"name", "namespace", "uid", "resourceVersion"}
    assert set(hpa["spec"]) == {"minReplicas", "maxReplicas", "scaleTargetRef"}


def test_a_list_s_continue_token_is_read_from_the_answer_s_head():
    """The API server writes ``metadata`` before ``items``: the next page is asked for without decoding this
    one's items; an answer shaped otherwise is decoded whole, and the last page has no token."""
    import json

    assert kube.continue_token(b'{"kind":"DeploymentList","apiVersion":"apps/v1","metadata":{"resourceVersion":"7",'
                               b'"continue":"eyJ2Ijo"},"items":[{"metadata":{"name":"a"},"spec":{"items":[1]}}]}') \
        == "eyJ2Ijo"
    items_first = {"items": [{"spec": {"volumes": [{"configMap": {"name": "c", "items": []}}]}}],
                   "metadata": {"continue": "next"}}
    assert kube.continue_token(json.dumps(items_first, separators=(",", ":")).encode()) == "next"
    assert kube.continue_token(b'{"kind":"List","metadata":{"resourceVersion":"7"},"items":[]}') is None
    assert kube.continue_token(b'{"kind":"List","metadata":{"continue":""},"items":[]}') is None


def test_the_next_page_is_asked_for_while_this_one_is_used_and_its_failure_is_one_line(tmp_path):
    """``snapshot`` reads ahead: the API server is asked for page 2 before page 1's objects are projected (the
    projection of page 1 waits for that request); an error answered for a later page is the cluster's
    failure, one line, as for the first."""
    import threading

    asked = threading.Event()
    served = paged_list("Deployment", [{"metadata": {"name": f"d{i}", "namespace": "ml"}} for i in range(5)], 2)

    def deployments(req):
        if req["query"].get("continue"):
            asked.set()
        return served(req)

    def project(obj):
        assert asked.wait(30), "page 2 was not asked for while page 1 was used"
        return obj["metadata"]["name"]
    with FakeAPI() as api:
        api.route("GET", "/apis/apps/v1/deployments", deployments)
        client = kube.Api(kube.api_client(None, api.kubeconfig(tmp_path / "k")))
        assert kube.snapshot(client, resources=(kube.DEPLOYMENTS,), project=project, limit=2) == \
            ["d0", "d1", "d2", "d3", "d4"]
        assert [r["query"].get("continue") for r in api.requests] == [None, "2", "4"]

        def failing(req):
            if req["query"].get("continue"):
                return 500, {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd unavailable"}
            return served(req)
        install(api, {}, WORKLOADS, NAMESPACES)
        api.route("GET", "/apis/apps/v1/deployments", failing)
        code, out, err = cli(["plan", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k")])
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == "policylib: error: cannot read the cluster: HTTP 500 InternalError: etcd unavailable"


def test_a_snapshot_holds_each_string_once(tmp_path):
    """What ``--cluster`` holds is interned: the same label value, quantity or name in every Deployment is one
    string, not one per object (the JSON decoder makes one per occurrence)."""
    from bench.scale_objects import deployment_as_stored
    from policylib.projection import project_simulated
    served = [deployment_as_stored(i) for i in (2, 9)]
    with FakeAPI() as api:
        api.route("GET", "/apis/apps/v1/deployments", paged_list("Deployment", served, 1))
        client = kube.Api(kube.api_client(None, api.kubeconfig(tmp_path / "k")))
        a, b = kube.snapshot(client, resources=(kube.DEPLOYMENTS,), project=project_simulated)
    assert [a, b] == [project_simulated(d) for d in served]
    assert a["metadata"]["labels"]["tier"] is b["metadata"]["labels"]["tier"]
    limits = [d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] for d in (a, b)]
    assert limits[0] is limits[1] == "512Mi"


def _metadata_list(items):
    """A list as kube-apiserver answers ``as=PartialObjectMetadataList``: each item only its metadata."""
    def handler(req):
        assert req["headers"]["accept"] == kube.METADATA_LIST
        return 200, {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                     "metadata": {"resourceVersion": "9"},
                     "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": m}
                               for m in items]}
    return handler


def test_check_cluster_counts_the_workloads_in_scope_of_kinds_no_family_handles(tmp_path):
    """Rule P9: ``check --cluster`` lists, by their metadata only, the kinds that run pods and that no family
    handles, and counts those whose namespace and labels the webhook configuration selects, each named, in one
    ``info`` finding (table and JSON); an object a controller owns (a Deployment's ReplicaSet, a CronJob's Job)
    counts as its owner, and a kind the cluster does not serve contributes nothing."""
    import json

    from tests.test_installed import NAMESPACES, install
    owned = {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "a", "uid": "u",
                                  "controller": True}]}
    served = {
        "/apis/apps/v1/daemonsets": [{"name": "db", "namespace": "ml"}, {"name": "cache", "namespace": "ml"},
                                       {"name": "skipped", "namespace": "optout"},   # the namespace opted out
                                       {"name": "mine", "namespace": "rel"},          # the release's own
                                       {"name": "no", "namespace": "ml", "labels": {"policylib.io/skip": "true"}}],
        "/apis/apps/v1/replicasets": [{"name": "a-5d8f", "namespace": "ml", **owned}],
        "/apis/batch/v1/cronjobs": [{"name": "nightly", "namespace": "ml"}],
        "/apis/batch/v1/jobs": [{"name": "nightly-29000", "namespace": "ml", **owned}],
        "/apis/ray.io/v1/rayjobs": [{"name": "llama", "namespace": "ml"}],
    }
    node = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
    with FakeAPI() as api:
        install(api, {"rel": ("policylib", {})}, [], NAMESPACES)
        for path, items in served.items():
            api.route("GET", path, _metadata_list(items))
        api.route("GET", "/api/v1/nodes", paged_list("Node", [node], 500))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
        api.route("GET", "/version", (200, {"gitVersion": "v1.37.0"}))
        api.route("GET", "/apis", (200, {"kind": "APIGroupList", "groups": []}))
        code, out, err = cli(["check", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"), "-o", "json"])
        _, table, _ = cli(["check", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k")])
    assert code == 0, err
    message = ("4 workload(s) of kinds policylib does not handle, left as they are: CronJob 1 (ml/nightly); "
               "DaemonSet 2 (ml/cache, ml/db); RayJob 1 (ml/llama): policylib has no policy for them (it "
               "handles Deployments, StatefulSets, LeaderWorkerSets, Kubeflow TFJobs, PyTorchJobs and MPIJobs, JobSets, "
               "TrainJobs, Volcano Jobs and gang Pods)")
    assert [f for f in json.loads(out) if f["key"] == "unhandled"] == [
        {"severity": "info", "key": "unhandled", "message": message}]
    assert [line.split(None, 2) for line in table.splitlines() if " unhandled " in line] == [
        ["info", "unhandled", message]]
    # rule P10: every kind a family handles has a webhook entry (TrainJobs too, rule T6): no not-admitted finding
    assert [f for f in json.loads(out) if f["key"] == "not-admitted"] == []
    # the finding a kind without a webhook entry would get, each object named
    from policylib.cli.check import not_admitted_finding
    assert [f.as_dict() for f in not_admitted_finding([{"apiVersion": "example.com/v1", "kind": "Thing",
                                                         "metadata": {"name": "t", "namespace": "ml"}}])] == [{
        "severity": "info", "key": "not-admitted",
        "message": "1 workload(s) the webhook does not receive, left as they are: Thing 1 (ml/t): policylib has a "
                   "policy for them, but no entry of the webhook configuration sends them (preview, simulate and "
                   "check show what it would write)"}]
    listed = {r["path"] for r in api.requests if r["headers"].get("accept") == kube.METADATA_LIST}
    assert listed == {r.path() for r in kube.UNHANDLED_WORKLOADS + kube.NOT_ADMITTED_WORKLOADS}


def test_the_unhandled_kinds_listed_are_the_families_unhandled_workloads():
    """Rule P9: ``check --cluster`` lists every kind the families name as running pods unhandled, and no other."""
    from policylib.families import UNHANDLED_WORKLOADS
    assert {(r.group, r.kind) for r in kube.UNHANDLED_WORKLOADS} == set(UNHANDLED_WORKLOADS)
    assert len(kube.UNHANDLED_WORKLOADS) == len(UNHANDLED_WORKLOADS)
    from policylib.families import NOT_ADMITTED, family_of
    assert {(r.group, r.kind) for r in kube.NOT_ADMITTED_WORKLOADS} == set(NOT_ADMITTED)
    # each is a kind a family handles, and no webhook entry of the manifests sends it (rule P10)
    assert all(family_of({"apiVersion": r.api_version, "kind": r.kind}) for r in kube.NOT_ADMITTED_WORKLOADS)
    import yaml

    from tests.helpers import REPO
    hooks = yaml.safe_load((REPO / "manifests/base/mutatingwebhookconfiguration.yaml").read_text())["webhooks"]
    sent = {(g, res) for h in hooks for r in h["rules"] for g in r["apiGroups"] for res in r["resources"]}
    assert not {(r.group, r.plural) for r in kube.NOT_ADMITTED_WORKLOADS} & sent


def test_a_snapshot_holds_equal_parts_once_and_the_rules_leave_them_unchanged(tmp_path):
    """What ``check --cluster`` holds shares every mapping or list equal to one read before (the Deployments'
    container resources, ports, pod template specs, statuses), never one that differs in a value's type (``plan
    --cluster``'s snapshot interns its strings only); and no rule of
    ``check``, ``plan`` or the spread report changes a shared part in place (they change copies)."""
    import importlib
    import json

    from bench.scale_objects import deployment_as_stored, hpa_as_stored
    from policylib.projection import project_simulated
    from policylib.scaledown import cluster_report
    check = importlib.import_module("policylib.check").check
    plan = importlib.import_module("policylib.plan").plan

    hold = kube.Interner()
    a, b, c = hold({"n": 1, "l": [1]}), hold({"n": True, "l": [1]}), hold({"n": 1, "l": [1]})
    assert (a["n"], b["n"]) == (1, True) and b["n"] is True and a is not b and a is c and a["l"] is b["l"]
    assert hold({"n": 1.0}) is not hold({"n": 1}) and hold({"x": {}}) is not hold({"x": []})

    served = [deployment_as_stored(i) for i in range(12)]
    with FakeAPI() as api:
        api.route("GET", "/apis/apps/v1/deployments", paged_list("Deployment", served, 5))
        api.route("GET", "/apis/autoscaling/v2/horizontalpodautoscalers",
                  paged_list("HorizontalPodAutoscaler", [hpa_as_stored(i) for i in range(0, 12, 4)], 5))
        client = kube.Api(kube.api_client(None, api.kubeconfig(tmp_path / "k")))
        objects = kube.snapshot(client, resources=(kube.DEPLOYMENTS, kube.HPAS), project=project_simulated, share=True)
        unshared = kube.snapshot(client, resources=(kube.DEPLOYMENTS,), project=project_simulated)
    assert unshared == [project_simulated(d) for d in served]
    assert len({id(d["spec"]["template"]["spec"]) for d in unshared}) == len(served)   # plan --cluster's: copies
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert deployments == [project_simulated(d) for d in served]
    for part in (lambda d: d["spec"]["template"]["spec"], lambda d: d["status"], lambda d: d["metadata"]):
        held = {id(part(d)) for d in deployments}
        assert len(held) == len({json.dumps(part(d)) for d in deployments})   # one per value
    assert len({id(d["spec"]["template"]["spec"]) for d in deployments}) < len(deployments)
    before = json.dumps(objects)
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": f"n{i}", "labels": {"kubernetes.io/hostname": f"n{i}",
                                                       "topology.kubernetes.io/zone": f"z{i % 2}"}},
              "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}} for i in range(4)]
    config = {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule", "reconcileDrift": True,
                                     "enforceForRequiredAntiAffinity": False}}
    assert check(config, nodes, objects)   # findings were made from them
    assert plan(objects, config)
    cluster_report(objects, nodes)
    assert json.dumps(objects) == before


def test_check_cluster_reads_the_claims_and_volumes_that_pin_a_statefulsets_ordinals(tmp_path):
    """Rule A7 with ``--cluster``: the StatefulSets in scope, their PersistentVolumeClaims and the
    PersistentVolumes bound to them are read; a StatefulSet whose volumes pin its ordinals into one zone is named."""
    import json

    from tests.test_installed import NAMESPACES, install
    from tests.test_statefulset import NODES, bound, statefulset, with_claims
    sts = with_claims(statefulset("db", "ml", replicas=3))
    volumes = bound(0, ["zone-b"], "db", namespace="ml") + bound(1, ["zone-b"], "db", namespace="ml") \
        + bound(2, ["zone-b"], "db", namespace="ml")
    strip = lambda objs: [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in objs]  # noqa: E731
    with FakeAPI() as api:
        install(api, {"rel": ("policylib", {})}, [], NAMESPACES)
        api.route("GET", "/apis/apps/v1/statefulsets", paged_list("StatefulSet", strip([sts]), 500))
        api.route("GET", "/api/v1/persistentvolumeclaims",
                  paged_list("PersistentVolumeClaim", strip(volumes[0::2]), 500))
        api.route("GET", "/api/v1/persistentvolumes", paged_list("PersistentVolume", strip(volumes[1::2]), 500))
        api.route("GET", "/api/v1/nodes", paged_list("Node", strip(NODES), 500))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
        api.route("GET", "/version", (200, {"gitVersion": "v1.37.0"}))
        api.route("GET", "/apis", (200, {"kind": "APIGroupList", "groups": []}))
        code, out, err = cli(["check", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"), "-o", "json"])
    assert code == 0, err
    assert [f["message"] for f in json.loads(out) if f["key"] == "volume-pinned-skew"] == [
        "statefulset ml/db: bound volumes pin its 3 ordinal(s) to zone-a=0, zone-b=3, zone-c=0 (zone skew at least 3 > "
        "maxSkew 1): the scheduler cannot move a pod off its volume's zone, so the spread cannot repair this; only new "
        "claims (their data moved) can"]


def test_check_cluster_goes_on_without_volumes_the_user_may_not_list(tmp_path):
    """Rule A7: a user who may not list PersistentVolumeClaims is told so on stderr; the check goes on and names
    nothing it could not see."""
    import json

    from tests.test_installed import NAMESPACES, install
    from tests.test_statefulset import NODES, bound, statefulset, with_claims
    sts = with_claims(statefulset("db", "ml", replicas=3))
    volumes = [o for i in range(3) for o in bound(i, ["zone-b"], "db", namespace="ml")]
    strip = lambda objs: [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in objs]  # noqa: E731
    forbidden = (403, {"kind": "Status", "apiVersion": "v1", "code": 403, "reason": "Forbidden",
                       "message": "persistentvolumeclaims is forbidden"})
    with FakeAPI() as api:
        install(api, {"rel": ("policylib", {})}, [], NAMESPACES)
        api.route("GET", "/apis/apps/v1/statefulsets", paged_list("StatefulSet", strip([sts]), 500))
        api.route("GET", "/api/v1/persistentvolumeclaims", forbidden)
        api.route("GET", "/api/v1/persistentvolumes", paged_list("PersistentVolume", strip(volumes[1::2]), 500))
        api.route("GET", "/api/v1/nodes", paged_list("Node", strip(NODES), 500))
        api.route("GET", "/api/v1/pods", paged_list("Pod", [], 500))
        api.route("GET", "/version", (200, {"gitVersion": "v1.37.0"}))
        api.route("GET", "/apis", (200, {"kind": "APIGroupList", "groups": []}))
        code, out, err = cli(["check", "--cluster", "--kubeconfig", api.kubeconfig(tmp_path / "k"), "-o", "json"])
    assert code == 0, err
    assert [f for f in json.loads(out) if f["key"] == "volume-pinned-skew"] == []
    assert [line for line in err.splitlines() if "persistentvolumeclaims" in line] == [
        "policylib: warning: cannot list persistentvolumeclaims: HTTP 403 Forbidden: persistentvolumeclaims is "
        "forbidden; StatefulSets are checked without their volumes' zones"]
