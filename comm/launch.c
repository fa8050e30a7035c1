/* comm/launch.c — detecting the launcher, starting MPI, `--nproc`, and the
 * check that every rank runs the same config (comm/launch.h). */
#include "launch.h"
#include "../common/util.h"
#include "../common/options.h"
#include "../common/errors.h"
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <omp.h>
#ifdef LLM3D_MPI
#include <mpi.h>
#endif

static LaunchInfo info = {0, 1, 0, 1, 0, 0};
static int started;

const LaunchInfo *launch_info(void) { return &info; }

/* A launcher's rank count from the environment variable name (set), through the one number reader. */
static int env_ranks(const char *name) {
    char err[512];
    double v;
    if (option_number(name, getenv(name), 1, 1 << 24, 1, &v, err, sizeof err) != 0)
        die("environment: %s\n  hint: the launcher sets %s to the number of ranks; unset it when not starting through one", err, name);
    return (int)v;
}

/* The launcher's variables: Open MPI's mpirun, PMIx/PMI (srun --mpi=pmix, other MPIs), Slurm. */
static int launched_by_mpi(void) {
    if (getenv("OMPI_COMM_WORLD_SIZE")) return env_ranks("OMPI_COMM_WORLD_SIZE") > 1;
    if (getenv("PMI_SIZE")) return env_ranks("PMI_SIZE") > 1;
    if (getenv("PMIX_RANK")) return 1;
    if (getenv("SLURM_NTASKS") && getenv("SLURM_PROCID") && getenv("SLURM_STEP_ID")) return env_ranks("SLURM_NTASKS") > 1;
    return 0;
}

#ifdef LLM3D_MPI
static void mpi_end(int code) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}
/* MPI's own errors pass through the error table (common/errors.h) like NCCL's and CUDA's;
 * communicators split or copied from the world inherit this handler */
static void mpi_error(MPI_Comm *comm, int *code, ...) {
    (void)comm;
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(*code, s, &len);
    error_fail("MPI", 0, "an MPI call", s, NULL, "if another rank reported an error first, that one is the cause");
}
static void mpi_finalize_at_exit(void) {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}
#endif

void launch_errors_rank0_only(int on) {
    DieContext d = die_get_context();
    d.rank0_only = on;
    die_set_context(d);
}

/* LLM3D_NCCL_HOSTS_ON_ONE_GPU (launch.h): 1 on; unset, empty or 0 off; anything else refused */
static int hosts_on_one_gpu_asked(void) {
    const char *v = getenv(LAUNCH_HOSTS_ON_ONE_GPU_ENV);
    if (!v || !v[0] || !strcmp(v, "0")) return 0;
    if (strcmp(v, "1"))
        die(LAUNCH_HOSTS_ON_ONE_GPU_ENV "=%s: use 1 (every rank on GPU 0, each standing for its own host: a test setup) or 0\n"
            "  hint: unset it for a normal run", v);
    return 1;
}

/* Every rank its own host for NCCL: local rank 0 of 1, a host id of its own, loopback sockets (launch.h). */
static void become_a_host_of_one(void) {
    char id[64];
    snprintf(id, sizeof id, "llm3d-test-host-%d", info.rank);
    setenv("NCCL_HOSTID", id, 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    setenv("NCCL_NET", "Socket", 0);   /* not an InfiniBand NIC's loopback where the machine has one: the same path everywhere */
    info.local_rank = 0;
    info.local_size = 1;
}

void launch_init(int *argc, char ***argv) {
    if (started) return;
    started = 1;
    if (launched_by_mpi()) {
#ifdef LLM3D_MPI
        int provided;
        /* the watchdog's thread (comm/watchdog.h) answers other ranks' questions while training's thread waits */
        MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
        MPI_Comm_rank(MPI_COMM_WORLD, &info.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &info.world);
        MPI_Comm local;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &local);
        MPI_Comm_rank(local, &info.local_rank);
        MPI_Comm_size(local, &info.local_size);
        MPI_Comm_free(&local);
        info.mpi = 1;
        /* errors: an error on one rank ends every rank, in MPI's words and the error table's */
        MPI_Errhandler handler;
        MPI_Comm_create_errhandler(mpi_error, &handler);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, handler);
        die_set_context((DieContext){info.rank, info.world, 0, mpi_end});
        atexit(mpi_finalize_at_exit);
#else
        (void)argc; (void)argv;
        die("this process was started by an MPI launcher (mpirun/srun), but this build of llm3d has no MPI\n"
            "  hint: install Open MPI (apt-get install libopenmpi-dev openmpi-bin) and rebuild with make");
#endif
    }
    if (info.world > 1 && !getenv("OMP_NUM_THREADS")) {   /* share the host's cores among its ranks */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int threads = (int)(cores / info.local_size);
        omp_set_num_threads(threads > 0 ? threads : 1);
    }
    info.hosts_on_one_gpu = hosts_on_one_gpu_asked();
    if (info.hosts_on_one_gpu) become_a_host_of_one();   /* after the threads: the ranks still share this host's cores */
}

const char *launch_mpi_version(void) {
#ifdef LLM3D_MPI
    static char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    char *nl = strchr(v, '\n');
    if (nl) *nl = 0;
    char *comma = strchr(v, ',');
    if (comma) *comma = 0;
    return v;
#else
    return "";
#endif
}

/* --nproc=N's launcher stays the parent of mpirun, so that a signal to it (kill, timeout, a batch
 * scheduler, Ctrl-C) ends the run the way a signal to a rank does: every rank finishes its step,
 * saves a checkpoint and exits 0. Why not let mpirun have the signal: Open MPI 4's mpirun answers a
 * SIGTERM or SIGINT of its own with its abort sequence: SIGCONT to the ranks, a sleep of
 * odls_base_sigkill_timeout seconds (1 by default) in which it forwards no output, SIGTERM, the same
 * sleep, SIGKILL; too little time for a step and a checkpoint on a busy machine, and SIGTERM cannot
 * be forwarded instead (ess_base_forward_signals refuses it). It does forward SIGUSR1 to every rank
 * at once, and nothing else. So:
 *   - mpirun runs in a process group of its own (the ranks are in their own already), so Ctrl-C and
 *     `timeout`, which signal the launcher's whole group, reach the launcher alone; a launcher
 *     killed outright gives mpirun a SIGTERM (PR_SET_PDEATHSIG), so no run goes on unwatched;
 *   - the launcher turns its first SIGTERM, SIGINT or SIGUSR1 into one SIGUSR1 to mpirun, which the
 *     ranks take as their stop (train/main.c); a repeat LAUNCH_STOP_REPEAT_S or more later goes to
 *     mpirun as SIGTERM, its abort sequence above;
 *   - a SIGTERM that reaches mpirun directly (kill of its pid; Slurm signals every process of a job,
 *     the ranks too) gets the ranks' stop LAUNCH_KILL_TIMEOUT_S seconds later and SIGKILL as long
 *     again after that: the launcher sets that timeout unless OMPI_MCA_odls_base_sigkill_timeout is
 *     set, and says so as it starts. Its output waits in the pipes meanwhile; a rank that fills its
 *     pipe blocks until mpirun wakes (with log_every >= 10 a pipe holds hundreds of steps). */
static volatile sig_atomic_t launcher_signal, launcher_repeat;
static struct timespec launcher_signal_at;
static void on_launcher_signal(int sig) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!launcher_signal) { launcher_signal_at = now; launcher_signal = sig; }
    else if (now.tv_sec - launcher_signal_at.tv_sec >= LAUNCH_STOP_REPEAT_S) launcher_repeat = sig;
}

static const char *signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

/* Starts mpirun (args) as a child, passes stop signals on as above, and exits with mpirun's status. */
static void run_mpirun(char **args, int n, const char *exe, const char *kill_timeout_s) {
    struct sigaction sa = {0};
    sa.sa_handler = on_launcher_signal;   /* installed before fork: exec gives mpirun the default actions back */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    pid_t launcher = getpid(), child = fork();
    if (child < 0) die("--nproc=%d: cannot start mpirun: fork failed: %s\n  hint: is the machine out of processes or memory?", n, strerror(errno));
    if (child == 0) {
        setpgid(0, 0);   /* signals to the launcher's group stop here: the launcher passes them on (above) */
        prctl(PR_SET_PDEATHSIG, SIGTERM);   /* a launcher killed outright (SIGKILL) still ends the run: mpirun's own stop */
        if (getppid() != launcher) _exit(128 + SIGTERM);   /* it died before the line above */
        execvp("mpirun", args);
        fprintf(stderr, "error: --nproc=%d needs Open MPI's mpirun on the PATH, and it could not be started: %s\n"
                "  hint: apt-get install openmpi-bin, or launch the ranks yourself: mpirun -np %d %s ...\n", n, strerror(errno), n, exe);
        _exit(127);
    }
    int forwarded = 0, status = 0;
    for (;;) {
        pid_t got = waitpid(child, &status, 0);
        if (got == child) break;
        if (got < 0 && errno != EINTR) die("--nproc=%d: waiting for mpirun failed: %s", n, strerror(errno));
        if (launcher_signal && forwarded == 0) {
            printf("launch | %s: every rank finishes its step, saves a checkpoint and stops (SIGUSR1 to mpirun, which passes it on)\n",
                   signal_name(launcher_signal));
            fflush(stdout);
            kill(child, SIGUSR1);
            forwarded = 1;
        }
        if (launcher_repeat && forwarded == 1) {
            printf("launch | %s again: SIGTERM to mpirun, which kills the ranks within %s s; the last complete checkpoint stays\n",
                   signal_name(launcher_repeat), kill_timeout_s);
            fflush(stdout);
            kill(child, SIGTERM);
            forwarded = 2;
        }
    }
    if (WIFEXITED(status)) exit(WEXITSTATUS(status));
    exit(128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
}

void launch_nproc(int argc, char **argv) {
    int n = 0, at = -1;
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--nproc=", 8)) { n = (int)option_number_or_die("train", "nproc", argv[i] + 8, 0, 4096, 1); at = i; }
    if (at < 0 || n <= 1) return;
    if (launched_by_mpi()) {
        const char *w = getenv("OMPI_COMM_WORLD_SIZE");
        if (w && env_ranks("OMPI_COMM_WORLD_SIZE") != n)
            die("--nproc=%d, but this process was already launched as one of %s ranks\n"
                "  hint: drop --nproc when starting through mpirun or srun", n, w);
        return;
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) snprintf(exe, sizeof exe, "%s", argv[0]);
    else exe[len] = 0;
    char **args = callocCheck((size_t)argc + 12, sizeof(char *));
    char np[32], kill_timeout[32];
    snprintf(np, sizeof np, "%d", n);
    snprintf(kill_timeout, sizeof kill_timeout, "%d", LAUNCH_KILL_TIMEOUT_S);
    int k = 0;
    args[k++] = "mpirun";
    const char *own_timeout = getenv("OMPI_MCA_odls_base_sigkill_timeout");
    if (!own_timeout) { args[k++] = "--mca"; args[k++] = "odls_base_sigkill_timeout"; args[k++] = kill_timeout; }
    args[k++] = "--stdin";   /* no rank reads it, and mpirun, in a group of its own, is not the terminal's foreground */
    args[k++] = "none";
    if (geteuid() == 0) args[k++] = "--allow-run-as-root";       /* containers run as root; Open MPI refuses it unasked */
    if (n > sysconf(_SC_NPROCESSORS_ONLN)) args[k++] = "--oversubscribe";
    args[k++] = "-np";
    args[k++] = np;
    args[k++] = exe;
    for (int i = 1; i < argc; i++) if (i != at) args[k++] = argv[i];
    args[k] = NULL;
    printf("launch | ");
    for (int i = 0; i < k; i++) printf("%s%s", args[i], i + 1 < k ? " " : "\n");
    printf("launch | SIGTERM, SIGINT or SIGUSR1 to this process: every rank finishes its step, saves and stops; a SIGTERM to mpirun "
           "itself stops the ranks %s s later and kills them %s s after that (odls_base_sigkill_timeout%s)\n",
           own_timeout ? own_timeout : kill_timeout, own_timeout ? own_timeout : kill_timeout,
           own_timeout ? ", from OMPI_MCA_odls_base_sigkill_timeout" : "");
    fflush(stdout);
    run_mpirun(args, n, exe, own_timeout ? own_timeout : kill_timeout);
}

#ifdef LLM3D_MPI
static uint64_t line_hash(const char *p, size_t len) {
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

#endif

void launch_check_same_config(const char *config_text) {
    if (info.world <= 1) return;
#ifdef LLM3D_MPI
    /* the switch of launch.h is compared as one more line: ranks that disagree on it would each pick another GPU and host */
    size_t len = strlen(config_text);
    char *text = mallocCheck(len + 64);
    snprintf(text, len + 64, "%s%s" LAUNCH_HOSTS_ON_ONE_GPU_ENV "=%d\n", config_text,
             len && config_text[len - 1] != '\n' ? "\n" : "", info.hosts_on_one_gpu);
    int n = 0;
    for (const char *p = text; *p; p++) n += *p == '\n';
    uint64_t *mine = callocCheck(n ? n : 1, sizeof(uint64_t)), *all = callocCheck((size_t)n * info.world + 1, sizeof(uint64_t));
    const char *line = text;
    for (int i = 0; i < n; i++) {
        const char *nl = strchr(line, '\n');
        mine[i] = line_hash(line, (size_t)(nl - line));
        line = nl + 1;
    }
    int *counts = callocCheck(info.world, sizeof(int));
    MPI_Allgather(&n, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < info.world; r++)
        if (counts[r] != n) {
            launch_errors_rank0_only(1);
            die("rank %d runs a config of %d keys and rank 0 one of %d: the ranks run different builds of llm3d\n"
                "  hint: every rank must run the same build/train binary", r, counts[r], counts[0]);
        }
    MPI_Allgather(mine, n, MPI_UINT64_T, all, n, MPI_UINT64_T, MPI_COMM_WORLD);
    int bad_rank = -1, bad_line = -1;
    for (int r = 1; r < info.world && bad_rank < 0; r++)
        for (int i = 0; i < n; i++)
            if (all[(size_t)r * n + i] != all[i]) { bad_rank = r; bad_line = i; break; }
    free(mine); free(all); free(counts);
    if (bad_rank < 0) { free(text); return; }
    /* every rank knows which line differs on which rank: that rank sends its line to rank 0 */
    char theirs[1200] = {0}, ours[1200] = {0};
    line = text;
    for (int i = 0; i < bad_line; i++) line = strchr(line, '\n') + 1;
    snprintf(ours, sizeof ours, "%.*s", (int)(strchr(line, '\n') - line), line);
    if (info.rank == bad_rank) MPI_Send(ours, sizeof ours, MPI_CHAR, 0, 77, MPI_COMM_WORLD);
    if (info.rank == 0) MPI_Recv(theirs, sizeof theirs, MPI_CHAR, bad_rank, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    launch_errors_rank0_only(1);
    die("rank %d was launched with a different config than rank 0: %s on rank 0, %s on rank %d\n"
        "  hint: every rank must get the same settings; check the command line, --config file and environment of each host",
        bad_rank, ours, theirs, bad_rank);
#else
    (void)config_text;
#endif
}
