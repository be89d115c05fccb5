# syntax=docker/dockerfile:1
# Agent reliability monitor: one image for every role (`monitor worker`, `monitor migrate`, ...).
#   docker build -t agent-monitor .
#   docker run --rm agent-monitor monitor --help
# docker-compose.yml in this directory wires it to Kafka, Postgres and Grafana.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# Unprivileged runtime user. It owns only the state directory (faust's local data dir lives
# under MONITOR_STATE_DIR); the code and /app stay read-only to it.
RUN groupadd --system --gid 10001 monitor \
 && useradd --system --uid 10001 --gid monitor --home-dir /var/lib/monitor --create-home \
    --shell /usr/sbin/nologin monitor \
 && mkdir -p /var/lib/monitor/state \
 && chown -R monitor:monitor /var/lib/monitor

# Install the package (non-editable) from pyproject.toml; the build tree is thrown away.
COPY pyproject.toml README.md /tmp/src/
COPY monitor /tmp/src/monitor
RUN pip install /tmp/src && rm -rf /tmp/src

# Runtime files read from the working directory: Alembic migrations (`monitor migrate` falls
# back to ./migrations when the package is installed), dashboards, JSON Schema.
WORKDIR /app
COPY alembic.ini ./
COPY migrations ./migrations
COPY dashboards ./dashboards
COPY docs ./docs

# Inside a container the HTTP server must listen on all interfaces to be reachable.
ENV MONITOR_WEB_HOST=0.0.0.0 \
    MONITOR_WEB_PORT=6066 \
    MONITOR_OTLP_GRPC_PORT=4317 \
    MONITOR_GATE_HOST=0.0.0.0 \
    MONITOR_GATE_PORT=6067 \
    MONITOR_STATE_DIR=/var/lib/monitor/state

USER monitor:monitor

EXPOSE 6066 6067 4317

# slim has no curl: probe /health with the standard library.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:6066/health', timeout=4).status == 200 else 1)"]

CMD ["monitor", "worker"]
