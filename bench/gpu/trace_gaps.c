/* bench/gpu/trace_gaps.c — a CUPTI injection library that answers one question:
 * how long is the GPU idle between the kernels of a training step?
 *
 * The idea: the CUDA driver loads the library named by CUDA_INJECTION64_PATH
 * into any CUDA program and calls its InitializeInjection(); we switch on
 * CUPTI's activity records for kernels, copies and fills (start and end
 * timestamps taken on the GPU), keep them all, and at exit split the timeline
 * into steps at each end of a kernel whose name holds LLM3D_TRACE_STEP
 * (default "adamw": the optimizer closes every step). For each step: its span
 * (end of the previous step's marker to end of this one), the time some kernel
 * or copy ran (the union of their intervals), and the idle rest — launch gaps,
 * host synchronisation, anything the GPU waited for. The report covers the
 * last LLM3D_TRACE_LAST steps (default 10: the timed ones of bench_train) and
 * names the largest gaps by the kernels on either side, then where the busy
 * time goes: each kernel name's GPU time a step (LLM3D_TRACE_TOP rows,
 * default 30), timed inside the real step rather than alone. Nothing in llm3d
 * changes; the records cost the program a little time, so read the spans
 * beside an untraced run.
 *
 *   make trace    # build/gpu/libtrace_gaps.so, where CUPTI is installed
 *   CUDA_INJECTION64_PATH=$PWD/build/gpu/libtrace_gaps.so build/bench/bench_train --device=cuda ... */
#define _GNU_SOURCE
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A count from the environment, read strictly (the whole text, digits only, 1..100000): this library is
 * loaded into any CUDA program and links nothing of llm3d, so common/options.c's reader is not here. */
static int env_count(const char *name, int fallback) {
    const char *v = getenv(name);
    if (!v) return fallback;
    char *end;
    long x = v[0] >= '0' && v[0] <= '9' ? strtol(v, &end, 10) : -1;
    if (x < 1 || x > 100000 || *end) {
        fprintf(stderr, "trace_gaps: %s=%s is not a whole number from 1 to 100000\n", name, v);
        exit(1);
    }
    return (int)x;
}

typedef struct { uint64_t start, end; const char *name; } Span;   /* name: NULL for copies and fills */
static Span *spans;
static size_t n_spans, cap_spans;

#define CUPTI_CALL(call) do { CUptiResult r_ = (call); if (r_ != CUPTI_SUCCESS) { const char *m_ = ""; \
    cuptiGetResultString(r_, &m_); fprintf(stderr, "trace_gaps: %s failed: %s (%s:%d)\n", #call, m_, __FILE__, __LINE__); return; } } while (0)

static void add(uint64_t start, uint64_t end, const char *name) {
    if (n_spans == cap_spans) {
        cap_spans = cap_spans ? 2 * cap_spans : 1 << 16;
        Span *s = realloc(spans, cap_spans * sizeof(Span));
        if (!s) { fprintf(stderr, "trace_gaps: out of host memory for %zu records\n", cap_spans); exit(1); }
        spans = s;
    }
    spans[n_spans++] = (Span){start, end, name ? strdup(name) : NULL};
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}
static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size;
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)r;
            add(k->start, k->end, k->name);
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)r;
            add(m->start, m->end, NULL);
        } else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)r;
            add(m->start, m->end, NULL);
        }
    }
    free(buffer);
}

static int by_start(const void *a, const void *b) {
    uint64_t x = ((const Span *)a)->start, y = ((const Span *)b)->start;
    return x < y ? -1 : x > y;
}
static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static const char *short_name(const char *n) { return n ? n : "(copy/fill)"; }

typedef struct { double us; size_t after; } Gap;   /* idle time before spans[after + 1] */
typedef struct { const char *name; double us; int count; } Busy;   /* one kernel name's time over the reported steps */
static int by_busy(const void *a, const void *b) {
    double x = ((const Busy *)a)->us, y = ((const Busy *)b)->us;
    return x > y ? -1 : x < y;
}

/* The GPU time of each kernel name in spans (a, b], largest first, per step. */
static void report_busy(size_t a, size_t b, int steps) {
    int top = env_count("LLM3D_TRACE_TOP", 30), n = 0;
    Busy *busy = calloc(b - a, sizeof(Busy));
    double total = 0;
    for (size_t i = a + 1; i <= b; i++) {
        const char *name = short_name(spans[i].name);
        int k = 0;
        while (k < n && strcmp(busy[k].name, name)) k++;
        if (k == n) busy[n++].name = name;
        busy[k].us += (spans[i].end - spans[i].start) / 1e3;
        busy[k].count++;
        total += (spans[i].end - spans[i].start) / 1e3;
    }
    qsort(busy, n, sizeof(Busy), by_busy);
    printf("trace_gaps: busy %.3f ms a step in %d kernel names; the largest:\n", total / steps / 1e3, n);
    for (int k = 0; k < n && k < top; k++)
        printf("trace_gaps: busy %8.3f ms %5.1f%% %5.0f/step %8.1f us each  %.90s\n", busy[k].us / steps / 1e3,
               100 * busy[k].us / total, (double)busy[k].count / steps, busy[k].us / busy[k].count, busy[k].name);
    free(busy);
}
   /* idle time before spans[after + 1] */

static void report(void) {
    cuptiActivityFlushAll(1);
    const char *mark = getenv("LLM3D_TRACE_STEP") ? getenv("LLM3D_TRACE_STEP") : "adamw";
    int last = env_count("LLM3D_TRACE_LAST", 10);
    qsort(spans, n_spans, sizeof(Span), by_start);
    /* step ends: the end of each marker kernel */
    size_t n_marks = 0, *marks = malloc((n_spans + 1) * sizeof(size_t));
    for (size_t i = 0; i < n_spans; i++)
        if (spans[i].name && strstr(spans[i].name, mark)) marks[n_marks++] = i;
    if (n_marks < 2) {
        fprintf(stderr, "trace_gaps: %zu records, %zu kernels named *%s*: no two steps to compare\n"
                        "  hint: set LLM3D_TRACE_STEP to a kernel that runs once a step\n", n_spans, n_marks, mark);
        return;
    }
    size_t first = n_marks - 1 > (size_t)last ? n_marks - 1 - last : 0;   /* steps (marks[s-1], marks[s]] for s > first */
    int steps = (int)(n_marks - 1 - first);
    double *span_us = malloc(steps * sizeof(double)), *idle_us = malloc(steps * sizeof(double)), tot_span = 0, tot_idle = 0;
    Gap top[8] = {{0}};
    size_t kernels = 0;
    const double edges[5] = {2, 5, 20, 100, 1e30};   /* gap sizes in us: a histogram of count and time */
    double hist_n[5] = {0}, hist_us[5] = {0};
    for (int s = 0; s < steps; s++) {
        size_t a = marks[first + s], b = marks[first + s + 1];
        uint64_t t0 = spans[a].end, t1 = spans[b].end, covered = t0;   /* covered: busy up to here */
        double idle = 0;
        for (size_t i = a + 1; i <= b; i++) {
            if (spans[i].start > covered) {
                double g = (spans[i].start - covered) / 1e3;
                idle += g;
                int hb = 0;
                while (g >= edges[hb]) hb++;
                hist_n[hb]++, hist_us[hb] += g;
                for (int k = 0; k < 8; k++)   /* keep the 8 largest */
                    if (g > top[k].us) { memmove(top + k + 1, top + k, (7 - k) * sizeof(Gap)); top[k] = (Gap){g, i - 1}; break; }
            }
            if (spans[i].end > covered) covered = spans[i].end;
            kernels++;
        }
        span_us[s] = (t1 - t0) / 1e3;
        idle_us[s] = idle;
        tot_span += span_us[s];
        tot_idle += idle;
    }
    qsort(span_us, steps, sizeof(double), by_value);
    qsort(idle_us, steps, sizeof(double), by_value);
    printf("trace_gaps: %d steps (ending at each *%s* kernel), %.0f kernels/copies a step\n", steps, mark, (double)kernels / steps);
    printf("trace_gaps: step span median %.3f ms; GPU idle median %.3f ms; idle in all %d steps %.3f of %.3f ms = %.2f%%\n",
           span_us[steps / 2] / 1e3, idle_us[steps / 2] / 1e3, steps, tot_idle / 1e3, tot_span / 1e3, 100 * tot_idle / tot_span);
    const char *label[5] = {"< 2 us", "2-5 us", "5-20 us", "20-100 us", ">= 100 us"};
    for (int k = 0; k < 5; k++)
        if (hist_n[k] > 0)
            printf("trace_gaps: gaps %-9s %6.1f a step, %8.3f ms a step in all\n", label[k], hist_n[k] / steps, hist_us[k] / steps / 1e3);
    for (int k = 0; k < 8 && top[k].us > 0; k++)
        printf("trace_gaps: gap %.1f us after %.60s, before %.60s\n", top[k].us, short_name(spans[top[k].after].name),
               short_name(spans[top[k].after + 1].name));
    report_busy(marks[first], marks[n_marks - 1], steps);
    fflush(stdout);
}

int InitializeInjection(void) {
    CUptiResult r;
    if ((r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS ||
        (r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS ||
        (r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY)) != CUPTI_SUCCESS ||
        (r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET)) != CUPTI_SUCCESS) {
        const char *m = "";
        cuptiGetResultString(r, &m);
        fprintf(stderr, "trace_gaps: CUPTI would not start: %s\n", m);
        return 0;
    }
    atexit(report);
    return 1;
}
