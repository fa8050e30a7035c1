/* checkpoint/checkpoint.c — the checkpoint folder protocol (tmp, DONE, rename,
 * retention), resume with sliced reads, and `inspect`; the config and tensor-table
 * checks every reader goes through are checkpoint/consistency.c. */
#define _XOPEN_SOURCE 700
#include "checkpoint.h"
#include "../common/util.h"
#include "../common/options.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const checkpoint_fixed_keys[] = {"vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim",
                                             "tie_embeddings", "rope_theta", "norm_eps", "seq_len", "seed", NULL};

/* ------------------------------------------------------------ small helpers */

void checkpoint_make_folder(const char *dir) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                die("cannot create folder '%s': %s\n  hint: check run_dir and its permissions", buf, strerror(errno));
            if (!c) break;
            *p = c;
        }
    }
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) die("cannot open folder '%s' to sync it: %s", dir, strerror(errno));
    if (fsync(fd) != 0 && errno != EINVAL) die("fsync of folder '%s' failed: %s", dir, strerror(errno));
    close(fd);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}

static void rm_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        fprintf(stderr, "warning: could not fully remove '%s': %s\n", path, strerror(errno));
}

static int file_exists(const char *path) { struct stat st; return stat(path, &st) == 0; }
static int is_dir(const char *path) { struct stat st; return stat(path, &st) == 0 && S_ISDIR(st.st_mode); }

/* "ckpt_00000123" -> 123; -1 for any other name (".tmp" folders included) */
static long long ckpt_dir_step(const char *name) {
    if (strncmp(name, "ckpt_", 5) || strlen(name) != 13) return -1;
    long long v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

/* the test hook: LLM3D_CKPT_HOOK=kill:STEP:WHERE | enospc:STEP:BYTES */
static const char *hook_for_step(long long step, const char *kind) {
    const char *h = getenv("LLM3D_CKPT_HOOK");
    if (!h) return NULL;
    size_t k = strlen(kind);
    if (strncmp(h, kind, k) || h[k] != ':') return NULL;
    char *end;
    long long s = strtoll(h + k + 1, &end, 10);
    if (*end != ':' || s != step) return NULL;
    return end + 1;
}

static int64_t hook_bytes(const char *text) {
    return (int64_t)option_number_or_die("train", "LLM3D_CKPT_HOOK's byte count", text, 0, 9e15, 1);
}

static void hook_kill_at(long long step, const char *where) {
    const char *h = hook_for_step(step, "kill");
    if (h && !strcmp(h, where)) {
        fprintf(stderr, "test hook: SIGKILL at '%s' of the step %lld checkpoint\n", where, step);
        kill(getpid(), SIGKILL);
    }
}

/* Removes an old checkpoint folder in the order that never leaves it looking complete: DONE first (the
 * folder stops counting the moment DONE is gone, and that is made durable), then state.bin, then the folder.
 * A SIGKILL anywhere in between leaves at most a ckpt_<step> without DONE, which every reader ignores.
 * Test hook: LLM3D_TEST_PRUNE_PAUSE=SECONDS sleeps after DONE is removed, so a test can kill the run there. */
static void prune_checkpoint(const char *dir) {
    char done[1400];
    snprintf(done, sizeof done, "%s/DONE", dir);
    if (unlink(done) != 0 && errno != ENOENT) {
        fprintf(stderr, "warning: could not remove '%s' to prune the checkpoint: %s; leaving it\n", done, strerror(errno));
        return;
    }
    fsync_dir(dir);
    const char *pause = getenv("LLM3D_TEST_PRUNE_PAUSE");
    if (pause && pause[0]) {
        double seconds = option_number_or_die("train", "LLM3D_TEST_PRUNE_PAUSE", pause, 0, 3600, 1);
        fprintf(stderr, "test hook: pruning '%s' paused for %g s after removing DONE\n", dir, seconds);
        sleep((unsigned)seconds);
    }
    rm_tree(dir);
}

/* ---------------------------------------------------------------------- save */

static int64_t tensor_shape(const ParamTensor *t, int64_t *shape) {
    if (t->global_rows == 1) { shape[0] = t->global_cols; return 1; }
    shape[0] = t->global_rows; shape[1] = t->global_cols;
    return 2;
}

void checkpoint_write(const char *run_dir, int keep, const CkptSource *src, const CkptState *s, const char *config_text,
                      char *saved, size_t saved_size) {
    char final[1100], tmp[1120], old[1120], state[1200], done[1200];
    snprintf(final, sizeof final, "%s/ckpt_%08lld", run_dir, (long long)s->step);
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    snprintf(old, sizeof old, "%s.old", final);
    snprintf(state, sizeof state, "%s/state.bin", tmp);
    snprintf(done, sizeof done, "%s/DONE", tmp);
    checkpoint_make_folder(run_dir);
    rm_tree(tmp);   /* what a crashed save left behind */
    if (mkdir(tmp, 0755) != 0) die("cannot create checkpoint folder '%s': %s", tmp, strerror(errno));

    CkptWriteHooks hooks = {-1, -1};
    const char *h;
    if ((h = hook_for_step(s->step, "kill")) && h[0] >= '0' && h[0] <= '9') hooks.kill_after = hook_bytes(h);
    if ((h = hook_for_step(s->step, "enospc"))) hooks.fail_after = hook_bytes(h);

    size_t largest = 1;
    for (int i = 0; i < src->n_tensors; i++) {
        size_t n = (size_t)src->tensors[i].global_rows * src->tensors[i].global_cols;
        if (n > largest) largest = n;
    }
    float *host = mallocCheck(largest * sizeof(float));
    CkptWriter w;
    ckpt_writer_open(&w, state, s, config_text, hooks);
    for (int k = 0; k < src->n_mirrors; k++)
        for (int i = 0; i < src->n_tensors; i++) {
            const ParamTensor *t = &src->tensors[i];
            char name[CKPT_NAME_BYTES];
            if (!src->prefixes[k]) snprintf(name, sizeof name, "%s", t->name);
            else snprintf(name, sizeof name, "%s/%s", src->prefixes[k], t->name);
            int64_t shape[2];
            int ndim = (int)tensor_shape(t, shape);
            src->fetch(src->ctx, k, i, host);
            ckpt_writer_add(&w, name, CKPT_F32, ndim, shape, host);
        }
    free(host);
    if (src->extra_name) {
        int64_t shape[2] = {src->extra_rows, src->extra_cols};
        ckpt_writer_add(&w, src->extra_name, CKPT_F32, 2, shape, src->extra);
    }
    int64_t bytes = w.pos;
    ckpt_writer_finish(&w);

    hook_kill_at(s->step, "done");
    char tmp_path[1300];
    FILE *f = atomic_open(done, tmp_path, sizeof tmp_path);
    fprintf(f, "llm3d checkpoint complete\nstep=%lld\nstate.bin bytes=%lld\n", (long long)s->step, (long long)bytes);
    atomic_commit(f, tmp_path, done);
    fsync_dir(tmp);

    hook_kill_at(s->step, "rename");
    if (is_dir(final)) {    /* the same step saved again (e.g. resumed at the end): replace it */
        rm_tree(old);
        if (rename(final, old) != 0) die("cannot move '%s' aside: %s", final, strerror(errno));
    }
    if (rename(tmp, final) != 0) die("cannot rename '%s' to '%s': %s", tmp, final, strerror(errno));
    fsync_dir(run_dir);
    rm_tree(old);
    if (saved) snprintf(saved, saved_size, "%s", final);

    hook_kill_at(s->step, "retention");
    /* keep-last-k over complete checkpoints; leftovers of crashed saves go too */
    DIR *d = opendir(run_dir);
    if (!d) return;
    long long *steps = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long st = ckpt_dir_step(e->d_name);
        char p[1300];
        snprintf(p, sizeof p, "%s/%s", run_dir, e->d_name);
        size_t len = strlen(e->d_name);
        if (st < 0 && !strncmp(e->d_name, "ckpt_", 5) && len > 4 && !strcmp(e->d_name + len - 4, ".tmp")) { rm_tree(p); continue; }
        if (st < 0) continue;
        char dn[1400];
        snprintf(dn, sizeof dn, "%s/DONE", p);
        if (!file_exists(dn)) continue;   /* not ours to judge: leave it */
        if (n == cap) { cap = cap ? 2 * cap : 16; steps = realloc(steps, (size_t)cap * sizeof *steps); if (!steps) die("out of memory"); }
        steps[n++] = st;
    }
    closedir(d);
    if (keep > 0 && n > keep) {
        for (int i = 0; i < n; i++)           /* sort newest first */
            for (int j = i + 1; j < n; j++)
                if (steps[j] > steps[i]) { long long t = steps[i]; steps[i] = steps[j]; steps[j] = t; }
        for (int i = keep; i < n; i++) {
            char p[1300];
            snprintf(p, sizeof p, "%s/ckpt_%08lld", run_dir, steps[i]);
            prune_checkpoint(p);
        }
        fsync_dir(run_dir);
    }
    free(steps);
}

/* One rank, whole model: each mirror downloaded once, tensors cut from it. */
typedef struct { const Model *m; const CkptMirror *mirrors; float *host; int have; } ModelSource;

static void fetch_from_model(void *ctx, int mirror, int tensor, float *dst) {
    ModelSource *ms = ctx;
    const Model *m = ms->m;
    if (ms->have != mirror) {
        m->be->download(ms->host, mirror == 0 ? m->params : ms->mirrors[mirror - 1].device, m->n_params * sizeof(float));
        ms->have = mirror;
    }
    const ParamTensor *t = &m->tensors[tensor];
    memcpy(dst, ms->host + t->offset, (size_t)t->rows * t->cols * sizeof(float));
}

void checkpoint_save(const char *run_dir, int keep, const Model *m, const CkptMirror *mirrors, int n_mirrors,
                     const CkptState *s, const char *config_text, char *saved, size_t saved_size) {
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        if (t->rows != t->global_rows || t->cols != t->global_cols || !m->params)
            die("internal: checkpoint_save takes a model one rank holds whole; a slice is saved through checkpoint_write");
    }
    const char *prefixes[8] = {NULL};
    if (n_mirrors > 7) die("internal: more than 7 checkpoint mirrors");
    for (int k = 0; k < n_mirrors; k++) prefixes[k + 1] = mirrors[k].prefix;
    ModelSource ms = {m, mirrors, mallocCheck(m->n_params * sizeof(float)), -1};
    CkptSource src = {m->tensors, m->n_tensors, prefixes, n_mirrors + 1, fetch_from_model, &ms, NULL, NULL, 0, 0};
    checkpoint_write(run_dir, keep, &src, s, config_text, saved, saved_size);
    free(ms.host);
}

long long checkpoint_find_latest(const char *run_dir, char *path, size_t size) {
    static char warned[1100];   /* a run_dir's incomplete folders are named once a process, however often it is listed */
    int warn = strcmp(warned, run_dir) != 0;
    snprintf(warned, sizeof warned, "%s", run_dir);
    DIR *d = opendir(run_dir);
    if (!d) return -1;
    long long best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long st = ckpt_dir_step(e->d_name);
        if (st < 0) continue;
        char dn[1300];
        snprintf(dn, sizeof dn, "%s/%s/DONE", run_dir, e->d_name);
        if (!file_exists(dn)) {
            if (warn) fprintf(stderr, "warning: '%s/%s' has no DONE marker (an interrupted save, prune or copy); ignoring it\n", run_dir, e->d_name);
            continue;
        }
        if (st > best) best = st;
    }
    closedir(d);
    if (best >= 0) snprintf(path, size, "%s/ckpt_%08lld", run_dir, best);
    return best;
}

/* ---------------------------------------------------------------------- load */

void checkpoint_state_path(const char *path, char *out, size_t size) {
    if (is_dir(path)) snprintf(out, size, "%s/state.bin", path);
    else snprintf(out, size, "%s", path);
}

int checkpoint_read_slice(CkptReader *r, const char *name, const ParamTensor *t, float *dst, char *err, size_t err_size) {
    const CkptEntry *e = ckpt_find(r, name);
    if (!e) { snprintf(err, err_size, "'%s' has no tensor '%s'", r->path, name); return -1; }
    int64_t rows, cols;
    ckpt_entry_dims(e, &rows, &cols);
    int want_ndim = t->global_rows == 1 ? 1 : 2;
    if (e->ndim != want_ndim || rows != t->global_rows || cols != t->global_cols) {
        snprintf(err, err_size, "'%s': tensor '%s' is %lld x %lld (ndim %d) but the model needs %d x %d", r->path, name,
                 (long long)rows, (long long)cols, e->ndim, t->global_rows, t->global_cols);
        return -1;
    }
    return ckpt_read_f32(r, e, t->row0, t->rows, t->col0, t->cols, dst, err, err_size);
}

static void open_or_die(CkptReader *r, const char *dir) {
    char path[1200], err[2048];
    ModelConfig mc;
    checkpoint_state_path(dir, path, sizeof path);
    if (checkpoint_open_model(r, path, &mc, err, sizeof err) != 0)
        die("%s%s", err, strstr(err, "hint:") ? "" : "\n  hint: the checkpoint is damaged; move its folder aside to fall back to an earlier one");
}

/* Every tensor's slice into host (n_params, laid out like m's buffer); what lies in no tensor (vocabulary padding) is 0. */
static void read_tensors(CkptReader *r, const Model *m, const char *prefix, float *host) {
    char err[1600];
    memset(host, 0, m->n_params * sizeof(float));
    for (int i = 0; i < m->n_tensors; i++) {
        const ParamTensor *t = &m->tensors[i];
        char name[CKPT_NAME_BYTES];
        if (prefix) snprintf(name, sizeof name, "%s/%s", prefix, t->name);
        else snprintf(name, sizeof name, "%s", t->name);
        if (checkpoint_read_slice(r, name, t, host + t->offset, err, sizeof err) != 0)
            die("%s%s", err, strstr(err, "hint:") ? "" : "\n  hint: the checkpoint is damaged or from another model; move its folder aside "
                "to fall back to an earlier one");
    }
}

void checkpoint_read(const char *ckpt_dir, const Model *m, const char *const *prefixes, int n_prefixes, float **host, CkptState *s,
                     const char *config_text, int verbose) {
    CkptReader r;
    open_or_die(&r, ckpt_dir);
    char err[2048];
    if (checkpoint_check_config(r.config_text, config_text, checkpoint_fixed_keys, 64, r.path, err, sizeof err) != 0) die("%s", err);
    /* report every other key that changed */
    for (const char *p = r.config_text; verbose && p && *p;) {
        const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
        if (!eq || (nl && eq > nl)) break;
        char key[128], now[1024];
        snprintf(key, sizeof key, "%.*s", (int)(eq - p), p);
        char was[1024];
        checkpoint_config_value(r.config_text, key, was, sizeof was);
        if (checkpoint_config_value(config_text, key, now, sizeof now) == 0 && !checkpoint_same_value(was, now) && strcmp(key, "resume"))
            printf("resume | %s changed: %s -> %s\n", key, was, now);
        p = nl ? nl + 1 : NULL;
    }
    read_tensors(&r, m, NULL, host[0]);
    for (int k = 0; k < n_prefixes; k++) read_tensors(&r, m, prefixes[k], host[k + 1]);
    *s = r.state;
    ckpt_close(&r);
}

void checkpoint_load(const char *ckpt_dir, Model *m, const CkptMirror *mirrors, int n_mirrors, CkptState *s, const char *config_text) {
    const char *prefixes[8] = {NULL};
    float *host[8] = {NULL};
    if (n_mirrors > 7) die("internal: more than 7 checkpoint mirrors");
    for (int k = 0; k <= n_mirrors; k++) host[k] = mallocCheck(m->n_params * sizeof(float));
    for (int k = 0; k < n_mirrors; k++) prefixes[k] = mirrors[k].prefix;
    checkpoint_read(ckpt_dir, m, prefixes, n_mirrors, host, s, config_text, 1);
    model_set_params(m, host[0]);
    for (int k = 0; k < n_mirrors; k++) m->be->upload(mirrors[k].device, host[k + 1], m->n_params * sizeof(float));
    for (int k = 0; k <= n_mirrors; k++) free(host[k]);
}

void checkpoint_read_weights(const char *ckpt_dir, const Model *m, float *host, const char *config_text) {
    CkptReader r;
    open_or_die(&r, ckpt_dir);
    char err[2048];
    if (checkpoint_check_config(r.config_text, config_text, checkpoint_fixed_keys, CHECKPOINT_N_MODEL_KEYS, r.path, err, sizeof err) != 0)
        die("%s", err);
    read_tensors(&r, m, NULL, host);
    ckpt_close(&r);
}

int checkpoint_same_run(const char *ckpt_dir, const char *config_text, char *why, size_t why_size) {
    CkptReader r;
    char path[1200], err[1600];
    checkpoint_state_path(ckpt_dir, path, sizeof path);
    if (ckpt_open(&r, path, err, sizeof err) != 0) { snprintf(why, why_size, "it cannot be read: %s", err); return 0; }
    const char *keys[16];
    int n = 0;
    for (int i = 0; checkpoint_fixed_keys[i]; i++) keys[n++] = checkpoint_fixed_keys[i];
    keys[n++] = "train_data";
    int same = 1;
    for (int i = 0; i < n && same; i++) {
        char was[512] = "", now[512] = "";
        checkpoint_config_value(r.config_text, keys[i], was, sizeof was);
        checkpoint_config_value(config_text, keys[i], now, sizeof now);
        if (!checkpoint_same_value(was, now)) {
            snprintf(why, why_size, "it was made with %s=%s, this run has %s=%s", keys[i], was, keys[i], now);
            same = 0;
        }
    }
    ckpt_close(&r);
    return same;
}

void checkpoint_load_weights(const char *ckpt_dir, Model *m, const char *config_text) {
    float *host = mallocCheck(m->n_params * sizeof(float));
    checkpoint_read_weights(ckpt_dir, m, host, config_text);
    model_set_params(m, host);
    free(host);
}

/* ------------------------------------------------------------------- inspect */

int checkpoint_inspect(const char *path, FILE *out) { return checkpoint_inspect_ex(path, 0, out); }

/* The listing reads every tensor once (CRC and non-finite count) before printing: a checkpoint holding
 * NaN or inf is refused as every loader refuses it, unless allow_nonfinite, which shows the counts. */
int checkpoint_inspect_ex(const char *path, int allow_nonfinite, FILE *out) {
    char state[1200], err[1600];
    checkpoint_state_path(path, state, sizeof state);
    CkptReader r;
    if (ckpt_open(&r, state, err, sizeof err) != 0) { fprintf(stderr, "error: %s\n", err); return 1; }
    int64_t *bad = callocCheck((size_t)r.n + 1, sizeof *bad), *first = callocCheck((size_t)r.n + 1, sizeof *first), total = 0;
    int *ok = callocCheck((size_t)r.n + 1, sizeof *ok), mismatched = 0;
    for (int i = 0; i < r.n; i++) {
        ok[i] = ckpt_scan(&r, &r.entries[i], &bad[i], &first[i], err, sizeof err) == 0;
        if (!ok[i]) { mismatched++; fprintf(stderr, "error: %s\n", err); }
        total += bad[i];
    }
    for (int i = 0; i < r.n && total && !allow_nonfinite; i++) {
        if (!bad[i]) continue;
        const CkptEntry *e = &r.entries[i];
        int64_t rows, cols;
        uint8_t value[4] = {0};
        ckpt_entry_dims(e, &rows, &cols);
        size_t es = ckpt_dtype_size(e->dtype);
        if (fseeko(r.f, e->offset + first[i] * (int64_t)es, SEEK_SET) != 0 || fread(value, 1, es, r.f) != es) memset(value, 0xff, sizeof value);
        ckpt_nonfinite_message(state, e->name, e->dtype, value, first[i], rows, cols, err, sizeof err);
        fprintf(stderr, "error: %s\n  (%lld non-finite values in all; --allow_nonfinite=1 lists them per tensor)\n", err, (long long)total);
        free(bad); free(first); free(ok);
        ckpt_close(&r);
        return 1;
    }
    const CkptState *s = &r.state;
    fprintf(out, "checkpoint %s\n", r.path);
    fprintf(out, "  format   magic 0x%08x version %d, %lld bytes, %d tensors\n", CKPT_MAGIC, CKPT_VERSION, (long long)r.file_bytes, r.n);
    fprintf(out, "  step     %lld\n", (long long)s->step);
    fprintf(out, "  loader   epoch %lld cursor %lld\n", (long long)s->loader_epoch, (long long)s->loader_cursor);
    if (s->has_rng) fprintf(out, "  rng      %016llx\n", (unsigned long long)s->rng_state);
    else fprintf(out, "  rng      none\n");
    fprintf(out, "  loss     scale %g, %d clean steps\n", s->loss_scale, s->clean_steps);
    fprintf(out, "  optim    %s, step %lld\n", s->optimizer == CKPT_OPT_ADAMW ? "adamw"
                 : s->optimizer == CKPT_OPT_ADAMW8BIT_ROWS ? "adamw8bit (whole-tensor blocks, v on its own map)"
                 : s->optimizer == CKPT_OPT_ADAMW8BIT_SQRT ? "adamw8bit (whole-tensor blocks, sqrt(v))" : s->optimizer == CKPT_OPT_NONE ? "none" : "?",
            (long long)s->optimizer_step);
    fprintf(out, "config\n");
    for (const char *p = r.config_text; *p;) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(out, "  %.*s\n", len, p);
        if (!nl) break;
        p = nl + 1;
    }
    fprintf(out, "tensors\n  %-56s %-5s %-14s %12s %-8s %s\n", "name", "dtype", "shape", "bytes", "crc32", allow_nonfinite ? "check  nonfinite" : "check");
    for (int i = 0; i < r.n; i++) {
        const CkptEntry *e = &r.entries[i];
        char shape[CKPT_MAX_DIMS * 21], count[32] = "";
        ckpt_shape_text(e->shape, e->ndim, shape, sizeof shape);
        if (allow_nonfinite) snprintf(count, sizeof count, "%s%lld", ok[i] ? "       " : "  ", (long long)bad[i]);
        fprintf(out, "  %-56s %-5s %-14s %12lld %08x %s%s\n", e->name, ckpt_dtype_name(e->dtype), shape, (long long)e->bytes, e->crc,
                ok[i] ? "ok" : "MISMATCH", count);
    }
    if (total) fprintf(out, "nonfinite %lld values (NaN or inf): no loader takes this checkpoint\n", (long long)total);
    /* the table against the config, as every loader checks it */
    ModelConfig mc;
    char why[256];
    int consistent = checkpoint_model_config(r.config_text, &mc, why, sizeof why) == 0 ? checkpoint_check_tensors(&r, &mc, err, sizeof err) == 0
                                                                                   : (snprintf(err, sizeof err, "'%.1000s': %s", state, why), 0);
    if (!consistent) fprintf(stderr, "error: %s\n", err);
    ckpt_close(&r);
    free(bad); free(first); free(ok);
    if (mismatched) fprintf(stderr, "error: %d tensor(s) of '%s' fail their checksum\n", mismatched, state);
    return mismatched || !consistent ? 1 : 0;
}
