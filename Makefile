# llm3d build. `make` builds build/train (CPU always; CUDA too where nvcc and
# the CUDA libraries are found). `make test` builds and runs every test.
# Every .c file under common/ kernels/cpu/ comm/ model/ parallel/ doctor/ data/
# checkpoint/ train/ is part of the library; tests/test_*.c are one binary each.
#
# The idea: the flags llm3d needs live in LLM3D_* variables that the command
# line does not replace; CFLAGS, CPPFLAGS, LDFLAGS, LDLIBS and NVCCFLAGS are
# the user's (`make CFLAGS="-O0 -g"` changes only optimisation and debug).
# Every object and program depends on $(BUILD)/config.stamp, a one-line file
# holding the effective configuration (compilers, all flags, BLAS, CUDA), which
# is rewritten only when that configuration changes: `make NO_CUDA=1` then
# `make` rebuilds what the switch changed instead of linking stale objects.
# Another configuration can live beside the default one: `make BUILD=build-dbg`.

CC      ?= gcc
CFLAGS  ?= -O3
# SANITIZE=1 (what `make asan` passes): clang, AddressSanitizer + UBSan, and
# libFuzzer's coverage hooks, so the fuzz harnesses link the same objects; CPU only.
ifeq ($(SANITIZE),1)
  CC      := clang
  CFLAGS  := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all -fsanitize=fuzzer-no-link
  NO_CUDA := 1
endif
BUILD   ?= build
.DEFAULT_GOAL := all
# required: the command line cannot remove these (see above)
LLM3D_CFLAGS := -std=c11 -Wall -Wextra -Werror -fopenmp -D_GNU_SOURCE -MMD -MP
LLM3D_LDLIBS := -lm -fopenmp

# --- BLAS: OpenBLAS where it is installed, else the naive loops in kernels/cpu/matmul.c
BLAS_HEADER := $(firstword $(wildcard /usr/include/x86_64-linux-gnu/cblas.h /usr/include/aarch64-linux-gnu/cblas.h /usr/include/cblas.h /usr/include/openblas/cblas.h))
# OpenBLAS's OpenMP build shares llm3d's OpenMP threads; the default pthread
# build spins its own beside them and halves the speed on a small machine.
OPENBLAS_OMP := $(wildcard /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0 /usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0)
ifneq ($(BLAS_HEADER),)
  LLM3D_CFLAGS += -DLLM3D_BLAS
  ifneq ($(OPENBLAS_OMP),)
    LLM3D_LDLIBS += $(firstword $(OPENBLAS_OMP)) -Wl,-rpath,$(dir $(firstword $(OPENBLAS_OMP)))
  else
    LLM3D_LDLIBS += -lopenblas
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
  CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=compute_80
  NVCCFLAGS ?= -O3
  LLM3D_NVCCFLAGS := -std=c++17 $(CUDA_ARCH) --expt-relaxed-constexpr -Xcompiler -Wall,-Werror,-fPIC
  CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o)
  LLM3D_CFLAGS += -DLLM3D_CUDA -I$(CUDA_HOME)/include
  LLM3D_LDLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
  $(info llm3d: building the CUDA backend with $(NVCC))
endif
# --- Open MPI: launches and connects the ranks of a multi-rank run (comm/comm_mpi.c);
#     without it only the one-rank grid is built
MPICC := $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
  LLM3D_CFLAGS += -DLLM3D_MPI $(shell $(MPICC) --showme:compile 2>/dev/null)
  LLM3D_LDLIBS += $(shell $(MPICC) --showme:link 2>/dev/null)
else
  $(info llm3d: Open MPI not found (apt-get install libopenmpi-dev openmpi-bin); building the one-rank path only)
endif
# --- NCCL: GPU collectives when each rank has its own GPU (comm/comm_nccl.c); needs CUDA and MPI
ifneq ($(NVCC),)
  NCCL_HEADER := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))
  NCCL_LIB := $(firstword $(wildcard $(CUDA_HOME)/lib64/libnccl.so $(CUDA_HOME)/lib/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib/aarch64-linux-gnu/libnccl.so))
  ifneq ($(and $(NCCL_HEADER),$(NCCL_LIB),$(MPICC)),)
    LLM3D_CFLAGS += -DLLM3D_NCCL -I$(dir $(NCCL_HEADER))
    LLM3D_LDLIBS += -L$(dir $(NCCL_LIB)) -Wl,-rpath,$(dir $(NCCL_LIB)) -lnccl
    $(info llm3d: NCCL found ($(NCCL_HEADER)))
  else
    $(info llm3d: building without NCCL (nccl.h: $(if $(NCCL_HEADER),found,missing), libnccl.so: $(if $(NCCL_LIB),found,missing), mpicc: $(if $(MPICC),found,missing)); GPU ranks will talk through MPI)
  endif
endif

# --- more detection (Open MPI, NCCL, ...) goes above this line: append what a
# library needs to LLM3D_CFLAGS / LLM3D_LDLIBS (never to CFLAGS or LDLIBS, which
# are the user's); the configuration stamp below then tracks it with no more work.

# --- the commands: required flags first, the user's after them
COMPILE := $(CC) $(LLM3D_CFLAGS) $(CPPFLAGS) $(CFLAGS)
LINK    := $(CC) $(LLM3D_CFLAGS) $(CFLAGS) $(LDFLAGS)
LIBS    := $(LLM3D_LDLIBS) $(LDLIBS)

# --- the configuration stamp: rewritten (and so everything rebuilt) only when
# this line differs from the one the objects were built with
CONFIG_STAMP := $(BUILD)/config.stamp
CONFIG_LINE  := $(strip compile: $(COMPILE) | link: $(LINK) ... $(LIBS) | nvcc: $(NVCC) $(LLM3D_NVCCFLAGS) $(NVCCFLAGS))
ifneq ($(CONFIG_LINE),$(strip $(file < $(CONFIG_STAMP))))
$(CONFIG_STAMP): FORCE
endif
$(CONFIG_STAMP):
	@mkdir -p $(@D)
	@printf '%s\n' '$(subst ','\'',$(CONFIG_LINE))' > $@
	@echo "llm3d: new configuration for $(BUILD)/ (everything built before it is rebuilt): $@"
.PHONY: FORCE
FORCE:

# GPU-only programs, built on demand by tests/gpu/run.sh (`make gpu`), never by `make`
# or `make test` (CI has no GPU): tests/gpu/test_*.c and bench/gpu/bench_*.c
GPU_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/gpu/%,$(wildcard tests/gpu/test_*.c)) \
           $(patsubst bench/gpu/%.c,$(BUILD)/gpu/%,$(wildcard bench/gpu/bench_*.c))
GPU_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/gpu/test_*.c bench/gpu/bench_*.c))
.PHONY: gpu
ifneq ($(NVCC),)
gpu: $(GPU_BIN)
else
gpu:
	@echo "error: make gpu needs nvcc and the CUDA libraries (none found, or NO_CUDA=1)"; exit 1
endif
$(BUILD)/gpu/test_%: $(BUILD)/obj/tests/gpu/test_%.o $(BUILD)/libllm3d.a
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LIBS)
$(BUILD)/gpu/bench_%: $(BUILD)/obj/bench/gpu/bench_%.o $(BUILD)/libllm3d.a
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LIBS)
# the launch-gap tracer (bench/gpu/trace_gaps.c): a CUPTI injection library, built only when asked
CUPTI_SO := $(firstword $(wildcard $(addsuffix /libcupti.so,$(CUDA_HOME)/extras/CUPTI/lib64 $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib \
                                     $(CUDA_HOME)/targets/x86_64-linux/lib)))
.PHONY: trace
trace: $(BUILD)/gpu/libtrace_gaps.so
$(BUILD)/gpu/libtrace_gaps.so: bench/gpu/trace_gaps.c
	@test -n "$(CUPTI_SO)" || { echo "error: make trace needs CUPTI (libcupti.so under CUDA_HOME=$(CUDA_HOME))"; exit 1; }
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC -I$(CUDA_HOME)/include -I$(CUDA_HOME)/extras/CUPTI/include $< -o $@ \
	  -L$(dir $(CUPTI_SO)) -Wl,-rpath,$(dir $(CUPTI_SO)) -lcupti

LIB_SRC  := $(wildcard common/*.c kernels/*.c kernels/cpu/*.c model/*.c parallel/*.c comm/*.c doctor/*.c data/*.c checkpoint/*.c train/*.c)
LIB_SRC  := $(filter-out train/main.c,$(LIB_SRC))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CUDA_OBJ)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_OBJ := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# programs that run under mpirun (tests/test_mpi.sh): only with Open MPI
ifneq ($(MPICC),)
  TEST_BIN += $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(wildcard tests/mpi/*.c))
  TEST_OBJ += $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%.o,$(wildcard tests/mpi/*.c))
endif
BENCH_SRC := $(wildcard bench/*.c)
BENCH_OBJ := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%.o)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
# objects that only a pattern rule names would be deleted after each build as
# "intermediate", then rebuilt by the next one: keep them
.SECONDARY: $(TEST_OBJ) $(BENCH_OBJ) $(GPU_OBJ) $(BUILD)/obj/train/main.o

.PHONY: all test bench clean
all: $(BUILD)/train $(TEST_BIN) $(BENCH_BIN)

# objects live under $(BUILD)/obj/ so that train/*.o never collide with the $(BUILD)/train binary
$(BUILD)/obj/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(COMPILE) -c $< -o $@

$(BUILD)/tests/%.o: tests/%.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(COMPILE) -c $< -o $@

$(BUILD)/bench/%.o: bench/%.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(COMPILE) -c $< -o $@

$(BUILD)/obj/kernels/cuda/%.o: kernels/cuda/%.cu kernels/*.h kernels/cuda/*.cuh $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(LLM3D_NVCCFLAGS) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/libllm3d.a: $(LIB_OBJ) $(CONFIG_STAMP)
	@rm -f $@
	ar rcs $@ $(LIB_OBJ)

$(BUILD)/train: $(BUILD)/obj/train/main.o $(BUILD)/libllm3d.a
	$(LINK) $^ -o $@ $(LIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libllm3d.a
	$(LINK) $^ -o $@ $(LIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BUILD)/libllm3d.a
	$(LINK) $^ -o $@ $(LIBS)

# --- sanitizers and fuzzing (tests/fuzz/README.md)
# `make asan` builds the whole tree into $(ASAN_BUILD) with SANITIZE=1, plus the
# libFuzzer harnesses tests/fuzz/fuzz_*.c and the seed maker; `make test` runs
# the readers', bad-input, ops' and one-layout-per-strategy tests under it too
# (tests/test_asan.sh says which) and the harnesses briefly (tests/test_fuzz.sh);
# `make fuzz FUZZ_S=N` runs each harness N seconds.
ASAN_BUILD ?= build-asan
FUZZ_S ?= 60
NPROC := $(shell nproc 2>/dev/null || echo 2)
FUZZ_BIN := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c)) $(BUILD)/fuzz/make_seeds
FUZZ_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/fuzz/*.c))
.SECONDARY: $(FUZZ_OBJ)
.PHONY: asan fuzz fuzz-bin
fuzz-bin: $(FUZZ_BIN)
$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/round_trip.o $(BUILD)/libllm3d.a
	@mkdir -p $(dir $@)
	$(LINK) -fsanitize=fuzzer $^ -o $@ $(LIBS)
$(BUILD)/fuzz/make_seeds: $(BUILD)/obj/tests/fuzz/make_seeds.o $(BUILD)/libllm3d.a
	@mkdir -p $(dir $@)
	$(LINK) $^ -o $@ $(LIBS)
asan:
	@command -v clang >/dev/null && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1 || \
	  { printf 'error: make asan needs clang and its libFuzzer/ASan runtimes\n  hint: run scripts/setup.sh (apt: clang libclang-rt-dev libomp-dev)\n'; exit 1; }
	@$(MAKE) --no-print-directory SANITIZE=1 BUILD=$(ASAN_BUILD) $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC)) all fuzz-bin
fuzz: asan
	@BUILD=$(ASAN_BUILD) tests/fuzz/run.sh $(FUZZ_S)

# `make test`: both trees built side by side, $(NPROC) jobs where no -j was given (on 2
# cores, from a fresh clone: 1m45s, where `make all` one job at a time took 2m13s and
# `make asan` 32s more), then every test once and the sanitizer pass's part of them
# again on $(ASAN_BUILD) (tests/run.sh; tests/test_asan.sh says which)
test:
	@$(MAKE) --no-print-directory $(if $(filter -j%,$(MAKEFLAGS)),,-j$(NPROC)) all asan
	@BUILD=$(BUILD) ASAN_BUILD=$(ASAN_BUILD) tests/run.sh

bench: all
	@bench/run.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

-include $(wildcard $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BENCH_OBJ:.o=.d) $(GPU_OBJ:.o=.d) $(FUZZ_OBJ:.o=.d) $(BUILD)/obj/train/main.d)
