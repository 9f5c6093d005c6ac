# The Airflow image with this package installed: what docker-compose.yml runs against a real cluster (GKE).
# The project's build machines have no Docker engine; tests/test_deployment.py checks this file structurally.
ARG AIRFLOW_VERSION=3.3.2
FROM apache/airflow:${AIRFLOW_VERSION}-python3.11

ARG AIRFLOW_VERSION
WORKDIR /opt/elastic-training
COPY --chown=airflow:root pyproject.toml README.md ./
COPY --chown=airflow:root operators ./operators
COPY --chown=airflow:root plugin ./plugin
COPY --chown=airflow:root cli ./cli
COPY --chown=airflow:root local ./local
COPY --chown=airflow:root dags ./dags
# Pin Airflow to the image's own version so the install never upgrades or downgrades it.
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" /opt/elastic-training
WORKDIR /opt/airflow
