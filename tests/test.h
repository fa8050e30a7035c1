/* tests/test.h — the tiny test harness every tests/test_*.c uses.
 * CHECK(cond, fmt, ...) counts a pass or prints "FAIL file:line message";
 * test_summary() prints the closing "N passed, N failed" and returns the exit code. */
#pragma once
#include <stdio.h>
static int test_passed_count, test_failed_count;
#define CHECK(cond, ...) do { if (cond) test_passed_count++; else { test_failed_count++; \
    printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); fflush(stdout); } } while (0)
static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed_count, test_failed_count);
    return test_failed_count ? 1 : 0;
}
