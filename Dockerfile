# spark-bot. BASE is a build argument so CI builds from a local Debian 12 image with Python 3.11
# (no registry is reachable there): scripts/docker-context.sh prepares the build context.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
RUN useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin spark
WORKDIR /app
COPY site-packages/ /app/site-packages/
COPY bot/ /app/bot/
COPY handlers/ /app/handlers/
COPY cluster/ /app/cluster/
# no lab/ or demo/: the bot never imports them (`spark-bot demo` needs the repository checkout)
ENV PYTHONPATH=/app/site-packages:/app PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER spark
EXPOSE 3000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python3", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:3000/health', timeout=4).status != 200)"]
ENTRYPOINT ["python3", "-m", "bot.cli"]
CMD ["run", "--config", "/config/spark-bot.yaml"]
