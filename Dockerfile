# The relay's image: `relay` (migrate, status, ...) and `celery -A relay worker|beat`.
FROM python:3.12-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md CHANGELOG.md ./
COPY relay ./relay
RUN pip install .
# celery -A relay builds its configuration from RELAY_*; the module is here for apps that load it.
COPY celeryconfig.py ./

RUN useradd --system --uid 10001 --home-dir /app relay
USER relay

CMD ["celery", "-A", "relay", "worker", "--loglevel=INFO"]
