# One image for `gangkeeper serve` and `gangkeeper controller`.
# Build: docker build -t gangkeeper:0.1.0 .
# Runtime: distroless Python (Debian 12, Python 3.11), no shell, non-root numeric UID; the manifests
# run it with a read-only root filesystem and /tmp as an emptyDir.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements.lock ./
RUN pip install --target /opt/gangkeeper -r requirements.lock
COPY pyproject.toml README.md ./
COPY webhook ./webhook
RUN pip install --target /opt/gangkeeper --no-deps . \
 && python -m compileall -q /opt/gangkeeper

FROM gcr.io/distroless/python3-debian12:nonroot
COPY --from=build /opt/gangkeeper /opt/gangkeeper
ENV PYTHONPATH=/opt/gangkeeper PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8443 8080
# Kubernetes probes /healthz and /readyz; this is for plain container runtimes.
HEALTHCHECK --interval=30s --timeout=3s CMD ["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 8443), 2)"]
ENTRYPOINT ["python3", "-m", "webhook"]
CMD ["serve", "--host=0.0.0.0"]
