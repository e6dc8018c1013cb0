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

# Beyond loopback the sidecar needs a credential and TLS (or a TLS proxy in front); see
# compose.yaml. /readyz answers 200 once the store answers.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('RECONCILER_PORT', '8765') + '/readyz', timeout=2)"]

ENTRYPOINT ["reconciler"]
CMD ["serve", "--host", "0.0.0.0"]
