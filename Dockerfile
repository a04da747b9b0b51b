# syntax=docker/dockerfile:1.7
# One image for every Clearance process; the command picks it:
#   clearance-watcher | clearance-tracker | clearance-dispatcher | kubesim serve | clearance events|demo
# Multi-stage: uv installs the locked workspace (no dev group, non-editable) into /opt/clearance in
# the build stage; the runtime stage copies only that environment and runs as uid 10001.
# Build: docker build -t ghcr.io/clearance/clearance:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ghcr.io/astral-sh/uv:0.13.9 AS uv

FROM ${PYTHON_IMAGE} AS build
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/clearance
WORKDIR /src
# Third-party dependencies first: this layer only changes when the lock does.
COPY pyproject.toml uv.lock ./
COPY libs/clearance/pyproject.toml libs/clearance/pyproject.toml
COPY libs/kubesim/pyproject.toml libs/kubesim/pyproject.toml
COPY services/watcher/pyproject.toml services/watcher/pyproject.toml
COPY services/tracker/pyproject.toml services/tracker/pyproject.toml
COPY services/dispatcher/pyproject.toml services/dispatcher/pyproject.toml
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --all-packages --no-install-workspace
# Then the workspace members themselves, installed as regular (non-editable) packages.
COPY libs libs
COPY services services
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --all-packages --no-editable

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="clearance" \
      org.opencontainers.image.description="Clearance: AppWrapper requeue cycles gated on confirmed deletion" \
      org.opencontainers.image.source="https://github.com/clearance/clearance"
RUN groupadd --system --gid 10001 clearance \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin clearance
COPY --from=build /opt/clearance /opt/clearance
# The AppWrapper CRD, for `kubesim serve --crd` in docker-compose and for reference.
COPY deploy/crd/appwrapper-crd.yaml /opt/clearance/share/clearance/appwrapper-crd.yaml
ENV PATH=/opt/clearance/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
EXPOSE 8080
# No shell entrypoint: the process is PID 1 and gets SIGTERM directly (graceful drain).
ENTRYPOINT []
CMD ["clearance", "--help"]
