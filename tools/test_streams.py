"""``make test``: the whole suite as two pytest processes side by side, or one pytest with the arguments given.

The end-to-end files spend most of their time waiting on a control plane (the scheduler's and controllers'
loops, a kubelet starting a pod, a Lease expiring): a whole serial run kept the two cores about 40% busy. So
the suite runs as two streams at once, each its own pytest process with its own control planes:

- ``node``: the files that start a real node (``tests/e2e/test_real_node*.py``), one after another, then the
  unit tests. A real node changes what is shared by the whole machine (kernel settings it restores on stop,
  ``/run/netns``, ``/var/lib/cni``, ``/var/log/pods``), and those files check that nothing is left there, so
  only this stream runs them, never two at a time;
- ``cluster``: every other end-to-end file (fake nodes only).

Each stream's lines are printed as they come, prefixed with its name, and kept whole in
``build/test-logs/STREAM.log``; the exit status is the first failing stream's (0 when both pass), and a failing
stream's short test summary is printed again at the end. SIGINT or SIGTERM stops both streams (pytest's own
interrupt handling, so the harnesses stop cleanly), even when this process was started with SIGINT ignored.

Given any argument (``make test PYTEST_ARGS=...``), it runs ``pytest ARGS`` alone, as a single process.

    python tools/test_streams.py [PYTEST_ARGS...]
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
LOGS = ROOT / "build" / "test-logs"
#: Seconds a stream has to end after it was told to stop, before it is killed.
STOP_SECONDS = 120


def streams(tests: Path = TESTS) -> dict[str, list[str]]:
    """The pytest arguments of each stream: every test file of ``tests`` in exactly one of them."""
    e2e = tests / "e2e"
    real_node = sorted(e2e.glob("test_real_node*.py"))
    cluster = sorted(p for p in e2e.glob("test_*.py") if p not in real_node)
    units = sorted(p for p in tests.rglob("test_*.py") if e2e not in p.parents)
    return {"node": relative(real_node + units), "cluster": relative(cluster)}


def relative(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in paths]


def pump(name: str, proc: subprocess.Popen[bytes], log: Path, lock: threading.Lock) -> None:
    """Copy a stream's output to the terminal, each line prefixed with its name, and whole to its log."""
    assert proc.stdout is not None
    with log.open("wb") as out:
        for line in proc.stdout:
            out.write(line)
            out.flush()
            with lock:
                sys.stdout.buffer.write(f"[{name}] ".encode() + line)
                sys.stdout.flush()


def summary(log: Path, tail: int = 40) -> str:
    """The end of a stream's log that says what failed: pytest's short test summary on, else the last lines."""
    lines = log.read_text(errors="replace").splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if "short test summary info" in line]
    return "".join(lines[marks[-1]:] if marks else lines[-tail:])


def run_streams(tests: Path = TESTS, logs: Path = LOGS, python: str = sys.executable) -> int:
    """Both streams at once; the first failing stream's exit status, else 0."""
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    lock = threading.Lock()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    told: set[str] = set()
    pumps = []
    stopping: dict[str, float] = {}

    def tell() -> None:
        """SIGINT, once, to each stream started and still running: pytest's KeyboardInterrupt, so fixtures tear
        down."""
        for name, proc in list(procs.items()):
            if name not in told and proc.poll() is None:
                told.add(name)
                proc.send_signal(signal.SIGINT)

    def stop(signum: int, _frame: object) -> None:
        """Tell each stream once, then let the loop below wait (a wait in here would block on the one the signal
        interrupted)."""
        if not stopping:
            stopping.update(signum=signum, deadline=time.monotonic() + STOP_SECONDS)
        tell()

    # Our handlers before any stream starts: a child inherits an *ignored* SIGINT (a caller started in the
    # background by a shell without job control ignores it), and a Python started so never turns SIGINT into
    # KeyboardInterrupt; a handled one is back to the default in the child, which Python then handles.
    before = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    started = time.monotonic()
    try:
        for name, args in streams(tests).items():
            if stopping:
                break
            if not args:
                continue  # pytest without a path would run the whole of testpaths
            # -p no:cacheprovider on one stream: the two would otherwise write .pytest_cache at the same moment.
            extra = ["-p", "no:cacheprovider"] if name == "node" else []
            # Each pytest in a session of its own: a Ctrl-C at the terminal reaches only this process, which passes
            # one SIGINT on (a second one would cut pytest's teardown short and leave its control planes running).
            procs[name] = subprocess.Popen([python, "-m", "pytest", *extra, *args], cwd=ROOT, env=env,
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            t = threading.Thread(target=pump, args=(name, procs[name], logs / f"{name}.log", lock), daemon=True)
            t.start()
            pumps.append(t)
        if stopping:
            tell()  # a signal while a stream was starting
        while any(proc.poll() is None for proc in procs.values()):
            if stopping and time.monotonic() > stopping["deadline"]:
                for proc in procs.values():
                    if proc.poll() is None:
                        proc.kill()
            time.sleep(0.2)
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    codes = {name: proc.returncode for name, proc in procs.items()}
    for t in pumps:
        t.join()
    elapsed = time.monotonic() - started
    for name, code in codes.items():
        if code != 0:
            # The other stream's lines may have buried this one's failures: repeat them at the very end.
            print(f"---- stream {name}: the end of its log ----")
            print(summary(logs / f"{name}.log"), end="")
    for name, code in codes.items():
        print(f"stream {name}: pytest exited {code} (log: {logs / f'{name}.log'})")
    print(f"both streams: {elapsed:.0f} s")
    if stopping:
        return 128 + int(stopping["signum"])
    return next((code for code in codes.values() if code != 0), 0)


def main(argv: list[str]) -> int:
    if argv:
        return subprocess.call([sys.executable, "-m", "pytest", *argv], cwd=ROOT)
    return run_streams()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
