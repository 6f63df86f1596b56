"""The admission server (``python -m webhook serve``): the Flask app that answers AdmissionReviews (:mod:`.app`,
:mod:`.mutate`, :mod:`.review`), the facts it reads (:mod:`.facts`, :mod:`.hpacache`, rule W4's :mod:`.confirm`
over :mod:`.hparead`), its metrics, and gunicorn over TLS (:mod:`.server`, :mod:`.worker`).

Imports nothing at import time: ``webhook serve`` must set ``PROMETHEUS_MULTIPROC_DIR`` (:mod:`.metricsdir`)
before prometheus_client is imported. It never imports :mod:`webhook.controller`.
"""
