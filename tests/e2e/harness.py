"""The end-to-end harness seen from Python: run ``e2e/bin/testcluster`` (built by ``make testcluster``), kubectl against
it, local webhook processes registered with the real API server, and polling with deadlines.

Nothing here sleeps to synchronise: every wait polls a condition until a deadline and fails with
what it last saw.
"""
from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from tests.unserved_scope import unserved_scope_configuration

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "e2e"
TESTCLUSTER = E2E / "bin" / "testcluster"
KUBECTL = E2E / "bin" / "kubectl"
#: The Kubernetes minors the harness runs (``testcluster --kubernetes``, docs/e2e.md), newest first; the first is
#: the default, whose binaries are in e2e/bin/, each other one's in e2e/bin/<minor>/.
MINORS = ("1.37", "1.36")
DEFAULT_MINOR = MINORS[0]
#: The feature gates that serve the Workload API and turn on kube-scheduler's gang scheduling, per minor: 1.36 has
#: them behind two alpha gates; 1.37 removed GangScheduling (its plugin is on with GenericWorkload, now beta).
WORKLOAD_GATES = {"1.37": "GenericWorkload=true", "1.36": "GangScheduling=true,GenericWorkload=true"}
#: The apiVersion of Workload and PodGroup each minor serves with WORKLOAD_GATES (testcluster turns it on).
WORKLOAD_API = {"1.37": "scheduling.k8s.io/v1beta1", "1.36": "scheduling.k8s.io/v1alpha2"}
SHARED = ROOT.parent / "shared"
#: Label on a namespace that picks which local webhook (config) admits its objects.
CONFIG_LABEL = "e2e.policylib.io/config"


class Timeout(AssertionError):
    pass


def wait_for(what: str, condition: Callable[[], Any], timeout: float = 120.0, interval: float = 0.2) -> Any:
    """Poll ``condition`` until it returns a truthy value (returned) or ``timeout`` passes (fails,
    naming ``what`` and the last value or error seen)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = condition()
            if value:
                return value
            last = value
        except Exception as e:  # the condition may fail while the cluster settles
            last = e
        if time.monotonic() > deadline:
            raise Timeout(f"{what}: not true after {timeout:.0f}s; last seen: {last!r}")
        time.sleep(interval)


def minor_binary(minor: str, name: str) -> Path:
    """Where ``make`` puts a minor's build of ``name`` (testcluster, kubectl, kubelet)."""
    return E2E / "bin" / name if minor == DEFAULT_MINOR else E2E / "bin" / minor / name


def release(minor: str) -> str:
    """The Kubernetes release the minor's module pins (e2e/go.mod, e2e/go.k8s-MINOR.mod): ``v1.37.2``."""
    modfile = E2E / ("go.mod" if minor == DEFAULT_MINOR else f"go.k8s-{minor}.mod")
    return re.search(r"^\s*k8s\.io/kubernetes (v\S+)$", modfile.read_text(), re.M).group(1)


def minor_target(minor: str) -> str:
    """The make target that builds a minor's testcluster and kubectl."""
    return "testcluster" if minor == DEFAULT_MINOR else f"testcluster-{minor}"


#: Ports handed out for a process started later: below the kernel's ephemeral range, where no outgoing connection
#: on the machine (every other job's clients and clusters) can take one meanwhile (testcluster does the same).
LOWEST_PORT = 10000


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (``net.ipv4.ip_local_port_range``), 32768 if unreadable."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return low if low > LOWEST_PORT + 1000 else 32768


def free_port() -> int:
    """A port free on loopback now, below the ephemeral range (random: two jobs rarely pick the same one)."""
    top = ephemeral_start()
    for _ in range(1000):
        port = random.randrange(LOWEST_PORT, top)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken
            return port
    raise AssertionError(f"no free port on 127.0.0.1 between {LOWEST_PORT} and {top - 1}")


#: The files each make target builds under e2e/bin. ``make test`` runs every one of these targets before
#: pytest starts (wherever go is on PATH), so no build ever runs inside a test's timeout.
BUILT_BY: dict[str, tuple[str, ...]] = {
    "testcluster": ("testcluster", "kubectl"),
    **{f"testcluster-{m}": (f"{m}/testcluster", f"{m}/kubectl") for m in MINORS[1:]},
    "noop-webhook": ("noopwebhook",),
    "trainer-crd": ("trainer/crd/trainer.kubeflow.org_trainjobs.yaml",),
    "helm": ("helm",),
    "testcluster-coscheduling": ("scheduler-plugins-scheduler",),
    "testcluster-volcano": ("volcano/vc-scheduler", "volcano/vc-controller-manager", "volcano/vc-webhook-manager"),
    "testcluster-training-operator": ("training-operator/training-operator",),
    "testcluster-mpi-operator": ("mpi-operator/mpi-operator",),
    "testcluster-koordinator": ("koordinator/koord-scheduler",),
    "testcluster-real-node": ("kubelet", "pause"),
    **{f"testcluster-real-node-{m}": (f"{m}/kubelet", "pause") for m in MINORS[1:]},
    "descheduler": ("descheduler",),
    "cert-manager": ("cert-manager/controller", "cert-manager/cainjector", "cert-manager/crd/cert-manager.crds.yaml"),
    "jobset-crd": ("jobset/crd/jobset.x-k8s.io_jobsets.yaml",),
    "testcluster-trainer": ("trainer/trainer-controller-manager", "trainer/jobset",
                            "trainer/crd/jobset.x-k8s.io_jobsets.yaml", "trainer/crd/trainer.kubeflow.org_trainjobs.yaml",
                            "trainer/crd/trainer.kubeflow.org_trainingruntimes.yaml",
                            "trainer/crd/trainer.kubeflow.org_clustertrainingruntimes.yaml"),
    "testcluster-lws": ("lws/lws-manager", "lws/crd/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
                        "lws/crd/disaggregatedset.x-k8s.io_disaggregatedsets.yaml", "lws/webhook/manifests.yaml"),
}


def require_built(target: str = "testcluster") -> None:
    """Fails (never skips: go is on PATH wherever the e2e tests run) when what ``make target`` builds is
    missing, naming the target; it never builds anything itself."""
    missing = [name for name in BUILT_BY[target] if not (E2E / "bin" / name).is_file()]
    if missing:
        pytest.fail(f"e2e/bin/{', e2e/bin/'.join(missing)} missing: `make {target}` builds it "
                    "(`make test` builds every harness component before pytest starts)", pytrace=False)


class Cluster:
    """One running ``testcluster`` of a Kubernetes minor (``MINORS``): its directory, kubeconfig and process, and
    the minor's kubectl."""

    def __init__(self, directory: Path, nodes: Path | None = None, scheduler_config: Path | None = None,
                 extra_args: tuple[str, ...] = (), minor: str = DEFAULT_MINOR, jobset: bool = False,
                 trainer: bool = False, lws: bool = False, lws_gang: str | None = None):
        """``jobset``: also JobSet's controller and webhooks (``testcluster --jobset``); ``trainer``: also Kubeflow
        Trainer v2's (``--trainer``, JobSet's too); both built by ``make testcluster-trainer``. ``lws``: also
        LeaderWorkerSet's manager and webhooks (``--lws``, built by ``make testcluster-lws``), ``lws_gang`` its
        ``--lws-gang`` (``"volcano"`` needs ``--volcano`` in ``extra_args``)."""
        if minor not in MINORS:
            raise ValueError(f"minor {minor!r}: the harness runs {', '.join(MINORS)}")
        require_built(minor_target(minor))
        if jobset or trainer:
            require_built("testcluster-trainer")
            extra_args = (*extra_args, "--trainer" if trainer else "--jobset")
        if lws:
            require_built("testcluster-lws")
            extra_args = (*extra_args, "--lws", *(("--lws-gang", lws_gang) if lws_gang else ()))
        self.dir, self.minor = directory, minor
        self.kubectl_path = minor_binary(minor, "kubectl")
        args = [str(TESTCLUSTER), "--dir", str(directory), "--kubernetes", minor]
        if nodes:
            args += ["--nodes", str(nodes)]
        if scheduler_config:
            args += ["--scheduler-config", str(scheduler_config)]
        args += extra_args
        self.stderr = open(directory.parent / f"{directory.name}.stderr", "w+")  # noqa: SIM115 -- open while it runs
        started = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        try:
            line = _readline(self.proc, timeout=600)
        except BaseException:   # interrupted while it starts (make test told to stop): no object owns it yet
            self.stop()
            raise
        if line.strip() != f"ready {directory / 'kubeconfig'}":
            self.stop()
            raise AssertionError(f"testcluster did not report ready: {line!r}\n{self.stderr_text()}")
        self.ready_seconds = time.monotonic() - started
        self.kubeconfig = directory / "kubeconfig"
        self.env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        self.env.pop("KUBERNETES_SERVICE_HOST", None)

    def stderr_text(self) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        return self.stderr.read()[-4000:]

    def stop(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    # --- kubectl and the API ---------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess:
        run = subprocess.run([str(self.kubectl_path), *args], input=input, capture_output=True, text=True,
                             env=self.env, timeout=timeout)
        if check and run.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({run.returncode}): {run.stderr.strip()}")
        return run

    def apply(self, *objs: dict, args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
        return self.kubectl("apply", "-f", "-", *args, input=yaml.safe_dump_all(objs))

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict:
        ns = ("-n", namespace) if namespace else ()
        return json.loads(self.kubectl("get", kind, name, *ns, "-o", "json").stdout)

    def get_or_none(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        ns = ("-n", namespace) if namespace else ()
        run = self.kubectl("get", kind, name, *ns, "-o", "json", "--ignore-not-found", check=False)
        if run.returncode != 0:
            raise AssertionError(run.stderr)
        return json.loads(run.stdout) if run.stdout.strip() else None

    def list(self, kind: str, namespace: str | None = None, selector: str | None = None) -> list[dict]:
        args = ["get", kind, "-o", "json"]
        args += ["-n", namespace] if namespace else ["-A"]
        if selector:
            args += ["-l", selector]
        return json.loads(self.kubectl(*args).stdout)["items"]

    def namespace(self, name: str, config: str | None = None) -> str:
        labels = {CONFIG_LABEL: config} if config else {}
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
        return name

    def install_crds(self, *paths: str) -> list[str]:
        """Apply upstream CRDs from ../shared (server-side: they are larger than client-side apply's
        last-applied annotation allows) and wait until they are served; returns their names. Where the checkout has
        no ../shared beside it (a user's clone), the test is skipped saying so."""
        if not SHARED.is_dir():
            pytest.skip(f"the upstream CRDs {', '.join(paths)} are read from ../shared ({SHARED}), which is not beside "
                        "this checkout")
        for path in paths:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(SHARED / path))
        names = [yaml.safe_load((SHARED / path).read_text())["metadata"]["name"] for path in paths]
        self.kubectl("wait", "--for=condition=Established", *[f"crd/{n}" for n in names], "--timeout=120s")
        return names

    def install_built_crds(self, target: str, *names: str) -> list[str]:
        """Apply the CRDs ``make target`` put under e2e/bin (read from an upstream module, as JobSet's), or only
        ``names`` among its files, and wait until they are served; returns their names. Fails when the target was
        not built."""
        require_built(target)
        unknown = [n for n in names if n not in BUILT_BY[target]]
        if unknown:
            raise ValueError(f"make {target} builds no {', '.join(unknown)}")
        paths = [E2E / "bin" / name for name in names or BUILT_BY[target]]
        for path in paths:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        names = [yaml.safe_load(path.read_text())["metadata"]["name"] for path in paths]
        self.kubectl("wait", "--for=condition=Established", *[f"crd/{n}" for n in names], "--timeout=120s")
        return names

    def restart_apiserver(self) -> None:
        """SIGHUP: the harness restarts kube-apiserver on the same port."""
        self.proc.send_signal(signal.SIGHUP)


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return result[0] if result else f"(nothing within {timeout:.0f}s)"


# --- the webhook, local, registered by URL ---------------------------------------------------------

def webhook_rules() -> list[dict]:
    """The webhooks of ``manifests/base`` as installed: rules, policies, timeouts, selectors."""
    return yaml.safe_load((ROOT / "manifests/base/mutatingwebhookconfiguration.yaml").read_text())["webhooks"]


@dataclass
class Webhook:
    """``python -m webhook serve`` on loopback, and a MutatingWebhookConfiguration that sends it the
    reviews of namespaces labelled ``CONFIG_LABEL=<name>``."""

    cluster: Cluster
    name: str
    config: dict
    tmp: Path
    port: int = 0
    proc: subprocess.Popen | None = None
    log_path: Path = field(default=None)
    #: More ``serve`` flags (``--client-ca FILE``, say).
    extra: tuple[str, ...] = ()

    def __post_init__(self):
        self.cert_dir = self.tmp / f"certs-{self.name}"
        self.config_path = self.tmp / f"config-{self.name}.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config))
        self.log_path = self.tmp / f"webhook-{self.name}.log"
        # --local: the API server reaches this webhook on 127.0.0.1, a SAN only --local issues
        run = subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(self.cert_dir), "--local"],
                             capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
        self.ca_bundle = run.stdout.strip()
        self.port = self.port or free_port()

    def start(self) -> "Webhook":
        self.log = open(self.log_path, "a")  # noqa: SIM115 -- the process's log, open while it runs
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--config", str(self.config_path), "--cert-dir",
             str(self.cert_dir), "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
             "--kubeconfig", str(self.cluster.kubeconfig), "--log-level", "info", *self.extra],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT)
        wait_for(f"webhook {self.name} /readyz", self.ready, timeout=60)
        return self

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"webhook {self.name} exited {self.proc.returncode}: {self.log_text()[-2000:]}")
        ctx = ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))
        with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/readyz", context=ctx, timeout=5) as r:
            return r.status == 200

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def reviews(self) -> list[dict]:
        """The webhook's JSON log lines, one per review."""
        out = []
        for line in self.log_text().splitlines():
            if line.startswith("{") and '"uid"' in line:
                with contextlib.suppress(ValueError):   # a line cut short at the end of the log
                    out.append(json.loads(line))
        return out

    def configuration(self, url: str | None = None, timeout: int | None = None) -> dict:
        hooks = []
        for hook in webhook_rules():
            hook = copy.deepcopy(hook)
            hook["name"] = hook["name"].replace(".policylib.io", f".{self.name}.e2e.policylib.io")
            hook["clientConfig"] = {"url": url or f"https://127.0.0.1:{self.port}/mutate", "caBundle": self.ca_bundle}
            hook["namespaceSelector"] = {"matchLabels": {CONFIG_LABEL: self.name}}
            if timeout:
                hook["timeoutSeconds"] = timeout
            hooks.append(hook)
        return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": f"policylib-e2e-{self.name}"}, "webhooks": hooks}

    def register(self) -> None:
        self.cluster.apply(self.configuration())
        probe_ns = self.cluster.namespace(f"probe-{self.name}", config=self.name)
        wait_for(f"the API server calls webhook {self.name}", lambda: _probe_mutated(self.cluster, probe_ns),
                 timeout=60, interval=0.5)


def _probe_mutated(cluster: Cluster, namespace: str) -> bool:
    probe = deployment("probe", namespace, replicas=1)
    run = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe))
    annotations = json.loads(run.stdout)["metadata"].get("annotations") or {}
    return "policylib.io/spread-effective-replicas" in annotations


# --- objects -----------------------------------------------------------------------------------

def deployment(name: str, namespace: str, replicas: int | None = 1, *, labels: dict | None = None,
               node_selector: dict | None = None, image: str = "registry.example/app:1", **spec: Any) -> dict:
    labels = labels or {"app": name}
    pod_spec: dict = {"containers": [{"name": "app", "image": image}]}
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": dict(labels)},
                     "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec}}}
    if replicas is not None:
        body["spec"]["replicas"] = replicas
    body["spec"].update(spec)
    return body


def schemaless_crds(group: str, kinds: tuple[tuple[str, str], ...]) -> list[dict]:
    """Namespaced v1 CRDs of ``group``, one per (plural, Kind), whose schema keeps every field: kinds of a
    component the harness does not run, installed so that objects of them reach the API server (their own
    schemas are that component's to check)."""
    return [
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
         "metadata": {"name": f"{plural}.{group}"},
         "spec": {"group": group, "scope": "Namespaced",
                  "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                  "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                      "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
        for plural, kind in kinds]


#: The label that puts a Node in a node group (tests/e2e/nodes.yaml and the gang clusters).
NODE_GROUP_LABEL = "e2e.policylib.io/group"


def node_list(groups: dict[str, list[int]]) -> dict:
    """A List of fake Nodes: per group, one Node per entry, named ``<group>-<i>``, with that many CPUs."""
    items = []
    for group, cpus in groups.items():
        for i, cpu in enumerate(cpus):
            items.append({"kind": "Node", "metadata": {"name": f"{group}-{i}", "labels": {NODE_GROUP_LABEL: group}},
                          "status": {"allocatable": {"cpu": str(cpu), "memory": "64Gi", "pods": "110"}}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def bound(pods: list[dict]) -> list[str]:
    """The names of the pods a scheduler has bound (spec.nodeName set), sorted."""
    return sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))


def scheduling_failures(c: Cluster, ns: str) -> dict[str, list[str]]:
    """FailedScheduling event messages by pod."""
    out: dict[str, list[str]] = {}
    for e in c.list("events", ns):
        if e.get("reason") == "FailedScheduling" and e["involvedObject"]["kind"] == "Pod":
            out.setdefault(e["involvedObject"]["name"], []).append(e.get("message", ""))
    return out


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def refused(*args: str) -> str:
    """``testcluster ARGS`` refusing its flags or files: exit 2, nothing on stdout and one line on stderr,
    which it returns."""
    run = subprocess.run([str(TESTCLUSTER), *args], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout) == (2, ""), (run.returncode, run.stdout, run.stderr)
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


def have_go() -> bool:
    return shutil.which("go") is not None


# --- the controller, local -------------------------------------------------------------------------

#: The MutatingWebhookConfiguration a test's controller reads its scope from (rule W5) unless the test names
#: one (``--webhook-configuration`` in ``extra_args``): the selectors manifests/base ships (every namespace but
#: kube-system, kube-node-lease, policylib-system, the lease's, and those labelled policylib.io/skip=true),
#: whatever the shared cluster holds (the install tests put the chart's and manifests/' ``policylib-webhook``,
#: the controller's default, there for a while). The scope fails closed, so it is installed (by the first
#: Controller that reads it), with a Service that does not exist under failurePolicy Ignore: the API server's
#: call fails at once and admits unchanged (docs/controller.md, "Scope").
SCOPE_CONFIGURATION = "policylib-e2e-scope"
#: The namespace of that configuration's Service (out of scope, rule W6); nothing creates it.
SCOPE_SERVICE_NAMESPACE = "policylib-e2e-nowhere"


def scope_configuration() -> dict:
    """:data:`SCOPE_CONFIGURATION`: manifests/base's selectors and rules, for a Service nothing serves."""
    return unserved_scope_configuration(SCOPE_CONFIGURATION, "scope.e2e.policylib.io", SCOPE_SERVICE_NAMESPACE)


def scope_args(cluster: Cluster) -> list[str]:
    """``--webhook-configuration`` for ``plan``/``check --cluster``: :data:`SCOPE_CONFIGURATION`, installed (the
    scope fails closed: without it nothing is planned or checked)."""
    cluster.apply(scope_configuration())
    return [f"--webhook-configuration={SCOPE_CONFIGURATION}"]


def controller_args(extra_args: list[str] | None) -> list[str]:
    """``extra_args`` with ``--webhook-configuration`` set to :data:`SCOPE_CONFIGURATION` unless given."""
    extra = list(extra_args or [])
    if any(a == "--webhook-configuration" or a.startswith("--webhook-configuration=") for a in extra):
        return extra
    return [f"--webhook-configuration={SCOPE_CONFIGURATION}", *extra]


class Controller:
    """``python -m webhook controller`` against the cluster, with its own identity and metrics port; its
    scope is :data:`SCOPE_CONFIGURATION`'s unless ``extra_args`` names a webhook configuration (controller_args).
    ``env``: more environment (``POD_NAME`` is the identity); ``kubeconfig``: another identity's (the cluster's
    admin by default)."""

    def __init__(self, cluster: Cluster, config: dict, tmp: Path, identity: str, lease_namespace: str,
                 extra_args: list[str] | None = None, env: dict[str, str] | None = None,
                 kubeconfig: Path | None = None):
        self.cluster, self.identity = cluster, identity
        args = controller_args(extra_args)
        if f"--webhook-configuration={SCOPE_CONFIGURATION}" in args:
            cluster.apply(scope_configuration())
        self.config_path = tmp / f"controller-{identity}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = tmp / f"controller-{identity}.log"
        self.port = free_port()
        self.log = open(self.log_path, "a")  # noqa: SIM115 -- the process's log, open while it runs
        env = {**cluster.env, "POD_NAME": identity, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "webhook", "controller", "--config", str(self.config_path), "--kubeconfig",
             str(kubeconfig or cluster.kubeconfig), "--namespace", lease_namespace, "--host", "127.0.0.1",
             "--port", str(self.port), *args],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        wait_for(f"controller {identity} /healthz", lambda: self._get("/healthz") == "ok", timeout=60)

    def _get(self, path: str) -> str:
        if self.proc.poll() is not None:
            raise AssertionError(f"controller {self.identity} exited {self.proc.returncode}: {self.log_text()[-2000:]}")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
            return r.read().decode()

    def status(self) -> dict:
        """``/readyz``: leader, synced, dryRun, and the first sync's progress (firstSync, listed, planned,
        toPlan; rule W8)."""
        try:
            return json.loads(self._get("/readyz"))
        except urllib.error.HTTPError as e:
            return json.loads(e.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples that carry ``labels``."""
        total = 0.0
        for line in self._get("/metrics").splitlines():
            if line.startswith("#") or not (line.startswith(name + "{") or line.startswith(name + " ")):
                continue
            head, value = line.rsplit(" ", 1)
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total

    def log_text(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    def log_entries(self, msg: str) -> list[dict]:
        out = []
        for line in self.log_text().splitlines():
            if line.startswith("{"):
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("msg") == msg:
                    out.append(entry)
        return out

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@contextlib.contextmanager
def gang_webhook_and_controller(cluster: Cluster, config: dict, tmp: Path, identity: str,
                                lease_namespace: str) -> Iterator[None]:
    """The gang webhook (registered) and a controller that leads, both with ``config``; stopped on exit,
    the controller first."""
    hook: Webhook | None = None
    ctl: Controller | None = None
    try:
        hook = Webhook(cluster, "gang", config, tmp).start()
        hook.register()
        ctl = leader = Controller(cluster, config, tmp, identity, lease_namespace)
        wait_for("the controller leads", lambda: leader.status()["leader"], timeout=60)
        yield
    finally:
        for proc in (ctl, hook):
            if proc:
                proc.stop()
