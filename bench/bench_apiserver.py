"""What a webhook costs as kubectl sees it: Deployment creates through the harness's real kube-apiserver.

Starts ``e2e/bin/testcluster`` (``make testcluster noop-webhook`` builds it and the floor) and one
namespace per arm, each matched by its own webhook configuration:

- ``none``: no webhook; the API server's own cost of a create;
- ``noop``: ``e2e/bin/noopwebhook``, Go's standard library admitting everything unchanged (it
  offers HTTP/2 by ALPN, as Go servers do): the API server's cost of calling any webhook over TLS;
- ``go-spread``: the same Go binary giving policylib's own default answer, the same JSON patch (the
  records, then the zone and host constraints) and audit annotation, over HTTP/1.1 as policylib serves:
  the floor of a webhook that *mutates* the same way (the API server applies the patch); the warm-up
  creates check that it writes exactly what ``policylib.mutate()`` writes;
- ``go-spread-read``: ``go-spread`` that also reads the namespace's HPAs from the API server on every
  Deployment CREATE, as rule W4 does: the floor of a mutating webhook that keeps W4's guarantee;
- ``--go-variants``: also ``go-constraints`` (the two constraints alone, the floor's former patch) and
  ``go-spread-read-h2`` (offering HTTP/2, which the API server takes on a loopback URL only);
- ``policylib``: ``python -m webhook serve`` with its defaults (2 workers, info logging, the HPA
  watch through ``--kubeconfig`` as in a cluster, rule W4's read on), registered like ``manifests/base``;
- ``policylib-nohpa``: the same with ``webhook.readHpasOnCreate: false`` (the watch only);
- ``kyverno`` (``--kyverno PATH``, a ``cmd/kyverno`` binary): Kyverno's admission controller run
  out of cluster, with a ClusterPolicy writing the same two spread constraints (zone and host, the
  Deployment's own selector) in its namespace only.

Phase 1, server-side dry-run creates of a realistic Deployment (no etcd write, no controllers), in
rounds that alternate the arms so the machine's noise hits them all: at concurrency 1 the median
and p99 latency per create and the latency *added* over ``none``; at concurrency 8 creates/s.
Phase 2 (``--real N``, default 1,000): real creates of N Deployments per arm at concurrency 8 in
alternating chunks, as a GitOps sync does; creates/s. Prints one table per phase and the ratios of
every policylib arm to every other arm; the targets (added latency <= 1.25x, creates/s >= 0.9x) are
policylib/go-spread-read and policylib-nohpa/go-spread. ``--scale 1,2,3`` runs instead policylib as
1, 2 and 3 separate servers behind one URL (replicas) at concurrency 8 and 32.

The client is Python (one keep-alive connection per thread, the admin token): it shares the
cores with the API server and the webhooks, as a CI runner would. Run by hand (a minute or
several); ``--smoke`` runs a few requests per arm to check it works end to end.

    .venv/bin/python bench/bench_apiserver.py [--rounds 6] [--real 1000] [--kyverno PATH] [--scale 1,2,3]
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import http.client
import json
import os
import platform
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import jsonpatch  # noqa: E402

import policylib  # noqa: E402
from tests.e2e import harness  # noqa: E402 -- the harness is the repo's, found from the repo root

NOOP = harness.E2E / "bin" / "noopwebhook"
ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
RECORDS = "policylib.io/"
DEFAULTS = policylib.load_config(None)


# --- the object ---------------------------------------------------------------------------------

#: Replicas of each Deployment created (``--replicas``; 0 keeps a shared test cluster free of pods).
REPLICAS = {"count": 6}


def deployment(name: str, namespace: str) -> dict:
    """A realistic serving Deployment: two containers, probes, resources, env, volumes, labels."""
    labels = {"app.kubernetes.io/name": "ranker", "app.kubernetes.io/instance": name, "tier": "serving"}
    env = [{"name": f"RANKER_SETTING_{i}", "value": f"value-{i}"} for i in range(8)]
    env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    app = {"name": "ranker", "image": "registry.example/ranker:2.14.1", "args": ["--port=8080", "--threads=4"],
           "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}],
           "env": env, "resources": {"requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
                                     "limits": {"memory": "4Gi", "nvidia.com/gpu": "1"}},
           "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5},
           "livenessProbe": {"httpGet": {"path": "/live", "port": "http"}, "periodSeconds": 10},
           "volumeMounts": [{"name": "config", "mountPath": "/etc/ranker"}, {"name": "cache", "mountPath": "/cache"}]}
    sidecar = {"name": "proxy", "image": "registry.example/proxy:1.9", "ports": [{"containerPort": 15001}],
               "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                         "annotations": {"team.example/owner": "search", "team.example/oncall": "search-sre"}},
            "spec": {"replicas": REPLICAS["count"], "selector": {"matchLabels": dict(labels)},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": dict(labels),
                                               "annotations": {"prometheus.io/scrape": "true"}},
                                  "spec": {"containers": [app, sidecar], "terminationGracePeriodSeconds": 30,
                                           "volumes": [{"name": "config", "configMap": {"name": "ranker"}},
                                                       {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}]}}}}


def written(obj: dict) -> tuple[dict, list]:
    """What a spread arm writes: the policylib.io records and the pod template's spread constraints."""
    annotations = obj["metadata"].get("annotations") or {}
    return ({k: v for k, v in annotations.items() if k.startswith(RECORDS)},
            obj["spec"]["template"]["spec"].get("topologySpreadConstraints") or [])


def policylib_writes(obj: dict) -> tuple[dict, list]:
    """What policylib, with its default settings and no HPA, writes into ``obj``: the answer every arm marked
    ``same_as_policylib`` must give (the Go arms write it too, so that the floor is the same mutation)."""
    result = policylib.mutate(obj, DEFAULTS, namespace=obj["metadata"]["namespace"])
    return written(jsonpatch.apply_patch(obj, result.patch))


def settings_hash() -> str:
    """The value of policylib's settings record for its default settings (the Go arms' ``--settings-hash``)."""
    return policylib_writes(deployment("probe", "default"))[0][f"{RECORDS}spread-settings"]


def spread_keys(obj: dict) -> list[str]:
    """The topology keys of the pod template's spread constraints."""
    constraints = obj["spec"]["template"]["spec"].get("topologySpreadConstraints") or []
    return sorted(c["topologyKey"] for c in constraints)


# --- the client ---------------------------------------------------------------------------------

class Client:
    """Deployment creates over one keep-alive HTTPS connection per thread, with the kubeconfig's token."""

    def __init__(self, kubeconfig: Path):
        import yaml
        cfg = yaml.safe_load(kubeconfig.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        server = cluster["server"].removeprefix("https://")
        self.host, port = server.rsplit(":", 1)
        self.port = int(port)
        self.server = cluster["server"]
        self.ca_pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
        self.token = user["token"]
        self.context = ssl.create_default_context(cadata=self.ca_pem)
        self.headers = {"Authorization": f"Bearer {user['token']}", "Content-Type": "application/json",
                        "Accept": "application/json"}
        self.local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                                                 timeout=30)
        return conn

    def create(self, obj: dict, dry_run: bool) -> tuple[float, dict]:
        """Seconds the create took, and the object the API server answered with (fails on any status but 201)."""
        path = f"/apis/apps/v1/namespaces/{obj['metadata']['namespace']}/deployments"
        if dry_run:
            path += "?dryRun=All"
        body = json.dumps(obj).encode()
        for attempt in (0, 1):
            conn = self._connection()
            start = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers=self.headers)
                response = conn.getresponse()
                data = response.read()
                break
            except (OSError, http.client.HTTPException):
                # the server closed a kept-alive connection (an overloaded machine): once more on a new one
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
        seconds = time.perf_counter() - start
        if response.status == 409 and attempt and not dry_run:
            return seconds, self.get(obj)   # the first attempt's create went through before the connection broke
        if response.status != 201:
            raise AssertionError(f"create {obj['metadata']['namespace']}/{obj['metadata']['name']}: "
                                 f"{response.status} {data[:300]!r}")
        return seconds, json.loads(data)

    def get(self, obj: dict) -> dict:
        conn = self._connection()
        conn.request("GET", f"/apis/apps/v1/namespaces/{obj['metadata']['namespace']}/deployments/"
                     f"{obj['metadata']['name']}", headers=self.headers)
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise AssertionError(f"get {obj['metadata']['name']}: {response.status} {data[:300]!r}")
        return dict(json.loads(data))

    def delete_all(self, namespace: str) -> None:
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request("DELETE", f"/apis/apps/v1/namespaces/{namespace}/deployments", headers=self.headers)
                response = conn.getresponse()
                response.read()
                break
            except (OSError, http.client.HTTPException):
                conn.close()   # a connection idle since phase 1, closed by the server meanwhile: once more
                self.local.conn = None
                if attempt:
                    raise
        if response.status != 200:
            raise AssertionError(f"deletecollection in {namespace}: {response.status}")


# --- the arms -----------------------------------------------------------------------------------

@dataclass
class Arm:
    """One namespace and whatever admits its Deployments."""

    name: str
    expect_spread: bool
    #: Its answers are policylib's own (checked on the warm-up creates): policylib from this tree, the Go arms.
    same_as_policylib: bool = False
    procs: list[subprocess.Popen] = field(default_factory=list)
    port: int = 0
    metrics_url: str | None = None
    ca: Path | None = None
    #: Creates that came back without the constraints from an arm that writes them: admitted unchanged by the
    #: webhook configuration's ``failurePolicy: Ignore`` (the call timed out or failed), reported, not fatal.
    unpatched: int = 0

    @property
    def namespace(self) -> str:
        return f"bench-{self.name}"

    def pids(self) -> list[int]:
        """The arm's processes and their children (gunicorn's workers)."""
        out = []
        for p in self.procs:
            if p.poll() is None:
                out.append(p.pid)
                with contextlib.suppress(OSError):
                    out += [int(c) for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        return out

    def rss_mib(self) -> float:
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total / 1024

    def cpu_seconds(self) -> float:
        """User plus system CPU of the arm's processes so far."""
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


def make_certs(directory: Path) -> str:
    """A CA and a loopback serving certificate (``webhook certs --local``); returns the caBundle."""
    run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(directory), "--local"],
                         capture_output=True, text=True, cwd=REPO, timeout=60, check=True)
    return run.stdout.strip()


def webhook_configuration(name: str, url: str, ca_bundle: str) -> dict:
    """``manifests/base``'s webhooks sending the reviews of namespace ``bench-<name>`` to ``url``."""
    hooks = []
    for hook in harness.webhook_rules():
        hook = copy.deepcopy(hook)
        hook["name"] = hook["name"].replace(".policylib.io", f".{name}.bench.policylib.io")
        hook["clientConfig"] = {"url": url, "caBundle": ca_bundle}
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": f"bench-{name}"}}
        hooks.append(hook)
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": f"bench-{name}"}, "webhooks": hooks}


def wait_https(url: str, ca: Path, what: str, proc: subprocess.Popen, log: Path) -> None:
    context = ssl.create_default_context(cafile=str(ca))

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited {proc.returncode}: {log.read_text()[-2000:]}")
        with urllib.request.urlopen(url, context=context, timeout=5) as r:
            return r.status == 200
    harness.wait_for(what, up, timeout=60)


def start_noop(cluster: harness.Cluster, tmp: Path, http1: bool = False, spread: bool = False,
               read_hpas: Client | None = None, constraints_only: bool = False, name: str | None = None) -> Arm:
    """The Go webhook: the no-op, or (``spread``) the same binary answering Deployments as policylib does with
    its default settings; with ``read_hpas`` (the client whose server, token and CA it uses) it also reads the
    namespace's HPAs on every Deployment CREATE, as rule W4 does (``go-spread-read``). ``constraints_only``:
    the two constraints alone (the smaller patch the floor used to write); ``http1``: HTTP/1.1 only, as
    policylib serves and as the API server calls any webhook behind a Service."""
    name = name or ("go-spread-read" if spread and read_hpas else "go-spread" if spread else
                    "noop-http1" if http1 else "noop")
    arm = Arm(name, expect_spread=spread, same_as_policylib=spread and not constraints_only)
    reading: list[str] = []
    if read_hpas is not None:
        (tmp / "go-token").write_text(read_hpas.token)
        (tmp / "go-api-ca.crt").write_text(read_hpas.ca_pem)
        reading = ["--read-hpas", "--api-server", read_hpas.server, "--token-file", str(tmp / "go-token"),
                   "--api-ca", str(tmp / "go-api-ca.crt")]
    certs = tmp / f"certs-{arm.name}"
    ca_bundle = make_certs(certs)
    arm.port = harness.free_port()
    log = tmp / f"{arm.name}.log"
    arm.procs.append(subprocess.Popen([str(NOOP), "--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key"),
                                       "--addr", f"127.0.0.1:{arm.port}", *(["--http1"] if http1 else []),
                                       *(["--spread", "--settings-hash", settings_hash()] if spread else []),
                                      *(["--constraints-only"] if constraints_only else []), *reading],
                                      stdout=log.open("w"), stderr=subprocess.STDOUT))
    wait_https(f"https://127.0.0.1:{arm.port}/healthz", certs / "ca.crt", "the Go no-op webhook", arm.procs[0], log)
    cluster.apply(webhook_configuration(arm.name, f"https://127.0.0.1:{arm.port}/mutate", ca_bundle))
    return arm


def start_policylib(cluster: harness.Cluster, tmp: Path, extra: list[str], name: str = "policylib",
                    source: Path = REPO, replicas: int = 1) -> Arm:
    """``python -m webhook serve`` with its defaults (plus ``extra``), from the source tree ``source``;
    ``replicas`` > 1: that many separate servers on one port (``--reuse-port``: the kernel spreads the API
    server's connections over them, as a Service spreads them over pods)."""
    arm = Arm(name, expect_spread=True, same_as_policylib=source == REPO)
    certs = tmp / f"certs-{name}"
    ca_bundle = make_certs(certs)
    arm.port = harness.free_port()
    for replica in range(replicas):
        log = tmp / f"{name}-{replica}.log"
        arm.procs.append(subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--cert-dir", str(certs), "--host", "127.0.0.1", "--port",
             str(arm.port), "--kubeconfig", str(cluster.kubeconfig), *(["--reuse-port"] if replicas > 1 else []),
             *extra],
            stdout=subprocess.DEVNULL, stderr=log.open("w"), cwd=source, env={**os.environ, "PYTHONPATH": str(source)}))
        wait_https(f"https://127.0.0.1:{arm.port}/readyz", certs / "ca.crt", "python -m webhook serve",
                   arm.procs[-1], log)
    arm.metrics_url, arm.ca = f"https://127.0.0.1:{arm.port}/metrics", certs / "ca.crt"
    cluster.apply(webhook_configuration(name, f"https://127.0.0.1:{arm.port}/mutate", ca_bundle))
    return arm


KYVERNO_NAMESPACE = "kyverno"


def kyverno_policy() -> dict:
    """The peer's best effort at the same job: a zone and a host spread constraint with the Deployment's own
    selector, written by patchStrategicMerge (kept when the Deployment has its own)."""
    constraint = {"maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway",
                  "labelSelector": {"matchLabels": "{{ request.object.spec.selector.matchLabels }}"}}
    return {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "bench-spread"},
            "spec": {"background": False, "rules": [{
                "name": "spread",
                "match": {"any": [{"resources": {"kinds": ["Deployment"], "namespaces": ["bench-kyverno"]}}]},
                "preconditions": {"all": [{"key": "{{ request.object.spec.template.spec.topologySpreadConstraints "
                                                  "|| `[]` | length(@) }}", "operator": "Equals", "value": 0}]},
                "mutate": {"patchStrategicMerge": {"spec": {"template": {"spec": {"topologySpreadConstraints": [
                    {**constraint, "topologyKey": ZONE}, {**constraint, "topologyKey": HOST}]}}}}}}]}}


def start_kyverno(cluster: harness.Cluster, tmp: Path, binary: Path) -> Arm:
    """Kyverno out of cluster as its DEVELOPMENT.md ("Debugging local code") runs it: it makes its own
    certificates and registers its webhooks by URL on ``--serverIP``; its ConfigMap limits them to the
    arm's namespace. CRDs from the module's ``config/crds``."""
    arm = Arm("kyverno", expect_spread=True)
    crds = Path(os.environ.get("KYVERNO_CRDS", binary.parent / "crds"))
    if not crds.is_dir():
        raise SystemExit(f"--kyverno: {crds} (Kyverno's config/crds, or $KYVERNO_CRDS) is not a directory")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-R", "-f", str(crds), timeout=300)
    cluster.namespace(KYVERNO_NAMESPACE)
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kyverno", "namespace": KYVERNO_NAMESPACE},
                   "data": {"webhooks": json.dumps({"namespaceSelector": {"matchLabels": {
                       "kubernetes.io/metadata.name": "bench-kyverno"}}}),
                            "resourceFilters": "[Event,*,*][*/*,kube-system,*][*/*,kyverno,*]"}},
                  {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "kyverno-metrics", "namespace": KYVERNO_NAMESPACE}, "data": {}})
    arm.port = harness.free_port()
    log = tmp / "kyverno.log"
    # the environment and flags of its .vscode/launch.json "Launch Kyverno"
    env = {**os.environ, "KYVERNO_NAMESPACE": KYVERNO_NAMESPACE, "KYVERNO_SERVICEACCOUNT_NAME": "kyverno-admission-controller",
           "KYVERNO_DEPLOYMENT": "kyverno-bench", "KYVERNO_POD_NAME": "kyverno-bench", "INIT_CONFIG": "kyverno",
           "METRICS_CONFIG": "kyverno-metrics"}
    arm.procs.append(subprocess.Popen(
        [str(binary), f"--kubeconfig={cluster.kubeconfig}", f"--serverIP=127.0.0.1:{arm.port}",
         f"--webhookServerPort={arm.port}", "--disableMetrics", "-v=1",
         "--backgroundServiceAccountName=system:serviceaccount:kyverno:kyverno-background-controller",
         "--reportsServiceAccountName=system:serviceaccount:kyverno:kyverno-reports-controller",
         "--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca", "--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=tmp))
    cluster.apply(kyverno_policy())
    return arm


# --- measuring ----------------------------------------------------------------------------------

def wait_arm_ready(client: Client, arm: Arm, timeout: float = 120) -> None:
    """Until a dry-run create in the arm's namespace comes back as the arm writes it."""
    def admitted() -> bool:
        for p in arm.procs:
            if p.poll() is not None:
                raise AssertionError(f"arm {arm.name} exited {p.returncode}")
        _, obj = client.create(deployment("probe", arm.namespace), dry_run=True)
        return (spread_keys(obj) == [HOST, ZONE]) == arm.expect_spread
    harness.wait_for(f"the API server calls arm {arm.name}", admitted, timeout=timeout, interval=0.5)


_COUNT = threading.Lock()


def check_answer(arm: Arm, sent: dict, obj: dict, exact: bool = False) -> None:
    """The create came back as the arm writes it; one without any constraint from an arm that writes them
    was admitted unchanged by ``failurePolicy: Ignore`` and is counted (``Arm.unpatched``); anything else
    is a wrong answer. ``exact``: an arm marked ``same_as_policylib`` wrote exactly what policylib writes
    into ``sent`` (the records and the constraints)."""
    keys = spread_keys(obj)
    if (keys == [HOST, ZONE]) == arm.expect_spread:
        if exact and arm.same_as_policylib and written(obj) != (want := policylib_writes(sent)):
            raise AssertionError(f"arm {arm.name}: wrote {written(obj)}, policylib writes {want}")
        return
    if arm.expect_spread and not keys:
        with _COUNT:
            arm.unpatched += 1
        return
    raise AssertionError(f"arm {arm.name}: answered with spread {keys}")


def run_sequential(client: Client, arm: Arm, count: int, tag: str, dry_run: bool = True,
                   exact: bool = False) -> list[float]:
    out = []
    for i in range(count):
        sent = deployment(f"{tag}-{i}", arm.namespace)
        seconds, obj = client.create(sent, dry_run)
        check_answer(arm, sent, obj, exact)
        out.append(seconds)
    return out


def run_concurrent(client: Client, arm: Arm, count: int, concurrency: int, tag: str, dry_run: bool = True,
                   exact: bool = False) -> float:
    """``count`` creates from ``concurrency`` threads; returns creates/s."""
    names = iter(range(count))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while True:
            with lock:
                i = next(names, None)
            if i is None or errors:
                return
            try:
                sent = deployment(f"{tag}-{i}", arm.namespace)
                _, obj = client.create(sent, dry_run)
                check_answer(arm, sent, obj, exact)
            except BaseException as e:  # noqa: BLE001 -- reported below
                errors.append(e)
                return
    threads = [threading.Thread(target=work) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    return count / wall


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def metric_total(arm: Arm, name: str) -> float | None:
    """The sum of a metric's samples on the arm's /metrics (policylib only)."""
    if arm.metrics_url is None:
        return None
    context = ssl.create_default_context(cafile=str(arm.ca))
    with urllib.request.urlopen(arm.metrics_url, context=context, timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def connections_to(port: int) -> int:
    """Established TCP connections to ``port`` on loopback (from /proc/net/tcp)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        parts = line.split()
        if int(parts[1].split(":")[1], 16) == port and parts[3] == "01":
            count += 1
    return count


# --- the run ------------------------------------------------------------------------------------

def machine() -> str:
    load = os.getloadavg()
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.machine())
    return (f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, load average "
            f"{load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} at the start")


def rotated(arms: list[Arm], round_no: int) -> list[Arm]:
    k = round_no % len(arms)
    return arms[k:] + arms[:k]


def measure_dry_run(client: Client, arms: list[Arm], rounds: int, c1: int, c8: int,
                    say: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """Each round: ``c1`` sequential creates per arm, the arms taking turns create by create (so a noisy
    moment hits every arm alike), then ``c8`` creates at concurrency 8 per arm, arm after arm in an
    order that rotates from round to round. Webhook CPU is counted over the concurrent phases."""
    results: dict[str, dict[str, Any]] = {a.name: {"c1": [], "c8": [], "cpu": 0.0, "reviews": 0} for a in arms}
    for r in range(rounds):
        for i in range(c1):
            for arm in rotated(arms, i + r):
                results[arm.name]["c1"] += run_sequential(client, arm, 1, f"r{r}c1n{i}")
        for arm in rotated(arms, r):
            cpu = arm.cpu_seconds()
            results[arm.name]["c8"].append(run_concurrent(client, arm, c8, 8, f"r{r}c8"))
            results[arm.name]["cpu"] += arm.cpu_seconds() - cpu
            results[arm.name]["reviews"] += c8
        say(f"  round {r + 1}/{rounds}: " + ", ".join(
            f"{a.name} c1 p50 {statistics.median(results[a.name]['c1']) * 1000:.2f} ms, "
            f"c8 {results[a.name]['c8'][-1]:.0f}/s" for a in arms))
    return results


def dry_run_table(arms: list[Arm], results: dict[str, dict[str, Any]]) -> tuple[str, dict[str, float]]:
    base = results["none"]["c1"]
    base50, base99 = statistics.median(base), percentile(base, 0.99)
    rows = ["| arm | c=1 p50 ms | c=1 p99 ms | added p50 ms | added p99 ms | c=8 creates/s (median of rounds) "
            "| webhook CPU ms/create (c=8) | RSS MiB |", "|---|---|---|---|---|---|---|---|"]
    added: dict[str, float] = {}
    for arm in arms:
        res = results[arm.name]
        p50, p99 = statistics.median(res["c1"]), percentile(res["c1"], 0.99)
        added[arm.name] = p50 - base50
        added[arm.name + ":c8"] = statistics.median(res["c8"])
        cpu = f"{res['cpu'] / res['reviews'] * 1000:.2f}" if arm.procs else "-"
        rss = f"{arm.rss_mib():.0f}" if arm.procs else "-"
        rows.append(f"| {arm.name} | {p50 * 1000:.2f} | {p99 * 1000:.2f} | {(p50 - base50) * 1000:.2f} | "
                    f"{(p99 - base99) * 1000:.2f} | {statistics.median(res['c8']):.0f} | {cpu} | {rss} |")
    return "\n".join(rows), added


#: The targets: (our arm, the floor it is judged against).
TARGETS = (("policylib", "go-spread-read"), ("policylib-nohpa", "go-spread"))


def ratios(added: dict[str, float]) -> list[str]:
    """policylib (and its variants) against each other webhook arm: the no-op, the Go webhook writing the same
    constraints (``go-spread``, the mutating floor) and the same with rule W4's read (``go-spread-read``)."""
    lines = []
    names = [k for k in added if ":" not in k and k != "none"]
    for ours in [n for n in names if n.startswith("policylib")]:
        for other in [n for n in names if not n.startswith("policylib")]:
            lat = added[ours] / added[other] if added[other] > 0 else float("inf")
            thr = added[ours + ":c8"] / added[other + ":c8"]
            target = " (targets: <= 1.25x, >= 0.90x)" if (ours, other) in TARGETS else ""
            lines.append(f"{ours}/{other}: added latency at c=1 {lat:.2f}x, creates/s at c=8 {thr:.2f}x{target}")
    return lines


def measure_scale(client: Client, arms: list[Arm], rounds: int, count: int, concurrencies: list[int],
                  say: Callable[[str], None]) -> dict[str, dict[int, float]]:
    """Creates/s per arm at each concurrency: the median over ``rounds`` rounds of ``count`` dry-run creates,
    arms rotating."""
    out: dict[str, dict[int, list[float]]] = {a.name: {c: [] for c in concurrencies} for a in arms}
    for r in range(rounds):
        for c in concurrencies:
            for arm in rotated(arms, r):
                out[arm.name][c].append(run_concurrent(client, arm, count, c, f"s{r}c{c}"))
        say(f"  scale round {r + 1}/{rounds}: " + ", ".join(
            f"{a.name} " + "/".join(f"{out[a.name][c][-1]:.0f}" for c in concurrencies) for a in arms))
    return {a: {c: statistics.median(v) for c, v in by_c.items()} for a, by_c in out.items()}


def measure_real(client: Client, arms: list[Arm], count: int, chunk: int, say: Callable[[str], None]) -> dict[str, float]:
    """``count`` real creates per arm at concurrency 8, in alternating chunks; creates/s per arm."""
    seconds = {a.name: 0.0 for a in arms}
    done = {a.name: 0 for a in arms}
    k = 0
    while any(n < count for n in done.values()):
        for arm in rotated(arms, k):
            n = min(chunk, count - done[arm.name])
            if n <= 0:
                continue
            start = time.perf_counter()
            run_concurrent(client, arm, n, 8, f"sync{k}")
            seconds[arm.name] += time.perf_counter() - start
            done[arm.name] += n
        k += 1
    say("  real creates: " + ", ".join(f"{a}: {done[a] / seconds[a]:.0f}/s" for a in seconds))
    for arm in arms:
        client.delete_all(arm.namespace)
    return {a: done[a] / seconds[a] for a in seconds}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6, help="alternating rounds of the dry-run phase (default 6)")
    p.add_argument("--c1", type=int, default=50, help="sequential creates per arm per round (default 50)")
    p.add_argument("--c8", type=int, default=300, help="creates at concurrency 8 per arm per round (default 300)")
    p.add_argument("--real", type=int, default=1000, help="real creates per arm in phase 2; 0 skips it (default 1000)")
    p.add_argument("--kyverno", type=Path, help="a cmd/kyverno binary: adds the kyverno arm (its CRDs in "
                   "config/crds beside it, or $KYVERNO_CRDS)")
    p.add_argument("--go-variants", action="store_true",
                   help="also go-constraints (go-spread writing the two constraints alone, without policylib's "
                        "records, matchLabelKeys and audit annotation) and go-spread-read-h2 (go-spread-read "
                        "offering HTTP/2, which the API server takes from a webhook on a loopback URL)")
    p.add_argument("--noop-http1", action="store_true",
                   help="also a Go no-op that offers only HTTP/1.1 (what the API server uses for a webhook "
                        "reached through a Service)")
    p.add_argument("--go-spread", action="store_true",
                   help="accepted for compatibility: go-spread (the Go webhook writing the same two spread constraints, "
                        "the floor of a webhook that mutates) and go-spread-read (the same reading the namespace's HPAs "
                        "on every Deployment CREATE, as rule W4) always run")
    p.add_argument("--scale", metavar="N,N,...",
                   help="instead of the other phases: policylib as 1, 2, 3... separate servers on one port (replicas), "
                        "creates/s at each --scale-concurrency, beside go-spread-read")
    p.add_argument("--scale-concurrency", default="8,32", metavar="C,C",
                   help="client concurrencies of the --scale phase (default 8,32)")
    p.add_argument("--webhook-arg", action="append", default=[],
                   help="an extra argument to python -m webhook serve (repeatable), e.g. --webhook-arg=--workers=1")
    p.add_argument("--replicas", type=int, default=6, help="replicas of each Deployment (default 6)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                   help="another policylib arm, policylib-NAME, served with these extra arguments (space-separated), "
                        "e.g. --variant 'w1=--workers 1': a change's effect measured in the same run")
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="also policylib-baseline: the webhook and policylib packages of another source tree, e.g. "
                        "mkdir DIR && git archive COMMIT webhook policylib | tar -x -C DIR (before/after in one run)")
    p.add_argument("--smoke", action="store_true", help="a few requests per arm: checks the bench works")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    if args.smoke:
        args.rounds, args.c1, args.c8, args.real = 1, 3, 8, 8
    args.scale = [int(n) for n in args.scale.split(",")] if args.scale else []
    args.scale_concurrency = [int(n) for n in args.scale_concurrency.split(",")]
    return args


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(cluster: harness.Cluster, args: argparse.Namespace, tmp: Path) -> tuple[str, dict[str, Any]]:
    """Every arm against ``cluster``; the report (tables and ratios) and the figures."""
    arms: list[Arm] = []
    REPLICAS["count"] = args.replicas
    try:
        client = Client(cluster.kubeconfig)
        arms.append(Arm("none", expect_spread=False))
        if args.scale:
            return run_scale(cluster, args, tmp, client, arms)
        arms.append(start_noop(cluster, tmp))
        if args.noop_http1:
            arms.append(start_noop(cluster, tmp, http1=True))
        if args.go_variants:
            arms.append(start_noop(cluster, tmp, http1=True, spread=True, constraints_only=True,
                                   name="go-constraints"))
            arms.append(start_noop(cluster, tmp, spread=True, read_hpas=client, name="go-spread-read-h2"))
        arms.append(start_noop(cluster, tmp, http1=True, spread=True))
        arms.append(start_noop(cluster, tmp, http1=True, spread=True, read_hpas=client))
        arms.append(start_policylib(cluster, tmp, args.webhook_arg))
        no_read = tmp / "no-hpa-read.yaml"
        no_read.write_text(json.dumps({"webhook": {"readHpasOnCreate": False}}))
        arms.append(start_policylib(cluster, tmp, [*args.webhook_arg, "--config", str(no_read)], "policylib-nohpa"))
        if args.baseline:
            arms.append(start_policylib(cluster, tmp, args.webhook_arg, "policylib-baseline", args.baseline.resolve()))
        for variant in args.variant:
            name, _, extra = variant.partition("=")
            arms.append(start_policylib(cluster, tmp, extra.split(), f"policylib-{name}"))
        if args.kyverno:
            arms.append(start_kyverno(cluster, tmp, args.kyverno))
        for arm in arms:
            cluster.namespace(arm.namespace)
        for arm in arms:
            wait_arm_ready(client, arm, timeout=300 if arm.name == "kyverno" else 120)
        for arm in arms:  # warm every path (connections, caches) before measuring
            run_sequential(client, arm, 3 if args.smoke else 20, "warm", exact=True)
            run_concurrent(client, arm, 8 if args.smoke else 80, 8, "warm", exact=True)
        policylib = next(a for a in arms if a.name == "policylib")
        handshakes0 = metric_total(policylib, "policylib_webhook_tls_handshakes_total")
        reviews0 = metric_total(policylib, "policylib_webhook_reviews_total")
        say(f"dry-run creates: {args.rounds} rounds x ({args.c1} at c=1 + {args.c8} at c=8) per arm, alternating")
        results = measure_dry_run(client, arms, args.rounds, args.c1, args.c8, say)
        handshakes = metric_total(policylib, "policylib_webhook_tls_handshakes_total")
        reviews = metric_total(policylib, "policylib_webhook_reviews_total")
        table, added = dry_run_table(arms, results)
        out = [f"Machine: {machine()}; the client, the API server and the webhooks share it.", "",
               "Server-side dry-run creates of a Deployment through kube-apiserver (added = over `none`):", "",
               table, ""] + ratios(added)
        if handshakes is not None and handshakes0 is not None and reviews is not None and reviews0 is not None:
            out.append(f"policylib: {handshakes - handshakes0:.0f} TLS handshakes for {reviews - reviews0:.0f} "
                       f"reviews while measuring; {connections_to(policylib.port)} connections open")
        figures: dict[str, Any] = {
            "machine": machine(), "added_ms": {k: v * 1000 for k, v in added.items() if ":" not in k},
            "creates_per_s_c8": {k.split(":")[0]: v for k, v in added.items() if ":" in k},
            "tls_handshakes": None if handshakes is None or handshakes0 is None else handshakes - handshakes0}
        say("\n".join(out))   # phase 1's report now: a failure in phase 2 does not lose it
        if args.real:
            real = measure_real(client, arms, args.real, max(1, args.real // 5), say)
            out += ["", f"Real creates, {args.real} Deployments per arm at concurrency 8 (alternating chunks):", "",
                    "| arm | creates/s |", "|---|---|"] + [f"| {a} | {v:.0f} |" for a, v in real.items()]
            out += [f"policylib/{o}: {real['policylib'] / real[o]:.2f}x" for o in real if o not in ("none", "policylib")]
            figures["real_creates_per_s"] = real
        figures["unpatched"] = {a.name: a.unpatched for a in arms}
        if any(a.unpatched for a in arms):
            out.append("Admitted unchanged (failurePolicy Ignore: the webhook call timed out or failed): " +
                       ", ".join(f"{a.name} {a.unpatched}" for a in arms if a.unpatched))
        return "\n".join(out), figures
    finally:
        for arm in arms:
            arm.stop()


def run_scale(cluster: harness.Cluster, args: argparse.Namespace, tmp: Path, client: Client,
              arms: list[Arm]) -> tuple[str, dict[str, Any]]:
    """The replicas phase: policylib as 1, 2, 3... servers behind one URL, beside the Go floor."""
    arms.append(start_noop(cluster, tmp, http1=True, spread=True, read_hpas=client))
    for n in args.scale:
        arms.append(start_policylib(cluster, tmp, args.webhook_arg, f"policylib-x{n}", replicas=n))
    for arm in arms:
        cluster.namespace(arm.namespace)
    for arm in arms:
        wait_arm_ready(client, arm)
        run_concurrent(client, arm, 8 if args.smoke else 80, 8, "warm", exact=True)
    say(f"replicas: {args.rounds} rounds x {args.c8} creates per arm at c={args.scale_concurrency}")
    rates = measure_scale(client, arms, args.rounds, args.c8, args.scale_concurrency, say)
    rows = ["| arm | " + " | ".join(f"c={c} creates/s" for c in args.scale_concurrency) + " | RSS MiB |",
            "|---|" + "---|" * (len(args.scale_concurrency) + 1)]
    for arm in arms:
        rss = f"{arm.rss_mib():.0f}" if arm.procs else "-"
        rows.append(f"| {arm.name} | " + " | ".join(f"{rates[arm.name][c]:.0f}" for c in args.scale_concurrency)
                    + f" | {rss} |")
    out = [f"Machine: {machine()}; the client, the API server and the webhooks share it.", "",
           "Server-side dry-run creates, policylib as N separate servers behind one URL (SO_REUSEPORT):", ""] + rows
    return "\n".join(out), {"machine": machine(), "scale_creates_per_s": rates}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for binary, target in ((harness.TESTCLUSTER, "testcluster"), (NOOP, "noop-webhook")):
        if not binary.exists():
            raise SystemExit(f"{binary} is missing: run make {target}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-apiserver-"))
    (tmp / "cluster").mkdir()
    cluster = None
    try:
        say(f"machine: {machine()}")
        cluster = harness.Cluster(tmp / "cluster")
        say(f"testcluster ready in {cluster.ready_seconds:.0f} s ({tmp})")
        report, figures = run(cluster, args, tmp)
        print(report)
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
        return 0
    finally:
        if cluster is not None:
            cluster.stop()
        if os.environ.get("BENCH_KEEP"):
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
