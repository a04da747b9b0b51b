# Two commands matter: `make demo` and `make test`. Each installs what it needs first.
SHELL := /bin/bash
UV ?= $(shell command -v uv 2>/dev/null || echo "python3 -m uv")
PY_SRC := libs/clearance/src libs/kubesim/src services/watcher/src services/tracker/src services/dispatcher/src

.PHONY: install test lint schemas demo bench fuzz chaos ha ha-soak

## install: install uv from PyPI if missing, then the locked workspace into .venv, then Debian's
## prometheus package (prometheus + promtool, for the alert tests) where apt can and it is missing
install:
	@command -v uv >/dev/null 2>&1 || python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet --disable-pip-version-check uv
	@$(UV) sync --all-packages --frozen --compile-bytecode --quiet
	@.ci/install-prometheus

## test: the whole pytest suite against a real nats-server and kubesim, on TEST_WORKERS pytest-xdist
## workers (the suite waits on timers and subprocesses far more than it computes: one worker
## keeps 2 cores ~30 % busy); the HA seed scenarios (marker ha_e2e, 30-60 s each) run in `make ha`
TEST_WORKERS ?= 2
test: install
	@$(UV) run --frozen --no-sync pytest -n $(TEST_WORKERS) --dist worksteal -m "not ha_e2e" $(PYTEST_ARGS)

## lint: ruff and mypy --strict on libs and services
lint: install
	$(UV) run --frozen --no-sync ruff check .
	$(UV) run --frozen --no-sync ruff format --check .
	$(UV) run --frozen --no-sync mypy $(PY_SRC)

## demo: the seed scenario end to end on embedded NATS + kubesim, narrated
demo: install
	@$(UV) run --frozen --no-sync clearance demo

## schemas: regenerate proto/ (JSON Schema + AsyncAPI) from the event classes
schemas: install
	$(UV) run --frozen --no-sync python -m clearance.catalog proto

## bench: the performance harness (never part of `make test`); writes docs/benchmarks.{md,json}
bench: install
	@$(UV) run --frozen --no-sync python -m tests.bench $(BENCH_ARGS)

## chaos: randomized fault schedules against the real stack (never part of `make test`);
## CHAOS_ARGS='--schedules N --seed S' for more, '--replay SEED' for one; writes docs/chaos.{md,json}
chaos: install
	@$(UV) run --frozen --no-sync python -m tests.chaos $(CHAOS_ARGS)

## ha: every HA test once: cluster fixture, node loss, the seed scenario on a 3-node NATS cluster
ha: install
	@$(UV) run --frozen --no-sync pytest -q tests/ha $(PYTEST_ARGS)

## ha-soak: each node-loss test HA_RUNS times in a row (default 10), pass count and durations;
## a failed run keeps its whole pytest tmp dir (stack, service and nats-server logs)
HA_RUNS ?= 10
HA_TESTS ?= stream_leader_is_killed meta_leader_is_killed
ha-soak: install
	@failures=0; for test in $(HA_TESTS); do \
	  passed=0; \
	  for run in $$(seq 1 $(HA_RUNS)); do \
	    start=$$(date +%s); \
	    rm -rf /tmp/ha-soak-$$test-$$run.d; \
	    if $(UV) run --frozen --no-sync pytest -q --basetemp=/tmp/ha-soak-$$test-$$run.d \
	         tests/ha/test_seed_on_cluster.py -k "$$test" >/tmp/ha-soak-$$test-$$run.log 2>&1; \
	    then passed=$$((passed + 1)); verdict=pass; rm -rf /tmp/ha-soak-$$test-$$run.d; \
	    else verdict="FAIL (/tmp/ha-soak-$$test-$$run.log, stack logs in /tmp/ha-soak-$$test-$$run.d)"; fi; \
	    echo "$$test run $$run: $$verdict in $$(( $$(date +%s) - start )) s"; \
	  done; \
	  echo "$$test: $$passed/$(HA_RUNS) passed"; \
	  failures=$$((failures + $(HA_RUNS) - passed)); \
	done; test $$failures -eq 0

## fuzz: issue 13's Hypothesis fuzz of AppWrapper specs against the running services, alone and
## verbose (it also runs in `make test`): generated/accepted counts, outcomes, latencies
fuzz: install
	@$(UV) run --frozen --no-sync pytest -s tests/dispatcher/test_fuzz_e2e.py $(PYTEST_ARGS)
