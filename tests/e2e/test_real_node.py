"""``testcluster --real-node``: a Node run by the real kubelet (of the minor run, built from k8s.io/kubernetes) and Debian's
containerd and runc runs a pod with a read-only root filesystem, a non-root user and an HTTP readiness probe, which
answers at its pod IP; stopping the harness, or starting the next one after it was killed, leaves nothing of it
on the machine: no process, mount, network namespace, route, cgroup or file, and the kernel settings the kubelet
changes are back (docs/e2e.md, "A real node"). ``--real-nodes 2``: two such nodes, each its own containerd, kubelet,
pods' subnet and cgroup root, both Ready and labelled, each running a pod that answers at its pod IP; stop leaves
nothing of either, nor does the next start after a two-node harness was killed; a record written before
``--real-nodes`` (no ``nodes`` list) is still read and swept."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from .harness import DEFAULT_MINOR, Cluster, minor_target, refused, release, require_built, wait_for

pytestmark = pytest.mark.timeout(600)

SYSCTLS = ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory")
PACKAGES = ("/usr/bin/containerd", "/usr/sbin/runc", "/usr/bin/containerd-shim-runc-v2", "/usr/lib/cni/ptp",
            "/usr/lib/cni/host-local")
IMAGE = "testcluster.local/pause:1"


def cannot_run_containers() -> str | None:
    if os.geteuid() != 0:
        return "running containers (containerd, runc, the kubelet) needs root"
    if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/cgroup.controllers").is_file():
        return "no cgroup hierarchy with the memory controller at /sys/fs/cgroup"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return None


@pytest.fixture(scope="module")
def built(minor):
    """Real nodes can run here, and the binaries of the minor's real node exist."""
    reason = cannot_run_containers()
    if reason:
        pytest.skip(f"this machine cannot run containers: {reason}")
    require_built(minor_target(minor))
    require_built("testcluster-real-node" if minor == DEFAULT_MINOR else f"testcluster-real-node-{minor}")
    missing = [p for p in PACKAGES if not Path(p).exists()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: `make node-packages` installs them", pytrace=False)


def sysctls() -> dict[str, str]:
    return {k: Path("/proc/sys", k).read_text().strip() for k in SYSCTLS}


def record(c: Cluster) -> dict:
    return json.loads((c.dir / "real-node.json").read_text())


#: Machine-wide places a kubelet or containerd 1.6 writes to whatever their configuration says.
SHARED_PLACES = ("/var/log/pods", "/var/log/containers", "/var/lib/cni", "/run/containerd", "/run/testcluster",
                 "/run/netns")


def machine_paths() -> set[str]:
    return {str(p) for place in SHARED_PLACES if Path(place).exists()
            for p in [Path(place), *Path(place).rglob("*")]}


def nodes_of(rec: dict) -> list[dict]:
    """Every real node of a record (``nodes``; a record written before ``--real-nodes`` is its one node)."""
    return rec.get("nodes") or [rec]


def leftovers(rec: dict, before: set[str] | None = None) -> list[str]:
    """Everything of the real nodes of ``rec`` still on the machine (and, given ``before``, any path in the shared
    places that was not there before)."""
    found = [f"new path {p}" for p in sorted(machine_paths() - before)] if before is not None else []
    for node in nodes_of(rec):
        found += node_leftovers(node)
    addrs = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    found += [f"address {line}" for line in addrs.splitlines() if f" {rec['apiAddress']}/" in line]
    return found


def node_leftovers(rec: dict) -> list[str]:
    found = []
    dirs = (rec["run"], rec["state"])
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(d + "/" in cmdline for d in dirs):
            found.append(f"process {proc.name}: {cmdline[:200]}")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if any(point == d or point.startswith(d + "/") for d in dirs):
            found.append(f"mount {point}")
    found += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob(f"*/{rec['cgroup']}")]
    prefix = rec["subnet"].rsplit(".", 1)[0] + "."
    routes = subprocess.run(["ip", "-4", "-o", "route", "show", "table", "all"], capture_output=True, text=True,
                            check=True).stdout
    found += [f"route {line}" for line in routes.splitlines() if line.startswith(prefix)]
    found += [f"file {p}" for p in dirs if Path(p).exists()]
    found += [f"file {p}" for p in Path("/var/lib/cni/results").glob(f"{rec['network']}-*")]
    netns = Path("/run/netns")
    if netns.is_dir():
        for ns in netns.iterdir():
            addrs = subprocess.run(["ip", "-n", ns.name, "-4", "-o", "addr"], capture_output=True, text=True).stdout
            if prefix in addrs:
                found.append(f"network namespace {ns}")
    return found


def web_pod(name: str, node: str = "real-0") -> dict:
    """A pod the way the chart writes its own: non-root, read-only root filesystem, an HTTP readiness probe."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534},
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "web", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["/pause", "-listen", ":8080"], "ports": [{"containerPort": 8080}],
                "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}},
                "readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}},
            }],
        },
    }


def run_web_pod(c: Cluster, ns: str, node: str = "real-0", name: str = "web") -> dict:
    if c.kubectl("get", "namespace", ns, check=False).returncode != 0:
        c.kubectl("create", "namespace", ns)
    c.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(web_pod(name, node)))

    def ready():
        pod = json.loads(c.kubectl("get", "pod", name, "-n", ns, "-o", "json").stdout)
        conds = {x["type"]: x["status"] for x in pod["status"].get("conditions", [])}
        return pod if conds.get("Ready") == "True" and pod["status"].get("podIP") else None

    pod = wait_for("the pod on the real node Ready", ready, timeout=180)
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8080/", timeout=10) as resp:
        assert (resp.status, resp.read()) == (200, b"ok\n")
    return pod


@pytest.mark.minors()
def test_a_real_node_runs_a_pod_and_stop_leaves_nothing(built, tmp_path, minor):
    """On each minor: its kubelet, with Debian's containerd."""
    before, paths = sysctls(), machine_paths()
    c = Cluster(tmp_path / "c", extra_args=("--real-node",), minor=minor)
    try:
        rec = record(c)
        node = json.loads(c.kubectl("get", "node", "real-0", "-o", "json").stdout)
        assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-real"
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "real-0"
        assert node["status"]["nodeInfo"]["kubeletVersion"] == release(minor)
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6.")
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses["InternalIP"] == rec["nodeIP"] and not rec["nodeIP"].startswith("127.")
        pod = run_web_pod(c, "real")
        assert pod["spec"]["nodeName"] == "real-0" and pod["status"]["hostIP"] == rec["nodeIP"]
        assert re.fullmatch(rf"{re.escape(rec['subnet'].rsplit('.', 1)[0])}\.\d+", pod["status"]["podIP"])
        # the kubelet changed the kernel settings it manages (restored below)
        assert sysctls() == {"kernel/panic": "10", "kernel/panic_on_oops": "1", "vm/overcommit_memory": "1"}
        assert leftovers(rec), "a running node shows up in leftovers(): the check can fail"
    finally:
        code = c.stop(timeout=90)
    assert code == 0, c.stderr_text()
    assert leftovers(rec, paths) == []
    assert sysctls() == before


def test_a_killed_harness_is_cleaned_by_the_next_start(built, tmp_path):
    before, paths = sysctls(), machine_paths()
    # two real nodes, a pod on each: the next start removes what both left
    first = Cluster(tmp_path / "first", extra_args=("--real-node", "--real-nodes", "2"))
    try:
        rec = record(first)
        for node in ("real-0", "real-1"):
            run_web_pod(first, "killed", node=node, name=f"web-{node}")
    finally:
        first.proc.kill()
        first.proc.wait(30)
    # SIGKILL ends testcluster, its kubelets and containerds, but not the shims, the pods' processes, their network
    # namespaces, routes and cgroups
    for node in nodes_of(rec):
        left = node_leftovers(node)
        assert any(x.startswith("process") for x in left) and any(x.startswith("cgroup") for x in left), left
        assert any(x.startswith("route") for x in left), left
    second = Cluster(tmp_path / "second", extra_args=("--real-node",))
    try:
        assert leftovers(rec) == []
        assert "removing what the killed real node of pid" in second.stderr_text()
        rec2 = record(second)
    finally:
        code = second.stop(timeout=90)
    assert code == 0, second.stderr_text()
    assert leftovers(rec2, paths) == []
    assert leftovers(rec, paths) == []
    assert sysctls() == before


def test_two_real_nodes_each_run_a_pod_and_stop_leaves_nothing(built, tmp_path):
    before, paths = sysctls(), machine_paths()
    c = Cluster(tmp_path / "c", extra_args=("--real-node", "--real-nodes", "2"))
    try:
        rec = record(c)
        nodes = nodes_of(rec)
        assert [n["node"] for n in nodes] == ["real-0", "real-1"]
        # real-0 at the top level too, as in a one-node record
        assert {k: rec[k] for k in nodes[0]} == nodes[0]
        for key in ("run", "state", "cgroup", "subnet", "network"):
            assert len({n[key] for n in nodes}) == 2, (key, nodes)
        endpoints = set()
        for n in nodes:
            node = json.loads(c.kubectl("get", "node", n["node"], "-o", "json").stdout)
            labels = node["metadata"]["labels"]
            assert (labels["topology.kubernetes.io/zone"], labels["kubernetes.io/hostname"]) == ("zone-real", n["node"])
            assert {x["type"]: x["status"] for x in node["status"]["conditions"]}["Ready"] == "True"
            assert node["status"]["nodeInfo"]["kubeletVersion"] == release(DEFAULT_MINOR)
            endpoints.add(node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"])
            pod = run_web_pod(c, "two", node=n["node"], name=f"web-{n['node']}")
            assert pod["spec"]["nodeName"] == n["node"] and pod["status"]["hostIP"] == rec["nodeIP"]
            assert re.fullmatch(rf"{re.escape(n['subnet'].rsplit('.', 1)[0])}\.\d+", pod["status"]["podIP"])
            assert node_leftovers(n), "a running node shows up in leftovers(): the check can fail"
        assert len(endpoints) == 2  # each kubelet its own port
    finally:
        code = c.stop(timeout=90)
    assert code == 0, c.stderr_text()
    assert leftovers(rec, paths) == []
    assert sysctls() == before


@pytest.mark.parametrize("args,message", [
    (("--real-nodes", "2"), "testcluster: error: --real-nodes needs --real-node; usage: testcluster --dir DIR "),
    (("--real-node", "--real-nodes", "0"), "testcluster: error: --real-nodes 0: from 1 to 8"),
])
def test_real_nodes_flag_errors(tmp_path, args, message):
    require_built("testcluster")
    assert refused("--dir", str(tmp_path / "c"), *args).startswith(message)


def test_a_record_from_before_real_nodes_is_still_swept(built, tmp_path):
    """A killed harness's record in the format before ``--real-nodes`` (one node, no ``nodes`` list): the next start
    removes its directories."""
    pid = 4_194_304 + os.getpid() % 100_000  # above the kernel's largest pid_max: never a running process
    run, state = Path("/run/testcluster", str(pid)), tmp_path / "old-state"
    (state / "containerd").mkdir(parents=True)
    run.mkdir(parents=True)
    old = {"pid": pid, "node": "real-0", "run": str(run), "state": str(state), "cgroup": f"testcluster-{pid}",
           "subnet": "10.244.251.0/24", "network": f"testcluster-{pid}", "nodeIP": "192.0.2.1",
           "apiLabel": f"lo:tc{pid}", "apiAddress": "", "services": ""}
    (run / "record.json").write_text(json.dumps(old))
    c = Cluster(tmp_path / "c", extra_args=("--real-node",))
    try:
        assert f"removing what the killed real node of pid {pid} left" in c.stderr_text()
        assert not run.exists() and not state.exists()
    finally:
        code = c.stop(timeout=90)
    assert code == 0, c.stderr_text()
