/* common/options.c — command-line keys: one spelling for dash and underscore,
 * the one strict number reader, and the suggestion for an unknown key (see options.h). */
#include "options.h"
#include "util.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int option_number(const char *key, const char *value, double lo, double hi, int whole, double *out, char *err, size_t err_size) {
    char *end = NULL;
    double v = *value && !isspace((unsigned char)*value) ? strtod(value, &end) : 0;
    const char *why = NULL;
    if (!*value) why = whole ? "is empty: give a whole number" : "is empty: give a number";
    else if (*value == '+') why = "has a '+': write the number alone";
    else if (!end || end == value || *end || strpbrk(value, "xXpP")) why = whole ? "is not a whole number" : "is not a number";
    else if (!isfinite(v)) why = "is not a number (nan, inf and values past 1.8e308 have no meaning here)";
    else if (whole && v != floor(v)) why = "is not a whole number";
    if (why) {
        snprintf(err, err_size, "%s=%s: %s", key, value, why);
        return -1;
    }
    if (v < lo || v > hi) {
        if (whole) snprintf(err, err_size, "%s=%s: is out of range [%.0f, %.0f]", key, value, lo, hi);
        else snprintf(err, err_size, "%s=%s: is out of range [%g, %g]", key, value, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int option_list(const char *key, const char *value, double lo, double hi, int whole, double *out, int max, char *err, size_t err_size) {
    int n = 0;
    char item[64], why[256];
    for (const char *p = value;; p++) {
        size_t len = strcspn(p, ",");
        const char *problem = NULL;
        if (!*value) problem = "is empty: give a comma-separated list";
        else if (len == 0) problem = p[0] ? "has an empty item (two commas, or one first)" : "ends with a comma: drop it";
        else if (n == max) problem = "has too many items";
        if (problem) {
            if (n == max && len) snprintf(err, err_size, "%s=%s: has more than %d items", key, value, max);
            else snprintf(err, err_size, "%s=%s: %s", key, value, problem);
            return -1;
        }
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item - 1 ? len : sizeof item - 1), p);
        if (len >= sizeof item - 1 || option_number(key, item, lo, hi, whole, &out[n], why, sizeof why) != 0) {
            snprintf(err, err_size, "%s=%s: item %d ('%.*s') %s", key, value, n + 1, (int)(len < 40 ? len : 40), p,
                     len >= sizeof item - 1 ? "is too long" : strstr(why, ": ") ? strstr(why, ": ") + 2 : why);
            return -1;
        }
        n++;
        p += len;
        if (!*p) return n;
    }
}

double option_number_or_die(const char *cmd, const char *key, const char *value, double lo, double hi, int whole) {
    char err[512];
    double v;
    if (option_number(key, value, lo, hi, whole, &v, err, sizeof err) != 0)
        die("%s: %s\n  hint: see `build/train %s --help`", cmd, err, cmd);
    return v;
}

const char *option_split(const char *arg, char *key, size_t key_size) {
    const char *eq = strchr(arg, '=');
    if (strncmp(arg, "--", 2) != 0 || !eq || eq == arg + 2) return NULL;
    snprintf(key, key_size, "%.*s", (int)(eq - arg - 2), arg + 2);
    for (char *p = key; *p; p++) if (*p == '-') *p = '_';
    return eq + 1;
}

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b), d[64][64];
    if (la > 63 || lb > 63) return 99;
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

/* 1 if the '_'-separated words of a and b have one in common (words of 2+ letters). */
static int share_word(const char *a, const char *b) {
    char wa[64];
    for (const char *p = a; *p;) {
        size_t n = strcspn(p, "_");
        if (n >= 2 && n < sizeof wa) {
            snprintf(wa, sizeof wa, "%.*s", (int)n, p);
            for (const char *q = b; *q;) {
                size_t m = strcspn(q, "_");
                if (m == n && !strncasecmp(q, wa, n)) return 1;
                q += m + (q[m] == '_');
            }
        }
        p += n + (p[n] == '_');
    }
    return 0;
}

const char *option_suggest(const char *typed, const char *const *names, int n) {
    char key[64];
    snprintf(key, sizeof key, "%s", typed);
    for (char *p = key; *p; p++) if (*p == '-') *p = '_';
    const char *best = NULL;
    int best_rank = 3, best_d = 1 << 30;
    for (int i = 0; i < n; i++) {
        int rank = *key && strcasestr(names[i], key) ? 0 : share_word(key, names[i]) ? 1 : 2;
        int d = edit_distance(key, names[i]);
        if (rank < best_rank || (rank == best_rank && d < best_d)) { best = names[i]; best_rank = rank; best_d = d; }
    }
    return best;
}
