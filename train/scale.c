/* train/scale.c — `build/train scale`: why N ranks are not N times faster.
 *
 * The idea: run the same job on 1, 2, 4, ... ranks (through mpirun, the way a
 * user would), read each run's own JSONL — tokens/s, the step-time split of
 * the slowest rank, memory — and set them side by side: speedup and
 * efficiency against ideal, where each step's time went, and a verdict in
 * the words of the usual complaints ("exposed communication", "one rank's
 * data loader", "the bubble"). It also compares the first steps' losses
 * across sizes: with strong scaling (the same global batch) they must agree
 * to rounding, which is the "loss drifted when I added GPUs" symptom caught.
 * Each run is a child started from an argument vector (common/spawn.c, no
 * shell: --out and every key value stay one argv entry each, whatever they
 * hold), its output redirected to OUT/ranks_N.log; on CPU ranks each rank gets
 * OMP_NUM_THREADS = cores / ranks through the child's environment, so the
 * ranks share the cores instead of fighting over them, and more ranks than
 * cores is named as contention in the verdict. OUT keeps one run's results:
 * a folder that already holds a scale run's is refused (give another --out). */
#include "trainer.h"
#include "../comm/launch.h"
#include "../common/options.h"
#include "../common/spawn.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SIZES 16
#define MAX_STEPS 64

typedef struct {
    int ranks, steps;
    double loss[MAX_STEPS], ms[MAX_STEPS], tps;
    double compute, exposed, busy, bubble, optimizer, data, host, step_ms;   /* medians of the timed steps, ms */
    double memory;        /* bytes per rank: the planned total (rank 0's), or the device's in use */
    int slowest;
    int threads;          /* OpenMP threads a rank (CPU), 0 when not set */
} SizeRun;

static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double med(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, n, sizeof(double), by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A run's JSONL: the header line's memory, every step's loss and time, the timed steps' split medians. */
static void read_run(SizeRun *r, const char *path, int warmup) {
    char err[1400];
    FILE *f = fopen_regular(path, "run log", err, sizeof err);
    if (!f) die("scale: the run with %d ranks wrote no log: %s (see its .log beside it)", r->ranks, err);
    char line[4096];
    double v[9][MAX_STEPS];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
#define json_field(line, key) json_number(line, key, path, lineno)
        if (strstr(line, "\"run\": ")) { r->memory = json_field(line, "memory_bytes"); continue; }
        if (!strstr(line, "\"loss\": ") || r->steps == MAX_STEPS) continue;
        int s = r->steps++;
        r->loss[s] = json_field(line, "loss");
        r->ms[s] = json_field(line, "ms");
        double dev = json_field(line, "device_bytes");
        if (dev > r->memory || isnan(r->memory)) r->memory = dev;
        if (s < warmup) continue;
        const char *keys[9] = {"compute_ms", "comm_exposed_ms", "comm_busy_ms", "bubble_ms", "optimizer_ms", "data_ms", "host_ms", "ms", "slowest_rank"};
        for (int k = 0; k < 9; k++) v[k][n] = json_field(line, keys[k]);
        n++;
#undef json_field
    }
    fclose(f);
    if (r->steps <= warmup) die("scale: the run with %d ranks logged %d steps, not more than the %d warm-up steps (see %s)", r->ranks, r->steps, warmup, path);
    r->slowest = (int)v[8][n - 1];
    double *out[8] = {&r->compute, &r->exposed, &r->busy, &r->bubble, &r->optimizer, &r->data, &r->host, &r->step_ms};
    for (int k = 0; k < 8; k++) *out[k] = med(v[k], n);
    if (isnan(r->compute)) {   /* one rank logs no split: all of it is compute, optimizer, data and host */
        r->compute = r->step_ms; r->exposed = r->busy = r->bubble = r->optimizer = r->data = r->host = 0;
    }
}

/* gnuplot SCRIPT in a scratch folder, its scale.png copied to OUT/scale.png through the output door. */
static void draw(const char *script, const char *out) {
    char found[4096], abs_script[4096], scratch[4200], png[4300], log[4300], dst[4300], err[9000];
    if (!spawn_find("gnuplot", found, sizeof found)) {
        printf("plot  | gnuplot is not installed (apt-get install gnuplot-nox): %s holds the script\n", script);
        return;
    }
    if (!realpath(script, abs_script)) die("scale: cannot find '%s': %s", script, strerror(errno));
    const char *tmpdir = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    snprintf(scratch, sizeof scratch, "%s/llm3d_scale.XXXXXX", tmpdir);
    if (!mkdtemp(scratch)) die("scale: cannot make a scratch folder in %s: %s\n  hint: set TMPDIR to a writable folder", tmpdir, strerror(errno));
    snprintf(png, sizeof png, "%s/scale.png", scratch);
    snprintf(log, sizeof log, "%s/gnuplot.log", scratch);
    snprintf(dst, sizeof dst, "%s/scale.png", out);
    char *argv[] = {"gnuplot", abs_script, NULL};
    int rc = spawn_wait(argv, scratch, log, NULL, err, sizeof err);
    if (rc == 0 && output_copy_file(png, dst, err, sizeof err) == 0) printf("plot  | %s\n", dst);
    else {
        char msg[1024] = "", e2[256];
        FILE *lf = fopen_regular(log, "gnuplot's messages", e2, sizeof e2);
        size_t got = lf ? fread(msg, 1, sizeof msg - 1, lf) : 0;
        msg[got] = 0;
        if (lf) fclose(lf);
        printf("plot  | gnuplot could not draw %s (%s): %s\n", dst, rc < 0 || rc == 0 ? err : "it failed", msg);
    }
    unlink(png);
    unlink(log);
    rmdir(scratch);
}

static const char *usage =
    "usage: build/train scale --ranks=1,2,4,8 [--mode=weak|strong] [--steps=5] [--warmup=2] [--out=runs/scale] [config keys]\n"
    "  runs the same job on each number of ranks (dp = ranks / (tp*pp*cp)), through mpirun, and prints speedup,\n"
    "  efficiency, where the time went and why; writes OUT/scale.json and OUT/scale.png (gnuplot).\n"
    "  weak: every rank keeps its batch (the global batch grows); strong: the global batch stays.\n"
    "  OUT keeps one scale run: a folder that already holds one's results is refused; give another --out.\n"
    "  On CPU each rank runs cores/ranks OpenMP threads (OMP_NUM_THREADS), so ranks x threads <= cores;\n"
    "  more ranks than cores take turns, and the verdict names that contention.\n";

int scale_main(int argc, char **argv) {
    int sizes[MAX_SIZES], n_sizes = 0, steps = 5, warmup = 2, weak = 1;
    const char *out = "runs/scale";
    char **rest = callocCheck((size_t)argc + 1, sizeof(char *));
    int n = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) { printf("%s", usage); free(rest); return 0; }
        if (!strncmp(a, "--ranks=", 8)) {   /* given twice, the last wins, as in training */
            double v[MAX_SIZES];
            char err[512];
            n_sizes = option_list("ranks", a + 8, 1, 4096, 1, v, MAX_SIZES, err, sizeof err);
            if (n_sizes < 1) die("scale: %s\n  hint: --ranks takes a comma list of up to %d rank counts from 1 to 4096, e.g. --ranks=1,2,4,8",
                                 n_sizes == 0 ? "--ranks is empty" : err, MAX_SIZES);
            for (int k = 0; k < n_sizes; k++) sizes[k] = (int)v[k];
        } else if (!strncmp(a, "--mode=", 7)) {
            if (!strcmp(a + 7, "weak")) weak = 1;
            else if (!strcmp(a + 7, "strong")) weak = 0;
            else die("scale: --mode=%s: use weak or strong", a + 7);
        } else if (!strncmp(a, "--steps=", 8)) steps = (int)option_number_or_die("scale", "steps", a + 8, 1, MAX_STEPS, 1);
        else if (!strncmp(a, "--warmup=", 9)) warmup = (int)option_number_or_die("scale", "warmup", a + 9, 0, MAX_STEPS, 1);
        else if (!strncmp(a, "--out=", 6)) out = a + 6;
        else {
            rest[n++] = argv[i];   /* a config key: passed to every run as it is, one argv entry */
        }
    }
    if (!n_sizes) die("scale: --ranks=1,2,4 is required\n%s", usage);
    if (steps < 1 || warmup < 0 || steps + warmup > MAX_STEPS) die("scale: --steps (1..) and --warmup (0..) must add up to at most %d", MAX_STEPS);
    Config c;
    config_parse_args(&c, n, rest);
    int mp = c.tp * c.pp * c.cp, gpus = c.device == DEVICE_CUDA ? backend_cuda_device_count() : 0;   /* the ranks of one replica */
    long base = c.total_batch_tokens ? c.total_batch_tokens / c.dp : (long)c.batch_size * c.seq_len;   /* per data-parallel rank */
    int most = 0;
    for (int i = 0; i < n_sizes; i++) {
        if (sizes[i] % mp && c.cp > 1)
            die("scale: %d ranks do not divide into replicas of tp*pp*cp = %d*%d*%d ranks", sizes[i], c.tp, c.pp, c.cp);
        if (sizes[i] % mp) die("scale: %d ranks do not divide into tp*pp = %d*%d model replicas", sizes[i], c.tp, c.pp);
        const char *sw = getenv(LAUNCH_HOSTS_ON_ONE_GPU_ENV);   /* test hosts on one GPU (comm/launch.h): any number */
        if (c.device == DEVICE_CUDA && c.comm_backend == COMM_NCCL && sizes[i] > gpus && !(sw && !strcmp(sw, "1")))
            die("scale: %d rank(s) with comm_backend=nccl need %d GPUs, and this machine has %d\n"
                "  hint: drop the larger sizes, or --comm_backend=mpi to let ranks share GPUs (a test, not a measurement)", sizes[i], sizes[i], gpus);
        if (sizes[i] > most) most = sizes[i];
    }
    long strong_total = c.total_batch_tokens ? c.total_batch_tokens : (long)c.batch_size * c.seq_len * (most / mp);
    /* OUT: one scale run's results, never another's replaced */
    char err[9000], path[4200];
    if (check_writable(out, 1, "--out", err, sizeof err) != 0) die("scale: %s", err);
    char made[4096];
    snprintf(made, sizeof made, "%s", out);
    for (char *sl = made + 1; *sl; sl++)   /* its parents first (mkdir -p) */
        if (*sl == '/') { *sl = 0; mkdir(made, 0755); *sl = '/'; }
    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        die("scale: cannot make --out=%s: %s\n  hint: make its parent folder first", out, strerror(errno));
    for (int i = -3; i < 2 * n_sizes; i++) {   /* scale's own files, and each size's log and output */
        const char *own[3] = {"scale.json", "scale.gp", "scale.png"};
        char name[64];
        if (i < 0) snprintf(name, sizeof name, "%s", own[i + 3]);
        else snprintf(name, sizeof name, "ranks_%d.%s", sizes[i / 2], i % 2 ? "log" : "jsonl");
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", out, name);
        if (lstat(path, &st) == 0)
            die("scale: --out=%s already holds a scale run's results (%s)\n  hint: give another --out (each scale run keeps its own "
                "folder), or remove that one", out, name);
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) die("scale: cannot find this program's path");
    exe[len] = 0;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    SizeRun runs[MAX_SIZES];
    for (int i = 0; i < n_sizes; i++) {
        int r = sizes[i], dp = r / mp;
        long total = weak ? base * dp : strong_total;
        if (total % ((long)c.batch_size * c.seq_len * dp))
            die("scale: a step of %ld tokens does not split into batch_size*seq_len*dp = %d*%d*%d; choose total_batch_tokens divisible at every size",
                total, c.batch_size, c.seq_len, dp);
        /* the run as an argument vector: launcher, program, the user's keys as given, then scale's own */
        char np[16], threads_env[48], opt[6][4400], log[4200], jsonl[4200];
        /* CPU ranks share the cores: cores / ranks OpenMP threads each (at least one) */
        int threads = c.device == DEVICE_CPU ? (int)(cores / r > 0 ? cores / r : 1) : 0;
        char **args = callocCheck((size_t)n + 24, sizeof(char *));
        int a = 0;
        if (r > 1) {
            args[a++] = "mpirun";
            if (geteuid() == 0) args[a++] = "--allow-run-as-root";
            if (r > cores) args[a++] = "--oversubscribe";
            if (threads) { args[a++] = "-x"; args[a++] = "OMP_NUM_THREADS"; }   /* the threads setting reaches every rank */
            snprintf(np, sizeof np, "%d", r);
            args[a++] = "-np";
            args[a++] = np;
        }
        args[a++] = exe;
        for (int k = 1; k < n; k++) args[a++] = rest[k];
        snprintf(jsonl, sizeof jsonl, "%s/ranks_%d.jsonl", out, r);
        snprintf(log, sizeof log, "%s/ranks_%d.log", out, r);
        snprintf(opt[0], sizeof opt[0], "--dp=%d", dp);
        snprintf(opt[1], sizeof opt[1], "--total_batch_tokens=%ld", total);
        snprintf(opt[2], sizeof opt[2], "--max_steps=%d", steps + warmup);
        snprintf(opt[3], sizeof opt[3], "--log_jsonl=%s", jsonl);
        snprintf(opt[4], sizeof opt[4], "--run_dir=%s/run_%d", out, r);
        for (int k = 0; k < 5; k++) args[a++] = opt[k];
        char *fixed[] = {"--warmup_steps=0", "--log_every=1", "--checkpoint_every=-1", "--eval_every=0", "--sample_tokens=0"};
        for (int k = 0; k < 5; k++) args[a++] = fixed[k];
        args[a] = NULL;
        snprintf(threads_env, sizeof threads_env, "OMP_NUM_THREADS=%d", threads);
        char *env[] = {threads_env, NULL};
        printf("scale | %d rank%s: %s", r, r > 1 ? "s" : "", r > 1 ? "mpirun" : "one process");
        if (threads) printf(", %d OpenMP thread%s each (%ld cores%s)", threads, threads > 1 ? "s" : "", cores, r > cores ? ": more ranks than cores" : "");
        printf("\n");
        fflush(stdout);
        int rc = spawn_wait(args, NULL, log, threads ? env : NULL, err, sizeof err);
        free(args);
        if (rc < 0) die("scale: %s%s", err, r > 1 ? "\n  hint: is Open MPI installed (apt-get install openmpi-bin)?" : "");
        if (rc != 0) die("scale: the run with %d ranks failed (exit %d); its output is in %s", r, rc, log);
        memset(&runs[i], 0, sizeof runs[i]);
        runs[i].ranks = r;
        runs[i].memory = NAN;
        runs[i].threads = threads;
        read_run(&runs[i], jsonl, warmup);
    }
    free(rest);
    /* the table, the loss check, the verdicts */
    const SizeRun *one = &runs[0];
    double tol = c.precision == PRECISION_FP32 ? 1e-4 : 2e-2;
    printf("\n%-6s %11s %8s %6s %8s %8s %8s %8s %8s %8s %8s %10s\n", "ranks", "tokens/s", "speedup", "eff", "step ms", "compute",
           "comm exp", "comm all", "bubble", "data", "host", "mem/rank");
    char tmp[4300], json_path[4200];
    snprintf(json_path, sizeof json_path, "%s/scale.json", out);
    FILE *js = atomic_open(json_path, tmp, sizeof tmp);   /* the output door */
    fprintf(js, "{\"mode\": \"%s\", \"sizes\": [\n", weak ? "weak" : "strong");
    for (int i = 0; i < n_sizes; i++) {
        SizeRun *r = &runs[i];
        double ms[MAX_STEPS];
        int k = 0;
        for (int s = warmup; s < r->steps; s++) ms[k++] = r->ms[s];
        double step = med(ms, k), tokens = (double)(weak ? base * (r->ranks / mp) : strong_total);
        r->tps = tokens / (step / 1e3);
        double speed = r->tps / (one->tps > 0 ? one->tps : 1), ideal = (double)r->ranks / one->ranks, eff = speed / ideal;
        char mem[32] = "-";
        if (r->memory > 0) format_bytes(r->memory, mem, sizeof mem);
        printf("%-6d %11.0f %7.2fx %5.0f%% %8.1f %7.1f%% %7.1f%% %7.1f%% %7.1f%% %7.1f%% %7.1f%% %10s\n", r->ranks, r->tps, speed, 100 * eff,
               step, 100 * r->compute / r->step_ms, 100 * r->exposed / r->step_ms, 100 * r->busy / r->step_ms, 100 * r->bubble / r->step_ms,
               100 * r->data / r->step_ms, 100 * r->host / r->step_ms, mem);
        fprintf(js, "  {\"ranks\": %d, \"tokens_per_s\": %.1f, \"speedup\": %.4f, \"efficiency\": %.4f, \"step_ms\": %.3f, \"compute_ms\": %.3f, "
                    "\"comm_exposed_ms\": %.3f, \"comm_busy_ms\": %.3f, \"bubble_ms\": %.3f, \"optimizer_ms\": %.3f, \"data_ms\": %.3f, "
                    "\"host_ms\": %.3f, \"memory_bytes\": %.0f, \"slowest_rank\": %d, \"omp_threads\": %d, \"first_loss\": %.6f}%s\n",
                r->ranks, r->tps, speed, eff, step, r->compute, r->exposed, r->busy, r->bubble, r->optimizer, r->data, r->host,
                r->memory > 0 ? r->memory : 0, r->slowest, r->threads, r->loss[0], i + 1 < n_sizes ? "," : "");
    }
    fprintf(js, "]}\n");
    atomic_commit(js, tmp, json_path);
    printf("\n");
    int drifted = 0;
    for (int i = 1; i < n_sizes; i++) {
        const SizeRun *r = &runs[i];
        int bad = -1;
        for (int s = 0; s < 3 && s < r->steps && s < one->steps; s++) {
            double d = fabs(r->loss[s] - one->loss[s]) / fabs(one->loss[s]);
            if (d > (weak ? 0.05 : tol)) { bad = s; break; }
        }
        if (bad >= 0) {
            drifted = 1;
            printf("loss  | %d ranks: step %d loss %.5f vs %.5f on %d rank%s — %s\n", r->ranks, bad + 1, r->loss[bad], one->loss[bad],
                   one->ranks, one->ranks > 1 ? "s" : "", weak ? "more than 5% apart: the data or the model differ between sizes"
                                                             : "the same global batch must give the same loss: the layout changed the maths");
        }
    }
    if (!drifted) printf("loss  | the first steps' losses agree at every size (%s)\n", weak ? "within 5%: weak scaling grows the batch" : "strong scaling: within rounding");
    for (int i = 1; i < n_sizes; i++) {
        const SizeRun *r = &runs[i];
        double speed = r->tps / one->tps, eff = speed / ((double)r->ranks / one->ranks);
        printf("why   | %d ranks: %.2fx (%.0f%%)", r->ranks, speed, 100 * eff);
        double exp = r->exposed / r->step_ms, bub = r->bubble / r->step_ms, dat = r->data / r->step_ms, host = r->host / r->step_ms;
        int said = 0;
        if (exp > 0.05) { printf("; exposed communication %.0f%% of the step (%.0f%% of the communication hidden)", 100 * exp,
                                 r->busy > 0 ? 100 * fmax(0, 1 - r->exposed / r->busy) : 0); said = 1; }
        if (bub > 0.05) { printf("; pipeline bubble %.0f%% of the step", 100 * bub); said = 1; }
        if (dat > 0.05) { printf("; rank %d's data loading takes %.0f%% of the step", r->slowest, 100 * dat); said = 1; }
        if (host > 0.10) { printf("; host overhead %.0f%% (launches, waits outside the device)", 100 * host); said = 1; }
        if (!weak && r->compute > one->compute * one->ranks / r->ranks * 1.2) {
            printf("; compute per rank shrank to %.0f%% instead of %.0f%%", 100 * r->compute / one->compute, 100.0 * one->ranks / r->ranks);
            said = 1;
        }
        if (r->ranks > cores && c.device == DEVICE_CPU) {
            printf("; contention, not scaling: %d ranks share %ld cores and take turns (a measure of the machine, not of llm3d)", r->ranks, cores);
            said = 1;
        }
        if (!said) printf("; nothing stands out");
        printf("\n");
    }
    printf("json  | %s\n", json_path);
    /* the picture: speedup against ideal, and each size's split */
    /* the picture: the script names its PNG by a fixed name; gnuplot runs in a scratch folder and the PNG is
     * copied to OUT through the door (no path of ours is written into the script) */
    snprintf(path, sizeof path, "%s/scale.gp", out);
    FILE *gp = atomic_open(path, tmp, sizeof tmp);
    fprintf(gp, "# gnuplot scale.gp draws scale.png in the current folder\n"
                "set terminal pngcairo size 1100,420 font ',10'\nset output 'scale.png'\nset multiplot layout 1,2\n");
    fprintf(gp, "set title 'speedup (%s scaling)'\nset xlabel 'ranks'\nset ylabel 'x one rank'\nset key left top\nset grid\n", weak ? "weak" : "strong");
    fprintf(gp, "plot '-' with linespoints lw 2 title 'llm3d', '-' with lines dt 2 title 'ideal'\n");
    for (int i = 0; i < n_sizes; i++) fprintf(gp, "%d %g\n", runs[i].ranks, runs[i].tps / one->tps);
    fprintf(gp, "e\n");
    for (int i = 0; i < n_sizes; i++) fprintf(gp, "%d %g\n", runs[i].ranks, (double)runs[i].ranks / one->ranks);
    fprintf(gp, "e\nset title 'where the slowest rank''s step goes'\nset ylabel 'ms'\nset xlabel 'ranks'\nset style data histograms\n"
                "set style histogram rowstacked\nset style fill solid 0.8\nset boxwidth 0.6\nset key outside right\n");
    const char *parts[6] = {"compute", "comm exposed", "bubble", "optimizer", "data", "host"};
    fprintf(gp, "plot");
    for (int k = 0; k < 6; k++) fprintf(gp, "%s '-' using 2:xtic(1) title '%s'", k ? "," : "", parts[k]);
    fprintf(gp, "\n");
    for (int k = 0; k < 6; k++) {
        for (int i = 0; i < n_sizes; i++) {
            const SizeRun *r = &runs[i];
            double v[6] = {r->compute, r->exposed, r->bubble, r->optimizer, r->data, fmax(0, r->host)};
            fprintf(gp, "%d %g\n", r->ranks, v[k]);
        }
        fprintf(gp, "e\n");
    }
    fprintf(gp, "unset multiplot\n");
    atomic_commit(gp, tmp, path);
    draw(path, out);
    return 0;
}
