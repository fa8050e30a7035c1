/* checkpoint/json.h — a small, strict JSON reader for safetensors headers and config.json.
 *
 * The idea: parse the whole text into one array of nodes (no allocation per
 * value), reject anything RFC 8259 rejects (trailing commas, comments, bad
 * escapes, leading zeros, trailing garbage, nesting deeper than 64) and what
 * readers of it disagree on (an object giving one key twice: Python's json takes
 * the last, a first-match lookup the first), and say where the text went wrong.
 * Strings are kept as spans of the source and decoded on request; one holding
 * a NUL (\u0000) is never handed out as a C string, which would end at the NUL.
 *
 * Why not cJSON (Debian's libcjson-dev): it takes duplicate keys without a word
 * and decodes "F32\u0000junk" into the C string "F32", two of the three classes
 * issue 30 found; the checks below are a few lines here. */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef enum { JSON_NULL, JSON_FALSE, JSON_TRUE, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct {
    JsonType type;
    int start, len;         /* JSON_STRING: the raw (still escaped) characters between the quotes */
    double number;
    int n_children;         /* arrays: elements; objects: keys and values alternate (2 per member) */
    int next;               /* index of the next sibling node, or -1 */
    int first;              /* index of the first child, or -1 */
} JsonNode;

typedef struct {
    const char *text;
    size_t size;
    JsonNode *nodes;
    int n, cap;
} Json;

/* Parses text[0..size). Returns 0, or -1 with "line L column C: what" in err. */
int json_parse(Json *j, const char *text, size_t size, char *err, size_t err_size);
void json_free(Json *j);
/* The root is node 0. Member lookup in an object by (unescaped) key: node index or -1. */
int json_get(const Json *j, int object, const char *key);
/* Decodes a string node into out (NUL-terminated, UTF-8); -1 if it does not fit
 * or is no string, -2 if it holds a NUL byte (\u0000), which a C string cannot. */
int json_string(const Json *j, int node, char *out, size_t size);
/* A number node that holds an exact integer in [lo, hi]; -1 otherwise. */
int json_int64(const Json *j, int node, int64_t lo, int64_t hi, int64_t *out);
