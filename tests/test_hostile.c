/* tests/test_hostile.c — the classes issue 30's hostile-input pass found past the
 * readers' own checks, one regression test each: a shard truncated under a running
 * job (SIGBUS), JSON that readers disagree on (a key given twice, a string holding
 * \u0000), and checkpoints whose config text and tensor table contradict each other
 * (what export would have written). The run-state ranges are in test_readers.c, the
 * command-line classes (FIFOs, outputs, numbers, adam_eps) in test_cli.c. Each case
 * ends in one line naming the file and what is wrong; never a signal. */
#define _XOPEN_SOURCE 700
#include "test.h"
#include "../checkpoint/checkpoint.h"
#include "../checkpoint/format.h"
#include "../checkpoint/hf.h"
#include "../checkpoint/json.h"
#include "../common/util.h"
#include "../data/loader.h"
#include "../data/shard.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/llm3d_test_hostile_XXXXXX", err[4096], out[1 << 16];

#include "scratch.h"

static const char *CONFIG = "vocab_size=8\ndim=4\nn_layers=1\nn_heads=2\nn_kv_heads=1\nffn_dim=4\nseq_len=4\ntie_embeddings=0\n"
                            "rope_theta=10000\nnorm_eps=1e-05\nseed=7\n";

/* A shard truncated while a run reads it (issue 30): the mapped pages past the new end raise
 * SIGBUS; the run must end with a line naming the shard and exit 1, not die of the signal. */
static void test_shard_truncated_under_run(void) {
    enum { N = 1 << 19 };   /* 1 MiB of tokens: many pages past the cut */
    uint32_t *tok = mallocCheck(N * sizeof(uint32_t));
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)(i % 50);
    const char *path = path_of("shrinks.bin");
    shard_write(path, tok, N, 50);
    free(tok);
    int pipefd[2];
    CHECK(pipe(pipefd) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        Loader l;
        int ids[1024], targets[1024];
        if (loader_try_open(&l, path, 2, 256, 0, 1, 1, 0, 0, err, sizeof err) != 0) _exit(3);
        if (loader_try_next(&l, ids, targets, err, sizeof err) != 0) _exit(4);   /* the run is under way */
        if (truncate(path, 1024 + 4096) != 0) _exit(5);                          /* someone cuts the shard */
        for (int i = 0; i < 1000; i++) loader_try_next(&l, ids, targets, err, sizeof err);
        _exit(6);   /* never: reading past the cut must end the process */
    }
    close(pipefd[1]);
    char msg[2048] = "";
    size_t got = 0;
    for (ssize_t n; got < sizeof msg - 1 && (n = read(pipefd[0], msg + got, sizeof msg - 1 - got)) != 0;)
        if (n > 0) got += (size_t)n;
        else if (errno != EINTR) break;   /* the whole message, however the child's writes arrive: one read may take part of it */
    msg[got] = 0;
    close(pipefd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(msg, "shrinks.bin") && strstr(msg, "changed while this run was reading it"),
          "a shard truncated under a run: exit 1 naming it, not SIGBUS (status %d, signal %d): %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
          WIFSIGNALED(st) ? WTERMSIG(st) : 0, msg);
}

/* issue 30, 7: JSON that readers disagree on is refused: a key given twice (Python's json takes the
 * last, a first-match lookup the first), a dtype with a NUL inside (it compared as "F32"). */
static void test_json_agreement(void) {
    const char *hf = path_of("hf");
    mkdir(hf, 0755);
    const char *cj = "{\"hidden_size\": 4, \"intermediate_size\": 4, \"num_attention_heads\": 2, \"num_key_value_heads\": 1, "
                     "\"num_hidden_layers\": 1, \"vocab_size\": 8, \"num_hidden_layers\": 2}";
    write_file(path_of("hf/config.json"), cj, strlen(cj));
    ModelConfig mc;
    REFUSED(hf_read_config(hf, &mc, err, sizeof err), "\"num_hidden_layers\" is given twice", "config.json with a key twice");
    CHECK(strstr(err, "config.json") != NULL, "names the file: %s", err);
    Json j;   /* the same key spelled two ways is the same key */
    const char *esc = "{\"ab\": 1, \"a\\u0062\": 2}";
    REFUSED(json_parse(&j, esc, strlen(esc), err, sizeof err), "given twice", "a key repeated through an escape");
    const char *nul = "{\"a\\u0000x\": 1, \"a\\u0000y\": 2, \"a\": 3}";   /* keys differing after a NUL are different keys */
    CHECK(json_parse(&j, nul, strlen(nul), err, sizeof err) == 0, "keys differing only after a NUL are distinct: %s", err);
    char s[16];
    CHECK(json_string(&j, j.nodes[0].first, s, sizeof s) == -2, "a string holding a NUL is not handed out as a C string");
    json_free(&j);   /* the safetensors cases (a tensor named twice, dtype "F32\u0000junk") are in test_readers.c */
}

/* issue 30, 6: a checkpoint whose config text and tensor table contradict each other is
 * refused before export writes anything (n_layers=1e1 with 2 layers stored, a key given twice,
 * a table entry renamed onto another or out of the model). */
static int open_and_check(const char *ckpt) {
    char state[1200];
    snprintf(state, sizeof state, "%s/state.bin", ckpt);
    CkptReader r;
    if (ckpt_open(&r, state, err, sizeof err) != 0) return -1;
    ModelConfig mc;
    int rc = checkpoint_model_config(r.config_text, &mc, err, sizeof err) != 0 || checkpoint_check_tensors(&r, &mc, err, sizeof err) != 0;
    ckpt_close(&r);
    return rc ? -1 : 0;
}

/* Renames table entry i of ckpt's state.bin to name, the table and header CRCs recomputed. */
static void rename_entry(const char *ckpt, int i, const char *name) {
    char state[1200];
    snprintf(state, sizeof state, "%s/state.bin", ckpt);
    size_t n;
    uint8_t *b = read_file(state, &n);
    int32_t *h = (int32_t *)b;
    int64_t table = (int64_t)((uint64_t)(uint32_t)h[CKPT_H_TABLE_OFFSET] | (uint64_t)(uint32_t)h[CKPT_H_TABLE_OFFSET + 1] << 32);
    CkptEntry *e = (CkptEntry *)(b + table);
    memset(e[i].name, 0, sizeof e[i].name);
    snprintf(e[i].name, sizeof e[i].name, "%s", name);
    h[CKPT_H_TABLE_CRC] = (int32_t)ckpt_crc32(0, e, (size_t)h[CKPT_H_N_TENSORS] * sizeof *e);
    h[CKPT_H_CRC] = (int32_t)ckpt_crc32(0, h, 4 * (CKPT_HEADER_INTS - 1));
    write_file(state, b, n);
    free(b);
}

static void test_export_consistency(void) {
    char ckpt[1300], cmd[1200], args[3000], text[1024];
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(cmd, sizeof cmd, "timeout 20 %s/train", build);
    scratch_save_checkpoint(path_of("xrun"), CONFIG, CONFIG, ckpt, sizeof ckpt);
    CHECK(open_and_check(ckpt) == 0, "a consistent checkpoint passes the config-table check: %s", err);

    snprintf(text, sizeof text, "%s", CONFIG);   /* n_layers=1e1: ten layers said, one stored */
    char *at = strstr(text, "n_layers=1");
    memmove(at + 12, at + 10, strlen(at + 10) + 1), memcpy(at, "n_layers=1e1", 12);
    scratch_save_checkpoint(path_of("xrun_layers"), CONFIG, text, ckpt, sizeof ckpt);
    REFUSED(open_and_check(ckpt), "disagree", "n_layers=1e1 with 1 layer stored");
    CHECK(strstr(err, "model.layers.1.") != NULL, "names the first missing weight: %s", err);
    snprintf(args, sizeof args, "export --checkpoint=%s --out=%s", ckpt, path_of("xout"));
    int rc = test_run(cmd, args, out, sizeof out);
    CHECK(rc == 1 && strstr(out, "export:") && strstr(out, "disagree") && access(path_of("xout"), F_OK) != 0,
          "export refuses it and writes nothing (rc %d): %s", rc, out);

    snprintf(text, sizeof text, "%sdim=8\n", CONFIG);   /* dim given twice: the first used to win */
    scratch_save_checkpoint(path_of("xrun_dup"), CONFIG, text, ckpt, sizeof ckpt);
    REFUSED(open_and_check(ckpt), "gives 'dim' twice", "a config key given twice");

    scratch_save_checkpoint(path_of("xrun_twice"), CONFIG, CONFIG, ckpt, sizeof ckpt);
    char state[1400];
    snprintf(state, sizeof state, "%s/state.bin", ckpt);
    CkptReader r;
    CHECK(ckpt_open(&r, state, err, sizeof err) == 0 && r.n >= 2, "reopen: %s", err);
    char first[CKPT_NAME_BYTES];
    snprintf(first, sizeof first, "%s", r.entries[0].name);
    ckpt_close(&r);
    rename_entry(ckpt, 1, first);   /* two entries of one name: export wrote both into the safetensors header */
    REFUSED(open_and_check(ckpt), "holds '", "a table entry renamed onto another");
    CHECK(strstr(err, "twice") && strstr(err, first), "names the tensor: %s", err);
    rename_entry(ckpt, 1, "model.layers.7.mlp.up_proj.weight");
    REFUSED(open_and_check(ckpt), "has no place for", "a table entry renamed out of the model");
}


int main(void) {
    if (!mkdtemp(dir)) die("cannot make a temporary folder");
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_shard_truncated_under_run();
    test_json_agreement();
    test_export_consistency();
    scratch_remove(dir);
    return test_summary();
}
