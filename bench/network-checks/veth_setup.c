// A slot's veth pair made from inside the slot's new network namespace, its peer placed in the
// host namespace in the same request (docs/design/network.md 2.3, step 3: rtnl_link_set_ns_fd on
// the peer), then addressed and up on both sides, IPv6 address generation off on the host end;
// timed per slot. Run as root in a private namespace standing for the host:
//   veth_setup <pairs> [at-create|change] [shell command run while the slots exist]
#define _GNU_SOURCE
#include <fcntl.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/inet6.h>
#include <netlink/route/link/veth.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
static int addr(struct nl_sock* s, int ifindex, const char* cidr) {
  struct rtnl_addr* a = rtnl_addr_alloc();
  struct nl_addr* local;
  nl_addr_parse(cidr, AF_INET, &local);
  rtnl_addr_set_ifindex(a, ifindex);
  rtnl_addr_set_local(a, local);
  int e = rtnl_addr_add(s, a, 0);
  nl_addr_put(local);
  rtnl_addr_put(a);
  return e;
}
static int up(struct nl_sock* s, const char* name) {
  struct rtnl_link *old, *chg = rtnl_link_alloc();
  int e = rtnl_link_get_kernel(s, 0, name, &old);
  if (e < 0) return e;
  rtnl_link_set_flags(chg, IFF_UP);
  e = rtnl_link_change(s, old, chg, 0);
  rtnl_link_put(old);
  rtnl_link_put(chg);
  return e;
}
// In a child: a new netns (the slot's), the pair made from there, peer into the host ns.
static int gen_mode_at_create = 0;
static int hold[2];
static int slot(int n, int host_ns, double* ms) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    double t0 = now_ms();
    struct nl_sock* host = nl_socket_alloc();  // opened before unshare: stays in the host ns
    nl_connect(host, NETLINK_ROUTE);
    if (unshare(CLONE_NEWNET) != 0) _exit(2);
    struct nl_sock* in = nl_socket_alloc();
    nl_connect(in, NETLINK_ROUTE);
    char peer_name[16];
    snprintf(peer_name, sizeof peer_name, "spab3%d", n);
    struct rtnl_link* veth = rtnl_link_veth_alloc();
    rtnl_link_set_name(veth, "eth0");
    struct rtnl_link* peer = rtnl_link_veth_get_peer(veth);
    rtnl_link_set_name(peer, peer_name);
    rtnl_link_set_ns_fd(peer, host_ns);
    if (gen_mode_at_create) rtnl_link_inet6_set_addr_gen_mode(peer, 1 /* IN6_ADDR_GEN_MODE_NONE */);
    int e = rtnl_link_add(in, veth, NLM_F_CREATE | NLM_F_EXCL);
    if (e < 0) { fprintf(stderr, "veth add: %s\n", nl_geterror(e)); _exit(3); }
    struct rtnl_link* h;
    if ((e = rtnl_link_get_kernel(host, 0, peer_name, &h)) < 0) { fprintf(stderr, "peer not in host ns: %s\n", nl_geterror(e)); _exit(4); }
    char gw[32], sb[32];
    snprintf(gw, sizeof gw, "10.200.%d.%d/31", (2 * n) >> 8, (2 * n) & 255);
    snprintf(sb, sizeof sb, "10.200.%d.%d/31", (2 * n + 1) >> 8, (2 * n + 1) & 255);
    if (!gen_mode_at_create) {
      // IPv6 address generation off on the host end by a change of its own, before it goes up.
      struct rtnl_link* chg = rtnl_link_alloc();
      rtnl_link_inet6_set_addr_gen_mode(chg, 1 /* IN6_ADDR_GEN_MODE_NONE */);
      if ((e = rtnl_link_change(host, h, chg, 0)) < 0) { fprintf(stderr, "addr_gen_mode: %s\n", nl_geterror(e)); _exit(9); }
      rtnl_link_put(chg);
    }
    if (addr(host, rtnl_link_get_ifindex(h), gw) < 0 || up(host, peer_name) < 0) _exit(5);
    struct rtnl_link* s;
    rtnl_link_get_kernel(in, 0, "eth0", &s);
    if (addr(in, rtnl_link_get_ifindex(s), sb) < 0 || up(in, "eth0") < 0 || up(in, "lo") < 0) _exit(6);
    double t = now_ms() - t0;
    if (write(p[1], &t, sizeof t) != sizeof t) _exit(7);
    // Stay, holding the namespace, until the parent has looked.
    char c;
    close(hold[1]);
    if (read(hold[0], &c, 1) < 0) _exit(8);
    _exit(0);
  }
  close(p[1]);
  int r = read(p[0], ms, sizeof *ms) == sizeof *ms ? 0 : -1;
  close(p[0]);
  return r < 0 ? -pid : pid;
}
int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 32;
  gen_mode_at_create = argc > 2 && strcmp(argv[2], "at-create") == 0;
  if (pipe(hold) != 0) return 1;
  int host_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  double* t = malloc(sizeof(double) * n);
  int ok = 0;
  for (int i = 0; i < n; i++) {
    if (slot(i, host_ns, &t[i]) > 0) ok++;
    else { fprintf(stderr, "slot %d failed\n", i); return 1; }
  }
  qsort(t, n, sizeof(double), cmp);
  printf("%d veth slots made from inside (peer placed by IFLA_NET_NS_FD), IPv6 generation off %s: per slot p50 %.2f ms, p90 %.2f ms\n",
         ok, gen_mode_at_create ? "in the create request" : "by a change before up", t[n / 2], t[n * 9 / 10]);
  fflush(stdout);
  // The slots stay while this runs: show what the host ends have, then let them go.
  if (argc > 3) { int r = system(argv[3]); (void)r; }
  close(hold[1]);
  while (wait(NULL) > 0) {
  }
  return 0;
}
