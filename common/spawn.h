/* common/spawn.h — starting a child program without a shell.
 *
 * The idea: a path or a setting is data, and data never reaches a shell. A
 * child gets an argument vector (execvp: each element arrives as one argv
 * entry, whatever quotes, $(...), backticks, semicolons or newlines it holds),
 * its output is redirected by file descriptor (into a file written through
 * the output door), settings for it go into its
 * environment, and "is the program installed" is a search of PATH. */
#pragma once
#include <stddef.h>

/* Runs argv[0] (searched in PATH when it holds no '/') with argv (NULL-terminated) and waits for it.
 * cwd: the child's working folder (NULL: this one). log_path: a regular file (created or truncated)
 * that takes the child's stdout and stderr (NULL: this program's). env: "KEY=VALUE" entries set in
 * the child's environment on top of this one's (NULL: none). Returns the exit status (0-255), 128+N
 * when signal N ended it, or -1 with one line in err when it could not be started. */
int spawn_wait(char *const argv[], const char *cwd, const char *log_path, char *const env[], char *err, size_t err_size);
/* 1 when program (a name, searched in PATH, or a path) is an executable file; its path into found. */
int spawn_find(const char *program, char *found, size_t size);
