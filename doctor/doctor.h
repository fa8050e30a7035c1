/* doctor/doctor.h — `build/train doctor`: find why NCCL or MPI would fail
 * before training does.
 *
 * The idea: every rank the launcher started (one, mpirun -np N, or --nproc=N)
 * looks at itself — versions, NCCL_* variables, /dev/shm, interfaces, GPUs and
 * how they are linked — and tries what training will do: reach rank 0's
 * bootstrap port over TCP (the "no route to host" case), join all ranks under
 * a timeout, and move bytes with the very collectives training uses (the comm
 * API of comm/comm.h), 8 B up to 1 GiB. Rank 0 prints one report: each
 * finding with its meaning, warnings for risky settings, the bandwidth in
 * nccl-tests' terms beside each link's nominal rate, a verdict line per pair
 * of ranks, and the count of problems (exit 1 when there is any). Without a
 * GPU (or with --device=cpu) the GPU sections are skipped and it says so; the
 * sweep then runs over MPI between CPU ranks.
 *
 * With the trainer's layout keys (--dp --pp --cp --tp) it builds the grid as
 * training does and checks each axis's groups too: a sum that must come out
 * right and a timed all-reduce and all-gather per axis.
 *
 * The report's pieces, one file each: doctor.c (options, order, the init),
 * tally.c (each finding printed and counted, for every section),
 * doctor_env.c (versions and environment), doctor_net.c (hosts, interfaces,
 * reaching rank 0), doctor_gpu.c (GPUs and links through NVML, loaded at run
 * time so the binary runs where there is no driver), doctor_sweep.c (the
 * bandwidth sweep and the pairs), doctor_axes.c (the grid's groups, axis by
 * axis). */
#pragma once
#include "../comm/comm.h"
#include "tally.h"

int doctor_main(int argc, char **argv);
/* Before --nproc=N starts N ranks (train/main.c): a layout whose product is not N is refused here, once, in words. */
void doctor_check_before_launch(int argc, char **argv);

/* ---- shared by the doctor's files: the tally (doctor/tally.h), and what each section gives the others ---- */

/* What connects two ranks, and how fast it should be (GB/s each way; 0: unknown). */
typedef enum { LINK_SELF, LINK_SAME_GPU, LINK_NVLINK, LINK_NVSWITCH, LINK_PIX, LINK_PXB, LINK_PHB, LINK_NODE, LINK_SYS,
               LINK_SHM, LINK_NET, LINK_UNKNOWN } LinkKind;
typedef struct {
    LinkKind kind;
    int nvlinks;
    double nominal_gbs;
} DoctorLink;
const char *doctor_link_name(const DoctorLink *l, char *buf, size_t size);   /* "NV18", "PIX", "SYS", "shm", "net" ... */

/* doctor_env.c */
void doctor_versions(const Comm *c, int gpu, DoctorTally *t);
void doctor_environment(const Comm *c, int hosts, int nvswitch, int gpu, DoctorTally *t);

/* doctor_net.c: each rank's host and network; every rank tries rank 0's bootstrap port */
typedef struct {
    char host[64];
    char ifaces[480];           /* "eth0 10.0.0.5, lo 127.0.0.1" */
    char nccl_if[32], nccl_addr[64];   /* the interface and address NCCL's bootstrap would use */
    double if_gbs;              /* its link speed (/sys/class/net/IF/speed), GB/s; 0 unknown */
} DoctorHost;
/* Fills hosts[world] (every rank's) and returns the number of distinct hosts. */
int doctor_hosts(const Comm *c, DoctorHost *hosts);
void doctor_network(const Comm *c, const DoctorHost *hosts, int n_hosts, double timeout_s, int gpu, DoctorTally *t);

/* doctor_gpu.c (GPU builds with a driver): this host's GPUs through NVML */
/* Prints the GPUs of rank 0's host and their topology matrix; *nvswitch = 1 when NVSwitch links exist. */
void doctor_gpu_report(const Comm *c, const DoctorHost *hosts, DoctorTally *t, int *nvswitch);
/* This rank's GPU (the CUDA device it uses): PCI domain/bus/device packed, or -1. */
long doctor_gpu_pci(void);
/* The link between two GPUs of this host, by PCI id. */
DoctorLink doctor_gpu_link(long pci_a, long pci_b);
/* Free bytes of this rank's GPU (0 if unknown). */
size_t doctor_gpu_free(void);

/* doctor_sweep.c */
typedef struct {
    size_t max_bytes;           /* largest message (--max_bytes, capped by memory) */
    double seconds;             /* time budget of the sweep (--sweep_seconds) */
    int pairs;                  /* also measure each pair of ranks */
} SweepOptions;
/* links[i * world + j]: what connects ranks i and j (the same on every rank). */
/* Sets c->timeout_s per operation while it runs (scaled with the bytes), and puts it back. */
void doctor_sweep(Comm *c, const DoctorLink *links, const SweepOptions *o, DoctorTally *t);
/* "8 B", "64 KiB", "1 GiB": a power of two's size, as the tables print it. */
void doctor_size_text(size_t bytes, char *buf, size_t size);

/* doctor_axes.c: the groups of the grid that --dp, --pp, --cp and --tp build (comm_init's), axis by axis */
typedef struct {
    int kind;                   /* tests only (--fault): DOCTOR_FAULT_SUM: rank gives a wrong value to the checked sum over group;
                                 * DOCTOR_FAULT_STALL: rank never joins it (the watchdog ends the job) */
    CommGroup group;
    int rank;
} DoctorFault;
enum { DOCTOR_FAULT_NONE, DOCTOR_FAULT_SUM, DOCTOR_FAULT_STALL };
/* --fault=sum|stall:axis=A:rank=R (A: tp, cp, pp, dp, dpcp, tppp); dies in words on anything else. */
void doctor_axes_fault(const char *spec, DoctorFault *f);
/* Before watchdog_start: a rank that ends while an axis is being checked (the watchdog's stall, an error) says which. */
void doctor_axes_watch(void);
/* Each group of more than one rank: a checked device all-reduce and all-gather and a host sum, then the all-reduce
 * timed at 64 KiB and at large bytes, the all-gather at large; one line per axis, a PROBLEM naming each axis that fails.
 * Sets c->timeout_s per operation while it runs (scaled with the bytes), and puts it back. */
void doctor_axes(Comm *c, size_t large, const DoctorFault *fault, DoctorTally *t);
