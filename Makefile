# llm3d build. `make` builds build/train (CPU always; CUDA too where nvcc and
# the CUDA libraries are found). `make test` builds and runs every test.
# Every .c file under common/ kernels/cpu/ model/ parallel/ data/ checkpoint/
# train/ is part of the library; tests/test_*.c are one binary each.

CC      ?= gcc
CFLAGS  ?= -O3
# SANITIZE=1 (what `make asan` passes): clang, AddressSanitizer + UBSan, and
# libFuzzer's coverage hooks, so the fuzz harnesses link the same objects; CPU only.
ifeq ($(SANITIZE),1)
  CC      := clang
  CFLAGS  := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all -fsanitize=fuzzer-no-link
  NO_CUDA := 1
endif
CFLAGS  += -std=c11 -Wall -Wextra -Werror -fopenmp -D_GNU_SOURCE -MMD -MP
LDLIBS  := -lm -fopenmp
BUILD   ?= build
.DEFAULT_GOAL := all

# --- BLAS: OpenBLAS where it is installed, else the naive loops in kernels/cpu/matmul.c
BLAS_HEADER := $(firstword $(wildcard /usr/include/x86_64-linux-gnu/cblas.h /usr/include/aarch64-linux-gnu/cblas.h /usr/include/cblas.h /usr/include/openblas/cblas.h))
# OpenBLAS's OpenMP build shares llm3d's OpenMP threads; the default pthread
# build spins its own beside them and halves the speed on a small machine.
OPENBLAS_OMP := $(wildcard /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 /usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0)
ifneq ($(BLAS_HEADER),)
  CFLAGS += -DLLM3D_BLAS
  ifneq ($(OPENBLAS_OMP),)
    LDLIBS += $(firstword $(OPENBLAS_OMP)) -Wl,-rpath,$(dir $(firstword $(OPENBLAS_OMP)))
  else
    LDLIBS += -lopenblas
  endif
else
  $(info llm3d: OpenBLAS not found (apt-get install libopenblas-dev); CPU matmuls use the slow naive loops)
endif

# --- CUDA: compiled where nvcc exists; NO_CUDA=1 skips it
NVCC     ?= $(shell command -v nvcc 2>/dev/null)
CUDA_HOME ?= $(if $(NVCC),$(abspath $(dir $(NVCC))/..),)
ifeq ($(NO_CUDA),1)
  NVCC :=
endif
CUDA_SRC := $(wildcard kernels/cuda/*.cu)
ifeq ($(CUDA_SRC),)
  NVCC :=
endif
# the libraries the CUDA backend needs beside nvcc: say which are missing, build the CPU path
ifneq ($(NVCC),)
  CUDA_MISSING := $(strip $(foreach f,include/cublasLt.h lib64/libcublasLt.so lib64/libcublas.so lib64/libcudart.so,$(if $(wildcard $(CUDA_HOME)/$(f)),,$(f))))
  ifneq ($(CUDA_MISSING),)
    $(info llm3d: nvcc found, but $(CUDA_HOME) lacks $(CUDA_MISSING): building the CPU path only (install cuBLAS there, or set CUDA_HOME))
    NVCC :=
  endif
endif
ifneq ($(NVCC),)
  CUDA_ARCH ?= -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=compute_80
  NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) --expt-relaxed-constexpr -Xcompiler -Wall,-Werror,-fPIC
  CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o)
  CFLAGS   += -DLLM3D_CUDA -I$(CUDA_HOME)/include
  LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
  $(info llm3d: building the CUDA backend with $(NVCC))
endif
# GPU-only programs, built on demand by tests/gpu/run.sh (`make gpu`), never by `make`
# or `make test` (CI has no GPU): tests/gpu/test_*.c and bench/gpu/bench_*.c
GPU_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/gpu/%,$(wildcard tests/gpu/test_*.c)) \
           $(patsubst bench/gpu/%.c,$(BUILD)/gpu/%,$(wildcard bench/gpu/bench_*.c))
.PHONY: gpu
ifneq ($(NVCC),)
gpu: $(GPU_BIN)
else
gpu:
	@echo "error: make gpu needs nvcc and the CUDA libraries (none found, or NO_CUDA=1)"; exit 1
endif
$(BUILD)/gpu/test_%: $(BUILD)/obj/tests/gpu/test_%.o $(BUILD)/libllm3d.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/gpu/bench_%: $(BUILD)/obj/bench/gpu/bench_%.o $(BUILD)/libllm3d.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

LIB_SRC  := $(wildcard common/*.c kernels/*.c kernels/cpu/*.c model/*.c parallel/*.c data/*.c checkpoint/*.c train/*.c)
LIB_SRC  := $(filter-out train/main.c,$(LIB_SRC))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CUDA_OBJ)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all test bench clean
all: $(BUILD)/train $(TEST_BIN) $(BENCH_BIN)

# objects live under $(BUILD)/obj/ so that train/*.o never collide with the $(BUILD)/train binary
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/bench/%.o: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/kernels/cuda/%.o: kernels/cuda/%.cu kernels/*.h kernels/cuda/*.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/libllm3d.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/train: $(BUILD)/obj/train/main.o $(BUILD)/libllm3d.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libllm3d.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libllm3d.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# --- sanitizers and fuzzing (tests/fuzz/README.md)
# `make asan` builds the whole tree into $(ASAN_BUILD) with SANITIZE=1, plus the
# libFuzzer harnesses tests/fuzz/fuzz_*.c and the seed maker; `make test` runs
# every test under it too (tests/test_asan.sh) and the harnesses briefly
# (tests/test_fuzz.sh); `make fuzz FUZZ_S=N` runs each harness N seconds.
ASAN_BUILD ?= build-asan
FUZZ_S ?= 60
NPROC := $(shell nproc 2>/dev/null || echo 2)
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c)) $(BUILD)/fuzz/make_seeds
.PHONY: asan fuzz fuzz-bin
fuzz-bin: $(FUZZ_BIN)
$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/round_trip.o $(BUILD)/libllm3d.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)
$(BUILD)/fuzz/make_seeds: $(BUILD)/obj/tests/fuzz/make_seeds.o $(BUILD)/libllm3d.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
asan:
	@command -v clang >/dev/null && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1 || \
	  { printf 'error: make asan needs clang and its libFuzzer/ASan runtimes\n  hint: run scripts/setup.sh (apt: clang libclang-rt-dev libomp-dev)\n'; exit 1; }
	@$(MAKE) --no-print-directory SANITIZE=1 BUILD=$(ASAN_BUILD) $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC)) all fuzz-bin
fuzz: asan
	@BUILD=$(ASAN_BUILD) tests/fuzz/run.sh $(FUZZ_S)

test: all asan
	@BUILD=$(BUILD) ASAN_BUILD=$(ASAN_BUILD) tests/run.sh

bench: all
	@bench/run.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
