"""``make test``: the whole suite as pytest jobs run by a few workers side by side, or one pytest with the arguments
given.

The end-to-end files spend most of their time waiting on a control plane (the scheduler's and controllers' loops, a
kubelet starting a pod, a Lease expiring): a whole serial run kept the two cores about 40% busy. So the suite is cut
into jobs, each its own pytest process with its own control planes, and ``WORKERS`` of them run at a time:

- ``real-node``: the files that start a real node (``tests/e2e/test_real_node*.py``), one after another in one
  process. A real node changes what is shared by the whole machine (kernel settings it restores on stop,
  ``/run/netns``, ``/var/lib/cni``, ``/var/log/pods``), and those files check that nothing is left there, so they
  never run two at a time: one job, started first;
- ``units``: every test outside ``tests/e2e``;
- one job per other end-to-end file (fake nodes only; each harness names what it makes after its own pid), named
  after the file (``admission`` for ``test_admission.py``).

The longest jobs start first: their durations in the last complete run (``build/test-logs/durations.json``), or,
before any run, the size of their files. Each job's lines are printed as they come, prefixed with its name, and kept
whole in ``build/test-logs/JOB.log``; a failed job's temporary files (the clusters' directories and logs) stay in
``build/test-tmp/JOB/`` until it runs again (a passing job's are removed). The exit status is the first failing
job's (0 when all pass), and each failing job's short test summary is printed again at the end. SIGINT or SIGTERM
stops every running job (pytest's own interrupt handling, so the harnesses stop cleanly) and starts no other, even
when this process was started with SIGINT ignored.

Given any argument (``make test PYTEST_ARGS=...``), it runs ``pytest ARGS`` alone, as a single process.

    python tools/test_streams.py [PYTEST_ARGS...]
    POLICYLIB_TEST_WORKERS=N python tools/test_streams.py
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
LOGS = ROOT / "build" / "test-logs"
#: Each job's pytest --basetemp is TMP/JOB, removed when the job passes and kept, when it fails, until it runs again
#: (pytest's own numbered directories keep the last three runs only: a failed job's cluster logs would be gone by the
#: end of make test, and a passing run's real nodes leave gigabytes of image layers).
TMP = ROOT / "build" / "test-tmp"
#: Seconds a job has to end after it was told to stop, before it is killed.
STOP_SECONDS = 120
#: Jobs run at a time (docs/figures.md, "A cold make test" measures the choice); POLICYLIB_TEST_WORKERS overrides.
WORKERS = 4
REAL_NODE, UNITS = "real-node", "units"
DURATIONS = "durations.json"


def jobs(tests: Path = TESTS) -> dict[str, list[str]]:
    """The pytest arguments (files) of each job: every test file of ``tests`` in exactly one of them; the real-node
    files all in one, first."""
    e2e = tests / "e2e"
    real_node = sorted(e2e.glob("test_real_node*.py"))
    units = sorted(p for p in tests.rglob("test_*.py") if e2e not in p.parents)
    out = {REAL_NODE: relative(real_node), UNITS: relative(units)}
    for path in sorted(e2e.glob("test_*.py")):
        if path not in real_node:
            out[path.stem.removeprefix("test_")] = relative([path])
    return {name: files for name, files in out.items() if files}


def relative(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in paths]


def order(all_jobs: dict[str, list[str]], logs: Path) -> list[str]:
    """The jobs, longest first: the real-node job (the one that cannot be split) always first, then by the
    durations of the last complete run when it had every job, else by the size of their files."""
    try:
        last = json.loads((logs / DURATIONS).read_text())
    except (OSError, ValueError):
        last = {}
    if not set(all_jobs) <= set(last):
        last = {name: float(sum((ROOT / f).stat().st_size for f in files)) for name, files in all_jobs.items()}
    return sorted(all_jobs, key=lambda name: (name != REAL_NODE, -last[name], name))


def workers() -> int:
    value = os.environ.get("POLICYLIB_TEST_WORKERS", "")
    if not value:
        return WORKERS
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"POLICYLIB_TEST_WORKERS={value!r}: must be a whole number of at least 1")
    return int(value)


def pump(name: str, proc: subprocess.Popen[bytes], log: Path, lock: threading.Lock) -> None:
    """Copy a job's output to the terminal, each line prefixed with its name, and whole to its log."""
    assert proc.stdout is not None
    with log.open("wb") as out:
        for line in proc.stdout:
            out.write(line)
            out.flush()
            with lock:
                sys.stdout.buffer.write(f"[{name}] ".encode() + line)
                sys.stdout.flush()


def summary(log: Path, tail: int = 40) -> str:
    """The end of a job's log that says what failed: pytest's short test summary on, else the last lines."""
    lines = log.read_text(errors="replace").splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if "short test summary info" in line]
    return "".join(lines[marks[-1]:] if marks else lines[-tail:])


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    pump: threading.Thread
    started: float
    told: bool = False
    ended: float | None = None


def run_jobs(tests: Path = TESTS, logs: Path = LOGS, python: str = sys.executable, at_once: int | None = None,
             tmp: Path = TMP) -> int:
    """Every job, ``at_once`` at a time (``workers()``), each with its own ``--basetemp`` under ``tmp``; the first
    failing job's exit status (in start order), else 0."""
    at_once = at_once or workers()
    logs.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)  # pytest makes --basetemp itself, but not its parent
    all_jobs = jobs(tests)
    pending = order(all_jobs, logs)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    lock = threading.Lock()
    running: dict[str, Running] = {}
    stopping: dict[str, float] = {}

    def tell() -> None:
        """SIGINT, once, to each job started and still running: pytest's KeyboardInterrupt, so fixtures tear down."""
        for job in list(running.values()):
            if not job.told and job.proc.poll() is None:
                job.told = True
                job.proc.send_signal(signal.SIGINT)

    def stop(signum: int, _frame: object) -> None:
        """Tell each job once, then let the loop below wait (a wait in here would block on the one the signal
        interrupted)."""
        if not stopping:
            stopping.update(signum=signum, deadline=time.monotonic() + STOP_SECONDS)
        tell()

    def start(name: str) -> None:
        # The cache provider on one job only: several would write .pytest_cache at the same moment.
        extra = [] if name == UNITS else ["-p", "no:cacheprovider"]
        # Each pytest in a session of its own: a Ctrl-C at the terminal reaches only this process, which passes one
        # SIGINT on (a second one would cut pytest's teardown short and leave its control planes running).
        basetemp = ["--basetemp", str(tmp / name)]
        proc = subprocess.Popen([python, "-m", "pytest", *extra, *basetemp, *all_jobs[name]], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        t = threading.Thread(target=pump, args=(name, proc, logs / f"{name}.log", lock), daemon=True)
        t.start()
        running[name] = Running(proc, t, time.monotonic())

    # Our handlers before any job starts: a child inherits an *ignored* SIGINT (a caller started in the background
    # by a shell without job control ignores it), and a Python started so never turns SIGINT into
    # KeyboardInterrupt; a handled one is back to the default in the child, which Python then handles.
    before = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    started = time.monotonic()
    try:
        while True:
            for name, job in running.items():
                if job.ended is None and job.proc.poll() is not None:
                    job.ended = time.monotonic()
                    if job.proc.returncode == 0:
                        shutil.rmtree(tmp / name, ignore_errors=True)
            active = sum(job.ended is None for job in running.values())
            while pending and not stopping and active < at_once:
                start(pending.pop(0))
                active += 1
            if stopping:
                tell()  # a job started while a signal arrived
                if time.monotonic() > stopping["deadline"]:
                    for job in running.values():
                        if job.proc.poll() is None:
                            job.proc.kill()
            if not active and (not pending or stopping):
                break
            time.sleep(0.2)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    for job in running.values():
        job.pump.join()
    elapsed = time.monotonic() - started
    codes = {name: job.proc.returncode for name, job in running.items()}
    for name, code in codes.items():
        if code != 0:
            # Other jobs' lines may have buried this one's failures: repeat them at the very end.
            print(f"---- job {name}: the end of its log ----")
            print(summary(logs / f"{name}.log"), end="")
    for name, job in running.items():
        seconds = (job.ended or time.monotonic()) - job.started
        print(f"job {name}: pytest exited {job.proc.returncode} after {seconds:.0f} s (log: {logs / f'{name}.log'})")
    print(f"{len(running)} jobs, {at_once} at a time: {elapsed:.0f} s")
    if stopping:
        return 128 + int(stopping["signum"])
    if not pending:
        (logs / DURATIONS).write_text(json.dumps(
            {name: round((job.ended or 0) - job.started, 1) for name, job in running.items()}, indent=1) + "\n")
    return next((code for code in codes.values() if code != 0), 0)


def main(argv: list[str]) -> int:
    if argv:
        return subprocess.call([sys.executable, "-m", "pytest", *argv], cwd=ROOT)
    return run_jobs()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
