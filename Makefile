# llm3d build. `make` builds build/train (CPU always; CUDA too where nvcc and
# the CUDA libraries are found). `make test` builds and runs every test.
# Every .c file under common/ kernels/cpu/ model/ parallel/ data/ checkpoint/
# train/ is part of the library; tests/test_*.c are one binary each.

CC      ?= gcc
CFLAGS  ?= -O3
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
# --- Open MPI: launches and connects the ranks of a multi-rank run (parallel/comm_mpi.c);
#     without it only the one-rank grid is built
MPICC := $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
  CFLAGS += -DLLM3D_MPI $(shell $(MPICC) --showme:compile 2>/dev/null)
  LDLIBS += $(shell $(MPICC) --showme:link 2>/dev/null)
else
  $(info llm3d: Open MPI not found (apt-get install libopenmpi-dev openmpi-bin); building the one-rank path only)
endif
# --- NCCL: GPU collectives when each rank has its own GPU (parallel/comm_nccl.c); needs CUDA and MPI
ifneq ($(NVCC),)
  NCCL_HEADER := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
  NCCL_LIB := $(firstword $(wildcard $(CUDA_HOME)/lib64/libnccl.so $(CUDA_HOME)/lib/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib/aarch64-linux-gnu/libnccl.so))
  ifneq ($(and $(NCCL_HEADER),$(NCCL_LIB),$(MPICC)),)
    CFLAGS += -DLLM3D_NCCL -I$(dir $(NCCL_HEADER))
    LDLIBS += -L$(dir $(NCCL_LIB)) -Wl,-rpath,$(dir $(NCCL_LIB)) -lnccl
    $(info llm3d: NCCL found ($(NCCL_HEADER)))
  else
    $(info llm3d: building without NCCL (nccl.h: $(if $(NCCL_HEADER),found,missing), libnccl.so: $(if $(NCCL_LIB),found,missing), mpicc: $(if $(MPICC),found,missing)); GPU ranks will talk through MPI)
  endif
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
# programs that run under mpirun (tests/test_mpi.sh): only with Open MPI
ifneq ($(MPICC),)
  TEST_BIN += $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(wildcard tests/mpi/*.c))
endif
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

test: all
	@BUILD=$(BUILD) tests/run.sh

bench: all
	@bench/run.sh

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
