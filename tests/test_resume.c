/* tests/test_resume.c — exact resume, end to end, through the real train binary.
 *
 * On a tiny generated shard and a tiny model, a run of 2N steps in one go is
 * compared with runs that stop and resume: a normal end after N steps, a
 * SIGKILL in the middle of writing a checkpoint (and just before its rename),
 * SIGTERM and SIGINT. The step log lines (loss, lr, grad_norm) and the final
 * checkpoints (weights, AdamW m and v, step, loader position) must be
 * bit-identical. Then the refusals: a full disk while saving, a resume whose
 * command line contradicts the checkpoint, a damaged newest checkpoint; and
 * export -> init_from -> the same weights, export -> logits -> the same logits.
 * A finished run resumed, and max_steps=0, say so and leave the run's folder alone.
 * The binary is found beside this test: <BUILD>/tests/test_resume -> <BUILD>/train. */
#define _XOPEN_SOURCE 700
#include "test.h"
#include "../common/util.h"
#include "../checkpoint/format.h"
#include "../data/shard.h"
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char train_bin[1024], root[256], shard[512];

static const char *MODEL = "--dim=32 --n_layers=2 --n_heads=4 --n_kv_heads=2 --ffn_dim=64 --seq_len=16 --batch_size=4 "
                           "--val_data= --eval_every=0 --lr=1e-2 --warmup_steps=3 --log_every=1000";

/* Starts `train <args>` (space-separated, no quoting) with stdout/stderr to <root>/<name>.out/.err. */
static pid_t start(const char *name, const char *hook, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static pid_t start(const char *name, const char *hook, const char *fmt, ...) {
    static char line[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char *argv[128];
    int argc = 0;
    argv[argc++] = train_bin;
    for (char *t = strtok(line, " "); t && argc < 127; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    char out[600], err[600];
    snprintf(out, sizeof out, "%s/%s.out", root, name);
    snprintf(err, sizeof err, "%s/%s.err", root, name);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1); dup2(fe, 2);
        if (hook) setenv("LLM3D_CKPT_HOOK", hook, 1); else unsetenv("LLM3D_CKPT_HOOK");
        execv(train_bin, argv);
        _exit(127);
    }
    return pid;
}

static int wait_for(pid_t pid) { int st; waitpid(pid, &st, 0); return st; }
#define RUN(...) wait_for(start(__VA_ARGS__))
static int ok_exit(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == 0; }

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return calloc(1, 1);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = mallocCheck((size_t)n + 1);
    s[fread(s, 1, (size_t)n, f)] = 0;
    fclose(f);
    return s;
}

/* Whether it holds needle, quietly (for what must be absent). */
static int output_holds(const char *name, const char *ext, const char *needle) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s.%s", root, name, ext);
    char *s = slurp(p);
    int r = strstr(s, needle) != NULL;
    free(s);
    return r;
}

static int output_has(const char *name, const char *ext, const char *needle) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s.%s", root, name, ext);
    char *s = slurp(p);
    int r = strstr(s, needle) != NULL;
    if (!r) printf("  (%s has no '%s'; it says: %.600s)\n", p, needle, s);
    free(s);
    return r;
}

static int exists(const char *fmt, const char *a) { char p[1200]; struct stat st; snprintf(p, sizeof p, fmt, root, a); return stat(p, &st) == 0; }

/* step -> "loss.. lr.. grad_norm.." from a jsonl log; every line for a step must agree */
#define MAX_STEPS 4096
static int read_log(const char *name, char **by_step) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s.jsonl", root, name);
    char *s = slurp(p), *save = NULL;
    int bad = 0;
    for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int step;
        if (sscanf(line, "{\"step\": %d, \"loss\"", &step) != 1 || step < 0 || step >= MAX_STEPS) continue;
        char *ms = strstr(line, ", \"ms\"");
        if (ms) *ms = 0;
        if (by_step[step] && strcmp(by_step[step], line)) { printf("  %s: step %d logged twice differently\n", name, step); bad++; }
        free(by_step[step]);
        by_step[step] = strdup(line);
    }
    free(s);
    return bad;
}

/* the two logs hold the same lines for steps 1..steps */
static int same_logs(const char *a, const char *b, int steps) {
    char **la = calloc(MAX_STEPS, sizeof(char *)), **lb = calloc(MAX_STEPS, sizeof(char *));
    int bad = read_log(a, la) + read_log(b, lb);
    for (int s = 1; s <= steps; s++)
        if (!la[s] || !lb[s] || strcmp(la[s], lb[s])) {
            if (bad++ < 3) printf("  step %d: %s | %s\n", s, la[s] ? la[s] : "(none)", lb[s] ? lb[s] : "(none)");
        }
    for (int s = 0; s < MAX_STEPS; s++) { free(la[s]); free(lb[s]); }
    free(la); free(lb);
    return bad == 0;
}

/* Two checkpoints' tensors (weights_only: just the weights) are byte-identical and every CRC checks out. */
static int same_checkpoints(const char *a, const char *b, int weights_only) {
    char pa[1200], pb[1200], err[1600];
    snprintf(pa, sizeof pa, "%s/%s/state.bin", root, a);
    snprintf(pb, sizeof pb, "%s/%s/state.bin", root, b);
    CkptReader ra, rb;
    if (ckpt_open(&ra, pa, err, sizeof err)) { printf("  %s\n", err); return 0; }
    if (ckpt_open(&rb, pb, err, sizeof err)) { printf("  %s\n", err); ckpt_close(&ra); return 0; }
    int ok = 1, compared = 0;
    if (!weights_only)
        ok = ra.state.step == rb.state.step && ra.state.loader_epoch == rb.state.loader_epoch &&
             ra.state.loader_cursor == rb.state.loader_cursor && ra.state.optimizer_step == rb.state.optimizer_step && ra.n == rb.n;
    for (int i = 0; i < ra.n && ok; i++) {
        const CkptEntry *ea = &ra.entries[i], *eb = ckpt_find(&rb, ea->name);
        if (weights_only && strchr(ea->name, '/')) continue;
        if (!eb || eb->bytes != ea->bytes) { printf("  %s: tensor %s missing or resized\n", b, ea->name); ok = 0; break; }
        void *x = mallocCheck((size_t)ea->bytes), *y = mallocCheck((size_t)eb->bytes);
        if (ckpt_read_raw(&ra, ea, x, err, sizeof err) || ckpt_read_raw(&rb, eb, y, err, sizeof err)) { printf("  %s\n", err); ok = 0; }
        else if (memcmp(x, y, (size_t)ea->bytes)) { printf("  %s differs between %s and %s\n", ea->name, a, b); ok = 0; }
        compared++;
        free(x); free(y);
    }
    ckpt_close(&ra); ckpt_close(&rb);
    return ok && compared > 0;
}

/* waits until a jsonl log has at least n step lines */
static int wait_log_lines(const char *name, int n, pid_t pid) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s.jsonl", root, name);
    for (int tries = 0; tries < 20000; tries++) {
        char *s = slurp(p);
        int lines = 0;
        for (char *q = s; (q = strstr(q, "\"loss\"")); q++) lines++;
        free(s);
        if (lines >= n) return 1;
        if (waitpid(pid, NULL, WNOHANG) == pid) return 0;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void make_shard(void) {
    int n = 6000, V = 96;
    uint32_t *tok = mallocCheck(n * sizeof(uint32_t));
    Rng r;
    rng_seed(&r, 5);
    for (int i = 0; i < n; i++) tok[i] = (uint32_t)((i * 7 + rng_u64(&r) % 5) % V);   /* learnable, not trivial */
    snprintf(shard, sizeof shard, "%s/train.bin", root);
    shard_write(shard, tok, n, V);
    free(tok);
}

#define COMMON "%s --train_data=%s --run_dir=%s/%s --log_jsonl=%s/%s.jsonl"
#define ARGS(name) MODEL, shard, root, name, root, name

int main(int argc, char **argv) {
    (void)argc;
    char self[1024];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(train_bin, sizeof train_bin, "%s/train", dirname(dirname(self)));
    if (access(train_bin, X_OK) != 0) die("cannot find the train binary at '%s'; build it first (make)", train_bin);
    snprintf(root, sizeof root, "/tmp/llm3d_test_resume_XXXXXX");
    if (!mkdtemp(root)) die("mkdtemp failed");
    make_shard();

    /* 1. normal end after N, then resume for N more (constant schedule after warm-up,
     * so the first leg's max_steps does not shape the learning rate) */
    int st = RUN("const_ref", NULL, COMMON " --lr_schedule=constant --max_steps=20", ARGS("const_ref"));
    CHECK(ok_exit(st), "reference run of 20 steps exits 0");
    st = RUN("const_leg", NULL, COMMON " --lr_schedule=constant --max_steps=10", ARGS("const_leg"));
    CHECK(ok_exit(st) && exists("%s/%s/ckpt_00000010/DONE", "const_leg"), "first leg: 10 steps and a checkpoint at the end");
    st = RUN("const_leg", NULL, COMMON " --lr_schedule=constant --max_steps=20 --resume=1", ARGS("const_leg"));
    CHECK(ok_exit(st) && output_has("const_leg", "out", "resume | step 10"), "second leg resumes at step 10");
    CHECK(same_logs("const_ref", "const_leg", 20), "normal end: 10 + 10 steps log the same as 20");
    CHECK(same_checkpoints("const_ref/ckpt_00000020", "const_leg/ckpt_00000020", 0), "normal end: final weights and optimizer bit-identical");
    /* a finished run: --resume=1 says so and writes nothing; --max_steps=0 never writes a checkpoint */
    char before[8192], after[8192], listing[600];
    snprintf(listing, sizeof listing, "-l --time-style=full-iso %s/const_leg %s/const_leg/ckpt_00000020", root, root);
    test_run("ls", listing, before, sizeof before);
    st = RUN("finished", NULL, COMMON " --lr_schedule=constant --max_steps=20 --resume=1", ARGS("const_leg"));
    CHECK(ok_exit(st) && output_has("finished", "out", "run already at step 20 of 20; raise max_steps to continue") &&
          !output_holds("finished", "out", "| config"), "resume of a finished run: exit 0 and says so, without the config table first");
    st = RUN("finished_past", NULL, COMMON " --lr_schedule=constant --max_steps=12 --resume=1", ARGS("const_leg"));
    CHECK(ok_exit(st) && output_has("finished_past", "out", "run already at step 20, past max_steps=12; raise max_steps"),
          "resume past max_steps: exit 0 and says so");
    st = RUN("zero", NULL, COMMON " --lr_schedule=constant --max_steps=0", ARGS("const_leg"));
    CHECK(ok_exit(st) && output_has("zero", "out", "max_steps=0: nothing to train; nothing written"), "max_steps=0: exit 0 and says so");
    test_run("ls", listing, after, sizeof after);
    CHECK(!strcmp(before, after) && !exists("%s/%s/ckpt_00000000", "const_leg"),
          "neither wrote into the run's folder:\n%s\nthen:\n%s", before, after);

    /* 2. cosine schedule, checkpoints every 5 steps; killed while writing step 10's */
    st = RUN("ref", NULL, COMMON " --max_steps=20 --checkpoint_every=5 --keep_checkpoints=0", ARGS("ref"));
    CHECK(ok_exit(st), "cosine reference run exits 0");
    const char *where[] = {"3000", "rename"};
    for (int i = 0; i < 2; i++) {
        char name[32], hook[64];
        snprintf(name, sizeof name, "kill_%s", where[i]);
        snprintf(hook, sizeof hook, "kill:10:%s", where[i]);
        st = RUN(name, hook, COMMON " --max_steps=20 --checkpoint_every=5", ARGS(name));
        CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: the run was SIGKILLed mid-save", hook);
        CHECK(exists("%s/%s/ckpt_00000005/DONE", name) && !exists("%s/%s/ckpt_00000010", name), "%s: step 5 complete, no step 10", hook);
        st = RUN(name, NULL, COMMON " --max_steps=20 --checkpoint_every=5 --resume=1", ARGS(name));
        CHECK(ok_exit(st) && output_has(name, "out", "resume | step 5 from"), "%s: resumed from step 5", hook);
        CHECK(same_logs("ref", name, 20), "%s: losses as in the uninterrupted run", hook);
        char b[64];
        snprintf(b, sizeof b, "%s/ckpt_00000020", name);
        CHECK(same_checkpoints("ref/ckpt_00000020", b, 0), "%s: final state bit-identical", hook);
    }

    /* 3. SIGTERM mid-run: the step finishes, a checkpoint is written, exit 0; resume matches */
    st = RUN("term_ref", NULL, COMMON " --max_steps=600", ARGS("term_ref"));
    pid_t pid = start("term", NULL, COMMON " --max_steps=600", ARGS("term"));
    int seen = wait_log_lines("term", 3, pid);
    kill(pid, SIGTERM);
    st = wait_for(pid);
    CHECK(seen && ok_exit(st) && output_has("term", "out", "stop  | SIGTERM after step"), "SIGTERM: clean exit 0 with a checkpoint");
    char **lines = calloc(MAX_STEPS, sizeof(char *));
    read_log("term", lines);
    int stopped = 0;
    for (int s = 0; s < MAX_STEPS; s++) { if (lines[s]) stopped = s; free(lines[s]); }
    free(lines);
    char stop_dir[64];
    snprintf(stop_dir, sizeof stop_dir, "ckpt_%08d", stopped);
    CHECK(stopped > 0 && stopped < 600 && exists("%s/term/%s/DONE", stop_dir), "SIGTERM: checkpoint at the last logged step %d", stopped);
    st = RUN("term", NULL, COMMON " --max_steps=600 --resume=1", ARGS("term"));
    CHECK(ok_exit(st) && same_logs("term_ref", "term", 600), "SIGTERM: resumed losses as in the uninterrupted run");
    CHECK(same_checkpoints("term_ref/ckpt_00000600", "term/ckpt_00000600", 0), "SIGTERM: final state bit-identical");

    /* SIGINT (Ctrl-C) behaves the same */
    pid = start("int", NULL, COMMON " --max_steps=600", ARGS("int"));
    seen = wait_log_lines("int", 3, pid);
    kill(pid, SIGINT);
    st = wait_for(pid);
    CHECK(seen && ok_exit(st) && output_has("int", "out", "stop  | SIGINT after step") && output_has("int", "out", "ckpt  | step"),
          "SIGINT: clean exit 0 with a checkpoint");

    /* 4. refusals; the previous good checkpoint is never touched */
    st = RUN("full", "enospc:10:2000", COMMON " --max_steps=20 --checkpoint_every=5", ARGS("full"));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && output_has("full", "err", "No space left on device") &&
          output_has("full", "err", "ckpt_00000010.tmp/state.bin"), "full disk: exit 1 naming the file and the problem");
    CHECK(same_checkpoints("ref/ckpt_00000005", "full/ckpt_00000005", 0) && !exists("%s/%s/ckpt_00000010", "full"),
          "full disk: the step-5 checkpoint is intact and no step 10 appears");

    st = RUN("contra", NULL, COMMON " --max_steps=30 --resume=1 --dim=64", MODEL, shard, root, "ref", root, "contra");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && output_has("contra", "err", "was made with dim=32 but this run has dim=64"),
          "resume with another dim: refused naming the key");
    st = RUN("contra", NULL, COMMON " --max_steps=30 --resume=1 --seed=9", MODEL, shard, root, "ref", root, "contra");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && output_has("contra", "err", "seed=1337 but this run has seed=9"),
          "resume with another seed: refused naming the key");
    CHECK(!exists("%s/%s/ckpt_00000030", "ref"), "refused resumes write nothing");
    /* a fresh start (no --resume) in a run_dir holding another run's checkpoints: refused before it writes over them */
    snprintf(listing, sizeof listing, "-l --time-style=full-iso %s/ref %s/ref/ckpt_00000020", root, root);
    test_run("ls", listing, before, sizeof before);
    st = RUN("other", NULL, COMMON " --max_steps=20 --dim=64", MODEL, shard, root, "ref", root, "other");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && output_has("other", "err", "holds another run's checkpoints") &&
          output_has("other", "err", "ref/ckpt_00000020: it was made with dim=32, this run has dim=64") &&
          output_has("other", "err", "--run_dir=") && output_has("other", "err", "--resume=1") && !output_holds("other", "out", "| config"),
          "a new run of another shape in a used run_dir: refused at once, naming the folder, the key, --run_dir and --resume=1");
    test_run("ls", listing, after, sizeof after);
    CHECK(!strcmp(before, after), "the refused run wrote nothing into the other run's folder:\n%s\nthen:\n%s", before, after);
    char cmd[2048];
    /* the same run started again from scratch (the README's main command run twice): the old checkpoints are moved
     * aside, said, so keeping the newest 3 cannot delete the new run's as older steps (and --resume takes the new run's) */
    st = RUN("again", NULL, COMMON " --max_steps=2 --checkpoint_every=1 --keep_checkpoints=3", MODEL, shard, root, "const_leg", root, "again");
    CHECK(ok_exit(st) && output_has("again", "out", "held this run's checkpoints up to step 20; starting over from step 0") &&
          output_has("again", "out", "moved to"), "the same run started afresh in its own run_dir: a note naming where its checkpoints went, and it trains");
    snprintf(cmd, sizeof cmd, "ls -d %s/const_leg/replaced_*/ckpt_00000020/DONE %s/const_leg/ckpt_00000001/DONE %s/const_leg/ckpt_00000002/DONE"
             " >/dev/null 2>&1 && ! ls -d %s/const_leg/ckpt_00000020 >/dev/null 2>&1", root, root, root, root);
    CHECK(system(cmd) == 0, "the old run's step-20 checkpoint kept whole beside the run, the new run's steps 1 and 2 in run_dir");


    snprintf(cmd, sizeof cmd, "cp -r %s/ref %s/damaged", root, root);
    CHECK(system(cmd) == 0, "copy a run");
    char p[1200];
    snprintf(p, sizeof p, "%s/damaged/ckpt_00000020/state.bin", root);
    FILE *f = fopen(p, "r+b");
    fseek(f, 4096, SEEK_SET);   /* inside the first tensor's data */
    int c = fgetc(f);
    fseek(f, 4096, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    st = RUN("damaged", NULL, COMMON " --max_steps=30 --resume=1", ARGS("damaged"));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && output_has("damaged", "err", "checksum mismatch") &&
          output_has("damaged", "err", "damaged/ckpt_00000020/state.bin"), "damaged newest checkpoint: refused naming file and tensor");
    st = RUN("inspect_bad", NULL, "inspect %s/damaged/ckpt_00000020", root);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && output_has("inspect_bad", "out", "MISMATCH"), "inspect flags the damaged tensor");
    st = RUN("inspect_good", NULL, "inspect %s/damaged/ckpt_00000015", root);
    CHECK(ok_exit(st) && output_has("inspect_good", "out", "step     15") && output_has("inspect_good", "out", "dim=32"),
          "the earlier checkpoint is untouched and inspects clean");
    CHECK(output_has("inspect_good", "out", "norm_eps=1e-5") && output_has("inspect_good", "out", "rope_theta=10000") &&
          !output_holds("inspect_good", "out", "9.99999975e-06"), "inspect prints the config's floats as written, without float noise");

    /* 5. Hugging Face: export -> init_from gives the same weights; logits agree */
    st = RUN("export", NULL, "export --checkpoint=%s/ref --out=%s/hf/", root, root);
    CHECK(ok_exit(st) && exists("%s/%s/model.safetensors", "hf") && exists("%s/%s/config.json", "hf"), "export writes the HF folder");
    CHECK(output_has("export", "out", "/hf/{model.safetensors,config.json}") && !output_holds("export", "out", "hf//"),
          "export --out=DIR/ names DIR/{...}, not DIR//{...}");
    /* one step at lr 0 leaves the weights as loaded (and max_steps=0 would write no checkpoint to compare) */
    st = RUN("import", NULL, COMMON " --max_steps=1 --warmup_steps=0 --lr=0 --init_from=%s/hf", ARGS("import"), root);
    CHECK(ok_exit(st) && same_checkpoints("ref/ckpt_00000020", "import/ckpt_00000001", 1), "export -> init_from: weights bit-identical");
    st = RUN("import_bad", NULL, COMMON " --max_steps=0 --init_from=%s/hf --ffn_dim=128", ARGS("import_bad"), root);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && output_has("import_bad", "err", "intermediate_size=64 but this run has ffn_dim=128"),
          "init_from a folder of another shape: refused naming the key");
    st = RUN("logits", NULL, "logits --model=%s/hf --ids=1,5,9,2,7 --out=%s/l_hf.bin", root, root);
    int st2 = RUN("logits", NULL, "logits --model=%s/ref --ids=1,5,9,2,7 --out=%s/l_ck.bin", root, root);
    snprintf(cmd, sizeof cmd, "cmp -s %s/l_hf.bin %s/l_ck.bin", root, root);
    CHECK(ok_exit(st) && ok_exit(st2) && system(cmd) == 0, "logits from the HF folder and from the checkpoint are identical");

    if (!test_failed_count) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        if (system(cmd) != 0) printf("note: could not remove %s\n", root);
    } else printf("outputs kept in %s\n", root);
    return test_summary();
}
