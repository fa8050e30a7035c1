/* tests/test_schedule.c — the step schedules, without a model:
 *   - 1F1B, GPipe and interleaved 1F1B lists pass the checker for many (p, m, v)
 *     and their simulated bubble equals the textbook formula;
 *   - 1F1B keeps at most p - s micro-batches in flight on stage s, GPipe m;
 *   - the data-parallel pass splits the last backward where a bucket completes
 *     and starts its reduction there, before the backward of the first layer;
 *   - deliberately broken schedules are caught: swapped messages, a missing
 *     receive, a backward before its gradient arrived, and a deadlock;
 *   - ZeRO-2/3's pass: every gather before its read, every free after its last
 *     read, every place reduced before it is written again; the same lists
 *     with a wait, a free or a reduction's wait removed are caught;
 *   - zb1 (ZB-H1, the backward split into B and W) and zbv (ZB-V, two chunks a
 *     stage in V order): sound for many (p, m) as MPI and as NCCL's one comm
 *     stream run them, each W after its B on its B's store, the simulated
 *     bubble equal to the formula, the memory within the order's cap (1F1B's p
 *     up to 2p), the buckets and ZeRO's reductions after the W
 *     that completes them (never after a B), ZeRO-3's gathers before B alone;
 *     zbv's turn as copies on stage p-1;
 *     a W before its B, a missing W and a fused backward in it are caught;
 *   - waits: a missing wait, a send's buffer written before its wait, and the
 *     two stages each waiting for the other's message are caught;
 *   - `build/train schedule` prints the same list's timeline and bubble,
 *     draws it, and refuses a pipeline it cannot run; with zero=3 it sums up
 *     and lists the gathers. */
#include "test.h"
#include "../parallel/schedule.h"
#include "../parallel/ddp.h"
#include "../common/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void build_held(Schedule *s, int kind, int p, int m, int v, int steps_per_chunk, int zb1_memory) {
    int steps[256] = {0};
    for (int i = 0; i < p * v; i++) steps[i] = steps_per_chunk + (i == 0);   /* stage 0 chunk 0 also has the embedding step */
    schedule_build(s, kind, p, m, v, steps, zb1_memory);
    for (int st = 0; st < p; st++) schedule_add_data_parallel(s, st, NULL, 0, 0);
    schedule_assign_slots(s);
}
static void build(Schedule *s, int kind, int p, int m, int v, int steps_per_chunk) {
    build_held(s, kind, p, m, v, steps_per_chunk, ZB1_MEMORY_1F1B);
}

static void test_builders(void) {
    const char *names[] = {"1f1b", "gpipe", "interleaved"};
    int cases[][3] = {{1, 1, 1}, {1, 4, 1}, {2, 2, 1}, {2, 4, 1}, {4, 4, 1}, {4, 8, 1}, {4, 16, 1}, {3, 7, 1},
                      {2, 4, 2}, {2, 8, 2}, {4, 8, 2}, {4, 8, 3}, {3, 6, 2}};
    for (int kind = 0; kind < 3; kind++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            int p = cases[c][0], m = cases[c][1], v = cases[c][2];
            if ((kind == PP_INTERLEAVED) != (v > 1)) continue;
            Schedule s;
            build(&s, kind, p, m, v, 2);
            ScheduleSim sim;
            char err[512];
            int rc = schedule_check(&s, &sim, err, sizeof err);
            CHECK(rc == 0, "%s p=%d m=%d v=%d: %s", names[kind], p, m, v, err);
            double want = schedule_bubble_formula(&s);
            CHECK(fabs(sim.bubble - want) < 1e-9, "%s p=%d m=%d v=%d: simulated bubble %.4f, formula %.4f", names[kind], p, m, v, sim.bubble, want);
            for (int st = 0; st < p && kind == PP_1F1B; st++) {
                int want_slots = p - st < m ? p - st : m;
                CHECK(s.slots[st] == want_slots, "1f1b p=%d m=%d: stage %d holds %d micro-batches, not %d", p, m, st, s.slots[st], want_slots);
            }
            if (kind == PP_GPIPE) CHECK(s.slots[0] == m, "gpipe p=%d m=%d: stage 0 holds %d micro-batches, not %d", p, m, s.slots[0], m);
            if (rc == 0 && c == 5) printf("%s p=%d m=%d v=%d: bubble %.4f (formula %.4f), makespan %.0f\n", names[kind], p, m, v, sim.bubble, want, sim.makespan);
            schedule_sim_free(&sim);
            schedule_free(&s);
        }
}

static void test_forward_only(void) {
    for (int v = 1; v <= 2; v++) {
        Schedule s;
        schedule_build_forward(&s, v > 1 ? PP_INTERLEAVED : PP_1F1B, 4, 5, v);
        schedule_assign_slots(&s);
        ScheduleSim sim;
        char err[512];
        CHECK(schedule_check(&s, &sim, err, sizeof err) == 0, "forward-only v=%d: %s", v, err);
        schedule_sim_free(&sim);
        schedule_free(&s);
    }
}

static void test_data_parallel(void) {
    /* one stage, two micro-batches, a chunk of 4 layers + embedding = 5 steps; buckets: head (step -1), layers 3..2, layers 1..0 + emb */
    Schedule s;
    int steps[1] = {5};
    schedule_build(&s, PP_1F1B, 1, 2, 1, steps, 0);
    BucketReady ready[3] = {{0, -1}, {0, 1}, {0, 4}};
    schedule_add_data_parallel(&s, 0, ready, 3, 1);
    schedule_assign_slots(&s);
    /* F0 B0[0,5) F1 R0 B1[0,2) R1 B1[2,5) R2 W0 W1 W2 OPT G0 G1 G2 GW0 GW1 GW2 */
    ActionKind want[] = {ACT_FORWARD, ACT_BACKWARD, ACT_FORWARD, ACT_REDUCE, ACT_BACKWARD, ACT_REDUCE, ACT_BACKWARD, ACT_REDUCE,
                         ACT_REDUCE_WAIT, ACT_REDUCE_WAIT, ACT_REDUCE_WAIT, ACT_OPTIMIZER, ACT_GATHER, ACT_GATHER, ACT_GATHER,
                         ACT_GATHER_WAIT, ACT_GATHER_WAIT, ACT_GATHER_WAIT};
    int n = sizeof want / sizeof want[0], same = s.n[0] == n;
    for (int i = 0; same && i < n; i++) same = s.list[0][i].kind == want[i];
    CHECK(same, "data-parallel pass: %d actions, not the expected %d", s.n[0], n);
    if (same) {
        CHECK(s.list[0][4].from == 0 && s.list[0][4].to == 2 && s.list[0][6].from == 2 && s.list[0][6].to == 5,
              "the last backward is split at the bucket boundary: [%d,%d) [%d,%d)", s.list[0][4].from, s.list[0][4].to,
              s.list[0][6].from, s.list[0][6].to);
        CHECK(s.list[0][3].bucket == 0 && s.list[0][5].bucket == 1 && s.list[0][7].bucket == 2, "buckets start in order");
    }
    ScheduleSim sim;
    char err[512];
    CHECK(schedule_check(&s, &sim, err, sizeof err) == 0, "data-parallel schedule: %s", err);
    CHECK(s.slots[0] == 1, "one stage holds one micro-batch at a time, not %d", s.slots[0]);
    schedule_sim_free(&sim);
    schedule_free(&s);
}

/* Break a sound schedule (p=2, m=2) in one way and check the checker names it. */
static void expect_broken(const char *how, int kind, void (*breaker)(Schedule *), const char *words) {
    Schedule s;
    build(&s, kind, 2, 2, 1, 2);
    breaker(&s);
    ScheduleSim sim;
    char err[512] = "";
    int rc = schedule_check(&s, &sim, err, sizeof err);
    CHECK(rc != 0 && strstr(err, words), "%s: expected an error with '%s', got rc %d '%s'", how, words, rc, err);
    if (rc != 0) printf("caught (%s): %s\n", how, err);
    schedule_sim_free(&sim);
    schedule_free(&s);
}

static int find(const Schedule *s, int st, ActionKind k, int mb) {
    for (int i = 0; i < s->n[st]; i++) if (s->list[st][i].kind == k && s->list[st][i].mb == mb) return i;
    return -1;
}
static int find_wait(const Schedule *s, int st, ActionKind msg, int mb) {
    for (int i = 0; i < s->n[st]; i++) if (s->list[st][i].kind == ACT_WAIT && s->list[st][i].msg == (int)msg && s->list[st][i].mb == mb) return i;
    return -1;
}
static void drop_at(Schedule *s, int st, int i) {
    memmove(&s->list[st][i], &s->list[st][i + 1], (size_t)(s->n[st] - i - 1) * sizeof(Action));
    s->n[st]--;
}
static void swap(Schedule *s, int st, int i, int j) { Action t = s->list[st][i]; s->list[st][i] = s->list[st][j]; s->list[st][j] = t; }
static void insert(Schedule *s, int st, int at, Action a) {   /* the lists are built with spare room */
    if (s->n[st] == s->cap[st]) die("test: no room to insert");
    memmove(&s->list[st][at + 1], &s->list[st][at], (size_t)(s->n[st] - at) * sizeof(Action));
    s->list[st][at] = a;
    s->n[st]++;
}

/* GPipe stage 1 runs R a0, F0, R a1, F1, ...: make it take micro-batch 1 first (R a1, F1, R a0, F0),
 * which is in order on its own, but stage 0 sends micro-batch 0 first */
static void swap_order(Schedule *s) {
    int r0 = find(s, 1, ACT_RECV_ACT, 0), f0 = find(s, 1, ACT_FORWARD, 0), r1 = find(s, 1, ACT_RECV_ACT, 1), f1 = find(s, 1, ACT_FORWARD, 1);
    int w0 = find_wait(s, 1, ACT_RECV_ACT, 0), w1 = find_wait(s, 1, ACT_RECV_ACT, 1);
    swap(s, 1, r0, r1);
    swap(s, 1, f0, f1);
    swap(s, 1, w0, w1);
}
static void drop_recv(Schedule *s) {    /* stage 1 forgets to receive micro-batch 1's input (and to wait for it) */
    drop_at(s, 1, find_wait(s, 1, ACT_RECV_ACT, 1));
    drop_at(s, 1, find(s, 1, ACT_RECV_ACT, 1));
}
static void drop_send(Schedule *s) {    /* stage 1 forgets to send micro-batch 1's gradient */
    drop_at(s, 1, find_wait(s, 1, ACT_SEND_GRAD, 1));
    drop_at(s, 1, find(s, 1, ACT_SEND_GRAD, 1));
}
static void drop_wait(Schedule *s) {    /* stage 1 never waits for micro-batch 1's input: its forward could read it half there */
    drop_at(s, 1, find_wait(s, 1, ACT_RECV_ACT, 1));
}
static void early_slot(Schedule *s) {   /* stage 1 waits for the send of micro-batch 0's gradient only at the end: 1F1B reuses its slot */
    int i = find_wait(s, 1, ACT_SEND_GRAD, 0);
    Action w = s->list[1][i];
    drop_at(s, 1, i);
    insert(s, 1, s->n[1], w);
}
static void early_backward(Schedule *s) {   /* stage 0 runs micro-batch 0's backward before receiving its gradient */
    swap(s, 0, find(s, 0, ACT_RECV_GRAD, 0), find(s, 0, ACT_BACKWARD, 0));
}
/* 1F1B: stage 0 runs {S a1, R g0} B0 and stage 1 {S g0, R a1} F1. Move each send after the wait for what the
 * other sends: stage 0 then sends a1 only once g0 arrived, stage 1 sends g0 only once a1 arrived — each waits for
 * the other, as MPI and as NCCL run it. */
static void deadlock(Schedule *s) {
    int i = find(s, 0, ACT_SEND_ACT, 1);
    Action a = s->list[0][i];
    drop_at(s, 0, i);
    insert(s, 0, find_wait(s, 0, ACT_RECV_GRAD, 0) + 1, a);
    i = find(s, 1, ACT_SEND_GRAD, 0);
    a = s->list[1][i];
    drop_at(s, 1, i);
    i = find_wait(s, 1, ACT_SEND_GRAD, 0);   /* the send's own wait goes after it too */
    Action w = s->list[1][i];
    drop_at(s, 1, i);
    i = find_wait(s, 1, ACT_RECV_ACT, 1) + 1;
    insert(s, 1, i, a);
    insert(s, 1, i + 1, w);
}

/* One stage of embedding (bucket 4), three layers (3, 2, 1) and the head (0), as trainer.c's zero_tables describes
 * it, through the zero pass; then with one action taken out. Layers 0 and 2 share a place. */
static void zero_build(Schedule *s, int m, int zero) {
    int steps[1] = {4};   /* backward: layer 2, layer 1, layer 0, the embedding */
    schedule_build(s, PP_1F1B, 1, m, 1, steps, 0);
    static const int place[5] = {DDP_PLACE_HEAD, DDP_PLACE_LAYER_EVEN, DDP_PLACE_LAYER_ODD, DDP_PLACE_LAYER_EVEN, DDP_PLACE_EMBEDDING};
    static const size_t elements[5] = {100, 40, 40, 40, 100};
    static const int fsteps[1] = {5}, fr[5] = {4, 3, 2, 1, 0}, br[5] = {1, 2, 3, -1, -1}, bw[5] = {1, 2, 3, 4, -1};
    ZeroUnits z = {5, place, elements, 5, fsteps, fr, br, bw, 0};
    schedule_add_zero(s, 0, &z, zero);
    schedule_assign_slots(s);
}

static void drop(Schedule *s, ActionKind k, int nth) {   /* nth < 0: the last */
    if (nth < 0)
        for (int i = 0; i < s->n[0]; i++) nth += s->list[0][i].kind == k;
    for (int i = 0, seen = 0; i < s->n[0]; i++)
        if (s->list[0][i].kind == k && seen++ == nth) {
            memmove(&s->list[0][i], &s->list[0][i + 1], (size_t)(s->n[0] - i - 1) * sizeof(Action));
            s->n[0]--;
            return;
        }
    die("test: no action %s number %d to drop", action_names[k], nth);
}

static void test_zero(void) {
    for (int zero = 2; zero <= 3; zero++) {
        Schedule s;
        zero_build(&s, 3, zero);
        ScheduleSim sim;
        char err[512] = "";
        int rc = schedule_check(&s, &sim, err, sizeof err), n[ACT_KINDS] = {0};
        for (int i = 0; i < s.n[0]; i++) n[s.list[0][i].kind]++;
        CHECK(rc == 0, "zero=%d: the pass's list is sound: %s", zero, err);
        CHECK(n[ACT_REDUCE] == 3 * 5 && n[ACT_REDUCE_WAIT] == 3 * 5, "zero=%d: every bucket reduced and waited for once a micro-batch: %d, %d",
              zero, n[ACT_REDUCE], n[ACT_REDUCE_WAIT]);
        CHECK(n[ACT_BACKWARD] == 3 * 4 && n[ACT_FORWARD] == 3 * (zero == 3 ? 5 : 1), "zero=%d: computes cut into steps: %d forwards, %d backwards",
              zero, n[ACT_FORWARD], n[ACT_BACKWARD]);
        if (zero == 3) {
            CHECK(n[ACT_GATHER] == n[ACT_FREE] && n[ACT_GATHER] >= 5 && rc == 0 && sim.gathered_high[0] <= 100 + 100 + 40 + 40,
                  "zero=3: %d gathers, %d frees, at most %zu parameters gathered (the four places hold 280)", n[ACT_GATHER], n[ACT_FREE],
                  rc == 0 ? sim.gathered_high[0] : 0);
            schedule_print_actions(&s, stdout);
        }
        schedule_sim_free(&sim);
        schedule_free(&s);
    }
    struct { ActionKind k; int nth; const char *words; } cases[] = {
        {ACT_GATHER_WAIT, 1, "before they are gathered"},
        {ACT_FREE, 0, "still holds"},
        {ACT_FREE, -1, "never released"},
        {ACT_REDUCE_WAIT, 0, "whose last reduction"},
        {ACT_REDUCE_WAIT, -1, "the optimizer runs before"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Schedule s;
        zero_build(&s, 3, 3);
        drop(&s, cases[c].k, cases[c].nth);
        ScheduleSim sim;
        char err[512] = "";
        int rc = schedule_check(&s, &sim, err, sizeof err);
        CHECK(rc != 0 && strstr(err, cases[c].words), "zero=3 without %s #%d: expected '%s', got rc %d '%s'", action_names[cases[c].k],
              cases[c].nth, cases[c].words, rc, err);
        if (rc != 0) printf("caught (no %s #%d): %s\n", action_names[cases[c].k], cases[c].nth, err);
        schedule_sim_free(&sim);
        schedule_free(&s);
    }
}

static void test_cli(void) {
    static char out[1 << 16];
    char svg[128], args[512];
    snprintf(svg, sizeof svg, "/tmp/llm3d_test_schedule_%d.svg", (int)getpid());
    snprintf(args, sizeof args, "schedule --pp=4 --micro_batches=8 --n_layers=8 --svg=%s", svg);
    int rc = test_run("build/train", args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "stage 3|            F0  B0  ..  F1"), "the 1f1b timeline of stage 3 starts after 3 forwards of warm-up:\n%s", out);
    CHECK(strstr(out, "simulated 27.27% of the step idle") && strstr(out, "(p-1)/(m+p-1) = 27.27%"), "bubble beside its formula:\n%s", out);
    CHECK(strstr(out, "at once: 4 3 2 1"), "1f1b holds p - s micro-batches on stage s:\n%s", out);
    FILE *f = fopen(svg, "r");
    char head[8] = "";
    CHECK(f && fread(head, 1, 4, f) == 4 && !strncmp(head, "<svg", 4), "an SVG picture at %s", svg);
    if (f) fclose(f);
    unlink(svg);
    rc = test_run("build/train", "schedule --pp=4 --micro_batches=2 --n_layers=8", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "needs at least 4 micro-batches"), "m < p refused in words: rc %d\n%s", rc, out);
    rc = test_run("build/train", "schedule --pp=2 --micro_batches=3 --pp_schedule=interleaved", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "do not divide"), "interleaved with m not a multiple of p refused: rc %d\n%s", rc, out);
    rc = test_run("build/train", "schedule --pp=3 --micro_batches=6 --pp_schedule=interleaved --n_layers=4", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "equal chunks"), "interleaved with n_layers not divisible by pp*v refused: rc %d\n%s", rc, out);
    rc = test_run("build/train", "schedule --pp=5 --micro_batches=8 --n_layers=4", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "every stage needs at least one layer"), "pp > n_layers refused: rc %d\n%s", rc, out);
    rc = test_run("build/train", "schedule --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=zb1", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "schedule | zb1") && strstr(out, "simulated 20.00% of the step idle (forward 1, B 1, W 1 time units)") &&
          strstr(out, "2(p-1)/(3m+2(p-1)) = 20.00%") && strstr(out, "ZB-H1's (p-1)/(3m+p-1) = 11.11% needs zb1_memory=busiest") &&
          strstr(out, "at once: 4 3 2 1;") && strstr(out, "zb1_memory=1f1b: each stage holds at most 1F1B's p-s") &&
          strstr(out, "on NCCL, each lane's groups one after another (to and from each neighbour: 4 lanes) 20.00%"),
          "zb1 at 1F1B's own memory (the default): 1F1B's slots on every stage, its bubble beside its formula and ZB-H1's:\n%s", out);
    snprintf(args, sizeof args, "schedule --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=zb1 --zb1_memory=busiest --svg=%s", svg);
    rc = test_run("build/train", args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "schedule | zb1") && strstr(out, "stage 0|F0  F1  F2  F3              B0  W0  F4  B1  W1  F5") &&
          strstr(out, "stage 3|            F0  B0  F1  B1  F2  B2  F3  B3  W0  F4  B4  W1") &&
          strstr(out, "simulated 11.11% of the step idle (forward 1, B 1, W 1 time units)") && strstr(out, "(p-1)/(3m+p-1) = 11.11%") &&
          strstr(out, "(p-1)/(m+p-1) = 27.27%") && strstr(out, "at once: 4 4 4 4; W stores (micro-batches between B and W at once): 1 2 3 4") &&
          strstr(out, "zb1_memory=busiest: each stage holds at most p, 1F1B's stage 0's") &&
          strstr(out, "on NCCL, each lane's groups one after another (to and from each neighbour: 4 lanes) 11.11%") && strstr(out, "(1f1b beside it)"),
          "zb1_memory=busiest's dry run: ZB-H1's timeline in F, B and W, its bubble beside its formula and 1F1B's:\n%s", out);
    f = fopen(svg, "r");
    static char picture[1 << 18];
    size_t got = f ? fread(picture, 1, sizeof picture - 1, f) : 0;
    picture[got] = 0;
    CHECK(strstr(picture, ">W0<") && strstr(picture, "rgb(220,") && strstr(picture, "rgb(70,200,") && strstr(picture, "rgb(90,") &&
          strstr(picture, ">1f1b: pp=4, m=8, bubble 27.3%"), "zb1's picture draws F, B and W in three colours, 1F1B's under it");
    if (f) fclose(f);
    unlink(svg);
    snprintf(args, sizeof args, "schedule --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=zbv --svg=%s", svg);
    rc = test_run("build/train", args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "schedule | zbv | pp=4 stages x 8 micro-batches x 2 chunks in V order") &&
          strstr(out, "stage 0|F0.0  F1.0  F2.0  F3.0") && strstr(out, "simulated 5.88% of the step idle") &&
          strstr(out, "(p-1)/(6m+p-1) = 5.88%") && strstr(out, "(p-1)/(m+p-1) = 27.27%") && strstr(out, "(to and from each neighbour: 4 lanes) 5.88%") &&
          strstr(out, "holding at most 4 micro-batches a stage (1F1B: 4)"),
          "zbv's dry run: its timeline, its bubble beside ZB-V's formula and 1F1B's, NCCL's, its memory:\n%s", out);
    f = fopen(svg, "r");
    got = f ? fread(picture, 1, sizeof picture - 1, f) : 0;
    picture[got] = 0;
    CHECK(strstr(picture, ">W0.1<") && strstr(picture, ">zbv: pp=4, m=8") && strstr(picture, ">1f1b: pp=4"), "zbv's picture, 1F1B's under it");
    if (f) fclose(f);
    unlink(svg);
    rc = test_run("build/train", "schedule --pp=2 --micro_batches=4 --n_layers=6 --pp_schedule=zbv", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "the smallest n_layers it takes at pp=2 is 4"), "zbv with n_layers=6 at pp=2 refused: rc %d\n%s", rc, out);
    rc = test_run("build/train", "schedule --pp=4 --micro_batches=3 --n_layers=8 --pp_schedule=zb1", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "needs at least 4 micro-batches"), "zb1 with m < p refused naming the smallest m: rc %d\n%s", rc, out);
    rc = test_run("build/train", "schedule --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=1f1b --zb1_memory=busiest", out, sizeof out);
    CHECK(rc == 1 && strstr(out, "zb1_memory=busiest chooses what a pp_schedule=zb1 stage holds") && strstr(out, "pp_schedule=1f1b has no such choice"),
          "zb1_memory=busiest with another schedule refused, not ignored: rc %d\n%s", rc, out);
    rc = test_run("build/train", "schedule --pp=4 --micro_batches=8 --n_layers=8 --pp_schedule=zbv --zb1_memory=1f1b", out, sizeof out);
    CHECK(rc == 0, "zb1_memory=1f1b (the default, every schedule's own memory) with zbv runs: rc %d\n%s", rc, out);
    rc = test_run("build/train", "schedule --dp=2 --zero=3 --n_layers=4 --micro_batches=2 --actions", out, sizeof out);
    CHECK(rc == 0 && strstr(out, "dp=2 ZeRO-3") && strstr(out, "every unit's weights are gathered and waited for before a compute reads them") &&
          strstr(out, "19 of 20 weight reads gathered a compute ahead") && strstr(out, "gather-wait(4) gather(3) [F0/1] free(4)"),
          "zero=3's dry run checks, sums up and lists its gathers:\n%s", out);
    /* cp changes no action, only the ranks ZeRO shards over (dp x cp): its dry run is dp=2's below the header (it crashed,
     * the grid's cp left at 1, a ZeRO of one rank) */
    static char dp2[1 << 16];
    memcpy(dp2, out, sizeof dp2);
    rc = test_run("build/train", "schedule --cp=2 --zero=3 --n_layers=4 --micro_batches=2 --actions", out, sizeof out);
    const char *a = strchr(dp2, '\n'), *b = strchr(out, '\n');
    CHECK(rc == 0 && strstr(out, "| dp=1 x cp=2 (each cp rank the same actions on 1/2 of every sequence) ZeRO-3 over dp x cp |") && a && b &&
          !strcmp(a, b), "cp=2 zero=3's dry run names cp and ZeRO over dp x cp, and is dp=2 zero=3's below its header (rc %d):\n%.600s", rc, out);
}

/* zb1 and zbv: sound for many (p, m) (both as MPI and as NCCL's lanes run them); every B and W of every
 * (micro-batch, chunk) once, each W after its B and on its B's W store; the simulated bubble is the schedule's formula
 * (zb1 at 1F1B's own memory 2(p-1)/(3m+2(p-1)), at its busiest stage's ZB-H1's (p-1)/(3m+p-1), ZB-V's (p-1)/(6m+p-1))
 * and below 1F1B's; a stage holds at most the cap its order was found with, from 1F1B's p up to 2p (micro-batches; a
 * ZB-V chunk is half a stage, so 2 x cap chunks), zb1 no more than 1F1B's slots on each stage (zb1_memory=1f1b) or on
 * its busiest (busiest), and zb1 keeps 1F1B's p - st between a forward and its B. */
static void zero_bubble_case(int kind, int p, int m, int held) {
    const char *name = kind == PP_ZBV ? "zbv" : held == ZB1_MEMORY_1F1B ? "zb1 (zb1_memory=1f1b)" : "zb1 (zb1_memory=busiest)";
    int v = kind == PP_ZBV ? 2 : 1;
    Schedule s;
    build_held(&s, kind, p, m, v, 2, held);
    ScheduleSim sim;
    char err[512] = "";
    int rc = schedule_check(&s, &sim, err, sizeof err);
    CHECK(rc == 0, "%s p=%d m=%d: %s", name, p, m, err);
    double zb = schedule_bubble_formula(&s), f1b = (p - 1.0) / (m + p - 1.0);
    CHECK(rc == 0 && fabs(sim.bubble - zb) < 1e-9 && sim.bubble < f1b, "%s p=%d m=%d: simulated bubble %.4f, want the formula's %.4f (1F1B %.4f)",
          name, p, m, sim.bubble, zb, f1b);
    CHECK(rc == 0 && sim.bubble_fifo >= sim.bubble - 1e-9, "%s p=%d m=%d: NCCL's lanes %.4f is no faster than MPI's %.4f", name, p, m,
          sim.bubble_fifo, sim.bubble);
    CHECK(rc == 0 && fabs(sim.bubble_fifo - sim.bubble) < 1e-9, "%s p=%d m=%d: on NCCL's lanes (a stream to and from each neighbour) "
          "the bubble is MPI's: %.4f against %.4f", name, p, m, sim.bubble_fifo, sim.bubble);
    CHECK(s.zb_cap >= p && s.zb_cap <= 2 * p, "%s p=%d m=%d: the order's cap %d is within [p, 2p]", name, p, m, s.zb_cap);
    if (kind == PP_ZB1) {   /* ZB-H1 at 1F1B's memory: each stage within 1F1B's busiest (stage 0's p), stage 0 exactly 1F1B's */
        Schedule f;
        build(&f, PP_1F1B, p, m, 1, 2);
        int most_zb = 0, most_f = 0;
        for (int st = 0; st < p; st++) {
            if (s.slots[st] > most_zb) most_zb = s.slots[st];
            if (f.slots[st] > most_f) most_f = f.slots[st];
        }
        int within = 1;
        for (int st = 0; st < p; st++) within &= s.slots[st] <= f.slots[st];
        CHECK(s.zb_cap == p && most_zb == most_f && most_f == p && s.slots[0] == f.slots[0] && (held == ZB1_MEMORY_BUSIEST || within),
              "%s p=%d m=%d: at 1F1B's memory: cap %d, the most slots a stage holds %d (1F1B %d), stage 0 %d (1F1B %d), each "
              "stage within 1F1B's %d", name, p, m, s.zb_cap, most_zb, most_f, s.slots[0], f.slots[0], within);
        schedule_free(&f);
    }
    for (int st = 0; st < p; st++) {
        int n[ACT_KINDS] = {0}, keep[256], same = 1, b_open = 0, most_b = 0;
        for (int i = 0; i < s.n[st]; i++) {
            const Action *a = &s.list[st][i];
            n[a->kind]++;
            int q = a->mb * v + a->chunk;
            if (a->kind == ACT_FORWARD && ++b_open > most_b) most_b = b_open;
            if (a->kind == ACT_BACKWARD_INPUT) { b_open--; if (q < 256) keep[q] = a->keep; }
            if (a->kind == ACT_BACKWARD_WEIGHT && q < 256) same &= a->keep == keep[q] && a->keep >= 0;
        }
        CHECK(n[ACT_BACKWARD_INPUT] == v * m && n[ACT_BACKWARD_WEIGHT] == v * m && n[ACT_BACKWARD] == 0 && n[ACT_FORWARD] == v * m,
              "%s p=%d m=%d stage %d: %d F, %d B, %d W, %d fused backwards", name, p, m, st, n[ACT_FORWARD], n[ACT_BACKWARD_INPUT],
              n[ACT_BACKWARD_WEIGHT], n[ACT_BACKWARD]);
        CHECK(s.slots[st] <= v * s.zb_cap && s.keeps[st] <= s.slots[st] && same, "%s p=%d m=%d stage %d: holds %d (cap %d x %d chunks), "
              "%d W stores, each W on its B's: %d", name, p, m, st, s.slots[st], s.zb_cap, v, s.keeps[st], same);
        if (kind == PP_ZB1) CHECK(most_b <= p - st, "zb1 p=%d m=%d stage %d: %d forwards before their B at once, 1F1B's %d", p, m, st, most_b, p - st);
    }
    if (rc == 0 && p == 4 && m == 8)
        printf("%s p=4 m=8: bubble %.4f (formula %.4f, 1F1B's %.4f), makespan %.0f; NCCL's lanes %.4f; holds at most %d micro-batches\n",
               name, sim.bubble, zb, f1b, sim.makespan, sim.bubble_fifo, s.zb_cap);
    schedule_sim_free(&sim);
    schedule_free(&s);
}

static void test_zb1(void) {
    int cases[][2] = {{2, 2}, {2, 3}, {2, 4}, {2, 8}, {3, 3}, {3, 7}, {4, 4}, {4, 5}, {4, 8}, {4, 16}, {8, 8}, {8, 11}, {8, 16}, {8, 24}, {8, 32}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        zero_bubble_case(PP_ZB1, cases[c][0], cases[c][1], ZB1_MEMORY_1F1B);
        zero_bubble_case(PP_ZB1, cases[c][0], cases[c][1], ZB1_MEMORY_BUSIEST);
    }
    /* the data-parallel pass: the last W of a micro-batch is split where a bucket completes, and the reduction starts after it */
    Schedule s;
    int steps[2] = {5, 4};
    schedule_build(&s, PP_ZB1, 2, 4, 1, steps, ZB1_MEMORY_1F1B);
    BucketReady ready[3] = {{0, -1}, {0, 1}, {0, 4}};
    schedule_add_data_parallel(&s, 0, ready, 3, 1);
    schedule_add_data_parallel(&s, 1, ready, 1, 1);
    schedule_assign_slots(&s);
    int after_w = 0, after_other = 0;
    for (int i = 1; i < s.n[0]; i++)
        if (s.list[0][i].kind == ACT_REDUCE && s.list[0][i].bucket > 0) {
            int k = i - 1;
            while (k > 0 && s.list[0][k].kind == ACT_REDUCE) k--;
            if (s.list[0][k].kind == ACT_BACKWARD_WEIGHT) after_w++;
            else after_other++;
        }
    ScheduleSim sim;
    char err[512] = "";
    CHECK(schedule_check(&s, &sim, err, sizeof err) == 0, "zb1 with buckets: %s", err);
    CHECK(after_w == 2 && after_other == 0, "zb1: the layers' buckets start after the W that completes them: %d after a W, %d after another action",
          after_w, after_other);
    schedule_sim_free(&sim);
    schedule_free(&s);
    /* ZeRO-3 over zb1: B reads the unit's gathered weights, W only writes its gradient, and the list is sound */
    for (int zero = 2; zero <= 3; zero++) {
        int st1[1] = {4};
        schedule_build(&s, PP_ZB1, 1, 3, 1, st1, ZB1_MEMORY_1F1B);
        static const int place[5] = {DDP_PLACE_HEAD, DDP_PLACE_LAYER_EVEN, DDP_PLACE_LAYER_ODD, DDP_PLACE_LAYER_EVEN, DDP_PLACE_EMBEDDING};
        static const size_t elements[5] = {100, 40, 40, 40, 100};
        static const int fsteps[1] = {5}, fr[5] = {4, 3, 2, 1, 0}, br[5] = {1, 2, 3, -1, -1}, bw[5] = {1, 2, 3, 4, -1};
        ZeroUnits z = {5, place, elements, 5, fsteps, fr, br, bw, 0};
        schedule_add_zero(&s, 0, &z, zero);
        schedule_assign_slots(&s);
        int rc = schedule_check(&s, &sim, err, sizeof err), bad = 0, reduces = 0;
        for (int i = 0; i < s.n[0]; i++) {
            const Action *a = &s.list[0][i];
            if (a->kind == ACT_BACKWARD_INPUT)   /* zero=3: every layer's B reads its unit; the embedding's step (3) reads none */
                bad += a->writes >= 0 || (zero == 3 ? (a->from != 3) != (a->reads >= 0) : a->reads >= 0);
            if (a->kind == ACT_BACKWARD_WEIGHT) bad += a->reads >= 0 || a->writes < 0;
            if (a->kind == ACT_REDUCE && i > 0 && s.list[0][i - 1].kind == ACT_BACKWARD_WEIGHT) reduces++;
        }
        CHECK(rc == 0 && bad == 0 && reduces == 3 * 4, "zb1 zero=%d: sound (%s), B reads and W writes (%d wrong), %d reduce-scatters after a W", zero, err,
              bad, reduces);
        schedule_sim_free(&sim);
        schedule_free(&s);
    }
}

/* zbv: the same facts; stage 0 holds the first virtual stage and the last, the V turns on stage p-1 as copies (a send
 * to itself before the receive it fills, no wait), and the evaluation's forwards-only list is sound too. */
static void test_zbv(void) {
    int cases[][2] = {{2, 2}, {2, 3}, {2, 8}, {3, 3}, {3, 5}, {4, 4}, {4, 8}, {4, 16}, {8, 8}, {8, 24}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) zero_bubble_case(PP_ZBV, cases[c][0], cases[c][1], 0);
    Schedule s;
    build(&s, PP_ZBV, 4, 8, 2, 2);
    CHECK(schedule_virtual_stage(PP_ZBV, 4, 0, 0) == 0 && schedule_virtual_stage(PP_ZBV, 4, 0, 1) == 7 &&
          schedule_virtual_stage(PP_ZBV, 4, 3, 1) == 4 && schedule_stage_of(PP_ZBV, 4, 5) == 2, "zbv: the V's places");
    int self[4] = {0}, waits_on_self = 0;
    for (int st = 0; st < 4; st++)
        for (int i = 0; i < s.n[st]; i++) {
            const Action *a = &s.list[st][i];
            if (a->kind >= ACT_SEND_ACT && a->kind <= ACT_RECV_GRAD && a->peer == st) self[st]++;
            if (a->kind == ACT_WAIT && a->peer == st) waits_on_self++;
        }
    CHECK(self[0] == 0 && self[1] == 0 && self[2] == 0 && self[3] == 4 * 8 && waits_on_self == 0,
          "zbv: only stage 3 sends to itself (an activation and a gradient a micro-batch, each sent and received): %d %d %d %d, %d waits",
          self[0], self[1], self[2], self[3], waits_on_self);
    schedule_free(&s);
    schedule_build_forward(&s, PP_ZBV, 4, 5, 2);
    schedule_assign_slots(&s);
    ScheduleSim sim;
    char err[512] = "";
    CHECK(schedule_check(&s, &sim, err, sizeof err) == 0, "zbv forwards only: %s", err);
    schedule_sim_free(&sim);
    schedule_free(&s);
}

static void zb_w_first(Schedule *s) {   /* stage 1 runs micro-batch 0's W before its B */
    swap(s, 1, find(s, 1, ACT_BACKWARD_INPUT, 0), find(s, 1, ACT_BACKWARD_WEIGHT, 0));
}
static void zb_drop_w(Schedule *s) {    /* stage 0 forgets micro-batch 1's W */
    int i = find(s, 0, ACT_BACKWARD_WEIGHT, 1);
    memmove(&s->list[0][i], &s->list[0][i + 1], (size_t)(s->n[0] - i - 1) * sizeof(Action));
    s->n[0]--;
}
static void zb_fused(Schedule *s) {     /* a fused backward in a list that splits it */
    s->list[1][find(s, 1, ACT_BACKWARD_INPUT, 1)].kind = ACT_BACKWARD;
}

int main(void) {
    test_builders();
    test_forward_only();
    test_data_parallel();
    test_zero();
    expect_broken("messages out of order", PP_GPIPE, swap_order, "disagree on the order");
    expect_broken("a missing receive", PP_1F1B, drop_recv, "runs before its input was received");
    expect_broken("a missing send", PP_1F1B, drop_send, "has no partner");
    expect_broken("a backward before its gradient", PP_1F1B, early_backward, "before its output's gradient was received");
    expect_broken("a deadlock", PP_1F1B, deadlock, "the schedule deadlocks");
    expect_broken("a missing wait", PP_1F1B, drop_wait, "runs before its input was received (and waited for)");
    expect_broken("a send's buffer reused before its wait", PP_1F1B, early_slot, "may still be reading it");
    test_zb1();
    test_zbv();
    expect_broken("zb1: a W before its B", PP_ZB1, zb_w_first, "does not continue the weight gradients");
    expect_broken("zb1: a missing W", PP_ZB1, zb_drop_w, "never finishes the weight gradients (W) of micro-batch 1");
    expect_broken("zb1: a fused backward", PP_ZB1, zb_fused, "in a schedule that splits the backward");
    test_cli();
    return test_summary();
}
