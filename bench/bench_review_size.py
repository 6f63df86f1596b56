"""Time per review against the object's size: the largest objects the API server accepts, family by family.

For each workload family, objects that spend the API server's 3 MiB request body on one list or map the
policies read (topology spread constraints, containers, init containers, env, volumes, tolerations, node and
pod anti-affinity terms, selectors, Volcano tasks, policies, volumes and dependencies, Kubeflow replica specs,
template labels; ``bench/review_objects.py`` builds them), at ``--fractions`` of that budget; the objects at
each policy's entry budget (rule P7), on CREATE and on the UPDATE that re-applies the manifest; and the two
objects named in the project's target (a Deployment of 20,000 topology spread constraints, a Volcano Job of
3,000 tasks). Each review is timed two ways:

- **app**: ``webhook.create_app``'s Flask app, in-process, through its test client: CPU and wall time per review
  (median of ``--repeat``); a review past ``--deadline`` seconds is stopped and reported as such;
- **server**: ``python -m webhook serve`` as the chart runs it (two workers, TLS), over one keep-alive
  connection: wall time per review and the workers' CPU (from /proc); a review past ``--deadline`` is reported
  as a timeout and the server restarted.

``--repo DIR`` (repeatable) measures that checkout's code with the same objects, side by side (a checkout of
main for a before/after: ``git archive main | tar -x -C /tmp/before``). Targets: every review under 100 ms.

``--load``: two clients send the largest objects in a loop (the whole set, round after round) while a third
sends ordinary reviews (webhook/samples/deployment-create.json) at ``--rate`` per second over keep-alive
connections, first alone (``--seconds``), then beside the two; reported per checkout: the ordinary reviews'
p50, p99 and maximum, alone and loaded, and how many took longer than the webhook's ``timeoutSeconds``
(3 s in manifests/ and the chart: the API server gives up then). Target: 0.

``--memory``: the largest review (an UPDATE of a 3 MiB Deployment over a 3 MiB old one) in the shapes that cost a
worker the most memory per byte, each to a fresh server: the answering worker's peak RSS (VmHWM) before and after
(docs/operations.md, "Sizing", sets the chart's limit from it).

    .venv/bin/python bench/bench_review_size.py [--repo . --repo /tmp/before] [--fractions 0.0625,0.25,1]
        [--only TEXT] [--no-server] [--load [--seconds 30] [--rate 10]] [--memory [--max-request-bytes N]]
        [--json FILE]
"""
from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SAMPLE = REPO / "webhook" / "samples" / "deployment-create.json"
#: The API server's timeoutSeconds for every policylib webhook (manifests/, the chart's webhook.timeoutSeconds).
WEBHOOK_TIMEOUT = 3.0
TARGET_MS = 100.0


# --- the objects ----------------------------------------------------------------------------------

def build_cases(fractions: list[float], only: str | None, out: Path) -> list[dict[str, Any]]:
    """Every case's review body written to ``out``; their descriptions (name, entries, bytes, body file)."""
    sys.path.insert(0, str(REPO))
    import review_objects as ro  # this checkout's generator (a --repo may predate it)
    cases = []
    for fraction in fractions:
        budget = int(ro.LIST_BUDGET * fraction)
        for case in ro.cases(budget) + ro.nested_cases(budget):
            cases.append((f"{case.name} @{fraction:g}", case))
    cases += [(case.name, case) for case in ro.at_budget_cases() + ro.named_cases()]
    described = []
    for i, (name, case) in enumerate(cases):
        if only and only not in name:
            continue
        body = case.body()
        path = out / f"case-{i}.json"
        path.write_bytes(body)
        described.append({"name": name, "family": case.family, "entries": case.entries, "bytes": len(body),
                          "operation": case.operation, "body": str(path)})
    return described


# --- in-process: the Flask app ------------------------------------------------------------------------

class Deadline(BaseException):
    """Raised by SIGALRM in a review past the deadline: a BaseException, so the app's handlers let it through."""


def _alarm(signum: int, frame: Any) -> None:
    raise Deadline()


def outcome_of(status: int, body: bytes) -> str:
    """``patched N ops``, ``unchanged``, ``refused: <message>``, ``not applied: <warning>`` or ``HTTP <status>``."""
    if status != 200:
        return f"HTTP {status}"
    import base64
    response = json.loads(body)["response"]
    if not response["allowed"]:
        return "denied: " + response["status"]["message"][:110]
    warnings = [w for w in response.get("warnings", []) if w.startswith("policylib not applied")]
    if warnings:
        text = warnings[0][len("policylib not applied: "):]
        if ": Too many: " in text:   # the budget's refusal (rule P7): the field and the count
            field, _, rest = text.partition(": Too many: ")
            return f"refused (P7): {field.rsplit(': ', 1)[-1]}: Too many: {rest.split(':')[0]}"
        return "not applied: " + text[:100]
    if "patch" in response:
        return f"patched, {len(json.loads(base64.b64decode(response['patch'])))} ops"
    return "unchanged"


def child_app(cases_file: str, repeat: int, deadline: float) -> None:
    """In a child whose ``webhook`` is the checkout measured (it imports nothing else of this one): each case
    through create_app under the plan's configuration, a JSON line each."""
    import webhook
    plan = json.loads(Path(cases_file).read_text())
    cases = plan["cases"]
    client = webhook.create_app(plan["config"], review_log=lambda line: None).test_client()
    signal.signal(signal.SIGALRM, _alarm)
    print(json.dumps({"code": str(Path(webhook.__file__).resolve().parent.parent)}), flush=True)
    for case in cases:
        body = Path(case["body"]).read_bytes()
        cpu, wall, result = [], [], {"name": case["name"]}
        for _ in range(repeat):
            start_cpu, start = time.process_time(), time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, deadline)
            try:
                response = client.post("/mutate", data=body, content_type="application/json")
            except Deadline:
                result.update(timeout=True, wall_ms=deadline * 1000, cpu_ms=(time.process_time() - start_cpu) * 1000)
                break
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            cpu.append(time.process_time() - start_cpu)
            wall.append(time.perf_counter() - start)
            result["outcome"] = outcome_of(response.status_code, response.data)
        if cpu and not result.get("timeout"):
            result.update(cpu_ms=statistics.median(cpu) * 1000, wall_ms=statistics.median(wall) * 1000)
        print(json.dumps(result), flush=True)


def measure_app(repo: Path, cases_file: Path, repeat: int, deadline: float) -> dict[str, dict[str, Any]]:
    """:func:`child_app` run on ``repo``'s code; its results by case name."""
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child-app", str(cases_file),
                             "--repeat", str(repeat), "--deadline", str(deadline)],
                            cwd=repo, env=env, stdout=subprocess.PIPE, text=True)
    results: dict[str, dict[str, Any]] = {}
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    if Path(first["code"]) != repo:
        proc.kill()
        raise SystemExit(f"the child imported webhook from {first['code']}, not {repo}")
    for line in proc.stdout:
        row = json.loads(line)
        results[row["name"]] = row
        print(f"  app {repo.name}: {row['name']}: {row.get('cpu_ms', 0):.1f} ms CPU"
              + (" (stopped at the deadline)" if row.get("timeout") else ""), file=sys.stderr, flush=True)
    if proc.wait() != 0:
        raise SystemExit(f"the in-process measurement of {repo} failed")
    return results


# --- the real server ------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``python -m webhook serve`` of ``repo``'s code as the chart runs it: two workers, TLS, the config file."""

    def __init__(self, repo: Path, tmp: Path):
        self.repo, self.tmp = repo, tmp
        self.certs = tmp / "certs"
        self.config = tmp / "config.json"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, config: dict[str, Any] | None = None) -> Server:
        sys.path.insert(0, str(HERE))
        from review_objects import CONFIG
        self.config.write_text(json.dumps(config if config is not None else CONFIG))
        env = {**os.environ, "PYTHONPATH": str(self.repo), "PYTHONDONTWRITEBYTECODE": "1"}
        if not self.certs.exists():
            subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(self.certs), "--local"],
                           cwd=self.repo, env=env, check=True, capture_output=True)
        self.port = free_port()
        log = (self.tmp / "server.log").open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "webhook", "serve", "--config", str(self.config),
                                      "--cert-dir", str(self.certs), "--host", "127.0.0.1", "--port", str(self.port),
                                      "--workers", "2", "--graceful-timeout", "20", "--facts", "none",
                                      "--log-level", "warning"],
                                     cwd=self.repo, env=env, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                conn = self.connection(timeout=2)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200 and len(self.workers()) == 2:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"the server of {self.repo} did not start: {(self.tmp / 'server.log').read_text()[-2000:]}")

    def connection(self, timeout: float = 30) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=timeout)

    def workers(self) -> list[int]:
        assert self.proc is not None
        try:
            return [int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()]
        except OSError:
            return []

    def cpu_seconds(self) -> float:
        ticks = 0
        for pid in self.workers():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])
            except OSError:
                pass
        return ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def post(conn: http.client.HTTPSConnection, body: bytes) -> tuple[int, bytes]:
    conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, response.read()


def measure_server(repo: Path, cases: list[dict[str, Any]], repeat: int, deadline: float,
                   tmp: Path) -> dict[str, dict[str, Any]]:
    """Each case sent ``repeat`` times over one keep-alive TLS connection to ``repo``'s server."""
    server = Server(repo, tmp).start()
    results: dict[str, dict[str, Any]] = {}
    conn = server.connection(timeout=deadline)
    try:
        for case in cases:
            body = Path(case["body"]).read_bytes()
            wall, cpu, row = [], [], {"name": case["name"]}
            for _ in range(repeat):
                cpu_before, start = server.cpu_seconds(), time.perf_counter()
                try:
                    status, answer = post(conn, body)
                except (OSError, http.client.HTTPException) as e:
                    row.update(timeout=isinstance(e, TimeoutError), error=f"{type(e).__name__}: {e}"[:100],
                               wall_ms=(time.perf_counter() - start) * 1000)
                    server.stop()   # a worker may still be busy (gunicorn kills it at its own timeout)
                    server.start()
                    conn = server.connection(timeout=deadline)
                    break
                wall.append(time.perf_counter() - start)
                cpu.append(server.cpu_seconds() - cpu_before)
                row["outcome"] = outcome_of(status, answer)
            if wall and "error" not in row:
                row.update(wall_ms=statistics.median(wall) * 1000, cpu_ms=statistics.median(cpu) * 1000)
            results[case["name"]] = row
            print(f"  server {repo.name}: {case['name']}: {row.get('wall_ms', 0):.1f} ms"
                  + (f" ({row['error']})" if "error" in row else ""), file=sys.stderr, flush=True)
    finally:
        conn.close()
        server.stop()
    return results


# --- the two-client run -----------------------------------------------------------------------------------

def heavy_client(port: int, ca: str, bodies: list[str], stop: Any, counts: Any) -> None:
    """In a child process: send ``bodies`` in a loop over one keep-alive connection until ``stop`` is set."""
    context = ssl.create_default_context(cafile=ca)
    data = [Path(b).read_bytes() for b in bodies]
    conn = None
    i = 0
    while not stop.is_set():
        if conn is None:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=60)
        try:
            post(conn, data[i % len(data)])
            with counts.get_lock():
                counts.value += 1
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = None
        i += 1


def ordinary_reviews(server: Server, seconds: float, rate: float, connections: int = 2) -> list[float | None]:
    """Sample reviews at ``rate`` per second for ``seconds`` over ``connections`` keep-alive connections (the API
    server keeps a pool); each answer's latency, None for one that failed or took past the client's 10 s."""
    body = SAMPLE.read_bytes()
    latencies: list[float | None] = []
    lock = threading.Lock()
    interval = connections / rate
    count = int(seconds * rate / connections)

    def client() -> None:
        conn = server.connection(timeout=10)
        next_at = time.perf_counter()
        for _ in range(count):
            next_at += interval
            time.sleep(max(0.0, next_at - time.perf_counter()))
            start = time.perf_counter()
            try:
                status, _ = post(conn, body)
                latency: float | None = time.perf_counter() - start if status == 200 else None
            except (OSError, http.client.HTTPException):
                latency = None
                conn.close()
                conn = server.connection(timeout=10)
            with lock:
                latencies.append(latency)

    threads = [threading.Thread(target=client) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def summary(latencies: list[float | None]) -> dict[str, Any]:
    done = sorted(x for x in latencies if x is not None)
    failed = len(latencies) - len(done)
    late = failed + sum(1 for x in done if x > WEBHOOK_TIMEOUT)
    if not done:
        return {"sent": len(latencies), "failed": failed, "past_timeout": late}
    return {"sent": len(latencies), "failed": failed, "past_timeout": late,
            "p50_ms": statistics.median(done) * 1000, "p99_ms": done[max(0, int(len(done) * 0.99) - 1)] * 1000,
            "max_ms": done[-1] * 1000}


def measure_load(repo: Path, cases: list[dict[str, Any]], seconds: float, rate: float, tmp: Path) -> dict[str, Any]:
    server = Server(repo, tmp).start()
    try:
        alone = summary(ordinary_reviews(server, seconds, rate))
        spawn = multiprocessing.get_context("spawn")
        stop, counts = spawn.Event(), spawn.Value("i", 0)
        bodies = [c["body"] for c in cases]
        heavy = [spawn.Process(target=heavy_client, args=(server.port, str(server.certs / "ca.crt"),
                                                          bodies[k::2] + bodies[:k:2], stop, counts), daemon=True)
                 for k in (0, 1)]
        for p in heavy:
            p.start()
        time.sleep(2)   # both heavy clients sending before the ordinary reviews start
        loaded = summary(ordinary_reviews(server, seconds, rate))
        stop.set()
        for p in heavy:
            p.join(120)
            if p.is_alive():
                p.kill()
        return {"alone": alone, "loaded": loaded, "large_reviews_sent": counts.value}
    finally:
        server.stop()


# --- memory: the largest review ---------------------------------------------------------------------------------

def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def measure_memory(repo: Path, tmp: Path, config: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each shape of :data:`review_objects.MEMORY_SHAPES` sent, as the largest review, to a fresh server of
    ``repo``'s code: the peak RSS (VmHWM) of the worker that answered, before and after, and the pod's RSS."""
    sys.path.insert(0, str(HERE))
    import review_objects as ro
    rows = []
    for shape in ro.MEMORY_SHAPES:
        body = ro.largest_review(shape)
        server = Server(repo, tmp)
        server.start(config)
        try:
            time.sleep(1)
            workers = server.workers()
            before = {pid: status_kib(pid, "VmHWM") for pid in workers}
            start = time.perf_counter()
            try:
                conn = server.connection(timeout=60)
                status, answer = post(conn, body)
                outcome = outcome_of(status, answer)
            except (OSError, http.client.HTTPException) as e:
                outcome = f"failed: {type(e).__name__}: {e}"[:100]
            seconds = time.perf_counter() - start
            after = {pid: status_kib(pid, "VmHWM") for pid in workers if Path(f"/proc/{pid}").exists()}
            grew = max(after, key=lambda pid: after[pid] - before[pid]) if after else None
            assert server.proc is not None
            pod = sum(status_kib(pid, "VmRSS") for pid in [server.proc.pid, *server.workers()])
            rows.append({"shape": shape, "bytes": len(body), "outcome": outcome, "seconds": seconds,
                         "idle_peak_kib": before.get(grew, 0) if grew else None,
                         "peak_kib": after.get(grew) if grew else None, "workers_lost": len(workers) - len(after),
                         "pod_rss_after_kib": pod})
            print(f"  memory {repo.name}: {shape}: {rows[-1]}", file=sys.stderr, flush=True)
        finally:
            server.stop()
    return rows


# --- the report ---------------------------------------------------------------------------------------------

def cell(row: dict[str, Any] | None) -> str:
    """``CPU/wall`` ms of one review, or why there is none."""
    if not row:
        return "-"
    if row.get("timeout"):
        return f">{row['wall_ms'] / 1000:.0f} s"
    if "error" in row:
        return "failed"
    return f"{row['cpu_ms']:.0f}/{row['wall_ms']:.0f}"


def over_target(row: dict[str, Any] | None) -> bool:
    """A review that timed out, failed, or took more than the target in CPU time (the machine's load decides the
    wall time: the table shows both)."""
    return bool(row) and bool(row.get("timeout") or "error" in row or row.get("cpu_ms", 0) > TARGET_MS)


def report(cases: list[dict[str, Any]], repos: list[Path], app: dict[Path, dict[str, Any]],
           server: dict[Path, dict[str, Any]]) -> list[str]:
    """The table, one row per case, a pair of columns (app, server) per checkout; the outcome of the last one."""
    names = [r.name or str(r) for r in repos]
    head = f"{'case':62} {'entries':>7} {'KiB':>5} " + " ".join(f"{n[:9] + ' app':>13} {n[:9] + ' srv':>13}"
                                                                  for n in names) + "  outcome"
    lines = [head, "-" * len(head)]
    over: set[str] = set()
    for case in cases:
        cols = []
        for repo in repos:
            cols.append(f"{cell(app.get(repo, {}).get(case['name'])):>13} "
                        f"{cell(server.get(repo, {}).get(case['name'])):>13}")
        last = app.get(repos[-1], {}).get(case["name"]) or server.get(repos[-1], {}).get(case["name"]) or {}
        lines.append(f"{case['name'][:62]:62} {case['entries']:>7} {case['bytes'] / 1024:>5.0f} " + " ".join(cols)
                     + f"  {last.get('outcome', '')}")
        if any(over_target(results.get(repos[-1], {}).get(case["name"])) for results in (app, server)):
            over.add(case["name"])
    lines.append("ms per review, CPU/wall (median): app in-process through create_app's test client; srv over TLS "
                 "to `webhook serve` (2 workers), the workers' CPU from /proc")
    lines.append(f"over {TARGET_MS:.0f} ms of CPU ({names[-1]}): {len(over)} case(s)"
                 + (": " + "; ".join(sorted(over)) if over else ""))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, action="append", help="a checkout whose code to measure (repeatable)")
    parser.add_argument("--fractions", default="0.0625,0.25,1", help="sizes, as fractions of the 3 MiB budget")
    parser.add_argument("--only", help="only the cases whose name holds this text")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=20.0, help="seconds a review may take before it is stopped")
    parser.add_argument("--no-app", action="store_true")
    parser.add_argument("--no-server", action="store_true")
    parser.add_argument("--load", action="store_true", help="the two-client run instead of the table")
    parser.add_argument("--memory", action="store_true",
                        help="the largest review's peak RSS per worker, shape by shape, instead of the table")
    parser.add_argument("--max-request-bytes", type=int,
                        help="with --memory: the server's webhook.maxRequestBytes (default: the checkout's own)")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=10.0, help="ordinary reviews per second in --load")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child-app", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_app:
        child_app(args.child_app, args.repeat, args.deadline)
        return 0
    repos = [r.resolve() for r in args.repo or [REPO]]
    tmp = Path(tempfile.mkdtemp(prefix="bench-review-size-"))
    for repo in repos:
        (tmp / repo.name).mkdir(exist_ok=True)
    cases = build_cases([float(f) for f in args.fractions.split(",")], args.only, tmp)
    cases_file = tmp / "cases.json"
    import review_objects
    cases_file.write_text(json.dumps({"config": review_objects.CONFIG, "cases": cases}))
    out: dict[str, Any] = {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "cases": cases, "runs": {}}
    if args.memory:
        config = {"webhook": {"maxRequestBytes": args.max_request_bytes}} if args.max_request_bytes else {}
        print(f"{'checkout':12} {'shape':26} {'MiB':>5} {'idle peak':>9} {'peak':>7} {'+MiB':>6} {'pod RSS':>8} "
              f"{'s':>5}  outcome")
        for repo in repos:
            rows = measure_memory(repo, tmp / repo.name, config)
            out["runs"][str(repo)] = rows
            for r in rows:
                idle, peak = (r["idle_peak_kib"] or 0) / 1024, (r["peak_kib"] or 0) / 1024
                print(f"{repo.name[:12]:12} {r['shape']:26} {r['bytes'] / 2**20:>5.2f} {idle:>9.0f} {peak:>7.0f} "
                      f"{peak - idle:>6.0f} {r['pod_rss_after_kib'] / 1024:>8.0f} {r['seconds']:>5.1f}  "
                      f"{r['outcome'][:60]}{' (a worker was lost)' if r['workers_lost'] else ''}")
        print("MiB: the review's size; idle peak and peak: VmHWM of the worker that answered, before and after (MiB); "
              "pod RSS: master and workers after")
    elif args.load:
        for repo in repos:
            result = measure_load(repo, cases, args.seconds, args.rate, tmp / repo.name)
            out["runs"][str(repo)] = result
            for when in ("alone", "loaded"):
                s = result[when]
                print(f"{repo.name}: ordinary reviews {when:6}: {s['sent']} sent at {args.rate:g}/s, "
                      f"p50 {s.get('p50_ms', float('nan')):.1f} ms, p99 {s.get('p99_ms', float('nan')):.1f} ms, "
                      f"max {s.get('max_ms', float('nan')):.1f} ms, past the {WEBHOOK_TIMEOUT:g} s timeout: "
                      f"{s['past_timeout']} (failed {s['failed']})")
            print(f"{repo.name}: large reviews sent by the two clients meanwhile: {result['large_reviews_sent']}")
    else:
        app: dict[Path, dict[str, Any]] = {}
        server: dict[Path, dict[str, Any]] = {}
        for repo in repos:
            if not args.no_app:
                app[repo] = measure_app(repo, cases_file, args.repeat, args.deadline)
            if not args.no_server:
                server[repo] = measure_server(repo, cases, args.repeat, args.deadline, tmp / repo.name)
        out["runs"] = {str(r): {"app": app.get(r), "server": server.get(r)} for r in repos}
        lines = report(cases, repos, app, server)
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
        print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
