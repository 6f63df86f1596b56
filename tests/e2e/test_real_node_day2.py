"""Day-2 operations on the real node with zero failed admissions: the chart installed with ``helm install`` (2 webhook
replicas, the image ``make image`` builds) on the real kubelet and containerd, while :class:`AdmissionLoad` creates
Deployments continuously through the API server, which calls the webhook through its Service (docs/e2e.md, "Day-2
operations on the real node"; docs/operations.md, "Upgrades, restarts and drains"):

- ``helm upgrade`` changing the config, and one changing the image (a second tag of the same image, so the pod
  template changes): both replicas replaced one by one;
- a webhook pod deleted;
- ``kubectl drain`` on two real nodes (a harness of its own, ``--real-nodes 2``, the chart's default spread putting
  one replica on each): draining real-0 completes, its replica rescheduled on real-1; draining real-1 next is held
  by the PodDisruptionBudget (one replica evicted, its replacement Pending with both nodes cordoned, the other
  serving alone);
- the serving certificate and its CA rotated in the Secret the kubelet mounts, in the steps the controller's
  rotation takes (docs/operations.md, "CA rotation"): the kubelet's delay measured per pod, against the chart's
  default ``certificates.self.propagation``;
- the load of ``bench/bench_apiserver.py`` (8 clients, its realistic Deployment): each pod's RSS and peak memory
  from its cgroup, within the chart's memory limit, no OOM kill, no restart.

Each prints its counts (creates sent, failed, admitted unmutated, the API server's fail-open and rejection
counters' increase) and asserts all but ``sent`` are 0. The certificate is an ``existingSecret`` made by
``python -m webhook certs``: the controller (which makes them in mode ``self``) needs the API server from a pod.
"""
from __future__ import annotations

import base64
import contextlib
import http.client
import json
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml

from bench.bench_apiserver import deployment
from tests.helmtool import CHART, helm_binary
from tests.test_image import ARCHIVE

from .day2load import AdmissionLoad
from .harness import ROOT, Cluster, wait_for
from .test_real_node import built  # noqa: F401 -- the fixture: real nodes can run here, their binaries exist

pytestmark = pytest.mark.timeout(900)
NAMESPACE = "policylib-system"
LOAD_NS = "day2"
SELECTOR = "app.kubernetes.io/name=policylib-webhook"
SECRET = "policylib-webhook-tls"
CTR = "/usr/bin/ctr"


def certs(out: Path) -> Path:
    run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(out)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return out


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


class Release:
    """The chart installed on the real node, and what the scenarios do to it."""

    def __init__(self, c: Cluster, tmp: Path, node_selector: dict[str, str]):
        self.c, self.tmp = c, tmp
        self.ca = certs(tmp / "certs-1")
        self.values: dict = {
            "certificates": {"mode": "existingSecret", "existingSecret": {"name": SECRET,
                                                                         "caBundle": b64(self.ca / "ca.crt")}},
            "controller": {"enabled": False},
            "webhook": {"replicas": 2, "nodeSelector": node_selector},
            "image": {"pullPolicy": "Never"},
        }
        self.revision = 0

    def helm(self, verb: str) -> None:
        self.revision += 1
        values = self.tmp / f"values-{self.revision}.yaml"
        values.write_text(yaml.safe_dump(self.values))
        run = subprocess.run([str(helm_binary()), verb, "policylib", str(CHART), "-n", NAMESPACE, "-f", str(values),
                              "--wait", "--timeout", "300s"], capture_output=True, text=True, env=self.c.env,
                             timeout=330)
        assert run.returncode == 0, (run.stdout, run.stderr, self.pods_wide())

    def pods_wide(self) -> str:
        return self.c.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide", check=False).stdout

    def pods(self) -> list[dict]:
        return self.c.list("pods", NAMESPACE, SELECTOR)

    def ready_pods(self) -> list[dict]:
        return [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")
                and {x["type"]: x["status"] for x in p["status"].get("conditions") or []}.get("Ready") == "True"]

    def wait_ready(self, n: int = 2) -> list[dict]:
        return wait_for(f"{n} ready webhook pods and no other", lambda: (
            pods if len(pods := self.ready_pods()) == n and len(self.pods()) == n else None), timeout=240, interval=1)


def served_certificate(ip: str) -> bytes:
    """The certificate a webhook pod serves now (DER), read from the host at its pod IP."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((ip, 8443), timeout=5) as s, ctx.wrap_socket(s) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der
    return der


def seconds(duration: str) -> int:
    m = re.fullmatch(r"(\d+)([smhd])", duration)
    assert m, duration
    return int(m[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]


@contextlib.contextmanager
def installed(tmp: Path, nodes: int):
    """A harness with ``nodes`` real nodes and the chart installed on them (their zone, zone-real: the other nodes
    are fake), serving through its Service."""
    if not ARCHIVE.is_file():
        pytest.fail(f"{ARCHIVE.relative_to(ROOT)} missing: `make image` builds it", pytrace=False)
    count = ("--real-nodes", str(nodes)) if nodes > 1 else ()
    c = Cluster(tmp / "c", extra_args=("--real-node", *count, "--image", str(ARCHIVE)))
    try:
        selector = {"kubernetes.io/hostname": "real-0"} if nodes == 1 else {"topology.kubernetes.io/zone": "zone-real"}
        r = Release(c, tmp, selector)
        c.kubectl("create", "namespace", NAMESPACE)
        c.kubectl("create", "namespace", LOAD_NS)
        c.kubectl("-n", NAMESPACE, "create", "secret", "tls", SECRET,
                  "--cert", str(r.ca / "tls.crt"), "--key", str(r.ca / "tls.key"))
        r.helm("install")
        r.wait_ready()
        # the API server calls the webhook once its configuration and the Service's endpoints reach it
        with AdmissionLoad(c, LOAD_NS, threads=1) as probe:
            wait_for("a create mutated through the Service", lambda: probe.result.sent > probe.result.unmutated,
                     timeout=120)
        print(f"cluster with {nodes} real node(s) ready in {c.ready_seconds:.0f} s")
        yield r
    finally:
        code = c.stop(timeout=90)
        assert code == 0, c.stderr_text()


@pytest.fixture(scope="module")
def release(built, tmp_path_factory):  # noqa: F811
    with installed(tmp_path_factory.mktemp("real-day2"), 1) as r:
        yield r


@pytest.fixture
def two_nodes(built, tmp_path):  # noqa: F811
    """Its own harness, real-0 and real-1: only the drain uses it, and it stops when the drain test ends."""
    with installed(tmp_path, 2) as r:
        yield r


def rolled(r: Release, before: list[dict]) -> None:
    """Both replicas are new pods (none of ``before`` is left) and neither restarted."""
    after = r.wait_ready()
    assert not {p["metadata"]["uid"] for p in after} & {p["metadata"]["uid"] for p in before}
    for p in after:
        assert [s["restartCount"] for s in p["status"]["containerStatuses"]] == [0], p["status"]


def test_helm_upgrade_changing_the_config(release):
    r = release
    before = r.wait_ready()
    r.values["config"] = {"zoneTopologySpread": {"maxSkew": 2}}
    with AdmissionLoad(r.c, LOAD_NS) as load:
        r.helm("upgrade")
        rolled(r, before)
    print(f"helm upgrade (config): {load.result}")
    load.result.assert_clean(least=50)
    _, got = load.client.create(deployment("after-the-upgrade", LOAD_NS), dry_run=True)
    (zone,) = [c for c in got["spec"]["template"]["spec"]["topologySpreadConstraints"]
               if c["topologyKey"] == "topology.kubernetes.io/zone"]
    assert zone["maxSkew"] == 2  # both new replicas serve the new config


def test_helm_upgrade_changing_the_image(release):
    r = release
    rec = json.loads((r.c.dir / "real-node.json").read_text())
    sock = str(Path(rec["run"]) / "containerd.sock")
    tag = "0.1.0-day2"
    ctr = [CTR, "--address", sock, "-n", "k8s.io", "images"]
    listed = subprocess.run([*ctr, "ls", "-q"], capture_output=True, text=True, timeout=60, check=True).stdout.split()
    (ref,) = [x for x in listed if x.endswith("/policylib-webhook:0.1.0")]  # docker.io/library/... as imported
    run = subprocess.run([*ctr, "tag", "--force", ref, ref.replace(":0.1.0", f":{tag}")], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    before = r.wait_ready()
    r.values["image"]["tag"] = tag
    with AdmissionLoad(r.c, LOAD_NS) as load:
        r.helm("upgrade")
        rolled(r, before)
    print(f"helm upgrade (image): {load.result}")
    assert {p["spec"]["containers"][0]["image"] for p in r.pods()} == {f"policylib-webhook:{tag}"}
    load.result.assert_clean(least=50)


def test_a_webhook_pod_deleted(release):
    """Also measures how long the pod's address stays a ready endpoint of the Service after the delete: the
    preStop delay must cover it (the API server dials only ready endpoints; the pod serves until preStop ends)."""
    r = release
    before = r.wait_ready()
    victim = before[0]
    ip = victim["status"]["podIP"]
    (command,) = [c["lifecycle"]["preStop"]["exec"]["command"] for c in victim["spec"]["containers"]]
    assert command[0] == "sleep", command
    pre_stop = float(command[1])

    with AdmissionLoad(r.c, LOAD_NS) as load:
        # The delete and the polls over one kept-alive connection (a few ms each), not with kubectl: a kubectl
        # process takes up to a second on a busy machine, and that would be counted as the endpoint's delay.
        conn = http.client.HTTPSConnection(load.client.host, load.client.port, context=load.client.context,
                                           timeout=30)
        slices = ("/apis/discovery.k8s.io/v1/namespaces/" + NAMESPACE + "/endpointslices?labelSelector="
                + urllib.parse.quote("kubernetes.io/service-name=policylib-webhook"))

        def call(method: str, path: str) -> dict:
            conn.request(method, path, headers=load.client.headers)
            response = conn.getresponse()
            body = response.read()
            assert response.status == 200, (method, path, response.status, body[:300])
            return json.loads(body)

        def ready_endpoint() -> bool:
            return any(ip in e["addresses"] and (e.get("conditions") or {}).get("ready")
                       for s in call("GET", slices)["items"] for e in s.get("endpoints") or [])

        try:
            assert ready_endpoint()
            deleted = time.monotonic()
            call("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{victim['metadata']['name']}")
            wait_for("the deleted pod no longer a ready endpoint", lambda: not ready_endpoint(), timeout=60,
                     interval=0.02)
            unready = time.monotonic() - deleted  # from before the DELETE to the answer that saw it: an upper bound
        finally:
            conn.close()
        after = r.wait_ready()
    print(f"webhook pod deleted: {load.result}")
    print(f"deleted pod a ready endpoint for at most {unready:.2f} s after the delete; preStop {pre_stop:g} s")
    assert victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in after}
    assert unready * 2 <= pre_stop
    load.result.assert_clean(least=50)


def node_of(pods: list[dict]) -> dict[str, str]:
    return {p["metadata"]["uid"]: p["spec"].get("nodeName", "") for p in pods}


def test_kubectl_drain_completes_on_two_real_nodes(two_nodes):
    """One replica on each node (the chart's default spread, its hostname constraint ScheduleAnyway, no value set):
    ``kubectl drain real-0`` completes, the evicted replica's replacement Ready on real-1; ``kubectl drain real-1``
    next is held by the PodDisruptionBudget (minAvailable 1): one replica evicted, its replacement Pending (both
    nodes cordoned), the other serving alone."""
    r = two_nodes
    before = r.wait_ready()
    assert sorted(node_of(before).values()) == ["real-0", "real-1"], r.pods_wide()
    (evicted,) = [uid for uid, node in node_of(before).items() if node == "real-0"]
    drain_args = ("--ignore-daemonsets", "--delete-emptydir-data")
    with AdmissionLoad(r.c, LOAD_NS) as load:
        drain = r.c.kubectl("drain", "real-0", *drain_args, "--timeout=180s", check=False, timeout=240)
        after = r.wait_ready()
    print(f"kubectl drain real-0: {load.result}")
    print(f"kubectl drain real-0 exit {drain.returncode}: {drain.stdout.strip().splitlines()[-1:]}")
    assert drain.returncode == 0, (drain.stdout, drain.stderr, r.pods_wide())
    assert evicted not in node_of(after) and set(node_of(after).values()) == {"real-1"}, r.pods_wide()
    load.result.assert_clean(least=50)

    # The disruption controller counts the replacement healthy on its own loop: until it does, the budget allows no
    # eviction at all, and the drain below would be refused for both replicas instead of one (a race, not the case).
    wait_for("the PodDisruptionBudget allows one disruption again", lambda: (
        (pdb := r.c.get("poddisruptionbudget", "policylib-webhook", NAMESPACE).get("status") or {})
        .get("currentHealthy") == 2 and pdb.get("disruptionsAllowed") == 1), timeout=120, interval=0.5)
    with AdmissionLoad(r.c, LOAD_NS) as held_load:
        drain = r.c.kubectl("drain", "real-1", *drain_args, "--timeout=15s", check=False, timeout=120)
        held, pending = r.ready_pods(), [p for p in r.pods() if p["status"]["phase"] == "Pending"]
        r.c.kubectl("uncordon", "real-0", "real-1")
        r.wait_ready()
    print(f"kubectl drain real-1 (after real-0): {held_load.result}")
    print(f"kubectl drain real-1 exit {drain.returncode}: {drain.stderr.strip().splitlines()[-1:]}")
    assert drain.returncode != 0, drain.stdout
    assert "disruption budget" in drain.stdout + drain.stderr, (drain.stdout, drain.stderr)
    assert len(held) == 1 and held[0]["metadata"]["uid"] in node_of(after), r.pods_wide()
    assert len(pending) == 1 and not pending[0]["spec"].get("nodeName"), r.pods_wide()
    held_load.result.assert_clean(least=50)


def test_certificate_rotation_through_the_kubelet(release):
    """Serving certificate and CA rotated as the controller's rotation does (docs/operations.md, "CA rotation"):
    bundle old + new CA; the Secret gets a certificate of the new CA; once every pod serves it (the kubelet's
    delay, measured), the old CA leaves the bundle."""
    r = release
    pods = r.wait_ready()
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
    old = {name: served_certificate(ip) for name, ip in ips.items()}
    new = certs(r.tmp / "certs-2")
    with AdmissionLoad(r.c, LOAD_NS) as load:
        r.values["certificates"]["existingSecret"]["caBundle"] = base64.b64encode(
            (new / "ca.crt").read_bytes() + (r.ca / "ca.crt").read_bytes()).decode()
        r.helm("upgrade")  # the bundle only: no pod changes
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                  "metadata": {"name": SECRET, "namespace": NAMESPACE},
                  "data": {"tls.crt": b64(new / "tls.crt"), "tls.key": b64(new / "tls.key")}}
        r.c.kubectl("replace", "-f", "-", input=json.dumps(secret))
        written = time.monotonic()
        delays: dict[str, float] = {}

        def propagated() -> bool:
            for name, ip in ips.items():
                if name not in delays and served_certificate(ip) != old[name]:
                    delays[name] = time.monotonic() - written
            return len(delays) == len(ips)

        wait_for("every pod serving the new certificate", propagated, timeout=300, interval=0.5)
        r.values["certificates"]["existingSecret"]["caBundle"] = b64(new / "ca.crt")
        r.helm("upgrade")
        sent = load.result.sent
        wait_for("creates admitted with the new bundle alone", lambda: load.result.sent >= sent + 50, timeout=120)
        assert {p["metadata"]["uid"] for p in r.wait_ready()} == {p["metadata"]["uid"] for p in pods}
    propagation = seconds(yaml.safe_load((CHART / "values.yaml").read_text())["certificates"]["self"]["propagation"])
    print(f"certificate rotation: {load.result}")
    print(f"kubelet Secret propagation per pod: {', '.join(f'{d:.1f} s' for d in sorted(delays.values()))}; "
          f"chart's default propagation {propagation} s")
    # the kubelet refreshes a Secret volume when it next syncs the pod: every syncFrequency (1 min) plus up to
    # half of it in jitter, 90 s at most, half the chart's 180 s; what was measured must leave a quarter free
    assert max(delays.values()) <= propagation * 0.75, delays
    load.result.assert_clean(least=50)


def cgroup_of(rec: dict, uid: str) -> Path:
    (path,) = Path("/sys/fs/cgroup/memory", rec["cgroup"]).rglob(f"pod{uid}")
    return path


def rss_mib(cgroup: Path) -> float:
    """The resident memory of the pod's processes, MiB: their proportional set sizes summed (gunicorn's workers
    share the pages they were forked with; VmRSS would count those once per process)."""
    total = 0
    for procs in cgroup.rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            try:
                rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            except OSError:
                continue
            total += sum(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))
    return total / 1024


def test_the_webhook_under_load_stays_within_its_memory_limit(release):
    """bench/bench_apiserver.py's load (8 clients back to back, its realistic Deployment) for 30 s."""
    r = release
    rec = json.loads((r.c.dir / "real-node.json").read_text())
    pods = r.wait_ready()
    cgroups = {p["metadata"]["name"]: cgroup_of(rec, p["metadata"]["uid"]) for p in pods}
    limit = {name: int((cg / "memory.limit_in_bytes").read_text()) for name, cg in cgroups.items()}
    # two pods, two cgroups, each limited to the chart's webhook.resources.limits.memory
    chart_limit = yaml.safe_load((CHART / "values.yaml").read_text())["webhook"]["resources"]["limits"]["memory"]
    assert chart_limit.endswith("Mi"), chart_limit
    assert len(set(cgroups.values())) == 2 and set(limit.values()) == {int(chart_limit[:-2]) * 2**20}, (cgroups, limit)
    rss = {name: 0.0 for name in cgroups}
    with AdmissionLoad(r.c, LOAD_NS, threads=8, interval=0) as load:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            for name, cg in cgroups.items():
                rss[name] = max(rss[name], rss_mib(cg))
            time.sleep(1)  # a sampling period, not a synchronisation
    peak = {name: int((cg / "memory.max_usage_in_bytes").read_text()) / 2**20 for name, cg in cgroups.items()}
    ooms = {name: (cg / "memory.oom_control").read_text() for name, cg in cgroups.items()}
    print(f"bench load: {load.result}")
    for name in cgroups:
        print(f"{name}: RSS (PSS summed) max {rss[name]:.0f} MiB, cgroup peak {peak[name]:.0f} MiB, "
              f"limit {limit[name] / 2**20:.0f} MiB")
    after = r.wait_ready()
    assert {p["metadata"]["uid"] for p in after} == {p["metadata"]["uid"] for p in pods}
    for p in after:
        (status,) = p["status"]["containerStatuses"]
        assert status["restartCount"] == 0 and not status.get("lastState"), status
    for name, text in ooms.items():
        assert re.search(r"^oom_kill 0$", text, re.M) or "oom_kill" not in text, (name, text)
        assert peak[name] * 2**20 < limit[name]
    load.result.assert_clean(least=200)
