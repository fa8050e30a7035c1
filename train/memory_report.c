/* train/memory_report.c — `build/train memory` (the plan without training) and
 * --memory_report=1 (one step, the measured peak beside the plan). */
#include "memory_report.h"
#include "../common/util.h"
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

long memory_rss_peak_kib(void) {
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_maxrss : 0;
}

static DType act_dtype(const Config *c) {
    return c->precision == PRECISION_BF16 ? DTYPE_BF16 : c->precision == PRECISION_FP16 ? DTYPE_FP16 : DTYPE_FP32;
}

/* The backend a plan describes, without opening the device: what memory_plan
 * reads of it is the name, the activation dtype and the fixed workspace. */
static Backend plan_backend(const Config *c) {
    if (c->device == DEVICE_CPU) return *backend_cpu_emulated(act_dtype(c));
    Backend b = *backend_cpu();
    b.name = "cuda";
    b.act = act_dtype(c);
    b.emulated = 0;
    b.workspace_bytes = BACKEND_CUDA_WORKSPACE_BYTES;
    b.memory_free = NULL;
    return b;
}

/* vocab_size=0 means "the train shards' vocabulary": read it from their headers. */
static int vocab_from_shards(const Config *c) {
    char list[sizeof c->train_data];
    snprintf(list, sizeof list, "%s", c->train_data);
    for (char *p = strtok(list, ","); p; p = strtok(NULL, ",")) {
        glob_t g;
        int rc = glob(p, 0, NULL, &g);
        globfree(&g);
        if (rc != 0)
            die("memory: vocab_size=0 means the vocabulary of the train shards, and no shard matches '%s'\n"
                "  hint: give --vocab_size=N (the l15m/l124m/l350m presets set 32000), or --train_data=PATH", p);
    }
    Loader l;
    loader_open(&l, c->train_data, 1, 1, 0, 1, 0, 0, 0);
    int vocab = loader_header_vocab(&l);
    loader_close(&l);
    if (vocab <= 0) die("memory: the headers of '%s' record no vocabulary size\n  hint: give --vocab_size=N", c->train_data);
    return vocab;
}

static const char *usage =
    "usage: build/train memory [--config=FILE.ini] [--preset=NAME] [--key=value ...]\n"
    "  the memory plan of the run these settings describe (the same keys as training), without\n"
    "  training and without opening the device: works for --device=cuda on a machine with no GPU.\n"
    "  e.g. build/train memory --preset=l124m --device=cuda --precision=bf16\n"
    "  --memory_report=1 on a training command runs one step and prints the measured peak beside it.\n";

int memory_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { printf("%s", usage); return 0; }
    Config c;
    config_parse_args(&c, argc, argv);
    int vocab = c.vocab_size ? c.vocab_size : vocab_from_shards(&c);
    ModelConfig mc;
    model_config_from(&mc, &c, vocab);
    Comm comm;
    comm_init(&comm, 1, 1, 1);
    Backend be = plan_backend(&c);
    static const char *rname[] = {"none", "selective", "full"}, *oname[] = {"adamw", "adamw8bit"};
    printf("memory | plan of %s%s: %zu parameters, vocab %d | device %s (%s) | batch %d x %d | recompute %s | optimizer %s | %d rank\n",
           c.preset[0] ? "preset " : "", c.preset[0] ? c.preset : "these settings", model_count_params(&mc), vocab, be.name,
           dtype_name(be.act), c.batch_size, c.seq_len, rname[c.recompute], oname[c.optimizer], comm.world_size);
    MemoryPlan p = memory_plan(&c, &mc, &be, &comm, c.recompute, c.optimizer, c.batch_size);
    memory_print(&p, 0, stdout);
    printf("memory | the same run with other switches, by the same prediction:\n");
    char b[32];
    for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++)
        for (int o = OPTIMIZER_ADAMW; o <= OPTIMIZER_ADAMW8BIT; o++) {
            MemoryPlan q = memory_plan(&c, &mc, &be, &comm, r, o, c.batch_size);
            printf("  --recompute=%-9s --optimizer=%-9s total %10s%s\n", rname[r], oname[o], format_bytes((double)q.total, b, sizeof b),
                   r == c.recompute && o == c.optimizer ? "   (this run)" : "");
        }
    if (c.device == DEVICE_CPU)
        printf("memory | nothing was trained; --memory_report=1 on a training command runs one step and measures the peak\n");
    else
        printf("memory | nothing was trained and no GPU was opened; a training run compares the plan with the GPU's free\n"
               "         memory at start-up and, when it does not fit, names the switches that would\n");
    comm_free(&comm);
    return 0;
}

void memory_report_step(Trainer *tr, long rss_before_kib) {
    int cpu = tr->cfg.device == DEVICE_CPU;
    if (cpu) printf("memory | running one training step to measure the peak (`build/train memory` shows the plan alone, at once)\n");
    fflush(stdout);
    trainer_step(tr);
    size_t peak = tr->be->memory_peak();
    char m[32], g[32];
    printf("memory | measured: peak allocated %s (%s); prediction off by %+.1f%%\n", format_bytes((double)peak, m, sizeof m),
           cpu ? "the C library's allocator, malloc_usable_size of every block the backend holds" : "cudaMalloc through the backend",
           peak ? 100.0 * ((double)tr->memory.total - (double)peak) / (double)peak : 0.0);
    if (cpu)
        printf("memory | measured: the process's peak resident set grew by %s during start-up and the step (getrusage\n"
               "         ru_maxrss; it also holds the mapped shards, OpenBLAS's buffers and thread stacks)\n",
               format_bytes((double)(memory_rss_peak_kib() - rss_before_kib) * 1024.0, g, sizeof g));
    fflush(stdout);
}
