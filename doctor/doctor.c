/* doctor/doctor.c — `build/train doctor`: its options, the order of its
 * sections, the init of every rank under a timeout, and the verdict
 * (doctor/doctor.h). The layout keys are the trainer's (names, bounds, and
 * comm_init's grid and refusal): without them the grid is the world alone, as
 * before; with them each axis is checked (doctor_axes.c). */
#include "doctor.h"
#include "../comm/launch.h"
#include "../comm/watchdog.h"
#include "../kernels/backend.h"
#include "../common/util.h"
#include "../common/options.h"
#include <stdlib.h>
#include <math.h>
#include <string.h>

static const char *usage =
    "usage: build/train doctor [--device=auto|cpu|cuda] [--comm_backend=auto|nccl|mpi] [--timeout=10]\n"
    "                          [--max_bytes=1G] [--sweep_seconds=20] [--sweep=1] [--pairs=1] [--nproc=N]\n"
    "                          [--dp=D --pp=P --cp=C --tp=T]\n"
    "  finds, before training, what would make NCCL or MPI fail or crawl: versions, NCCL_* variables, hosts\n"
    "  and interfaces and whether every rank reaches rank 0's bootstrap port, GPUs and their links, an init\n"
    "  of every rank under --timeout seconds, and a sweep of the collectives training uses (8 B up to\n"
    "  --max_bytes, growing while the next size fits in --sweep_seconds; a slow size is measured, not cut\n"
    "  off: its deadline grows with its bytes) with a verdict per link and per pair of ranks.\n"
    "  Run it the way training runs: alone, under mpirun -np N (across hosts too), or with --nproc=N.\n"
    "  Without a GPU (or with --device=cpu) the GPU sections are skipped and the sweep runs over MPI.\n"
    "  --dp --pp --cp --tp (training's layout keys; those left out are 1, their product must be the ranks launched)\n"
    "  build the grid as training does and check every axis whose groups have more than one rank (tp, cp, pp, dp,\n"
    "  dp x cp with cp, tp x pp with both): a sum over each group that must come out right, its members, and the\n"
    "  all-reduce and all-gather's busbw at 64 KiB and --max_bytes (at most 64 MiB): one line per axis, OK or FAIL.\n"
    "  (Tests only: --fault=sum|stall:axis=A:rank=R makes world rank R give a wrong value to axis A's checked sum, or\n"
    "  never join it; A one of tp, cp, pp, dp, dpcp, tppp.)\n"
    "  Exit 1 when it finds a problem.\n";

static int lead;

/* /proc/meminfo's MemAvailable in bytes; 0 if unknown */
static double host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib * 1024;
}

/* v through option_number (common/options.h); a size may end in K, M or G. */
static double number(const char *key, const char *v, int size_suffix) {
    char digits[64], err[512];
    snprintf(digits, sizeof digits, "%s", v);
    size_t n = strlen(digits);
    double scale = 1, x;
    char last = n ? digits[n - 1] : 0;
    if (size_suffix && (last == 'K' || last == 'k')) scale = 1024;
    else if (size_suffix && (last == 'M' || last == 'm')) scale = 1024.0 * 1024;
    else if (size_suffix && (last == 'G' || last == 'g')) scale = 1024.0 * 1024 * 1024;
    if (scale > 1) digits[n - 1] = 0;
    if (option_number(key, digits, size_suffix ? 0 : -1e9, size_suffix ? 1e15 : 1e9, 0, &x, err, sizeof err) != 0)   /* the bounds that mean something are checked below, in words */
        die("doctor: --%s=%s: %s%s", key, v, strchr(err, ':') + 2, size_suffix ? " (a size: 64M, 1G ...)" : "");
    return x * scale;
}

/* A host memcpy's rate: the nominal rate of shared memory between CPU ranks of one host. */
static double memcpy_gbs(void) {
    size_t n = 16u << 20;
    char *a = mallocCheck(n), *b = mallocCheck(n);
    memset(a, 1, n); memset(b, 2, n);
    double t0 = now_seconds();
    for (int i = 0; i < 4; i++) { memcpy(b, a, n); a[i] = b[n - 1 - i]; }
    double gbs = 4.0 * n / (now_seconds() - t0) / 1e9;
    free(a); free(b);
    return gbs;
}

/* links[i * n + j] for every pair: each rank fills its own row, then they are gathered. */
static DoctorLink *all_links(const Comm *c, const DoctorHost *hosts, int gpu) {
    int n = c->world_size, me = c->rank;
    long mine = gpu ? doctor_gpu_pci() : -1, *pci = callocCheck(n, sizeof(long));
    comm_allgather_host(c, GROUP_WORLD, &mine, pci, sizeof mine);
    DoctorLink *row = callocCheck(n, sizeof(DoctorLink)), *all = callocCheck((size_t)n * n, sizeof(DoctorLink));
    double shm = gpu ? 0 : memcpy_gbs();
    for (int j = 0; j < n; j++) {
        if (j == me) row[j] = (DoctorLink){LINK_SELF, 0, 0};
        else if (strcmp(hosts[j].host, hosts[me].host)) {
            double a = hosts[me].if_gbs, b = hosts[j].if_gbs;
            row[j] = (DoctorLink){LINK_NET, 0, a > 0 && b > 0 ? (a < b ? a : b) : 0};
        } else if (gpu) row[j] = doctor_gpu_link(pci[me], pci[j]);
        else row[j] = (DoctorLink){LINK_SHM, 0, shm};
    }
    comm_allgather_host(c, GROUP_WORLD, row, all, (size_t)n * sizeof(DoctorLink));
    free(row); free(pci);
    return all;
}

typedef struct {
    int device, backend, do_sweep, nproc;
    int layout[4], has_layout;  /* dp, pp, cp, tp; has_layout: one of them was given */
    double timeout;
    SweepOptions so;
    DoctorFault fault;
} Options;

/* The command line into o; dies in words on a bad option; 1 when it asked for --help. */
static int parse(int argc, char **argv, Options *o) {
    *o = (Options){.device = -1, .backend = COMM_AUTO, .do_sweep = 1, .layout = {1, 1, 1, 1}, .timeout = 10,
                   .so = {(size_t)1 << 30, 20, 1}};   /* 20 s: a GPU sweep to 1 GiB takes a few; CPU ranks stop where the time runs out */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        char key[64];
        const char *v = option_split(a, key, sizeof key), *const axes[4] = {"dp", "pp", "cp", "tp"};
        if (!v) die("doctor: '%s' is not --key=value\n%s", a, usage);
        int axis = -1;
        for (int k = 0; k < 4; k++) if (!strcmp(key, axes[k])) axis = k;
        if (!strcmp(key, "nproc")) o->nproc = (int)option_number_or_die("doctor", key, v, 0, 4096, 1);   /* launch_nproc starts them */
        else if (axis >= 0) {   /* the trainer's bounds (train/config.c's rows) */
            o->layout[axis] = (int)option_number_or_die("doctor", key, v, 1, axis ? COMM_MAX_AXIS : COMM_MAX_DP, 1);
            o->has_layout = 1;
        }
        else if (!strcmp(key, "fault")) doctor_axes_fault(v, &o->fault);
        else if (!strcmp(key, "device")) o->device = !strcmp(v, "cpu") ? 0 : !strcmp(v, "cuda") ? 1 : !strcmp(v, "auto") ? -1 : -2;
        else if (!strcmp(key, "comm_backend")) o->backend = !strcmp(v, "nccl") ? COMM_NCCL : !strcmp(v, "mpi") ? COMM_MPI : !strcmp(v, "auto") ? COMM_AUTO : -1;
        else if (!strcmp(key, "timeout")) o->timeout = number(key, v, 0);
        else if (!strcmp(key, "max_bytes")) {   /* bounded before the cast: 1e15G would not fit a size_t */
            double bytes = number(key, v, 1);
            if (bytes > (double)((size_t)1 << 50) || bytes != floor(bytes))
                die("doctor: --max_bytes=%s is %s\n  hint: a size in bytes up to 1P (e.g. 64M, 1G)", v,
                    bytes != floor(bytes) ? "not a whole number of bytes" : "past 2^50 bytes (1 PiB), more than any sweep can send");
            o->so.max_bytes = (size_t)bytes;
        }
        else if (!strcmp(key, "sweep_seconds")) o->so.seconds = number(key, v, 0);
        else if (!strcmp(key, "sweep")) o->do_sweep = (int)number(key, v, 0) != 0;
        else if (!strcmp(key, "pairs")) o->so.pairs = (int)number(key, v, 0) != 0;
        else die("doctor: unknown option --%s\n%s", key, usage);
        if (o->device == -2) die("doctor: --device='%s': use auto, cpu or cuda", v);
        if (o->backend < 0) die("doctor: --comm_backend='%s': use auto, nccl or mpi", v);
    }
    if (o->timeout <= 0)
        die("doctor: --timeout=%g: the init and every connection need a deadline above 0 seconds, or a rank that never comes hangs "
            "the doctor too\n  hint: --timeout=10 (the default); give slow clusters more", o->timeout);
    if (o->so.seconds <= 0) die("doctor: --sweep_seconds=%g must be above 0 (or --sweep=0 to skip the sweep)", o->so.seconds);
    if (o->so.max_bytes < 8) die("doctor: --max_bytes=%zu is below 8 bytes, the sweep's smallest message", o->so.max_bytes);
    if (o->fault.kind && !o->has_layout) die("doctor: --fault checks an axis: give the layout too (--dp, --pp, --cp, --tp)");
    return 0;
}

void doctor_check_before_launch(int argc, char **argv) {
    Options o;
    if (getenv("OMPI_COMM_WORLD_SIZE") || parse(argc, argv, &o)) return;   /* under mpirun: comm_init compares the layout with the world */
    long long want = (long long)o.layout[0] * o.layout[1] * o.layout[2] * o.layout[3];
    if (o.has_layout && o.nproc > 1 && want != o.nproc)
        die("doctor: --nproc=%d starts %d ranks, but the layout dp=%d x pp=%d x cp=%d x tp=%d takes %lld\n  hint: use --nproc=%lld, "
            "or set dp, pp, cp and tp so that their product is %d", o.nproc, o.nproc, o.layout[0], o.layout[1], o.layout[2], o.layout[3],
            want, want, o.nproc);
}

int doctor_main(int argc, char **argv) {
    launch_init(&argc, &argv);
    const LaunchInfo *li = launch_info();
    lead = li->rank == 0;
    launch_errors_rank0_only(1);   /* bad options are the same on every rank */
    Options o;
    if (parse(argc, argv, &o)) { if (lead) printf("%s", usage); return 0; }
    int device = o.device, backend = o.backend, do_sweep = o.do_sweep, has_layout = o.has_layout, *layout = o.layout;
    double timeout = o.timeout;
    SweepOptions so = o.so;
    int gpus = backend_cuda_device_count();
    if (device == 1 && gpus == 0)
        die("doctor --device=cuda, but no GPU is visible here (no driver, CUDA_VISIBLE_DEVICES empty, or a build without CUDA)\n"
            "  hint: leave --device out: the doctor then checks the CPU sections and says so");
    int gpu = device == 1 || (device == -1 && gpus > 0);
    if (gpu && li->world == 1 && backend == COMM_AUTO && comm_nccl_built_in()) backend = COMM_NCCL;   /* one rank: a NCCL communicator of one */
    Comm c;
    if (has_layout) comm_init(&c, layout[0], layout[1], layout[2], layout[3], backend, gpu);   /* refuses a layout that is not the world */
    else comm_init(&c, li->world, 1, 1, 1, backend, gpu);
    launch_errors_rank0_only(0);
    c.timeout_s = timeout;
    DoctorHost *hosts = callocCheck(c.world_size, sizeof(DoctorHost));
    int n_hosts = doctor_hosts(&c, hosts);
    DoctorTally tally = {.lead = lead};
    if (lead) {
        printf("doctor | %d rank(s) on %d host(s) | ", c.world_size, n_hosts);
        if (gpu) printf("device cuda, %d GPU(s) visible to rank 0", gpus);
        else printf("device cpu: %s, so the GPU sections are skipped", gpus > 0 ? "--device=cpu" : "no GPU visible");
        printf(" | device collectives through %s", comm_transport_name(&c));
        if (has_layout) printf(" | layout dp=%d x pp=%d x cp=%d x tp=%d", c.dp, c.pp, c.cp, c.tp);
        printf("\n");
        if (gpu && c.world_size > 1 && c.local_size > gpus)
            printf("  %d ranks on host %s share %d GPU(s): NCCL refuses that (\"Duplicate GPU detected\"), so they talk through MPI\n",
                   c.local_size, hosts[0].host, gpus);
    }
    doctor_versions(&c, gpu, &tally);
    int nvswitch = 0;
    if (gpu) doctor_gpu_report(&c, hosts, &tally, &nvswitch);
    doctor_environment(&c, n_hosts, nvswitch, gpu, &tally);
    doctor_network(&c, hosts, n_hosts, timeout, gpu, &tally);

    /* the init: every rank joins (and NCCL builds its communicators) under the watchdog's deadline */
    if (lead) printf("\ninit under a timeout of %.0f s (--timeout)\n", timeout);
    if (has_layout) doctor_axes_watch();   /* before the watchdog: its stall then says which axis was being checked */
    watchdog_start(&c, NULL);
    double t0 = now_seconds();
    comm_barrier(&c, GROUP_WORLD);
    double joined = now_seconds() - t0;
    const Backend *be = gpu ? backend_cuda(DTYPE_FP32) : backend_cpu();
    t0 = now_seconds();
    comm_attach(&c, be);
    comm_barrier(&c, GROUP_WORLD);
    double attached = now_seconds() - t0;
    if (lead) {
        printf("  all %d rank(s) joined in %.1f ms (an MPI barrier)%s", c.world_size, 1e3 * joined, c.world_size == 1 ? ": alone, nothing to join" : "");
        if (c.impl) printf("; the %s transport set up in %.1f ms\n", comm_transport_name(&c), 1e3 * attached);
        else printf("; no transport to set up\n");
    }
    DoctorLink *links = all_links(&c, hosts, gpu);
    if (do_sweep || has_layout) {
        if (gpu) {   /* the sweep's two buffers and NCCL's own must fit: a quarter of the freest GPU's memory each */
            double free_b = (double)doctor_gpu_free();
            free_b = -comm_max(&c, GROUP_WORLD, -free_b);
            if (free_b > 0 && so.max_bytes > free_b / 4) so.max_bytes = (size_t)(free_b / 4);
        } else {     /* host memory, shared by the host's ranks */
            double avail = -comm_max(&c, GROUP_WORLD, -host_available() / c.local_size);
            if (avail > 0 && so.max_bytes > avail / 4) so.max_bytes = (size_t)(avail / 4);
        }
    }
    if (has_layout) doctor_axes(&c, so.max_bytes < ((size_t)64 << 20) ? so.max_bytes : (size_t)64 << 20, &o.fault, &tally);
    if (do_sweep) doctor_sweep(&c, links, &so, &tally);
    else if (lead) printf("\nbandwidth sweep: skipped (--sweep=0)\n");
    int problems = (int)comm_max(&c, GROUP_WORLD, tally.problems);
    if (lead) {
        printf("\ndoctor | %d problem(s), %d warning(s)%s\n", tally.problems, tally.warnings,
               tally.problems ? ": each PROBLEM above would stop or stall training; docs/nccl-errors.md has more" : "");
        fflush(stdout);
    }
    free(links); free(hosts);
    comm_free(&c);
    return problems ? 1 : 0;
}
