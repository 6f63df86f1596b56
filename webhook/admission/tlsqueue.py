"""Rule W16: every TLS step of a served connection starts with the worker thread's OpenSSL error queue empty."""
from __future__ import annotations

import ctypes
import importlib.util
import os
import ssl
import time
from typing import Callable, TypeVar

import gevent.socket

W = TypeVar("W")


def _openssl_clear_error() -> Callable[[], None] | None:
    """OpenSSL's ``ERR_clear_error``, from the very libcrypto the ``ssl`` module runs on (looked up through the
    ``_ssl`` extension's own dependencies, or the interpreter's where ``_ssl`` is built in), or None where it cannot
    be reached or is not that library (its version differs from ``ssl.OPENSSL_VERSION_NUMBER``)."""
    spec = importlib.util.find_spec("_ssl")
    origin = spec.origin if spec is not None and spec.origin and os.path.isfile(spec.origin) else None
    try:
        library = ctypes.CDLL(origin)
        clear, version = library.ERR_clear_error, library.OpenSSL_version_num
    except (OSError, AttributeError):
        return None
    version.argtypes, version.restype = [], ctypes.c_ulong
    if version() != ssl.OPENSSL_VERSION_NUMBER:
        return None
    clear.argtypes, clear.restype = [], None
    return clear


#: OpenSSL's ``ERR_clear_error`` (None where the server cannot reach it: it then logs so once per worker).
OPENSSL_CLEAR_ERROR = _openssl_clear_error()


def clear_tls_errors() -> None:
    """Rule W16: empty the calling thread's OpenSSL error queue.

    OpenSSL keeps one error queue per thread, and a gevent worker serves every connection on one thread. Since
    OpenSSL 3.2 a TLS write that fails in the socket (the client reset the connection) leaves its system error on that
    queue, and Python's ``ssl`` module raises it (``BrokenPipeError``, ``ConnectionResetError``) without emptying the
    queue. OpenSSL's "would block" on any connection of that thread, until the queue is emptied, then reads as that
    error: a healthy connection whose request body, or handshake, has not all arrived fails with the other one's error.
    OpenSSL asks for an empty queue before each TLS step; :func:`tls_step` empties it before each of ours."""
    if OPENSSL_CLEAR_ERROR is not None:
        OPENSSL_CLEAR_ERROR()


def tls_step(sock: ssl.SSLSocket, step: Callable[[], W], deadline: float) -> W:
    """Rule W16: ``step`` (one TLS handshake, read or write of ``sock``) until it completes, each attempt made
    non-blocking right after :func:`clear_tls_errors` (nothing runs between the two), the greenlet waiting between
    attempts for the socket as OpenSSL asks; ``TimeoutError`` once the monotonic ``deadline`` passes. A step that fails
    empties the queue too, so its error is not left for the next step of another connection, or the worker's other TLS
    clients (the Kubernetes API's)."""
    sock.settimeout(0.0)
    while True:
        clear_tls_errors()
        try:
            return step()
        except ssl.SSLWantReadError:
            wait = gevent.socket.wait_read
        except ssl.SSLWantWriteError:
            wait = gevent.socket.wait_write
        except BaseException:
            clear_tls_errors()
            raise
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the TLS peer was not ready in time")
        wait(sock.fileno(), timeout=remaining)
