# pbox: top-level build. Everything lands in $(BUILD)/.
#
#   make            build everything
#   make test       lint, then every test, each phase timed (RESULT test ...)
#   make perf-sum   summation kernels against a streaming reference
#   make perf-compress  a summation service's core on compressed pushes against
#                   plain ones (ByteComp's box_ratio)
#   make perf-cluster  BytePS Fig. 12 on shaped links: pbox against t_opt and
#                   Gloo's ring, n = 4 and n = 8 (root; libgloo-dev)
#   make perf-dataplane  pboxd on memif against dpdk-testpmd (root; dpdk-dev)
#   make perf-scale  box memory and cost per fragment, 1 MB to 4 GB models and
#                   2 to 256 workers (root; about 9 GB free for hugepages)
#   make demo       the main job on an emulated cluster on this machine (root)
#   make integration  pboxd on the emulated network (root; part of make test)
#   make setup      install what is missing (Debian packages, hugepages); make
#                   test and make demo do this first (deploy/host-setup.sh)
#   CUDA=auto|0|1   build the worker's CUDA objects when nvcc is found (auto)
#   V=1             print every command in full (default: one short line each)

SHELL   := /bin/bash
BUILD   ?= build
CC      ?= gcc
CUDA    ?= auto
NVCC    ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
PKGCONF ?= pkg-config

ifeq ($(origin CC),default)
CC := gcc
endif

# Quiet by default: one line per target ("CC appliance/ss.o"), so that a
# warning stands out; V=1 prints the commands.
V ?= 0
ifeq ($(V),1)
Q :=
say :=
else
Q := @
say = printf '  %-7s %s\n' $(1) $(patsubst $(BUILD)/obj/%,%,$(2));
endif

# Baseline: any x86-64 from the last decade. Wider code lives in its own
# objects (see SIMD_FLAGS) and is chosen at run time.
ARCH_FLAGS := -march=x86-64-v2 -mtune=generic
WARN_FLAGS := -Wall -Wextra -Wmissing-prototypes -Wshadow -Wformat=2 -Werror
OPT_FLAGS  ?= -O3 -g
CFLAGS_ALL := -std=c11 -D_GNU_SOURCE $(OPT_FLAGS) $(ARCH_FLAGS) $(WARN_FLAGS) \
              -fPIC -fno-strict-aliasing -MMD -MP $(EXTRA_CFLAGS)

DPDK_CFLAGS := $(filter-out -march=%,$(shell $(PKGCONF) --cflags libdpdk 2>/dev/null))
DPDK_LIBS   := $(shell $(PKGCONF) --libs libdpdk 2>/dev/null)
INIH_CFLAGS := $(shell $(PKGCONF) --cflags inih 2>/dev/null)
INIH_LIBS   := $(shell $(PKGCONF) --libs inih 2>/dev/null)
NUMA_LIBS   := $(shell $(PKGCONF) --libs numa 2>/dev/null || echo -lnuma)
MHD_LIBS    := $(shell $(PKGCONF) --libs libmicrohttpd 2>/dev/null)
SODIUM_LIBS := $(shell $(PKGCONF) --libs libsodium 2>/dev/null || echo -lsodium)
CHECK_CFLAGS:= $(shell $(PKGCONF) --cflags check 2>/dev/null)
CHECK_LIBS  := $(shell $(PKGCONF) --libs check 2>/dev/null)

INCLUDES := -Iconfig -Inuma -Iappliance -Iappliance/ss -Inic -Iworker/include -Iworker -Iperf/sum

# Per-object flags for the run-time dispatched kernels.
SIMD_FLAGS_avx2   := -mavx2 -mfma -mf16c
SIMD_FLAGS_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c -mfma

# ---- sources ---------------------------------------------------------------
CORE_SRCS := config/cfg.c config/cfg_box.c config/cfg_worker.c \
             numa/numa_topo.c numa/numa_plan.c \
             appliance/ss/ss.c appliance/ss/sum.c appliance/ss/sum_scalar.c appliance/ss/sum_avx2.c appliance/ss/sum_avx512.c \
             appliance/ss/comp.c appliance/ss/comp_avx2.c appliance/ss/comp_avx512.c \
             nic/nic_wire.c nic/nic_nh.c nic/nic_nh_avx2.c nic/nic_nh_avx512.c nic/nic_ctl.c nic/nic_host.c
PBOXD_SRCS  := appliance/pboxd.c appliance/box_lcore.c appliance/box_txref.c appliance/box_ctl.c \
               appliance/box_stats.c appliance/box_telemetry.c appliance/box_metrics.c \
               nic/nic_port.c
WORKER_SRCS := worker/pbox_worker.c
# libpbox: the API, bootstrap, engine and layout, over the core objects
# (configuration, SS core, sum kernels, wire code).
# libpbox links no DPDK (and no CUDA) library: what needs one is a module
# under $(BUILD)/lib/pbox-3, loaded when a job asks for it (worker/module.c).
# libpbox's files, bottom first: each calls only files before it
# (tests/lint-layers.sh holds them to this order; worker/README.md says why).
LIBPBOX_LAYERS := rank_proto layout decide gather base ranks datalink units module handle resume fail link box \
                  sched tune grow udp frag serve flow ctl engine submit local_msg local_tensor local_renew \
                  local_lead local boot rdv pbox survive shard gsum async autocomp cstage
LIBPBOX_SRCS := $(patsubst %,worker/%.c,$(LIBPBOX_LAYERS))
LIBPBOX_CORE := config/cfg.c config/cfg_box.c config/cfg_worker.c appliance/ss/ss.c appliance/ss/sum.c \
                appliance/ss/sum_scalar.c appliance/ss/sum_avx2.c appliance/ss/sum_avx512.c \
                appliance/ss/comp.c appliance/ss/comp_avx2.c appliance/ss/comp_avx512.c nic/nic_wire.c \
                nic/nic_nh.c nic/nic_nh_avx2.c nic/nic_nh_avx512.c nic/nic_ctl.c nic/nic_host.c
LIBPBOX_SONAME := libpbox.so.3
LIBPBOX_SO     := $(BUILD)/lib/libpbox.so.3.0
MODULE_DIR     := $(BUILD)/lib/pbox-3
DPDK_MODULE    := $(MODULE_DIR)/dpdk.so
BENCH_SRCS  := worker/pbox_bench.c worker/bench_comp.c worker/decide.c worker/models.c
TEST_SRCS   := $(wildcard tests/unit/*.c)
PERF_SUM_SRCS := perf/sum/perf_sum.c perf/sum/perf_sum_ref.c perf/sum/perf_sum_ref_avx2.c \
                 perf/sum/perf_sum_ref_avx512.c

CUDA_SRCS := $(wildcard worker/cuda/*.cu)
ifeq ($(CUDA),1)
  ifeq ($(NVCC),)
    $(error CUDA=1 but nvcc was not found; set NVCC=/path/to/nvcc)
  endif
  WITH_CUDA := 1
else ifeq ($(CUDA),auto)
  WITH_CUDA := $(if $(NVCC),1,0)
else
  WITH_CUDA := 0
endif

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
CORE_OBJS := $(call obj,$(CORE_SRCS))
CUDA_OBJS := $(if $(filter 1,$(WITH_CUDA)),$(patsubst %.cu,$(BUILD)/obj/%.o,$(CUDA_SRCS)))
# The CUDA module: pbox_push_pull_cuda()'s stager (worker/cuda), with the
# CUDA runtime linked in statically (it needs only the driver at run time).
CUDA_MODULE := $(if $(CUDA_OBJS),$(BUILD)/lib/pbox-3/cuda.so)
CUDA_DOUBLE := $(BUILD)/tests/double/cuda.so
COMP_SO     := $(BUILD)/tests/libpboxcomp.so
# make test-gpu's and perf/gpu's C program (tests/gpu/gpu_check.cu)
GPU_CHECK   := $(if $(CUDA_OBJS),$(BUILD)/tests/gpu_check)
# and the CUDA compressors against the C ones (tests/gpu/comp_check.cu)
COMP_CHECK  := $(if $(CUDA_OBJS),$(BUILD)/tests/comp_check)

# The ring all-reduce perf/cluster compares with: Gloo (C++), when installed.
GLOO_HDR := $(wildcard /usr/include/gloo/allreduce.h)
RING_BIN := $(if $(GLOO_HDR),$(BUILD)/perf/ring_gloo)

# The Python package (worker/python/pbox): pure Python over libpbox.so.3 with
# ctypes, so PYTHONPATH=build/python works from a checkout.
PY_SRCS  := $(wildcard worker/python/pbox/*.py)
PY_FILES := $(patsubst worker/python/%,$(BUILD)/python/%,$(PY_SRCS))
PY_SITE  ?= /usr/lib/python3/dist-packages

BINS := $(DPDK_MODULE) $(CUDA_MODULE) $(GPU_CHECK) $(COMP_CHECK) $(RING_BIN) $(BUILD)/bin/pbox-gen $(BUILD)/bin/pboxd $(BUILD)/bin/pboxctl $(BUILD)/bin/pbox-worker $(BUILD)/bin/pbox-client $(BUILD)/tests/unit_tests $(CUDA_DOUBLE) \
        $(BUILD)/perf/perf_sum $(COMP_SO) $(BUILD)/lib/libpbox.a $(LIBPBOX_SO) $(BUILD)/bin/pbox-bench \
        $(PY_FILES)

$(BUILD)/python/%.py: worker/python/%.py
	@mkdir -p $(@D)
	$(Q)$(call say,PY,$@)cp $< $@

# The wheel (pip install, no PYTHONPATH): the package with libpbox.so.3 and
# the modules built here under pbox/lib, tagged py3-none-linux_x86_64
# (worker/python/setup.py), built offline with Debian's setuptools and wheel.
.DEFAULT_GOAL := all
WHEEL_SRC := $(BUILD)/wheel-src
PYTHON    ?= /usr/bin/python3
wheel: $(LIBPBOX_SO) $(PY_FILES) $(DPDK_MODULE) $(CUDA_MODULE)
	@rm -rf $(WHEEL_SRC) $(BUILD)/dist && mkdir -p $(WHEEL_SRC)/pbox/lib/pbox-3 $(BUILD)/dist
	$(Q)cp worker/python/pyproject.toml worker/python/setup.py worker/python/README.md $(WHEEL_SRC)/
	$(Q)cp $(PY_SRCS) $(WHEEL_SRC)/pbox/
	$(Q)cp $(LIBPBOX_SO) $(WHEEL_SRC)/pbox/lib/libpbox.so.3
	$(Q)for m in $(DPDK_MODULE) $(CUDA_MODULE); do cp $$m $(WHEEL_SRC)/pbox/lib/pbox-3/; done
	$(Q)$(call say,WHEEL,$(BUILD)/dist)$(PYTHON) -m pip wheel -q --no-index --no-build-isolation \
		--no-deps -w $(BUILD)/dist $(WHEEL_SRC)

# What a worker host needs, and nothing that needs DPDK: libpbox, its
# Python package and, where nvcc is, the CUDA module.
WORKER_BINS := $(LIBPBOX_SO) $(BUILD)/lib/libpbox.a $(PY_FILES) $(CUDA_MODULE) $(GPU_CHECK) $(COMP_CHECK) \
               $(COMP_SO)

# A build without DPDK's development files fails with a hint, not with a
# missing header (make worker needs none).
ifeq ($(DPDK_LIBS),)
ifneq ($(filter-out setup test demo clean lint format worker test-gpu perf-gpu,$(or $(MAKECMDGOALS),all)),)
$(error libdpdk not found by pkg-config: run 'make setup' (as root), or 'make test' / 'make demo', which set up first)
endif
endif

.PHONY: wheel worker test-gpu perf-gpu setup test-run demo-run all test unit unit-asan unit-tsan integration python-test soak lint docs check-docs fuzz format perf-sum perf-cluster perf-dataplane perf-loss perf-backprop perf-sweep perf-sweep-cluster perf-train perf-tune perf-scale perf-compress perf-shard demo install uninstall image boot-test clean
all: $(BINS)
worker: $(WORKER_BINS)

$(BUILD)/lib/libpboxcore.a: $(CORE_OBJS)
	@mkdir -p $(@D)
	$(Q)$(call say,AR,$@)$(AR) rcs $@ $^

# The versioned shared library exports pbox_* only (worker/libpbox.map).
$(LIBPBOX_SO): $(call obj,$(LIBPBOX_SRCS) $(LIBPBOX_CORE)) worker/libpbox.map
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -shared -Wl,-soname,$(LIBPBOX_SONAME) -Wl,--version-script=worker/libpbox.map \
		-Wl,-z,defs -o $@ $(filter %.o,$^) $(INIH_LIBS) $(SODIUM_LIBS) -ldl -lm -pthread
	$(Q)ln -sf libpbox.so.3.0 $(BUILD)/lib/$(LIBPBOX_SONAME)
	$(Q)ln -sf $(LIBPBOX_SONAME) $(BUILD)/lib/libpbox.so

# The DPDK transport module: its entry only (worker/module.map); libpbox's
# own functions come through the table libpbox hands it.
$(DPDK_MODULE): $(call obj,worker/dpdk.c nic/nic_port.c) $(BUILD)/lib/libpboxcore.a worker/module.map
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -shared -Wl,--version-script=worker/module.map -Wl,-z,defs \
		-o $@ $(filter %.o,$^) $(BUILD)/lib/libpboxcore.a $(DPDK_LIBS) $(SODIUM_LIBS) -lm -pthread

$(BUILD)/lib/libpbox.a: $(call obj,$(LIBPBOX_SRCS) $(LIBPBOX_CORE))
	@mkdir -p $(@D)
	$(Q)$(call say,AR,$@)rm -f $@ && $(AR) rcs $@ $^

$(BUILD)/obj/appliance/ss/sum_avx2.o: EXTRA_OBJ_FLAGS := $(SIMD_FLAGS_avx2)
$(BUILD)/obj/appliance/ss/sum_avx512.o: EXTRA_OBJ_FLAGS := $(SIMD_FLAGS_avx512)
$(BUILD)/obj/appliance/ss/comp_avx2.o: EXTRA_OBJ_FLAGS := $(SIMD_FLAGS_avx2)
$(BUILD)/obj/appliance/ss/comp_avx512.o: EXTRA_OBJ_FLAGS := $(SIMD_FLAGS_avx512)
$(BUILD)/obj/perf/sum/perf_sum_ref_avx2.o: EXTRA_OBJ_FLAGS := $(SIMD_FLAGS_avx2)
$(BUILD)/obj/perf/sum/perf_sum_ref_avx512.o: EXTRA_OBJ_FLAGS := $(SIMD_FLAGS_avx512)
$(BUILD)/obj/tests/%.o: EXTRA_OBJ_FLAGS := $(CHECK_CFLAGS)
$(BUILD)/obj/tests/unit/test_box.o: EXTRA_OBJ_FLAGS := $(CHECK_CFLAGS) $(DPDK_CFLAGS)
$(BUILD)/obj/config/%.o: EXTRA_OBJ_FLAGS := $(INIH_CFLAGS)
# Only the files that talk to DPDK see its headers.
DPDK_OBJS := $(call obj,$(filter-out appliance/pboxd.c,$(PBOXD_SRCS))) $(BUILD)/obj/appliance/pboxd.o \
             $(BUILD)/obj/worker/dpdk.o $(BUILD)/obj/perf/dataplane/pbox_gen.o
$(DPDK_OBJS): EXTRA_OBJ_FLAGS := $(DPDK_CFLAGS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(Q)$(call say,CC,$@)$(CC) $(CFLAGS_ALL) $(INCLUDES) $(EXTRA_OBJ_FLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(Q)$(call say,NVCC,$@)$(NVCC) -O3 -std=c++17 -Xcompiler -fPIC,-Wall,-Wextra,-Werror $(INCLUDES) \
		-MD -MF $(@:.o=.d) -c $< -o $@

$(GPU_CHECK): tests/gpu/gpu_check.cu worker/include/pbox.h $(LIBPBOX_SO)
	@mkdir -p $(@D)
	$(Q)$(call say,NVCC,$@)$(NVCC) -O2 -std=c++17 -Xcompiler -Wall,-Wextra,-Werror -Iworker/include \
		-o $@ $< -L$(BUILD)/lib -lpbox -Xlinker -rpath,'$$ORIGIN/../lib' -cudart static -lpthread

$(COMP_CHECK): tests/gpu/comp_check.cu $(BUILD)/obj/worker/cuda/comp.o $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,NVCC,$@)$(NVCC) -O2 -std=c++17 -Xcompiler -Wall,-Wextra,-Werror $(INCLUDES) -Iworker/cuda \
		-o $@ $< $(BUILD)/obj/worker/cuda/comp.o $(BUILD)/lib/libpboxcore.a -cudart static -lm -lpthread

$(CUDA_MODULE): $(CUDA_OBJS) worker/module.map
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(NVCC) -shared -cudart static -Xlinker --version-script=worker/module.map \
		-Xlinker -z,defs -o $@ $(CUDA_OBJS) -lpthread

CORE_LIBS := $(BUILD)/lib/libpboxcore.a $(INIH_LIBS) $(NUMA_LIBS) $(SODIUM_LIBS) -lm -pthread

$(BUILD)/bin/pboxd: $(call obj,$(PBOXD_SRCS)) $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -o $@ $(filter %.o,$^) $(CORE_LIBS) $(DPDK_LIBS) $(MHD_LIBS)

$(BUILD)/bin/pbox-worker: $(call obj,$(WORKER_SRCS)) $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -o $@ $(filter %.o,$^) $(CORE_LIBS)

$(BUILD)/bin/pboxctl: $(BUILD)/obj/appliance/pboxctl.o $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -o $@ $(filter %.o,$^) $(CORE_LIBS)

$(BUILD)/bin/pbox-client: $(BUILD)/obj/tests/tools/pbox_client.o $(BUILD)/obj/worker/layout.o \
                         $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -o $@ $(filter %.o,$^) $(CORE_LIBS)

# The bench links the shared library, as applications do.
$(BUILD)/bin/pbox-bench: $(call obj,$(BENCH_SRCS)) $(LIBPBOX_SO) $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -o $@ $(filter %.o,$^) -L$(BUILD)/lib -lpbox -Wl,-rpath,'$$ORIGIN/../lib' \
		$(CORE_LIBS)

$(BUILD)/tests/unit_tests: $(call obj,$(TEST_SRCS) $(LIBPBOX_SRCS) worker/models.c nic/nic_port.c \
                            appliance/box_lcore.c appliance/box_txref.c) \
                          $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -o $@ $(filter %.o,$^) $(CORE_LIBS) $(CHECK_LIBS) $(DPDK_LIBS) \
		-lrte_net_ring

COMP_OBJS := $(call obj,appliance/ss/comp.c appliance/ss/comp_avx2.c appliance/ss/comp_avx512.c \
              appliance/ss/sum.c appliance/ss/sum_scalar.c appliance/ss/sum_avx2.c appliance/ss/sum_avx512.c)
# The compressors alone, for tests/python/comp_check.py and comp_train.py
# (ctypes): the same objects libpbox and pboxd link.
$(COMP_SO): $(COMP_OBJS)
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -shared -Wl,-z,defs -o $@ $^ -lm -pthread

# The unit tests' stand-in for the CUDA module (host memory, no GPU): local
# aggregation's GPU path driven where there is no GPU; never installed.
$(CUDA_DOUBLE): tests/double/cuda.c worker/cuda/stage.h worker/include/pbox.h $(COMP_OBJS)
	@mkdir -p $(@D)
	$(Q)$(call say,CC,$@)$(CC) $(CFLAGS_ALL) $(INCLUDES) -shared -Wl,-z,defs -o $@ $< \
		$(COMP_OBJS) -lm -lpthread

$(BUILD)/perf/perf_sum: $(call obj,$(PERF_SUM_SRCS)) $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -o $@ $(filter %.o,$^) $(CORE_LIBS)

$(BUILD)/bin/pbox-gen: $(BUILD)/obj/perf/dataplane/pbox_gen.o $(BUILD)/obj/nic/nic_port.o \
                      $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -o $@ $(filter %.o,$^) $(CORE_LIBS) $(DPDK_LIBS)

$(BUILD)/perf/ring_gloo: perf/cluster/ring_gloo.cc
	@mkdir -p $(@D)
	$(Q)$(call say,CXX,$@)$(CXX) -std=c++17 $(OPT_FLAGS) -Wall -Wextra -Werror -o $@ $< -lgloo -pthread

# ---- checks ----------------------------------------------------------------
# The files that run per packet on a data core (the rest is control path).
DATA_PATH_SRCS := appliance/box_lcore.c appliance/box_txref.c appliance/ss/ss.c appliance/ss/ss.h appliance/ss/sum_scalar.c \
                  appliance/ss/sum_avx2.c appliance/ss/sum_avx512.c nic/nic_wire.c nic/nic_host.c \
                  nic/nic_nh_avx2.c nic/nic_nh_avx512.c
C_SOURCES = $(shell git ls-files --cached --others --exclude-standard '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]' -not -path './build/*')

lint: $(call obj,$(LIBPBOX_SRCS))
	@echo "lint: cppcheck"
	@cppcheck --quiet --error-exitcode=1 --enable=warning,style,performance,portability \
		--std=c11 --inline-suppr --suppress=missingIncludeSystem \
		--suppress=unusedStructMember --suppress=constParameterCallback \
		-D__x86_64__ -D__GNUC__ $(INCLUDES) $(filter-out %.bpf.c,$(C_SOURCES))
	@echo "lint: data-path files take no lock and no atomic"
	@! grep -nE 'pthread_(mutex|rwlock|spin)|rte_(spinlock|rwlock|atomic)|__atomic_|_Atomic|stdatomic|__sync_|sem_(wait|post)' $(DATA_PATH_SRCS)
	@echo "lint: layers (nic/ includes only nic/; the SS core no config/ and no DPDK)"
	@tests/lint-layers.sh
	@echo "lint: libpbox's files call only the files below them (LIBPBOX_LAYERS)"
	@tests/lint-calls.sh $(BUILD)/obj/worker $(LIBPBOX_LAYERS)
	@echo "lint: libpbox's functions at most 80 lines"
	@tests/lint-size.sh $(LIBPBOX_SRCS) worker/dpdk.c
	@echo "lint: clang-format"
	@clang-format --dry-run --Werror $(C_SOURCES)
	@echo "lint: the Python package's version is libpbox's (pbox.h)"
	@v=$$(sed -n 's/^#define PBOX_VERSION_\(MAJOR\|MINOR\) *\([0-9]*\)$$/\2/p' worker/include/pbox.h | \
		paste -sd.); grep -q "^__version__ = \"$$v\"$$" worker/python/pbox/__init__.py || \
		{ echo "lint: worker/python/pbox/__init__.py: __version__ is not $$v, pbox.h's"; exit 1; }

format:
	clang-format -i $(C_SOURCES)

docs: all
	config/gen-reference.sh $(BUILD) > config/REFERENCE.md
	worker/gen-capi.py > docs/c-api.md

check-docs: all
	@config/gen-reference.sh $(BUILD) | diff -u config/REFERENCE.md - >/dev/null || \
		{ echo "config/REFERENCE.md is out of date: run make docs"; exit 1; }
	@echo "docs: config/REFERENCE.md matches the schemas"
	@worker/gen-capi.py | diff -u docs/c-api.md - >/dev/null || \
		{ echo "docs/c-api.md is out of date: run make docs"; exit 1; }
	@echo "docs: docs/c-api.md matches worker/include/pbox.h"
	@tests/check-figures.py
	@echo "docs: the README's headline figures are docs/performance.md's"
	@tests/check-links.sh
	@tests/check-docs-selftest.sh

unit: all
	cd $(BUILD) && TEST_BUILD_DIR=$(CURDIR)/$(BUILD) TEST_SRC_DIR=$(CURDIR) ./tests/unit_tests

# The same unit tests built with AddressSanitizer and UndefinedBehaviorSanitizer
# (their own object tree under $(BUILD)/asan; the programs the CLI tests run
# are the normal build's). Any report fails the run.
SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
unit-asan: all
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/asan OPT_FLAGS="$(SAN_FLAGS)" CUDA=0 \
		$(BUILD)/asan/tests/unit_tests
	cd $(BUILD)/asan && TEST_BUILD_DIR=$(CURDIR)/$(BUILD) TEST_SRC_DIR=$(CURDIR) \
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
		./tests/unit_tests

# The same unit tests under ThreadSanitizer (their own tree under
# $(BUILD)/tsan), with no suppression: any report fails the run (TSan's
# exit status). Its tests run 5 to 15 times slower: their timeouts are
# tripled. TSAN_SUITE=libpbox and the like narrow it.
TSAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
unit-tsan: all
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/tsan OPT_FLAGS="$(TSAN_FLAGS)" CUDA=0 \
		$(BUILD)/tsan/tests/unit_tests
	cd $(BUILD)/tsan && TEST_BUILD_DIR=$(CURDIR)/$(BUILD) TEST_SRC_DIR=$(CURDIR) \
		TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1" CK_TIMEOUT_MULTIPLIER=3 \
		$(if $(TSAN_SUITE),CK_RUN_SUITE=$(TSAN_SUITE)) \
		./tests/unit_tests

# The wire parser under libFuzzer with ASan and UBSan, for FUZZ_SECONDS.
FUZZ_SECONDS ?= 30
FUZZ_CC      ?= clang
FUZZ_WIRE_SRCS := nic/nic_wire.c nic/nic_nh.c nic/nic_nh_avx2.c nic/nic_nh_avx512.c
$(BUILD)/fuzz/fuzz_wire: tests/fuzz/fuzz_wire.c $(FUZZ_WIRE_SRCS) nic/nic_wire.h nic/nic_nh.h
	@mkdir -p $(@D)
	$(Q)$(call say,FUZZ_CC,$@)$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		$(INCLUDES) tests/fuzz/fuzz_wire.c $(FUZZ_WIRE_SRCS) -o $@ $(SODIUM_LIBS)

# The text parsers likewise: the ranks' lines, the box's control lines and
# both configuration files, the input's first byte choosing (fuzz_ctl.h).
FUZZ_CTL_SRCS := worker/rank_proto.c nic/nic_ctl.c config/cfg.c config/cfg_box.c config/cfg_worker.c
$(BUILD)/fuzz/fuzz_ctl: tests/fuzz/fuzz_ctl.c tests/fuzz/fuzz_ctl.h $(FUZZ_CTL_SRCS) $(FUZZ_WIRE_SRCS) \
                        worker/rank_proto.h nic/nic_ctl.h config/cfg.h config/cfg_box.h config/cfg_worker.h
	@mkdir -p $(@D)
	$(Q)$(call say,FUZZ_CC,$@)$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		$(INCLUDES) tests/fuzz/fuzz_ctl.c $(FUZZ_CTL_SRCS) $(FUZZ_WIRE_SRCS) -o $@ $(INIH_LIBS) $(SODIUM_LIBS)

$(BUILD)/fuzz/gen_seeds: tests/fuzz/gen_seeds.c tests/fuzz/fuzz_ctl.h worker/rank_proto.c $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(CFLAGS_ALL) $(INCLUDES) $< worker/rank_proto.c -o $@ \
		$(BUILD)/lib/libpboxcore.a $(SODIUM_LIBS)

# Each target for FUZZ_SECONDS from gen_seeds' valid inputs; a crash, a
# sanitizer's report or a leak fails, its input left in $(BUILD)/fuzz.
FUZZ_RUN = $(BUILD)/fuzz/$(1) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
		-artifact_prefix=$(BUILD)/fuzz/ $(BUILD)/fuzz/corpus-$(1) 2>&1 | \
		grep -E 'stat::number_of_executed_units|ERROR|SUMMARY|crash-|leak-|Done' ; \
		test $${PIPESTATUS[0]} -eq 0
fuzz: $(BUILD)/fuzz/fuzz_wire $(BUILD)/fuzz/fuzz_ctl $(BUILD)/fuzz/gen_seeds
	@rm -rf $(BUILD)/fuzz/corpus-* && mkdir -p $(BUILD)/fuzz/corpus-fuzz_wire $(BUILD)/fuzz/corpus-fuzz_ctl
	@$(BUILD)/fuzz/gen_seeds $(BUILD)/fuzz/corpus-fuzz_wire $(BUILD)/fuzz/corpus-fuzz_ctl config/examples
	@echo "fuzz: nic_wire_parse for $(FUZZ_SECONDS) s"
	@$(call FUZZ_RUN,fuzz_wire)
	@echo "fuzz: the rank, control and configuration parsers for $(FUZZ_SECONDS) s"
	@$(call FUZZ_RUN,fuzz_ctl)

# pboxd on the emulated network: real DPDK ports on veth, needs root.
integration: all
	tests/net/integration.sh $(BUILD)
	tests/net/worker.sh $(BUILD)
	SHORT=1 perf/backprop/backprop.sh $(BUILD)
	tests/deploy/deploy.sh $(BUILD)

# The two README commands set the host up first (packages, hugepages), then
# run in a fresh make so that pkg-config sees what was just installed.
setup:
	@deploy/host-setup.sh

test: setup
	@$(MAKE) --no-print-directory test-run

# Each phase timed (wall seconds), the times summed up in one line at the
# end, so that CI's 90 minutes can be watched: RESULT test lint=... total=...
# A failing phase is named with its time.
TEST_TIMES = $(BUILD)/test-times
define test_phase
	@s=$$(date +%s); $(2) || { echo "test: $(1) failed after $$(( $$(date +%s) - s )) s"; exit 1; }; \
		echo "$(1)=$$(( $$(date +%s) - s ))" >> $(TEST_TIMES)
endef
test-run: all
	@: > $(TEST_TIMES)
	$(call test_phase,lint,$(MAKE) --no-print-directory lint)
	$(call test_phase,check_docs,$(MAKE) --no-print-directory check-docs)
	$(call test_phase,fuzz,$(MAKE) --no-print-directory fuzz)
	$(call test_phase,deps,tests/deps.sh $(BUILD))
	$(call test_phase,unit,$(MAKE) --no-print-directory unit)
	$(call test_phase,unit_asan,$(MAKE) --no-print-directory unit-asan)
	$(call test_phase,unit_tsan,$(MAKE) --no-print-directory unit-tsan)
	$(call test_phase,integration,$(MAKE) --no-print-directory integration)
	$(call test_phase,python,$(MAKE) --no-print-directory python-test)
	$(call test_phase,soak,$(MAKE) --no-print-directory soak DURATION=$(SOAK_TEST_SECONDS))
	@echo "RESULT test $$(paste -sd' ' $(TEST_TIMES)) total=$$(awk -F= '{ t += $$2 } END { print t }' $(TEST_TIMES))"

# Everything at once for DURATION seconds (tests/net/soak.sh): jobs coming
# and going on lossy links, ranks and pboxd killed, hostile traffic; every
# sum exact, the box empty after each cycle, pboxd's memory flat. make test
# runs SOAK_TEST_SECONDS of it.
DURATION ?= 180
SOAK_TEST_SECONDS ?= 180
soak: all
	DURATION=$(DURATION) tests/net/soak.sh $(BUILD)

# pbox from PyTorch: DDP under torchrun on the pbox backend against Gloo.
python-test: all wheel
	tests/python/run.sh $(BUILD)
	tests/python/cluster.sh $(BUILD)

# CUDA tensors, on a machine with an NVIDIA GPU (make worker suffices: no
# DPDK needed; the scripts also run from a build carried there).
test-gpu: worker
	@test -n "$(GPU_CHECK)" || { echo "test-gpu: needs nvcc (CUDA=auto found none)"; exit 1; }
	tests/gpu/run.sh $(BUILD)

perf-gpu: worker
	@test -n "$(GPU_CHECK)" || { echo "perf-gpu: needs nvcc (CUDA=auto found none)"; exit 1; }
	perf/gpu/gpu.sh $(BUILD)

perf-sum: $(BUILD)/perf/perf_sum
	$(BUILD)/perf/perf_sum $(PERF_ARGS)

# One core's summation service over compressed pushes against plain ones.
perf-compress: all $(BUILD)/perf/perf_comp
	$(BUILD)/perf/perf_comp
	perf/compress/compress.sh $(BUILD)

$(BUILD)/perf/perf_comp: $(call obj,perf/compress/perf_comp.c worker/decide.c worker/models.c) \
                         $(BUILD)/lib/libpboxcore.a
	@mkdir -p $(@D)
	$(Q)$(call say,LD,$@)$(CC) $(OPT_FLAGS) -o $@ $(filter %.o,$^) $(CORE_LIBS)

perf-cluster: all
	@test -n "$(RING_BIN)" || { echo "perf-cluster: needs Gloo: apt-get install libgloo-dev"; exit 1; }
	N=4 perf/cluster/cluster.sh $(BUILD)
	N=8 perf/cluster/cluster.sh $(BUILD)

# The sharded collectives (reduce-scatter, all-gather) against their t_opt
# and Gloo's ring, k = 0, 1, 2, n = 4 and 8
perf-shard: all
	@test -n "$(RING_BIN)" || { echo "perf-shard: needs Gloo: apt-get install libgloo-dev"; exit 1; }
	N=4 perf/shard/shard.sh $(BUILD)
	N=8 perf/shard/shard.sh $(BUILD)

perf-dataplane: all
	perf/dataplane/dataplane.sh $(BUILD)

perf-loss: all
	perf/loss/loss.sh $(BUILD)

perf-backprop: all
	perf/backprop/backprop.sh $(BUILD)

# all_reduce latency, 1 KiB to 16 MiB, through torch.distributed on
# loopback: the pbox backend against Gloo's (no root, no box)
perf-sweep: all
	perf/sweep/sweep.sh $(BUILD)

# the same sweep on the emulated cluster (root): Gloo, pbox's SS_GPUs
# alone, and pbox through the box, on the same shaped links (B, K)
perf-sweep-cluster: all
	perf/sweep/cluster.sh $(BUILD)

# Real models (torchvision) trained through the box against Gloo: DDP on
# the pbox backend, the hook, pbox.torch.ScheduledOptimizer (MODELS, B).
perf-train: all
	perf/train/train.sh $(BUILD)

perf-tune: all
	perf/tune/tune.sh $(BUILD)

perf-scale: all
	perf/scale/scale.sh $(BUILD)

demo: setup
	@$(MAKE) --no-print-directory demo-run

demo-run: all
	tests/net/demo.sh $(BUILD)

# Installing on an existing host (the image does this into its root):
#   make install [PREFIX=/usr/local] [DESTDIR=]   then pbox-setup, systemctl
#   make uninstall (same PREFIX, DESTDIR; /etc/pbox is left)
PREFIX  ?= /usr/local
DESTDIR ?=
UNITDIR ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
INSTALLED := $(PREFIX)/bin/pboxd $(PREFIX)/bin/pboxctl $(PREFIX)/bin/pbox-worker \
	$(PREFIX)/sbin/pbox-setup $(PREFIX)/lib/libpbox.so.3.0 $(PREFIX)/lib/libpbox.so.3 \
	$(PREFIX)/lib/libpbox.so $(PREFIX)/lib/libpbox.a $(PREFIX)/lib/pbox-3 $(PREFIX)/include/pbox.h \
	$(UNITDIR)/pboxd.service $(UNITDIR)/pbox-setup.service $(PREFIX)/share/doc/pbox \
	$(PY_SITE)/pbox

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/lib \
		$(DESTDIR)$(PREFIX)/include $(DESTDIR)$(UNITDIR) $(DESTDIR)/etc/pbox \
		$(DESTDIR)$(PREFIX)/share/doc/pbox/examples
	install -m 0755 $(BUILD)/bin/pboxd $(BUILD)/bin/pboxctl $(BUILD)/bin/pbox-worker $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 deploy/pbox-setup $(DESTDIR)$(PREFIX)/sbin/
	install -m 0755 $(LIBPBOX_SO) $(DESTDIR)$(PREFIX)/lib/
	install -d $(DESTDIR)$(PREFIX)/lib/pbox-3
	install -m 0755 $(MODULE_DIR)/*.so $(DESTDIR)$(PREFIX)/lib/pbox-3/
	ln -sf libpbox.so.3.0 $(DESTDIR)$(PREFIX)/lib/libpbox.so.3
	ln -sf libpbox.so.3 $(DESTDIR)$(PREFIX)/lib/libpbox.so
	install -m 0644 $(BUILD)/lib/libpbox.a $(DESTDIR)$(PREFIX)/lib/
	install -m 0644 worker/include/pbox.h $(DESTDIR)$(PREFIX)/include/
	install -d $(DESTDIR)$(PY_SITE)/pbox
	install -m 0644 $(PY_SRCS) $(DESTDIR)$(PY_SITE)/pbox/
	for u in pboxd pbox-setup; do \
		sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@SBINDIR@|$(PREFIX)/sbin|g' deploy/systemd/$$u.service \
			>$(DESTDIR)$(UNITDIR)/$$u.service && chmod 0644 $(DESTDIR)$(UNITDIR)/$$u.service; \
	done
	install -m 0644 README.md docs/*.md config/REFERENCE.md $(DESTDIR)$(PREFIX)/share/doc/pbox/
	install -m 0644 config/examples/*.ini $(DESTDIR)$(PREFIX)/share/doc/pbox/examples/
	$(if $(DESTDIR),,-ldconfig)
	@echo "installed under $(DESTDIR)$(PREFIX); next: write /etc/pbox/box.ini, then"
	@echo "  systemctl daemon-reload && systemctl enable --now pboxd   (pbox-setup runs first)"

uninstall:
	$(if $(DESTDIR),,-systemctl disable --now pboxd.service pbox-setup.service 2>/dev/null)
	rm -rf $(addprefix $(DESTDIR),$(INSTALLED))
	$(if $(DESTDIR),,-systemctl daemon-reload 2>/dev/null)

# The appliance image (deploy/mkimage.sh) and its boot test in qemu
# (deploy/boot-test.sh), booted by BIOS, by UEFI, and by UEFI with Secure
# Boot on; both need root.
# IMAGE_DIR holds the disk, kernel, initrd and package manifest.
IMAGE_DIR ?= $(BUILD)/image

image: all
	deploy/mkimage.sh $(BUILD) $(IMAGE_DIR)

boot-test: all
	deploy/boot-test.sh $(BUILD) $(IMAGE_DIR)
	FIRMWARE=uefi deploy/boot-test.sh $(BUILD) $(IMAGE_DIR)
	FIRMWARE=uefi-sb deploy/boot-test.sh $(BUILD) $(IMAGE_DIR)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
