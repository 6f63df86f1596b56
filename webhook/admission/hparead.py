"""Rule W4's read: the first page of a namespace's HPAs, straight from the API server."""
from __future__ import annotations

import socket
import ssl
import time
import urllib.parse
from typing import Any, Callable, cast

from policylib.shell import kube

from .rawhttp import KeptConnection, KeptConnections, request_bytes

#: The confirming read's (connect, read) timeout: well inside the webhook configuration's
#: ``timeoutSeconds`` (3), so a slow API server costs a cache answer, never a failed admission.
CONFIRM_TIMEOUT = (0.5, 1.0)
#: How long the confirming read reuses the credentials it asked the API client for (a rotated token is
#: picked up within this many seconds; tokens live for minutes to hours).
CREDENTIALS_SECONDS = 1.0
#: The confirming read is one request: the first this many HPAs of the namespace.
CONFIRM_LIMIT = 500


def hpa_page_path(namespace: str) -> str:
    """The path and query of the read: the first page of ``namespace``'s HPAs, the namespace quoted."""
    return f"{kube.HPAS.path(urllib.parse.quote(namespace, safe=''))}?limit={CONFIRM_LIMIT}"


class HpaRead:
    """Rule W4's read, as cheap as it can be: one ``GET`` of the namespace's HPAs (``limit``:
    :data:`CONFIRM_LIMIT`) on a :class:`~.rawhttp.KeptConnection` (one per concurrent read, reused), with the API
    client's TLS settings and current credentials (``Configuration.auth_settings()``, which refreshes a pod's
    rotated token), its answer parsed by httptools and orjson (:func:`policylib.shell.kube.decode`).
    Measured (``bench/bench_hpa_read.py``): a fraction of the client CPU of the same read through urllib3, the
    generated client's transport, or ``http.client``, whose header parsing alone cost more than the rest.
    Through a proxy (a kubeconfig's ``proxy-url``) the read goes through the generated client's own pool
    instead."""

    def __init__(self, api_client: Any):
        self.configuration = cfg = api_client.configuration
        self.pool = api_client.rest_client.pool_manager
        url = urllib.parse.urlsplit(cfg.host)
        self.https = url.scheme == "https"
        self.host, self.port = url.hostname or "localhost", url.port or (443 if self.https else 80)
        self.prefix = url.path.rstrip("/")
        self.proxied = bool(getattr(cfg, "proxy", None))
        self._context: ssl.SSLContext | None = None
        self._headers: dict[str, str] | None = None
        self._headers_until = 0.0
        self.server_hostname = getattr(cfg, "tls_server_name", None) or self.host
        self.host_header = url.netloc.rpartition("@")[2]
        self.connections = KeptConnections(self._connect)

    def headers(self) -> dict[str, str]:
        """The request's headers, the credentials asked of the client at most once a second
        (:data:`CREDENTIALS_SECONDS`: a kubeconfig's refresh hook reloads its settings on every call)."""
        now = time.monotonic()
        if self._headers is None or now >= self._headers_until:
            headers = {"Accept": "application/json"}
            for auth in self.configuration.auth_settings().values():
                if auth.get("in") == "header" and auth.get("value"):
                    headers[auth["key"]] = auth["value"]
            self._headers, self._headers_until = headers, now + CREDENTIALS_SECONDS
        return self._headers

    def context(self) -> ssl.SSLContext:
        """The TLS context, made on first use: in the serving worker, after gevent patched ``ssl`` (a context
        made before would block the whole worker on each read)."""
        if self._context is None:
            cfg = self.configuration
            context = ssl.create_default_context(cafile=cfg.ssl_ca_cert,
                                                 cadata=getattr(cfg, "ca_cert_data", None) or None)
            if cfg.cert_file:
                context.load_cert_chain(cfg.cert_file, cfg.key_file)
            if not cfg.verify_ssl:
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            elif cfg.assert_hostname is False:
                context.check_hostname = False
            self._context = context
        return self._context

    def _connect(self) -> KeptConnection:
        sock = socket.create_connection((self.host, self.port), CONFIRM_TIMEOUT[0])
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.https:
                sock = self.context().wrap_socket(sock, server_hostname=self.server_hostname)
            sock.settimeout(CONFIRM_TIMEOUT[1])
        except BaseException:
            sock.close()
            raise
        return KeptConnection(sock)

    def __call__(self, namespace: str) -> dict[str, Any]:
        """The first page of ``namespace``'s HPAs, a consistent read (no resourceVersion); raises
        :class:`~policylib.shell.kube.ApiError` for an error status, ``OSError`` or
        ``http.client.HTTPException`` for the network."""
        return self.send(namespace)()

    def send(self, namespace: str) -> Callable[[], dict[str, Any]]:
        """Put the read's request on the wire now; returns what waits for its answer (and raises as
        :meth:`__call__` does). The caller works while the API server answers: no thread or greenlet, the
        answer simply waits on the connection (a connection whose answer is never collected is never reused).
        Through a proxy the whole read is made when its answer is asked for."""
        headers = self.headers()
        if self.proxied:
            return lambda: self._proxied(namespace, headers)
        return self.send_path(hpa_page_path(namespace), headers)

    def send_path(self, path: str, headers: dict[str, str] | None = None) -> Callable[[], dict[str, Any]]:
        """:meth:`send` of any ``GET`` of the API (a path and query under the server's URL)."""
        request = request_bytes(self.host_header, f"{self.prefix}{path}", headers or self.headers())
        answer = self.connections.send(request)
        return lambda: self._page(*answer())

    def get_path(self, path: str) -> dict[str, Any]:
        """One ``GET`` of ``path`` (a path and query under the server's URL) with this read's timeouts, waited for;
        raises as :meth:`__call__` does (rule T6: a runtime the watch has not brought)."""
        headers = self.headers()
        if self.proxied:
            return self._proxied_path(path, headers)
        return self.send_path(path, headers)()

    def _proxied(self, namespace: str, headers: dict[str, str]) -> dict[str, Any]:
        return self._proxied_path(hpa_page_path(namespace), headers)

    def _proxied_path(self, path: str, headers: dict[str, str]) -> dict[str, Any]:
        response = self.pool.request("GET", f"{self.configuration.host}{path}",
                                     headers=headers, retries=False, timeout=CONFIRM_TIMEOUT[1])
        return self._page(response.status, response.data)

    @staticmethod
    def _page(status: int, raw: bytes) -> dict[str, Any]:
        data = kube.decode(raw)
        if not 200 <= status < 300:
            raise kube.error_for(status, data)
        return cast("dict[str, Any]", data)
