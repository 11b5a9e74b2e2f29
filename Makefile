# Two commands for a fresh clone: `make demo` and `make test`. Both install into .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# CPU TensorFlow by default; GPU users: make install EXTRAS=gpu,dev,docs (see README).
EXTRAS ?= cpu,dev,docs
# load's fused resize op and grain_dataset's crop-window JPEG decoder, compiled once into ~/.cache/shardfeed/ops
# (src/shardfeed/read/native/build.py); where one cannot be built, a warning, and its pure path runs
FUSED_RESIZE := SHARDFEED_QUIET_TF=1 $(PY) -c "from shardfeed.read.native import batch_decode, fused_resize, window_decode; fused_resize.available(); window_decode.available(); batch_decode.available()"

.PHONY: install demo demo-detection test test-quick lint typecheck docs bench clean dali

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	# the detection extra's KerasHub without the tensorflow-text (and second TensorFlow) it asks for
	$(PY) -m pip install -q regex tokenizers && $(PY) -m pip install -q --no-deps "keras-hub==0.32.0"
	# the dev extra's Model Garden (tf-models-official), whose own decoders read our detection records back in
	# the tests, without the dependencies it asks for (a second TensorFlow among them): its decoders import
	# only TensorFlow, tf-keras (matched to the TensorFlow installed) and gin
	case ",$(EXTRAS)," in *,dev,*) $(PY) -m pip install -q --no-deps "tf-models-official==2.20.0" "gin-config==0.5.0" \
	  "tf-keras~=$$($(PY) scripts/tf_version.py).0";; esac
	$(FUSED_RESIZE)
	touch $(STAMP)

# ARGS: the demo's own options, e.g. make demo ARGS="--seed 3" (python -m shardfeed.training.demo --help)
demo: install
	$(PY) -m shardfeed.training.demo $(ARGS)

# Boxes end to end: COCO sample data -> convert -> train (KerasHub's RetinaNet) -> evaluate -> predict.
demo-detection: install
	$(PY) scripts/demo_detection.py

lint: install
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/ruff check src tests bench

typecheck: install
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml): guides, the API and CLI reference written from the code,
# warnings as errors; built into site/ (open site/index.html, or `.venv/bin/mkdocs serve`).
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -d site

# --durations=10: every run ends with the ten slowest tests (above pytest's closing line, which
# gives the suite's wall time), so a new slow one is seen the day it lands. PYTEST_ARGS adds
# options, e.g. PYTEST_ARGS="--durations=40" or PYTEST_ARGS="-k train"
# --dist loadscope: a worker takes a whole module, so a module's fixtures (a trained run) are built
# once; tests/conftest.py orders the modules costliest first (docs/tests.md: where the time goes).
PYTEST := $(VENV)/bin/pytest -n 2 --dist loadscope --no-loadscope-reorder -q --durations=10
test: lint typecheck docs
	$(FUSED_RESIZE)
	$(PYTEST) $(PYTEST_ARGS)

# The loop while iterating (1:45 on 2 cores on 2026-12-08, docs/tests.md; meant to stay under 5 minutes): lint
# and every test not marked slow (training runs, fresh processes, servers); `make test` runs them all.
test-quick: lint
	$(FUSED_RESIZE)
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

# Optional: NVIDIA DALI for decoding on the GPU (decoder="dali", train --decode-on gpu); see the script.
dali: install
	bash scripts/install_dali.sh $(PY)

bench: install
	$(PY) bench/bench_convert.py

clean:
	rm -rf $(VENV) site build dist *.egg-info src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
