"""The chart the way users install it, on the real node: ``helm install charts/policylib`` with the image ``make image``
builds (imported into the node's containerd) and the chart's defaults (two webhook and two controller replicas,
their securityContext (admitted in a namespace that enforces Pod Security's restricted level), resources, probes
and PodDisruptionBudgets, the self-managed certificates the controller's
leader makes, the NetworkPolicy enabled), a policylib config for the gang and Volcano families, and ``nodeSelector``
``real-0`` (the harness's other nodes are fake). The pods run Running and Ready; they reach the API server with their
service-account tokens at the ``kubernetes`` Service's ClusterIP (docs/e2e.md, "A real node"); the API server calls
the webhook through its Service (its ready endpoints, the pod IPs); a Deployment, a Volcano Job and a TFJob created
with ``kubectl apply`` are stored mutated exactly as ``policylib preview`` says; the controller's leader, frozen
and then deleted without a grace period (so it never gives the Lease up), is replaced by the other replica within the
Lease's bound, which writes each Deployment once; the serving key is mode 0440 as the kubelet writes it, read by the
server through the pod's fsGroup; and 4,000 idle TLS (or raw TCP) connections held against the webhook's pods keep
neither a new client nor the API server's reviews out.

Not here: two webhook replicas on two nodes (one real node), a network plugin that enforces the NetworkPolicy (none
here does: the test checks that the API server accepts it and that its selector, port and source block match the pods
and the API server's connections), kube-proxy (the ClusterIP is the API server's own address), and the day-2
scenarios.
"""
from __future__ import annotations

import base64
import ipaddress
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from bench.bench_connections import client_context, hold_idle, new_client_review
from tests.helmtool import CHART, helm_binary
from tests.test_image import ARCHIVE

from .conftest import CONFIGS
from .harness import ROOT, SHARED, Cluster, deployment, wait_for
from .test_real_node import built  # noqa: F401 -- the fixture: real nodes can run here, their binaries exist
from .util import managed, preview

#: The chart's install, on the API server and the kubelet of each minor.
pytestmark = [pytest.mark.timeout(900), pytest.mark.minors()]
NAMESPACE = "policylib-system"
CONFIG = CONFIGS["gang"]
CRDS = ("schemas/volcano/batch.volcano.sh_jobs.yaml", "schemas/volcano/scheduling.volcano.sh_podgroups.yaml",
        "schemas/kubeflow/kubeflow.org_tfjobs.yaml", "schemas/scheduler-plugins/scheduling.x-k8s.io_podgroups.yaml")
VOLCANO_JOB = SHARED / "examples/volcano/job-basic.yaml"
TFJOB = SHARED / "examples/kubeflow/tfjob-simple.yaml"
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())
LEASE_SECONDS = 15   # controller.leaseDurationSeconds, the default
PSS = ("pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")
#: Workloads go to the fake nodes of zone-a (their pods run without an image); never to real-0, whose containerd
#: would try to pull their image.
FAKE_ZONE = {"topology.kubernetes.io/zone": "zone-a"}


def real_node_values(cidr: str) -> dict:
    """What the test sets: the config, the NetworkPolicy and the API server's source block, the real node."""
    on_real = {"kubernetes.io/hostname": "real-0"}
    return {"config": CONFIG, "networkPolicy": {"enabled": True, "from": [{"ipBlock": {"cidr": cidr}}]},
            "webhook": {"nodeSelector": on_real}, "controller": {"nodeSelector": on_real}}


def helm_install(c: Cluster, tmp: Path, values: dict) -> None:
    (tmp / "values.yaml").write_text(yaml.safe_dump(values))
    install = subprocess.run([str(helm_binary()), "install", "policylib", str(CHART), "-n", NAMESPACE,
                              "--create-namespace", "-f", str(tmp / "values.yaml"), "--wait", "--timeout", "480s"],
                             capture_output=True, text=True, env=c.env, timeout=540)
    assert install.returncode == 0, (install.stdout, install.stderr,
                                     c.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide").stdout)


def gateway(c: Cluster) -> str:
    """The host's address on the pods' side (ptp gives every host-side veth the subnet's first address): the
    source of what the API server and the kubelet send to a pod."""
    rec = json.loads((c.dir / "real-node.json").read_text())
    return str(next(ipaddress.ip_network(rec["subnet"]).hosts()))


@pytest.fixture(scope="module")
def chart_on_real_node(built, tmp_path_factory, minor):  # noqa: F811
    if not ARCHIVE.is_file():
        pytest.fail(f"{ARCHIVE.relative_to(ROOT)} missing: `make image` builds it", pytrace=False)
    tmp = tmp_path_factory.mktemp(f"real-chart-{minor}")
    c = Cluster(tmp / "c", extra_args=("--real-node", "--image", str(ARCHIVE)), minor=minor)
    try:
        c.install_crds(*CRDS)
        # the namespace at Pod Security's restricted level, enforced: the API server admits no pod of the chart's
        # that breaks it (helm's --create-namespace leaves an existing namespace as it is)
        c.kubectl("create", "namespace", NAMESPACE)
        c.kubectl("label", "namespace", NAMESPACE, *PSS)
        helm_install(c, tmp, real_node_values(f"{gateway(c)}/32"))
        yield c, tmp
    finally:
        code = c.stop(timeout=120)
        assert code == 0, c.stderr_text()


def pods(c: Cluster, app: str) -> list[dict]:
    return [p for p in c.list("pods", NAMESPACE, f"app.kubernetes.io/name={app}")
            if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict) -> bool:
    return {x["type"]: x["status"] for x in pod["status"].get("conditions", [])}.get("Ready") == "True"


@pytest.mark.parametrize("app,values", [("policylib-webhook", "webhook"), ("policylib-controller", "controller")])
def test_the_pods_run_the_image_with_the_charts_settings(chart_on_real_node, app, values):
    c, _ = chart_on_real_node
    running = pods(c, app)
    assert len(running) == DEFAULTS[values]["replicas"] == 2
    for pod in running:
        assert pod["spec"]["nodeName"] == "real-0" and ready(pod), pod["status"]
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0, status
        assert status["image"].endswith("policylib-webhook:0.1.0")
        (container,) = pod["spec"]["containers"]
        assert container["imagePullPolicy"] == "IfNotPresent"
        assert container["resources"] == DEFAULTS[values]["resources"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert all(container[p]["httpGet"] for p in ("readinessProbe", "startupProbe"))
        # the webhook's liveness is its listener (a flood of TLS handshakes never restarts it); the controller's is HTTP
        liveness = container["livenessProbe"]
        if app == "policylib-webhook":
            assert liveness["tcpSocket"] == {"port": "https"} and "httpGet" not in liveness, liveness
        else:
            assert liveness["httpGet"]["path"] == "/healthz", liveness
        # the ServiceAccount admission plugin mounted the projected token, CA and namespace
        (api,) = [v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
        sources = {next(iter(s)) for s in api["projected"]["sources"]}
        assert sources == {"serviceAccountToken", "configMap", "downwardAPI"}
    # admitted under Pod Security's restricted level, and still within it: a server-side dry run of the label warns
    # about every running pod that breaks the level, and names none
    labels = c.get("namespace", NAMESPACE)["metadata"]["labels"]
    assert {f"{k}={v}" for k, v in labels.items()} >= set(PSS)
    check = c.kubectl("label", "--dry-run=server", "--overwrite", "namespace", NAMESPACE, *PSS)
    assert "Warning" not in check.stderr and "violate" not in check.stderr, check.stderr
    pdb = c.get("poddisruptionbudget", app, NAMESPACE)
    assert pdb["spec"]["minAvailable"] == 1
    wait_for(f"{app}'s PodDisruptionBudget allows one disruption",
             lambda: (c.get("poddisruptionbudget", app, NAMESPACE)["status"].get("disruptionsAllowed"),
                      c.get("poddisruptionbudget", app, NAMESPACE)["status"].get("currentHealthy")) == (1, 2),
             timeout=60)


def test_the_controller_made_the_certificates_and_the_service_routes_to_the_pods(chart_on_real_node):
    c, _ = chart_on_real_node
    ca = c.get("secret", "policylib-webhook-ca", NAMESPACE)
    tls = c.get("secret", "policylib-webhook-tls", NAMESPACE)
    assert tls["type"] == "kubernetes.io/tls"
    hooks = c.get("mutatingwebhookconfiguration", "policylib-webhook")["webhooks"]
    assert {h["clientConfig"]["caBundle"] for h in hooks} == {ca["data"]["ca.crt"]}
    assert {h["clientConfig"]["service"]["name"] for h in hooks} == {"policylib-webhook"}
    assert c.get_or_none("configmap", "kube-root-ca.crt", NAMESPACE) is not None
    slices = c.list("endpointslices", NAMESPACE, "kubernetes.io/service-name=policylib-webhook")
    addresses = {a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]}
    assert addresses == {p["status"]["podIP"] for p in pods(c, "policylib-webhook")}
    kubernetes = c.get("service", "kubernetes", "default")["spec"]["clusterIP"]
    endpoints = {a for s in c.list("endpointslices", "default", "kubernetes.io/service-name=kubernetes")
                 for e in s.get("endpoints") or [] for a in e["addresses"]}
    assert endpoints == {kubernetes}, "the kubernetes Service's endpoint is its ClusterIP: the API server listens there"


def test_the_network_policy_is_accepted_and_matches_the_pods_and_the_api_server(chart_on_real_node):
    """Nothing enforces it here (the ptp CNI plugin has no policy engine): what can be checked is that the API
    server stores it, that its selector picks exactly the webhook's pods, its port is their serving port, and every
    connection the API server and the kubelet hold to them comes from its ipBlock."""
    c, _ = chart_on_real_node
    policy = c.get("networkpolicy", "policylib-webhook", NAMESPACE)
    selector = ",".join(f"{k}={v}" for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    selected = {p["metadata"]["name"] for p in c.list("pods", NAMESPACE, selector)}
    webhook = pods(c, "policylib-webhook")
    assert selected == {p["metadata"]["name"] for p in webhook}
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8443}]
    assert {p["containerPort"] for pod in webhook for p in pod["spec"]["containers"][0]["ports"]} == {8443}
    blocks = [ipaddress.ip_network(f["ipBlock"]["cidr"]) for f in rule["from"]]
    ips = {p["status"]["podIP"] for p in webhook}

    def sources():
        # A review now, so the API server holds a connection to a webhook pod while ``ss`` looks (an idle
        # kept-alive connection may have been closed since the last review).
        c.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(deployment("probe", "default", 1)))
        out = subprocess.run(["ss", "-tnH", "state", "established"], capture_output=True, text=True,
                             check=True).stdout
        found = set()
        for line in out.splitlines():
            local, peer = line.split()[-2:]
            if peer.rsplit(":", 1)[0] in ips and peer.endswith(":8443"):
                found.add(local.rsplit(":", 1)[0])
        return found
    seen = wait_for("connections to the webhook pods", sources, timeout=60)
    assert all(any(ipaddress.ip_address(s) in b for b in blocks) for s in seen), (seen, blocks)


def stored_as_preview(c: Cluster, tmp: Path, body: dict, resource: str, config: dict = CONFIG) -> tuple[dict, dict]:
    """``kubectl apply`` of ``body`` until the webhook has mutated it (the API server reaches it once the
    caBundle and the endpoints are in place); returns (stored, preview)."""
    expected = preview([body], config, tmp)[0]
    assert expected != body, "preview changes nothing: the comparison could not fail"
    name, ns = body["metadata"]["name"], body["metadata"]["namespace"]

    def created():
        c.kubectl("apply", "-f", "-", input=json.dumps(body))
        got = c.get(resource, name, ns)
        if contains(got["spec"], expected["spec"]) and policylib_metadata(got) == policylib_metadata(expected):
            return got
        if policylib_metadata(got) == policylib_metadata(body):   # admitted unchanged (failurePolicy Ignore)
            c.kubectl("-n", ns, "delete", resource, name, "--wait=true")
        return None
    return wait_for(f"{body['kind']} {name} stored as preview says", created, timeout=120), expected


def contains(stored, value) -> bool:
    """``value`` is in ``stored``: maps may hold more keys (the API server's defaults), lists are equal item by
    item, all else is equal."""
    if isinstance(value, dict):
        return isinstance(stored, dict) and all(k in stored and contains(stored[k], v) for k, v in value.items())
    if isinstance(value, list):
        return isinstance(stored, list) and len(stored) == len(value) and all(map(contains, stored, value))
    return stored == value


def policylib_metadata(obj: dict) -> dict:
    meta = obj["metadata"]
    return {k: {x: y for x, y in (meta.get(k) or {}).items() if "policylib" in x or "scheduling" in x}
            for k in ("annotations", "labels")}


def jobs_in(path: Path, ns: str) -> dict:
    (job,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") in ("Job", "TFJob")]
    job["metadata"]["namespace"] = ns
    job["metadata"].pop("generateName", None)
    job["metadata"].setdefault("name", path.stem)
    return job


def test_objects_created_with_kubectl_are_stored_as_preview_says(chart_on_real_node):
    c, tmp = chart_on_real_node
    c.kubectl("create", "namespace", "apps")
    got, expected = stored_as_preview(c, tmp, deployment("web", "apps", 3, node_selector=FAKE_ZONE), "deployment")
    assert managed(got) == managed(expected)
    for path, resource in ((VOLCANO_JOB, "jobs.batch.volcano.sh"), (TFJOB, "tfjobs.kubeflow.org")):
        got, expected = stored_as_preview(c, tmp, jobs_in(path, "apps"), resource)
        assert contains(got["spec"], expected["spec"])
        assert policylib_metadata(got) == policylib_metadata(expected)
    # the reviews reached the webhook's pods: their logs (read through the kubelet) name each object, mutated
    wait_for_reviews(c, "apps", {("Deployment", "web", True), ("Job", "test-job", True), ("TFJob", "tfjob-simple", True)})


def wait_for_reviews(c: Cluster, namespace: str, wanted: set[tuple[str, str, bool]]) -> None:
    """Wait until the webhook pods' logs hold a review line (kind, name, mutated) for each of ``wanted`` in
    ``namespace``: the lines are written in batches, so the last may reach the log a moment after its answer."""
    def reviewed() -> set | None:
        found = set()
        for p in pods(c, "policylib-webhook"):
            for line in c.kubectl("-n", NAMESPACE, "logs", p["metadata"]["name"]).stdout.splitlines():
                entry = json.loads(line) if line.startswith("{") else {}
                if entry.get("msg") == "review" and entry.get("namespace") == namespace:
                    found.add((entry.get("kind"), entry.get("name"), entry.get("mutated")))
        return found if wanted <= found else None
    wait_for("every object's review in the webhook pods' logs", reviewed, timeout=60)


# --- the controller's leader, killed ----------------------------------------------------------------------------

def container_processes(pod: dict) -> list[int]:
    """The host pids of a pod's processes (their cgroup names the pod's UID)."""
    uid = pod["metadata"]["uid"]
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        if f"pod{uid}" in cgroups or f"pod{uid.replace('-', '_')}" in cgroups:
            out.append(int(proc.name))
    return out


def holder(c: Cluster) -> str | None:
    lease = c.get_or_none("lease", "policylib-controller", NAMESPACE)
    return ((lease or {}).get("spec") or {}).get("holderIdentity") or None


def metric(pod: dict, name: str) -> float:
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8081/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def rewrite_events(c: Cluster, ns: str, least: int) -> list[dict] | None:
    """The controller's ``SpreadRewritten`` Events in ``ns``, once there are at least ``least``."""
    found = [e for e in c.list("events.events.k8s.io", ns) if e.get("reason") == "SpreadRewritten"]
    return found if len(found) >= least else None


def test_the_controllers_leader_killed_the_other_takes_over_and_writes_once(chart_on_real_node):
    c, _ = chart_on_real_node
    ns = "failover"
    c.kubectl("create", "namespace", ns)
    names = [f"app-{i}" for i in range(4)]
    for name in names:
        c.apply(deployment(name, ns, 2, node_selector=FAKE_ZONE))
    record = "policylib.io/spread-effective-replicas"
    wait_for("the webhook recorded 2 replicas", lambda: all(
        (c.get("deployment", n, ns)["metadata"].get("annotations") or {}).get(record) == "2" for n in names))
    leader_name = wait_for("a controller leads", lambda: holder(c), timeout=LEASE_SECONDS * 4)
    (leader,) = [p for p in pods(c, "policylib-controller") if p["metadata"]["name"] == leader_name]
    (standby,) = [p for p in pods(c, "policylib-controller") if p["metadata"]["name"] != leader_name]
    assert ready(standby) and metric(standby, "policylib_controller_leader") == 0
    before = {n: c.get("deployment", n, ns)["metadata"]["generation"] for n in names}

    # Freeze the leader (it can neither renew nor give the Lease up), then delete its pod without a grace period:
    # the kubelet's SIGTERM stays pending and its SIGKILL ends it. A crash, not a rolling update.
    procs = container_processes(leader)
    assert procs, f"no process of {leader_name} on this host"
    # The node is cordoned until a controller leads again: the pod the ReplicaSet creates in place of the killed one
    # would compete for the Lease too, and when it starts before the standby's next round it sees the last record
    # first, so its lease duration runs out first and it may lead instead (client-go's rule as well). What is
    # measured here is the replica already running.
    c.kubectl("cordon", "real-0")
    try:
        for pid in procs:
            os.kill(pid, signal.SIGSTOP)
        killed = time.monotonic()
        c.kubectl("-n", ns, "scale", "deployment", "--all", "--replicas=6")
        c.kubectl("-n", NAMESPACE, "delete", "pod", leader_name, "--grace-period=0", "--force")
        new_leader = wait_for("another controller leads", lambda: (h := holder(c)) not in (None, leader_name) and h,
                              timeout=LEASE_SECONDS * 4)
        took = time.monotonic() - killed
    finally:
        uncordoned = c.kubectl("uncordon", "real-0", check=False)   # never in place of the failure being raised
    assert uncordoned.returncode == 0, uncordoned.stderr
    assert new_leader == standby["metadata"]["name"], f"{new_leader} leads, not the standby"
    print(f"\ncontroller failover on the real node: the standby led {took:.1f}s after the leader was killed "
          f"(leaseDurationSeconds {LEASE_SECONDS})")
    # client-go's rule: the Lease must go unrenewed for its duration, counted from when the standby first saw its last
    # record (up to one round, a third of the duration, after the leader's last renewal, itself up to a round before the
    # kill), and the standby looks once a round: at most the duration and two rounds, plus the API's latency on a busy host
    assert took < LEASE_SECONDS + 2 * LEASE_SECONDS / 3 + 5, f"failover took {took:.1f}s"

    wait_for("every Deployment rewritten for 6 replicas", lambda: all(
        (c.get("deployment", n, ns)["metadata"].get("annotations") or {}).get(record) == "6" for n in names),
        timeout=180)
    wait_for("the new leader's writes counted", lambda: metric(standby, "policylib_controller_writes_total")
             >= len(names), timeout=30)
    assert metric(standby, "policylib_controller_writes_total") == len(names)
    # a write is counted before its Event is created
    events = wait_for("an Event per write", lambda: rewrite_events(c, ns, least=len(names)), timeout=30)
    assert sorted(e["regarding"]["name"] for e in events) == names, "one write per Deployment"
    assert {e["reportingInstance"] for e in events} == {standby["metadata"]["name"]}
    # the scale and the one rewrite: nothing else changed a spec
    assert {n: c.get("deployment", n, ns)["metadata"]["generation"] for n in names} == {
        n: g + 2 for n, g in before.items()}
    print(f"writes: {len(names)} Deployments, {len(events)} rewrites, all by {standby['metadata']['name']}")


# --- the webhook's pods: the serving key's mode, the log, connections one client cannot exhaust -------------------------

IN_POD = ("import json, os; s = os.stat('/etc/policylib/tls/tls.key'); "
          "print(json.dumps([s.st_mode & 0o777, s.st_uid, s.st_gid, os.getuid(), os.getgid(), os.getgroups()]))")


def test_the_serving_key_is_0440_read_by_the_server_and_its_log_says_https(chart_on_real_node):
    """The Secret volume's defaultMode 0440 as the kubelet writes it with the pod's fsGroup: the key's owner root,
    its group 65532, which the server (uid 65532) is in and reads it through (the pods are ready: they serve with
    it); nobody else may read it. The server's start-up log names its listener https and holds no warning."""
    c, _ = chart_on_real_node
    webhook = pods(c, "policylib-webhook")
    assert len(webhook) == DEFAULTS["webhook"]["replicas"]
    for pod in webhook:
        name = pod["metadata"]["name"]
        mode, uid, gid, user, group, groups = json.loads(
            c.kubectl("-n", NAMESPACE, "exec", name, "--", "python", "-c", IN_POD).stdout)
        assert (oct(mode), uid, gid) == (oct(0o440), 0, 65532)
        assert user == 65532 and 65532 in (group, *groups)
        log = c.kubectl("-n", NAMESPACE, "logs", name).stdout
        assert "Listening at: https://0.0.0.0:8443" in log and "http://" not in log, log[:2000]
        assert "Warning" not in log, log[:2000]


def container_memory_mib(pod: dict) -> tuple[int, int]:
    """The webhook container's memory cgroup, read on this host: (usage now, peak) in MiB, what its limit and the
    kernel's OOM kill weigh (cgroup v1's usage_in_bytes and max_usage_in_bytes, or v2's memory.current and
    memory.peak)."""
    pid = next(pid for pid in container_processes(pod)
               if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))   # not the pause container's
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            group = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            now, peak = group / "memory.usage_in_bytes", group / "memory.max_usage_in_bytes"
            break
        if controllers == "":
            group = Path("/sys/fs/cgroup") / path.lstrip("/")
            now, peak = group / "memory.current", group / "memory.peak"
    return int(now.read_text()) // 2**20, int(peak.read_text()) // 2**20


def webhook_story(c: Cluster) -> str:
    """The webhook pods' container states and the namespace's warning Events: what a failed connection needs."""
    states = {p["metadata"]["name"]: [{k: s.get(k) for k in ("ready", "restartCount", "state", "lastState")}
                                      for s in p["status"].get("containerStatuses", [])]
              for p in c.list("pods", NAMESPACE, "app.kubernetes.io/name=policylib-webhook")}
    events = [f"{e['involvedObject']['name']}: {e['reason']}: {e.get('message', '')} (x{e.get('count', 1)})"
              for e in c.list("events", NAMESPACE) if e.get("type") == "Warning"]
    return f"webhook containers {states}; warning events {events}"


@pytest.mark.parametrize("kind", ["tls", "tcp"])
def test_4000_idle_connections_to_the_service_keep_no_new_client_out(chart_on_real_node, kind, record_property):
    """4,000 connections to the Service's endpoints (the webhook pods, round robin as kube-proxy would spread them;
    there is no kube-proxy here), each a TLS handshake and then nothing (``tls``) or a TCP connection that never
    sends a ClientHello (``tcp``), all held; then a new client at each endpoint is served, and so is a review the API
    server sends. The latencies and the pods' memory are recorded (the 1 s target is bench/bench_connections.py's,
    in docs/figures.md), and the containers' memory: no container restarts (no OOM kill)."""
    c, tmp = chart_on_real_node
    ca = tmp / "service-ca.crt"
    ca.write_bytes(base64.b64decode(c.get("secret", "policylib-webhook-ca", NAMESPACE)["data"]["ca.crt"]))
    context = client_context(ca)
    webhook = pods(c, "policylib-webhook")
    endpoints = [(p["status"]["podIP"], 8443) for p in webhook]
    held = hold_idle(endpoints, 4000, context if kind == "tls" else None, timeout=120)
    try:
        memory = [container_memory_mib(p) for p in webhook]
        latencies = []
        for i, endpoint in enumerate(endpoints):
            uid = f"service-{kind}-{i}"
            try:
                status, answer, seconds = new_client_review(endpoint, context, uid, timeout=60)
            except OSError as e:
                raise AssertionError(f"a new client at {endpoint}: {e!r}; {webhook_story(c)}") from e
            assert (status, answer["response"]["uid"], answer["response"]["allowed"]) == (200, uid, True)
            latencies.append(round(seconds, 3))
        started = time.monotonic()
        run = c.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                        input=json.dumps(deployment(f"held-{kind}", "default", 3)))
        through_api = round(time.monotonic() - started, 3)
        annotations = json.loads(run.stdout)["metadata"].get("annotations") or {}
        assert annotations.get("policylib.io/spread-effective-replicas") == "3", annotations
    finally:
        held.close()
    record_property("held", len(held.writers))
    record_property("opening_seconds", round(held.seconds, 1))
    record_property("new_client_seconds", latencies)
    record_property("kubectl_dry_run_seconds", through_api)
    record_property("container_memory_now_peak_mib", memory)
    print(f"\n{len(held.writers)} idle {kind} connections held ({held.failed} refused, opened in {held.seconds:.1f} s): "
          f"a new client per endpoint served in {latencies} s, kubectl create --dry-run=server in {through_api} s; "
          f"webhook containers' memory (now, peak) {memory} MiB")
    limit = DEFAULTS["webhook"]["resources"]["limits"]["memory"]
    assert limit.endswith("Mi") and all(0 < now <= peak <= int(limit[:-2]) for now, peak in memory), (memory, limit)
    for pod in pods(c, "policylib-webhook"):
        (status,) = pod["status"]["containerStatuses"]
        assert status["restartCount"] == 0, webhook_story(c)
