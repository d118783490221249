# Two commands do all the set-up on a fresh machine:
#   make demo   create .venv, install, get Fashion-MNIST, run the main job
#   make test   create .venv if needed, install, run the whole suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install data clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

data:
	@sh scripts/get-fashion-mnist.sh

# The main job: train the demo ViT on Fashion-MNIST (CPU, about 10 minutes), then evaluate it on the
# test split. A finished runs/demo is only evaluated again, an interrupted one is resumed.
DEMO := runs/demo
demo: install data
	@if [ -d $(DEMO)/final ]; then echo "$(DEMO) is already trained (rm -rf $(DEMO) to train again)"; \
	elif [ -d $(DEMO)/checkpoints ]; then $(BIN)/vitkit train --resume $(DEMO); \
	else $(BIN)/vitkit train --config configs/fashion_mnist.yaml --out $(DEMO); fi
	$(BIN)/vitkit eval $(DEMO) --split test --json --threads 1

# Two pytest-xdist workers: on 2 cores the suite takes about 5 minutes instead of 8 in one process;
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: install data
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
