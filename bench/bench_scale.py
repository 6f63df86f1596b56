"""Memory and time as the cluster grows: the controller, the webhook's HPA cache and ``plan --cluster``.

For each N: N realistic Deployments (bench/scale_objects.py: two containers with probes, resources,
eight environment variables, a volume, ``managedFields``; half with kubectl's last-applied annotation;
stored without policylib, as in a cluster it is installed into) and N/4 HPAs over 50 namespaces. Measured,
each in its own process, its CPU from /proc and its memory as VmRSS / VmHWM (peak):

- ``python -m webhook controller --dry-run``: RSS once its first sync is done (``/readyz``, rule W8) and
  its peak, against its idle RSS on an empty cluster; the sync's wall and CPU time;
- ``python -m webhook serve``'s HPA cache: one worker's RSS with the N/4 HPAs cached, against none
  (in-process: the cache's reflector and store, as a worker runs them);
- ``policylib plan --cluster`` and ``check --cluster``: wall and peak RSS; ``policylib plan -f`` of the same
  objects, as the server returns them, for the sync's yardstick (rule: the sync within 3x of it);
- ``policylib simulate`` of N/10 of the Deployments on 5,000 Nodes (``--nodes``): the harness's Nodes
  (``--cluster``), or from a file with the stand-in;
- CPU per watch event at steady state (in-process, dry-run: 1,000 HPA changes after the sync; in the
  JSON only).

The cluster holds a MutatingWebhookConfiguration ``policylib-webhook`` with the selectors manifests/base
ships, for a Service nothing serves (failurePolicy Ignore), created after the objects: the scope the
controller, ``plan --cluster`` and ``check --cluster`` read (rule W5: without it, it is closed and they act on
nothing), so they act on every Deployment, as in a cluster policylib is installed into.

Two API servers:

- ``--server harness`` (default): ``e2e/bin/testcluster``, the real kube-apiserver and controller-manager
  (``make testcluster``) with 5,000 of its fake Nodes (Node objects with a Ready status, no kubelet); the
  Deployments are created paused, so the controller-manager writes each one's status once and makes no
  ReplicaSets or Pods (the objects held and listed are the same; a paused Deployment has no rollout);
- ``--server recorded``: a loopback server answering paginated lists (``limit``/``continue``), watches
  that stay quiet, and the Lease, with the same objects as the API server returns them: the client side
  alone, for machines without the harness.

    .venv/bin/python bench/bench_scale.py --sizes 1000,10000 [--server recorded] [--json out.json]
        [--repo . --repo ../before]   # each tree on the same cluster
        [--only plan_cluster,check_cluster,plan_file --repeat 3]   # those alone, each the median of 3 runs
        [--pages 100,500,0]   # what listing the Deployments and HPAs costs per page size (0: one page)

Each command's figure is the median of ``--repeat`` runs (by wall time), the trees' runs interleaved; the
machine's 1-minute load average is recorded beside each run (``load``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scale_objects import (  # noqa: E402
    NAMESPACES,
    deployment_as_stored,
    deployment_manifest,
    hpa_as_stored,
    hpa_manifest,
    with_last_applied,  # noqa: E402
)
from tests.unserved_scope import unserved_scope_configuration  # noqa: E402

KIB, MIB = 1024, 1024 * 1024
#: Whose code the measured processes run (``--repo``: another checkout, for a before/after).
CODE = REPO
#: The CLI, reporting its own peak RSS (VmHWM) at exit to $BENCH_HWM: the kernel's ru_maxrss of a child
#: counts the parent's memory shared before the exec, so it would report the benchmark's own size.
POLICYLIB = ("import atexit, os, sys\n"
             "def hwm():\n"
             "    peak = [line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')][0]\n"
             "    open(os.environ['BENCH_HWM'], 'w').write(peak)\n"
             "atexit.register(hwm)\n"
             "from policylib.cli import main\n"
             "sys.exit(main(sys.argv[1:]))\n")
TICK = os.sysconf("SC_CLK_TCK")


# --- process figures --------------------------------------------------------------------------------

def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


#: The harness's ``testcluster`` process: etcd, and the parent of its API server, controller-manager and scheduler.
SERVER: list[int] = []


def server_cpu() -> float:
    """CPU seconds the harness's processes have used so far (0 without the harness): what the API server
    spends answering, beside the client's own CPU."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    total, todo = 0.0, list(SERVER)
    while todo:
        pid = todo.pop()
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += cpu_seconds(pid)
        todo += children.get(pid, [])
    return total


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS KiB) of one command, its output discarded; the peak as the command
    reports it (``POLICYLIB``)."""
    hwm = tempfile.NamedTemporaryFile(prefix="bench-hwm-", delete=False)  # noqa: SIM115 -- read after the run
    hwm.close()
    env = dict(env, BENCH_HWM=hwm.name)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=CODE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1, 3, 4):   # 3: an error finding / a replica Pending
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak = int(Path(hwm.name).read_text() or 0)
    os.unlink(hwm.name)
    return wall, usage.ru_utime + usage.ru_stime, peak


# --- the recorded server ------------------------------------------------------------------------------

class Recorded:
    """Paginated lists of fixed objects, quiet watches, a Lease: what the controller and plan read."""

    def __init__(self, deployments: list[bytes], hpas: list[bytes]):
        configuration = scope_configuration()
        self.items = {"/apis/apps/v1/deployments": deployments, "/apis/autoscaling/v2/horizontalpodautoscalers": hpas,
                      "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations":
                          [json.dumps(dict(configuration, metadata=dict(configuration["metadata"], uid="scope",
                                                                        resourceVersion="1"))).encode()],
                      "/api/v1/namespaces": [json.dumps(namespace_object(i)).encode() for i in range(NAMESPACES)]}
        self.one = {f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{SCOPE}":
                    self.items["/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"][0]}
        self.lease: dict[str, Any] | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                url = urllib.parse.urlparse(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                if q.get("watch") in ("true", "1", "True"):
                    time.sleep(min(float(q.get("timeoutSeconds", 30)), 30))
                    return self.reply(200, b"")
                if url.path in server.items and q.get("labelSelector"):   # no object carries policylib's labels
                    return self.reply(200, b'{"kind": "List", "metadata": {"resourceVersion": "1000"}, "items": []}')
                if url.path in server.items:
                    return self.reply(200, server.page(url.path, int(q.get("limit", 0) or 0), q.get("continue")))
                if url.path in server.one:
                    return self.reply(200, server.one[url.path])
                if "/leases/" in url.path and server.lease:
                    return self.reply(200, json.dumps(server.lease).encode())
                if url.path == "/version":
                    return self.reply(200, b'{"gitVersion": "v1.36.0-recorded"}')
                self.reply(404, b'{"kind": "Status", "code": 404, "reason": "NotFound"}')

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if "/leases" in self.path:
                    body.setdefault("metadata", {})["resourceVersion"] = "1"
                    server.lease = body
                self.reply(201, json.dumps(body).encode())

            do_PUT = do_POST

            def reply(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass   # a client gone mid-watch: nothing to report

        self.http = Server(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def page(self, path: str, limit: int, token: str | None) -> bytes:
        items = self.items[path]
        start = int(token or 0)
        end = len(items) if not limit else min(len(items), start + limit)
        meta = {"resourceVersion": "1000"}
        if end < len(items):
            meta["continue"] = str(end)
        return b'{"kind": "List", "apiVersion": "v1", "metadata": ' + json.dumps(meta).encode() + \
            b', "items": [' + b",".join(items[start:end]) + b"]}"

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        url = f"http://127.0.0.1:{self.http.server_address[1]}"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "r",
                                    "clusters": [{"name": "r", "cluster": {"server": url}}],
                                    "contexts": [{"name": "r", "context": {"cluster": "r", "user": "r"}}],
                                    "users": [{"name": "r", "user": {"token": "t"}}]}))
        return path

    def stop(self) -> None:
        self.http.shutdown()


@contextlib.contextmanager
def recorded(n: int, tmp: Path) -> Iterator[Path]:
    deployments = [json.dumps(deployment_as_stored(i)).encode() for i in range(n)]
    hpas = [json.dumps(hpa_as_stored(i)).encode() for i in range(0, n, 4)]
    server = Recorded(deployments, hpas)
    try:
        yield server.kubeconfig(tmp)
    finally:
        server.stop()


# --- the scope -----------------------------------------------------------------------------------------

#: The configuration the controller and ``plan``/``check --cluster`` read by default (rule W5).
SCOPE = "policylib-webhook"


def scope_configuration() -> dict[str, Any]:
    """:data:`SCOPE` for a Service nothing serves (tests/unserved_scope.py): every Deployment of the benchmark
    in scope."""
    return unserved_scope_configuration(SCOPE, "scope.bench.policylib.io", "policylib-bench-nowhere")


def namespace_object(i: int) -> dict[str, Any]:
    name = f"scale-{i:02d}"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "uid": name, "resourceVersion": "1",
                                                                  "labels": {"kubernetes.io/metadata.name": name}}}


# --- the harness --------------------------------------------------------------------------------------

#: The harness's fake Nodes (``testcluster --nodes``: created with their status, no kubelet heartbeat):
#: what ``simulate --cluster`` and ``check --cluster`` read.
NODES = 5000


def node_list(nodes: int) -> dict[str, Any]:
    """``nodes`` Nodes of 16 CPUs and 64 GiB over three zones."""
    return {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": f"node-{i:05d}", "labels": {"kubernetes.io/hostname": f"node-{i:05d}",
                                                          "topology.kubernetes.io/zone": f"zone-{i % 3}"}},
         "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                    "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}}} for i in range(nodes)]}


@contextlib.contextmanager
def harness_cluster(n: int, tmp: Path) -> Iterator[Path]:
    from tests.e2e import harness
    nodes = None
    if n:
        nodes = tmp / "nodes.json"
        nodes.write_text(json.dumps(node_list(NODES)))
    start = time.monotonic()
    cluster = harness.Cluster(tmp / "cluster", nodes=nodes)
    print(f"harness ready in {cluster.ready_seconds:.0f} s ({NODES if n else 3} Nodes)", file=sys.stderr, flush=True)
    SERVER[:] = [cluster.proc.pid]
    try:
        create(cluster.kubeconfig, n)
        print(f"created {n} Deployments, {n // 4} HPAs in {time.monotonic() - start:.0f} s", file=sys.stderr,
              flush=True)
        print(f"the harness settled in {settle():.0f} s", file=sys.stderr, flush=True)
        yield cluster.kubeconfig
    finally:
        SERVER.clear()
        cluster.stop()


def settle(quiet: float = 0.5, timeout: float = 1800) -> float:
    """Wait until the harness's processes use less than ``quiet`` CPU-seconds per 5 s, twice running: the
    controller-manager has written every new Deployment's status (twice each, minutes at 50,000), which would
    otherwise run beside the measurements. Returns the seconds waited."""
    start, calm, cpu = time.monotonic(), 0, server_cpu()
    while calm < 2 and time.monotonic() - start < timeout:
        time.sleep(5)
        now = server_cpu()
        calm, cpu = (calm + 1 if now - cpu < quiet else 0), now
    return time.monotonic() - start


def create(kubeconfig: Path, n: int) -> None:
    """The namespaces, N paused Deployments and N/4 HPAs, created at concurrency 8."""
    from policylib.shell import kube
    api = kube.Api(kube.api_client(None, str(kubeconfig)))
    for i in range(NAMESPACES):
        with contextlib.suppress(kube.Conflict):
            api.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                            "metadata": {"name": f"scale-{i:02d}"}},
                        content_type="application/json")

    def one(i: int) -> None:
        d = deployment_manifest(i)
        d["spec"]["paused"] = True
        d = with_last_applied(d, i)
        api.create(kube.DEPLOYMENTS, d["metadata"]["namespace"], d)
        if i % 4 == 0:
            h = hpa_manifest(i)
            api.create(kube.HPAS, h["metadata"]["namespace"], h)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))
    with contextlib.suppress(kube.Conflict):   # after the objects: their creates call no webhook
        api.create(kube.MUTATING_WEBHOOKS, None, scope_configuration())


# --- the measurements ---------------------------------------------------------------------------------

def controller(kubeconfig: Path, tmp: Path, timeout: float) -> dict[str, float]:
    """Start the controller (dry-run), wait for its first sync; RSS, peak, wall and CPU."""
    port = free_port()
    env = dict(os.environ, POD_NAME="bench", PYTHONUNBUFFERED="1")
    env.pop("KUBERNETES_SERVICE_HOST", None)
    with open(tmp / "controller.log", "w") as log:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "webhook", "controller", "--dry-run", "--kubeconfig",
                                 str(kubeconfig), "--namespace", "default", "--host", "127.0.0.1", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=CODE, env=env)
        try:
            state: dict[str, Any] = {}
            while time.monotonic() - start < timeout:
                if proc.poll() is not None:
                    raise RuntimeError(f"controller exited {proc.returncode}: {(tmp / 'controller.log').read_text()[-2000:]}")
                with contextlib.suppress(OSError, ValueError):
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                            state = json.loads(r.read())
                    except urllib.error.HTTPError as e:
                        state = json.loads(e.read())
                    if state.get("leader") and state.get("firstSync"):
                        break
                    if "firstSync" not in state and state.get("leader") and state.get("synced"):
                        # a controller without rule W8's /readyz (an older one): done when its CPU stops moving
                        cpu, rest = cpu_seconds(proc.pid), time.monotonic()
                        while time.monotonic() - rest < 3:
                            time.sleep(0.5)
                            if cpu_seconds(proc.pid) - cpu > 0.05:
                                cpu, rest = cpu_seconds(proc.pid), time.monotonic()
                        break
                time.sleep(0.2)
            else:
                raise RuntimeError(f"no first sync within {timeout} s: {state}")
            wall, cpu = time.monotonic() - start, cpu_seconds(proc.pid)
            return {"rss": status_kib(proc.pid, "VmRSS") * KIB, "peak": status_kib(proc.pid, "VmHWM") * KIB,
                    "wall": wall, "cpu": cpu}
        finally:
            proc.terminate()
            proc.wait(30)


def webhook_cache(kubeconfig: Path) -> dict[str, float]:
    """A webhook worker's HPA cache synced, in a fresh process: its RSS."""
    code = ("import sys, time, pathlib\n"
            "from webhook.admission.facts import facts_source\n"
            "facts = facts_source('watch', sys.argv[1]).start()\n"
            "deadline = time.monotonic() + 600\n"
            "while not facts.ready and time.monotonic() < deadline: time.sleep(0.1)\n"
            "assert facts.ready\n"
            "print([l.split()[1] for l in pathlib.Path('/proc/self/status').read_text().splitlines() "
            "if l.startswith('VmRSS:')][0], flush=True)\n"
            "import os; os._exit(0)\n")   # not the interpreter's exit racing the cache's thread (an older tree)
    out = subprocess.run([sys.executable, "-c", code, str(kubeconfig)], capture_output=True, text=True, cwd=CODE,
                         timeout=900, check=True)
    return {"rss": int(out.stdout.split()[-1]) * KIB}


def plan_cluster(kubeconfig: Path) -> dict[str, float]:
    wall, cpu, peak = timed([sys.executable, "-c", POLICYLIB, "plan", "--cluster", "--kubeconfig",
                             str(kubeconfig), "-o", "json"], dict(os.environ))
    return {"wall": wall, "cpu": cpu, "peak": peak * KIB}


def check_cluster(kubeconfig: Path) -> dict[str, float]:
    wall, cpu, peak = timed([sys.executable, "-c", POLICYLIB, "check", "--cluster", "--kubeconfig",
                             str(kubeconfig), "-o", "json"], dict(os.environ))
    return {"wall": wall, "cpu": cpu, "peak": peak * KIB}


def snapshot(n: int, kubeconfig: Path | None, tmp: Path) -> None:
    """The Deployments and HPAs as the API server returns them (page by page, written as read), or
    without a server the benchmark's stored form; for ``plan -f``."""
    path = tmp / "snapshot.json"
    with open(path, "w") as f:
        f.write('{"apiVersion": "v1", "kind": "List", "items": [')
        first = True
        pages: Iterator[list[dict[str, Any]]]
        if kubeconfig:
            from policylib.shell import kube
            api = kube.Api(kube.api_client(None, str(kubeconfig)))
            pages = (page["items"] for res in (kube.DEPLOYMENTS, kube.HPAS) for page in api.pages(res))
        else:
            pages = iter([[deployment_as_stored(i) for i in range(n)] + [hpa_as_stored(i) for i in range(0, n, 4)]])
        for items in pages:
            for item in items:
                f.write(("" if first else ",") + json.dumps(item))
                first = False
        f.write("]}")


def plan_file(n: int, tmp: Path) -> dict[str, float]:
    path = tmp / "snapshot.json"
    wall, cpu, peak = timed([sys.executable, "-c", POLICYLIB, "plan", "-f", str(path), "-o", "json"],
                            dict(os.environ))
    return {"wall": wall, "cpu": cpu, "peak": peak * KIB}


def simulate(n: int, tmp: Path, kubeconfig: Path | None = None) -> dict[str, float]:
    """``policylib simulate`` of N/10 of the Deployments on ``NODES`` Nodes (16 CPUs, 64 GiB, three zones):
    the scheduler's replay, which reads containers and Nodes whole. With ``kubeconfig``, the API server's
    Nodes and Pods (``--cluster``), else from a file."""
    deployments, node_file = tmp / "simulate-deployments.json", tmp / "simulate-nodes.json"
    deployments.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                       "items": [deployment_manifest(i) for i in range(n // 10)]}))
    if kubeconfig:
        source = ["--cluster", "--kubeconfig", str(kubeconfig)]
    else:
        node_file.write_text(json.dumps(node_list(NODES)))
        source = ["--nodes", str(node_file)]
    wall, cpu, peak = timed([sys.executable, "-c", POLICYLIB, "simulate", "-f", str(deployments), *source,
                             "-o", "json"], dict(os.environ))
    return {"wall": wall, "cpu": cpu, "peak": peak * KIB}


def event_cpu(n: int, events: int = 1000) -> dict[str, float]:
    """CPU per watch event at steady state, in-process: the controller synced on the N Deployments (a stub
    answering its lists), then ``events`` HPA changes (minReplicas moved) each stored, queued and planned
    (dry-run)."""
    import copy

    from policylib import load_config
    from policylib.shell import kube
    from tests.controller_driver import sync, work
    from webhook.controller import Controller, Options

    class Lists:
        def __init__(self) -> None:
            self.items = {kube.DEPLOYMENTS: [deployment_as_stored(i) for i in range(n)],
                          kube.HPAS: [hpa_as_stored(i) for i in range(0, n, 4)]}
            self.events: list[tuple[str, dict[str, Any]]] = []

        def watch(self, res: Any, resource_version: Any, timeout: Any) -> Iterator[tuple[str, dict[str, Any]]]:
            events, self.events = self.events, []
            yield from events

        def pages(self, res: Any, namespace: Any = None, timeout: Any = None, limit: int = 500) -> Iterator[dict[str, Any]]:
            if res not in self.items:
                raise kube.NotFound(404, "not served")
            for start in range(0, len(self.items[res]), limit):
                yield {"items": [dict(o, apiVersion=res.api_version, kind=res.kind)
                                 for o in self.items[res][start:start + limit]], "resourceVersion": "1"}
    lists = Lists()
    c = Controller(lists, Options(load_config(None), identity="bench", dry_run=True))  # type: ignore[arg-type]
    c.elector.set_leading(True, time.monotonic() + 3600)
    sync(c)
    hpas = [dict(h, apiVersion="autoscaling/v2", kind="HorizontalPodAutoscaler") for h in lists.items[kube.HPAS]]
    [reflector] = [r for r in c.reflectors if r.res == kube.HPAS]
    start = time.process_time()
    for e in range(events):
        h = copy.deepcopy(hpas[e % len(hpas)])
        h["metadata"]["resourceVersion"] = str(10 ** 6 + e)
        h["spec"]["minReplicas"] = 3 + e % 4
        lists.events.append(("MODIFIED", h))
        reflector.watch_once()     # the reflector stores it and queues its target ...
        work(c)                    # ... which the worker plans
    return {"cpu_per_event": (time.process_time() - start) / events}


#: ``plan -f`` reads its file whole (about 60 KiB per Deployment at its peak): past this it is not run.
PLAN_FILE_MAX = 10_000


def attempt(what: str, measure: Any, *args: Any) -> dict[str, Any]:
    """One measurement; its failure recorded (an older tree without the command), not the run's end."""
    try:
        out: dict[str, Any] = measure(*args)
    except (RuntimeError, subprocess.SubprocessError) as e:
        out = {"error": str(e)[-500:]}
    print(f"  {what}: {out}", file=sys.stderr, flush=True)
    return out


#: What is measured, in order (``--only`` picks some).
MEASURES = ("controller", "webhook", "plan_cluster", "check_cluster", "plan_file", "simulate", "events")
#: The commands run ``--repeat`` times, the trees' runs interleaved.
REPEATED = ("plan_cluster", "check_cluster", "plan_file", "simulate")


def with_server_cpu(measure: Any) -> Any:
    """``measure`` with the harness's CPU over its run beside its figures (``server_cpu``)."""
    def measured(*args: Any) -> dict[str, Any]:
        before = server_cpu()
        out: dict[str, Any] = measure(*args)
        return dict(out, server_cpu=round(server_cpu() - before, 2)) if SERVER else out
    return measured


def load() -> float:
    """The machine's 1-minute load average (what else ran beside the measurement)."""
    return round(os.getloadavg()[0], 2)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall time, with every run's wall time and load beside it."""
    done = [r for r in runs if "error" not in r]
    if not done:
        return runs[-1] if runs else {}
    out = dict(sorted(done, key=lambda r: r["wall"])[(len(done) - 1) // 2])
    out["walls"] = [round(r["wall"], 2) for r in done]
    out["loads"] = [r["load"] for r in done]
    return out


def pages(kubeconfig: Path, limit: int) -> dict[str, float]:
    """Listing the Deployments and HPAs as ``plan --cluster`` does (each object projected as its page is
    decoded, rule W7) with pages of ``limit`` objects (0: the server's one answer): wall, CPU and the peak
    RSS of a process that does only that."""
    code = ("import json, os, resource, sys, time\n"
            "from policylib.projection import project\n"
            "from policylib.shell import kube\n"
            "api = kube.Api(kube.api_client(None, sys.argv[1]))\n"
            "start, cpu = time.monotonic(), time.process_time()\n"
            "held = kube.snapshot(api, resources=(kube.DEPLOYMENTS, kube.HPAS), project=project, limit=int(sys.argv[2]))\n"
            "wall, cpu = time.monotonic() - start, time.process_time() - cpu\n"
            "peak = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
            "print(json.dumps({'wall': wall, 'cpu': cpu, 'peak': int(peak) * 1024, 'objects': len(held)}))\n")
    out = subprocess.run([sys.executable, "-c", code, str(kubeconfig), str(limit)], capture_output=True, text=True,
                         cwd=CODE, timeout=1800)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return dict(json.loads(out.stdout.splitlines()[-1]), load=load(), limit=limit)


def measure(n: int, server: str, timeout: float, repos: list[Path], only: tuple[str, ...] = MEASURES,
            repeat: int = 1, page_sizes: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """Every tree of ``repos`` measured on the same cluster (one set of objects created once); the
    commands of :data:`REPEATED` ``repeat`` times each, the trees in turn."""
    global CODE
    with tempfile.TemporaryDirectory(prefix=f"bench-scale-{n}-") as d:
        tmp = Path(d)
        harness = server == "harness"
        source = harness_cluster if harness else recorded
        rows: list[dict[str, Any]] = []
        with source(n, tmp) as kubeconfig:
            if n and n <= PLAN_FILE_MAX and "plan_file" in only:
                snapshot(n, kubeconfig if harness else None, tmp)
            runs: dict[tuple[Path, str], list[dict[str, Any]]] = {}
            commands = {"plan_cluster": (plan_cluster, kubeconfig),
                        "check_cluster": (check_cluster, kubeconfig) if harness else None,
                        "plan_file": (plan_file, n, tmp) if n and n <= PLAN_FILE_MAX else None,
                        "simulate": (simulate, n, tmp, kubeconfig if harness else None) if n else None}
            for repo in repos:
                CODE = repo
                print(f"N={n} tree {repo}", file=sys.stderr, flush=True)
                out: dict[str, Any] = {"n": n, "tree": str(repo), "server": server}
                out["controller"] = attempt("controller", controller, kubeconfig, tmp, timeout) \
                    if "controller" in only else {}
                out["webhook"] = attempt("webhook", webhook_cache, kubeconfig) if "webhook" in only else {}
                out["pages"] = [attempt(f"pages of {limit}", with_server_cpu(pages), kubeconfig, limit)
                                for limit in page_sizes]
                rows.append(out)
            for _ in range(repeat):
                for repo in repos:
                    CODE = repo
                    for what in REPEATED:
                        call = commands.get(what)
                        if what in only and call is not None:
                            before = load()
                            run = attempt(f"{what} ({Path(repo).name})", with_server_cpu(call[0]), *call[1:])
                            runs.setdefault((repo, what), []).append(dict(run, load=before))
            for row, repo in zip(rows, repos, strict=True):
                for what in REPEATED:
                    row[what] = median_run(runs.get((repo, what), []))
        for row, repo in zip(rows, repos, strict=True):
            row["events"] = event_cpu(n) if n and repo == REPO and "events" in only else {}
        return rows


def simulated(s: dict[str, float] | None) -> str:
    return f"{s['wall']:.1f} s / {s['peak'] / MIB:.0f} MiB" if s and "error" not in s else ""


def ok(*figures: dict[str, Any]) -> bool:
    return all(f and "error" not in f for f in figures)


def cell(figure: dict[str, Any], text: str) -> str:
    """``text`` for a figure measured; ``failed`` for one that failed, nothing for one not run."""
    return text if ok(figure) else ("failed" if figure else "")


def command(figure: dict[str, Any]) -> str:
    server = f" ({figure['server_cpu']:.1f} s)" if "server_cpu" in figure else ""
    return f"{figure.get('wall', 0):.1f} s / {figure.get('cpu', 0):.1f} s{server} / {figure.get('peak', 0) / MIB:.0f} MiB"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| Deployments (HPAs) | tree | controller RSS after sync / peak | per Deployment above idle | "
             "sync wall / CPU | per Deployment (CPU) | webhook worker RSS | per HPA cached | "
             "plan --cluster wall / CPU (API server's CPU) / peak | check --cluster wall / CPU (API server's CPU) / peak | "
             "plan -f wall / CPU / peak | "
             "simulate N/10 on 5,000 Nodes wall / peak | load average (1 min) over the commands' runs |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        idle = next(i for i in rows if i["n"] == 0 and i["tree"] == r["tree"])
        n, c, w, p, f = r["n"], r["controller"], r["webhook"], r["plan_cluster"], r["plan_file"]
        k = r.get("check_cluster") or {}
        cells = [f"{n:,} ({n // 4:,})", Path(r["tree"]).name]
        if ok(c, idle["controller"]):
            cells += [f"{c['rss'] / MIB:.0f} / {c['peak'] / MIB:.0f} MiB",
                      f"{(c['rss'] - idle['controller']['rss']) / n / KIB:.1f} KiB" if n else "",
                      f"{c['wall']:.1f} s / {c['cpu']:.1f} s",
                      f"{(c['cpu'] - idle['controller']['cpu']) / n * 1000:.2f} ms" if n else ""]
        else:
            cells += [cell(c, ""), "", "", ""]
        if ok(w, idle["webhook"]):
            cells += [f"{w['rss'] / MIB:.0f} MiB",
                      f"{(w['rss'] - idle['webhook']['rss']) / max(n // 4, 1) / KIB:.2f} KiB" if n else ""]
        else:
            cells += [cell(w, ""), ""]
        loads = [x for fig in (p, k, f, r.get("simulate") or {}) for x in fig.get("loads", [])]
        cells += [cell(p, command(p)), cell(k, command(k)),
                  cell(f, f"{f.get('wall', 0):.1f} s / {f.get('cpu', 0):.1f} s / {f.get('peak', 0) / MIB:.0f} MiB"),
                  simulated(r.get("simulate")),
                  f"{min(loads):.1f} to {max(loads):.1f}" if loads else ""]
        lines.append("| " + " | ".join(cells) + " |")
    listed = [(r, g) for r in rows for g in r.get("pages") or [] if ok(g)]
    if listed:
        lines += ["", "| Deployments (HPAs) | tree | page size | listed and projected: wall / CPU (API server's CPU) "
                      "/ peak | load average |", "|---|---|---|---|---|"]
        lines += [f"| {r['n']:,} ({r['n'] // 4:,}) | {Path(r['tree']).name} | {g['limit'] or 'one page'} | "
                  f"{command(g)} | {g['load']:.1f} |" for r, g in listed]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000", help="comma-separated N (an empty cluster is measured first)")
    p.add_argument("--server", choices=("harness", "recorded"), default="harness")
    p.add_argument("--timeout", type=float, default=3600, help="seconds the controller's first sync may take")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--repo", type=Path, action="append",
                   help="a checkout whose controller, webhook and CLI are measured (repeatable: each on the same "
                        "cluster, for a before/after; default this one)")
    p.add_argument("--nodes", type=int, default=5000, help="the harness's fake Nodes (simulate and check read them)")
    p.add_argument("--only", help=f"comma-separated, of {', '.join(MEASURES)} (default: all)")
    p.add_argument("--repeat", type=int, default=1, help=f"runs of each of {', '.join(REPEATED)}: the median is "
                                                         "reported (default 1)")
    p.add_argument("--pages", default="", help="comma-separated page sizes (0: one page): listing the Deployments "
                                               "and HPAs as plan --cluster does, with each")
    args = p.parse_args(argv)
    only = tuple(w for w in (args.only or ",".join(MEASURES)).split(",") if w)
    unknown = sorted(set(only) - set(MEASURES))
    if unknown:
        p.error(f"--only: unknown {', '.join(unknown)} (of {', '.join(MEASURES)})")
    page_sizes = tuple(int(v) for v in args.pages.split(",") if v)
    global NODES
    NODES = args.nodes
    repos = [r.resolve() for r in args.repo or [REPO]]
    rows: list[dict[str, Any]] = []
    for n in [0] + [int(s) for s in args.sizes.split(",") if s]:
        rows += measure(n, args.server, args.timeout, repos, only, max(args.repeat, 1), page_sizes)
        print(json.dumps(rows[-len(repos):]), file=sys.stderr, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
