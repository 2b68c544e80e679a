# Entry points, each creating or refreshing .venv first:
#   make train       the main job (see README)
#   make test        lint, format check and the whole test suite (what CI runs)
#   make test-fast   the tests that start no Ray and no process: the development loop
#   make format      format the code and apply ruff's safe fixes
#   make docs        regenerate the generated pages, then build the site into site/, strictly
#   make docs-check  fail if a committed generated page differs from what the code generates
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
STAMP  := $(VENV)/.installed-stamp

.PHONY: train test test-fast lint format docs docs-check venv clean

venv: $(STAMP)

# Reinstalls whenever the package metadata or this file changes; the editable install means
# source edits need no reinstall. pip byte-compiles every installed module on one core;
# compileall does it on every core. (Compiled they must be: where PYTHONDONTWRITEBYTECODE is
# set, every process would otherwise recompile TensorFlow's modules on import.) Left out:
# what no process of ours imports (packages' tests and examples, PyOpenGL, pip, Ray's RLlib,
# LLM and Serve libraries), a large share of the files.
NEVER_IMPORTED := /tests/|/examples/|site-packages/(OpenGL|pip)/|site-packages/ray/(rllib|llm|serve)/
$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "impala-rep needs Python 3.11, got " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip "setuptools>=69" wheel
	$(VENV)/bin/python -m pip install --quiet --no-compile --editable '.[test,atari,minatar,mujoco,box2d,minigrid,tune,docs]'
	$(VENV)/bin/python -m compileall -q -j 0 -x '$(NEVER_IMPORTED)' $(VENV)/lib > /dev/null
	@touch $(STAMP)

# A short CartPole run on an embedded local Ray,
# then its plots and its final checkpoint played greedily for 100 episodes.
# Each run gets a new directory under runs/.
RUN := runs/cartpole-$(shell date +%Y%m%d-%H%M%S)
train: $(STAMP)
	$(VENV)/bin/impala-rep train --env CartPole-v1 --num-actors 2 --total-frames 1000000 --logdir $(RUN)
	$(VENV)/bin/impala-rep plot $(RUN)
	$(VENV)/bin/impala-rep evaluate $(RUN)

# Two workers, a test file each at a time, in the order tests/conftest.py gives them (the
# longest first): most of the suite's time is subprocesses starting Ray and TensorFlow, which
# overlap well on 2 cores.
test: lint
	$(VENV)/bin/pytest -n 2 --dist loadfile --no-loadscope-reorder

# The same two workers, whole files each, without the tests marked `launches`
# (tests/conftest.py), which it refuses to start a process.
test-fast: lint
	$(VENV)/bin/pytest -n 2 --dist loadfile --no-loadscope-reorder --fast -q

lint: $(STAMP)
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check --quiet .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix --quiet .
	$(VENV)/bin/ruff format --quiet .

docs: $(STAMP)
	$(VENV)/bin/python docs/generate.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-check: $(STAMP)
	$(VENV)/bin/python docs/generate.py --check

clean:
	rm -rf $(VENV) build site *.egg-info
