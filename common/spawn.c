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

/* The child's output goes through the output door too: a temporary beside log_path, renamed into place
 * once the child has ended (whatever its exit status: a failed run's log is what the user reads next). */
int spawn_wait(char *const argv[], const char *cwd, const char *log_path, char *const env[], char *err, size_t err_size) {
    int log_fd = -1, report[2];
    char log_tmp[PATH_MAX + 32];
    FILE *log = NULL;
    if (log_path) {
        if (!(log = atomic_try_open(log_path, log_tmp, sizeof log_tmp, err, err_size))) return -1;
        log_fd = fileno(log);
    }
    char **environment = merged_environment(env);
    if (!environment || pipe2(report, O_CLOEXEC) != 0) {
        snprintf(err, err_size, "cannot start %s: %s", argv[0], strerror(errno));
        if (log) atomic_abandon(log, log_tmp);
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
    free(environment);
    if (pid < 0) {
        close(report[0]);
        if (log) atomic_abandon(log, log_tmp);
        snprintf(err, err_size, "cannot start %s: %s", argv[0], strerror(e));
        return -1;
    }
    int child_errno = 0;
    ssize_t got;
    while ((got = read(report[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {}
    close(report[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            snprintf(err, err_size, "waiting for %s: %s", argv[0], strerror(errno));
            if (log) atomic_abandon(log, log_tmp);
            return -1;
        }
    if (log && atomic_try_commit(log, log_tmp, log_path, err, err_size) != 0) return -1;
    if (got == (ssize_t)sizeof child_errno) {
        snprintf(err, err_size, "cannot run %s%s%s: %s", argv[0], cwd ? " in " : "", cwd ? cwd : "", strerror(child_errno));
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}
