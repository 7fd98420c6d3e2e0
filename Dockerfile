# kgroupd: one process listening on 9092, durable in the /var/lib/kgroupd volume
# (KGROUPD_DATA_DIR= empty keeps everything in memory).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    KGROUPD_LISTENERS=PLAINTEXT://0.0.0.0:9092 KGROUPD_LOG_FORMAT=json \
    KGROUPD_DATA_DIR=/var/lib/kgroupd

WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY broker ./broker
COPY protocol ./protocol
COPY assignors ./assignors
COPY pipeline ./pipeline
RUN pip install --no-compile -c constraints.txt . && useradd --system --uid 10001 kgroupd \
    && mkdir -p /var/lib/kgroupd && chown kgroupd /var/lib/kgroupd

USER kgroupd
# A named volume starts owned by kgroupd (uid 10001). A bind mount keeps its host owner: give
# it to 10001 (chown -R 10001 /host/dir) or run as its owner (docker run --user "$(id -u)").
VOLUME ["/var/lib/kgroupd"]
# 8080: /metrics, /healthz, /readyz, the live page (unauthenticated: publish it only where
# trusted, e.g. -p 127.0.0.1:8080:8080, or set KGROUPD_HTTP_HOST=127.0.0.1 to keep it inside
# the container)
EXPOSE 9092 8080
# Ready (/readyz 200) means the data dir is loaded and the Kafka listeners accept.
HEALTHCHECK --interval=5s --timeout=3s --retries=10 CMD ["python", "-m", "kgroupd.broker.cli.healthcheck"]
# Clients outside the container need the name they reach it by:
# KGROUPD_ADVERTISED_LISTENERS=PLAINTEXT://HOST:9092.
ENTRYPOINT ["kgroupd"]
