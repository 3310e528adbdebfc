# LLM Planner service image: a build stage makes the wheel (the pages' templates and static files
# inside it), a slim runtime stage installs it; no source tree in the image. The steps are
# scripts/image.sh, which tests/test_image.py also runs in clean virtualenvs on the files copied
# here, so what the image does is tested without a container engine.
#
#   docker build -t llm-planner .
#   docker run -p 127.0.0.1:8000:8000 -e PLANNER_API_TOKEN="$(openssl rand -hex 32)" \
#       -v planner-data:/data llm-planner
FROM python:3.11.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md requirements.lock ./
COPY scripts ./scripts
COPY estimator ./estimator
COPY app ./app
COPY validation ./validation
COPY static ./static
COPY templates ./templates
RUN scripts/image.sh wheel

FROM python:3.11.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN useradd --create-home --uid 10001 planner
COPY --from=build /src/scripts/image.sh /usr/local/bin/planner-image
COPY --from=build /src/dist /tmp/dist
COPY --from=build /src/requirements.lock /tmp/dist/requirements.lock
# The dependencies at the locked versions (pip constraints), so a rebuild installs the same.
RUN PIP_CONSTRAINT=/tmp/dist/requirements.lock planner-image install /tmp/dist/llm_planner-*.whl \
    && rm -rf /tmp/dist

# Saved plans live in a SQLite file on the data volume unless DATABASE_URL names a database.
ENV PLANNER_HOST=0.0.0.0 \
    PLANNER_PORT=8000 \
    PLANNER_DATA_DIR=/data
RUN mkdir -p /data && chown planner:planner /data
VOLUME ["/data"]
WORKDIR /data
USER planner
EXPOSE 8000
# Readiness: the service and its plan store answer (503 from /readyz while the store is down).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('PLANNER_PORT', '8000') + '/readyz', timeout=4)"]
# SIGTERM: requests in flight get PLANNER_GRACEFUL_SHUTDOWN_S (default 10) to finish, so stop
# with a longer grace period than that (docker stop -t 30; compose.yaml sets it).
STOPSIGNAL SIGTERM
CMD ["planner-image", "start"]
