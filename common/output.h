/* common/output.h — the one door every file llm3d writes goes through.
 *
 * The idea: a file is never written in place. atomic_open refuses a target
 * that exists and is not a regular file (a folder, a FIFO, a device, a socket,
 * or a symbolic link to one of them: said in words, never opened, so a FIFO
 * cannot block it), then creates a temporary of a unique name beside the
 * target ("<path>.tmp.XXXXXX", created with O_EXCL, so two writers never share
 * one); the caller writes into it; atomic_commit checks that every write
 * succeeded (the stream's error flag, the flush, the fsync, the close) and
 * only then renames it over the target. A full disk, a file-size limit or a
 * read-only folder is an error naming the file; the earlier file is
 * untouched and the temporary removed — also when the program dies (die()
 * removes every temporary still open). A symbolic link to a regular file is
 * followed: the file it points to is replaced and the link kept.
 * The one stream that cannot be renamed into place, an append-only log, opens
 * through append_open: the same refusals, and its writes are the caller's to
 * check (fflush + ferror). */
#pragma once
#include <stddef.h>
#include <stdio.h>

/* Opens a temporary beside path (tmp_path receives its name); NULL with one
 * line in err naming path when path is not a regular file or the temporary
 * cannot be made. */
FILE *atomic_try_open(const char *path, char *tmp_path, size_t tmp_size, char *err, size_t err_size);
/* atomic_try_open, dying with its message. */
FILE *atomic_open(const char *path, char *tmp_path, size_t tmp_size);
/* Checks every write, flush, fsync and close of f, then renames tmp_path over path; -1 with one line in
 * err (the temporary removed, path untouched) on any failure. f is closed either way. */
int atomic_try_commit(FILE *f, const char *tmp_path, const char *path, char *err, size_t err_size);
/* atomic_try_commit, dying with its message. */
void atomic_commit(FILE *f, const char *tmp_path, const char *path);
/* Closes f and removes tmp_path: the target stays as it was. */
void atomic_abandon(FILE *f, const char *tmp_path);
/* Removes every temporary still open (die() calls it before the program ends). */
void atomic_abandon_all(void);

/* 0 when path is absent or a regular file (or a link to one); else -1 with, in words, what it is instead
 * ("a FIFO (named pipe)", "a symbolic link to a folder", ...) in what_it_is. */
int output_target_kind(const char *path, char *what_it_is, size_t size);
/* Opens path for appending (created if absent) when it is absent or a regular file; never blocks on a
 * FIFO. NULL with one line naming key and path in err. */
FILE *append_open(const char *path, const char *key, char *err, size_t err_size);
/* Copies the regular file from into to through the door (a picture a child program drew in a scratch
 * folder, say); -1 with one line in err. */
int output_copy_file(const char *from, const char *to, char *err, size_t err_size);
