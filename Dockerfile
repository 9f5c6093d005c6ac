# The Airflow image with this package installed: what docker-compose.yml and deploy/helm/values.yaml run.
# The project's build machines have no Docker engine; tests/test_deployment.py checks this file structurally.
#
# Built on the slim image (core Airflow, no providers) so the image holds exactly requirements.lock's
# versions plus what a multi-user deployment adds: the FAB auth manager (users, roles, login form) and the
# PostgreSQL driver for the metadata database. The package is installed without extras: the operators,
# trigger, plugin and checkpoint validation, not the training libraries (the lock only constrains, it adds
# nothing); add `[deep]` to the install line if a DAG validates with deep=True or a reference step.
ARG AIRFLOW_VERSION=3.3.2
FROM apache/airflow:slim-${AIRFLOW_VERSION}-python3.11

ARG AIRFLOW_VERSION
ARG FAB_PROVIDER_VERSION=3.10.2
ARG POSTGRES_PROVIDER_VERSION=7.1.1
WORKDIR /opt/elastic-training
COPY --chown=airflow:root pyproject.toml README.md requirements.lock ./
COPY --chown=airflow:root elastic_training ./elastic_training
COPY --chown=airflow:root operators ./operators
COPY --chown=airflow:root plugin ./plugin
COPY --chown=airflow:root cli ./cli
COPY --chown=airflow:root local ./local
COPY --chown=airflow:root dags ./dags
# requirements.lock is the constraint for every shared package, with one exception: the FAB provider's
# Flask-AppBuilder 5.2.2 requires python-dateutil<3 while the lock has 4.0.0, so that single pin is
# dropped here (pip then resolves 2.9.0.post0, which Airflow accepts). This is also why FAB stays out of
# requirements.lock: `make airflow` and the tests use Airflow's simple auth manager and need no FAB.
RUN grep -v '^python-dateutil==' requirements.lock > /tmp/constraints.txt \
 && pip install --no-cache-dir -c /tmp/constraints.txt \
      "apache-airflow==${AIRFLOW_VERSION}" \
      "apache-airflow-providers-fab==${FAB_PROVIDER_VERSION}" \
      "apache-airflow-providers-postgres==${POSTGRES_PROVIDER_VERSION}" \
      /opt/elastic-training \
 && rm /tmp/constraints.txt
ENV AIRFLOW__CORE__AUTH_MANAGER=airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/elastic-training/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
WORKDIR /opt/airflow
