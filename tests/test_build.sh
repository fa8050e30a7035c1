#!/usr/bin/env bash
# tests/test_build.sh — the Makefile tracks the configuration it built with.
#
# The idea: build the library and one test program at -O0 without CUDA (a few
# seconds) into a scratch BUILD folder, then ask make (-q, -n) what another
# configuration would redo: a changed CFLAGS or NO_CUDA rebuilds everything,
# an unchanged one nothing (test objects are kept, not deleted as
# intermediate), and `make CFLAGS=...` keeps the flags llm3d needs. Where CUDA
# is found, the CPU backend's object really changes between NO_CUDA=1 and not
# (the stale object was a "multiple definition of backend_cuda" at link).
set -u
cd "$(dirname "$0")/.."
unset MAKEFLAGS MFLAGS MAKELEVEL   # a plain make, whatever `make test` was called with
T=$(mktemp -d /tmp/llm3d_build_XXXXXX)
trap 'rm -rf "$T"' EXIT
passed=0; failed=0
check() {   # check "what" command...
    local what=$1; shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $what"; fi
}
B=$T/b
A=(BUILD=$B NO_CUDA=1 CFLAGS=-O0)          # configuration A: CPU only
PROG=$B/tests/test_cli
defines_cuda_stub() { nm "$B/obj/kernels/backend_cpu.o" | grep -q ' T backend_cuda$'; }

make -j2 "${A[@]}" "$PROG" >"$T/log" 2>&1
check "build A (NO_CUDA=1 CFLAGS=-O0): $(tail -5 "$T/log")" test -x "$PROG"
check "build A: the CPU-only backend defines the backend_cuda stub" defines_cuda_stub
check "build A: the test's object is kept" test -f "$B/tests/test_cli.o"
check "build A again: nothing to redo (make -q)" make -q "${A[@]}" "$PROG"

# a different CFLAGS: out of date, every object recompiled, required flags kept
check "CFLAGS=-O1 after -O0: out of date" bash -c "! make -q BUILD=$B NO_CUDA=1 CFLAGS=-O1 $PROG 2>/dev/null"
make -n BUILD="$B" NO_CUDA=1 CFLAGS=-O1 "$PROG" >"$T/dry" 2>&1
compiles=$(grep -c -- ' -c .*\.c -o ' "$T/dry")
sources=$(ls common/*.c kernels/*.c kernels/cpu/*.c model/*.c parallel/*.c comm/*.c doctor/*.c data/*.c checkpoint/*.c train/*.c | grep -vc '^train/main.c$')
check "CFLAGS=-O1: recompiles the $sources library sources and the test (make -n shows $compiles)" test "$compiles" -eq $((sources + 1))
bad=$(grep -- ' -c .*\.c -o ' "$T/dry" | grep -v -- '-std=c11' ; grep -- ' -c .*\.c -o ' "$T/dry" | grep -v -- '-fopenmp'; \
      grep -- ' -c .*\.c -o ' "$T/dry" | grep -v -- '-D_GNU_SOURCE'; grep -- ' -c .*\.c -o ' "$T/dry" | grep -v -- '-Werror'; \
      grep -- ' -c .*\.c -o ' "$T/dry" | grep -v -- ' -O1')
check "CFLAGS=-O1 keeps -std=c11 -fopenmp -D_GNU_SOURCE -Werror and adds -O1: $bad" test -z "$bad"
if ! grep -q "OpenBLAS not found" "$T/log"; then
    check "OpenBLAS found: CFLAGS=-O1 keeps -DLLM3D_BLAS" grep -q -- '-DLLM3D_BLAS .*-O1 -c tests/test_cli.c' "$T/dry"
fi
check "make -n wrote nothing: configuration A still up to date" make -q "${A[@]}" "$PROG"

# configuration B, then back to A: each switch rebuilds what it changed
if grep -q "building the CUDA backend" <(make -n BUILD="$B" CFLAGS=-O0 "$B/obj/kernels/backend_cpu.o" 2>&1); then
    Bcfg=(BUILD=$B CFLAGS=-O0); what="CUDA"
else
    Bcfg=(BUILD=$B NO_CUDA=1 CFLAGS=-O1); what="CFLAGS=-O1"
fi
make "${Bcfg[@]}" "$B/obj/kernels/backend_cpu.o" >"$T/log" 2>&1
check "configuration B ($what): backend_cpu.o rebuilt: $(tail -3 "$T/log")" grep -q -- '-c kernels/backend_cpu.c' "$T/log"
if [ "$what" = CUDA ]; then
    check "configuration B (CUDA): backend_cpu.o no longer defines backend_cuda" bash -c "! nm $B/obj/kernels/backend_cpu.o | grep -q ' T backend_cuda$'"
fi
check "back to A: out of date" bash -c "! make -q ${A[*]} $PROG 2>/dev/null"
make -j2 "${A[@]}" "$PROG" >"$T/log" 2>&1
check "back to A: builds and links: $(tail -3 "$T/log")" grep -q -- "-o $PROG " "$T/log"
check "back to A: the CPU-only backend again defines the stub" defines_cuda_stub

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
