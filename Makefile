# Fresh machine: `make run` (the webhook, embedded default config, self-generated
# certificates) and `make test` (the whole suite). Both create .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
HOST   ?= 127.0.0.1
PORT   ?= 8443

.PHONY: run test bench bench-webhook install clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m webhook run-local --cert-dir certs --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/bench_spread.py

# Load over TLS against a local webhook; uses `hey` (apt-get install hey) when present.
bench-webhook: $(STAMP)
	$(BIN)/python bench/bench_webhook.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
