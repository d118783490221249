# Two commands do all the set-up on a fresh machine:
#   make demo   create .venv, install, get Fashion-MNIST, run the main job
#   make test   create .venv if needed, install, run the whole suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint install data clean docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

data:
	@sh scripts/get-fashion-mnist.sh

# The main job: train the demo ViT on Fashion-MNIST (CPU, about 10 minutes), then evaluate it on the
# test split. A finished runs/demo is only evaluated again, an interrupted one is resumed. Ctrl-C stops
# here (train exits 130), and a run stopped before its last step (SIGTERM) is not evaluated.
DEMO := runs/demo
demo: install data
	@if [ -d $(DEMO)/final ]; then echo "$(DEMO) is already trained (rm -rf $(DEMO) to train again)"; \
	elif [ -d $(DEMO)/checkpoints ]; then $(BIN)/vitkit train --resume $(DEMO); \
	else $(BIN)/vitkit train --config configs/fashion_mnist.yaml --out $(DEMO); fi
	@[ -d $(DEMO)/final ] || { echo "$(DEMO) stopped before its last step; make demo resumes it" >&2; exit 1; }
	$(BIN)/vitkit eval $(DEMO) --split test --json --threads 1

# Two pytest-xdist workers, one per core of the machine CI runs on; TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
# Then the numerics-sensitive tests again with oneDNN's instruction set capped (scripts/isa-caps.sh: AVX512_CORE_BF16,
# what an AMD EPYC Zen 4 has, on an AMX Xeon; AVX2 on another AVX-512 CPU; none on a CPU without AVX-512, whose own
# path is AVX2's), torch's own kernels at the same width: a float comparison that holds on one CPU family only fails
# here on either. ISA_CAPS= skips it. The numerics-sensitive tests are those marked `numerics` (and tests/models but
# its config and size tests; see tests/conftest.py).
NUMERIC_TESTS := -m numerics tests
ISA_CAPS ?= $(shell sh scripts/isa-caps.sh)
# both passes build vitkit's C++ kernels into one fresh cache (tests/conftest.py)
test: export VITKIT_TEST_RUN := make-$(shell date +%s%N)
test: install data
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=20
	@[ -n "$(ISA_CAPS)" ] || echo "no capped pass (ISA_CAPS is empty; scripts/isa-caps.sh gives none on a CPU without AVX-512: it ran AVX2's path)"
	@for cap in $(ISA_CAPS); do echo "numerics-sensitive tests under ONEDNN_MAX_CPU_ISA=$${cap%:*} ATEN_CPU_CAPABILITY=$${cap#*:}"; \
	  ONEDNN_MAX_CPU_ISA=$${cap%:*} ATEN_CPU_CAPABILITY=$${cap#*:} $(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(NUMERIC_TESTS) || exit 1; done

# ruff (pinned in the dev extra): the lint rules and the formatting of pyproject.toml's [tool.ruff]
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The docs site (mkdocs.yml) into site/: the docs extra in .venv (its own stamp), then a strict build, offline: a
# warning (a broken link or anchor, a page left out of the nav, an API name not found) fails it.
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
