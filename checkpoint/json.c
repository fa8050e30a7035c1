/* checkpoint/json.c — recursive-descent JSON parser into a flat node array. */
#include "json.h"
#include "../common/util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { Json *j; size_t pos; int depth; char *err; size_t err_size; } Parser;

static int fail(Parser *p, const char *what) {
    int line = 1, col = 1;
    for (size_t i = 0; i < p->pos && i < p->j->size; i++) {
        if (p->j->text[i] == '\n') { line++; col = 1; } else col++;
    }
    snprintf(p->err, p->err_size, "JSON line %d column %d: %s", line, col, what);
    return -1;
}

static void skip_ws(Parser *p) {
    while (p->pos < p->j->size) {
        char c = p->j->text[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int new_node(Parser *p, JsonType type) {
    Json *j = p->j;
    if (j->n == j->cap) {
        j->cap = j->cap ? 2 * j->cap : 64;
        j->nodes = realloc(j->nodes, (size_t)j->cap * sizeof(JsonNode));
        if (!j->nodes) die("out of host memory parsing JSON");
    }
    JsonNode *n = &j->nodes[j->n];
    memset(n, 0, sizeof *n);
    n->type = type; n->next = -1; n->first = -1;
    return j->n++;
}

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static int parse_value(Parser *p);

static int parse_string(Parser *p) {
    const char *t = p->j->text;
    p->pos++;   /* opening quote */
    size_t start = p->pos;
    while (1) {
        if (p->pos >= p->j->size) return fail(p, "unterminated string");
        unsigned char c = (unsigned char)t[p->pos];
        if (c == '"') break;
        if (c < 0x20) return fail(p, "control character inside a string");
        if (c == '\\') {
            if (p->pos + 1 >= p->j->size) return fail(p, "unterminated escape");
            char e = t[p->pos + 1];
            if (e == 'u') {
                int cp = p->pos + 6 <= p->j->size ? hex4(t + p->pos + 2) : -1;
                if (cp < 0) return fail(p, "bad \\u escape");
                p->pos += 6;
                if (cp >= 0xDC00 && cp < 0xE000) return fail(p, "\\u escape of a lone low surrogate");
                if (cp >= 0xD800 && cp < 0xDC00) {   /* a high surrogate must be followed by a low one */
                    int lo = p->pos + 6 <= p->j->size && t[p->pos] == '\\' && t[p->pos + 1] == 'u' ? hex4(t + p->pos + 2) : -1;
                    if (lo < 0xDC00 || lo >= 0xE000) return fail(p, "\\u escape of a lone high surrogate");
                    p->pos += 6;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", e)) return fail(p, "bad escape in a string");
            p->pos += 2;
            continue;
        }
        p->pos++;
    }
    int n = new_node(p, JSON_STRING);
    p->j->nodes[n].start = (int)start;
    p->j->nodes[n].len = (int)(p->pos - start);
    p->pos++;
    return n;
}

static int parse_number(Parser *p) {
    const char *t = p->j->text;
    size_t s = p->pos, i = s, size = p->j->size;
    if (i < size && t[i] == '-') i++;
    if (i >= size || !(t[i] >= '0' && t[i] <= '9')) return fail(p, "expected a value");
    if (t[i] == '0' && i + 1 < size && t[i + 1] >= '0' && t[i + 1] <= '9') return fail(p, "number with a leading zero");
    while (i < size && t[i] >= '0' && t[i] <= '9') i++;
    if (i < size && t[i] == '.') {
        i++;
        if (i >= size || !(t[i] >= '0' && t[i] <= '9')) { p->pos = i; return fail(p, "digit expected after '.'"); }
        while (i < size && t[i] >= '0' && t[i] <= '9') i++;
    }
    if (i < size && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        if (i < size && (t[i] == '+' || t[i] == '-')) i++;
        if (i >= size || !(t[i] >= '0' && t[i] <= '9')) { p->pos = i; return fail(p, "digit expected in exponent"); }
        while (i < size && t[i] >= '0' && t[i] <= '9') i++;
    }
    char buf[64];
    if (i - s >= sizeof buf) return fail(p, "number too long");
    memcpy(buf, t + s, i - s);
    buf[i - s] = 0;
    int n = new_node(p, JSON_NUMBER);
    p->j->nodes[n].number = strtod(buf, NULL);
    p->pos = i;
    return n;
}

static int parse_literal(Parser *p, const char *word, JsonType type) {
    size_t len = strlen(word);
    if (p->pos + len > p->j->size || strncmp(p->j->text + p->pos, word, len)) return fail(p, "expected a value");
    p->pos += len;
    return new_node(p, type);
}

/* arrays and objects: children are linked through .next */
static int parse_container(Parser *p, int is_object) {
    if (++p->depth > 64) return fail(p, "nesting deeper than 64");
    int n = new_node(p, is_object ? JSON_OBJECT : JSON_ARRAY), last = -1, count = 0;
    char close = is_object ? '}' : ']';
    p->pos++;
    skip_ws(p);
    if (p->pos < p->j->size && p->j->text[p->pos] == close) { p->pos++; p->depth--; return n; }
    while (1) {
        skip_ws(p);
        if (is_object) {
            if (p->pos >= p->j->size || p->j->text[p->pos] != '"') return fail(p, "expected a string key");
            int key = parse_string(p);
            if (key < 0) return -1;
            skip_ws(p);
            if (p->pos >= p->j->size || p->j->text[p->pos] != ':') return fail(p, "expected ':' after a key");
            p->pos++;
            skip_ws(p);
            int value = parse_value(p);
            if (value < 0) return -1;
            p->j->nodes[key].next = value;
            if (last >= 0) p->j->nodes[last].next = key; else p->j->nodes[n].first = key;
            last = value;
            count += 2;
        } else {
            int child = parse_value(p);
            if (child < 0) return -1;
            if (last >= 0) p->j->nodes[last].next = child; else p->j->nodes[n].first = child;
            last = child;
            count++;
        }
        skip_ws(p);
        if (p->pos >= p->j->size) return fail(p, is_object ? "unterminated object" : "unterminated array");
        char c = p->j->text[p->pos];
        if (c == ',') { p->pos++; continue; }
        if (c == close) { p->pos++; break; }
        return fail(p, is_object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
    p->j->nodes[n].n_children = count;
    p->depth--;
    return n;
}

static int parse_value(Parser *p) {
    skip_ws(p);
    if (p->pos >= p->j->size) return fail(p, "unexpected end of text");
    char c = p->j->text[p->pos];
    switch (c) {
    case '{': return parse_container(p, 1);
    case '[': return parse_container(p, 0);
    case '"': return parse_string(p);
    case 't': return parse_literal(p, "true", JSON_TRUE);
    case 'f': return parse_literal(p, "false", JSON_FALSE);
    case 'n': return parse_literal(p, "null", JSON_NULL);
    default: return parse_number(p);
    }
}

/* Keys of one object, decoded (NULs kept, with their lengths) for sorting. */
typedef struct { char *s; size_t n; int node; } Key;
static int by_key(const void *a, const void *b) {
    const Key *x = a, *y = b;
    int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

static long decode(const Json *j, int node, char *out, size_t size);

static Key decode_key(const Json *j, int k) {
    size_t cap = (size_t)j->nodes[k].len * 4 + 8;
    Key key = {mallocCheck(cap), 0, k};
    long n = decode(j, k, key.s, cap);
    key.n = n > 0 ? (size_t)n : 0;
    return key;
}

/* -1 with the place of the second when an object of j gives a key twice. */
static int check_duplicate_keys(Parser *p) {
    const Json *j = p->j;
    for (int o = 0; o < j->n; o++) {
        if (j->nodes[o].type != JSON_OBJECT || j->nodes[o].n_children < 4) continue;
        int n = j->nodes[o].n_children / 2, bad = -1;
        Key *keys = mallocCheck((size_t)n * sizeof *keys);
        int m = 0;
        for (int k = j->nodes[o].first; k >= 0; k = j->nodes[j->nodes[k].next].next) keys[m++] = decode_key(j, k);
        qsort(keys, (size_t)m, sizeof *keys, by_key);
        for (int i = 1; i < m && bad < 0; i++)
            if (!by_key(&keys[i - 1], &keys[i])) bad = keys[i].node > keys[i - 1].node ? keys[i].node : keys[i - 1].node;
        char shown[80] = "";
        if (bad >= 0) snprintf(shown, sizeof shown, "%.*s", j->nodes[bad].len < 60 ? j->nodes[bad].len : 60, j->text + j->nodes[bad].start);
        for (int i = 0; i < m; i++) free(keys[i].s);
        free(keys);
        if (bad >= 0) {
            char what[160];
            snprintf(what, sizeof what, "the key \"%s\" is given twice in one object (readers differ on which counts)", shown);
            p->pos = (size_t)j->nodes[bad].start;
            return fail(p, what);
        }
    }
    return 0;
}

int json_parse(Json *j, const char *text, size_t size, char *err, size_t err_size) {
    memset(j, 0, sizeof *j);
    j->text = text;
    j->size = size;
    Parser p = {j, 0, 0, err, err_size};
    if (size > (size_t)1 << 30) { snprintf(err, err_size, "JSON text of %zu bytes is too large", size); return -1; }
    if (parse_value(&p) < 0) { json_free(j); return -1; }
    skip_ws(&p);
    if (p.pos != size) { fail(&p, "unexpected text after the value"); json_free(j); return -1; }
    if (check_duplicate_keys(&p) != 0) { json_free(j); return -1; }
    return 0;
}

void json_free(Json *j) {
    free(j->nodes);
    j->nodes = NULL;
    j->n = j->cap = 0;
}

/* String node into out[0..size), NULs kept: its length, or -1 when it does not fit. */
static long decode(const Json *j, int node, char *out, size_t size) {
    const char *s = j->text + j->nodes[node].start;
    int len = j->nodes[node].len;
    size_t o = 0;
    for (int i = 0; i < len; i++) {
        unsigned cp = (unsigned char)s[i];
        if (cp == '\\') {
            char e = s[++i];
            if (e == 'u') {
                cp = (unsigned)hex4(s + i + 1);
                i += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < len && s[i + 1] == '\\' && s[i + 2] == 'u') {   /* surrogate pair */
                    unsigned lo = (unsigned)hex4(s + i + 3);
                    if (lo >= 0xDC00 && lo < 0xE000) { cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00); i += 6; }
                }
            } else cp = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : (unsigned)e;
            char u[4];
            int k = 0;
            if (cp < 0x80) u[k++] = (char)cp;
            else if (cp < 0x800) { u[k++] = (char)(0xC0 | cp >> 6); u[k++] = (char)(0x80 | (cp & 0x3f)); }
            else if (cp < 0x10000) { u[k++] = (char)(0xE0 | cp >> 12); u[k++] = (char)(0x80 | ((cp >> 6) & 0x3f)); u[k++] = (char)(0x80 | (cp & 0x3f)); }
            else { u[k++] = (char)(0xF0 | cp >> 18); u[k++] = (char)(0x80 | ((cp >> 12) & 0x3f)); u[k++] = (char)(0x80 | ((cp >> 6) & 0x3f)); u[k++] = (char)(0x80 | (cp & 0x3f)); }
            for (int q = 0; q < k; q++) { if (o + 1 >= size) return -1; out[o++] = u[q]; }
            continue;
        }
        if (o + 1 >= size) return -1;
        out[o++] = (char)cp;
    }
    return (long)o;
}

int json_string(const Json *j, int node, char *out, size_t size) {
    if (node < 0 || j->nodes[node].type != JSON_STRING || size == 0) return -1;
    long n = decode(j, node, out, size);
    if (n < 0) return -1;
    if (memchr(out, 0, (size_t)n)) return -2;
    out[n] = 0;
    return 0;
}

int json_get(const Json *j, int object, const char *key) {
    if (object < 0 || j->nodes[object].type != JSON_OBJECT) return -1;
    char buf[512];
    for (int k = j->nodes[object].first; k >= 0; k = j->nodes[j->nodes[k].next].next) {
        if (json_string(j, k, buf, sizeof buf) == 0 && !strcmp(buf, key)) return j->nodes[k].next;
    }
    return -1;
}

int json_int64(const Json *j, int node, int64_t lo, int64_t hi, int64_t *out) {
    if (node < 0 || j->nodes[node].type != JSON_NUMBER) return -1;
    double v = j->nodes[node].number;
    if (v != floor(v) || v < (double)lo || v > (double)hi || fabs(v) > 9007199254740992.0) return -1;
    *out = (int64_t)v;
    return 0;
}
