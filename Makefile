# aligntrain — `make study` reproduces the embedded default study, `make test` runs the tests.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1

.PHONY: venv study smoke test bench clean

# torch goes in first, pinned: the CPU wheel. Letting pip choose a torch for
# transformers/trl would pull the newest CUDA build (gigabytes) on a CPU machine.
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	touch $@

venv: $(VENV)/.installed

# The default study through DVC, one fresh MLflow parent run per reproduction, and
# one local Prefect server for all stages (unless PREFECT_API_URL names one).
study: venv
	ALIGNTRAIN_PARENT_RUN_ID=$$(aligntrain new-study-run) python scripts/with_prefect_server.py -- dvc repro

# The smoke profile (profiles/smoke.yaml): the same dvc.yaml, tiny sizes, in build/smoke.
smoke: venv
	python scripts/with_prefect_server.py -- scripts/run_profile.sh profiles/smoke.yaml build/smoke

test: venv
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/python benchmarks/bench_estimators.py
	$(BIN)/python benchmarks/bench_advantages.py
	$(BIN)/python benchmarks/bench_generation.py

clean:
	rm -rf build checkpoints
