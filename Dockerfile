# The webhook image: python -m webhook serve as a non-root user on a read-only root filesystem
# (manifests/base/deployment.yaml mounts /tmp as the only writable path).
#
# Reproducible: the base image is a fixed Python release on a fixed Debian release, and pip
# installs exactly the versions in constraints.txt (the ones the tests ran with), the build
# backend included -- never the newest release of everything on the day of the build.
# Pinning the base image by digest (python:3.11.7-slim-bookworm@sha256:...) fixes its
# Debian packages too.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml setup.cfg constraints.txt README.md ./
COPY policylib ./policylib
COPY webhook ./webhook
# The webhook extra: the server, the controller and the Kubernetes client (setup.cfg).
# PIP_BUILD_CONSTRAINT for pip releases that stop applying PIP_CONSTRAINT to the build backend.
RUN PIP_CONSTRAINT=/src/constraints.txt PIP_BUILD_CONSTRAINT=/src/constraints.txt pip install '.[webhook]' \
    && pip check && rm -rf /src

WORKDIR /
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["python", "-m", "webhook"]
CMD ["serve", "--cert-dir", "/etc/policylib/tls"]
