/* train/memory_report.c — `build/train memory` (the plan without training) and
 * --memory_report=1 (one step, the measured peak beside the plan). */
#include "memory_report.h"
#include <math.h>
#include "../common/util.h"
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

long memory_rss_peak_kib(void) {
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_maxrss : 0;
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
    Comm comm;   /* the grid's shape: no ranks are started */
    comm_init_one(&comm);
    comm.dp = c.dp; comm.tp = c.tp; comm.pp = c.pp; comm.cp = c.cp; comm.world_size = c.dp * c.tp * c.pp * c.cp;
    Backend be = memory_plan_backend(&c);
    static const char *rname[] = {"none", "selective", "full"}, *oname[] = {"adamw", "adamw8bit"}, *wname[] = {"keep", "per_layer"};
    char cp[32] = "";   /* the cp axis named where there is one */
    if (c.cp > 1) snprintf(cp, sizeof cp, " x cp %d", c.cp);
    printf("memory | plan of %s%s: %zu parameters, vocab %d | device %s (%s) | batch %d x %d | recompute %s | optimizer %s | "
"compute weights %s | %d rank%s (dp %d x pp %d%s x tp %d)%s\n", c.preset[0] ? "preset " : "", c.preset[0] ? c.preset : "these settings",
           model_count_params(&mc), vocab, be.name, dtype_name(be.act), c.batch_size, c.seq_len, rname[c.recompute], oname[c.optimizer],
           be.act == DTYPE_FP32 ? "the fp32 master" : wname[c.compute_weights], comm.world_size, comm.world_size > 1 ? "s" : "",
           c.dp, c.pp, cp, c.tp, c.zero && c.dp * c.cp > 1 ? (const char *[]){"", " ZeRO-1", " ZeRO-2", " ZeRO-3"}[c.zero] : "");
    Schedule s;
    trainer_schedule(&s, &c, &mc, &comm, &be);
    ModelPart part = trainer_part(&c, &mc, &s, 0, 0, be.act);   /* stage 0; every stage below when there are several */
    MemoryPlan p = memory_plan(&c, &mc, &be, &comm, &part, c.recompute, c.optimizer, c.compute_weights, c.batch_size);
    memory_print(&p, 0, stdout);
    for (int st = 1; st < c.pp; st++) {
        ModelPart q = trainer_part(&c, &mc, &s, st, 0, be.act);
        comm.pp_rank = st;
        MemoryPlan ps = memory_plan(&c, &mc, &be, &comm, &q, c.recompute, c.optimizer, c.compute_weights, c.batch_size);
        char t[32];
        printf("memory | pipeline stage %d: total %s\n", st, format_bytes((double)ps.total, t, sizeof t));
    }
    comm.pp_rank = 0;
    printf("memory | the same run with other switches, by the same prediction (stage 0):\n");
    char b[32], w_key[64] = "";
    int switch_w = memory_per_layer_switch(&c, &be);   /* the compute_weights column only where it changes something */
    int first_w = switch_w ? COMPUTE_WEIGHTS_KEEP : c.compute_weights, last_w = switch_w ? COMPUTE_WEIGHTS_PER_LAYER : c.compute_weights;
    for (int r = RECOMPUTE_NONE; r <= RECOMPUTE_FULL; r++)
        for (int o = OPTIMIZER_ADAMW; o <= OPTIMIZER_ADAMW8BIT; o++)
            for (int w = first_w; w <= last_w; w++) {
                MemoryPlan q = memory_plan(&c, &mc, &be, &comm, &part, r, o, w, c.batch_size);
                if (switch_w) snprintf(w_key, sizeof w_key, " --compute_weights=%-9s", wname[w]);
                printf("  --recompute=%-9s --optimizer=%-9s%s total %10s%s\n", rname[r], oname[o], w_key,
                       format_bytes((double)q.total, b, sizeof b), r == c.recompute && o == c.optimizer && w == c.compute_weights ? "   (this run)" : "");
            }
    if (c.dp * c.cp > 1 && !c.tie_embeddings && c.grad_reduce_dtype != GRAD_REDUCE_BF16) {   /* the ZeRO stages over these dp (x cp) ranks */
        if (c.cp > 1) printf("memory | ZeRO stages over dp x cp = %d, this run's other switches (stage 0; zero=3 with compute_weights=keep):\n", c.dp * c.cp);
        else printf("memory | ZeRO stages over dp=%d, this run's other switches (stage 0; zero=3 with compute_weights=keep):\n", c.dp);
        for (int z = 0; z <= 3; z++) {
            Config zc = c;
            zc.zero = z;
            if (z == 3) zc.compute_weights = COMPUTE_WEIGHTS_KEEP;
            if (z && zc.compute_weights == COMPUTE_WEIGHTS_PER_LAYER && be.act != DTYPE_FP32) continue;   /* refused: config.c */
            ModelPart q = trainer_part(&zc, &mc, &s, 0, 0, be.act);
            MemoryPlan zp = memory_plan(&zc, &mc, &be, &comm, &q, c.recompute, c.optimizer, zc.compute_weights, c.batch_size);
            printf("  --zero=%d  total %10s%s\n", z, format_bytes((double)zp.total, b, sizeof b), z == c.zero ? "   (this run)" : "");
        }
    }
    if (c.device == DEVICE_CPU)
        printf("memory | nothing was trained; --memory_report=1 on a training command runs one step and measures the peak\n");
    else
        printf("memory | nothing was trained and no GPU was opened; a training run compares the plan with the GPU's free\n"
               "         memory at start-up and, when it does not fit, names the switches that would\n");
    schedule_free(&s);
    return 0;
}

void memory_report_step(Trainer *tr, long rss_before_kib) {
    int cpu = tr->cfg.device == DEVICE_CPU;
    if (tr->comm.rank != 0) { trainer_step(tr); return; }   /* every rank steps; rank 0 reports its own */
    if (cpu) printf("memory | running one training step to measure the peak (`build/train memory` shows the plan alone, at once)\n");
    fflush(stdout);
    trainer_step(tr);
    size_t peak = tr->be->memory_peak();
    char m[32], g[32];
    double off = peak ? 100.0 * ((double)tr->memory.total - (double)peak) / (double)peak : 0.0;
    char verdict[64];
    if (fabs(off) < 0.05) snprintf(verdict, sizeof verdict, "the prediction is exact to 0.05%%");   /* not "off by -0.0%" */
    else snprintf(verdict, sizeof verdict, "prediction off by %+.1f%%", off);
    printf("memory | measured: peak allocated %s (%s); %s\n", format_bytes((double)peak, m, sizeof m),
           cpu ? "the C library's allocator, malloc_usable_size of every block the backend holds" : "cudaMalloc through the backend",
           verdict);
    if (cpu)
        printf("memory | measured: the process's peak resident set grew by %s during start-up and the step (getrusage\n"
               "         ru_maxrss; it also holds the mapped shards, OpenBLAS's buffers and thread stacks)\n",
               format_bytes((double)(memory_rss_peak_kib() - rss_before_kib) * 1024.0, g, sizeof g));
    fflush(stdout);
}
