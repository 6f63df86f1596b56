"""The real LeaderWorkerSet controller in the harness (``testcluster --lws``, LWS v0.9.0 built by ``make
testcluster-lws``), on fake Nodes: an LWS becomes a leader StatefulSet and one worker StatefulSet per group, whose pods
kube-controller-manager's StatefulSet controller makes and the scheduler binds, on both minors; a scale-in removes
the highest groups whole. With ``--lws-gang volcano``, LWS makes one Volcano PodGroup per group, and Volcano binds a
group whole or not at all, on both minors too. No policylib here: these prove the controller the LWS e2e tests build on
(``leaderworkersets.lws`` makes the object)."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from .harness import (
    E2E,
    NODE_GROUP_LABEL,
    Cluster,
    bound,
    node_list,
    refused,
    release,
    require_built,
    wait_for,
)
from .leaderworkersets import (
    GROUP_INDEX,
    LWS_RESOURCE,
    NAME_LABEL,
    VC_PODGROUP,
    VOLCANO_GROUP,
    WORKER_INDEX,
    controller_of,
    create_lws,
    expected_names,
    groups,
    lws,
    lws_pods,
    running,
    statefulsets,
    wait_running,
)

#: Node groups in CPUs per Node; every pod below asks for 1 CPU, except on "wide" (100m).
NODE_GROUPS = {
    "wide": [8, 8, 8],
    "fits": [2, 2, 2],     # two groups of 3
    "short": [1, 1],       # 2 CPUs for a group of 3
}
#: What LWS's defaulting webhook writes on an LWS without rolloutStrategy (v0.9.0 pkg/webhooks/
#: leaderworkerset_webhook.go, Default); the CRD defaults none of it.
DEFAULT_ROLLOUT = {"type": "RollingUpdate",
                   "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1, "partition": 0}}


def write_nodes(tmp: Path) -> Path:
    path = tmp / "nodes.yaml"
    path.write_text(yaml.safe_dump(node_list(NODE_GROUPS)))
    return path


@pytest.fixture(scope="module")
def lws_cluster(harness_built, tmp_path_factory, minor):
    """A cluster of each minor running LWS's manager and webhooks."""
    tmp = tmp_path_factory.mktemp(f"lws-{minor}")
    c = Cluster(tmp / "c", nodes=write_nodes(tmp), minor=minor, lws=True)
    try:
        yield c
    finally:
        assert c.stop() == 0


@pytest.mark.minors()
@pytest.mark.timeout(600)
def test_an_lws_becomes_statefulsets_whose_groups_run_and_scale_in_whole(lws_cluster, report):
    c = lws_cluster
    server = json.loads(c.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    assert server == release(c.minor)   # the LWS manager (client-go 0.36) against this minor's control plane
    ns = c.namespace("lws-basic")
    stored = create_lws(c, lws("vllm", ns, size=3, replicas=2, node_selector={NODE_GROUP_LABEL: "wide"}))
    assert stored["spec"]["rolloutStrategy"] == DEFAULT_ROLLOUT

    pods = wait_running(c, ns, "vllm", size=3, replicas=2)
    assert groups(pods) == {"0": [("0", "vllm-0"), ("1", "vllm-0-1"), ("2", "vllm-0-2")],
                            "1": [("0", "vllm-1"), ("1", "vllm-1-1"), ("2", "vllm-1-2")]}
    leaders = sorted(p["metadata"]["name"] for p in pods if p["metadata"]["labels"][WORKER_INDEX] == "0")
    assert leaders == ["vllm-0", "vllm-1"] and len(pods) - len(leaders) == 4
    assert {p["spec"]["nodeName"] for p in pods} <= {f"wide-{i}" for i in range(3)}

    sets = wait_for("the leader StatefulSet and 2 worker StatefulSets",
                    lambda: (lambda s: s if sorted(s) == ["vllm", "vllm-0", "vllm-1"] else None)(
                        statefulsets(c, ns, "vllm")), timeout=60)
    assert controller_of(sets["vllm"]) == ("LeaderWorkerSet", "vllm")
    assert {n: controller_of(sets[n]) for n in ("vllm-0", "vllm-1")} == {
        "vllm-0": ("Pod", "vllm-0"), "vllm-1": ("Pod", "vllm-1")}
    assert {n: (s["spec"]["replicas"], s["spec"]["podManagementPolicy"], (s["spec"].get("ordinals") or {}).get("start"))
            for n, s in sets.items()} == {"vllm": (2, "Parallel", None), "vllm-0": (2, "Parallel", 1),
                                          "vllm-1": (2, "Parallel", 1)}
    assert {controller_of(p) for p in pods} == {("StatefulSet", "vllm"), ("StatefulSet", "vllm-0"),
                                                ("StatefulSet", "vllm-1")}
    wait_for("the LWS reports 2 ready groups",
             lambda: (c.get(LWS_RESOURCE, "vllm", ns).get("status") or {}).get("readyReplicas") == 2, timeout=120)

    c.kubectl("scale", "-n", ns, "lws", "vllm", "--replicas=1")
    remaining = wait_running(c, ns, "vllm", size=3, replicas=1)
    assert groups(remaining) == {"0": [("0", "vllm-0"), ("1", "vllm-0-1"), ("2", "vllm-0-2")]}
    wait_for("only the leader StatefulSet and group 0's remain",
             lambda: sorted(statefulsets(c, ns, "vllm")) == ["vllm", "vllm-0"], timeout=120)
    assert c.get("statefulsets", "vllm", ns)["spec"]["replicas"] == 1
    status = wait_for("the LWS reports 1 group",
                      lambda: (lambda s: s if (s.get("replicas"), s.get("readyReplicas")) == (1, 1) else None)(
                          c.get(LWS_RESOURCE, "vllm", ns).get("status") or {}), timeout=120)
    assert status["hpaPodSelector"] == f"{NAME_LABEL}=vllm,{WORKER_INDEX}=0"
    report(f"Kubernetes {server} (--lws ready in {c.ready_seconds:.0f}s): LWS {ns}/vllm size 3: 2 groups Running "
           f"({', '.join(running(pods))}), scaled to 1: {', '.join(running(remaining))}")


# --- Volcano gangs (--lws-gang volcano) ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lws_volcano(harness_built, tmp_path_factory, minor):
    """Volcano, and LWS's manager with gangSchedulingManagement.schedulerProvider volcano, on a cluster of each
    minor."""
    tmp = tmp_path_factory.mktemp(f"lws-volcano-{minor}")
    c = Cluster(tmp / "c", nodes=write_nodes(tmp), extra_args=("--volcano",), minor=minor, lws=True,
                lws_gang="volcano")
    try:
        yield c
    finally:
        assert c.stop() == 0


def podgroups_by_group(c: Cluster, ns: str, name: str) -> dict[str, dict]:
    """The LWS's Volcano PodGroups by the group-index label LWS puts on them."""
    return {g["metadata"]["labels"].get(GROUP_INDEX, ""): g
            for g in c.list(VC_PODGROUP, ns, selector=f"{NAME_LABEL}={name}")}


def assert_one_podgroup_per_group(c: Cluster, ns: str, name: str, size: int, replicas: int) -> dict[str, dict]:
    """One PodGroup per group, minMember = size, owned by the group's leader pod and named on each of its pods."""
    pgs = wait_for(f"LWS makes {replicas} Volcano PodGroups",
                   lambda: (lambda g: g if len(g) == replicas else None)(podgroups_by_group(c, ns, name)), timeout=120)
    assert sorted(pgs) == [str(g) for g in range(replicas)]
    assert {g: pg["spec"]["minMember"] for g, pg in pgs.items()} == {str(g): size for g in range(replicas)}
    assert {g: controller_of(pg) for g, pg in pgs.items()} == {str(g): ("Pod", f"{name}-{g}") for g in range(replicas)}
    pods = wait_for(f"LWS {ns}/{name}'s {size * replicas} pods exist",
                    lambda: (lambda ps: ps if sorted(p["metadata"]["name"] for p in ps) ==
                             expected_names(name, size, replicas) else None)(lws_pods(c, ns, name)), timeout=180)
    assert {p["metadata"]["name"]: p["metadata"]["annotations"][VOLCANO_GROUP] for p in pods} == {
        p["metadata"]["name"]: pgs[p["metadata"]["labels"][GROUP_INDEX]]["metadata"]["name"] for p in pods}
    assert {p["spec"]["schedulerName"] for p in pods} == {"volcano"}
    return pgs


@pytest.mark.minors()
@pytest.mark.timeout(600)
def test_volcano_binds_each_lws_group_whole_or_not_at_all(lws_volcano, report):
    c = lws_volcano
    ns = c.namespace("lws-volcano")
    create_lws(c, lws("fits", ns, size=3, replicas=2, cpu="1", scheduler="volcano",
                      node_selector={NODE_GROUP_LABEL: "fits"}))
    create_lws(c, lws("short", ns, size=3, replicas=1, cpu="1", scheduler="volcano",
                      node_selector={NODE_GROUP_LABEL: "short"}))

    assert_one_podgroup_per_group(c, ns, "fits", size=3, replicas=2)
    [short_pg] = assert_one_podgroup_per_group(c, ns, "short", size=3, replicas=1).values()

    pods = wait_running(c, ns, "fits", size=3, replicas=2)
    assert {p["spec"]["nodeName"] for p in pods} <= {f"fits-{i}" for i in range(3)}

    ever: set[str] = set()

    def unschedulable():
        ever.update(bound(lws_pods(c, ns, "short")))
        status = c.get(VC_PODGROUP, short_pg["metadata"]["name"], ns).get("status") or {}
        return ever or [x for x in status.get("conditions") or [] if x.get("type") == "Unschedulable"]
    conditions = wait_for("Volcano marks the short group's PodGroup Unschedulable", unschedulable, timeout=180)
    assert not ever, f"pods of a group that cannot fully fit were bound: {sorted(ever)}"
    assert bound(lws_pods(c, ns, "short")) == []
    report(f"Kubernetes {c.minor}, Volcano (--volcano --lws-gang volcano ready in {c.ready_seconds:.0f}s): LWS "
           f"{ns}/fits 2 groups of 3 bound ({', '.join(running(pods))}); {ns}/short's group of 3 on 2 CPUs: none bound, PodGroup "
           f"{short_pg['metadata']['name']} {conditions[0].get('message', '')!r}")


def test_the_lws_manager_reports_the_release_it_was_built_from():
    """``make testcluster-lws`` sets LWS's version variables (upstream's Makefile sets them from git) to the tag, the
    tag's commit and its date, as the module proxy records them for the version e2e/lws/go.mod pins."""
    require_built("testcluster-lws")
    version = re.search(r"^\s*sigs\.k8s\.io/lws (v\S+)", (E2E / "lws" / "go.mod").read_text(), re.M).group(1)
    run = subprocess.run(["go", "mod", "download", "-json", f"sigs.k8s.io/lws@{version}"], cwd=E2E / "lws",
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    origin = json.loads(run.stdout)["Origin"]
    info = json.loads(Path(json.loads(run.stdout)["Info"]).read_text())
    out = subprocess.run([str(E2E / "bin" / "lws" / "lws-manager"), "--version"], capture_output=True, text=True,
                         timeout=60)
    assert (out.returncode, out.stdout) == (0, f"Version: {version}\nBuild Date: {info['Time']}\n"
                                                f"Git Commit: {origin['Hash']}\n"), out.stderr
    assert origin["Ref"] == f"refs/tags/{version}"


# --- the flags -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (("--lws-gang", "none"), "--lws-gang needs --lws; usage: testcluster --dir DIR "),
    (("--lws", "--lws-gang", "volcano"), "--lws-gang volcano needs --volcano (LWS creates Volcano PodGroups)"),
    (("--lws", "--lws-gang", "coscheduling"), '--lws-gang "coscheduling": must be one of none, volcano'),
])
def test_lws_flag_errors_are_one_line_and_exit_2(harness_built, tmp_path, args, message):
    line = refused("--dir", str(tmp_path / "c"), *args)
    assert line.startswith("testcluster: error: " + message), line
