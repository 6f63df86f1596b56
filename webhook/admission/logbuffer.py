"""Review log lines written in batches."""
from __future__ import annotations

import atexit
import sys
import threading
from typing import IO


class LineBuffer:
    """Review log lines gathered in memory and written together every ``interval`` seconds.

    One write per batch instead of a locked, flushed write per review (about
    50 us each under load). A daemon thread flushes; ``close`` (at exit) flushes
    what is left, so a drained worker loses no line.
    """

    def __init__(self, stream: IO[str] | None = None, interval: float = 0.2):
        self.stream = stream or sys.stdout
        self.interval = interval
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._flush_periodically, name="review-log", daemon=True).start()
        atexit.register(self.close)

    def write(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def flush(self) -> None:
        with self._lock:
            lines, self._lines = self._lines, []
        if lines:
            try:
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass  # stdout closed: nothing better to do with a log line

    def _flush_periodically(self) -> None:
        while not self._closed.wait(self.interval):
            self.flush()

    def close(self) -> None:
        self._closed.set()
        self.flush()
