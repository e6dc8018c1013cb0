# The sidecar as an image: `reconciler` is the entry point, `serve` the default command.
#   docker build -t effect-reconciler .
#   docker run --rm effect-reconciler --version
# The fleet setup (PostgreSQL, `reconciler migrate` once, then replicas) is compose.yaml;
# docs/operators.md ("Containers") says what each variable is for. Not built in CI.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY reconciler ./reconciler
COPY probes ./probes
RUN pip install . && rm -rf /src \
    && useradd --system --uid 10001 --home-dir /var/lib/reconciler --create-home reconciler

# Not root; the working directory is where a SQLite store would go (./reconciler.db), for a
# single container without PostgreSQL.
USER reconciler
WORKDIR /var/lib/reconciler
EXPOSE 8765

# Beyond loopback the sidecar needs a credential, TLS (or a TLS proxy in front) and the host
# names clients use (RECONCILER_ALLOWED_HOSTS); see compose.yaml. The health check asks
# /readyz (the store answers and commits a write) with the sidecar's own RECONCILER_TOKEN, on
# loopback (always an allowed host): `reconciler health` exits 0 when ready, 1 saying why.
HEALTHCHECK --interval=10s --timeout=10s --start-period=20s \
    CMD ["reconciler", "health"]

ENTRYPOINT ["reconciler"]
CMD ["serve", "--host", "0.0.0.0"]
