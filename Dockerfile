# recur's image: workers, Flower and the scheduler (target "app"); the Spark seed
# job adds Java and pyspark (target "seed").
FROM python:3.11-slim AS app
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY config ./config
COPY routing ./routing
COPY tasks ./tasks
COPY scheduler ./scheduler
COPY spark ./spark
RUN pip install . && useradd --create-home recur
USER recur
CMD ["recur", "--help"]

FROM app AS seed
USER root
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* && pip install ".[spark]"
USER recur
