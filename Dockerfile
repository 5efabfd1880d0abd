# Wharf's broker image.
#
#   docker build -t wharf .                                  the broker
#   docker build -t wharf --build-arg WHARF_EXTRAS=spark .   plus PySpark and a Java runtime
#   docker run -p 8080:8080 -v wharf-store:/var/lib/wharf \
#       -e WHARF_ADVERTISED_URL=http://<address clients use>:8080 wharf
#
# The broker listens on every interface of the container (WHARF_HOST=0.0.0.0). Routes and message
# ids carry its advertised address, which must be one clients can reach: set WHARF_ADVERTISED_URL
# to the host's address and published port. Without it the broker advertises the container's own
# IP address (and says so at start), which only clients on the same Docker network reach.
# tests/packaging/test_wheel.py runs this file's install line and commands (see docker/install.sh);
# the broker's wheel needs the client's, wharf-client, built from clients/python.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    WHARF_VENV=/opt/wharf
# The C compiler builds the kernel (app/store/_kernel*.pyx); the runtime image needs none of it.
# hadolint ignore=DL3008
RUN command -v gcc >/dev/null || { apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*; }
WORKDIR /src
COPY pyproject.toml setup.py constraints.txt README.md ./
COPY app ./app
COPY spark_jobs ./spark_jobs
COPY clients/python ./clients/python
COPY docker/install.sh ./docker/install.sh
# Empty: the broker alone; "spark": with the Spark extra.
ARG WHARF_EXTRAS=""
# The broker depends on wharf-client (clients/python, the Python client): its wheel is built from
# this tree and installed first, so the broker's install finds it there and asks no index for it.
RUN python -m pip wheel --no-deps --wheel-dir client-wheel ./clients/python \
    && python -m venv "$WHARF_VENV" \
    && "$WHARF_VENV/bin/python" -m pip install --constraint constraints.txt client-wheel/wharf_client-0.1.0-py3-none-any.whl \
    && rm -rf client-wheel \
    && sh docker/install.sh "$WHARF_VENV" "$WHARF_EXTRAS"

FROM python:3.11-slim
ARG WHARF_EXTRAS=""
# PySpark needs a Java runtime; the broker alone does not. Debian's package versions are not pinned:
# the base image's release fixes them, and a point release removes the old ones from the archive.
# hadolint ignore=DL3008
RUN if [ "$WHARF_EXTRAS" = spark ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends default-jre-headless \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && groupadd --system --gid 10001 wharf \
    && useradd --system --uid 10001 --gid wharf --no-create-home --home-dir /var/lib/wharf wharf \
    && mkdir -p /var/lib/wharf \
    && chown wharf:wharf /var/lib/wharf
COPY --from=build /opt/wharf /opt/wharf
ENV PATH=/opt/wharf/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    WHARF_HOST=0.0.0.0 \
    WHARF_PORT=8080 \
    WHARF_STORE_DIR=/var/lib/wharf
# Numeric, so that a runtime can tell it is not root without reading the image's /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/wharf
VOLUME /var/lib/wharf
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 CMD ["wharf", "healthcheck"]
CMD ["wharf", "serve"]
