"""Kubernetes' own gang scheduling (Workload and PodGroup, ``pod.spec.schedulingGroup``) on the harness, on each
minor, with the gates that serve it (``harness.WORKLOAD_GATES``: 1.36 ``scheduling.k8s.io/v1alpha2`` behind the alpha
GangScheduling and GenericWorkload gates; 1.37 ``scheduling.k8s.io/v1beta1`` behind GenericWorkload, beta but off by
default) and the default kube-scheduler: what a gang method writing the API itself has to write in each version, and
what the API server and scheduler do with it."""
from __future__ import annotations

import json

import pytest

from .gang_operators import GROUP, bound, start_cluster
from .harness import WORKLOAD_API, WORKLOAD_GATES, refused, wait_for

pytestmark = pytest.mark.minors()


@pytest.fixture(scope="module")
def native(harness_built, tmp_path_factory, minor):
    c = start_cluster(tmp_path_factory.mktemp(f"gang-native-{minor}"), "--feature-gates", WORKLOAD_GATES[minor],
                      targets=(), minor=minor)
    try:
        yield c
    finally:
        assert c.stop() == 0


def workload(name: str, ns: str, min_count: int, minor: str) -> list[dict]:
    """A Workload with one gang PodGroupTemplate and the PodGroup made from it, in the minor's version: v1alpha2's
    PodGroup names its template by ``podGroupTemplateRef.workload``, v1beta1's by ``workloadRef``."""
    gang = {"gang": {"minCount": min_count}}
    api = WORKLOAD_API[minor]
    ref = ({"workloadRef": {"workloadName": name, "templateName": "workers"}} if api.endswith("/v1beta1") else
           {"podGroupTemplateRef": {"workload": {"workloadName": name, "podGroupTemplateName": "workers"}}})
    return [
        {"apiVersion": api, "kind": "Workload", "metadata": {"name": name, "namespace": ns},
         "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": gang}]}},
        {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns},
         "spec": {**ref, "schedulingPolicy": gang}},
    ]


def pods(group_name: str, ns: str, n: int, node_group: str) -> list[dict]:
    return [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{group_name}-{i}", "namespace": ns,
                                                             "labels": {"gang": group_name}},
             "spec": {"schedulingGroup": {"podGroupName": group_name}, "nodeSelector": {GROUP: node_group},
                      "containers": [{"name": "c", "image": "registry.example/c:1",
                                      "resources": {"requests": {"cpu": "1"}}}]}} for i in range(n)]


def test_the_api_server_serves_the_workload_api_with_the_gates(native, minor):
    resources = native.kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "name").stdout.split()
    assert {"workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io"} <= set(resources), resources
    served = {v for v in native.kubectl("api-versions").stdout.split() if v.startswith("scheduling.k8s.io/")}
    assert served == {"scheduling.k8s.io/v1", WORKLOAD_API[minor]}
    group = json.loads(native.kubectl("get", "--raw", "/apis/scheduling.k8s.io").stdout)
    assert group["preferredVersion"]["groupVersion"] == "scheduling.k8s.io/v1"


@pytest.mark.proves(scheduler="kube-scheduler (the gates of each minor)", settings="none (objects made directly)",
                    operator="none", jobs="3 Pods with `spec.schedulingGroup`",
                    outcome="the minor's Workload and PodGroup (`v1alpha2` on 1.36, `v1beta1` on 1.37): all bind")
@pytest.mark.timeout(300)
def test_native_gang_that_fits_binds_together(native, minor):
    ns = native.namespace("native-fits")
    native.apply(*workload("train", ns, 3, minor))
    native.apply(*pods("train", ns, 3, "fits3"))
    wait_for("all 3 bound", lambda: len(bound(native.list("pods", ns, selector="gang=train"))) == 3, timeout=150)
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in native.list("pods", ns, selector="gang=train")} \
        == {"train"}


@pytest.mark.proves(scheduler="kube-scheduler (as above)", settings="none (objects made directly)", operator="none",
                    jobs="4 Pods with `spec.schedulingGroup` on 3 CPUs", outcome="nothing binds")
@pytest.mark.timeout(300)
def test_native_gang_that_cannot_fit_binds_nothing(native, minor):
    ns = native.namespace("native-short")
    native.apply(*workload("train", ns, 4, minor))
    native.apply(*pods("train", ns, 4, "short"))
    ever: set[str] = set()

    def all_unschedulable():
        listed = native.list("pods", ns, selector="gang=train")
        ever.update(bound(listed))
        conds = [c for p in listed for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
        return ever or (len(conds) == 4 and all(c["status"] == "False" for c in conds))
    wait_for("every pod judged unschedulable", all_unschedulable, timeout=150)
    assert not ever, f"pods of a gang that does not fit were bound: {sorted(ever)}"


def test_bad_feature_gates_are_refused(harness_built, tmp_path, minor):
    line = refused("--dir", str(tmp_path / "c"), "--kubernetes", minor, "--feature-gates", "GangScheduling")
    assert line == ('testcluster: error: --feature-gates "GangScheduling": "GangScheduling" is not Name=true|false')


#: A gate of the other minor that this one does not have: 1.37 removed GangScheduling (kube-scheduler's
#: GangScheduling plugin is on with GenericWorkload); 1.36 has no CompositePodGroup yet.
ABSENT_GATE = {"1.37": "GangScheduling", "1.36": "CompositePodGroup"}


def test_a_gate_the_minor_does_not_have_is_refused_before_anything_starts(harness_built, tmp_path, minor):
    """Each component would stop at start on such a gate, with its own error in its own log: testcluster refuses
    it first, in one line naming the minor."""
    gates = f"GenericWorkload=true,{ABSENT_GATE[minor]}=true"
    line = refused("--dir", str(tmp_path / "c"), "--kubernetes", minor, "--feature-gates", gates)
    assert line == (f'testcluster: error: --feature-gates "{gates}": {ABSENT_GATE[minor]} is not a feature gate of '
                    f"Kubernetes {minor}")


@pytest.mark.parametrize("args, expected", [
    (("--training-operator-gang", "volcano"), "--training-operator-gang needs --training-operator"),
    (("--training-operator", "--training-operator-gang", "kueue"),
     '--training-operator-gang "kueue": must be one of none, scheduler-plugins, volcano'),
    (("--training-operator", "--training-operator-gang", "volcano"),
     "--training-operator-gang volcano needs --volcano (the operator creates Volcano PodGroups)"),
    (("--training-operator", "--training-operator-gang", "scheduler-plugins"),
     "--training-operator-gang scheduler-plugins needs --coscheduling"),
])
def test_operator_flags_are_checked(harness_built, tmp_path, args, expected, minor):
    line = refused("--dir", str(tmp_path / "c"), "--kubernetes", minor, *args)
    assert line.startswith("testcluster: error: ") and expected in line, line
