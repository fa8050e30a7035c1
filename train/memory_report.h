/* train/memory_report.h — the memory report a person asks for: the plan alone
 * (`build/train memory`), and the plan next to a measured peak (--memory_report=1).
 *
 * The idea: the plan (train/memory.h) needs only the config, never the data's
 * tokens nor the device, so `build/train memory --preset=l124m --device=cuda`
 * answers at once on any machine, with the same run under the other recompute
 * and optimizer switches beside it. Measuring needs one real step: on a GPU the
 * backend counts what cudaMalloc handed out; on the CPU what the C library's
 * allocator handed out (malloc_usable_size), and the process's peak resident
 * set (getrusage) as the whole-process figure. */
#pragma once
#include "trainer.h"

/* `build/train memory [--config=F] [--preset=P] [--key=value ...]` (argv[0] = "memory"):
 * prints the plan and exits; trains nothing, opens no device. Returns the exit code. */
int memory_main(int argc, char **argv);
/* The process's peak resident set so far, KiB (getrusage ru_maxrss). */
long memory_rss_peak_kib(void);
/* --memory_report=1: one training step, then the measured peak beside the
 * prediction already printed; rss_before_kib = memory_rss_peak_kib() before trainer_init. */
void memory_report_step(Trainer *tr, long rss_before_kib);
