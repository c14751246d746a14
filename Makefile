# kforcing build. `make` builds bin/kf (CPU backend, MPI when mpicc exists);
# `make CUDA=1` adds kernels/cuda (nvcc, cuBLAS, NCCL); `make test` runs every
# test and ends with "N passed, N failed"; `make test-cuda` needs a GPU.
# `make EMU=1` builds the CUDA backend for the CPU emulation harness
# (kernels/cuda/emu, docs/cuda_emulation.md) into build-emu/ (with SAN=...
# sanitizer flags: build-emu-asan/); it never replaces bin/kf.
# Each configuration has its own object directory (build/, build-cuda/,
# build-emu/), so `make` and `make CUDA=1` alternate without `make clean`;
# bin/kf is a copy of the last requested configuration's $(BUILD)/kf.
CC       ?= gcc
NVCC     ?= /usr/local/cuda/bin/nvcc
CUDA_HOME ?= /usr/local/cuda
# sm_90a: Hopper's arch-specific instructions (wgmma, TMA) are only reachable there
CUDA_ARCH ?= -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_80,code=sm_80
OPT      ?= -O3 -march=x86-64-v2
CUDA     ?= 0
EMU      ?= 0
SAN      ?=
ifeq ($(EMU),1)
BUILD    ?= build-emu$(if $(SAN),-asan)
BIN      ?= $(BUILD)/kf
else ifeq ($(CUDA),1)
BUILD    ?= build-cuda
else
BUILD    ?= build
endif
BIN      ?= bin/kf
MPI      ?= $(shell command -v mpicc >/dev/null 2>&1 && echo 1 || echo 0)

CPPFLAGS += -I. -D_GNU_SOURCE -MMD -MP
CFLAGS   += -std=c11 $(OPT) $(SAN) -g -Wall -Wextra -Wno-unused-parameter -Wpointer-arith -fopenmp -pthread
# WERROR=1 (CI): every warning fails the build, at any OPT and sanitizer
WERROR   ?= 0
ifeq ($(WERROR),1)
CFLAGS   += -Werror
endif
LDLIBS   += -lyaml -llmdb -larchive -lz -lopenblas -lm -lpthread -fopenmp

ifeq ($(MPI),1)
CPPFLAGS += -DKF_MPI $(shell mpicc --showme:compile)
LDLIBS   += $(shell mpicc --showme:link)
endif

# trainer/ and bench/ by concern (docs/architecture.md "Components"); bench/cli/
# holds the `kf bench` and `kf plot` commands, linked into kf like every command
SRC := $(wildcard common/*.c tokenize/*.c pipeline/*.c kernels/*.c kernels/cpu/*.c trainer/*/*.c jobs/*.c bench/cli/*.c bench/plot/*.c bench/roofline/*.c)
OBJ := $(SRC:%.c=$(BUILD)/%.o)

CU_SRC   := $(wildcard kernels/cuda/*.cu bench/cli/*.cu)
ifeq ($(EMU),1)
# The same .cu files as host C++ against kernels/cuda/emu/include's CUDA headers.
EMU_DIR  := kernels/cuda/emu
OBJ      += $(CU_SRC:%.cu=$(BUILD)/%.o) $(patsubst %,$(BUILD)/$(EMU_DIR)/%.o,emu_runtime emu_blas emu_nccl)
CPPFLAGS += -DKF_CUDA -I$(EMU_DIR)/include
CXXFLAGS_EMU = -std=c++17 $(OPT) -g -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas -Wno-sign-compare $(filter -fsanitize% -fno-omit% -Werror,$(CFLAGS)) -pthread
LDLIBS   += -lstdc++
else ifeq ($(CUDA),1)
OBJ      += $(CU_SRC:%.cu=$(BUILD)/%.o)
CPPFLAGS += -DKF_CUDA -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt -lnccl -lstdc++
NVFLAGS  ?= -O3 -std=c++17 $(CUDA_ARCH) -lineinfo -Xcompiler -fPIC -I. -DKF_CUDA -MMD -MP
endif

TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all test test-build test-isa test-loaded test-asan test-tsan test-cuda test-fuzz fuzz tests clean bench cuda-check emu-tests FORCE
all: $(BIN)

$(BUILD)/libkf.a: $(OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/kf: $(BUILD)/kf.o $(BUILD)/libkf.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $(BUILD)/kf.o $(BUILD)/libkf.a $(LDLIBS)

# bin/kf follows the configuration asked for last, even when that one's
# $(BUILD)/kf is older than the copy there (hence FORCE and the compare).
ifneq ($(BIN),$(BUILD)/kf)
$(BIN): $(BUILD)/kf FORCE
	@mkdir -p $(@D)
	@cmp -s $< $@ || { cp $< $@.tmp && mv $@.tmp $@ && echo "$@: copied from $<"; }
endif

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

ifeq ($(EMU),1)
# kept: deleted as intermediates, they would be remade (and every .cu
# recompiled) on the next run, since the .d files name them
.SECONDARY: $(CU_SRC:%.cu=$(BUILD)/%.cu.cc) $(BUILD)/$(EMU_DIR)/emu_selftest.cu.cc \
	$(BUILD)/tests/unit/test_cuda_mma.cu.cc $(BUILD)/tests/unit/test_cuda_graph.cu.cc \
	$(BUILD)/tests/unit/test_cuda_decode_ref.cu.cc

# kernels with deliberate bugs the harness must report (tests/scripts/test_gpu_emu.sh)
$(BUILD)/emu_selftest: $(BUILD)/$(EMU_DIR)/emu_selftest.o $(BUILD)/libkf.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkf.a $(LDLIBS)

# the harness's model of stream capture (CUDA graphs)
$(BUILD)/tests/test_cuda_graph: $(BUILD)/tests/unit/test_cuda_graph.o $(BUILD)/libkf.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkf.a $(LDLIBS)

$(BUILD)/%.cu.cc: %.cu $(EMU_DIR)/cu2cc.sh
	@mkdir -p $(@D)
	sh $(EMU_DIR)/cu2cc.sh $< $@

$(BUILD)/%.o: $(BUILD)/%.cu.cc
	$(CXX) $(CPPFLAGS) $(CXXFLAGS_EMU) -c $< -o $@

$(BUILD)/%.o: %.cc
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS_EMU) -c $< -o $@
else
$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@
endif

# The test programs written in CUDA, built by nvcc (CUDA=1: the hardware's
# instructions) or as host C++ (EMU=1: the emulated ones): the PTX wrappers
# (cuda_mma.cuh) against the PTX ISA's layouts, and attn_decode bitwise against
# the kernels it replaced (kept in the test alone)
CU_TESTS := tests/test_cuda_mma tests/test_cuda_decode_ref
$(CU_TESTS:%=$(BUILD)/%): $(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(BUILD)/libkf.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libkf.a $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libkf.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libkf.a $(LDLIBS)

tests: $(BIN) $(TEST_BIN)

# Benchmarks, never part of make test (docs/architecture.md "Components"):
# the programs bench/*.c are built against libkf.a (the `kf bench` commands
# in bench/cli/ are in libkf.a itself), then each benchmark in BENCHES runs
# in turn (make bench BENCHES="kernels train" for a subset).
# (bench_libs is built on request only: it links libraries nothing else uses)
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(filter-out bench/bench_libs.c,$(wildcard bench/*.c)))
BENCHES ?= kernels train tokenize shards
$(BUILD)/bench/%: bench/%.c $(BUILD)/libkf.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libkf.a $(LDLIBS)
# the libraries bench_libs measures kforcing's own code against
$(BUILD)/bench/bench_libs: LDLIBS += -ljansson -lcrypto -lgd

bench: $(BIN) $(BENCH_BIN)
	$(if $(filter kernels,$(BENCHES)),$(BUILD)/bench/bench_kernels_cpu)
	$(if $(filter linear,$(BENCHES)),$(BUILD)/bench/bench_linear_packed)
	$(if $(filter train,$(BENCHES)),$(BIN) bench train configs/tiny.yaml)
	$(if $(filter tokenize,$(BENCHES)),KF_BIN=$(BIN) bench/tokenize.sh)
	$(if $(filter shards,$(BENCHES)),KF_BIN=$(BIN) bench/shards.sh)

# The CPU suite; CUDA code is compiled by nvcc (not run) so a broken .cu fails
# CI here, and run under the CPU emulation harness (tests/scripts/test_gpu_emu.sh).
# Everything the suite runs: the test programs, the CUDA compile check and the
# emulated-GPU programs (make test, test-isa and test-loaded run the same suite).
test-build: tests
	@if [ -x $(NVCC) ]; then $(MAKE) --no-print-directory cuda-check; else echo "nvcc not found: CUDA backend not compiled"; fi
	$(MAKE) --no-print-directory emu-tests
# make's -j (CI: make -j2): how many tests, and fuzzers, run side by side
JOBS = $(or $(patsubst -j%,%,$(filter -j%,$(MAKEFLAGS))),1)
test: test-build
	KF_TEST_JOBS=$(JOBS) tests/run.sh $(T)

# The GPU test programs under the emulation harness, plain and with ASan.
# (ASan at -O2: the emulated kernels, the batch-invariant GEMM above all, ran
# 4x slower at -O1 (test_cuda_ops: 731 s of CPU, against 180 s), and this
# build of the library is quicker than at -O3)
EMU_TESTS := tests/test_cuda_ops tests/test_cuda_train
emu-tests:
	$(MAKE) --no-print-directory EMU=1 $(addprefix build-emu/,$(EMU_TESTS) tests/test_cuda_limits tests/test_cuda_mma tests/test_cuda_graph tests/test_cuda_decode_ref tests/test_kernels_table kf emu_selftest)
	$(MAKE) --no-print-directory EMU=1 SAN="-fsanitize=address -fno-omit-frame-pointer" \
		OPT="-O2 -march=x86-64-v2" $(addprefix build-emu-asan/,$(EMU_TESTS))

# Sanitizers, each in its own build directory: the whole CPU suite under
# ASan + UBSan (any report fails the test that triggered it; left out: the
# long convergence runs (test_kforcing_joint, test_trainer_learns and
# test_convergence, 20+ minutes each under ASan, and test_convergence_family,
# three chains like test_convergence's; the other trainer tests run the same
# code); the fault campaign (its schedules take 3-5x longer under ASan, and
# test_jobs_local and test_trainer_kill run its fault paths); the
# emulated GPU tests, which make emu-tests already runs under ASan; the
# build-system test; the GPU session's dry run, which runs build-cuda/kf, not
# the ASan build; the synthetic languages' test, python only), and the
# threaded parts (shard builder, data loader, overlapped all-reduce) under
# TSan. tests/sanitizers/ holds the suppressions for third-party libraries.
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
# fast_unwind_on_malloc=0: Open MPI's plugins have no frame pointers, so the
# fast unwinder leaves their allocations as "<unknown module>", which the
# lsan.supp entries for them cannot match (mpirun -np 2 over TCP).
SAN_ENV := ASAN_OPTIONS=abort_on_error=0:detect_leaks=1:check_initialization_order=1:fast_unwind_on_malloc=0 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	TSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/tsan.supp:halt_on_error=1:second_deadlock_stack=1
TSAN_TESTS := test_pipeline test_trainer_loader test_trainer_mpi_overlap test_trainer_zero1
test-asan:
	$(MAKE) --no-print-directory BUILD=build-asan BIN=build-asan/kf OPT=-O1 SAN="$(ASAN_FLAGS)" tests
	$(SAN_ENV) KF_TEST_EXCLUDE="test_kforcing_joint test_trainer_learns test_convergence test_convergence_family test_jobs_faults test_gpu_emu test_build_alternate test_gpu_session_dry test_synth_lang" KF_BIN=build-asan/kf \
		KF_TEST_BUILD=build-asan KF_TEST_JOBS=$(JOBS) tests/run.sh $(T)
test-tsan:
	$(MAKE) --no-print-directory BUILD=build-tsan BIN=build-tsan/kf OPT=-O1 SAN="$(TSAN_FLAGS)" tests
	$(SAN_ENV) KF_BIN=build-tsan/kf KF_TEST_BUILD=build-tsan KF_TEST_JOBS=$(JOBS) tests/run.sh $(or $(T),$(TSAN_TESTS))

# libFuzzer harnesses (tests/fuzz/, docs/fuzzing.md): the library built by
# clang with ASan + UBSan and libFuzzer's coverage into build-fuzz/ (never
# bin/kf); `make test-fuzz FUZZ_SECONDS=N` replays the committed corpus of
# each harness and then fuzzes it for N seconds, one check per harness.
FUZZ_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
# the parsers only: kernels/ needs _Float16, which clang 14 lacks on x86-64
FUZZ_LIB_SRC := $(wildcard common/*.c tokenize/*.c pipeline/*.c jobs/*.c) trainer/infer/quality.c trainer/infer/prefixes.c trainer/train/checkpoint.c
FUZZ_SECONDS ?= 60
fuzz:
	$(MAKE) --no-print-directory CC=clang MPI=0 BUILD=build-fuzz OPT=-O1 SAN="$(FUZZ_FLAGS)" \
		$(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/fuzz/%)
test-fuzz: fuzz
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(JOBS) tests/fuzz/run.sh $(T)

$(BUILD)/libkf-fuzz.a: $(FUZZ_LIB_SRC:%.c=$(BUILD)/%.o)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_util.h $(BUILD)/libkf-fuzz.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/libkf-fuzz.a $(LDLIBS)

# The whole CPU suite with the kernels forced to one SIMD level (base, avx2,
# avx512, vnni: at most what this CPU has), e.g. make test-isa ISA=avx2.
test-isa: test-build
	KF_CPU_ISA=$(ISA) KF_TEST_JOBS=$(JOBS) tests/run.sh $(T)

# The suite RUNS times with every core busy beside it (stress-ng): a test
# that fails there depends on timing. make test-loaded RUNS=5 [T=filter]
RUNS ?= 5
test-loaded: test-build
	tests/run_loaded.sh $(RUNS) $(T)

# kf and the test programs that need a GPU, built by nvcc: compiled in CI,
# run by make test-cuda (scripts/gpu_session.sh runs each under its own limit)
GPU_TESTS := $(CU_TESTS) tests/test_cuda_ops tests/test_cuda_train tests/test_cuda_limits
cuda-check:
	$(MAKE) --no-print-directory CUDA=1 BUILD=build-cuda BIN=build-cuda/kf build-cuda/kf $(GPU_TESTS:%=build-cuda/%)

test-cuda: cuda-check
	KF_TEST_CUDA=1 KF_BIN=build-cuda/kf KF_TEST_BUILD=build-cuda tests/run.sh cuda

clean:
	rm -rf build build-cuda build-emu build-emu-asan build-asan build-tsan build-fuzz bin

# the test programs' own .d files (gcc -MMD next to each binary), so that
# editing tests/test.h or a fixture header rebuilds the tests that include it
-include $(OBJ:.o=.d) $(BUILD)/kf.d $(wildcard $(BUILD)/fuzz/*.d) $(TEST_BIN:=.d) \
  $(CU_TESTS:tests/%=$(BUILD)/tests/unit/%.d)
