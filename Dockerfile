# kgroupd: one process, in memory by default, listening on 9092.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    KGROUPD_HOST=0.0.0.0 KGROUPD_PORT=9092 KGROUPD_LOG_FORMAT=json

WORKDIR /app
COPY pyproject.toml README.md ./
COPY broker ./broker
COPY protocol ./protocol
COPY assignors ./assignors
RUN pip install --no-compile . && useradd --system --uid 10001 kgroupd

USER kgroupd
EXPOSE 9092
# Clients outside the container need the name they reach it by: set KGROUPD_ADVERTISED_HOST.
ENTRYPOINT ["kgroupd"]
