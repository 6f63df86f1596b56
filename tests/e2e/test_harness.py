"""The testcluster contract: exit codes, one ready line, two instances at once, stop on SIGTERM, and each Kubernetes
minor (``--kubernetes``) run by its own build."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .harness import (
    DEFAULT_MINOR,
    KUBECTL,
    MINORS,
    TESTCLUSTER,
    Cluster,
    minor_binary,
    refused,
    release,
    require_built,
    wait_for,
)

BAD_NODES = {
    "not-yaml": ("kind: Node\nmetadata: {name: [\n", "document 1"),
    "no-kind": ("metadata: {name: a}\n", "kind: required"),
    "wrong-kind": ("kind: Pod\nmetadata: {name: a}\n", 'got "Pod"'),
    "no-name": ("kind: Node\nmetadata: {labels: {a: b}}\n", "metadata.name: required"),
    "bad-quantity": ("kind: Node\nmetadata: {name: a}\nstatus: {allocatable: {cpu: lots}}\n", "lots"),
    "bad-taint": ("kind: Node\nmetadata: {name: a}\nspec: {taints: [{key: k, effect: Sometimes}]}\n", "Sometimes"),
    "unknown-field": ("kind: Node\nmetadata: {name: a}\nspec: {colour: red}\n", "colour"),
    "empty": ("# nothing\n", "no Node"),
}


@pytest.mark.parametrize("name", sorted(BAD_NODES))
def test_bad_nodes_file_is_one_line_and_exit_2(harness_built, tmp_path, name):
    text, expected = BAD_NODES[name]
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(text)
    line = refused("--dir", str(tmp_path / "c"), "--nodes", str(nodes))
    assert line.startswith(f"testcluster: error: {nodes}: ") and expected in line, line


def test_usage_errors_exit_2(harness_built):
    for args in ([], ["--dir"], ["--dir", "x", "extra"], ["--bogus"]):
        run = subprocess.run([str(TESTCLUSTER), *args], capture_output=True, text=True, timeout=60)
        assert (run.returncode, run.stdout) == (2, ""), args
        assert run.stderr.startswith("testcluster: error: ") and "usage: testcluster --dir DIR" in run.stderr


def test_second_instance_with_its_own_nodes_and_scheduler_config(cluster, tmp_path):
    """Runs beside the session's cluster; stops within 10 s of SIGTERM with status 0."""
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("kind: Node\nmetadata: {name: solo, labels: {topology.kubernetes.io/zone: z}}\n"
                     "status: {allocatable: {cpu: '2', memory: 4Gi, pods: '3'}}\n")
    sched = tmp_path / "sched.yaml"
    sched.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                     "profiles: [{schedulerName: e2e-scheduler}]\n")
    second = Cluster(tmp_path / "second", nodes=nodes, scheduler_config=sched)
    try:
        assert second.kubeconfig.read_text() != cluster.kubeconfig.read_text()
        [node] = second.list("nodes")
        assert node["metadata"]["name"] == "solo"
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "solo"
        assert node["status"]["allocatable"] == {"cpu": "2", "memory": "4Gi", "pods": "3"}
        assert [c["type"] for c in node["status"]["conditions"] if c["status"] == "True"] == ["Ready"]
        assert node["spec"].get("taints") is None  # TaintNodesByCondition is off: no not-ready taint
        assert [n["metadata"]["name"] for n in cluster.list("nodes")] != ["solo"]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
               "spec": {"schedulerName": "e2e-scheduler", "containers": [{"name": "c", "image": "i"}]}}
        second.kubectl("create", "-f", "-", input=json.dumps(pod))
        running = wait_for("the pod runs on solo", lambda: (p := second.get("pod", "p", "default"))["status"].get(
            "phase") == "Running" and p, timeout=120)
        assert running["spec"]["nodeName"] == "solo"
    finally:
        started = time.monotonic()
        second.proc.send_signal(signal.SIGTERM)
        code = second.proc.wait(30)
        elapsed = time.monotonic() - started
    assert code == 0
    assert elapsed < 10, f"stopped {elapsed:.1f}s after SIGTERM"
    left = subprocess.run(["pgrep", "-f", f"--kubeconfig={second.kubeconfig}"], capture_output=True, text=True)
    assert left.stdout == "", "components outlived testcluster"
    assert KUBECTL.exists()


def test_a_port_taken_before_its_component_binds_it_starts_the_cluster_again(harness_built, tmp_path, monkeypatch):
    """A port is picked free and bound later by its component; another process can take it in between. The harness
    then starts again with other ports, saying so on stderr with the component's own words, and keeps the failed
    attempt's logs. TESTCLUSTER_TAKE_API_PORT=1 makes the first attempt take the API server's port itself."""
    monkeypatch.setenv("TESTCLUSTER_TAKE_API_PORT", "1")
    c = Cluster(tmp_path / "c")
    monkeypatch.delenv("TESTCLUSTER_TAKE_API_PORT")
    try:
        assert [n["metadata"]["name"] for n in c.list("nodes")], "the second attempt serves"
        said = c.stderr_text()
        assert said.startswith("testcluster: attempt 1: kube-apiserver exited: exit status 1; the end of its log:\n"), said
        assert "bind: address already in use" in said and said.count("starting again with other ports") == 1, said
        assert "bind: address already in use" in (tmp_path / "c" / "attempt-1" / "kube-apiserver.log").read_text()
    finally:
        assert c.stop() == 0, c.stderr_text()


def test_help_prints_the_usage_and_exits_0(harness_built):
    for flag in ("--help", "-h"):
        run = subprocess.run([str(TESTCLUSTER), flag], capture_output=True, text=True, timeout=60)
        assert (run.returncode, run.stderr) == (0, ""), (flag, run.stderr)
        assert run.stdout.startswith("usage: testcluster --dir DIR") and "-nodes" in run.stdout


def test_a_controller_reads_its_scope_from_the_harness_configuration_unless_told():
    """Rule W5 in the shared cluster: the install tests put ``policylib-webhook`` (the controller's default
    configuration) there for a while; a test's controller reads the harness's own configuration (manifests/'
    selectors, for a Service nothing serves), whatever test ran before, unless the test names one."""
    from pathlib import Path

    from policylib.scope import default_configuration, scope_from_configuration

    from .harness import SCOPE_CONFIGURATION, SCOPE_SERVICE_NAMESPACE, controller_args, scope_configuration
    assert controller_args(None) == [f"--webhook-configuration={SCOPE_CONFIGURATION}"]
    assert controller_args(["--dry-run"]) == [f"--webhook-configuration={SCOPE_CONFIGURATION}", "--dry-run"]
    assert controller_args(["--webhook-configuration", "x"]) == ["--webhook-configuration", "x"]
    assert controller_args(["--webhook-configuration=x"]) == ["--webhook-configuration=x"]
    here = Path(__file__).parent
    assert [p.name for p in sorted(here.glob("*.py")) if f'"{SCOPE_CONFIGURATION}"' in p.read_text()] == ["harness.py"]
    configuration = scope_configuration()
    assert [h["failurePolicy"] for h in configuration["webhooks"]] == ["Ignore"]
    shipped = scope_from_configuration(default_configuration())
    harness = scope_from_configuration(configuration)
    assert [(h.rules, h.namespace_selector, h.object_selector) for h in harness.hooks] == \
        [(h.rules, h.namespace_selector, h.object_selector) for h in shipped.hooks]
    assert harness.excluded_namespaces == {SCOPE_SERVICE_NAMESPACE}


@pytest.mark.minors()
def test_each_minor_is_its_own_release_in_the_process_the_caller_started(cluster, minor):
    """bin/testcluster --kubernetes MINOR is the minor's own build in the same process (another minor's runs in
    its place, same pid), its API server, controller manager and scheduler that release, and the minor's kubectl."""
    assert release(minor).startswith(f"v{minor}.")
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert (version["serverVersion"]["gitVersion"], version["clientVersion"]["gitVersion"]) == (release(minor),) * 2
    build = str(minor_binary(minor, "testcluster"))
    assert os.readlink(f"/proc/{cluster.proc.pid}/exe") == build
    assert {argv[1]: exe for exe, argv in children(cluster.proc.pid)} == {
        "apiserver": build, "controller-manager": build, "scheduler": build}


def children(pid: int) -> list[tuple[str, list[str]]]:
    """(executable, argv) of each child process of ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                argv = Path(f"/proc/{entry}/cmdline").read_text().split("\0")
                out.append((os.readlink(f"/proc/{entry}/exe"), argv))
        except (FileNotFoundError, ProcessLookupError):
            continue  # a process that ended meanwhile
    return out


def test_a_minor_the_harness_does_not_run_is_refused(harness_built, tmp_path):
    assert refused("--dir", str(tmp_path / "c"), "--kubernetes", "1.35") == (
        f'testcluster: error: --kubernetes "1.35": must be one of {", ".join(MINORS)}')


def test_a_minor_not_built_is_named_with_its_make_target(harness_built, tmp_path):
    """The default minor's testcluster with no other minor's build beside it."""
    other = next(m for m in MINORS if m != DEFAULT_MINOR)
    require_built(f"testcluster-{other}")
    copy = tmp_path / "bin" / "testcluster"
    copy.parent.mkdir()
    shutil.copy2(TESTCLUSTER, copy)
    run = subprocess.run([str(copy), "--dir", str(tmp_path / "c"), "--kubernetes", other], capture_output=True,
                         text=True, timeout=60)
    assert (run.returncode, run.stdout, run.stderr) == (2, "", (
        f"testcluster: error: --kubernetes {other}: {tmp_path / 'bin' / other / 'testcluster'} is missing: "
        f"`make testcluster-{other}` builds it\n"))
