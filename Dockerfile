# The operator image the Helm chart runs (charts/pdscaler: image.repository/tag).
# `make images REGISTRY=<your-registry> [PUSH=1]` builds it and the router image
# (deploy/router/build-images.sh), or by hand:
#   docker build -t <your-registry>/pdscaler:0.1.0 .
# or multi-arch with an SBOM (docs/install.md, "Building the image"):
#   docker buildx build --platform linux/amd64,linux/arm64 --sbom=true \
#     --provenance=mode=max -t <your-registry>/pdscaler:0.1.0 --push .
# It installs pdscaler WITHOUT the pdscaler[sim] extra (numpy, matplotlib: only
# `pdscaler simulate` needs them; `pdscaler run` never imports them) and without the
# lab (operator/pdlab, the `pdlab` command: tests and the demo only): only
# operator/pdscaler is copied, and the lab's console script and package data are
# dropped from the copy of pyproject.toml the wheel is built from
# (tests/unit/test_operator_image.py replays both steps).
# (Not built on the project's CI machines: they have no container engine.)
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/pdscaler ./operator/pdscaler
RUN sed -i -e '/^pdlab = /d' -e '/^"pdlab\.cluster" = /d' pyproject.toml \
 && pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
# pdscaler_build_info's commit label (telemetry.build_info): build with
# --build-arg PDSCALER_COMMIT=$(git rev-parse --short=12 HEAD); without it "unknown"
ARG PDSCALER_COMMIT=unknown
ENV PDSCALER_COMMIT=$PDSCALER_COMMIT
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# matches the chart's podSecurityContext (runAsNonRoot, uid/gid 65532, read-only root fs)
USER 65532:65532
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
ENTRYPOINT ["pdscaler"]
CMD ["run", "--all-namespaces"]
