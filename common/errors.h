/* common/errors.h — what a raw error from NCCL, MPI, CUDA or a socket means,
 * and what to do about it.
 *
 * The idea: the words a library prints ("unhandled system error", "No route
 * to host", "Duplicate GPU detected ...") are what people search for for days.
 * One table maps them — by a substring of the raw text — to a cause, a fix and
 * what `build/train doctor` shows for it. Every checked call of a transport
 * (ncclCheck, cudaCheck, MPI's error handler) ends in error_fail, which prints
 * the file, line, the call, the raw error and the row's cause and fix, then
 * ends the run as die() does (every rank of a job). docs/nccl-errors.md is the
 * same table for reading, and tests/test_errors.c checks every row. It lives
 * in common/ because kernels/cuda reports through it too. */
#pragma once

typedef struct {
    const char *match;    /* lower-case substrings of the raw text, '|' between alternatives */
    const char *library;  /* who prints it: NCCL, MPI, CUDA, socket, llm3d */
    const char *example;  /* the raw text as the library prints it (tests feed it back) */
    const char *cause;
    const char *fix;
    const char *doctor;   /* what `build/train doctor` shows for it */
} ErrorHint;

extern const ErrorHint error_hints[];
extern const int error_n_hints;

/* The first row (the most specific come first) one of whose alternatives
 * occurs in text, case-insensitively; NULL when none does or text is NULL. */
const ErrorHint *error_lookup(const char *text);

/* "<file>:<line>: <what> failed: <raw>" (no ":<line>" when line <= 0), "detail: <detail>", then, from the row matching
 * detail (else raw), the cause, the fix and the doctor's view — or
 * fallback_hint when no row matches — then ends the run like die().
 * detail (e.g. ncclGetLastError's text) and fallback_hint may be NULL. */
void error_fail(const char *file, int line, const char *what, const char *raw, const char *detail, const char *fallback_hint)
    __attribute__((noreturn));

/* The same text into buf (for tests and for callers that add to it). */
void error_format(char *buf, unsigned long size, const char *file, int line, const char *what, const char *raw, const char *detail,
                  const char *fallback_hint);
