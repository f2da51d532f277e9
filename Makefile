# Two commands on a fresh machine:  make demo  (the main job)  and  make test.
# Both (re)create .venv from the pinned requirements when they change.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Keep DDS traffic on loopback. Each make invocation gets its own domain id unless one is set.
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
export ROS_DOMAIN_ID ?= $(shell echo $$(( ($$$$ % 100) + 100 )))
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
export PYTHONUNBUFFERED := 1

.PHONY: demo test venv lint bench clean

venv: $(STAMP)

$(STAMP): requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -c constraints.txt
	touch $(STAMP)

# The full fine-tune on the emulated rig: 50 Hz, 10 episodes x 6 s, K = 4, starting from the
# pre-trained policy in policies/sim_50hz/. A second run continues the first one's policy and
# replay buffer (runs/demo/).
demo: $(STAMP)
	$(PY) -m rip_control.finetune run_name:=demo resume_buffer:=auto policy:=auto $(DEMO_ARGS)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) build install log .pytest_cache .mypy_cache .ruff_cache
