/* train/schedule_cli.c — `build/train schedule`: the dry run of a step's
 * schedule, with no model and no ranks.
 *
 * It builds the very action lists a training run with the same keys would
 * execute (trainer_schedule), proves them sound by simulation (every send
 * meets its receive, no stage waits for ever), and prints each stage's
 * timeline, the bubble beside its formula and the micro-batches each stage
 * holds at once; --svg=PATH also draws it. With zero=2/3 it also checks and
 * sums up each stage's reduce-scatters, gathers and frees (docs/zero.md);
 * --actions prints every stage's whole list. cp changes no action (a cp rank
 * runs the step's on its part of every sequence; the K/V gathers are inside
 * each layer's forward and backward), only the ranks ZeRO shards over: dp x cp. */
#include "trainer.h"
#include "../common/options.h"
#include <stdlib.h>
#include <string.h>

static const char *usage =
    "usage: build/train schedule [--pp=4] [--micro_batches=8] [--pp_schedule=1f1b|gpipe|interleaved|zb1|zbv] [--pp_virtual=2]\n"
    "                            [--dp=2 --cp=2 --bucket_mb=25 --zero=1|2|3] [--preset=P | model keys] [--svg=PATH] [--actions]\n"
    "  the step's action lists for every pipeline stage, checked by simulation and drawn;\n"
    "  --micro_batches=m sets total_batch_tokens = m * batch_size * seq_len * dp; --actions lists every action in order\n";

int schedule_main(int argc, char **argv) {
    const char *svg = NULL;
    long micro = 0;
    int actions = 0;
    char **rest = callocCheck((size_t)argc + 1, sizeof(char *));
    int n = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) { printf("%s", usage); free(rest); return 0; }
        if (!strncmp(argv[i], "--svg=", 6)) svg = argv[i] + 6;
        else if (!strcmp(argv[i], "--actions")) actions = 1;
        else if (!strncmp(argv[i], "--micro_batches=", 16) || !strncmp(argv[i], "--micro-batches=", 16)) {
            micro = (long)option_number_or_die("schedule", "micro_batches", argv[i] + 16, 1, 100000, 1);
        } else rest[n++] = argv[i];
    }
    Config c;
    config_parse_args(&c, n, rest);
    free(rest);
    if (micro) {
        long tokens = micro * c.batch_size * c.seq_len * c.dp;
        if (tokens > 2147483647L) die("schedule: --micro_batches=%ld makes a step of more than 2^31 tokens; use a smaller batch_size", micro);
        c.total_batch_tokens = (int)tokens;
    }
    if (!c.vocab_size) c.vocab_size = 32000;   /* no shards here: the vocabulary only sizes the head's bucket */
    ModelConfig mc;
    model_config_from(&mc, &c, c.vocab_size);
    Comm grid;   /* the grid's shape, for one process: no ranks are started */
    comm_init_one(&grid);
    grid.dp = c.dp; grid.pp = c.pp; grid.cp = c.cp; grid.tp = c.tp;   /* cp: ZeRO shards over dp x cp (the schedule is cp's too) */
    Schedule s;
    trainer_schedule(&s, &c, &mc, &grid, backend_cpu());
    ScheduleSim sim;
    char err[2048];
    int rc = schedule_check(&s, &sim, err, sizeof err);
    char replicas[96];   /* the ranks holding the same weights: dp, or dp x cp (a cp rank runs these actions on its part of each sequence) */
    if (c.cp > 1) snprintf(replicas, sizeof replicas, "dp=%d x cp=%d (each cp rank the same actions on 1/%d of every sequence)", c.dp, c.cp, c.cp);
    else snprintf(replicas, sizeof replicas, "dp=%d", c.dp);
    printf("schedule | %s | pp=%d stages x %d micro-batches%s | %s%s%s | %d layers\n", schedule_name(s.kind), s.stages, s.micro_batches,
           s.kind == PP_ZBV ? " x 2 chunks in V order" : s.chunks > 1 ? " x interleaved chunks" : "", replicas,
           c.zero && c.dp * c.cp > 1 ? (const char *[]){"", " ZeRO-1", " ZeRO-2", " ZeRO-3"}[c.zero] : "",
           c.zero && c.cp > 1 ? " over dp x cp" : "", c.n_layers);
    if (rc != 0) {
        schedule_free(&s);
        die("schedule: %s", err);
    }
    schedule_print(&s, &sim, stdout);
    printf("check    | every send meets its receive in order; every action finds its inputs (waited for); no buffer is written "
           "while a send reads it; no stage waits for ever, as MPI or NCCL (a stream a lane) runs the messages\n");
    if (s.zero) {
        printf("check    | zero=%d: every gradient place is reduced before it is written again and before the optimizer%s\n", s.zero,
               s.zero == 3 ? "; every unit's weights are gathered and waited for before a compute reads them, into a free place, "
                             "and released after their last use" : "");
        size_t bytes = c.precision == PRECISION_FP32 ? 4 : 2;
        schedule_print_zero(&s, &sim, bytes, stdout);
    }
    if (actions) schedule_print_actions(&s, stdout);
    double p = s.stages, m = s.micro_batches, v = s.chunks;
    if (s.kind == PP_ZB1 && s.zb1_memory == ZB1_MEMORY_1F1B)   /* stage st within 1F1B's p - st: each idle (p-1)(F+B), proved least there */
        printf("bubble   | simulated %.2f%% of the step idle (forward 1, B 1, W 1 time units); formula at 1F1B's own memory (zb1_memory=1f1b: "
               "stage s holds at most p-s micro-batches) (p-1)(F+B) idle a stage: 2(p-1)/(3m+2(p-1)) = %.2f%%, two thirds of 1F1B's idle "
               "time (p-1)(F+B+W); ZB-H1's (p-1)/(3m+p-1) = %.2f%% needs zb1_memory=busiest; 1F1B at this p and m: (p-1)/(m+p-1) = %.2f%%",
               100 * sim.bubble, 100 * schedule_bubble_formula(&s), 100 * (p - 1) / (3 * m + p - 1), 100 * (p - 1) / (m + p - 1));
    else if (s.kind == PP_ZB1)   /* ZB-H1: each stage idle (p-1)(F+B-W) against 1F1B's (p-1)(F+B+W) (Qi et al. 2023) */
        printf("bubble   | simulated %.2f%% of the step idle (forward 1, B 1, W 1 time units); formula ZB-H1 (p-1)(F+B-W) idle a stage: "
               "(p-1)/(3m+p-1) = %.2f%%, a third of 1F1B's idle time (p-1)(F+B+W); 1F1B at this p and m: (p-1)/(m+p-1) = %.2f%%",
               100 * sim.bubble, 100 * schedule_bubble_formula(&s), 100 * (p - 1) / (m + p - 1));
    else if (s.kind == PP_ZBV)   /* ZB-V: (p-1)(F+B-2W) = 0 beyond the V's fill, with F, B, W a chunk's (half a stage's) */
        printf("bubble   | simulated %.2f%% of the step idle (a chunk's forward 1, B 1, W 1 time units); formula ZB-V (p-1)(F+B-2W) = 0 "
               "beyond the fill of p-1 chunk-forwards: (p-1)/(6m+p-1) = %.2f%%; 1F1B at this p and m: (p-1)/(m+p-1) = %.2f%%",
               100 * sim.bubble, 100 * schedule_bubble_formula(&s), 100 * (p - 1) / (m + p - 1));
    else
        printf("bubble   | simulated %.2f%% of the step idle (forward 1, backward 2 time units); formula (p-1)/(%sm+p-1) = %.2f%%",
               100 * sim.bubble, v > 1 ? "v*" : "", 100 * schedule_bubble_formula(&s));
    if (v > 1 && s.kind == PP_INTERLEAVED) printf("; over the ideal compute time, Megatron's (p-1)/(v*m) = %.2f%%", 100 * (p - 1) / (v * m));
    printf("\nsends    | posted without waiting, each waited for where its data is needed: the figures above are MPI's (a message "
           "done once both sides posted it); on NCCL, each lane's groups one after another (to and from each neighbour: 4 lanes) %.2f%%\n", 100 * sim.bubble_fifo);
    printf("in flight| %s each stage holds at once:", s.kind == PP_ZBV ? "chunks (half a stage's layers) of micro-batches" : "micro-batches");
    for (int st = 0; st < s.stages; st++) printf(" %d", s.slots[st]);
    if (s.split) {   /* what W reads, held from each B to its W (model/llama.h WKeep) */
        printf("; W stores (%s between B and W at once):", s.kind == PP_ZBV ? "chunks" : "micro-batches");
        for (int st = 0; st < s.stages; st++) printf(" %d", s.keeps[st]);
        if (s.kind == PP_ZB1)
            printf("; zb1_memory=%s: each stage holds at most %s (1F1B: p-s, %d on stage 0)", s.zb1_memory == ZB1_MEMORY_1F1B ? "1f1b" : "busiest",
                   s.zb1_memory == ZB1_MEMORY_1F1B ? "1F1B's p-s" : "p, 1F1B's stage 0's", s.stages);
        else printf("; the order was found holding at most %d micro-batches a stage (1F1B: %d)", s.zb_cap, s.stages);
    }
    printf("\n");
    if (svg) {
        char title[256], title2[256];
        snprintf(title, sizeof title, "%s: pp=%d, m=%d%s, bubble %.1f%% (formula %.1f%%)", schedule_name(s.kind), s.stages, s.micro_batches,
                 s.kind == PP_INTERLEAVED ? ", interleaved" : s.kind == PP_ZBV ? ", two chunks a stage in V order" : "", 100 * sim.bubble,
                 100 * schedule_bubble_formula(&s));
        Schedule b;
        ScheduleSim bsim;
        int beside = s.split;   /* the zero-bubble ones beside 1F1B at the same p and m, one time scale */
        if (beside) {
            Config c1 = c;
            c1.pp_schedule = PP_1F1B;
            trainer_schedule(&b, &c1, &mc, &grid, backend_cpu());
            if (schedule_check(&b, &bsim, err, sizeof err) != 0) die("schedule: internal: 1f1b beside it: %s", err);
            snprintf(title2, sizeof title2, "1f1b: pp=%d, m=%d, bubble %.1f%% (the same step, forward 1, backward 2 = B + W)", b.stages,
                     b.micro_batches, 100 * bsim.bubble);
        }
        if (schedule_write_svg_beside(&s, &sim, title, beside ? &b : NULL, beside ? &bsim : NULL, title2, svg) != 0)
            die("schedule: cannot write '%s'", svg);
        if (beside) { schedule_sim_free(&bsim); schedule_free(&b); }
        printf("svg      | %s%s\n", svg, beside ? " (1f1b beside it)" : "");
    }
    schedule_sim_free(&sim);
    schedule_free(&s);
    return 0;
}
