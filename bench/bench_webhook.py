"""Load over TLS keep-alive against ``/mutate`` and, in the same run, the trivial ``/healthz``.

Starts ``python -m webhook serve`` on a free loopback port (certificates in a
temporary directory; ``--url``/``--ca`` to target a running server instead)
and drives it with ``hey`` (Debian package ``hey``) or, without it, a small
Python client. For concurrency 1, 8 and 32 it reports p50/p99 latency and
throughput of a Deployment review and of the trivial endpoint, their ratio,
and the server's CPU per request; then one run at concurrency 8 at an offered
rate below saturation, where latency is not queueing. Every run checks that
the status counts add up to the requests sent (a stalled worker loses
requests). Targets on a 2-core machine: p99 <= 10 ms at c=8, >= 1,000
reviews/s, /mutate within 1.5x of /healthz throughput.

    .venv/bin/python bench/bench_webhook.py [--workers 2] [--threads 4] [--requests 6000]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
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

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "webhook" / "samples" / "deployment-create.json"
CONCURRENCY = (1, 8, 32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cert_dir: Path, port: int, workers: int, threads: int, cpus: set[int] | None = None) -> subprocess.Popen:
    """The server, its log in ``<cert_dir>.log`` (a file: a pipe nobody reads would stall it); on ``cpus``
    only, when given."""
    log = cert_dir.with_suffix(".log")
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(cert_dir), "--local"], cwd=REPO, check=True,
                   capture_output=True)
    proc = subprocess.Popen([sys.executable, "-m", "webhook", "serve", "--cert-dir", str(cert_dir), "--host",
                             "127.0.0.1", "--port", str(port), "--workers", str(workers), "--threads", str(threads),
                             "--facts", "none", "--log-level", "warning"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=log.open("ab"),
                            env={**os.environ, "PYTHONPATH": str(REPO)},
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"server did not start: {log.read_text()}")


def server_cpu_seconds(proc: subprocess.Popen | None) -> float | None:
    """utime + stime of the server's worker processes, from /proc (None when unknown)."""
    if proc is None:
        return None
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        ticks = 0
        for pid in children:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


# --- load generators: hey, or a Python client ------------------------------------

def run_hey(url: str, concurrency: int, requests: int, body: Path | None, rate: float | None) -> dict:
    args = ["hey", "-n", str(requests), "-c", str(concurrency), "-t", "20"]
    if rate:
        args += ["-q", f"{rate / concurrency:.3f}"]
    if body:
        args += ["-m", "POST", "-T", "application/json", "-D", str(body)]
    out = subprocess.run(args + [url], capture_output=True, text=True, check=True).stdout
    lat = {int(p): float(s) for p, s in re.findall(r"^\s+(\d+)% in ([\d.]+) secs", out, re.MULTILINE)}
    statuses = {int(code): int(n) for code, n in re.findall(r"^\s+\[(\d+)\]\s+(\d+) responses", out, re.MULTILINE)}
    errors = sum(int(n) for n in re.findall(r"^\s+\[(\d+)\]\s+\S.*$", out.split("Error distribution:")[1],
                                           re.MULTILINE)) if "Error distribution:" in out else 0
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), "p50_ms": lat[50] * 1000,
            "p99_ms": lat[99] * 1000, "statuses": statuses, "errors": errors,
            "sent": requests // concurrency * concurrency}  # hey sends n/c per worker


def run_python(url: str, concurrency: int, requests: int, body: Path | None, rate: float | None) -> dict:
    """Keep-alive connections, one per thread; no certificate check (like hey)."""
    host, port, path = re.match(r"https://([^:/]+):(\d+)(/.*)", url).groups()
    context = ssl._create_unverified_context()
    data = body.read_bytes() if body else None
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    errors = [0]
    lock = threading.Lock()
    per_thread = requests // concurrency
    interval = concurrency / rate if rate else 0.0

    def worker():
        conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=20)
        next_at = time.perf_counter()
        for _ in range(per_thread):
            if interval:
                next_at += interval
                time.sleep(max(0.0, next_at - time.perf_counter()))
            start = time.perf_counter()
            try:
                conn.request("POST" if data else "GET", path, body=data, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                with lock:
                    latencies.append(time.perf_counter() - start)
                    statuses[response.status] = statuses.get(response.status, 0) + 1
            except OSError:
                with lock:
                    errors[0] += 1
                conn.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {"rps": len(latencies) / elapsed, "p50_ms": statistics.median(latencies) * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000, "statuses": statuses, "errors": errors[0],
            "sent": per_thread * concurrency}


def measure(load, url: str, concurrency: int, requests: int, body: Path | None, rate: float | None,
            proc: subprocess.Popen | None) -> dict:
    cpu_before = server_cpu_seconds(proc)
    result = load(url, concurrency, requests, body, rate)
    cpu_after = server_cpu_seconds(proc)
    if cpu_before is not None and cpu_after is not None:
        result["server_cpu_us_per_request"] = (cpu_after - cpu_before) / result["sent"] * 1e6
    result["lost"] = result["sent"] - sum(result["statuses"].values())
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="base URL of a running webhook (default: start one)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--requests", type=int, default=6000, help="requests per run (default 6000)")
    parser.add_argument("--rate", type=float, default=800.0,
                        help="offered reviews/s of the below-saturation run at c=8 (default 800)")
    parser.add_argument("--client", choices=["auto", "hey", "python"], default="auto")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY),
                        help="concurrency levels (default 1 8 32)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    use_hey = args.client == "hey" or (args.client == "auto" and shutil.which("hey"))
    load = run_hey if use_hey else run_python
    tmp = Path(tempfile.mkdtemp(prefix="bench-webhook-"))
    proc = None
    base = args.url
    if base is None:
        port = free_port()
        proc = start_server(tmp / "certs", port, args.workers, args.threads)
        base = f"https://127.0.0.1:{port}"
    results: dict = {"client": "hey" if use_hey else "python", "workers": args.workers, "threads": args.threads,
                     "cpus": os.cpu_count(), "runs": []}
    try:
        measure(load, base + "/mutate", 8, 1000, SAMPLE, None, proc)  # warm-up
        print(f"client {results['client']}, server {args.workers} workers x {args.threads} threads, "
              f"{os.cpu_count()} CPUs, {args.requests} requests per run")
        print(f"{'endpoint':9} {'c':>3} {'rate':>6} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'cpu us/req':>10} "
              f"{'lost':>5} {'non-200':>7}")
        plan = [(c, None) for c in args.concurrency] + [(8, args.rate)]
        for concurrency, rate in plan:
            pair = {}
            for name, path, body in (("mutate", "/mutate", SAMPLE), ("healthz", "/healthz", None)):
                r = measure(load, base + path, concurrency, args.requests, body, rate, proc)
                r.update(endpoint=name, concurrency=concurrency, offered_rate=rate)
                results["runs"].append(r)
                pair[name] = r
                non_200 = sum(n for code, n in r["statuses"].items() if code != 200)
                cpu = r.get("server_cpu_us_per_request")
                print(f"{name:9} {concurrency:>3} {rate or '-':>6} {r['rps']:>8.0f} {r['p50_ms']:>7.2f} "
                      f"{r['p99_ms']:>7.2f} {'-' if cpu is None else f'{cpu:.0f}':>10} {r['lost']:>5} {non_200:>7}")
            ratio = pair["mutate"]["rps"] / pair["healthz"]["rps"]
            results["runs"][-2]["throughput_ratio_to_healthz"] = ratio
            print(f"{'':9} {'':>3} {'':>6} /mutate throughput = {ratio:.2f} x /healthz")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    lost = sum(r["lost"] + r["errors"] for r in results["runs"])
    if lost:
        print(f"LOST OR FAILED REQUESTS: {lost}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
