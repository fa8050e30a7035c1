/* tests/test_errors.c — the error table (common/errors.h): every row's raw
 * example leads back to that row; the errors of the issue — the seed's three,
 * "Duplicate GPU detected", "invalid usage", out of memory during a collective
 * and version mismatches — each find the cause and fix meant for them; NCCL's
 * detail wins over its generic words; a raw error no row knows keeps the
 * caller's hint; error_fail prints file, line, call, raw error, cause and fix,
 * and exits 1; docs/nccl-errors.md quotes every row. */
#include "test.h"
#include "../common/errors.h"
#include "../common/util.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the row whose first alternative begins with key */
static const ErrorHint *row(const char *key) {
    for (int i = 0; i < error_n_hints; i++)
        if (!strncmp(error_hints[i].match, key, strlen(key))) return &error_hints[i];
    return NULL;
}

static void expect(const char *raw, const char *key) {
    const ErrorHint *want = row(key), *got = error_lookup(raw);
    CHECK(want && got == want, "'%s' -> the '%s' row, got '%s'", raw, key, got ? got->match : "none");
}

int main(void) {
    /* every row, from the words its library prints */
    for (int i = 0; i < error_n_hints; i++) {
        const ErrorHint *h = &error_hints[i];
        CHECK(error_lookup(h->example) == h, "row %d (%s): its example '%s' leads to row '%s'", i, h->library, h->example,
              error_lookup(h->example) ? error_lookup(h->example)->match : "none");
        CHECK(h->cause[0] && h->fix[0] && h->doctor[0], "row %d has a cause, a fix and what doctor shows", i);
        int lower = 1;
        for (const char *p = h->match; *p; p++) lower &= *p < 'A' || *p > 'Z';
        CHECK(lower, "row %d's match '%s' is lower case (the lookup lowers only the raw text)", i, h->match);
    }
    /* the seed's three */
    expect("NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.18.1", "unhandled system error");
    expect("misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<35963> failed : No route to host", "no route to host");
    expect("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer: timeout waiting for collective",
           "did not complete within comm_timeout_s");
    expect("error: watchdog: all-reduce over the dp group (2 ranks, 147.6 KiB) did not complete within its deadline of 3 s (comm_timeout_s)",
           "did not complete within comm_timeout_s");
    /* and the others the issue names */
    expect("init.cc:872 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000", "duplicate gpu detected");
    expect("ncclInvalidUsage: invalid usage (run with NCCL_DEBUG=WARN for details)", "invalid usage");
    expect("include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'", "out of memory");
    expect("transport/p2p.cc:275 NCCL WARN Failed to CUDA calloc 10485760 bytes", "out of memory");
    expect("init.cc:650 NCCL WARN Mismatched NCCL version detected : rank 3 version 21903 rank 0 version 22106", "mismatched nccl version");
    expect("CUDA driver version is insufficient for CUDA runtime version", "cuda driver version is insufficient");
    expect("[node7:1234] PMIX ERROR: pmix_init failed", "orte_init failed");
    /* the detail (ncclGetLastError) picks the row, not the generic words */
    char buf[4096];
    error_format(buf, sizeof buf, "comm/comm_nccl.c", 99, "ncclCommInitRank(...)", "unhandled system error (run with NCCL_DEBUG=INFO for details)",
                 "socketStartConnect: Connect to 10.1.0.2<45533> failed : No route to host", "generic hint");
    CHECK(strstr(buf, "comm/comm_nccl.c:99: ncclCommInitRank(...) failed: unhandled system error") && strstr(buf, "detail: socketStartConnect")
              && strstr(buf, "NCCL_SOCKET_IFNAME") && !strstr(buf, "generic hint"),
          "the detail's row wins:\n%s", buf);
    error_format(buf, sizeof buf, "kernels/cuda/x.cu", 7, "cudaMemcpy(...)", "an illegal memory access was encountered", NULL, "run compute-sanitizer");
    CHECK(strstr(buf, "hint: run compute-sanitizer") && !strstr(buf, "cause:"), "no row: the caller's hint stays:\n%s", buf);
    CHECK(error_lookup(NULL) == NULL && error_lookup("") == NULL && error_lookup("all good") == NULL, "nothing to look up, nothing found");

    /* error_fail: printed once, exit 1 */
    int fd[2];
    if (pipe(fd) != 0) die("pipe failed");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        error_fail("comm/comm_nccl.c", 123, "ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, stream)",
                   "invalid usage (run with NCCL_DEBUG=WARN for details)", "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000", NULL);
    }
    close(fd[1]);
    char out[8192] = {0};
    size_t n = 0;
    ssize_t k;
    while (n < sizeof out - 1 && (k = read(fd[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)k;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "error_fail exits 1");
    CHECK(!strncmp(out, "error: comm/comm_nccl.c:123: ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm, stream) failed: invalid usage", 110)
              && strstr(out, "cause: two ranks of one NCCL communicator run on the same GPU") && strstr(out, "fix: one rank per GPU")
              && strstr(out, "--comm_backend=mpi") && strstr(out, "doctor: "),
          "error_fail prints file, line, the call, the raw error, then the cause, fix and doctor's view:\n%s", out);

    /* docs/nccl-errors.md shows every row */
    FILE *f = fopen("docs/nccl-errors.md", "r");
    CHECK(f != NULL, "docs/nccl-errors.md exists (tests run from the repository root)");
    if (f) {
        static char doc[1 << 17];
        size_t len = fread(doc, 1, sizeof doc - 1, f);
        doc[len] = 0;
        fclose(f);
        for (int i = 0; i < error_n_hints; i++)
            CHECK(strstr(doc, error_hints[i].example), "docs/nccl-errors.md quotes row %d's raw text: %s", i, error_hints[i].example);
    }
    return test_summary();
}
