/* checkpoint/hf_tokenizer.c — tokenizer.bin and Hugging Face's tokenizer.json
 * beside an exported model (see hf_tokenizer.h). */
#include "hf_tokenizer.h"
#include "checkpoint.h"
#include "../data/tokenizer.h"
#include "../common/util.h"
#include <glob.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int file_exists(const char *path) { struct stat st; return stat(path, &st) == 0 && S_ISREG(st.st_mode); }

int hf_find_tokenizer(const char *config_text, char *out, size_t size) {
    char value[1024] = "";
    if (checkpoint_config_value(config_text, "tokenizer", value, sizeof value) == 0 && value[0]) {
        snprintf(out, size, "%s", value);
        return file_exists(out) ? 0 : -1;
    }
    snprintf(out, size, "tokenizer.bin beside the train shards");
    if (checkpoint_config_value(config_text, "train_data", value, sizeof value) != 0 || !value[0]) return -1;
    char *comma = strchr(value, ',');
    if (comma) *comma = 0;
    glob_t g;
    if (glob(value, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
        snprintf(out, size, "tokenizer.bin beside '%s'", value);
        globfree(&g);
        return -1;
    }
    char shard[1024];
    snprintf(shard, sizeof shard, "%s", g.gl_pathv[0]);
    globfree(&g);
    snprintf(out, size, "%s/tokenizer.bin", dirname(shard));
    return file_exists(out) ? 0 : -1;
}

/* GPT-2's byte-to-unicode alphabet: printable bytes stand for themselves, the
 * other 68 become U+0100.. in byte order; written as UTF-8 (escaped for JSON). */
static void put_byte_char(FILE *f, uint8_t b) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    unsigned cp = b;
    if (!printable) {
        cp = 256;
        for (int c = 0; c < b; c++) cp += !((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || c >= 0xae);
    }
    if (cp == '"' || cp == '\\') fprintf(f, "\\%c", (char)cp);
    else if (cp < 0x80) fputc((int)cp, f);
    else fputc(0xc0 | (cp >> 6), f), fputc(0x80 | (cp & 0x3f), f);   /* every cp here is below 0x800 */
}

static void put_token(FILE *f, const Tokenizer *t, uint32_t id) {
    size_t len;
    const uint8_t *s = tokenizer_token(t, id, &len);
    for (size_t i = 0; i < len; i++) put_byte_char(f, s[i]);
}

static const Tokenizer *sort_tok;
static int by_bytes(const void *a, const void *b) {
    size_t la, lb;
    const uint8_t *sa = tokenizer_token(sort_tok, *(const uint32_t *)a, &la), *sb = tokenizer_token(sort_tok, *(const uint32_t *)b, &lb);
    int c = memcmp(sa, sb, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}
static uint32_t (*sort_merges)[3];
static int by_rank(const void *a, const void *b) {   /* then by stored order: the real merge before its aliases */
    int ia = *(const int *)a, ib = *(const int *)b;
    uint32_t ra = sort_merges[ia][2], rb = sort_merges[ib][2];
    return ra != rb ? (ra > rb) - (ra < rb) : (ia > ib) - (ia < ib);
}

/* Two ids with the same bytes cannot be told apart in tokenizer.json's vocab: -1 naming them. */
static int unique_tokens(const Tokenizer *t, uint32_t *dup_a, uint32_t *dup_b) {
    int V = tokenizer_vocab_size(t);
    uint32_t *ids = mallocCheck((size_t)V * sizeof *ids);
    for (int i = 0; i < V; i++) ids[i] = (uint32_t)i;
    sort_tok = t;
    qsort(ids, (size_t)V, sizeof *ids, by_bytes);
    int ok = 0;
    for (int i = 1; i < V && !ok; i++)
        if (by_bytes(&ids[i - 1], &ids[i]) == 0) *dup_a = ids[i - 1], *dup_b = ids[i], ok = -1;
    free(ids);
    return ok;
}

static void write_tokenizer_json(const Tokenizer *t, const char *out_dir) {
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/tokenizer.json", out_dir);
    FILE *f = atomic_open(path, tmp, sizeof tmp);
    int V = tokenizer_vocab_size(t), eot = tokenizer_eot(t), M = tokenizer_n_merges(t);
    fprintf(f, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [\n"
               "    {\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
               "\"normalized\": false, \"special\": true}\n  ],\n", eot, TOKENIZER_EOT_TEXT);
    fprintf(f, "  \"normalizer\": null,\n"
               "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n"
               "  \"post_processor\": null,\n"
               "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n"
               "  \"model\": {\n    \"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": \"\",\n"
               "    \"end_of_word_suffix\": \"\", \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n"
               "    \"vocab\": {");
    for (int i = 0; i < V; i++) {
        fprintf(f, "%s\n      \"", i ? "," : "");
        put_token(f, t, (uint32_t)i);
        fprintf(f, "\": %d", i);
    }
    fprintf(f, "\n    },\n    \"merges\": [");
    sort_merges = mallocCheck((size_t)(M ? M : 1) * sizeof *sort_merges);
    int *order = mallocCheck((size_t)(M ? M : 1) * sizeof *order);
    for (int i = 0; i < M; i++) {
        tokenizer_merge(t, i, &sort_merges[i][0], &sort_merges[i][1], &sort_merges[i][2]);
        order[i] = i;
    }
    qsort(order, (size_t)M, sizeof *order, by_rank);
    /* One merge per rank. GPT-2's loader adds, at the same rank, the pairs the
     * JavaScript encoder confuses with a real one because it keys ranks by the
     * string "left,right" (data/tokenizer.c); tokenizer.json keeps GPT-2's real
     * merges only, as Python's encoder and Hugging Face's gpt2 have them. */
    for (int i = 0, written = 0; i < M; i++) {
        if (i && sort_merges[order[i]][2] == sort_merges[order[i - 1]][2]) continue;
        fprintf(f, "%s\n      \"", written++ ? "," : "");
        put_token(f, t, sort_merges[order[i]][0]);
        fputc(' ', f);
        put_token(f, t, sort_merges[order[i]][1]);
        fputc('"', f);
    }
    fprintf(f, "\n    ]\n  }\n}\n");
    free(order), free(sort_merges);
    atomic_commit(f, tmp, path);
}

static void write_small_json(const char *out_dir, const char *name, const char *text) {
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    FILE *f = atomic_open(path, tmp, sizeof tmp);
    fputs(text, f);
    atomic_commit(f, tmp, path);
}

void hf_export_tokenizer(const char *path, const char *out_dir, int max_length) {
    Tokenizer *t = tokenizer_load(path);
    char copy[1200], text[512];
    snprintf(copy, sizeof copy, "%s/tokenizer.bin", out_dir);
    tokenizer_save(t, copy);
    uint32_t a, b;
    if (unique_tokens(t, &a, &b) != 0) {
        fprintf(stderr, "warning: the vocabulary '%s' has two tokens with the same bytes (ids %u and %u), which "
                "tokenizer.json cannot hold; wrote only %s\n", path, a, b, copy);
        tokenizer_free(t);
        return;
    }
    write_tokenizer_json(t, out_dir);
    snprintf(text, sizeof text, "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n  \"bos_token\": \"%s\",\n"
             "  \"eos_token\": \"%s\",\n  \"model_max_length\": %d,\n  \"clean_up_tokenization_spaces\": false\n}\n",
             TOKENIZER_EOT_TEXT, TOKENIZER_EOT_TEXT, max_length);
    write_small_json(out_dir, "tokenizer_config.json", text);
    snprintf(text, sizeof text, "{\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d\n}\n", tokenizer_eot(t), tokenizer_eot(t));
    write_small_json(out_dir, "generation_config.json", text);
    int n = (int)strlen(out_dir);
    while (n > 1 && out_dir[n - 1] == '/') n--;   /* --out=hf/ reads hf/{...}, not hf//{...} */
    printf("export | vocabulary %s (%d tokens, end-of-text id %d) -> %.*s/{tokenizer.bin,tokenizer.json,tokenizer_config.json,"
           "generation_config.json}\n", path, tokenizer_vocab_size(t), tokenizer_eot(t), n, out_dir);
    tokenizer_free(t);
}
