/* doctor/doctor_gpu.c — the doctor's GPU section: the GPUs of a host and
 * how each pair is linked, as `nvidia-smi topo -m` shows it (doctor/doctor.h).
 *
 * The idea: NVML (libnvidia-ml, part of the driver) knows the links. It is
 * opened with dlopen at run time, so build/train builds without the driver's
 * headers or libraries and still runs where there is no driver; the few
 * functions used are declared here in their documented ABI. A pair of GPUs is
 * linked by NVLink (counted per link, directly or through an NVSwitch) or by
 * PCIe through one switch (PIX), several (PXB), the CPU's host bridge (PHB),
 * the host bridges of one NUMA node (NODE) or across CPU sockets (SYS). The
 * nominal rate each way: 20 GB/s per NVLink 1 link, 25 for NVLink 2-4, 50 for
 * NVLink 5; PCIe's lanes x its generation's rate (gen3 0.985 GB/s a lane,
 * doubling each generation). */
#include "doctor.h"
#include "../common/util.h"
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef LLM3D_CUDA
#include <cuda_runtime_api.h>
#endif

typedef int nvmlReturn_t;                      /* 0: NVML_SUCCESS */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {                               /* nvmlPciInfo_t (v3) */
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} NvmlPci;
typedef struct { unsigned long long total, free, used; } NvmlMemory;
enum { NVLINK_MAX = 18, REMOTE_GPU = 0, REMOTE_SWITCH = 2 };

static struct {
    int tried, ok;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*driver)(char *, unsigned);
    nvmlReturn_t (*count)(unsigned *);
    nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*pci)(nvmlDevice_t, NvmlPci *);
    nvmlReturn_t (*ancestor)(nvmlDevice_t, nvmlDevice_t, int *);
    nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int *);
    nvmlReturn_t (*link_version)(nvmlDevice_t, unsigned, unsigned *);
    nvmlReturn_t (*link_remote_pci)(nvmlDevice_t, unsigned, NvmlPci *);
    nvmlReturn_t (*link_remote_type)(nvmlDevice_t, unsigned, int *);
    nvmlReturn_t (*pcie_gen)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*pcie_width)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*memory)(nvmlDevice_t, NvmlMemory *);
    nvmlReturn_t (*compute_mode)(nvmlDevice_t, int *);
    nvmlReturn_t (*capability)(nvmlDevice_t, int *, int *);
    char why[160];                             /* why NVML is not there */
} nv;

#define LOAD(field, symbol) (*(void **)(&nv.field) = dlsym(lib, symbol))

static int nvml(void) {
    if (nv.tried) return nv.ok;
    nv.tried = 1;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) { snprintf(nv.why, sizeof nv.why, "libnvidia-ml.so.1 cannot be opened (no NVIDIA driver here?)"); return 0; }
    int need = LOAD(init, "nvmlInit_v2") && LOAD(count, "nvmlDeviceGetCount_v2") && LOAD(by_index, "nvmlDeviceGetHandleByIndex_v2") &&
               LOAD(pci, "nvmlDeviceGetPciInfo_v3");
    LOAD(driver, "nvmlSystemGetDriverVersion"); LOAD(name, "nvmlDeviceGetName");
    LOAD(ancestor, "nvmlDeviceGetTopologyCommonAncestor"); LOAD(link_state, "nvmlDeviceGetNvLinkState");
    LOAD(link_version, "nvmlDeviceGetNvLinkVersion"); LOAD(link_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    LOAD(link_remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType"); LOAD(pcie_gen, "nvmlDeviceGetMaxPcieLinkGeneration");
    LOAD(pcie_width, "nvmlDeviceGetMaxPcieLinkWidth"); LOAD(memory, "nvmlDeviceGetMemoryInfo");
    LOAD(compute_mode, "nvmlDeviceGetComputeMode"); LOAD(capability, "nvmlDeviceGetCudaComputeCapability");
    if (!need) { snprintf(nv.why, sizeof nv.why, "libnvidia-ml.so.1 lacks nvmlInit_v2 and friends (a driver older than 2016?)"); return 0; }
    int r = nv.init();
    if (r != 0) { snprintf(nv.why, sizeof nv.why, "nvmlInit failed (NVML error %d): is the driver loaded? nvidia-smi tells", r); return 0; }
    return nv.ok = 1;
}

typedef struct {
    nvmlDevice_t dev;
    NvmlPci pci;
    char name[96];
    int switch_links, nvlink_version, cc_major, mode;
    unsigned gen, width;
    NvmlMemory mem;
} Gpu;

static int load_gpus(Gpu *g, int max) {
    unsigned n = 0;
    if (!nvml() || nv.count(&n) != 0) return 0;
    if ((int)n > max) n = (unsigned)max;
    for (unsigned i = 0; i < n; i++) {
        Gpu *x = &g[i];
        memset(x, 0, sizeof *x);
        x->mode = -1;
        if (nv.by_index(i, &x->dev) != 0 || nv.pci(x->dev, &x->pci) != 0) return (int)i;
        if (nv.name) nv.name(x->dev, x->name, sizeof x->name);
        if (nv.capability) { int minor; nv.capability(x->dev, &x->cc_major, &minor); }
        if (nv.pcie_gen) nv.pcie_gen(x->dev, &x->gen);
        if (nv.pcie_width) nv.pcie_width(x->dev, &x->width);
        if (nv.memory) nv.memory(x->dev, &x->mem);
        if (nv.compute_mode) nv.compute_mode(x->dev, &x->mode);
        for (unsigned l = 0; l < NVLINK_MAX && nv.link_state; l++) {
            int active = 0, type = -1;
            if (nv.link_state(x->dev, l, &active) != 0 || !active) continue;
            if (nv.link_version && !x->nvlink_version) nv.link_version(x->dev, l, (unsigned *)&x->nvlink_version);
            if (nv.link_remote_type && nv.link_remote_type(x->dev, l, &type) == 0 && type == REMOTE_SWITCH) x->switch_links++;
        }
    }
    return (int)n;
}

static double per_link_gbs(const Gpu *g) {   /* NVLink, each way; Hopper reports version 7 (5.0) for NVLink 4 */
    if (g->nvlink_version <= 1) return 20;
    if (g->nvlink_version >= 7 && g->cc_major != 9) return 50;
    return 25;
}
static double pcie_gbs(const Gpu *g) {
    static const double lane[] = {0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.563};
    return g->gen >= 1 && g->gen <= 6 ? lane[g->gen] * g->width : 0;
}
static long pci_key(const NvmlPci *p) { return ((long)p->domain << 16) | ((long)p->bus << 8) | p->device; }

static DoctorLink link_between(const Gpu *a, const Gpu *b) {
    DoctorLink l = {LINK_UNKNOWN, 0, 0};
    int direct = 0;
    for (unsigned k = 0; k < NVLINK_MAX && nv.link_state && nv.link_remote_pci; k++) {
        int active = 0, type = REMOTE_GPU;
        NvmlPci rp;
        if (nv.link_state(a->dev, k, &active) != 0 || !active) continue;
        if (nv.link_remote_type && nv.link_remote_type(a->dev, k, &type) == 0 && type != REMOTE_GPU) continue;
        if (nv.link_remote_pci(a->dev, k, &rp) == 0 && pci_key(&rp) == pci_key(&b->pci)) direct++;
    }
    double pcie = pcie_gbs(a) < pcie_gbs(b) ? pcie_gbs(a) : pcie_gbs(b);
    if (direct) return (DoctorLink){LINK_NVLINK, direct, direct * per_link_gbs(a)};
    if (a->switch_links && b->switch_links) {
        int k = a->switch_links < b->switch_links ? a->switch_links : b->switch_links;
        return (DoctorLink){LINK_NVSWITCH, k, k * per_link_gbs(a)};
    }
    int level = -1;
    if (nv.ancestor && nv.ancestor(a->dev, b->dev, &level) == 0) {
        l.kind = level <= 10 ? LINK_PIX : level <= 20 ? LINK_PXB : level <= 30 ? LINK_PHB : level <= 40 ? LINK_NODE : LINK_SYS;
        l.nominal_gbs = pcie;
    }
    return l;
}

const char *doctor_link_name(const DoctorLink *l, char *buf, size_t size) {
    static const char *names[] = {"X", "same GPU", "NV", "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "shm", "net", "?"};
    if (l->kind == LINK_NVLINK || l->kind == LINK_NVSWITCH) snprintf(buf, size, "NV%d", l->nvlinks);
    else snprintf(buf, size, "%s", names[l->kind]);
    return buf;
}

long doctor_gpu_pci(void) {
#ifdef LLM3D_CUDA
    int d = 0, dom = 0, bus = 0, dev = 0;
    if (cudaGetDevice(&d) != cudaSuccess || cudaDeviceGetAttribute(&dom, cudaDevAttrPciDomainId, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, d) != cudaSuccess || cudaDeviceGetAttribute(&dev, cudaDevAttrPciDeviceId, d) != cudaSuccess)
        return -1;
    return ((long)dom << 16) | ((long)bus << 8) | dev;
#else
    return -1;
#endif
}

size_t doctor_gpu_free(void) {
#ifdef LLM3D_CUDA
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) == cudaSuccess) return free_b;
#endif
    return 0;
}

DoctorLink doctor_gpu_link(long pci_a, long pci_b) {
    if (pci_a == pci_b) return (DoctorLink){LINK_SAME_GPU, 0, 0};
    Gpu g[64];
    int n = load_gpus(g, 64), ia = -1, ib = -1;
    for (int i = 0; i < n; i++) {
        if (pci_key(&g[i].pci) == pci_a) ia = i;
        if (pci_key(&g[i].pci) == pci_b) ib = i;
    }
    if (ia < 0 || ib < 0) return (DoctorLink){LINK_UNKNOWN, 0, 0};
    return link_between(&g[ia], &g[ib]);
}

void doctor_gpu_report(const Comm *c, const DoctorHost *hosts, DoctorTally *t, int *nvswitch) {
    long mine = doctor_gpu_pci(), *pci = callocCheck(c->world_size, sizeof(long));
    comm_allgather_host(c, GROUP_WORLD, &mine, pci, sizeof mine);
    *nvswitch = 0;
    Gpu g[64];
    int n = load_gpus(g, 64);
    for (int i = 0; i < n; i++) *nvswitch |= g[i].switch_links > 0;
    *nvswitch = (int)comm_max(c, GROUP_WORLD, *nvswitch);
    if (c->rank != 0) { free(pci); return; }
    char drv[96] = "?", b1[32], b2[32], name[16];
    if (nv.ok && nv.driver) nv.driver(drv, sizeof drv);
    printf("\nGPUs of host %s", hosts[0].host);
    if (!nv.ok) {
        printf(": NVML is not available (%s): topology unknown\n", nv.why);
        doctor_warning(t, "no GPU topology: %s", nv.why);
        free(pci);
        return;
    }
    printf(" (NVML, driver %s)\n", drv);
    static const char *modes[] = {"default", "exclusive thread", "prohibited", "exclusive process"};
    for (int i = 0; i < n; i++) {
        printf("  GPU%d %s | %s | %s free of %s | PCIe gen%u x%u (%.0f GB/s)", i, g[i].name, g[i].pci.busId,
               format_bytes((double)g[i].mem.free, b1, sizeof b1), format_bytes((double)g[i].mem.total, b2, sizeof b2), g[i].gen, g[i].width,
               pcie_gbs(&g[i]));
        if (g[i].switch_links) printf(" | %d NVLinks to NVSwitch (%.0f GB/s each way)", g[i].switch_links, g[i].switch_links * per_link_gbs(&g[i]));
        if (g[i].mode >= 0 && g[i].mode < 4) printf(" | compute mode %s", modes[g[i].mode]);
        printf("\n");
    }
    if (n > 1) {
        printf("  topology, as nvidia-smi topo -m shows it:\n        ");
        for (int j = 0; j < n; j++) printf(" GPU%-3d", j);
        printf("\n");
        for (int i = 0; i < n; i++) {
            printf("    GPU%-3d", i);
            for (int j = 0; j < n; j++) {
                DoctorLink l = i == j ? (DoctorLink){LINK_SELF, 0, 0} : link_between(&g[i], &g[j]);
                printf(" %-6s", doctor_link_name(&l, name, sizeof name));
            }
            printf("\n");
        }
        printf("  legend: NV# = # NVLinks (through NVSwitch when the GPUs share one); PIX = one PCIe switch; PXB = several PCIe switches;\n"
               "          PHB = through the CPU's PCIe host bridge; NODE = host bridges of one NUMA node; SYS = across CPU sockets\n"
               "  for llm3d: tensor parallel (a sum every layer) wants NV#; data parallel (one reduction a step, overlapped with the\n"
               "  backward) and pipeline parallel (activations between neighbours) are fine on PIX/PXB and live with PHB/NODE/SYS\n");
    } else printf("  one GPU: no pair to link\n");
    for (int r = 0; r < c->world_size; r++) {   /* the ranks of this host, and their GPUs */
        if (strcmp(hosts[r].host, hosts[0].host)) continue;
        int idx = -1, sharing = 0;
        for (int i = 0; i < n; i++) if (pci_key(&g[i].pci) == pci[r]) idx = i;
        for (int q = 0; q < c->world_size; q++) sharing += q != r && pci[q] == pci[r] && !strcmp(hosts[q].host, hosts[r].host);
        printf("  rank %d -> GPU%d%s\n", r, idx, sharing ? " (shared with other ranks)" : "");
        if (sharing && idx >= 0 && g[idx].mode == 3)
            doctor_problem(t, "GPU%d is in exclusive-process mode and %d ranks share it: CUDA says \"busy or unavailable\"", idx, sharing + 1);
    }
    free(pci);
}
