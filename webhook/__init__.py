"""policylib's mutating admission webhook: Flask over TLS, served by gunicorn.

``create_app(config)`` builds the WSGI app (see :mod:`webhook.admission.app`);
``python -m webhook certs | serve | run-local`` are the commands.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask

__all__ = ["create_app"]


def create_app(config: Any = None, **kwargs: Any) -> Flask:
    """Build the webhook's Flask app; see :func:`webhook.admission.app.create_app`.

    Imported on first use: ``webhook serve`` must set ``PROMETHEUS_MULTIPROC_DIR``
    before prometheus_client is imported, and importing this package must not
    import it.
    """
    from .admission.app import create_app as _create_app
    return _create_app(config, **kwargs)
