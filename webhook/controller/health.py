"""The controller's health server: ``/healthz`` (alive), ``/readyz`` (rule W8) and ``/metrics``."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest


class Health(Protocol):
    """What the health server reads of a controller."""

    @property
    def leading(self) -> bool: ...

    @property
    def synced(self) -> bool: ...

    @property
    def dry_run(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    @property
    def not_leading(self) -> str: ...

    @property
    def registry(self) -> CollectorRegistry: ...

    def sync_progress(self) -> dict[str, Any]: ...


def serve_health(controller: Health, host: str, port: int) -> ThreadingHTTPServer:
    """``/healthz`` (alive), ``/readyz``, ``/metrics``. Rule W8: ``/readyz`` answers 503 until the
    leader's first sync is done (a standby's: until it has listed), with how far it is: objects listed
    per resource, keys planned of those queued."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                code, body, ctype = 200, b"ok", "text/plain"
            elif self.path == "/readyz":
                code = 200 if controller.ready else 503
                state: dict[str, object] = {"leader": controller.leading, "synced": controller.synced,
                                            "dryRun": controller.dry_run, **controller.sync_progress()}
                if not controller.leading and controller.not_leading:
                    state["reason"] = controller.not_leading
                body = json.dumps(state).encode()
                ctype = "application/json"
            elif self.path == "/metrics":
                code, body, ctype = 200, generate_latest(controller.registry), "text/plain; version=0.0.4"
            else:
                code, body, ctype = 404, b"not found", "text/plain"
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="health").start()
    return server
