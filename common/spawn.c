/* common/spawn.c — fork + execvp with fds and environment set up by the
 * parent, the child's exec failure reported back through a close-on-exec
 * pipe (see spawn.h). */
#include "spawn.h"
#include "output.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int spawn_find(const char *program, char *found, size_t size) {
    struct stat st;
    if (strchr(program, '/')) {
        snprintf(found, size, "%s", program);
        return stat(program, &st) == 0 && S_ISREG(st.st_mode) && access(program, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    for (const char *p = path && *path ? path : "/usr/local/bin:/usr/bin:/bin"; ; ) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        snprintf(found, size, "%.*s/%s", (int)n, n ? p : ".", program);
        if (stat(found, &st) == 0 && S_ISREG(st.st_mode) && access(found, X_OK) == 0) return 1;
        if (!colon) return 0;
        p = colon + 1;
    }
}

/* environ with each "KEY=VALUE" of extra replacing the same KEY; a fresh array of borrowed strings */
static char **merged_environment(char *const extra[]) {
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    while (extra && extra[k]) k++;
    char **env = calloc(n + k + 1, sizeof(char *));
    if (!env) return NULL;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int replaced = 0;
        for (size_t j = 0; j < k && !replaced; j++) {
            size_t key = strcspn(extra[j], "=");
            replaced = !strncmp(environ[i], extra[j], key) && environ[i][key] == '=';
        }
        if (!replaced) env[m++] = environ[i];
    }
    for (size_t j = 0; j < k; j++) env[m++] = extra[j];
    env[m] = NULL;
    return env;
}

int spawn_wait(char *const argv[], const char *cwd, const char *log_path, char *const env[], char *err, size_t err_size) {
    int log_fd = -1, report[2];
    if (log_path) {
        char kind[128];
        if (output_target_kind(log_path, kind, sizeof kind) != 0) {
            snprintf(err, err_size, "'%s' (the output of %s) is %s, not a regular file\n  hint: remove it or choose another folder",
                     log_path, argv[0], kind);
            return -1;
        }
        log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0666);
        if (log_fd < 0) { snprintf(err, err_size, "cannot write '%s' (the output of %s): %s", log_path, argv[0], strerror(errno)); return -1; }
    }
    char **environment = merged_environment(env);
    if (!environment || pipe2(report, O_CLOEXEC) != 0) {
        snprintf(err, err_size, "cannot start %s: %s", argv[0], strerror(errno));
        if (log_fd >= 0) close(log_fd);
        free(environment);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {   /* the child: only async-signal-safe calls until exec */
        int e = 0;
        if (cwd && chdir(cwd) != 0) e = errno;
        if (!e && log_fd >= 0 && (dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0)) e = errno;
        if (!e) { execvpe(argv[0], argv, environment); e = errno; }
        ssize_t w = write(report[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    int e = pid < 0 ? errno : 0;
    close(report[1]);
    if (log_fd >= 0) close(log_fd);
    free(environment);
    if (pid < 0) { close(report[0]); snprintf(err, err_size, "cannot start %s: %s", argv[0], strerror(e)); return -1; }
    int child_errno = 0;
    ssize_t got;
    while ((got = read(report[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {}
    close(report[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) { snprintf(err, err_size, "waiting for %s: %s", argv[0], strerror(errno)); return -1; }
    if (got == (ssize_t)sizeof child_errno) {
        snprintf(err, err_size, "cannot run %s%s%s: %s", argv[0], cwd ? " in " : "", cwd ? cwd : "", strerror(child_errno));
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}
