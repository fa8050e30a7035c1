/* train/plan.c — `build/train plan`: which layout to rent, before renting it.
 *
 * The idea: for N GPUs, enumerate dp x tp x pp (x cp where a sequence is long:
 * seq_len >= PLAN_CP_MIN_T), the micro-batch, recompute and ZeRO (0-3); predict each layout's memory per rank with the memory plan training
 * itself allocates from (train/memory.c, on the schedule's own activation
 * slots), and its step time from a cost model:
 *   compute  one GPU's measured compute per token (--profile, written by a run
 *            with --profile_out), split by FLOPs over the stages and tp ranks,
 *            times the recompute factor measured on l124m;
 *   bubble   the schedule's own formula: (p-1)/(m+p-1) for 1F1B; zb1 (ZB-H1)
 *            2(p-1)/(3m+2(p-1)) at 1F1B's own memory (zb1_memory=1f1b),
 *            (p-1)/(3m+p-1) with zb1_memory=busiest, and zbv (ZB-V)
 *            (p-1)/(6m+p-1), the zero-bubble
 *            ones with F = B = W, each a candidate beside 1F1B for every pp > 1
 *            (zbv where n_layers divides by 2pp; not with fp8, which they
 *            refuse), its memory from its own slots and W stores, so the
 *            ranking picks one where its modelled step is shorter;
 *   comm     nccl-tests' volumes over the link's bus bandwidth: per layer and
 *            micro-batch four tp sums of B*T*C; one data-parallel reduction of
 *            the stage's gradients, hidden behind the last backward but for
 *            its last bucket; zero=1's all-gather of the weights, after the
 *            optimizer; zero=2's reduce-scatter every micro-batch (hidden behind
 *            the backwards but for the last unit) and the same all-gather;
 *            zero=3's two all-gathers of the weights a micro-batch (forward and
 *            backward), one unit ahead, hidden behind the compute but for the
 *            first unit, and no all-gather after the optimizer (docs/zero.md);
 *            pipeline messages of B*T*C per micro-batch (zbv: twice, two chunks); context parallel's
 *            K/V all-gathers (forward and backward: a recompute's serves its
 *            backward) and its
 *            fp32 dK/dV reduce-scatter every layer and micro-batch, in the open
 *            (model/context.c does not overlap them); with cp the gradients
 *            are reduced and ZeRO shards over dp x cp;
 *   optimizer the profile's, per parameter on the rank.
 * Then the usual rule — fits one GPU: data parallel; else tensor parallel
 * inside a node, pipeline across nodes — and the ranking by tokens/s, shown
 * with the fastest of each dp x tp x pp first, then of each zero/recompute/schedule mix,
 * so the top rows are choices, not one layout with other micro-batch sizes.
 * It plans for GPUs (device=cuda, bf16) unless told otherwise, and says so;
 * without a profile, fp32 runs on the fp32 peak (exact GEMMs, no tensor cores). */
#include "trainer.h"
#include "../common/options.h"
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define H200_BF16_PEAK 989e12   /* dense bf16/fp16, the datasheet; only used without a profile */
#define H200_FP32_PEAK 67e12    /* fp32 without tensor cores: llm3d's fp32 GEMMs are exact fp32 (no TF32) by default */
#define NO_PROFILE_MFU 0.37     /* llm3d's measured l124m bf16 MFU on an H200 (docs/performance.md, 2026-12-02) */
static const double recompute_factor[3] = {1.0, 1.09, 1.20};   /* step time, l124m bf16 H200, 2026-12-02 (README) */
#define PLAN_CP_MIN_T 8192      /* context parallel is a candidate from this seq_len: below it activations rarely decide, and its
                                 * gathers cost about what the attention they feed does (docs/context-parallel.md) */

typedef struct {
    double compute_ms, optimizer_ms, host_ms, tokens, params;
    int dim, n_layers, vocab, have;       /* the model that measured it */
    char device[16], dtype[16];           /* its device (cpu, cuda) and compute dtype (fp32, bf16, fp16) */
    char device_key[32], precision_key[32];   /* the same as command-line keys, the plan's defaults with this profile */
} Profile;

static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(const StepSplit *h, int n, size_t field) {
    double *v = mallocCheck((size_t)n * sizeof(double));
    for (int i = 0; i < n; i++) v[i] = *(const double *)((const char *)&h[i] + field);
    qsort(v, n, sizeof(double), by_value);
    double m = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    free(v);
    return m;
}

void plan_write_profile(const Trainer *tr, const char *path) {
    int skip = tr->n_history > 4 ? 2 : 0, n = tr->n_history - skip;   /* the first steps warm up */
    if (n < 1) die("profile_out: no step was trained, so there is nothing to profile");
    const StepSplit *h = tr->history + skip;
    const Config *c = &tr->cfg;
    char tmp[4200];
    FILE *f = atomic_open(path, tmp, sizeof tmp);   /* the output door: every write checked, renamed into place */
    fprintf(f, "{\"llm3d_profile\": 1, \"device\": \"%s\", \"precision\": \"%s\", \"preset\": \"%s\", \"dim\": %d, \"n_layers\": %d, "
               "\"vocab_size\": %d, \"seq_len\": %d, \"batch_size\": %d, \"micro_batches\": %d, \"recompute\": %d, "
               "\"params\": %zu, \"tokens_per_step\": %ld, \"steps\": %d, \"step_ms\": %.4f, \"compute_ms\": %.4f, "
               "\"optimizer_ms\": %.4f, \"data_ms\": %.4f, \"host_ms\": %.4f}\n",
            tr->be->name, dtype_name(tr->be->act), c->preset, c->dim, c->n_layers, c->vocab_size, c->seq_len, c->batch_size, tr->accum,
            c->recompute, tr->model.n_params, (long)tr->accum * c->batch_size * c->seq_len, n,
            1e3 * median(h, n, offsetof(StepSplit, step)), 1e3 * median(h, n, offsetof(StepSplit, compute)),
            1e3 * median(h, n, offsetof(StepSplit, optimizer)), 1e3 * median(h, n, offsetof(StepSplit, data)),
            1e3 * median(h, n, offsetof(StepSplit, host)));
    char err[8600];
    if (atomic_try_commit(f, tmp, path, err, sizeof err) != 0) die("profile_out: %s", err);
    printf("profile | %s: median of %d steps, %.2f ms a step\n", path, n, 1e3 * median(h, n, offsetof(StepSplit, step)));
}

/* the text of a profile's string field `key` into out ("?" when absent): the profile is written by plan_write_profile */
static void profile_text(const char *buf, const char *key, char *out, size_t size) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *at = strstr(buf, pat);
    size_t n = 0;
    if (at) for (at += strlen(pat); at[n] && at[n] != '"' && n + 1 < size; n++) out[n] = at[n];
    if (!n && size > 1) out[n++] = '?';
    out[n] = 0;
}

static Profile read_profile(const char *path) {
    Profile p = {0};
    if (!path) return p;
    char err[1400];
    size_t n;
    char *buf = read_regular(path, "profile", 1 << 20, &n, err, sizeof err);
    if (!buf) die("plan: --profile: %s\n  hint: write one with a one-GPU run: build/train ... --profile_out=%s", err, path);
    if (!strstr(buf, "\"llm3d_profile\""))
        die("plan: '%s' is not an llm3d profile (no \"llm3d_profile\" key)\n  hint: --profile takes the file a run wrote with --profile_out", path);
    p.compute_ms = json_number(buf, "compute_ms", path, 0);
    p.optimizer_ms = json_number(buf, "optimizer_ms", path, 0);
    p.host_ms = json_number(buf, "host_ms", path, 0);
    p.tokens = json_number(buf, "tokens_per_step", path, 0);
    p.params = json_number(buf, "params", path, 0);
    p.vocab = (int)json_number(buf, "vocab_size", path, 0);
    p.dim = (int)json_number(buf, "dim", path, 0);
    p.n_layers = (int)json_number(buf, "n_layers", path, 0);
    profile_text(buf, "device", p.device, sizeof p.device);
    profile_text(buf, "precision", p.dtype, sizeof p.dtype);
    snprintf(p.device_key, sizeof p.device_key, "--device=%s", p.device);
    snprintf(p.precision_key, sizeof p.precision_key, "--precision=%s", p.dtype);
    if (!(p.compute_ms > 0 && p.tokens > 0 && p.params > 0 && p.optimizer_ms >= 0))
        die("plan: the profile '%s' lacks compute_ms, optimizer_ms, tokens_per_step or params", path);
    p.have = 1;
    free(buf);
    return p;
}

/* a profile's time per FLOP holds for the model, device and compute dtype that measured it: another of any of them is
 * refused, naming what differs */
static void check_profile_matches(const Profile *p, const char *path, const Config *c, const ModelConfig *mc) {
    const char *device = c->device == DEVICE_CUDA ? "cuda" : "cpu", *dtype = dtype_name(config_act_dtype(c->precision));
    const char *what = strcmp(p->device, device) ? "device" : strcmp(p->dtype, dtype) ? "precision"
                     : p->dim != mc->dim || p->n_layers != mc->n_layers || p->vocab != mc->vocab_size ? "model" : NULL;
    if (what)
        die("plan: the profile '%s' was measured on another %s than this plan's: it has device %s, compute dtype %s, dim %d, "
            "n_layers %d, vocab_size %d; this plan device %s, compute dtype %s, dim %d, n_layers %d, vocab_size %d, and a time "
            "per FLOP holds only where it was measured\n"
            "  hint: write a profile with the same model keys, --device and --precision (build/train ... --profile_out=PATH), "
            "or plan without --profile (without --device and --precision, the plan takes the profile's)", path, what, p->device,
            p->dtype, p->dim, p->n_layers, p->vocab, device, dtype, mc->dim, mc->n_layers, mc->vocab_size);
}

/* Matmul FLOPs per token of one layer, and of the head (the rest of model_flops_per_token). */
static void flops_split(const ModelConfig *mc, double *layer, double *head) {
    double total = model_flops_per_token(mc);
    ModelConfig none = *mc;
    none.n_layers = 0;
    *head = model_flops_per_token(&none);
    *layer = (total - *head) / mc->n_layers;
}

typedef struct {
    int dp, tp, pp, cp, B, m, recompute, zero, sched;   /* sched: pp_schedule (PP_*) */
    double mem_gib, step_ms, tokens_per_s, comm_ms, comm_total_ms, bubble;   /* comm_ms: exposed (in the step); total: busy */
    int fits, level, rank;   /* level: 0 the fastest of its dp x tp x pp, 1 of its zero/recompute mix too, 2 a near-duplicate */
    char why[160];
} Layout;

static double link_busbw(const char *key, const char *link) {   /* GB/s of bus bandwidth, nccl-tests' sense */
    if (!strcmp(link, "nvlink")) return 370;      /* 8x H100/H200 ring all-reduce, published */
    if (!strcmp(link, "pcie")) return 25;         /* PCIe gen5 x16 through the host */
    if (!strcmp(link, "ib")) return 45;           /* one 400 Gb/s NIC per GPU */
    if (!strcmp(link, "eth")) return 10;          /* 100 Gb/s Ethernet */
    char err[512];
    double v;
    if (option_number(key, link, 0.001, 1e6, 0, &v, err, sizeof err) != 0)
        die("plan: %s\n  hint: use nvlink, pcie, ib, eth or a measured bus bandwidth in GB/s (e.g. --%s=312)", err, key);
    return v;
}

/* One layout's memory (the largest stage) and predicted step. */
static void predict(Layout *L, const Config *base, const ModelConfig *mc, const Backend *be, const Profile *prof, int gpus_per_node,
                    double link_node, double link_net, double gpu_mem) {
    Config c = *base;
    c.dp = L->dp; c.tp = L->tp; c.pp = L->pp; c.cp = L->cp; c.batch_size = L->B; c.recompute = L->recompute; c.zero = L->zero;
    c.pp_schedule = L->sched;
    c.total_batch_tokens = L->m * L->B * c.seq_len * L->dp;
    Comm grid;
    comm_init_one(&grid);
    grid.world_size = L->dp * L->tp * L->pp * L->cp; grid.dp = L->dp; grid.tp = L->tp; grid.pp = L->pp; grid.cp = L->cp;
    Schedule s;
    trainer_schedule(&s, &c, mc, &grid, be);
    double most = 0, layer_f, head_f, heaviest = 0;
    int heaviest_layers = 0;
    flops_split(mc, &layer_f, &head_f);
    for (int st = 0; st < L->pp; st++) {
        ModelPart part = trainer_part(&c, mc, &s, st, 0, be->act);
        grid.pp_rank = st;
        MemoryPlan p = memory_plan(&c, mc, be, &grid, &part, c.recompute, c.optimizer, c.compute_weights, c.batch_size);
        if (p.total > most) most = p.total;
        int layers = 0;
        for (int k = 0; k < part.n_chunks; k++) layers += part.chunks[k].n_layers;
        double f = layers * layer_f * recompute_factor[L->recompute] + (part.has_head ? head_f : 0);
        if (f > heaviest) { heaviest = f; heaviest_layers = layers; }
    }
    L->mem_gib = most / 1073741824.0;
    L->fits = most <= gpu_mem;
    /* compute of the heaviest stage, one micro-batch, from the profile's time per FLOP */
    double tokens = (double)L->B * c.seq_len;
    double peak = be->act == DTYPE_FP32 ? H200_FP32_PEAK : H200_BF16_PEAK;
    double s_per_flop = prof->have ? prof->compute_ms / 1e3 / (prof->tokens * model_flops_per_token(mc))
                                   : 1.0 / (peak * NO_PROFILE_MFU);
    double micro = tokens * heaviest * s_per_flop / L->tp / L->cp;   /* cp: each rank 1/cp of every sequence, balanced */
    double compute = micro * L->m;
    double bubble_frac = schedule_bubble_formula(&s);
    double pipeline = compute / (1 - bubble_frac);
    /* communication: tp inside a node, dp and pp across nodes when the job spans several */
    int multi = L->dp * L->tp * L->pp * L->cp > gpus_per_node;
    double act_bytes = tokens / L->cp * mc->dim * dtype_size(be->act);   /* a rank's share of the micro-batch */
    double tp_s = L->tp > 1 ? 4.0 * heaviest_layers * L->m * act_bytes * 2.0 * (L->tp - 1) / L->tp / (link_node * 1e9) : 0;
    /* cp: a layer gathers the sequence's K/V (act dtype) in the forward and again for the backward (a recompute's
     * gather serves it: model/context.c), and reduce-scatters dK/dV in fp32; a rank moves (cp-1)/cp of each; inside a
     * node while tp x cp fits one */
    double kv = tokens * 2.0 * mc->n_kv_heads / L->tp * (mc->dim / mc->n_heads), gathers = 2;
    double cp_bw = L->tp * L->cp <= gpus_per_node ? link_node : link_net;
    double cp_s = L->cp > 1 ? heaviest_layers * L->m * kv * (gathers * dtype_size(be->act) + 4.0) * (L->cp - 1) / L->cp / (cp_bw * 1e9) : 0;
    double params_rank = model_count_params(mc) / (double)(L->pp * L->tp);
    int D = L->dp * L->cp;   /* the ranks holding the same weights: gradients reduced, ZeRO sharded over them */
    double dp_bw = multi ? link_net : link_node;
    double dp_total = D > 1 ? params_rank * 4 * 2.0 * (D - 1) / D / (dp_bw * 1e9) : 0;
    double last_bucket = D > 1 ? fmin(dp_total, c.bucket_mb * 1048576 * 2.0 / (dp_bw * 1e9)) : 0;
    double dp_exposed = fmax(last_bucket, dp_total - micro * 2.0 / 3.0);   /* hidden behind the last backward */
    double weights_once = D > 1 ? params_rank * dtype_size(be->act) * (D - 1.0) / D / (dp_bw * 1e9) : 0;
    double unit = 1.0 / (heaviest_layers + 2);   /* one unit's share of the stage's parameters, roughly */
    if (L->zero >= 2) {   /* a reduce-scatter (half an all-reduce) every micro-batch, behind every backward but the last unit's */
        dp_total = L->m * dp_total / 2;
        dp_exposed = fmax(dp_total * unit / L->m, dp_total - compute * 2.0 / 3.0);
    }
    if (L->zero == 3)   /* the weights gathered twice a micro-batch, a unit ahead: behind the compute but for the first unit */
        dp_exposed += fmax(2.0 * weights_once * unit, 2.0 * L->m * weights_once - compute);
    else if (L->zero)   /* zero=1/2: the updated weights are all-gathered after the optimizer, in the open */
        dp_exposed += weights_once;
    double gather = L->zero == 3 ? 2.0 * L->m * weights_once : L->zero ? weights_once : 0;   /* all the weights' gathers, hidden or not */
    double pp_s = L->pp > 1 ? 2.0 * L->m * act_bytes * (L->sched == PP_ZBV ? 2 : 1) / ((multi ? link_net : link_node) * 1e9) : 0;
    double opt = prof->have ? prof->optimizer_ms / 1e3 * params_rank / prof->params / (L->zero ? D : 1) : 0;
    double host = prof->have ? prof->host_ms / 1e3 : 0;
    double step = pipeline + tp_s + cp_s + dp_exposed + pp_s + opt + host;
    L->step_ms = step * 1e3;
    L->tokens_per_s = L->m * tokens * L->dp / step;
    L->comm_ms = (tp_s + cp_s + dp_exposed + pp_s) * 1e3;
    L->comm_total_ms = (tp_s + cp_s + dp_total + gather + pp_s) * 1e3;   /* the dp reduction's hidden part included */
    L->bubble = bubble_frac;
    schedule_free(&s);
}

static int divides_model(const ModelConfig *mc, int tp) { return mc->n_heads % tp == 0 && mc->n_kv_heads % tp == 0 && mc->ffn_dim % tp == 0; }

static int by_speed(const void *a, const void *b) {
    const Layout *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (fabs(x->tokens_per_s - y->tokens_per_s) > 1e-6 * x->tokens_per_s) return x->tokens_per_s < y->tokens_per_s ? 1 : -1;
    return x->mem_gib < y->mem_gib ? -1 : x->mem_gib > y->mem_gib;   /* as fast: the one with room to spare */
}

/* Shown first: the fastest layout of each dp x tp x pp, then of each zero/recompute mix, then the rest
 * (other micro-batch sizes of a mix already shown); fitting layouts before the others, by speed within. */
static int by_level(const void *a, const void *b) {
    const Layout *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (x->level != y->level) return x->level - y->level;
    return by_speed(a, b);
}

static const char *usage =
    "usage: build/train plan --preset=P --gpus=N [--device=cuda --precision=bf16] [--gpu_mem_gib=80] [--gpus_per_node=8] [--link=nvlink|pcie|ib|eth|GBPS]\n"
    "                        [--net=ib|eth|GBPS] [--profile=PROFILE.json] [--out=PLAN.json] [--top=15] [config keys]\n"
    "  every dp x tp x pp (x cp from seq_len 8192) x micro-batch x recompute x zero layout of N GPUs: memory per rank (the memory plan\n"
    "  training allocates from) and predicted step time; ranked, each with why. A profile comes from a\n"
    "  one-GPU run with --profile_out=PATH; without one, compute is estimated from FLOPs. It plans for GPUs,\n"
    "  device=cuda precision=bf16, unless --device, --precision, a --config file or a --profile say otherwise (a\n"
    "  profile holds for the model, device and compute dtype it measured: another is refused). The fastest\n"
    "  layout of each dp x tp x pp comes first, then each zero/recompute/schedule mix, then the other micro-batch sizes.\n";

int plan_main(int argc, char **argv) {
    int gpus = 0, per_node = 8, top = 15;
    double mem_gib = 80;
    const char *link = "nvlink", *net = "ib", *profile = NULL, *out = NULL;
    char **rest = callocCheck((size_t)argc + 4, sizeof(char *));
    int n = 0, has_device = 0, has_precision = 0, has_config = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc; i++) {   /* plan is for GPUs: cuda and bf16 unless the command line, a config file or a profile say */
        has_device |= !strncmp(argv[i], "--device", 8);
        has_precision |= !strncmp(argv[i], "--precision", 11);
        has_config |= !strncmp(argv[i], "--config", 8);
        if (!strncmp(argv[i], "--profile=", 10)) profile = argv[i] + 10;
    }
    Profile prof = read_profile(profile);
    if (!has_device && !has_config) rest[n++] = prof.have ? prof.device_key : "--device=cuda";
    if (!has_precision && !has_config) rest[n++] = prof.have ? prof.precision_key : "--precision=bf16";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) { printf("%s", usage); free(rest); return 0; }
        if (!strncmp(a, "--gpus=", 7)) gpus = (int)option_number_or_die("plan", "gpus", a + 7, 1, 65536, 1);
        else if (!strncmp(a, "--gpus_per_node=", 16)) per_node = (int)option_number_or_die("plan", "gpus_per_node", a + 16, 1, 65536, 1);
        else if (!strncmp(a, "--gpu_mem_gib=", 14)) mem_gib = option_number_or_die("plan", "gpu_mem_gib", a + 14, 0.001, 1e6, 0);
        else if (!strncmp(a, "--link=", 7)) link = a + 7;
        else if (!strncmp(a, "--net=", 6)) net = a + 6;
        else if (!strncmp(a, "--profile=", 10)) profile = a + 10;
        else if (!strncmp(a, "--out=", 6)) out = a + 6;
        else if (!strncmp(a, "--top=", 6)) top = (int)option_number_or_die("plan", "top", a + 6, 1, 4096, 1);
        else rest[n++] = argv[i];
    }
    if (gpus < 1 || gpus > 65536) die("plan: --gpus=N is required, 1 to 65536\n%s", usage);
    if (per_node < 1) die("plan: --gpus_per_node must be at least 1");
    if (!(mem_gib > 0)) die("plan: --gpu_mem_gib must be a positive number of GiB");
    char err[4400];
    if (out && check_writable(out, 0, "--out", err, sizeof err) != 0) die("plan: %s", err);   /* before the work */
    double link_node = link_busbw("link", link), link_net = link_busbw("net", net);
    Config c;
    config_parse_args(&c, n, rest);
    free(rest);
    if (!c.vocab_size) c.vocab_size = prof.have && prof.vocab > 0 ? prof.vocab : 32000;   /* the profile's, else LLaMA's */
    ModelConfig mc;
    model_config_from(&mc, &c, c.vocab_size);
    if (prof.have) check_profile_matches(&prof, profile, &c, &mc);
    Backend planned = memory_plan_backend(&c);   /* the GPU's sizes, planned on any machine */
    long global = c.total_batch_tokens ? c.total_batch_tokens : (long)c.batch_size * c.seq_len * gpus;
    Layout *all = callocCheck(8192, sizeof(Layout));
    int count = 0;
    for (int tp = 1; tp <= gpus && tp <= per_node; tp *= 2)
        for (int pp = 1; tp * pp <= gpus && pp <= mc.n_layers; pp++)
        for (int cp = 1; tp * pp * cp <= gpus; cp *= 2) {   /* cp: only for long sequences it can cut in 2*cp chunks */
            if (cp > 1 && (c.seq_len < PLAN_CP_MIN_T || c.seq_len % (2 * cp))) break;
            if (gpus % (tp * pp * cp) || !divides_model(&mc, tp)) continue;
            int dp = gpus / (tp * pp * cp);
            for (int B = 1; B <= c.batch_size * 4 && B <= 64; B *= 2) {
                long per = (long)B * c.seq_len * dp;
                if (global % per) continue;
                int m = (int)(global / per);
                if (m < pp || m > 4096) continue;
                for (int r = 0; r < 3; r++)
                    for (int z = 0; z <= (dp * cp > 1 ? 3 : 0); z++)
                    for (int sc = 0; sc < 3; sc++) {   /* 1f1b, and the zero-bubble zb1 and zbv where they run */
                        int sched = sc == 0 ? PP_1F1B : sc == 1 ? PP_ZB1 : PP_ZBV;
                        if (sc && (pp == 1 || c.precision == PRECISION_FP8)) continue;
                        if (sched == PP_ZBV && mc.n_layers % (2 * pp)) continue;
                        if (count == 8192) break;
                        if (z >= 2 && (c.tie_embeddings || c.grad_reduce_dtype == GRAD_REDUCE_BF16)) continue;   /* refused: config.c */
                        if (z == 3 && c.compute_weights == COMPUTE_WEIGHTS_PER_LAYER) continue;
                        Layout *L = &all[count++];
                        *L = (Layout){.dp = dp, .tp = tp, .pp = pp, .cp = cp, .B = B, .m = m, .recompute = r, .zero = z, .sched = sched};
                        predict(L, &c, &mc, &planned, &prof, per_node, link_node, link_net, mem_gib * 1073741824.0);
                    }
            }
        }
    if (!count) die("plan: no layout of %d GPUs divides this model (heads %d, kv heads %d, ffn %d, %d layers) and a step of %ld tokens",
                    gpus, mc.n_heads, mc.n_kv_heads, mc.ffn_dim, mc.n_layers, global);
    qsort(all, count, sizeof(Layout), by_speed);
    for (int i = 0; i < count; i++) {
        all[i].level = 2;
        int first_grid = 1, first_mix = 1;
        for (int j = 0; j < i; j++) {
            if (all[j].fits != all[i].fits || all[j].dp != all[i].dp || all[j].tp != all[i].tp || all[j].pp != all[i].pp ||
                all[j].cp != all[i].cp) continue;
            first_grid = 0;
            if (all[j].zero == all[i].zero && all[j].recompute == all[i].recompute && all[j].sched == all[i].sched) first_mix = 0;
        }
        all[i].level = first_grid ? 0 : first_mix ? 1 : 2;
        all[i].rank = i + 1;
    }

    /* why, in the usual rule's words */
    int one_gpu = 0;
    for (int i = 0; i < count; i++) if (all[i].fits && all[i].tp == 1 && all[i].pp == 1) one_gpu = 1;
    for (int i = 0; i < count; i++) {
        Layout *L = &all[i];
        int plain_fits = 1;   /* the same layout without ZeRO */
        for (int k = 0; k < count; k++)
            if (all[k].zero == 0 && all[k].dp == L->dp && all[k].tp == L->tp && all[k].pp == L->pp && all[k].cp == L->cp && all[k].B == L->B &&
                all[k].recompute == L->recompute) plain_fits = all[k].fits;
        if (!L->fits) snprintf(L->why, sizeof L->why, "does not fit: %.1f GiB > %.0f GiB", L->mem_gib, mem_gib);
        else if (L->zero >= 2 && !plain_fits)
            snprintf(L->why, sizeof L->why, "ZeRO-%d: fits only with %s sharded over dp%s=%d%s", L->zero,
                     L->zero == 3 ? "weights, gradients and optimizer state" : "gradients and optimizer state", L->cp > 1 ? " x cp" : "",
                     L->dp * L->cp, L->zero == 3 ? "; each unit gathered a unit ahead, twice a micro-batch" : "");
        else if (L->cp > 1)
            snprintf(L->why, sizeof L->why, "context parallel: each rank 1/%d of every sequence's activations, K/V gathered every layer", L->cp);
        else if (L->tp == 1 && L->pp == 1) snprintf(L->why, sizeof L->why, "the model fits one GPU: data parallel, the least communication");
        else if (one_gpu) snprintf(L->why, sizeof L->why, "fits, but the model fits one GPU: splitting it only adds communication%s",
                                   L->pp > 1 ? " and a bubble" : "");
        else if (L->tp * L->pp > per_node && L->tp > 1 && L->pp == 1) snprintf(L->why, sizeof L->why, "tensor parallel across nodes: slow links on every layer");
        else snprintf(L->why, sizeof L->why, "%s%s%s", L->tp > 1 ? "tensor parallel inside a node" : "",
                      L->pp > 1 ? (L->tp > 1 ? ", pipeline across stages" : "pipeline: the model does not fit one GPU") : "",
                      L->sched == PP_ZB1 ? "; zb1: W fills the drain" : L->sched == PP_ZBV ? "; zbv: two chunks in V, W fills the rest" : "");
    }
    static const char *rname[] = {"none", "sel", "full"};
    printf("plan | %s | %d GPUs (%d a node, %.0f GiB each) | device %s, precision %s%s | link %s %.0f GB/s, net %s %.0f GB/s | "
           "%ld tokens a step\n", c.preset[0] ? c.preset : "model", gpus, per_node, mem_gib, c.device == DEVICE_CUDA ? "cuda" : "cpu",
           config_precision_name(c.precision), has_device || has_precision || has_config ? "" : prof.have ? " (the profile's: a profile plans what measured it)"
           : " (plan's defaults: --device, --precision change them)",
           link, link_node, net, link_net, global);
    if (prof.have) printf("plan | compute from the profile %s\n", profile);
    else printf("plan | compute estimated from FLOPs at %.0f%% of an H200's dense %s peak, %.0f TFLOP/s (no --profile%s)\n", 100 * NO_PROFILE_MFU,
                c.precision == PRECISION_FP32 ? "fp32" : "bf16", (c.precision == PRECISION_FP32 ? H200_FP32_PEAK : H200_BF16_PEAK) / 1e12,
                c.precision == PRECISION_FP8 ? "; fp8 counted at bf16's rate: measured 1.03-1.11x bf16, docs/performance.md" : "");
    printf("plan | first the fastest of each dp x tp x pp x cp, then each zero/recompute/schedule mix, then other micro-batch sizes (#: rank by speed);\n"
           "       comm: exposed (in the step's time) / total (busy, the part hidden behind the backward included)%s\n",
           c.seq_len >= PLAN_CP_MIN_T ? "" : "; no cp: seq_len under 8192");
    printf("  #  dp tp pp cp   B    m recomp zero  mem/rank   step ms    tokens/s  comm exposed/total ms  bubble sched  why\n");
    Layout *shown_order = mallocCheck((size_t)count * sizeof(Layout));
    memcpy(shown_order, all, (size_t)count * sizeof(Layout));
    qsort(shown_order, count, sizeof(Layout), by_level);
    for (int i = 0; i < count && i < top; i++) {
        Layout *L = &shown_order[i];
        printf("%3d %3d %2d %2d %2d %3d %4d %6s %4d %7.2f GiB %9.1f %11.0f %9.1f / %-9.1f %6.1f%% %5s  %s\n", L->rank, L->dp, L->tp, L->pp, L->cp, L->B,
               L->m, rname[L->recompute], L->zero, L->mem_gib, L->step_ms, L->tokens_per_s, L->comm_ms, L->comm_total_ms, 100 * L->bubble,
               L->pp > 1 ? schedule_name(L->sched) : "-", L->why);
    }
    free(shown_order);
    if (out) {
        char tmp[4200];
        FILE *f = atomic_open(out, tmp, sizeof tmp);
        fprintf(f, "{\"gpus\": %d, \"gpu_mem_gib\": %g, \"global_tokens\": %ld, \"layouts\": [\n", gpus, mem_gib, global);
        for (int i = 0; i < count; i++) {
            const Layout *L = &all[i];
            fprintf(f, "  {\"dp\": %d, \"tp\": %d, \"pp\": %d, \"cp\": %d, \"batch_size\": %d, \"micro_batches\": %d, \"recompute\": %d, \"zero\": %d, "
                       "\"memory_bytes\": %.0f, \"fits\": %d, \"step_ms\": %.3f, \"tokens_per_s\": %.0f, \"comm_exposed_ms\": %.3f, "
                       "\"comm_total_ms\": %.3f, \"bubble\": %.4f, \"pp_schedule\": \"%s\"}%s\n",
                    L->dp, L->tp, L->pp, L->cp, L->B, L->m, L->recompute, L->zero, L->mem_gib * 1073741824.0, L->fits, L->step_ms, L->tokens_per_s,
                    L->comm_ms, L->comm_total_ms, L->bubble, schedule_name(L->sched), i + 1 < count ? "," : "");
        }
        fprintf(f, "]}\n");
        atomic_commit(f, tmp, out);
        printf("json | %s (%d layouts)\n", out, count);
    }
    if (!all[0].fits) {   /* sorted: nothing fits; say what is closest */
        Layout best = all[0];
        for (int i = 1; i < count; i++) if (all[i].mem_gib < best.mem_gib) best = all[i];
        free(all);
        die("plan: no layout of %d GPUs fits %.0f GiB a GPU; the closest, dp=%d tp=%d pp=%d cp=%d B=%d recompute=%s zero=%d, needs %.1f GiB "
            "(%.1f GiB over)\n  hint: more GPUs, GPUs with more memory, optimizer=adamw8bit, or a smaller model",
            gpus, mem_gib, best.dp, best.tp, best.pp, best.cp, best.B, rname[best.recompute], best.zero, best.mem_gib, best.mem_gib - mem_gib);
    }
    free(all);
    return 0;
}
