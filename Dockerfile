# One image for `gangkeeper serve` and `gangkeeper controller`.
# Build: make image, or docker build -t ghcr.io/gangkeeper/gangkeeper:0.1.0 .   (the context is only what .dockerignore lets through)
# Runtime: distroless Python (Debian 12, Python 3.11), no shell, non-root numeric UID; the manifests
# run it with a read-only root filesystem and /tmp as an emptyDir. No HEALTHCHECK: the webhook and the
# controller serve different probes, which their Deployments declare.
# Base images are pinned by digest; refresh both together, e.g. with
#   docker buildx imagetools inspect python:3.11-slim-bookworm --format '{{.Manifest.Digest}}'

FROM python:3.11-slim-bookworm@sha256:528257d48c1da0dcecc2e725d1ae34498d60c965f1241e39cd6a85a8859bdf84 AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps --target /opt/gangkeeper -r requirements.lock
COPY pyproject.toml README.md ./
COPY webhook ./webhook
RUN pip install --target /opt/gangkeeper --no-deps . \
 && python -m compileall -q /opt/gangkeeper

# checkov:skip=CKV_DOCKER_2:Kubernetes probes (declared per Deployment) check health; one image serves two roles
FROM gcr.io/distroless/python3-debian12:nonroot@sha256:7d1042ce588ab97019fe95c24ffca7bc5a82ccdac572511d5e09bda4435c89c5
COPY --from=build /opt/gangkeeper /opt/gangkeeper
ENV PYTHONPATH=/opt/gangkeeper PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["python3", "-m", "webhook"]
CMD ["serve", "--host=0.0.0.0"]
