/* tests/test.h — the tiny test harness every tests/test_*.c uses.
 * CHECK(cond, fmt, ...) counts a pass or prints "FAIL file:line message";
 * test_summary() prints the closing "N passed, N failed" and returns the exit code;
 * test_run() runs a program and captures what it printed; test_runf() the same with
 * printf-style arguments. */
#pragma once
#include <stdarg.h>
#include <stdio.h>
#include <sys/wait.h>
static int test_passed_count, test_failed_count;
#define CHECK(cond, ...) do { if (cond) test_passed_count++; else { test_failed_count++; \
    printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); fflush(stdout); } } while (0)
static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed_count, test_failed_count);
    return test_failed_count ? 1 : 0;
}

/* Runs `program args` through the shell, stdout and stderr captured into out
 * (cap bytes, NUL-terminated); returns the exit code, or 128 + the signal. */
static inline int test_run(const char *program, const char *args, char *out, size_t cap) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", program, args);
    FILE *p = popen(cmd, "r");
    if (!p) { snprintf(out, cap, "popen failed"); return -1; }
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
/* test_run with the arguments formatted printf-style */
static inline int test_runf(const char *program, char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static inline int test_runf(const char *program, char *out, size_t cap, const char *fmt, ...) {
    char args[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return test_run(program, args, out, cap);
}
