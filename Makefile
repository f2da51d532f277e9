# Two commands on a fresh machine:  make demo  (the main job)  and  make test.
# Both (re)create .venv from the pinned requirements when they change.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Keep DDS traffic on loopback. Each make invocation gets its own domain id unless one is set
# (the rule is bench/dds_env.sh's, which every script sources).
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
ifndef ROS_DOMAIN_ID
export ROS_DOMAIN_ID := $(shell . ./bench/dds_env.sh && echo $$ROS_DOMAIN_ID)
endif
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
export PYTHONUNBUFFERED := 1

.PHONY: demo test venv lint bench clean launch-deps firmware firmware-host

# The upstream ROS 2 launch and launch_ros sources, to run the launch file in the tests where
# no ROS 2 install provides them (copied first: pip builds in the source tree).
LAUNCH_SRC ?= $(CURDIR)/../shared/ros2_launch
LAUNCH_STAMP := $(VENV)/.launch-installed

venv: $(STAMP)

$(STAMP): requirements.txt requirements-workspace.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -c constraints.txt
	touch $(STAMP)

# The full fine-tune on the emulated rig: 50 Hz, 10 episodes x 6 s, K = 4, starting from the
# pre-trained policy in policies/sim_50hz/. A second run continues the first one's policy and
# replay buffer (runs/demo/). The C firmware's host build plays the rig when a C compiler is
# present (it answers in microseconds, as a microcontroller does), else the Python emulator.
RIG_FIRMWARE ?= $(if $(shell command -v cc),c,python)
demo: $(STAMP)
	@echo "make demo: the emulated rig runs the $(RIG_FIRMWARE) firmware (RIG_FIRMWARE=python|c)"
	$(PY) -m rip_control.finetune run_name:=demo resume_buffer:=auto policy:=auto \
		rig_firmware:=$(RIG_FIRMWARE) $(DEMO_ARGS)

# Two passes: the tests that may share the machine on both cores at once (pytest-xdist), then
# the real-time ones (marked `alone`: a control loop's timing, a rig's time, a learner's pace)
# one at a time. Both always run; either failing fails the target (5: it selected none).
# First the package's bytecode, written once: where PYTHONDONTWRITEBYTECODE is set (as on
# this project's machines) every one of the suite's processes would compile it again (with a
# venv installed --no-compile, the real-time tests ran 20-30 % longer in one CI run).
# The colcon workspace the tests of `ros2 run` and `ros2 launch` use is built once for both
# passes, in a folder of this run's own (RIP_TEST_WORKSPACE, test/conftest.py).
test: $(STAMP) launch-deps firmware-host
	@$(PY) -m compileall -q rip_control rip_learner rip_bench test
	@status=0; ws=$$(mktemp -d); trap 'rm -rf "$$ws"' EXIT; export RIP_TEST_WORKSPACE=$$ws; \
	$(PY) -m pytest -m "not alone" -n 2 $(PYTEST_ARGS) || status=$$?; \
	$(PY) -m pytest -m alone $(PYTEST_ARGS) || { s=$$?; [ $$s -eq 5 ] || status=$$s; }; \
	[ $$status -eq 0 ] || [ $$status -eq 5 ]

# The rig firmware in C (firmware/): the AVR and Cortex-M4 images with their sizes, the host
# build and the fuzz target. The cross compilers are Debian's gcc-avr avr-libc
# gcc-arm-none-eabi libnewlib-arm-none-eabi.
FIRMWARE_BUILD ?= $(CURDIR)/firmware/build
firmware:
	$(MAKE) --no-print-directory -C firmware all BUILD=$(abspath $(FIRMWARE_BUILD))

# The host build only, with the system C compiler: what the tests run against.
firmware-host:
	$(MAKE) --no-print-directory -C firmware host

launch-deps: $(STAMP)
	@if [ -f $(LAUNCH_STAMP) ] || $(PY) -c 'import launch, launch_ros' 2>/dev/null; then :; \
	elif [ -d $(LAUNCH_SRC)/launch ]; then \
		tmp=$$(mktemp -d) && cp -r $(LAUNCH_SRC)/launch $(LAUNCH_SRC)/launch_ros \
			$(LAUNCH_SRC)/composition_interfaces_placeholder $$tmp/ && \
		$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt osrf-pycommon && \
		$(PY) -m pip install --quiet --disable-pip-version-check --no-deps $$tmp/launch \
			$$tmp/launch_ros $$tmp/composition_interfaces_placeholder && \
		rm -rf $$tmp && touch $(LAUNCH_STAMP); \
	else echo "launch-deps: no ROS 2 launch and no $(LAUNCH_SRC): the launch-file tests skip (with CI=true they fail)"; fi

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) build install log .pytest_cache .mypy_cache .ruff_cache firmware/build
