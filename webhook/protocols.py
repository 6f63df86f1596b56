"""The typed seams between the admission server and what it is given (docs/architecture.md, "Seams").

A review reads :class:`policylib.ClusterFacts` (the HPAs of a Deployment, Nodes, PodGroups): the policies'
one interface to the cluster, which the sources in :mod:`webhook.admission.facts` and the controller's store extend.
What the server needs beyond that is declared here, not guessed with ``hasattr``:

- :class:`FactsSource`: facts kept by something the server runs (a watch cache), with its readiness and
  the status ``/readyz`` reports; plain ``ClusterFacts`` (a test's, a library user's) are always ready;
- :class:`ServingTls`: the serving certificate ``/readyz`` and ``/metrics`` report
  (:class:`webhook.admission.certificate.ServingCertificate`);
- :class:`Callers`: what the server knows of who sent a request (:class:`webhook.admission.worker.ClientCertificates`).
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class FactsSource(Protocol):
    """Facts a source keeps up to date (:class:`webhook.admission.hpacache.HpaCache`,
    :class:`webhook.admission.facts.ObjectOnlyFacts`)."""

    @property
    def ready(self) -> bool:
        """Whether the facts are synced: ``/readyz`` answers 503 until they are."""

    def status(self) -> dict[str, Any]:
        """What ``/readyz`` reports about the source (its mode, why, what it has synced)."""


class ServingTls(Protocol):
    """The certificate the server serves with."""

    @property
    def not_after(self) -> float | None:
        """Its notAfter (seconds since the epoch), or None before one is loaded."""

    def status(self) -> dict[str, Any]:
        """What ``/readyz`` reports: ``loaded`` (a certificate is served), and where it came from."""


class Callers(Protocol):
    """Who sends the requests: whether reviews need a client certificate, and whether a request's connection
    presented one that the client CA verified."""

    @property
    def required(self) -> bool:
        """Reviews are answered only for callers with a verified client certificate (``--client-ca``)."""

    def verified(self, environ: dict[str, Any]) -> bool:
        """The request (its WSGI environ) came on a connection whose client certificate the client CA verified."""
