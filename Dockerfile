# The webhook image: python -m webhook serve as a non-root user on a read-only root filesystem
# (manifests/base/deployment.yaml mounts /tmp as the only writable path).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml setup.cfg README.md ./
COPY policylib ./policylib
COPY webhook ./webhook
RUN pip install . && rm -rf /src

WORKDIR /
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["python", "-m", "webhook"]
CMD ["serve", "--cert-dir", "/etc/policylib/tls"]
