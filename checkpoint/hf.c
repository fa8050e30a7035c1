/* checkpoint/hf.c — safetensors and config.json: export from a checkpoint, strict import. */
#define _POSIX_C_SOURCE 200809L
#include "hf.h"
#include "checkpoint.h"
#include "format.h"
#include "json.h"
#include "../common/util.h"
#include "../common/options.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAIL(...) do { snprintf(err, err_size, __VA_ARGS__); goto fail; } while (0)

/* the shortest decimal that reads back as the same float */
static const char *float_text(float x, char *buf, size_t size) {
    if (x == floorf(x) && fabsf(x) < 1e15f) { snprintf(buf, size, "%.1f", (double)x); return buf; }
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, size, "%.*g", digits, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return buf;
}

/* appends to a header being built: buf holds *len bytes of cap; the sizes are planned so it never fills */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= cap - *len) die("export: the safetensors header outgrew its %zu bytes (a bug: please report it)", cap);
    *len += (size_t)k;
}

static const char *st_dtype_name(int dtype) { return dtype == CKPT_F32 ? "F32" : dtype == CKPT_BF16 ? "BF16" : "F16"; }
static int st_dtype(const char *s) {
    return !strcmp(s, "F32") ? CKPT_F32 : !strcmp(s, "BF16") ? CKPT_BF16 : !strcmp(s, "F16") ? CKPT_F16 : -1;
}
/* bytes per element of every safetensors dtype, for bounds checks of tensors we do not load (0: unknown) */
static int st_any_size(const char *s) {
    static const struct { const char *name; int size; } table[] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F16", 2}, {"BF16", 2}, {"I16", 2}, {"U16", 2},
        {"F32", 4}, {"I32", 4}, {"U32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8}};
    for (size_t k = 0; k < sizeof table / sizeof table[0]; k++)
        if (!strcmp(s, table[k].name)) return table[k].size;
    return 0;
}

/* ------------------------------------------------------------------- export */

static void write_config_json(const char *out_dir, const ModelConfig *mc, int dtype, const char *init_std) {
    char path[1200], tmp[1300], eps[32], theta[32];
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    FILE *f = atomic_open(path, tmp, sizeof tmp);
    fprintf(f, "{\n"
               "  \"architectures\": [\"LlamaForCausalLM\"],\n"
               "  \"model_type\": \"llama\",\n"
               "  \"hidden_size\": %d,\n"
               "  \"intermediate_size\": %d,\n"
               "  \"num_attention_heads\": %d,\n"
               "  \"num_key_value_heads\": %d,\n"
               "  \"num_hidden_layers\": %d,\n"
               "  \"head_dim\": %d,\n"
               "  \"vocab_size\": %d,\n"
               "  \"max_position_embeddings\": %d,\n"
               "  \"rms_norm_eps\": %s,\n"
               "  \"rope_theta\": %s,\n"
               "  \"rope_scaling\": null,\n"
               "  \"tie_word_embeddings\": %s,\n"
               "  \"hidden_act\": \"silu\",\n"
               "  \"attention_bias\": false,\n"
               "  \"attention_dropout\": 0.0,\n"
               "  \"mlp_bias\": false,\n"
               "  \"initializer_range\": %s,\n"
               "  \"use_cache\": true,\n"
               "  \"torch_dtype\": \"%s\"\n"
               "}\n",
            mc->dim, mc->ffn_dim, mc->n_heads, mc->n_kv_heads, mc->n_layers, mc->dim / mc->n_heads, mc->vocab_size, mc->seq_len,
            float_text(mc->norm_eps, eps, sizeof eps), float_text(mc->rope_theta, theta, sizeof theta),
            mc->tie_embeddings ? "true" : "false", init_std, dtype == CKPT_F32 ? "float32" : dtype == CKPT_BF16 ? "bfloat16" : "float16");
    atomic_commit(f, tmp, path);
}

void hf_export(const char *checkpoint, const char *out_dir, int dtype) {
    char state[1200], err[2048];
    checkpoint_state_path(checkpoint, state, sizeof state);
    CkptReader r;
    ModelConfig mc;
    if (checkpoint_open_model(&r, state, &mc, err, sizeof err) != 0) die("export: %s", err);   /* before anything is written */
    /* initializer_range: the run's init_std read as a number and written by float_text, never copied as text */
    char init_text[64] = "0.02", init_std[64], why[256];
    double std_value = 0.02;
    checkpoint_config_value(r.config_text, "init_std", init_text, sizeof init_text);
    if (option_number("init_std", init_text, 0, 1e30, 0, &std_value, why, sizeof why) != 0) std_value = 0.02;
    float_text((float)std_value, init_std, sizeof init_std);

    /* the weights are the tensors without a "<prefix>/" */
    int n = 0;
    const CkptEntry **w = mallocCheck((size_t)r.n * sizeof *w);
    for (int i = 0; i < r.n; i++)
        if (!strchr(r.entries[i].name, '/')) {
            if (r.entries[i].dtype != CKPT_F32) die("'%s': weight '%s' is %s, expected f32", state, r.entries[i].name, ckpt_dtype_name(r.entries[i].dtype));
            w[n++] = &r.entries[i];
        }
    if (!n) die("'%s' holds no weights to export", state);
    /* every weight read (CRC and NaN/inf checked) before anything is written: a refused export leaves no file */
    float **values = mallocCheck((size_t)n * sizeof *values);
    for (int i = 0; i < n; i++) {
        int64_t rows, cols;
        ckpt_entry_dims(w[i], &rows, &cols);
        values[i] = mallocCheck((size_t)(rows * cols) * 4 + 1);
        if (ckpt_read_f32(&r, w[i], 0, rows, 0, cols, values[i], err, sizeof err) != 0) die("export: %s", err);
        for (int64_t k = 0; dtype == CKPT_F16 && k < rows * cols; k++)   /* past fp16's range it would be written as inf */
            if ((ckpt_f32_to_f16(values[i][k]) & 0x7c00) == 0x7c00)
                die("export: '%s': weight '%s' holds %g at element %lld, past fp16's largest value 65504: as f16 it would be inf\n"
                    "  hint: export with --dtype=bf16 or --dtype=f32", state, w[i]->name, (double)values[i][k], (long long)k);
    }
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) die("cannot create export folder '%s': %s", out_dir, strerror(errno));

    /* header: JSON, padded with spaces to a multiple of 8 bytes */
    /* per tensor at most: a 127-byte name escaped to 6 bytes each, 4 dims and 2 offsets of 20 digits, 60 of syntax */
    size_t es = ckpt_dtype_size(dtype), cap = 256 + (size_t)n * (6 * CKPT_NAME_BYTES + 6 * 21 + 64), len = 0;
    char *json = mallocCheck(cap);
    put(json, cap, &len, "{\"__metadata__\":{\"format\":\"pt\"}");
    int64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const CkptEntry *e = w[i];
        int64_t count = e->bytes / 4;
        put(json, cap, &len, ",\"");
        for (const unsigned char *c = (const unsigned char *)e->name; *c; c++)   /* a name is bytes: escape what JSON must */
            put(json, cap, &len, *c == '"' || *c == '\\' ? "\\%c" : *c < 0x20 ? "\\u%04x" : "%c", *c);
        put(json, cap, &len, "\":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(dtype));
        for (int d = 0; d < e->ndim; d++) put(json, cap, &len, d ? ",%lld" : "%lld", (long long)e->shape[d]);
        put(json, cap, &len, "],\"data_offsets\":[%lld,%lld]}", (long long)offset, (long long)(offset + count * (int64_t)es));
        offset += count * (int64_t)es;
    }
    put(json, cap, &len, "}");
    while (len % 8) json[len++] = ' ';

    CkptWriter sw;
    memset(&sw, 0, sizeof sw);
    char *path = sw.path;
    snprintf(path, sizeof sw.path, "%s/model.safetensors", out_dir);
    sw.hooks = (CkptWriteHooks){-1, -1};
    sw.f = atomic_open(path, sw.tmp, sizeof sw.tmp);
    uint64_t header_len = len;
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(header_len >> (8 * i));
    ckpt_write_bytes(&sw, le, 8);
    ckpt_write_bytes(&sw, json, len);
    for (int i = 0; i < n; i++) {
        const CkptEntry *e = w[i];
        int64_t rows, cols;
        ckpt_entry_dims(e, &rows, &cols);
        size_t count = (size_t)(rows * cols);
        float *x = values[i];
        if (dtype != CKPT_F32) {
            uint16_t *h = (uint16_t *)x;    /* narrowing in place: element i is read before it is overwritten */
            for (size_t k = 0; k < count; k++) h[k] = dtype == CKPT_BF16 ? ckpt_f32_to_bf16(x[k]) : ckpt_f32_to_f16(x[k]);
        }
        ckpt_write_bytes(&sw, x, count * es);
        free(x);
    }
    atomic_commit(sw.f, sw.tmp, path);
    write_config_json(out_dir, &mc, dtype, init_std);
    int shown = (int)strlen(out_dir);
    while (shown > 1 && out_dir[shown - 1] == '/') shown--;   /* --out=hf/ reads hf/{...}, not hf//{...} */
    printf("export | %d tensors (%s) from %s -> %.*s/{model.safetensors,config.json}\n", n, st_dtype_name(dtype), state, shown, out_dir);
    free(json);
    free(w);
    free(values);
    ckpt_close(&r);
}

/* ------------------------------------------------------------------- reading */

int hf_read_config(const char *dir, ModelConfig *mc, char *err, size_t err_size) {
    char path[1200], perr[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t size;
    char *text = read_regular(path, "config file", (size_t)16 << 20, &size, err, err_size);
    if (!text) return -1;
    Json j;
    if (json_parse(&j, text, size, perr, sizeof perr) != 0) { snprintf(err, err_size, "'%s': %s", path, perr); free(text); return -1; }
    memset(mc, 0, sizeof *mc);
    int64_t v;
    char s[64];
    int node;
#define REQ_INT(key, field) \
    if (json_int64(&j, json_get(&j, 0, key), 1, 1 << 30, &v) != 0) FAIL("'%s': \"%s\" is missing or not a positive integer", path, key); \
    mc->field = (int)v;
    REQ_INT("hidden_size", dim);
    REQ_INT("intermediate_size", ffn_dim);
    REQ_INT("num_attention_heads", n_heads);
    REQ_INT("num_hidden_layers", n_layers);
    REQ_INT("vocab_size", vocab_size);
#undef REQ_INT
    mc->n_kv_heads = mc->n_heads;
    if ((node = json_get(&j, 0, "num_key_value_heads")) >= 0 && j.nodes[node].type != JSON_NULL) {
        if (json_int64(&j, node, 1, 1 << 30, &v) != 0) FAIL("'%s': \"num_key_value_heads\" is not a positive integer", path);
        mc->n_kv_heads = (int)v;
    }
    mc->seq_len = 2048;
    if ((node = json_get(&j, 0, "max_position_embeddings")) >= 0) {
        if (json_int64(&j, node, 1, 1 << 30, &v) != 0) FAIL("'%s': \"max_position_embeddings\" is not a positive integer", path);
        mc->seq_len = (int)v;
    }
    mc->norm_eps = 1e-6f;   /* LlamaConfig's defaults */
    mc->rope_theta = 10000.0f;
    if ((node = json_get(&j, 0, "rms_norm_eps")) >= 0) {
        if (j.nodes[node].type != JSON_NUMBER || !(j.nodes[node].number >= 1e-12 && j.nodes[node].number <= 1))
            FAIL("'%s': \"rms_norm_eps\" is not a number in [1e-12, 1]", path);
        mc->norm_eps = (float)j.nodes[node].number;
    }
    if ((node = json_get(&j, 0, "rope_theta")) >= 0) {
        if (j.nodes[node].type != JSON_NUMBER || !(j.nodes[node].number >= 1 && j.nodes[node].number <= 1e12))
            FAIL("'%s': \"rope_theta\" is not a number in [1, 1e12]", path);
        mc->rope_theta = (float)j.nodes[node].number;
    }
    if ((node = json_get(&j, 0, "tie_word_embeddings")) >= 0) {
        if (j.nodes[node].type != JSON_TRUE && j.nodes[node].type != JSON_FALSE) FAIL("'%s': \"tie_word_embeddings\" is not true or false", path);
        mc->tie_embeddings = j.nodes[node].type == JSON_TRUE;
    }
    if ((node = json_get(&j, 0, "model_type")) >= 0 && (json_string(&j, node, s, sizeof s) != 0 || strcmp(s, "llama")))
        FAIL("'%s': \"model_type\" is not \"llama\"; llm3d reads LLaMA models only", path);
    if ((node = json_get(&j, 0, "hidden_act")) >= 0 && (json_string(&j, node, s, sizeof s) != 0 || strcmp(s, "silu")))
        FAIL("'%s': \"hidden_act\" is not \"silu\"; llm3d's MLP is SwiGLU", path);
    /* rope_scaling (and transformers 5's rope_parameters) may only say "default", and may carry rope_theta */
    const char *rope_keys[] = {"rope_scaling", "rope_parameters"};
    for (int i = 0; i < 2; i++) {
        if ((node = json_get(&j, 0, rope_keys[i])) < 0 || j.nodes[node].type == JSON_NULL) continue;
        int type = json_get(&j, node, "rope_type");
        if (type < 0) type = json_get(&j, node, "type");
        if (j.nodes[node].type != JSON_OBJECT || (type >= 0 && (json_string(&j, type, s, sizeof s) != 0 || strcmp(s, "default"))))
            FAIL("'%s': \"%s\" asks for scaled RoPE; llm3d has plain RoPE only", path, rope_keys[i]);
        int theta = json_get(&j, node, "rope_theta");
        if (theta >= 0) {
            if (j.nodes[theta].type != JSON_NUMBER || !(j.nodes[theta].number >= 1 && j.nodes[theta].number <= 1e12))
                FAIL("'%s': %s.rope_theta is not a number in [1, 1e12]", path, rope_keys[i]);
            mc->rope_theta = (float)j.nodes[theta].number;
        }
    }
    const char *no_bias[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++)
        if ((node = json_get(&j, 0, no_bias[i])) >= 0 && j.nodes[node].type == JSON_TRUE)
            FAIL("'%s': \"%s\" is true; llm3d's linear layers have no bias", path, no_bias[i]);
    if (mc->dim % mc->n_heads || mc->n_heads % mc->n_kv_heads)
        FAIL("'%s': hidden_size %d, num_attention_heads %d, num_key_value_heads %d do not divide evenly", path, mc->dim, mc->n_heads, mc->n_kv_heads);
    if ((node = json_get(&j, 0, "head_dim")) >= 0 && j.nodes[node].type != JSON_NULL &&
        (json_int64(&j, node, 1, 1 << 30, &v) != 0 || v != mc->dim / mc->n_heads))
        FAIL("'%s': \"head_dim\" differs from hidden_size / num_attention_heads = %d; llm3d needs them equal", path, mc->dim / mc->n_heads);
    char why[256];
    if (model_config_check(mc, why, sizeof why) != 0) FAIL("'%s' describes a model llm3d cannot build: %s", path, why);
    json_free(&j);
    free(text);
    return 0;
fail:
    json_free(&j);
    free(text);
    return -1;
}

int hf_check_config(const char *dir, const ModelConfig *run, char *err, size_t err_size) {
    ModelConfig h;
    if (hf_read_config(dir, &h, err, err_size) != 0) return -1;
    struct { const char *hf, *ours; double a, b; } k[] = {
        {"vocab_size", "vocab_size", h.vocab_size, run->vocab_size}, {"hidden_size", "dim", h.dim, run->dim},
        {"num_hidden_layers", "n_layers", h.n_layers, run->n_layers}, {"num_attention_heads", "n_heads", h.n_heads, run->n_heads},
        {"num_key_value_heads", "n_kv_heads", h.n_kv_heads, run->n_kv_heads}, {"intermediate_size", "ffn_dim", h.ffn_dim, run->ffn_dim},
        {"tie_word_embeddings", "tie_embeddings", h.tie_embeddings, run->tie_embeddings},
        {"rope_theta", "rope_theta", h.rope_theta, run->rope_theta}, {"rms_norm_eps", "norm_eps", h.norm_eps, run->norm_eps}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].a != k[i].b) {
            snprintf(err, err_size, "'%s/config.json' has %s=%g but this run has %s=%g\n  hint: set --%s=%g to load these weights",
                     dir, k[i].hf, k[i].a, k[i].ours, k[i].b, k[i].ours, k[i].a);
            return -1;
        }
    return 0;
}

typedef struct {
    char path[1200];
    FILE *f;
    char *header;
    Json j;
    int64_t data_start, file_bytes;
} StFile;

static void st_close(StFile *s) {
    if (s->f) fclose(s->f);
    json_free(&s->j);
    free(s->header);
    s->f = NULL; s->header = NULL;
}

/* A JSON shape array as "a<sep>b<sep>c" into buf, bounded (ckpt_shape_text). */
static const char *st_shape_text(const Json *j, int node, const char *sep, char *buf, size_t size) {
    size_t o = 0;
    buf[0] = 0;
    for (int c = j->nodes[node].first; c >= 0; c = j->nodes[c].next) {
        int64_t d = -1;
        json_int64(j, c, 0, INT64_MAX / 2, &d);
        int k = snprintf(buf + o, size - o, "%s%lld", o ? sep : "", (long long)d);
        if (k < 0 || (size_t)k >= size - o) { if (size >= 4) memcpy(buf + size - 4, "...", 4); break; }
        o += (size_t)k;
    }
    return buf;
}

typedef struct { int64_t begin, end; int name; } StSpan;   /* a tensor's data_offsets; name: its key node */

static int span_by_offset(const void *a, const void *b) {
    const StSpan *x = a, *y = b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1) : x->end != y->end ? (x->end < y->end ? -1 : 1) : 0;
}

static const Json *sort_json;   /* the header whose keys span_by_name compares (qsort has no context argument) */
static int span_by_name(const void *a, const void *b) {
    const JsonNode *x = &sort_json->nodes[((const StSpan *)a)->name], *y = &sort_json->nodes[((const StSpan *)b)->name];
    int c = memcmp(sort_json->text + x->start, sort_json->text + y->start, (size_t)(x->len < y->len ? x->len : y->len));
    return c ? c : x->len - y->len;
}

/* Opens a safetensors file and checks it as the reference implementation does:
 * header length at most 100,000,000 and inside the file, the header valid UTF-8
 * JSON, every tensor's dtype known, shape x dtype size without overflow equal to
 * its span, and the spans, sorted, tiling the data region exactly from its first
 * byte to the file's last (no gap, no overlap, no trailing byte). Tensor names
 * must be unique and under 256 bytes, __metadata__ a map of strings. */
static int st_open(StFile *s, const char *path, char *err, size_t err_size) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    char perr[512];
    StSpan *spans = NULL;
    int fd = open_regular(path, "safetensors file", &s->file_bytes, err, err_size);
    if (fd < 0) return -1;
    s->f = fdopen(fd, "rb");
    if (!s->f) { close(fd); FAIL("cannot open safetensors file '%s': %s", path, strerror(errno)); }
    uint8_t le[8];
    if (s->file_bytes < 8 || fread(le, 1, 8, s->f) != 8) FAIL("'%s' is %lld bytes, too short for a safetensors file", path, (long long)s->file_bytes);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)le[i] << (8 * i);
    if (n > 100000000u)
        FAIL("'%s': header length %llu is more than the 100000000 bytes safetensors allows (not safetensors?)", path, (unsigned long long)n);
    if (n < 2 || (int64_t)n > s->file_bytes - 8)
        FAIL("'%s': header length %llu does not fit the %lld-byte file (truncated, or not safetensors)", path, (unsigned long long)n, (long long)s->file_bytes);
    s->header = mallocCheck(n + 1);
    if (fread(s->header, 1, n, s->f) != n) FAIL("'%s': cannot read its %llu-byte header", path, (unsigned long long)n);
    s->header[n] = 0;
    s->data_start = 8 + (int64_t)n;
    if (utf8_invalid_bytes((const uint8_t *)s->header, n)) FAIL("'%s': the header is not valid UTF-8", path);
    if (json_parse(&s->j, s->header, n, perr, sizeof perr) != 0) FAIL("'%s': header is not valid JSON: %s", path, perr);
    Json *j = &s->j;
    if (j->nodes[0].type != JSON_OBJECT) FAIL("'%s': header is not a JSON object", path);
    if (n % 8)
        fprintf(stderr, "note: '%s': header length %llu is not a multiple of 8 (safetensors pads it so tensors are aligned); reading it anyway\n",
                path, (unsigned long long)n);
    spans = mallocCheck(((size_t)j->nodes[0].n_children / 2 + 1) * sizeof *spans);
    int n_spans = 0;
    for (int k = j->nodes[0].first; k >= 0; k = j->nodes[j->nodes[k].next].next) {
        char name[256], dt[32];
        int t = j->nodes[k].next;
        int named = json_string(j, k, name, sizeof name);
        if (named == -2) FAIL("'%s': a tensor name holds a NUL byte (\\u0000), which no tensor name has", path);
        if (named != 0) FAIL("'%s': a tensor name is longer than 255 bytes", path);
        if (!strcmp(name, "__metadata__")) {
            if (j->nodes[t].type != JSON_OBJECT) FAIL("'%s': __metadata__ is not a JSON object", path);
            for (int m = j->nodes[t].first; m >= 0; m = j->nodes[j->nodes[m].next].next)
                if (j->nodes[j->nodes[m].next].type != JSON_STRING) FAIL("'%s': a __metadata__ value is not a string", path);
            continue;
        }
        int dn = json_get(j, t, "dtype"), sn = json_get(j, t, "shape"), on = json_get(j, t, "data_offsets");
        if (dn >= 0 && json_string(j, dn, dt, sizeof dt) == -2)   /* "F32\u0000junk" read as F32 when compared as a C string */
            FAIL("'%s': tensor '%s' has a dtype holding a NUL byte (\\u0000): not a safetensors dtype", path, name);
        if (dn < 0 || sn < 0 || on < 0 || json_string(j, dn, dt, sizeof dt) != 0 || j->nodes[sn].type != JSON_ARRAY ||
            j->nodes[on].type != JSON_ARRAY || j->nodes[on].n_children != 2)
            FAIL("'%s': tensor '%s' lacks a proper dtype, shape or data_offsets", path, name);
        int es = st_any_size(dt);
        if (!es) FAIL("'%s': tensor '%s' has unknown dtype '%s'", path, name, dt);
        int64_t count = 1, d, b, e;
        for (int c = j->nodes[sn].first; c >= 0; c = j->nodes[c].next)
            if (json_int64(j, c, 0, INT64_MAX / 2, &d) != 0 || !mul_i64(count, d, &count))
                FAIL("'%s': tensor '%s' has a bad shape (not whole numbers >= 0, or too many elements to count)", path, name);
        if (!mul_i64(count, es, &count)) FAIL("'%s': tensor '%s' has a shape too large to count its bytes", path, name);
        int c0 = j->nodes[on].first;
        if (json_int64(j, c0, 0, INT64_MAX / 2, &b) != 0 || json_int64(j, j->nodes[c0].next, 0, INT64_MAX / 2, &e) != 0 || e < b)
            FAIL("'%s': tensor '%s' has bad data_offsets", path, name);
        if (e - b != count)
            FAIL("'%s': tensor '%s' spans %lld bytes but its shape and dtype need %lld", path, name, (long long)(e - b), (long long)count);
        spans[n_spans++] = (StSpan){b, e, k};
    }
    sort_json = j;
    qsort(spans, (size_t)n_spans, sizeof *spans, span_by_name);
    for (int i = 1; i < n_spans; i++)
        if (!span_by_name(&spans[i - 1], &spans[i])) {
            char name[256];
            json_string(j, spans[i].name, name, sizeof name);
            FAIL("'%s': tensor '%s' is named twice in the header", path, name);
        }
    qsort(spans, (size_t)n_spans, sizeof *spans, span_by_offset);
    int64_t at = 0;
    for (int i = 0; i < n_spans; i++) {
        if (spans[i].begin != at) {
            char name[256];
            json_string(j, spans[i].name, name, sizeof name);
            FAIL("'%s': tensor '%s' starts at data byte %lld, but the tensors before it end at %lld: the data has %s", path, name,
                 (long long)spans[i].begin, (long long)at, spans[i].begin > at ? "a gap" : "overlapping tensors");
        }
        at = spans[i].end;
    }
    if (at != s->file_bytes - s->data_start)
        FAIL("'%s': the tensors cover %lld data bytes but the file holds %lld after its %llu-byte header: the file is %s", path,
             (long long)at, (long long)(s->file_bytes - s->data_start), (unsigned long long)n,
             at > s->file_bytes - s->data_start ? "truncated" : "longer than its tensors (or the header length is wrong)");
    free(spans);
    return 0;
fail:
    free(spans);
    st_close(s);
    return -1;
}

/* config.json and the safetensors describe the same model, no more and no fewer tensors: every
 * tensor of the whole model mc (every pipeline stage's) is there with its shape, and every tensor
 * there is one of them (besides rotary_emb.inv_freq, a buffer older exports carry). A head stored
 * beside tie_word_embeddings=true, or layers past num_hidden_layers, are refused, not dropped. */
static int st_check_tensors(StFile *s, const ModelConfig *mc, char *err, size_t err_size) {
    Json *j = &s->j;
    Comm comm;
    comm_init_one(&comm);
    Model whole;
    model_plan(&whole, mc, backend_cpu(), &comm, NULL, 1, 1, RECOMPUTE_NONE);   /* the tensor table alone */
    int rc = 0;
    char name[256], got[96];
    for (int k = j->nodes[0].first; k >= 0 && !rc; k = j->nodes[j->nodes[k].next].next) {
        json_string(j, k, name, sizeof name);
        if (!strcmp(name, "__metadata__") || strstr(name, "rotary_emb.inv_freq")) continue;
        if (!model_find_tensor(&whole, name)) {
            snprintf(err, err_size, "'%s' holds the tensor '%s', which its config.json (num_hidden_layers=%d, tie_word_embeddings=%s) has no "
                     "place for: config.json and the safetensors disagree\n  hint: fix config.json or use a matching copy of the model",
                     s->path, name, mc->n_layers, mc->tie_embeddings ? "true" : "false");
            rc = -1;
        }
    }
    for (int i = 0; i < whole.n_tensors && !rc; i++) {
        const ParamTensor *t = &whole.tensors[i];
        int node = json_get(j, 0, t->name);
        if (node < 0) {
            snprintf(err, err_size, "'%s' has no tensor '%s', which its config.json (num_hidden_layers=%d, tie_word_embeddings=%s) needs: "
                     "config.json and the safetensors disagree\n  hint: fix config.json or use a matching copy of the model", s->path,
                     t->name, mc->n_layers, mc->tie_embeddings ? "true" : "false");
            rc = -1;
            break;
        }
        char dt[32];
        json_string(j, json_get(j, node, "dtype"), dt, sizeof dt);
        if (st_dtype(dt) < 0) {
            snprintf(err, err_size, "'%s': tensor '%s' is %s; llm3d loads F32, BF16 or F16", s->path, t->name, dt);
            rc = -1;
            break;
        }
        int sn = json_get(j, node, "shape"), nd = j->nodes[sn].n_children;
        int64_t shape[2] = {-1, -1};
        for (int c = j->nodes[sn].first, q = 0; c >= 0 && q < 2; c = j->nodes[c].next) json_int64(j, c, 0, INT64_MAX / 2, &shape[q++]);
        int ok = t->global_rows == 1 ? (nd == 1 && shape[0] == t->global_cols)
                                     : (nd == 2 && shape[0] == t->global_rows && shape[1] == t->global_cols);
        if (!ok) {
            char want[64];
            if (t->global_rows == 1) snprintf(want, sizeof want, "%d", t->global_cols);
            else snprintf(want, sizeof want, "%d, %d", t->global_rows, t->global_cols);
            snprintf(err, err_size, "'%s': tensor '%s' has shape [%s] but the model needs [%s]: config.json and the safetensors disagree",
                     s->path, t->name, st_shape_text(j, sn, ", ", got, sizeof got), want);
            rc = -1;
        }
    }
    model_plan_free(&whole);
    return rc;
}

int hf_read_weights(const char *dir, const Model *m, float *host, char *err, size_t err_size) {
    char path[1200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    StFile s;
    if (st_open(&s, path, err, err_size) != 0) return -1;
    Json *j = &s.j;
    if (st_check_tensors(&s, &m->cfg, err, err_size) != 0) goto fail;
    memset(host, 0, m->n_params * sizeof(float));   /* what lies in no tensor (vocabulary padding) is 0 */
    for (int i = 0; i < m->n_tensors; i++) {   /* this rank's slices; st_check_tensors has checked each name, dtype and shape */
        const ParamTensor *t = &m->tensors[i];
        int node = json_get(j, 0, t->name);
        if (node < 0) FAIL("'%s' has no tensor '%s'", path, t->name);
        char dt[32];
        json_string(j, json_get(j, node, "dtype"), dt, sizeof dt);
        int64_t b;
        json_int64(j, j->nodes[json_get(j, node, "data_offsets")].first, 0, INT64_MAX / 2, &b);
        if (ckpt_read_region(s.f, path, t->name, s.data_start + b, st_dtype(dt), t->global_rows, t->global_cols, t->row0, t->rows, t->col0,
                             t->cols, host + t->offset, NULL, err, err_size) != 0)
            goto fail;
    }
    st_close(&s);
    return 0;
fail:
    st_close(&s);
    return -1;
}

int hf_load_weights(const char *dir, Model *m, char *err, size_t err_size) {
    float *host = mallocCheck(m->n_params * sizeof(float));
    int rc = hf_read_weights(dir, m, host, err, err_size);
    if (rc == 0) model_set_params(m, host);
    free(host);
    return rc;
}

int hf_inspect(const char *path, FILE *out) { return hf_inspect_ex(path, 0, out); }

/* One tensor of the header: its dtype as llm3d's (float ones; CKPT_U8 for any other: no value checked),
 * its 2-D view (rows = all dims but the last multiplied) and its data span. */
static void st_tensor(const Json *j, int t, int *dtype, int64_t *rows, int64_t *cols, int64_t *begin, int64_t *end) {
    char dt[32];
    json_string(j, json_get(j, t, "dtype"), dt, sizeof dt);
    *dtype = st_dtype(dt) < 0 ? CKPT_U8 : st_dtype(dt);
    int sn = json_get(j, t, "shape"), c0 = j->nodes[json_get(j, t, "data_offsets")].first;
    int nd = j->nodes[sn].n_children, q = 0;
    *rows = 1, *cols = 1;   /* st_open checked that the product of the dims is counted without overflow */
    for (int c = j->nodes[sn].first; c >= 0; c = j->nodes[c].next, q++) {
        int64_t d = 0;
        json_int64(j, c, 0, INT64_MAX / 2, &d);
        if (q < nd - 1) *rows *= d;
        else *cols = d;
    }
    json_int64(j, c0, 0, INT64_MAX / 2, begin);
    json_int64(j, j->nodes[c0].next, 0, INT64_MAX / 2, end);
}

int hf_inspect_ex(const char *path, int allow_nonfinite, FILE *out) {
    StFile s;
    char err[1600];
    if (st_open(&s, path, err, sizeof err) != 0) { fprintf(stderr, "error: %s\n", err); return 1; }
    Json *j = &s.j;
    int64_t total = 0;
    /* every tensor's data read once first: NaN or inf is refused as every loader refuses it, unless allowed */
    for (int k = j->nodes[0].first; k >= 0; k = j->nodes[j->nodes[k].next].next) {
        char name[256];
        json_string(j, k, name, sizeof name);
        if (!strcmp(name, "__metadata__")) continue;
        int dtype;
        int64_t rows, cols, b, e, bad, first;
        uint32_t crc;
        st_tensor(j, j->nodes[k].next, &dtype, &rows, &cols, &b, &e);
        if (ckpt_scan_bytes(s.f, path, name, s.data_start + b, e - b, dtype, &crc, &bad, &first, err, sizeof err) != 0) {
            fprintf(stderr, "error: %s\n", err);
            st_close(&s);
            return 1;
        }
        total += bad;
        if (bad && !allow_nonfinite) {
            uint8_t value[4] = {0};
            size_t es = ckpt_dtype_size(dtype);
            if (fseeko(s.f, s.data_start + b + first * (int64_t)es, SEEK_SET) != 0 || fread(value, 1, es, s.f) != es) memset(value, 0xff, sizeof value);
            ckpt_nonfinite_message(path, name, dtype, value, first, rows, cols, err, sizeof err);
            fprintf(stderr, "error: %s\n", err);
            st_close(&s);
            return 1;
        }
    }
    fprintf(out, "safetensors %s\n  %lld bytes, header %lld bytes\n  %-56s %-5s %-14s %s\n", path, (long long)s.file_bytes,
            (long long)s.data_start - 8, "name", "dtype", "shape", allow_nonfinite ? "data_offsets  nonfinite" : "data_offsets");
    for (int k = j->nodes[0].first; k >= 0; k = j->nodes[j->nodes[k].next].next) {
        char name[256], dt[32], shape[96], count[32] = "";
        json_string(j, k, name, sizeof name);
        if (!strcmp(name, "__metadata__")) continue;
        int t = j->nodes[k].next;
        json_string(j, json_get(j, t, "dtype"), dt, sizeof dt);
        st_shape_text(j, json_get(j, t, "shape"), "x", shape, sizeof shape);
        int dtype;
        int64_t rows, cols, b, e, bad = 0, first;
        uint32_t crc;
        st_tensor(j, t, &dtype, &rows, &cols, &b, &e);
        if (allow_nonfinite && ckpt_scan_bytes(s.f, path, name, s.data_start + b, e - b, dtype, &crc, &bad, &first, err, sizeof err) == 0)
            snprintf(count, sizeof count, "  %lld", (long long)bad);
        fprintf(out, "  %-56s %-5s %-14s [%lld, %lld)%s\n", name, dt, shape, (long long)b, (long long)e, count);
    }
    if (total) fprintf(out, "nonfinite %lld values (NaN or inf): no loader takes this file\n", (long long)total);
    st_close(&s);
    return 0;
}
