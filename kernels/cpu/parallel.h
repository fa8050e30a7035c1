/* kernels/cpu/parallel.h — when a CPU kernel is worth more than one thread.
 *
 * The idea: starting an OpenMP team and meeting at its closing barrier costs
 * microseconds on an idle machine, but on a busy one a barrier waits for a
 * team thread the scheduler has not run yet — whole time slices — while the
 * waiting thread spins on a core someone else needed. A decode step runs some
 * forty tiny ops per token, so sampling 120 tokens with two threads on a loaded
 * 2-core machine took 38 s instead of 0.2 s. Every parallel loop here therefore
 * carries `if (cpu_parallel(work))`: below CPU_PARALLEL_MIN_WORK units (about
 * 50 µs of work on one core: elements touched, or multiply-adds / 64) the loop
 * runs on the calling thread and no team is woken. BLAS calls below
 * CPU_PARALLEL_MIN_MACS multiply-adds run with one OpenMP thread, which the
 * OpenMP build of OpenBLAS (the one the Makefile links) follows. Training's ops
 * are far above both bounds, so they keep every thread. */
#pragma once
#include <stddef.h>
#include <omp.h>

#define CPU_PARALLEL_MIN_WORK ((size_t)1 << 16)
#define CPU_PARALLEL_MIN_MACS ((size_t)1 << 22)

static inline int cpu_parallel(size_t work) { return work >= CPU_PARALLEL_MIN_WORK; }

/* Around a BLAS call of `macs` multiply-adds: one thread when it is small.
 * Returns what cpu_blas_threads_end needs to restore. */
static inline int cpu_blas_threads_begin(size_t macs) {
    if (macs >= CPU_PARALLEL_MIN_MACS || omp_in_parallel()) return 0;
    int saved = omp_get_max_threads();
    if (saved > 1) omp_set_num_threads(1);
    return saved > 1 ? saved : 0;
}
static inline void cpu_blas_threads_end(int saved) {
    if (saved) omp_set_num_threads(saved);
}
