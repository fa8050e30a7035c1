/* train/plot.c — `build/train plot RUN.jsonl`: a run's log as pictures.
 *
 * The idea: llm3d draws nothing itself; it turns its own JSONL (one object a
 * step, one an evaluation, a first line saying what ran) into gnuplot's
 * columns and a short script, and gnuplot draws: the loss and validation loss
 * against steps and against tokens, tokens/s, and where each logged step's
 * time went (the split of the slowest rank). The tables, the script and
 * gnuplot's messages are scratch: they go to a folder of their own under
 * $TMPDIR (or /tmp) and are removed once the picture is drawn — beside the PNG
 * there is only the PNG (--keep=1 keeps the folder and says where it is).
 * No path reaches a shell or the script: gnuplot is started with an argument
 * vector (common/spawn.c) in the scratch folder, where the script names its
 * tables and its PNG by fixed names (steps.dat, plot.png); the PNG is then
 * copied to --out through the output door. Whatever quotes, $(...), backticks
 * or newlines --out, the log's name or $TMPDIR hold, they stay file names. */
#include "trainer.h"
#include "../common/options.h"
#include "../common/spawn.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *usage = "usage: build/train plot RUN.jsonl [--out=RUN.png] [--keep=0]\n"
                           "  draws loss and val loss (by step and by token), tokens/s and the step-time split with gnuplot\n"
                           "  (--keep=1: keep the tables and the gnuplot script, in a folder under $TMPDIR it names)\n";

/* The scratch files, in a folder of their own: three tables (so each one's lines join up: steps,
 * evaluations, splits), the script, and gnuplot's messages. */
enum { F_STEPS, F_EVALS, F_SPLIT, F_SCRIPT, F_LOG, F_PNG, N_SCRATCH };
static const char *const scratch_names[N_SCRATCH] = {"steps.dat", "eval.dat", "split.dat", "plot.gp", "gnuplot.log", "plot.png"};
static char scratch_dir[1024], scratch[N_SCRATCH][1100];   /* TMPDIR beyond 1000 bytes: cut, then mkdtemp says so */

static void scratch_remove(void) {
    for (int k = 0; k < N_SCRATCH; k++) unlink(scratch[k]);
    rmdir(scratch_dir);
}

int plot_main(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int keep = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) { printf("%s", usage); return 0; }
        if (!strncmp(argv[i], "--out=", 6)) out = argv[i] + 6;
        else if (!strncmp(argv[i], "--keep=", 7)) keep = (int)option_number_or_die("plot", "keep", argv[i] + 7, 0, 1, 1);
        else if (!in && strncmp(argv[i], "--", 2)) in = argv[i];
        else die("plot: unexpected '%s'\n%s", argv[i], usage);
    }
    if (!in) die("plot: which log?\n%s", usage);
    char png[4096], err[9000], line[8192];
    FILE *f = fopen_regular(in, "run log", err, sizeof err);
    if (!f) die("plot: %s\n  hint: a run writes its log with --log_jsonl=PATH", err);
    if (out) snprintf(png, sizeof png, "%s", out);
    else snprintf(png, sizeof png, "%.*s.png", (int)(strstr(in, ".jsonl") ? strstr(in, ".jsonl") - in : (long)strlen(in)), in);
    if (check_writable(png, 0, "--out", err, sizeof err) != 0) die("plot: %s", err);   /* before any work */
    const char *tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    snprintf(scratch_dir, sizeof scratch_dir, "%s/llm3d_plot.XXXXXX", tmp);
    if (!mkdtemp(scratch_dir)) die("plot: cannot make a scratch folder in %s: %s\n  hint: set TMPDIR to a writable folder", tmp, strerror(errno));
    for (int k = 0; k < N_SCRATCH; k++) snprintf(scratch[k], sizeof scratch[k], "%s/%s", scratch_dir, scratch_names[k]);
    if (!keep) atexit(scratch_remove);   /* every way out, an error included, leaves nothing behind */
    char tmp_name[N_SCRATCH][1200];
    FILE *d = atomic_open(scratch[F_STEPS], tmp_name[F_STEPS], sizeof tmp_name[F_STEPS]);
    FILE *de = atomic_open(scratch[F_EVALS], tmp_name[F_EVALS], sizeof tmp_name[F_EVALS]);
    FILE *dp = atomic_open(scratch[F_SPLIT], tmp_name[F_SPLIT], sizeof tmp_name[F_SPLIT]);
    double tokens_per_step = NAN, tokens = 0;
    int steps = 0, evals = 0, split = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] != '{' || !strchr(line, '}'))
            die("plot: '%s' line %d is not a JSON object: this is not an llm3d log (--log_jsonl writes one object a line)", in, lineno);
#define field(line, key) json_number(line, key, in, lineno)
        if (strstr(line, "\"run\": \"llm3d\"")) { tokens_per_step = field(line, "tokens_per_step"); continue; }
        double step = field(line, "step");
        if (isnan(step)) die("plot: '%s' line %d has no \"step\": this is not an llm3d log", in, lineno);
        double val = field(line, "val_loss"), loss = field(line, "loss");
        if (!isnan(val)) { fprintf(de, "%g %g %g\n", step, isnan(tokens_per_step) ? NAN : step * tokens_per_step, val); evals++; continue; }
        if (isnan(loss)) continue;
        double tps = field(line, "tokens_per_s"), ms = field(line, "ms");
        tokens = isnan(tokens_per_step) ? tokens + tps * ms / 1e3 : step * tokens_per_step;
        double c = field(line, "compute_ms"), e = field(line, "comm_exposed_ms"), b = field(line, "bubble_ms"), o = field(line, "optimizer_ms"),
               da = field(line, "data_ms"), h = field(line, "host_ms");
#undef field
        fprintf(d, "%g %g %g %g\n", step, tokens, loss, tps);
        if (!isnan(c)) {   /* every log_every steps */
            fprintf(dp, "%g %g %g %g %g %g %g\n", step, c, e, b, o, da, h);
            split++;
        }
        steps++;
    }
    fclose(f);
    atomic_commit(d, tmp_name[F_STEPS], scratch[F_STEPS]);
    atomic_commit(de, tmp_name[F_EVALS], scratch[F_EVALS]);
    atomic_commit(dp, tmp_name[F_SPLIT], scratch[F_SPLIT]);
    if (!steps) die("plot: '%s' holds no training steps: this is not an llm3d log, or the run logged nothing", in);
    /* the script names only fixed files of the scratch folder (gnuplot runs there): no string of ours in it */
    FILE *g = atomic_open(scratch[F_SCRIPT], tmp_name[F_SCRIPT], sizeof tmp_name[F_SCRIPT]);
    fprintf(g, "set terminal pngcairo size 1200,%d font ',10'\nset output '%s'\nset multiplot layout %d,2\nset grid\nset key top right\n",
            split ? 800 : 420, scratch_names[F_PNG], split ? 2 : 1);
    fprintf(g, "set title 'loss by step'\nset xlabel 'step'\nset ylabel 'nats per token'\n"
               "plot 'steps.dat' using 1:3 with lines title 'train'%s\n", evals ? ", 'eval.dat' using 1:3 with linespoints title 'val'" : "");
    fprintf(g, "set title 'loss by token'\nset xlabel 'tokens'\n"
               "plot 'steps.dat' using 2:3 with lines title 'train'%s\n", evals ? ", 'eval.dat' using 2:3 with linespoints title 'val'" : "");
    fprintf(g, "set title 'throughput'\nset xlabel 'step'\nset ylabel 'tokens/s'\nplot 'steps.dat' using 1:4 with lines notitle\n");
    if (split)
        fprintf(g, "set title 'where the step went (slowest rank)'\nset ylabel 'ms'\nset key outside right\n"
                   "plot 'split.dat' using 1:2 with lines title 'compute', '' using 1:3 with lines title 'comm exposed', '' using 1:4 with lines title 'bubble', "
                   "'' using 1:5 with lines title 'optimizer', '' using 1:6 with lines title 'data', '' using 1:7 with lines title 'host'\n");
    fprintf(g, "unset multiplot\n");
    atomic_commit(g, tmp_name[F_SCRIPT], scratch[F_SCRIPT]);
    if (keep) printf("plot  | kept the tables and the gnuplot script in %s (--keep=1)\n", scratch_dir);
    char found[4096];
    if (!spawn_find("gnuplot", found, sizeof found))
        die("plot: gnuplot is not installed (apt-get install gnuplot-nox; scripts/setup.sh installs it)%s",
            keep ? "" : "\n  hint: --keep=1 keeps the tables and the script, to draw them where gnuplot is");
    char *gnuplot[] = {"gnuplot", (char *)scratch_names[F_SCRIPT], NULL};
    int rc = spawn_wait(gnuplot, scratch_dir, scratch[F_LOG], NULL, err, sizeof err);
    if (rc < 0) die("plot: %s", err);
    if (rc != 0) {
        char msg[1024] = "";
        FILE *lf = fopen_regular(scratch[F_LOG], "gnuplot's messages", err, sizeof err);
        size_t n = lf ? fread(msg, 1, sizeof msg - 1, lf) : 0;
        msg[n] = 0;
        if (lf) fclose(lf);
        die("plot: gnuplot could not draw %s (exit %d); it said:\n%s", png, rc, msg);
    }
    if (output_copy_file(scratch[F_PNG], png, err, sizeof err) != 0) die("plot: %s", err);   /* through the output door */
    printf("plot  | %s (%d steps, %d evaluations%s)\n", png, steps, evals, split ? ", step-time split" : "");
    return 0;
}
