/* doctor/doctor_env.c — the doctor's versions and environment sections
 * (doctor/doctor.h).
 *
 * The idea: what each rank loaded (MPI, the CUDA runtime against what the
 * driver supports, NCCL against the one llm3d was built with) must fit
 * together and be the same on every rank; every NCCL_* variable set, and a
 * few related ones, is shown with what it does, and the risky ones are
 * warned about — a misspelt NCCL variable is ignored by NCCL without a word. */
#include "doctor.h"
#include "../comm/launch.h"
#include "../common/util.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>
#ifdef LLM3D_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef LLM3D_NCCL
#include <nccl.h>
#endif

extern char **environ;

typedef struct {
    char mpi[96], host[64];
    int cuda_runtime, cuda_driver;   /* 12080 = 12.8; 0: none */
    int nccl_runtime, nccl_built;    /* NCCL_VERSION_CODE form; 0: none */
    unsigned long long env_hash;     /* of this rank's NCCL_* variables */
} Versions;

static void version_text(int v, char *buf, size_t size) {   /* CUDA's 12080 -> "12.8" */
    if (v <= 0) snprintf(buf, size, "none");
    else snprintf(buf, size, "%d.%d", v / 1000, (v % 1000) / 10);
}
static void nccl_text(int v, char *buf, size_t size) {        /* 22809 -> "2.28.9" */
    if (v <= 0) snprintf(buf, size, "none");
    else if (v >= 10000) snprintf(buf, size, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
    else snprintf(buf, size, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static unsigned long long nccl_env_hash(void) {
    unsigned long long h = 1469598103934665603ull;   /* FNV-1a of every NCCL_* entry, order-free (summed) */
    unsigned long long sum = 0;
    for (char **e = environ; *e; e++) {
        if (!starts(*e, "NCCL_")) continue;
        if (starts(*e, "NCCL_HOSTID=") && launch_info()->hosts_on_one_gpu) continue;   /* one per test host (comm/launch.h) */
        unsigned long long x = h;
        for (const char *p = *e; *p; p++) x = (x ^ (unsigned char)*p) * 1099511628211ull;
        sum += x;
    }
    return sum;
}

static void my_versions(Versions *v, int gpu) {
    memset(v, 0, sizeof *v);
    snprintf(v->mpi, sizeof v->mpi, "%s", launch_mpi_version()[0] ? launch_mpi_version() : "no MPI in this build");
    gethostname(v->host, sizeof v->host - 1);
#ifdef LLM3D_CUDA
    if (gpu) {
        cudaRuntimeGetVersion(&v->cuda_runtime);
        if (cudaDriverGetVersion(&v->cuda_driver) != cudaSuccess) v->cuda_driver = 0;
    }
#endif
#ifdef LLM3D_NCCL
    ncclGetVersion(&v->nccl_runtime);
    v->nccl_built = NCCL_VERSION_CODE;
#endif
    (void)gpu;
    v->env_hash = nccl_env_hash();
}

void doctor_versions(const Comm *c, int gpu, DoctorTally *t) {
    int n = c->world_size, lead = c->rank == 0;
    Versions mine, *all = callocCheck(n, sizeof(Versions));
    my_versions(&mine, gpu);
    comm_allgather_host(c, GROUP_WORLD, &mine, all, sizeof mine);
    if (lead) printf("\nversions\n");
    int same = 1;
    for (int r = 1; r < n; r++)
        same &= !strcmp(all[r].mpi, all[0].mpi) && all[r].cuda_runtime == all[0].cuda_runtime && all[r].cuda_driver == all[0].cuda_driver &&
                all[r].nccl_runtime == all[0].nccl_runtime;
    for (int r = 0; r < n && lead; r++) {
        if (same && r > 0) break;
        const Versions *v = &all[r];
        char rt[16], drv[16], nr[16], nb[16];
        version_text(v->cuda_runtime, rt, sizeof rt);
        version_text(v->cuda_driver, drv, sizeof drv);
        nccl_text(v->nccl_runtime, nr, sizeof nr);
        nccl_text(v->nccl_built, nb, sizeof nb);
        if (same) printf("  every rank (%d): ", n);
        else printf("  rank %d (%s): ", r, v->host);
        printf("MPI %s", v->mpi);
        if (gpu) printf(" | CUDA runtime %s, the driver supports up to %s", rt, drv);
        if (v->nccl_built) printf(" | NCCL %s (built against %s)", nr, nb);
        printf("\n");
    }
    if (!lead) { free(all); return; }
    if (!same) doctor_problem(t, "the ranks loaded different MPI, CUDA or NCCL versions (above): every host needs the same ones "
                                 "(one container image, the same LD_LIBRARY_PATH); NCCL says \"Mismatched NCCL version detected\"");
    const Versions *v = &all[0];
    if (gpu && v->cuda_driver > 0 && v->cuda_driver < v->cuda_runtime) {
        char rt[16], drv[16];
        version_text(v->cuda_runtime, rt, sizeof rt);
        version_text(v->cuda_driver, drv, sizeof drv);
        doctor_problem(t, "the driver supports CUDA up to %s but llm3d's runtime is %s: CUDA says \"CUDA driver version is insufficient "
                          "for CUDA runtime version\"; update the driver or build with an older toolkit", drv, rt);
    }
    if (gpu && v->cuda_driver == 0) doctor_problem(t, "no NVIDIA driver answered (cudaDriverGetVersion): check nvidia-smi");
    if (v->nccl_built && v->nccl_runtime / 100 != v->nccl_built / 100)
        doctor_warning(t, "libnccl loaded at run time differs from the nccl.h llm3d was built with: LD_LIBRARY_PATH picks another NCCL");
    if (gpu && v->cuda_driver >= v->cuda_runtime && v->cuda_runtime > 0 && same) printf("  verdict: the versions fit together\n");
    else if (!gpu && same) printf("  verdict: every rank runs the same MPI\n");
    int differ = 0;
    for (int r = 1; r < n; r++) differ += all[r].env_hash != all[0].env_hash;
    if (differ) doctor_warning(t, "%d rank(s) see other NCCL_* variables than rank 0 (each host's environment differs): NCCL must be "
                                  "set up alike everywhere", differ);
    free(all);
}

/* ---- the environment */

typedef struct { const char *name, *meaning; } EnvDoc;
static const EnvDoc docs[] = {
    {"NCCL_DEBUG", "how much NCCL prints: WARN says why on errors, INFO also init and transports, TRACE every call"},
    {"NCCL_DEBUG_SUBSYS", "which parts NCCL_DEBUG=INFO covers, e.g. INIT,NET,GRAPH"},
    {"NCCL_DEBUG_FILE", "NCCL's log to a file per rank (%h host, %p pid)"},
    {"NCCL_SOCKET_IFNAME", "the interfaces NCCL's bootstrap and socket transport may use: prefixes, ^ to exclude, = for exact names"},
    {"NCCL_HOSTID", "the host NCCL takes this process for (the duplicate-GPU check keys on it); LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 gives each rank its own"},
    {"NCCL_SOCKET_FAMILY", "AF_INET or AF_INET6 for NCCL's sockets"},
    {"NCCL_COMM_ID", "host:port of NCCL's bootstrap root instead of the one rank 0 picks (llm3d passes rank 0's id over MPI)"},
    {"NCCL_P2P_DISABLE", "1: no direct GPU-to-GPU copies over NVLink or PCIe"},
    {"NCCL_P2P_LEVEL", "the farthest topology level P2P is used at: LOC, NVL, PIX, PXB, PHB, SYS"},
    {"NCCL_SHM_DISABLE", "1: no shared-memory transport between the processes of one host"},
    {"NCCL_IB_DISABLE", "1: no InfiniBand or RoCE: traffic between hosts goes over TCP sockets"},
    {"NCCL_IB_HCA", "which InfiniBand adapters (and ports) NCCL uses"},
    {"NCCL_IB_TIMEOUT", "InfiniBand verbs timeout, 4.096 us x 2^value"},
    {"NCCL_NET_GDR_LEVEL", "the farthest distance between NIC and GPU at which GPUDirect RDMA is used"},
    {"NCCL_NET", "the network transport or plugin NCCL uses (IB, Socket, or a plugin's name)"},
    {"NCCL_NVLS_ENABLE", "NVLink SHARP: reductions inside the NVSwitch through multicast memory; 0 leaves it off"},
    {"NCCL_CUMEM_ENABLE", "NCCL's buffers through cuMem* virtual memory instead of cudaMalloc"},
    {"NCCL_ALGO", "forces the algorithms (Ring, Tree, NVLS, ...): for experiments"},
    {"NCCL_PROTO", "forces the protocols (LL, LL128, Simple): for experiments"},
    {"NCCL_BUFFSIZE", "bytes of each channel's buffer (4 MiB by default): smaller saves GPU memory"},
    {"NCCL_NTHREADS", "CUDA threads per NCCL block"},
    {"NCCL_MAX_NCHANNELS", "at most this many channels (parallel rings or trees): fewer saves memory and SMs"},
    {"NCCL_MIN_NCHANNELS", "at least this many channels"},
    {"NCCL_LAUNCH_MODE", "PARALLEL or GROUP kernel launches"},
    {"NCCL_TOPO_FILE", "an XML topology NCCL uses instead of detecting one"},
    {"NCCL_TOPO_DUMP_FILE", "where NCCL writes the topology it detected"},
    {"NCCL_IGNORE_CPU_AFFINITY", "1: NCCL ignores the process's CPU affinity when it pins its threads"},
    {"NCCL_CROSS_NIC", "whether rings and trees may use different NICs on different hosts"},
    {"NCCL_ASYNC_ERROR_HANDLING", "a PyTorch setting: no effect on llm3d, whose watchdog is comm_timeout_s"},
    {"NCCL_BLOCKING_WAIT", "a PyTorch setting: no effect on llm3d, whose watchdog is comm_timeout_s"},
    {"CUDA_VISIBLE_DEVICES", "the GPUs this process sees, numbered from 0: a rank takes its local rank's GPU among them"},
    {"CUDA_DEVICE_MAX_CONNECTIONS", "hardware work queues per GPU; 1 serialises the streams"},
    {"CUDA_LAUNCH_BLOCKING", "1: every kernel launch waits for its kernel: errors show where they happen, training crawls"},
    {"OMPI_MCA_btl_tcp_if_include", "the interfaces Open MPI's TCP transport may use"},
    {"OMPI_MCA_oob_tcp_if_include", "the interfaces mpirun uses to reach its daemons on other hosts"},
    {"OMPI_MCA_btl", "the Open MPI transports allowed (e.g. self,vader,tcp)"},
    {"OMPI_MCA_pml", "Open MPI's point-to-point layer (ob1, ucx)"},
    {"UCX_NET_DEVICES", "the devices UCX (Open MPI's pml ucx) uses"},
    {"OMP_NUM_THREADS", "CPU threads per rank (unset: llm3d divides the host's cores among its ranks)"},
};

static const char *meaning(const char *name) {
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++)
        if (!strcmp(docs[i].name, name)) return docs[i].meaning;
    return NULL;
}

static int env_is(const char *name, const char *value) {
    const char *v = getenv(name);
    return v && !strcmp(v, value);
}

void doctor_environment(const Comm *c, int hosts, int nvswitch, int gpu, DoctorTally *t) {
    if (c->rank != 0) return;
    printf("\nenvironment (rank 0)\n");
    int shown = 0;
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
        const char *m = meaning(name);
        if (!starts(name, "NCCL_") && !m) continue;
        printf("  %s=%s\n      %s\n", name, eq + 1, m ? m : "not one doctor knows: NCCL ignores a misspelt name without a word");
        shown++;
    }
    if (!shown) printf("  no NCCL_* (or related) variable is set\n");
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    if (env_is("NCCL_P2P_DISABLE", "1"))
        doctor_warning(t, "NCCL_P2P_DISABLE=1: GPUs of one host talk through host memory, several times slower than NVLink or PCIe P2P; "
                          "unset it unless a broken P2P path forced it");
    if (env_is("NCCL_SHM_DISABLE", "1"))
        doctor_warning(t, "NCCL_SHM_DISABLE=1: no shared-memory path between processes of one host; fine on NVLink, slow otherwise");
    if (env_is("NCCL_IB_DISABLE", "1") && hosts > 1)
        doctor_warning(t, "NCCL_IB_DISABLE=1 on a job of %d hosts: traffic between hosts goes over TCP sockets, often 10x slower "
                          "than InfiniBand", hosts);
    if (nvswitch && (!nvls || strcmp(nvls, "0")))
        doctor_warning(t, "this host has NVSwitch and NVLS (multicast) is %s: shared machines (the team's H200 one among them) ask for "
                          "NCCL_NVLS_ENABLE=0", nvls ? "on" : "on by default");
    if (nvswitch && nvls && !strcmp(nvls, "0")) printf("  NVLS is off (NCCL_NVLS_ENABLE=0), as a shared NVSwitch machine asks\n");
    if (getenv("NCCL_ALGO") || getenv("NCCL_PROTO"))
        doctor_warning(t, "NCCL_ALGO or NCCL_PROTO forces NCCL's choice: keep it for experiments, it is rarely faster");
    if (env_is("CUDA_LAUNCH_BLOCKING", "1")) doctor_warning(t, "CUDA_LAUNCH_BLOCKING=1: every kernel waits for the previous; for debugging only");
    if (gpu && !getenv("NCCL_DEBUG")) printf("  NCCL_DEBUG is unset: when NCCL fails, NCCL_DEBUG=WARN prints its reasons\n");
    struct statvfs sv;
    if (statvfs("/dev/shm", &sv) == 0) {
        double bytes = (double)sv.f_blocks * sv.f_frsize;
        char b[32];
        printf("  /dev/shm: %s (NCCL and Open MPI put shared memory between a host's ranks there)\n", format_bytes(bytes, b, sizeof b));
        if (bytes < 1024.0 * 1024 * 1024 && c->local_size > 1)
            doctor_warning(t, "/dev/shm holds only %s: NCCL fails with \"Error while creating shared memory segment\"; a container needs "
                              "--shm-size=8g or --ipc=host", b);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        char b[32];
        if (rl.rlim_cur == RLIM_INFINITY) printf("  locked memory (ulimit -l): unlimited\n");
        else printf("  locked memory (ulimit -l): %s%s\n", format_bytes((double)rl.rlim_cur, b, sizeof b),
                    hosts > 1 && gpu ? " (InfiniBand needs it large: ulimit -l unlimited)" : "");
    }
}
