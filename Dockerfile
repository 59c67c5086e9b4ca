# syntax=docker/dockerfile:1
# troupe-scheduler image: `docker build -t ghcr.io/troupe-dev/troupe-scheduler:0.1.0 .`

# --- build: make the wheel and install it (with its dependencies) into a venv ---
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY scheduler/ scheduler/
RUN pip wheel --no-deps --wheel-dir /dist . \
 && python -m venv /opt/troupe \
 && /opt/troupe/bin/pip install /dist/troupe-*.whl \
 && /opt/troupe/bin/python -m compileall -q /opt/troupe/lib

# --- runtime: the venv only, non-root ---
FROM python:3.11-slim
LABEL org.opencontainers.image.title="troupe-scheduler" \
      org.opencontainers.image.description="A gang-aware secondary scheduler for Kubernetes" \
      org.opencontainers.image.source="https://github.com/troupe-dev/troupe" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 65532 troupe \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin troupe
COPY --from=build /opt/troupe /opt/troupe
ENV PATH=/opt/troupe/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 65532:65532
EXPOSE 10251
ENTRYPOINT ["troupe"]
CMD ["run"]
