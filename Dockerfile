# spark-bot: `docker build -t spark-bot .` (then `docker compose up`, see compose.yaml).
#
# Two stages from the same base: `build` makes a venv with the bot and exactly the locked
# dependencies (hashes checked), the runtime gets that venv alone (no pip, no compiler, no
# sources), runs as a non-root user and keeps its SQLite store in a volume.
#
# Without a registry (CI, an air-gapped host) the same file builds from a local base image and
# a wheelhouse in the build context; only these two arguments differ:
#   scripts/wheelhouse.sh .wheelhouse      # the locked wheels (hash-checked), pip, setuptools
#   docker build --build-arg BASE=<a local Debian 12 image with python3> \
#                --build-arg WHEELS=.wheelhouse -t spark-bot .
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
# empty: pip (the base image's) fetches from PyPI; a folder of the context (offline): pip (its
# own wheel there) installs from that folder alone, never asking an index
ARG WHEELS=
# the dependencies first, so a change to the sources leaves this layer cached: the entries of
# the lock (pins and hashes) that the run time needs (runtime_requirements.py), hash-checked
COPY requirements.lock pyproject.toml scripts/runtime_requirements.py ${WHEELS} /deps/
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
RUN set -eu; \
    if [ -n "$WHEELS" ]; then \
        wheel=$(ls /deps/pip-*.whl | tail -n 1); \
        printf '#!/bin/sh\nPIP_NO_INDEX=1 PIP_FIND_LINKS=/deps exec python3 %s/pip "$@"\n' "$wheel" > /deps/pip; \
    else \
        printf '#!/bin/sh\nexec python3 -m pip "$@"\n' > /deps/pip; \
    fi; \
    chmod +x /deps/pip; \
    python3 /deps/runtime_requirements.py /deps/requirements.lock /deps/pyproject.toml > /deps/runtime.txt; \
    python3 -m venv --without-pip /opt/spark-bot; \
    /deps/pip --python /opt/spark-bot/bin/python install --quiet --no-cache-dir \
        --require-hashes --requirement /deps/runtime.txt
COPY . /src
RUN /deps/pip wheel --quiet --no-deps --wheel-dir /tmp/app /src \
    && /deps/pip --python /opt/spark-bot/bin/python install --quiet --no-cache-dir --no-deps \
        /tmp/app/spark_bot-*.whl

FROM ${BASE}
RUN useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin spark \
    && install -d -o spark -g spark -m 0750 /var/lib/spark-bot
COPY --from=build /opt/spark-bot /opt/spark-bot
ENV PATH=/opt/spark-bot/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER spark
# the store: `store.path: /var/lib/spark-bot/spark-bot.db` in the config (a relative path is
# the config's folder, read-only here)
WORKDIR /var/lib/spark-bot
VOLUME /var/lib/spark-bot
EXPOSE 3000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-m", "bot.healthcheck"]
ENTRYPOINT ["spark-bot"]
CMD ["run", "--config", "/config/spark-bot.yaml"]
