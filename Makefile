# Every target that needs Python creates .venv at the repository root when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
export UV_CACHE_DIR ?= $(CURDIR)/.uv-cache
export AIRFLOW__CORE__LOAD_EXAMPLES := False

.PHONY: setup test test-fast test-slow lint typecheck demo airflow bench chaos lock clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(UV) || $(BIN)/pip install --quiet --disable-pip-version-check uv==0.13.9
	$(UV) pip install --quiet --python $(BIN)/python -r requirements.lock
	$(UV) pip install --quiet --python $(BIN)/python -c requirements.lock -e '.[deep,local,gke,dev]'
	touch $@

# Every extra, so `make` and CI run with the training libraries; uv keeps the versions already in the lock
# (pass --upgrade-package NAME to move one).
lock: setup
	$(UV) pip compile --quiet --python-version 3.11 --extra deep --extra local --extra gke --extra dev pyproject.toml \
		-o requirements.lock

# Test files run on TEST_WORKERS processes (pytest-xdist), each file whole on one of them: a module's
# fixtures (a cluster, an Airflow stack) are built once, and each process has its own Airflow home and DB.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test: setup
	$(PYTEST)

test-fast: setup
	$(PYTEST) -m "not slow"

test-slow: setup
	$(PYTEST) -m slow

SOURCES := $(wildcard elastic_training/*.py operators plugin local cli dags tests benchmarks)

lint: setup
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)

typecheck: setup
	$(BIN)/mypy elastic_training $(wildcard dags/*.py)

demo: setup
	$(BIN)/elastic-training demo

# Airflow's UI on http://127.0.0.1:$(PORT) (8080 by default) with the local cluster as kubernetes_default;
# user admin, password in .airflow/simple_auth_manager_passwords.json.generated. Ctrl-C stops everything.
PORT ?= 8080
airflow: setup
	$(BIN)/elastic-training airflow --port $(PORT) --home $(CURDIR)/.airflow --dags-folder $(CURDIR)/dags

# The commands recorded in benchmarks/RESULTS.md; each is bounded in time and talks only to loopback.
bench: setup
	$(BIN)/python -m benchmarks.cluster_api
	$(BIN)/python -m benchmarks.cluster_logs_watches --repeat 3
	$(BIN)/python -m benchmarks.pod_death --runs 50
	$(BIN)/python -m benchmarks.workloads --kills 3 --steps 200
	$(BIN)/python -m benchmarks.checkpoint_validation --sizes 100M,1G --targets local --repeat 5 --restore-repeat 3
	$(BIN)/python -m benchmarks.checkpoint_validation --sizes 100M,1G --targets gcs --workers 4 --repeat 5 --restore-repeat 1
	$(BIN)/python -m benchmarks.trigger_watch --jobsets 100 --window 660 --deletes 20
	$(BIN)/python -m benchmarks.recovery_phases --repeat 3

# The chaos matrix (benchmarks/chaos.py): RUNS seeded elastic runs through Airflow on the local cluster.
# BUDGET bounds the whole matrix (no run starts after it), RUN_TIMEOUT each run; CHAOS_OUT keeps the records.
# GCS=1 puts the run directories on gs:// (a GCS emulator per lane) and adds GCS 503 bursts and outages.
RUNS ?= 50
GCS ?= 0
SEED ?= 1
JOBS ?= 1
BUDGET ?= 7200
RUN_TIMEOUT ?= 480
CHAOS_OUT ?= chaos-out
chaos: setup
	$(BIN)/python -m benchmarks.chaos --runs $(RUNS) --seed $(SEED) --jobs $(JOBS) --budget $(BUDGET) \
		--run-timeout $(RUN_TIMEOUT) --out $(CHAOS_OUT) $(if $(filter 1,$(GCS)),--gcs,)

clean:
	rm -rf $(VENV) .airflow .uv-cache .pytest_cache .mypy_cache .ruff_cache
