"""Reliability of the webhook: fuzzed reviews in-process, then the TLS server under hostile clients,
certificate rotation, SIGTERM and a killed worker. Run by hand; the figures go in docs/figures.md.

    .venv/bin/python bench/bench_reliability.py [--reviews 100000] [--seed 14] [--seconds 10]
        [--only fuzz|attack|rotation|sigterm|kill]

1. **fuzz**: ``--reviews`` AdmissionReviews of every kind policylib handles, under four configs (fail-open
   and fail-closed among them), from a fixed seed: valid objects with fields swapped for values of the
   wrong type, numbers past int32 and int64, nesting past the parser's limit, reviews whose own fields
   are wrong, UPDATEs whose old object is fuzzed too. Counted: HTTP status, exceptions that escaped the
   app, policy failures that were not a PolicyError (the app logs those with a traceback: internal
   errors), patches that do not apply to the object sent,
   and, on every 20th patched review, the same review of the patched object, which must patch nothing.
2. **attack**: ``hey -c 8`` for ``--seconds`` against ``/mutate`` alone, then again while 200 silent
   connections, 50 half TLS handshakes and 50 half request headers are kept up (each reconnects when
   the server closes it) and 500 malformed requests are sent (a separate process); three rounds of
   each, alternating: the median reviews/s of both, their ratio, and ``/healthz`` latency (a new
   connection per probe, as a kubelet probes) during each. The server has CPU 0 to itself, the
   clients the others (as in a cluster), where there are two CPUs or more.
3. **rotation**: 10 certificate renewals during a ``hey`` run: failed requests (target 0).
4. **sigterm**: 64 reviews written on 64 connections, then SIGTERM: answers that are not 200 (target 0).
5. **kill**: SIGKILL of one worker during a ``hey`` run: failed requests, and time until the master's
   replacement worker answers.

Targets: 0 HTTP 500 and 0 non-PolicyError in the fuzz, 0 patches that fail to apply; under attack at
least 80% of the clean run's throughput and /healthz p99 under 0.5 s; 0 failed requests across 10
rotations and across SIGTERM. The exit status is 1 when a target is missed.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import json
import logging
import multiprocessing
import os
import random
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import jsonpatch  # noqa: E402 -- after the path is set

import webhook  # noqa: E402
from bench.bench_webhook import free_port, start_server  # noqa: E402
from tests.test_fuzz_mutations import ODD, bases, paths, swap  # noqa: E402

SAMPLES = REPO / "webhook" / "samples"
#: Values that are the right JSON type but out of every field's range, or deep.
EXTREME = [2**31, -2**31 - 1, 2**63, 10**20, "99999999999999999999", "9000000000", 1e308, float("nan")]
CONFIGS = [
    None,
    {"webhook": {"failureMode": "closed"}, "hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}},
    {"hostTopologySpread": {"whenUnsatisfiable": "DoNotSchedule"}, "volcano": {"partitionSize": 2},
     "gang": {"method": "podgroup", "scheduler": "scheduler-plugins"}},
    {"webhook": {"failureMode": "closed"}, "gang": {"method": "koordinator", "scheduler": "koordinator",
                                                     "groupByRole": True}},
]


# --- 1. fuzz ---------------------------------------------------------------------------------------

def objects() -> list[dict]:
    """Valid objects of every kind: the webhook's samples and the fuzz test's bases."""
    sampled = [json.loads(p.read_text())["request"]["object"] for p in sorted(SAMPLES.glob("*-create.json"))]
    return sampled + bases()


def nested(depth: int) -> str:
    """A marker :func:`encode` replaces by ``depth`` nested lists (too deep for Python's encoder)."""
    return f"\u0000deep{depth}"


def encode(body: dict) -> bytes:
    text = json.dumps(body, allow_nan=True)
    for depth in (50, 300, 1200):
        text = text.replace(f'"\\u0000deep{depth}"', "[" * depth + "1" + "]" * depth)
    return text.encode()


def fuzzed_object(rng: random.Random, originals: list[dict], base: dict | None = None) -> dict:
    """One of ``originals`` (or ``base``) with one to three fields swapped for odd or extreme values."""
    obj = copy.deepcopy(base if base is not None else rng.choice(originals))
    for _ in range(rng.randint(1, 3)):
        choices = [p for p in paths(obj) if p]
        if not choices:
            break
        roll = rng.random()
        value = (rng.choice(EXTREME) if roll < 0.25 else nested(rng.choice((50, 300, 1200))) if roll < 0.3
                 else copy.deepcopy(rng.choice(ODD)))
        swap(obj, rng.choice(choices), value)
    if rng.random() < 0.2:   # an annotation policylib reads, with a value past its field's range
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            notes = meta.setdefault("annotations", {})
            if isinstance(notes, dict):
                notes[rng.choice(["policylib.io/autoscaling-min-replicas", "policylib.io/partition-size",
                                  "policylib.io/spread-effective-replicas"])] = str(rng.choice(EXTREME))
    return obj


def fuzzed_review(rng: random.Random, originals: list[dict], i: int) -> tuple[bytes, bool, bool]:
    """A review's body, whether it is a well-formed review of an object that may be patched, and whether its old
    object is a fuzzed one (an UPDATE's old object: the stored object as it was, fuzzed like the object itself,
    or another kind's)."""
    base = rng.choice(originals)
    obj = fuzzed_object(rng, originals, base)
    operation = rng.choice(["CREATE", "CREATE", "UPDATE", "DELETE", "CONNECT"])
    old, old_fuzzed = None, False
    if operation == "UPDATE":
        roll = rng.random()
        old_fuzzed = roll < 0.5
        old = fuzzed_object(rng, originals, base) if old_fuzzed else copy.deepcopy(base if roll < 0.8 else
                                                                                 rng.choice(originals))
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    request = {"uid": f"fuzz-{i}", "kind": {"group": group, "version": version, "kind": str(obj.get("kind", ""))},
               "operation": operation, "namespace": "fuzz", "name": "x", "object": obj, "oldObject": old,
               "dryRun": False}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    roll = rng.random()
    if roll < 0.05:   # the review's own fields of the wrong type
        swap(review, rng.choice([p for p in paths(review) if p and len(p) <= 2]), copy.deepcopy(rng.choice(ODD)))
        return encode(review), False, False
    if roll < 0.07:
        return encode(review)[: rng.randint(0, 200)], False, False   # cut short
    if roll < 0.08:
        return b"[" * 5000 + b"]" * 5000, False, False
    return encode(review), operation in ("CREATE", "UPDATE"), old_fuzzed


class Escaped(logging.Handler):
    """Counts the app's "policy raised" records: a policy failure that was not a PolicylibError."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.count = 0
        self.first: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        self.first = self.first or record.getMessage()


def fuzz(reviews: int, seed: int) -> dict:
    rng = random.Random(seed)
    originals = objects()
    escaped = Escaped()
    for name in ("webhook.admission.mutate", "webhook"):
        logging.getLogger(name).addHandler(escaped)
        logging.getLogger(name).propagate = False
    clients = [webhook.create_app(c, review_log=lambda line: None).test_client() for c in CONFIGS]
    statuses: Counter = Counter()
    outcomes: Counter = Counter()
    raised = not_applied = idempotence_checked = not_idempotent = old_fuzzed = 0
    first_problem: str | None = None
    start = time.perf_counter()
    for i in range(reviews):
        data, patchable, fuzzed_old = fuzzed_review(rng, originals, i)
        old_fuzzed += fuzzed_old
        client = rng.choice(clients)
        try:
            resp = client.post("/mutate", data=data, content_type="application/json")
        except Exception as e:  # noqa: BLE001 -- counted: nothing may escape the app
            raised += 1
            first_problem = first_problem or f"review {i}: {type(e).__name__}: {e}"
            continue
        statuses[resp.status_code] += 1
        if resp.status_code != 200 or not patchable:
            continue
        answer = resp.get_json()["response"]
        outcomes["allowed" if answer["allowed"] else "denied"] += 1
        if "patch" not in answer:
            continue
        outcomes["patched"] += 1
        body = json.loads(data)   # as the webhook read it (a value nested too deep is never patched)
        obj = body["request"]["object"]
        try:
            patched = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(answer["patch"])))
        except Exception as e:  # noqa: BLE001 -- counted
            not_applied += 1
            first_problem = first_problem or f"review {i}: patch does not apply: {e}"
            continue
        if i % 20 == 0:
            idempotence_checked += 1
            again = copy.deepcopy(body)
            again["request"]["object"] = patched   # the same operation (and old object) again
            second = client.post("/mutate", data=json.dumps(again), content_type="application/json").get_json()
            if "patch" in second["response"]:
                not_idempotent += 1
                first_problem = first_problem or f"review {i}: a second review of the patched object patches again"
    seconds = time.perf_counter() - start
    for name in ("webhook.admission.mutate", "webhook"):
        logging.getLogger(name).removeHandler(escaped)
        logging.getLogger(name).propagate = True
    return {"reviews": reviews, "seed": seed, "seconds": round(seconds, 1), "statuses": dict(sorted(statuses.items())),
            "answers": dict(outcomes), "old_objects_fuzzed": old_fuzzed, "exceptions_escaped": raised,
            "non_policy_errors": escaped.count,
            "first_non_policy_error": escaped.first, "patches_not_applying": not_applied,
            "idempotence_checked": idempotence_checked, "not_idempotent": not_idempotent,
            "first_problem": first_problem}


# --- 2-5. the TLS server --------------------------------------------------------------------------

class Hostile:
    """The attackers, in a child process (their CPU and GIL apart from the probe's): each kind keeps its
    number of connections up, reconnecting when the server closes one; ``held`` counts connections made."""

    def __init__(self, port: int, silent: int = 200, half_handshakes: int = 50, half_headers: int = 50,
                 malformed: int = 500):
        context = multiprocessing.get_context("spawn")
        self.held = context.Value("i", 0)
        self.stopping = context.Event()
        self.result = context.Queue()
        self.proc = context.Process(target=attackers, daemon=True, args=(
            port, (silent, half_handshakes, half_headers, malformed), self.held, self.stopping, self.result))

    def start(self) -> "Hostile":
        self.proc.start()
        return self

    def stop(self) -> dict:
        self.stopping.set()
        counts = self.result.get(timeout=60)
        self.proc.join(30)
        return counts


def attackers(port: int, plan: tuple, held, stopping, result) -> None:
    """In the child process: run the attackers until ``stopping`` is set; put their counts on ``result``."""
    counts: Counter = Counter()

    async def main() -> None:
        silent, half_handshakes, half_headers, malformed = plan
        done = asyncio.Event()
        context = ssl._create_unverified_context()
        tasks = [asyncio.create_task(hold(b"", None, done)) for _ in range(silent)]
        tasks += [asyncio.create_task(hold(b"\x16\x03\x01", None, done)) for _ in range(half_handshakes)]
        tasks += [asyncio.create_task(hold(b"POST /mutate HTTP/1.1\r\nHost: x\r\n", context, done))
                  for _ in range(half_headers)]
        tasks += [asyncio.create_task(send_malformed(context, malformed // 5, done)) for _ in range(5)]
        while not stopping.is_set():
            await asyncio.sleep(0.1)
        done.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def hold(first: bytes, context: ssl.SSLContext | None, done: asyncio.Event) -> None:
        """Connect, send ``first`` (over TLS when ``context``), wait until the server closes; again."""
        while not done.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
                writer.write(first)
                await writer.drain()
                with held.get_lock():
                    held.value += 1
                await reader.read()   # until the server closes it
                writer.close()
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
                counts["refused_or_reset"] += 1
                await asyncio.sleep(0.05)

    async def send_malformed(context: ssl.SSLContext, count: int, done: asyncio.Event) -> None:
        close = b"Host: x\r\nConnection: close\r\n"
        bodies = [b"POST /mutate HTTP/1.1\r\n" + close + b"Content-Length: 5\r\n\r\n{bad}",
                  b"GARBAGE\r\n\r\n", b"POST /mutate HTTP/1.1\r\n" + close + b"Content-Length: -1\r\n\r\n",
                  b"POST /mutate HTTP/1.1\r\n" + close + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
                  b"POST /mutate HTTP/1.1\r\n" + close + b"Content-Length: 2\r\n\r\n[]"]
        for i in range(count):
            if done.is_set():
                return
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
                writer.write(bodies[i % len(bodies)])
                await writer.drain()
                await asyncio.wait_for(reader.read(), 10)
                writer.close()
                counts["malformed_sent"] += 1
            except (OSError, ssl.SSLError, asyncio.TimeoutError):
                counts["malformed_failed"] += 1
            await asyncio.sleep(0.01)

    asyncio.run(main())
    result.put({"held": held.value, **counts})


class Probe:
    """GET /healthz on a new TLS connection every 100 ms, in a thread; latencies in seconds."""

    def __init__(self, port: int):
        self.port = port
        self.latencies: list[float] = []
        self.failures = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Probe":
        self.thread.start()
        return self

    def _run(self) -> None:
        import http.client
        context = ssl._create_unverified_context()
        while not self.done.wait(0.1):
            start = time.perf_counter()
            try:
                conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=10)
                conn.request("GET", "/healthz")
                ok = conn.getresponse().status == 200
                conn.close()
            except OSError:
                ok = False
            if ok:
                self.latencies.append(time.perf_counter() - start)
            else:
                self.failures += 1

    def stop(self) -> dict:
        self.done.set()
        self.thread.join(15)
        lat = sorted(self.latencies)
        if not lat:
            return {"probes": 0, "failures": self.failures}
        return {"probes": len(lat), "failures": self.failures, "p50_ms": round(statistics.median(lat) * 1000, 1),
                "p99_ms": round(lat[max(0, int(len(lat) * 0.99) - 1)] * 1000, 1)}


def hey_for(url: str, seconds: float, concurrency: int, body: Path) -> dict:
    """``hey -z``: as many reviews as fit in ``seconds``."""
    import re
    args = ["hey", "-z", f"{seconds}s", "-c", str(concurrency), "-t", "20", "-m", "POST", "-T", "application/json",
            "-D", str(body), url]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    statuses = {int(c): int(n) for c, n in re.findall(r"^\s+\[(\d+)\]\s+(\d+) responses", out, re.MULTILINE)}
    errors = sum(int(n) for n in re.findall(r"^\s+\[(\d+)\]\s+\S.*$", out.split("Error distribution:")[1],
                                           re.MULTILINE)) if "Error distribution:" in out else 0
    lat = {int(p): float(s) for p, s in re.findall(r"^\s+(\d+)% in ([\d.]+) secs", out, re.MULTILINE)}
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), "statuses": statuses,
            "errors": errors, "failed": errors + sum(n for c, n in statuses.items() if c != 200),
            "p99_ms": round(lat.get(99, 0) * 1000, 1)}


def workers_of(proc: subprocess.Popen) -> list[int]:
    return [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]


def attack(tmp: Path, seconds: float, workers: int, body: Path, rounds: int = 3) -> dict:
    """``rounds`` clean runs and ``rounds`` attacked runs, alternating; medians and their ratio.

    With two CPUs or more the server runs on CPU 0 and everything else (hey, the attackers, the
    probe) on the others, as in a cluster, where clients do not share the webhook's CPU; else all
    share them and the attackers' own work is charged to the server too."""
    port = free_port()
    everything = os.sched_getaffinity(0)
    server_cpus = {min(everything)} if len(everything) >= 2 else None
    proc = start_server(tmp / "attack-certs", port, workers, 4, cpus=server_cpus)
    if server_cpus:
        os.sched_setaffinity(0, everything - server_cpus)
    url = f"https://127.0.0.1:{port}/mutate"
    runs: dict[str, list] = {"clean": [], "attacked": []}
    try:
        hey_for(url, 2, 8, body)   # warm up
        for _ in range(rounds):
            probe = Probe(port).start()
            clean = hey_for(url, seconds, 8, body)
            clean["healthz"] = probe.stop()
            runs["clean"].append(clean)
            hostile = Hostile(port).start()
            deadline = time.monotonic() + 60
            while hostile.held.value < 300 and time.monotonic() < deadline:
                time.sleep(0.1)   # until the attackers' connections are up
            probe = Probe(port).start()
            attacked = hey_for(url, seconds, 8, body)
            attacked["healthz"] = probe.stop()
            attacked["attackers"] = hostile.stop()
            runs["attacked"].append(attacked)
    finally:
        os.sched_setaffinity(0, everything)
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)

    def summary(results: list[dict]) -> dict:
        return {"rps_runs": [round(r["rps"]) for r in results],
                "rps_median": round(statistics.median(r["rps"] for r in results)),
                "failed": sum(r["failed"] for r in results),
                "healthz_p99_ms_runs": [r["healthz"].get("p99_ms") for r in results],
                "healthz_failures": sum(r["healthz"]["failures"] for r in results)}

    clean, attacked = summary(runs["clean"]), summary(runs["attacked"])
    attacked["attackers_last_round"] = runs["attacked"][-1]["attackers"]
    return {"server_cpus": sorted(server_cpus) if server_cpus else "shared", "clean": clean, "attacked": attacked,
            "ratio": round(attacked["rps_median"] / clean["rps_median"], 2),
            "healthz_p99_ms_attacked_max": max(p or 0 for p in attacked["healthz_p99_ms_runs"])}


def renew(cert_dir: Path) -> None:
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(cert_dir), "--local", "--renew"],
                   cwd=REPO, check=True, capture_output=True)


def rotation(tmp: Path, workers: int, body: Path, renewals: int = 10) -> dict:
    port = free_port()
    certs = tmp / "rotation-certs"
    proc = start_server(certs, port, workers, 4)
    result: dict = {}
    try:
        loader = threading.Thread(target=lambda: result.update(hey_for(f"https://127.0.0.1:{port}/mutate",
                                                                       renewals * 1.5 + 3, 8, body)))
        loader.start()
        time.sleep(1.5)
        for _ in range(renewals):
            renew(certs)
            time.sleep(1.5)   # the pace of renewals under load, not synchronisation
        loader.join(120)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    return {"renewals": renewals, **result}


def sigterm(tmp: Path, workers: int, body: Path, connections: int = 64) -> dict:
    import http.client
    port = free_port()
    proc = start_server(tmp / "sigterm-certs", port, workers, 4)
    context = ssl._create_unverified_context()
    data = body.read_bytes()
    conns = []
    for _ in range(connections):
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        conn.connect()
        conns.append(conn)
    for conn in conns:
        conn.request("POST", "/mutate", body=data, headers={"Content-Type": "application/json"})
    proc.send_signal(signal.SIGTERM)
    statuses: Counter = Counter()
    for conn in conns:
        try:
            response = conn.getresponse()
            response.read()
            statuses[response.status] += 1
        except OSError as e:
            statuses[type(e).__name__] += 1
    code = proc.wait(60)
    return {"sent_before_sigterm": connections, "answers": dict(statuses),
            "failed": connections - statuses.get(200, 0), "exit": code}


def kill_worker(tmp: Path, workers: int, body: Path) -> dict:
    import http.client
    port = free_port()
    proc = start_server(tmp / "kill-certs", port, workers, 4)
    result: dict = {}
    try:
        loader = threading.Thread(target=lambda: result.update(hey_for(f"https://127.0.0.1:{port}/mutate", 8, 8,
                                                                       body)))
        loader.start()
        time.sleep(3)
        victim = workers_of(proc)[0]
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        context = ssl._create_unverified_context()
        replaced = None
        while time.monotonic() - killed < 60:
            pids = workers_of(proc)
            if victim not in pids and len(pids) == workers:
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    replaced = time.monotonic() - killed
                    break
            time.sleep(0.05)
        loader.join(60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    return {"replacement_ready_s": None if replaced is None else round(replaced, 2), **result}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", choices=["fuzz", "attack", "rotation", "sigterm", "kill"])
    args = parser.parse_args()
    report: dict = {}
    missed: list[str] = []
    if args.only in (None, "fuzz"):
        report["fuzz"] = f = fuzz(args.reviews, args.seed)
        print(json.dumps({"fuzz": f}, indent=1), flush=True)
        if f["statuses"].get(500) or f["exceptions_escaped"] or f["non_policy_errors"] or f["patches_not_applying"]:
            missed.append("fuzz")
    if args.only != "fuzz":
        if not shutil.which("hey"):
            raise SystemExit("the server sections need hey (Debian package hey), a Go client like the API server")
        with tempfile.TemporaryDirectory() as directory:
            tmp = Path(directory)
            body = tmp / "review.json"
            body.write_text((SAMPLES / "deployment-create.json").read_text())
            sections = {"attack": lambda: attack(tmp, args.seconds, args.workers, body),
                        "rotation": lambda: rotation(tmp, args.workers, body),
                        "sigterm": lambda: sigterm(tmp, args.workers, body),
                        "kill": lambda: kill_worker(tmp, args.workers, body)}
            for name, run in sections.items():
                if args.only in (None, name):
                    report[name] = run()
                    print(json.dumps({name: report[name]}, indent=1), flush=True)
        if "attack" in report and (report["attack"]["ratio"] < 0.8
                                   or report["attack"]["healthz_p99_ms_attacked_max"] >= 500):
            missed.append("attack")
        if "rotation" in report and report["rotation"]["failed"]:
            missed.append("rotation")
        if "sigterm" in report and report["sigterm"]["failed"]:
            missed.append("sigterm")
    print("targets missed: " + (", ".join(missed) if missed else "none"))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
