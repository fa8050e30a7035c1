/* common/errors.c — the table of raw NCCL / MPI / CUDA / socket errors and
 * their causes and fixes (common/errors.h). The more specific rows come first:
 * NCCL's "unhandled system error" is often followed by a detail such as
 * "No route to host", and the detail's row is the one that helps. */
#include "errors.h"
#include "util.h"
#include <ctype.h>
#include <stdio.h>
#include <string.h>

const ErrorHint error_hints[] = {
    {"duplicate gpu detected", "NCCL", "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000",
     "two ranks of one NCCL communicator run on the same GPU: more ranks than GPUs on a host, or CUDA_VISIBLE_DEVICES "
     "giving every rank the same device",
     "one rank per GPU (mpirun -np <GPUs of the host> per host, no CUDA_VISIBLE_DEVICES pinning every rank to one GPU); "
     "for a test with ranks sharing one GPU use --comm_backend=mpi, or LLM3D_NCCL_HOSTS_ON_ONE_GPU=1 to keep NCCL with every rank a "
     "test host of its own (docs/nccl-one-gpu.md)",
     "the GPU section says how many ranks share how many GPUs on each host and whether NCCL can run"},
    {"mismatched nccl version", "NCCL", "Mismatched NCCL version detected : rank 1 version 22809 rank 0 version 22703",
     "the ranks loaded different libnccl builds (different containers or LD_LIBRARY_PATH on different hosts)",
     "the same NCCL on every host: one container image, or the same LD_LIBRARY_PATH; `ldd build/train | grep nccl` shows which",
     "the versions section prints each rank's NCCL version and says when they differ"},
    {"cuda driver version is insufficient", "CUDA", "CUDA driver version is insufficient for CUDA runtime version",
     "the NVIDIA driver is older than the CUDA runtime build/train was built with",
     "update the driver, or build with a CUDA toolkit no newer than the driver supports (nvidia-smi's \"CUDA Version\")",
     "the versions section: the driver's CUDA version against the runtime's, with a verdict"},
    {"orte_init failed|opal_init failed|pmix_init failed|pmi2_init failed|ompi_rte_init failed", "MPI",
     "It looks like orte_init failed for some reason; your parallel process is likely to abort.",
     "the mpirun that started the ranks and the MPI library build/train is linked with come from different MPI "
     "installations or versions",
     "launch with the mpirun of the MPI that build/train links (`ldd build/train | grep mpi`, `mpirun --version`); "
     "rebuild after changing MPI",
     "the versions section prints the MPI library each rank loaded"},
    {"no route to host|network is unreachable", "socket", "socketStartConnect: Connect to 10.1.0.2<45533> failed : No route to host",
     "a rank cannot reach rank 0's bootstrap address: NCCL picked an interface (docker0, a VPN, a second NIC) the other "
     "hosts cannot route to, or a firewall rejects the packets",
     "set NCCL_SOCKET_IFNAME (and OMPI_MCA_btl_tcp_if_include for MPI) to the interface every host shares, e.g. "
     "NCCL_SOCKET_IFNAME=eth0; open the ports between the hosts",
     "the network section: which of rank 0's addresses each rank reaches, e.g. \"rank 3 (host b): 172.17.0.1:41234 No route to host\""},
    {"connection refused", "socket", "socketStartConnect: Connect to 10.1.0.2<45533> failed : Connection refused",
     "nothing listens at that address: rank 0 died or has not started yet, NCCL_COMM_ID names the wrong host or port, "
     "or a firewall rejects the port",
     "look for rank 0's own error first; check NCCL_COMM_ID (or unset it and let NCCL pick); open the port range",
     "the network section: \"Connection refused\" against that address, per rank"},
    {"connection timed out|connect timed out", "socket", "socketStartConnect: Connect to 10.1.0.2<45533> failed : Connection timed out",
     "packets to rank 0 are dropped: a firewall drops them, or the address is on a network the other host is not on",
     "set NCCL_SOCKET_IFNAME to the shared interface; allow the ports between the hosts",
     "the network section: \"timed out after N s\" against that address"},
    {"cannot assign requested address|address already in use", "socket", "bind failed: Cannot assign requested address",
     "NCCL_COMM_ID (host:port for NCCL's bootstrap) names an address that is not one of rank 0's host's, or its port is taken",
     "NCCL_COMM_ID=<an address of rank 0's host>:<a free port>, or unset it",
     "the network section checks that NCCL_COMM_ID is an address of rank 0's host and that its port can be bound"},
    {"no socket interface found|no usable listening interface", "NCCL", "Bootstrap : no socket interface found",
     "NCCL_SOCKET_IFNAME names no interface of this host (a typo, or interface names differ between hosts)",
     "`ip -br addr` on each host; set NCCL_SOCKET_IFNAME to a prefix every host has (eth, ens, ib) or unset it",
     "the network section lists each rank's interfaces and the ones NCCL_SOCKET_IFNAME selects"},
    {"/dev/shm|shared memory segment", "NCCL", "Error while creating shared memory segment /dev/shm/nccl-6f9e (size 9637888)",
     "NCCL's transport between GPUs of one host needs /dev/shm, and a container gives it 64 MB by default",
     "run the container with --shm-size=8g (or --ipc=host); NCCL_SHM_DISABLE=1 also works, slowly",
     "the environment section prints /dev/shm's size and warns below 1 GiB"},
    {"nvls|multicast", "NCCL", "transport/nvls.cc:165 NCCL WARN Cuda failure 801 'operation not supported'",
     "NVLink SHARP (NVLS: multicast through the NVSwitch) could not be set up: the driver, the fabric manager or the "
     "machine's policy does not allow multicast objects",
     "NCCL_NVLS_ENABLE=0 (shared machines such as the H200 one ask for it)",
     "the environment section shows NCCL_NVLS_ENABLE and warns when NVSwitch is present and it is not 0"},
    {"out of memory|failed to cuda calloc|failed to cuda malloc", "CUDA", "out of memory",
     "the GPU is full: the model, its activations and optimizer take most of it, and NCCL allocates buffers of its own "
     "per communicator and channel (llm3d makes one communicator per group) at start-up and at the first collective",
     "leave headroom: a smaller batch_size, recompute=selective|full, optimizer=adamw8bit (the start-up memory report says "
     "which fits); for NCCL's share NCCL_BUFFSIZE=2097152 or NCCL_MAX_NCHANNELS=4; and no other process on the GPU (nvidia-smi)",
     "the GPU section shows each GPU's free memory, and the sweep is capped to fit in it"},
    {"peer access is not supported", "CUDA", "peer access is not supported between these two devices",
     "the two GPUs cannot read each other's memory directly (PCIe ACS or the IOMMU on, or different CPU sockets); NCCL "
     "then goes through host memory",
     "turn off PCIe ACS / the IOMMU on bare metal, or accept the slower path; NCCL_P2P_LEVEL=SYS forces P2P where it works",
     "the topology matrix: SYS or NODE pairs, and the measured bandwidth against the link's nominal rate"},
    {"no cuda-capable device", "CUDA", "no CUDA-capable device is detected",
     "no GPU is visible: no driver, CUDA_VISIBLE_DEVICES empty or wrong, or a container started without --gpus",
     "nvidia-smi; docker run --gpus all; check CUDA_VISIBLE_DEVICES; device=cpu trains without a GPU",
     "\"no GPU visible: CPU sections only\""},
    {"busy or unavailable", "CUDA", "CUDA-capable device(s) is/are busy or unavailable",
     "the GPU is in exclusive-process compute mode and another process (or another rank) holds it",
     "one rank per GPU, or an administrator sets `nvidia-smi -c DEFAULT`; ranks sharing a GPU need the default mode",
     "the GPU section prints each GPU's compute mode"},
    {"did not complete within comm_timeout_s|did not complete within its deadline|timeout waiting for collective|collective operation timeout|watchdog caught",
     "llm3d", "timeout waiting for collective",
     "a rank never reached the collective: it died, hangs, waits on I/O, or runs a different code path (collectives "
     "called in another order); or the network stalled",
     "llm3d's watchdog names the ranks that had not arrived: read their own output first; the flight recorder "
     "run_dir/flight_rank<R>.txt lists each rank's last operations; raise comm_timeout_s only when a step is legitimately that slow",
     "the init under a timeout and the sweep show whether the collective itself works"},
    {"remote process exited or there was a network error", "NCCL", "remote process exited or there was a network error",
     "another rank failed first, or the network between the ranks dropped",
     "find the first error of another rank (it says why); check the links with doctor",
     "the network section and the sweep"},
    {"unhandled system error", "NCCL", "unhandled system error (run with NCCL_DEBUG=INFO for details)",
     "a system call inside NCCL failed: nearly always the network (sockets to a peer: a wrong interface, a firewall) or "
     "shared memory (/dev/shm too small in a container), sometimes locked memory for InfiniBand (ulimit -l)",
     "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET to see which call failed; run `build/train doctor` under the same launch",
     "the network section (every rank reaching rank 0), /dev/shm's size, ulimit -l and the NCCL_* variables"},
    {"unhandled cuda error", "NCCL", "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
     "a CUDA call inside NCCL failed: the GPU is out of memory, in a bad state (Xid errors in dmesg), or its driver lacks "
     "what NCCL asked for (e.g. NVLS multicast)",
     "NCCL_DEBUG=INFO names the call; nvidia-smi for the GPU's state; for NVSwitch multicast errors NCCL_NVLS_ENABLE=0",
     "the versions section (driver, runtime) and each GPU's free memory"},
    {"invalid usage", "NCCL", "invalid usage (run with NCCL_DEBUG=WARN for details)",
     "NCCL was called wrongly: the ranks of a communicator disagree (counts, dtypes or the order of collectives: different "
     "configs or builds), two ranks share a GPU, a communicator is used after an abort, or the NCCL versions differ",
     "NCCL_DEBUG=WARN prints which; every rank must run the same build and config (llm3d checks the config at start-up)",
     "the versions of every rank and the GPUs of every rank"},
    {"invalid argument (run with nccl", "NCCL", "invalid argument (run with NCCL_DEBUG=WARN for details)",
     "a pointer or count NCCL cannot use: a buffer on another GPU than the communicator's, or a null buffer",
     "if it happens in training it is an llm3d bug: report it with NCCL_DEBUG=WARN's output",
     "nothing specific: the sweep runs every collective llm3d uses"},
    {"internal error - please report", "NCCL", "internal error - please report this issue to the NCCL developers",
     "NCCL failed an internal check, often because of the environment: a network plugin that does not match, or NCCL_* "
     "variables asking for transports the machine lacks",
     "rerun with NCCL_DEBUG=INFO; unset experimental NCCL_* variables; try another NCCL version",
     "the environment section lists every NCCL_* variable set"},
    {"mpi_err_truncate|message truncated", "MPI", "MPI_ERR_TRUNCATE: message truncated",
     "a rank received a longer message than it expected: the ranks disagree on sizes (different configs, builds or data) "
     "or call collectives in different orders",
     "run the same build and config on every rank", "the versions of every rank"},
    {"not enough slots", "MPI",
     "There are not enough slots available in the system to satisfy the 4 slots that were requested by the application",
     "mpirun counts cores as slots and more ranks were asked for than there are cores",
     "mpirun --oversubscribe (tests only), or a hostfile with slots=N per host", "the hosts and ranks per host"},
    {"unable to reliably start one or more daemons|lost communication with a remote daemon", "MPI",
     "ORTE was unable to reliably start one or more daemons.",
     "mpirun could not start its helper on another host: ssh to it fails, the host is unreachable, or Open MPI is not at "
     "the same path there",
     "`ssh <host> which orted` from the launching host; the same Open MPI on every host; OMPI_MCA_oob_tcp_if_include and "
     "OMPI_MCA_btl_tcp_if_include set to the shared interface",
     "the network section, once the ranks start"},
    {"exited on signal 9", "MPI", "mpirun noticed that process rank 1 with PID 4242 on node a exited on signal 9 (Killed).",
     "a rank was killed from outside: the kernel's out-of-memory killer (host memory) or a scheduler's limit",
     "`dmesg | grep -i oom` on its host; less host memory per rank (fewer ranks per host, a smaller batch)",
     "nothing: doctor runs before training"},
    {"mpi_abort was invoked", "MPI", "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD with errorcode 1.",
     "a rank stopped the job on purpose after an error of its own: its message above is the real one",
     "read the first \"error:\" line above and the rank it names", "nothing: the error above is the one to read"},
};
const int error_n_hints = sizeof error_hints / sizeof error_hints[0];

/* needle (lower case) in hay, ignoring hay's case */
static int contains(const char *hay, const char *needle, size_t n) {
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && tolower((unsigned char)hay[i]) == needle[i]) i++;
        if (i == n) return 1;
    }
    return 0;
}

const ErrorHint *error_lookup(const char *text) {
    if (!text || !*text) return NULL;
    for (int r = 0; r < error_n_hints; r++)
        for (const char *alt = error_hints[r].match; *alt;) {
            const char *bar = strchr(alt, '|');
            size_t n = bar ? (size_t)(bar - alt) : strlen(alt);
            if (n && contains(text, alt, n)) return &error_hints[r];
            alt += n + (bar != NULL);
        }
    return NULL;
}

void error_format(char *buf, unsigned long size, const char *file, int line, const char *what, const char *raw, const char *detail,
                  const char *fallback_hint) {
    const ErrorHint *h = error_lookup(detail);
    if (!h) h = error_lookup(raw);
    int n = line > 0 ? snprintf(buf, size, "%s:%d: %s failed: %s", file, line, what, raw ? raw : "(no message)")
                     : snprintf(buf, size, "%s: %s failed: %s", file, what, raw ? raw : "(no message)");
    if (detail && *detail && n < (int)size) n += snprintf(buf + n, size - n, "\n  detail: %s", detail);
    if (n >= (int)size) return;
    if (h) snprintf(buf + n, size - n, "\n  cause: %s\n  fix: %s\n  doctor: %s", h->cause, h->fix, h->doctor);
    else if (fallback_hint && *fallback_hint) snprintf(buf + n, size - n, "\n  hint: %s", fallback_hint);
}

void error_fail(const char *file, int line, const char *what, const char *raw, const char *detail, const char *fallback_hint) {
    char buf[4096];
    error_format(buf, sizeof buf, file, line, what, raw, detail, fallback_hint);
    die("%s", buf);
}
