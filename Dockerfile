# syntax=docker/dockerfile:1
# The webhook image: python -m webhook serve as a non-root user on a read-only root filesystem
# (manifests/base/deployment.yaml mounts /tmp as the only writable path). It holds the server's install and nothing
# else (docs/install.md, "What the image holds"): `make image` builds the same image without a registry, from the
# same Debian release, packages and scripts (tests/test_image.py compares them).
#
# Reproducible: Debian 13 (trixie, Debian's current stable) and its python3 (3.13), kept current by Debian's security
# updates; pip installs requirements/image.txt, every distribution at constraints.txt's version and checked against
# its sha256 (--require-hashes), and the project's wheel built by the build backend of requirements/build.txt, hashed
# the same way. Never the newest release of anything on the day of the build.
#
# Where a registry is reachable, pin the base by digest, which fixes its Debian packages too:
#   docker buildx imagetools inspect debian:trixie-slim      (or: crane digest debian:trixie-slim)
#   docker build --build-arg DEBIAN_IMAGE=debian:trixie-slim@sha256:<digest> -t policylib-webhook:VERSION .
# The apt-get install below takes trixie's packages of the day; the digest fixes the rest of the base.
ARG DEBIAN_IMAGE=debian:trixie-slim

# The build stage: Debian's pip runs on the image's own python3, so pip picks the wheels of that Python.
FROM ${DEBIAN_IMAGE} AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-pip \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.cfg README.md LICENSE ./
COPY requirements ./requirements
COPY policylib ./policylib
COPY webhook ./webhook
COPY tools/image_site.py ./tools/
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# The project's wheel, by the hashed build backend (no build isolation: it would fetch the backend unchecked); then
# requirements/image.txt and that wheel (checked against the hash of the file just built) into the image's
# site-packages; then tools/image_site.py, as make image runs it: kubernetes.aio and bin/ out, bytecode compiled.
RUN python3 -m pip install --require-hashes --no-deps --only-binary=:all: --target /tmp/backend -r requirements/build.txt \
    && PYTHONPATH=/tmp/backend python3 -m pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/wheel . \
    && wheel=$(ls /tmp/wheel/policylib-*.whl) \
    && echo "policylib @ file://$wheel --hash=sha256:$(sha256sum "$wheel" | cut -d' ' -f1)" > /tmp/policylib.txt \
    && python3 -m pip install --require-hashes --no-deps --only-binary=:all: --no-compile --no-warn-script-location \
       --target /usr/local/lib/python3.13/dist-packages -r requirements/image.txt -r /tmp/policylib.txt \
    && python3 tools/image_site.py /usr/local/lib/python3.13/dist-packages

# The image: the same base with Debian's python3 and what the wheels link (libstdc++6, for greenlet); then
# tools/image_debian.py removes every package the server never runs, as make image's base does.
FROM ${DEBIAN_IMAGE}
RUN --mount=type=bind,source=tools/image_debian.py,target=/tmp/image_debian.py \
    apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python-is-python3 libstdc++6 \
    && python3 /tmp/image_debian.py \
    && rm -rf /etc/apt /var/lib/apt /var/cache/apt /var/log/*
COPY --from=build /usr/local/lib/python3.13/dist-packages /usr/local/lib/python3.13/dist-packages

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["python", "-m", "webhook"]
CMD ["serve", "--cert-dir", "/etc/policylib/tls"]
