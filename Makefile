# kforcing build. `make` builds bin/kf (CPU backend, MPI when mpicc exists);
# `make CUDA=1` adds kernels/cuda (nvcc, cuBLAS, NCCL); `make test` runs every
# test and ends with "N passed, N failed"; `make test-cuda` needs a GPU.
CC       ?= gcc
NVCC     ?= /usr/local/cuda/bin/nvcc
CUDA_HOME ?= /usr/local/cuda
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80
BUILD    ?= build
BIN      ?= bin/kf
OPT      ?= -O3 -march=x86-64-v2
CUDA     ?= 0
MPI      ?= $(shell command -v mpicc >/dev/null 2>&1 && echo 1 || echo 0)

SAN      ?=
CPPFLAGS += -I. -D_GNU_SOURCE -MMD -MP
CFLAGS   += -std=c11 $(OPT) $(SAN) -g -Wall -Wextra -Wno-unused-parameter -fopenmp -pthread
LDLIBS   += -lyaml -llmdb -larchive -lz -lopenblas -lm -lpthread -fopenmp

ifeq ($(MPI),1)
CPPFLAGS += -DKF_MPI $(shell mpicc --showme:compile)
LDLIBS   += $(shell mpicc --showme:link)
endif

SRC := $(wildcard common/*.c tokenize/*.c pipeline/*.c kernels/*.c kernels/cpu/*.c trainer/*.c jobs/*.c)
OBJ := $(SRC:%.c=$(BUILD)/%.o)

ifeq ($(CUDA),1)
CU_SRC   := $(wildcard kernels/cuda/*.cu)
OBJ      += $(CU_SRC:%.cu=$(BUILD)/%.o)
CPPFLAGS += -DKF_CUDA -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt -lnccl -lstdc++
NVFLAGS  ?= -O3 -std=c++17 $(CUDA_ARCH) -lineinfo -Xcompiler -fPIC -I. -DKF_CUDA
endif

TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all test test-isa test-asan test-tsan test-cuda tests clean bench cuda-check
all: $(BIN)

$(BUILD)/libkf.a: $(OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# whole-archive: kf.c reaches the commands only through weak symbols, which
# do not pull archive members in by themselves.
$(BIN): $(BUILD)/kf.o $(BUILD)/libkf.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $(BUILD)/kf.o -Wl,--whole-archive $(BUILD)/libkf.a -Wl,--no-whole-archive $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libkf.a
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< $(BUILD)/libkf.a $(LDLIBS)

tests: $(BIN) $(TEST_BIN)

# The CPU suite; CUDA code is compiled (not run) so a broken .cu fails CI here.
test: tests
	@if [ -x $(NVCC) ]; then $(MAKE) --no-print-directory cuda-check; else echo "nvcc not found: CUDA backend not compiled"; fi
	tests/run.sh $(T)

# Sanitizers, each in its own build directory: the whole CPU suite under
# ASan + UBSan (any report fails the test that triggered it; the two long
# convergence runs are left out, see tests/run.sh), and the
# threaded parts (shard builder, data loader, overlapped all-reduce) under
# TSan. tests/sanitizers/ holds the suppressions for third-party libraries.
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
TSAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
SAN_ENV := ASAN_OPTIONS=abort_on_error=0:detect_leaks=1:check_initialization_order=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	TSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/tsan.supp:halt_on_error=1:second_deadlock_stack=1
TSAN_TESTS := test_pipeline test_trainer_loader test_trainer_mpi_overlap
test-asan:
	$(MAKE) --no-print-directory BUILD=build-asan BIN=build-asan/kf OPT=-O1 SAN="$(ASAN_FLAGS)" tests
	$(SAN_ENV) KF_TEST_EXCLUDE="test_kforcing_joint test_trainer_learns" KF_BIN=build-asan/kf \
		KF_TEST_BUILD=build-asan tests/run.sh $(T)
test-tsan:
	$(MAKE) --no-print-directory BUILD=build-tsan BIN=build-tsan/kf OPT=-O1 SAN="$(TSAN_FLAGS)" tests
	$(SAN_ENV) KF_BIN=build-tsan/kf KF_TEST_BUILD=build-tsan tests/run.sh $(or $(T),$(TSAN_TESTS))

# The whole CPU suite with the kernels forced to one SIMD level (base, avx2,
# avx512, vnni: at most what this CPU has), e.g. make test-isa ISA=avx2.
test-isa: tests
	KF_CPU_ISA=$(ISA) tests/run.sh $(T)

cuda-check:
	$(MAKE) --no-print-directory CUDA=1 BUILD=build-cuda BIN=build-cuda/kf build-cuda/kf

test-cuda:
	$(MAKE) CUDA=1 BUILD=build-cuda BIN=build-cuda/kf build-cuda/kf $(patsubst $(BUILD)/%,build-cuda/%,$(TEST_BIN))
	KF_TEST_CUDA=1 KF_BIN=build-cuda/kf KF_TEST_BUILD=build-cuda tests/run.sh cuda

clean:
	rm -rf build build-cuda build-asan build-tsan bin

-include $(OBJ:.o=.d) $(BUILD)/kf.d
