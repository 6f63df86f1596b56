"""Kubernetes' own gang scheduling on the harness, on both minors: the Workload API of each (1.36:
``scheduling.k8s.io/v1alpha2`` behind ``testcluster --kubernetes 1.36 --feature-gates
GangScheduling=true,GenericWorkload=true``; 1.37: ``v1beta1`` behind ``--kubernetes 1.37 --feature-gates
GenericWorkload=true``), ``pod.spec.schedulingGroup`` and the default kube-scheduler: what gang method workload
writes, and what the API server and scheduler do with it."""
from __future__ import annotations

import pytest

from .gang_operators import GROUP, bound, start_cluster
from .harness import refused, wait_for

MINORS = ("1.36", "1.37")
GATES = {"1.36": "GangScheduling=true,GenericWorkload=true", "1.37": "GenericWorkload=true"}
VERSION = {"1.36": "v1alpha2", "1.37": "v1beta1"}


@pytest.fixture(scope="module", params=MINORS)
def native(request, harness_built, tmp_path_factory):
    minor = request.param
    c = start_cluster(tmp_path_factory.mktemp(f"gang-native-{minor}"), "--kubernetes", minor, "--feature-gates",
                      GATES[minor], targets=())
    c.minor = minor
    try:
        yield c
    finally:
        assert c.stop() == 0


def workload(name: str, ns: str, min_count: int, minor: str) -> list[dict]:
    """A Workload with one gang PodGroupTemplate and the PodGroup made from it, in the minor's version and shape."""
    gang = {"gang": {"minCount": min_count}}
    api = f"scheduling.k8s.io/{VERSION[minor]}"
    ref = {"podGroupTemplateRef": {"workload": {"workloadName": name, "podGroupTemplateName": "workers"}}} \
        if minor == "1.36" else {"workloadRef": {"workloadName": name, "templateName": "workers"}}
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


def test_the_api_server_serves_the_workload_api_of_its_minor_with_the_gates(native):
    versions = native.kubectl("api-versions").stdout.split()
    served = sorted(v for v in versions if v.startswith("scheduling.k8s.io/"))
    assert served == sorted({"scheduling.k8s.io/v1", f"scheduling.k8s.io/{VERSION[native.minor]}"}), served
    resources = native.kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "name").stdout.split()
    assert {"workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io"} <= set(resources), resources


@pytest.mark.proves(scheduler="kube-scheduler (the gates of each minor)", settings="none (objects made directly)",
                    operator="none", jobs="3 Pods with `spec.schedulingGroup`",
                    outcome="the minor's Workload and PodGroup (`v1alpha2` on 1.36, `v1beta1` on 1.37): all bind",
                    kubernetes=MINORS)
@pytest.mark.timeout(300)
def test_native_gang_that_fits_binds_together(native):
    ns = native.namespace("native-fits")
    native.apply(*workload("train", ns, 3, native.minor))
    native.apply(*pods("train", ns, 3, "fits3"))
    wait_for("all 3 bound", lambda: len(bound(native.list("pods", ns, selector="gang=train"))) == 3, timeout=150)
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in native.list("pods", ns, selector="gang=train")} \
        == {"train"}


@pytest.mark.proves(scheduler="kube-scheduler (as above)", settings="none (objects made directly)", operator="none",
                    jobs="4 Pods with `spec.schedulingGroup` on 3 CPUs", outcome="nothing binds",
                    kubernetes=MINORS)
@pytest.mark.timeout(300)
def test_native_gang_that_cannot_fit_binds_nothing(native):
    ns = native.namespace("native-short")
    native.apply(*workload("train", ns, 4, native.minor))
    native.apply(*pods("train", ns, 4, "short"))
    ever: set[str] = set()

    def all_unschedulable():
        listed = native.list("pods", ns, selector="gang=train")
        ever.update(bound(listed))
        conds = [c for p in listed for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
        return ever or (len(conds) == 4 and all(c["status"] == "False" for c in conds))
    wait_for("every pod judged unschedulable", all_unschedulable, timeout=150)
    assert not ever, f"pods of a gang that does not fit were bound: {sorted(ever)}"


def test_bad_feature_gates_are_refused(harness_built, tmp_path):
    line = refused("--dir", str(tmp_path / "c"), "--feature-gates", "GangScheduling")
    assert line == ('testcluster: error: --feature-gates "GangScheduling": "GangScheduling" is not Name=true|false')


@pytest.mark.parametrize("args, expected", [
    (("--training-operator-gang", "volcano"), "--training-operator-gang needs --training-operator"),
    (("--training-operator", "--training-operator-gang", "kueue"),
     '--training-operator-gang "kueue": must be one of none, scheduler-plugins, volcano'),
    (("--training-operator", "--training-operator-gang", "volcano"),
     "--training-operator-gang volcano needs --volcano (the operator creates Volcano PodGroups)"),
    (("--training-operator", "--training-operator-gang", "scheduler-plugins"),
     "--training-operator-gang scheduler-plugins needs --coscheduling"),
])
def test_operator_flags_are_checked(harness_built, tmp_path, args, expected):
    line = refused("--dir", str(tmp_path / "c"), *args)
    assert line.startswith("testcluster: error: ") and expected in line, line
