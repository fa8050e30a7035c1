/* comm/launch.h — how the ranks of a run come to exist and find each other.
 *
 * The idea: llm3d never invents its own launcher. Under `mpirun -np N` (also
 * with a hostfile), or Slurm's `srun`, the launcher's environment says that
 * this process is one of many; launch_init then starts MPI, which gives the
 * rank, the world and, through a shared-memory split, the ranks on this host.
 * A process started alone is the one-rank grid and MPI is never started, so a
 * single-device run costs nothing. `--nproc=N` is a convenience that re-runs
 * the same command line under mpirun with N local ranks. */
#pragma once

typedef struct {
    int rank, world;             /* MPI_COMM_WORLD */
    int local_rank, local_size;  /* ranks on this host */
    int mpi;                     /* 1: MPI was started (launched by mpirun/srun) */
    int hosts_on_one_gpu;        /* LLM3D_NCCL_HOSTS_ON_ONE_GPU=1: every rank stands for a host of its own (below) */
} LaunchInfo;

/* The test setup LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 (docs/nccl-one-gpu.md): N ranks
 * share GPU 0 and still talk through NCCL, each standing for its own host.
 * NCCL refuses two ranks on one GPU of one host ("Duplicate GPU detected"), and
 * takes the host from NCCL_HOSTID when it is set: so launch_init makes each rank
 * local rank 0 of a host of one, sets NCCL_HOSTID=llm3d-test-host-<rank> before
 * NCCL starts, and NCCL_SOCKET_IFNAME=lo and NCCL_NET=Socket unless the user
 * set them. NCCL then joins the ranks through its network (socket) transport
 * over loopback, as it joins separate nodes: every NCCL code path runs, the multi-node one included; the
 * speed says nothing about real hosts or NVLink. Off unless set; 0 or empty is
 * off, any other value than 0 or 1 is refused. comm_init refuses it in words
 * with device=cpu or in a build without NCCL, and says it once (rank 0). */
#define LAUNCH_HOSTS_ON_ONE_GPU_ENV "LLM3D_NCCL_HOSTS_ON_ONE_GPU"

/* Idempotent. Starts MPI when launched by an MPI launcher, sets how die()
 * reports and ends a run of many ranks (common/util.h), and picks OpenMP
 * threads per rank (cores / local ranks) unless OMP_NUM_THREADS is set. */
void launch_init(int *argc, char ***argv);
const LaunchInfo *launch_info(void);
/* With rank0_only, die() is printed by rank 0 alone: for errors every rank meets alike. */
void launch_errors_rank0_only(int on);
/* `--nproc=N` anywhere in argv and not launched yet: run `mpirun -np N` with
 * the same arguments (without --nproc) as a child, and exit with its status.
 * Returns when there is nothing to do. The launcher stays mpirun's parent: its
 * first SIGTERM, SIGINT or SIGUSR1 reaches every rank as SIGUSR1 (a clean stop
 * with a checkpoint), a repeat LAUNCH_STOP_REPEAT_S or more later as SIGTERM
 * to mpirun (its own kill of the ranks); mpirun is given a kill timeout of LAUNCH_KILL_TIMEOUT_S seconds
 * for a SIGTERM that reaches it directly (comm/launch.c says why). */
#define LAUNCH_KILL_TIMEOUT_S 30   /* Slurm's default KillWait: mpirun kills no sooner than Slurm would */
#define LAUNCH_STOP_REPEAT_S 2
void launch_nproc(int argc, char **argv);
/* Every rank must run the same config: compares every "key=value" line of
 * config_text, and the switch LLM3D_NCCL_HOSTS_ON_ONE_GPU, across the world
 * and dies naming the first key that differs, with both values, when one does. */
void launch_check_same_config(const char *config_text);
/* MPI's version string ("" without MPI). */
const char *launch_mpi_version(void);
