/* doctor/doctor_net.c — the doctor's hosts and network section
 * (doctor/doctor.h).
 *
 * The idea: NCCL's bootstrap has every rank open a TCP connection to rank 0
 * on the address of the interface NCCL picks (NCCL_SOCKET_IFNAME, else ib*,
 * else the first that is not docker* or lo) or on NCCL_COMM_ID. So rank 0
 * listens on a port — NCCL_COMM_ID's, when it is set — and every rank
 * connects to each of rank 0's addresses with a timeout, the way NCCL will.
 * "No route to host", "Connection refused" and a timeout show here, per rank
 * and address, before a training run meets them as "unhandled system error".
 * The kernel completes a connection to a listening socket by itself, so rank
 * 0 never needs to accept. */
#include "doctor.h"
#include "../comm/launch.h"
#include "../common/errors.h"
#include "../common/util.h"
#include "../common/options.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_ADDRS 8

typedef struct { char name[32], addr[64]; } Iface;

/* This host's up IPv4 interfaces (lo included), at most max. */
static int interfaces(Iface *out, int max) {
    struct ifaddrs *list, *a;
    int n = 0;
    if (getifaddrs(&list) != 0) return 0;
    for (a = list; a && n < max; a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
        snprintf(out[n].name, sizeof out[n].name, "%s", a->ifa_name);
        inet_ntop(AF_INET, &((struct sockaddr_in *)a->ifa_addr)->sin_addr, out[n].addr, sizeof out[n].addr);
        n++;
    }
    freeifaddrs(list);
    return n;
}

/* NCCL_SOCKET_IFNAME's rule: comma-separated prefixes; "^" first excludes them; "=" first means exact names. */
static int selected(const char *spec, const char *name) {
    int exclude = spec[0] == '^', exact = spec[exclude] == '=';
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec + exclude + exact);
    int hit = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (exact ? !strcmp(name, tok) : !strncmp(name, tok, strlen(tok))) hit = 1;
    return exclude ? !hit : hit;
}

/* The interface NCCL's bootstrap would pick; -1 when none fits. */
static int nccl_choice(const Iface *f, int n) {
    const char *spec = getenv("NCCL_SOCKET_IFNAME");
    if (spec && spec[0]) {
        for (int i = 0; i < n; i++) if (selected(spec, f[i].name)) return i;
        return -1;
    }
    for (int i = 0; i < n; i++) if (!strncmp(f[i].name, "ib", 2)) return i;
    for (int i = 0; i < n; i++) if (strncmp(f[i].name, "docker", 6) && strncmp(f[i].name, "lo", 2)) return i;
    for (int i = 0; i < n; i++) if (!strncmp(f[i].name, "docker", 6)) return i;
    for (int i = 0; i < n; i++) if (!strncmp(f[i].name, "lo", 2)) return i;
    return -1;
}

static double link_speed(const char *iface) {   /* /sys/class/net/IF/speed: Mb/s, -1 or missing when unknown */
    char path[128];
    snprintf(path, sizeof path, "/sys/class/net/%.32s/speed", iface);
    FILE *f = fopen(path, "r");
    long mbps = -1;
    if (f) { if (fscanf(f, "%ld", &mbps) != 1) mbps = -1; fclose(f); }
    return mbps > 0 ? mbps / 8000.0 : 0;
}

int doctor_hosts(const Comm *c, DoctorHost *hosts) {
    DoctorHost me = {0};
    gethostname(me.host, sizeof me.host - 1);
    if (launch_info()->hosts_on_one_gpu)   /* a test host of its own (comm/launch.h): named by its NCCL_HOSTID */
        snprintf(me.host, sizeof me.host, "%.40s", getenv("NCCL_HOSTID") ? getenv("NCCL_HOSTID") : "?");
    Iface f[16];
    int n = interfaces(f, 16), len = 0;
    for (int i = 0; i < n && len < (int)sizeof me.ifaces - 80; i++)
        len += snprintf(me.ifaces + len, sizeof me.ifaces - len, "%s%s %s", i ? ", " : "", f[i].name, f[i].addr);
    int k = nccl_choice(f, n);
    if (k >= 0) {
        snprintf(me.nccl_if, sizeof me.nccl_if, "%.31s", f[k].name);
        snprintf(me.nccl_addr, sizeof me.nccl_addr, "%.63s", f[k].addr);
        me.if_gbs = link_speed(f[k].name);
    }
    comm_allgather_host(c, GROUP_WORLD, &me, hosts, sizeof me);
    int distinct = 0;
    for (int r = 0; r < c->world_size; r++) {
        int seen = 0;
        for (int q = 0; q < r; q++) seen |= !strcmp(hosts[q].host, hosts[r].host);
        distinct += !seen;
    }
    return distinct;
}

/* ---- reaching rank 0 */

typedef struct {
    int port, n;
    char addr[MAX_ADDRS][64];
    char bind_error[160];       /* rank 0 could not listen where it should (NCCL_COMM_ID) */
} Target;
typedef struct {
    int ok[MAX_ADDRS];
    char result[MAX_ADDRS][96];
} Reach;

/* "host:port" -> an IPv4 address text and port; 0, or -1 with why in err */
static int parse_comm_id(const char *id, char *addr, size_t size, int *port, char *err, size_t err_size) {
    const char *colon = strrchr(id, ':');
    if (!colon || !colon[1]) { snprintf(err, err_size, "NCCL_COMM_ID='%.100s' is not host:port", id); return -1; }
    char host[256];
    snprintf(host, sizeof host, "%.*s", (int)(colon - id), id);
    double v;
    char why[256];
    if (option_number("port", colon + 1, 1, 65535, 1, &v, why, sizeof why) != 0) {
        snprintf(err, err_size, "NCCL_COMM_ID='%.60s': the %.60s", id, why);
        return -1;
    }
    *port = (int)v;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
    int e = getaddrinfo(host, NULL, &hints, &res);
    if (e != 0) { snprintf(err, err_size, "NCCL_COMM_ID host '%.60s' does not resolve: %.40s", host, gai_strerror(e)); return -1; }
    inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, addr, size);
    freeaddrinfo(res);
    return 0;
}

static int listen_on(const char *addr, int port, int *got_port, char *err, size_t err_size) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) { snprintf(err, err_size, "socket: %s", strerror(errno)); return -1; }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = addr ? inet_addr(addr) : htonl(INADDR_ANY);
    socklen_t len = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 4096) != 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        snprintf(err, err_size, "bind failed: %s", strerror(errno));
        close(fd);
        return -1;
    }
    *got_port = ntohs(sa.sin_port);
    return fd;
}

/* One TCP connect with a timeout, as NCCL's bootstrap does it; 1 and "ok in 0.2 ms", or 0 and the reason. */
static int try_connect(const char *addr, int port, double timeout_s, char *out, size_t size) {
    double t0 = now_seconds();
    int fd = socket(AF_INET, SOCK_STREAM, 0), err = 0;
    if (fd < 0) { snprintf(out, size, "socket: %s", strerror(errno)); return 0; }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = inet_addr(addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (errno != EINPROGRESS) err = errno;
        else {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int r = poll(&p, 1, (int)(timeout_s * 1000));
            if (r == 0) { close(fd); snprintf(out, size, "connect timed out after %.0f s", timeout_s); return 0; }
            socklen_t len = sizeof err;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
    }
    close(fd);
    if (err) snprintf(out, size, "%s", strerror(err));
    else snprintf(out, size, "ok in %.1f ms", 1e3 * (now_seconds() - t0));
    return err == 0;
}

void doctor_network(const Comm *c, const DoctorHost *hosts, int n_hosts, double timeout_s, int gpu, DoctorTally *t) {
    int n = c->world_size, lead = c->rank == 0;
    const char *comm_id = getenv("NCCL_COMM_ID");
    Target tg = {0};
    int fd = -1;
    if (lead) {   /* where every rank must connect: NCCL_COMM_ID, or rank 0's NCCL address and its other addresses */
        char addr[64] = "";
        int port = 0;
        if (comm_id && comm_id[0]) {
            if (parse_comm_id(comm_id, addr, sizeof addr, &port, tg.bind_error, sizeof tg.bind_error) == 0) {
                snprintf(tg.addr[tg.n++], 64, "%s", addr);
                tg.port = port;
                fd = listen_on(addr, port, &tg.port, tg.bind_error, sizeof tg.bind_error);
            }
        } else {
            fd = listen_on(NULL, 0, &tg.port, tg.bind_error, sizeof tg.bind_error);
            if (hosts[0].nccl_addr[0]) snprintf(tg.addr[tg.n++], 64, "%s", hosts[0].nccl_addr);
            Iface f[16];
            int m = interfaces(f, 16);
            for (int i = 0; i < m && tg.n < MAX_ADDRS; i++)
                if (strcmp(f[i].addr, hosts[0].nccl_addr) && (strncmp(f[i].name, "lo", 2) || n_hosts == 1))
                    snprintf(tg.addr[tg.n++], 64, "%s", f[i].addr);
        }
    }
    comm_broadcast_host(c, GROUP_WORLD, &tg, sizeof tg, 0);
    Reach mine = {0}, *all = callocCheck(n, sizeof(Reach));
    for (int i = 0; i < tg.n; i++) mine.ok[i] = try_connect(tg.addr[i], tg.port, timeout_s, mine.result[i], sizeof mine.result[i]);
    comm_allgather_host(c, GROUP_WORLD, &mine, all, sizeof mine);
    if (fd >= 0) close(fd);
    if (!lead) { free(all); return; }

    printf("\nhosts and network\n");
    for (int r = 0; r < n; r++) {
        int first = 1;
        for (int q = 0; q < r; q++) first &= strcmp(hosts[q].host, hosts[r].host) != 0;
        if (!first) continue;
        int ranks = 0;
        for (int q = 0; q < n; q++) ranks += !strcmp(hosts[q].host, hosts[r].host);
        printf("  host %s: %d rank(s) | interfaces %s\n", hosts[r].host, ranks, hosts[r].ifaces[0] ? hosts[r].ifaces : "none (IPv4)");
        if (hosts[r].nccl_if[0]) {
            printf("      NCCL's bootstrap would use %s (%s)%s", hosts[r].nccl_if, hosts[r].nccl_addr,
                   getenv("NCCL_SOCKET_IFNAME") ? ", chosen by NCCL_SOCKET_IFNAME" : ", its default choice");
            if (hosts[r].if_gbs > 0) printf(", %.1f GB/s link", hosts[r].if_gbs);
            printf("\n");
        } else {
            const char *spec = getenv("NCCL_SOCKET_IFNAME");
            if (gpu) {
                doctor_problem(t, "on host %s NCCL_SOCKET_IFNAME=%s matches no interface: NCCL stops with \"Bootstrap : no socket "
                                  "interface found\"", hosts[r].host, spec ? spec : "");
                const ErrorHint *h = error_lookup("no socket interface found");
                if (h) printf("      cause: %s\n      fix: %s\n", h->cause, h->fix);
            }
            else doctor_warning(t, "on host %s NCCL_SOCKET_IFNAME=%s matches no interface (only NCCL runs would fail)", hosts[r].host,
                                spec ? spec : "");
        }
    }
    if (tg.bind_error[0]) {
        doctor_problem(t, "rank 0 cannot listen at %s: %s", comm_id && comm_id[0] ? comm_id : "a free port", tg.bind_error);
        const ErrorHint *h = error_lookup(tg.bind_error);
        if (h) printf("      cause: %s\n      fix: %s\n", h->cause, h->fix);
    }
    printf("  rank 0 listens on port %d; every rank connects to %s within %.0f s:\n", tg.port,
           comm_id && comm_id[0] ? "NCCL_COMM_ID's address" : "each of rank 0's addresses", timeout_s);
    int unreached = 0;
    for (int r = 0; r < n; r++) {
        printf("    rank %d (%s):", r, hosts[r].host);
        for (int i = 0; i < tg.n; i++) printf("%s %s:%d %s", i ? " |" : "", tg.addr[i], tg.port, all[r].result[i]);
        printf("%s\n", tg.n ? "" : " rank 0 has no address to offer");
        if (tg.n && !all[r].ok[0]) {   /* the address NCCL's bootstrap uses is the first */
            unreached++;
            doctor_problem(t, "rank %d (host %s) cannot reach rank 0 at %s:%d: %s", r, hosts[r].host, tg.addr[0], tg.port, all[r].result[0]);
            const ErrorHint *h = error_lookup(all[r].result[0]);
            if (h && unreached == 1) printf("      cause: %s\n      fix: %s\n", h->cause, h->fix);
        }
    }
    if (!unreached && tg.n && !tg.bind_error[0]) printf("  verdict: every rank reaches rank 0's bootstrap port\n");
    free(all);
}
