# aligntrain — `make study` reproduces the embedded default study, `make test` runs the tests.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1

.PHONY: venv study study-plain pipelines smoke lint test test-fast bench clean prefect-server mlflow-server ui pools deploy worker submit

# torch goes in first, pinned: the CPU wheel. Letting pip choose a torch for
# transformers/trl would pull the newest CUDA build (gigabytes) on a CPU machine.
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,orchestration]"
	touch $@

venv: $(VENV)/.installed

# ---- The GPU compute environment (docs/gpu.md) ------------------------------------
# A second venv for GPU machines: vLLM, TRL, PEFT, bitsandbytes, DeepSpeed and the CUDA build
# of torch (constraints-gpu.txt), no Prefect. Its `aligntrain` runs the stages of a GPU worker:
# `make worker POOL=gpu STAGE_BIN=$(CURDIR)/.venv-gpu/bin`. PIP_GPU_ARGS passes options to pip,
# e.g. "--isolated" where a pip configuration offers a CPU torch (docs/gpu.md).
VENV_GPU := .venv-gpu
BIN_GPU  := $(CURDIR)/$(VENV_GPU)/bin
PIP_GPU_ARGS ?=

$(VENV_GPU)/.installed: pyproject.toml constraints-gpu.txt
	test -x $(BIN_GPU)/python || $(PYTHON) -m venv $(VENV_GPU) || python3 -m venv $(VENV_GPU)
	echo '*' > $(VENV_GPU)/.gitignore  # git, and so ruff, skip the venv
	$(BIN_GPU)/python -m pip install --quiet --upgrade pip
	$(BIN_GPU)/python -m pip install $(PIP_GPU_ARGS) --quiet -c constraints-gpu.txt -e ".[gpu,test]"
	$(BIN_GPU)/python -c "import sys, torch; sys.exit(None if torch.version.cuda else \
	    'torch ' + torch.__version__ + ' is a CPU build: see docs/gpu.md (PIP_GPU_ARGS)')"
	touch $@

.PHONY: venv-gpu check-gpu-env
venv-gpu: $(VENV_GPU)/.installed

# Resolves the GPU set with pip (no GPU, no install; about a minute and ~120 MB of index
# pages and wheel metadata): scripts/check_gpu_env.sh.
check-gpu-env:
	scripts/check_gpu_env.sh

# Where a GPU is lent: vLLM vs HF pool generation, bf16 log-probabilities vLLM vs HF, one GRPO
# step with vLLM colocated, one QLoRA SFT step, the gathered save of FSDP2 and ZeRO-3 (accelerate/),
# on a small local model (build/gpu_check.json); its last lines say which checks ran and which were
# skipped (vLLM, bitsandbytes or DeepSpeed missing) or failed.
.PHONY: gpu-check
gpu-check: $(VENV_GPU)/.installed
	$(BIN_GPU)/python scripts/gpu_check.py

# The default study: DVC's stage graph run by the Prefect study flow (flows/study.py),
# CONCURRENCY stages at a time, each in a workspace of its own; the checkout then
# reproduces everything from DVC's run-cache. `make study-plain` is `dvc repro` alone.
CONCURRENCY ?= 2
# STUDY=pipelines/<study> runs another study of the repository the same way.
STUDY ?= .
study: venv
	aligntrain pipeline --root $(STUDY)
	python flows/study.py --study $(STUDY) --concurrency $(CONCURRENCY)

study-plain: venv
	aligntrain pipeline --root $(STUDY)
	cd $(STUDY) && $(CURDIR)/scripts/plain_repro.sh

# Every study of the repository: the root's and each pipelines/<study>/ (pipelines/README.md).
# The hub-scale ones need the GPU environment and their pre-fetched models.
pipelines: venv
	aligntrain pipeline --all
	for study in . pipelines/*/; do (cd $$study && dvc repro) || exit 1; done

# The smoke study (pipelines/smoke/overrides.yaml): the default study's stages at toy sizes, in place.
smoke: venv
	$(MAKE) study STUDY=pipelines/smoke

# ---- GPU agents (docs/agents.md) ----------------------------------
# HOST=0.0.0.0 serves other machines (put it behind your network's access control).
HOST ?= 127.0.0.1
PREFECT_PORT ?= 4200
MLFLOW_PORT  ?= 5000
POOL ?= gpu
GPU  ?= 0
# The environment whose `aligntrain` the stages run (e.g. a vLLM environment without Prefect).
STAGE_BIN ?= $(BIN)

prefect-server: venv          ## a Prefect server (export PREFECT_API_URL=http://HOST:$(PREFECT_PORT)/api)
	prefect server start --host $(HOST) --port $(PREFECT_PORT)

ui: venv                      ## the MLflow UI on STUDY's store; prints the runs table's link and each variant's
	aligntrain ui --root $(STUDY) --host $(HOST) --port $(MLFLOW_PORT)

mlflow-server: venv           ## an MLflow tracking server (export MLFLOW_TRACKING_URI=http://HOST:$(MLFLOW_PORT))
	mkdir -p build/mlflow
	mlflow server --host $(HOST) --port $(MLFLOW_PORT) --backend-store-uri sqlite:///$(CURDIR)/build/mlflow/mlflow.db \
	    --artifacts-destination $(CURDIR)/build/mlflow/artifacts

pools: venv                   ## the cpu and gpu process work pools, and the automation that crashes lost stages
	python flows/agents_setup.py --pool cpu --pool gpu

deploy: venv                  ## the deployments of prefect.yaml (study/default, stage/cpu, stage/gpu)
	prefect --no-prompt deploy --all
	@echo "Start the workers with 'make worker POOL=gpu' and 'make worker POOL=cpu', not 'prefect worker start':"
	@echo "make worker also sets the checkout, the stage environment and the 30 s heartbeat the pools' automation expects."

worker: venv                  ## a worker of POOL in this checkout; one stage at a time, on GPU number GPU
	ALIGNTRAIN_CHECKOUT=$(CURDIR) ALIGNTRAIN_STAGE_BIN=$(STAGE_BIN) CUDA_VISIBLE_DEVICES=$(GPU) \
	    PREFECT_FLOWS_HEARTBEAT_FREQUENCY=30 \
	    prefect worker start --pool $(POOL) --limit 1

submit: venv                  ## the committed study on the agents; ends with `dvc repro --pull` here
	python flows/study.py --study $(STUDY) --agents --gpu-pool gpu --concurrency 4

# The linter and formatter first (seconds), then the tests (docs/testing.md). `make test` runs every
# test (the README's test command; CI runs it); `make test-fast` leaves out the end-to-end runs
# marked slow, for the edit loop. Both print the 30 slowest tests, so every run shows where its time
# goes. Both tiers run on two pytest-xdist workers, a file to a worker, except that each stand-in
# study is a unit of its own (tests/conftest.py); `make test` runs both tiers in one pass, longest units first.
PYTEST := $(BIN)/python -m pytest -q --durations=30

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache  # the layering: pyproject.toml's [tool.importlinter] contracts

# Both tiers in one run: the fast files fill the gaps the long end-to-end files leave
# (tests/conftest.py hands out the longest first), about 2 min less than one tier after the other.
test: lint
	$(PYTEST) -n 2 --dist loadfile

test-fast: lint
	$(PYTEST) -m "not slow" -n 2 --dist loadfile

bench: venv
	$(BIN)/python benchmarks/bench_estimators.py
	$(BIN)/python benchmarks/bench_advantages.py
	$(BIN)/python benchmarks/bench_generation.py
	$(BIN)/python benchmarks/bench_stage_startup.py

clean:
	rm -rf build checkpoints
