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
# empty: pip (the base image's) fetches from PyPI; a folder of the context: pip (its wheel
# there) installs from it alone, never asking an index
ARG WHEELS=
COPY . /src
RUN set -eu; \
    if [ -n "$WHEELS" ]; then \
        pip="python3 $(ls /src/$WHEELS/pip-*.whl | tail -n 1)/pip"; \
        from="--no-index --find-links /src/$WHEELS"; \
    else \
        pip="python3 -m pip"; from=""; \
    fi; \
    $pip wheel --quiet --no-deps $from --wheel-dir /tmp/app /src; \
    app=$(ls /tmp/app/spark_bot-*.whl); \
    echo "spark-bot @ file://$app --hash=sha256:$(sha256sum "$app" | cut -d' ' -f1)" > /tmp/app.txt; \
    python3 -m venv --without-pip /opt/spark-bot; \
    # the lock as constraints: its versions and hashes, for the runtime dependencies only
    $pip --python /opt/spark-bot/bin/python install --quiet --no-cache-dir --require-hashes \
        $from --constraint /src/requirements.lock --requirement /tmp/app.txt

FROM ${BASE}
RUN useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin spark \
    && install -d -o spark -g spark -m 0750 /var/lib/spark-bot
COPY --from=build /opt/spark-bot /opt/spark-bot
ENV PATH=/opt/spark-bot/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER spark
# the store's default path (spark-bot.db) is relative: it lands in the volume
WORKDIR /var/lib/spark-bot
VOLUME /var/lib/spark-bot
EXPOSE 3000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-m", "bot.healthcheck"]
ENTRYPOINT ["spark-bot"]
CMD ["run", "--config", "/config/spark-bot.yaml"]
