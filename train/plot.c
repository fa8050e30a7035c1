/* train/plot.c — `build/train plot RUN.jsonl`: a run's log as pictures.
 *
 * The idea: llm3d draws nothing itself; it turns its own JSONL (one object a
 * step, one an evaluation, a first line saying what ran) into gnuplot's
 * columns and a short script, and gnuplot draws: the loss and validation loss
 * against steps and against tokens, tokens/s, and where each logged step's
 * time went (the split of the slowest rank). The tables, the script and
 * gnuplot's messages are scratch: they go to a folder of their own under
 * $TMPDIR (or /tmp) and are removed once the picture is drawn — beside the PNG
 * there is only the PNG (--keep=1 keeps the folder and says where it is). */
#include "trainer.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double field(const char *line, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(line, k);
    return p ? atof(p + strlen(k)) : NAN;
}

static const char *usage = "usage: build/train plot RUN.jsonl [--out=RUN.png] [--keep=0]\n"
                           "  draws loss and val loss (by step and by token), tokens/s and the step-time split with gnuplot\n"
                           "  (--keep=1: keep the tables and the gnuplot script, in a folder under $TMPDIR it names)\n";

/* The scratch files, in a folder of their own: three tables (so each one's lines join up: steps,
 * evaluations, splits), the script, and gnuplot's messages. */
enum { F_STEPS, F_EVALS, F_SPLIT, F_SCRIPT, F_LOG, N_SCRATCH };
static const char *const scratch_names[N_SCRATCH] = {"steps.dat", "eval.dat", "split.dat", "plot.gp", "gnuplot.log"};
static char scratch_dir[1024], scratch[N_SCRATCH][1100];

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
        else if (!strcmp(argv[i], "--keep=0") || !strcmp(argv[i], "--keep=1")) keep = argv[i][7] == '1';
        else if (!in && strncmp(argv[i], "--", 2)) in = argv[i];
        else die("plot: unexpected '%s'\n%s", argv[i], usage);
    }
    if (!in) die("plot: which log?\n%s", usage);
    char png[1024], err[1400], line[8192];
    FILE *f = fopen_regular(in, "run log", err, sizeof err);
    if (!f) die("plot: %s\n  hint: a run writes its log with --log_jsonl=PATH", err);
    if (out) snprintf(png, sizeof png, "%s", out);
    else snprintf(png, sizeof png, "%.*s.png", (int)(strstr(in, ".jsonl") ? strstr(in, ".jsonl") - in : (long)strlen(in)), in);
    const char *tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    snprintf(scratch_dir, sizeof scratch_dir, "%s/llm3d_plot.XXXXXX", tmp);
    if (!mkdtemp(scratch_dir)) die("plot: cannot make a scratch folder in %s: %s\n  hint: set TMPDIR to a writable folder", tmp, strerror(errno));
    for (int k = 0; k < N_SCRATCH; k++) snprintf(scratch[k], sizeof scratch[k], "%s/%s", scratch_dir, scratch_names[k]);
    if (!keep) atexit(scratch_remove);   /* every way out, an error included, leaves nothing behind */
    const char *data = scratch[F_STEPS], *evals_path = scratch[F_EVALS], *split_path = scratch[F_SPLIT], *script = scratch[F_SCRIPT];
    FILE *d = fopen(data, "w"), *de = fopen(evals_path, "w"), *dp = fopen(split_path, "w");
    if (!d || !de || !dp) die("plot: cannot write the tables in %s", scratch_dir);
    double tokens_per_step = NAN, tokens = 0;
    int steps = 0, evals = 0, split = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] != '{' || !strchr(line, '}'))
            die("plot: '%s' line %d is not a JSON object: this is not an llm3d log (--log_jsonl writes one object a line)", in, lineno);
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
        fprintf(d, "%g %g %g %g\n", step, tokens, loss, tps);
        if (!isnan(c)) {   /* every log_every steps */
            fprintf(dp, "%g %g %g %g %g %g %g\n", step, c, e, b, o, da, h);
            split++;
        }
        steps++;
    }
    fclose(f);
    fclose(d);
    fclose(de);
    fclose(dp);
    if (!steps) die("plot: '%s' holds no training steps: this is not an llm3d log, or the run logged nothing", in);
    FILE *g = fopen(script, "w");
    if (!g) die("plot: cannot write '%s'", script);
    fprintf(g, "set terminal pngcairo size 1200,%d font ',10'\nset output '%s'\nset multiplot layout %d,2\nset grid\nset key top right\n",
            split ? 800 : 420, png, split ? 2 : 1);
    fprintf(g, "set title 'loss by step'\nset xlabel 'step'\nset ylabel 'nats per token'\n"
               "plot '%s' using 1:3 with lines title 'train'%s%s%s\n", data,
            evals ? ", '" : "", evals ? evals_path : "", evals ? "' using 1:3 with linespoints title 'val'" : "");
    fprintf(g, "set title 'loss by token'\nset xlabel 'tokens'\n"
               "plot '%s' using 2:3 with lines title 'train'%s%s%s\n", data,
            evals ? ", '" : "", evals ? evals_path : "", evals ? "' using 2:3 with linespoints title 'val'" : "");
    fprintf(g, "set title 'throughput'\nset xlabel 'step'\nset ylabel 'tokens/s'\nplot '%s' using 1:4 with lines notitle\n", data);
    if (split)
        fprintf(g, "set title 'where the step went (slowest rank)'\nset ylabel 'ms'\nset key outside right\n"
                   "plot '%s' using 1:2 with lines title 'compute', '' using 1:3 with lines title 'comm exposed', '' using 1:4 with lines title 'bubble', "
                   "'' using 1:5 with lines title 'optimizer', '' using 1:6 with lines title 'data', '' using 1:7 with lines title 'host'\n", split_path);
    fprintf(g, "unset multiplot\n");
    fclose(g);
    if (keep) printf("plot  | kept the tables and the gnuplot script in %s (--keep=1)\n", scratch_dir);
    if (system("command -v gnuplot >/dev/null 2>&1") != 0)
        die("plot: gnuplot is not installed (apt-get install gnuplot-nox; scripts/setup.sh installs it)%s",
            keep ? "" : "\n  hint: --keep=1 keeps the tables and the script, to draw them where gnuplot is");
    char cmd[2600];
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>'%s'", script, scratch[F_LOG]);
    if (system(cmd) != 0) {
        char msg[1024] = "";
        FILE *lf = fopen(scratch[F_LOG], "r");
        size_t n = lf ? fread(msg, 1, sizeof msg - 1, lf) : 0;
        msg[n] = 0;
        if (lf) fclose(lf);
        die("plot: gnuplot could not draw %s; it said:\n%s", png, msg);
    }
    printf("plot  | %s (%d steps, %d evaluations%s)\n", png, steps, evals, split ? ", step-time split" : "");
    return 0;
}
