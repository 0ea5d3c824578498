// Narrow and Reset of one slot (docs/design/network.md 3.2) as one raw nftables batch each, built
// with libnftnl and sent with libmnl (no ruleset cache), switching the slot's policy either by
// swapping its element of the `mode` verdict map (`vmap`) or by adding it to / removing it from the
// `narrowed` data set (`set`).   nftnl_cost <slots> vmap|set
#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnftnl/set.h>
#include <libnftnl/batch.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static const char* T = "sandpool_ab3";
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
static uint32_t seq = 1;
static void put_set_msg(struct mnl_nlmsg_batch* b, struct nftnl_set* s, int type, int flags) {
  struct nlmsghdr* nlh = nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(b), type, NFPROTO_INET, flags | NLM_F_ACK, seq++);
  nftnl_set_elems_nlmsg_build_payload(nlh, s);
  mnl_nlmsg_batch_next(b);
}
static struct nftnl_set* set_of(const char* name) {
  struct nftnl_set* s = nftnl_set_alloc();
  nftnl_set_set_str(s, NFTNL_SET_TABLE, T);
  nftnl_set_set_str(s, NFTNL_SET_NAME, name);
  return s;
}
static void flush(struct mnl_nlmsg_batch* b, const char* name) {
  struct nftnl_set* s = set_of(name);
  put_set_msg(b, s, NFT_MSG_DELSETELEM, 0);
  nftnl_set_free(s);
}
// One element keyed by an interface name, added (`type` NFT_MSG_NEWSETELEM) or deleted; with a
// `chain`, its verdict is a jump there (a verdict map's element).
static void ifname_elem(struct mnl_nlmsg_batch* b, const char* set, const char* ifn, int type, const char* chain) {
  char key[16] = {0};
  strncpy(key, ifn, sizeof key - 1);
  struct nftnl_set* s = set_of(set);
  struct nftnl_set_elem* e = nftnl_set_elem_alloc();
  nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, sizeof key);
  if (chain != NULL) {
    nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, NFT_JUMP);
    nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, chain);
  }
  nftnl_set_elem_add(s, e);
  put_set_msg(b, s, type, type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0);
  nftnl_set_free(s);
}
static void narrowed(struct mnl_nlmsg_batch* b, const char* ifn, int add) {
  ifname_elem(b, "narrowed", ifn, add ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, NULL);
}
// A verdict map's element is replaced by a delete and an add in one batch.
static void mode(struct mnl_nlmsg_batch* b, const char* ifn, const char* chain) {
  ifname_elem(b, "mode", ifn, NFT_MSG_DELSETELEM, NULL);
  ifname_elem(b, "mode", ifn, NFT_MSG_NEWSETELEM, chain);
}
static void cidr(struct mnl_nlmsg_batch* b, const char* set, const char* lo, const char* hi, uint16_t plo, uint16_t phi) {
  uint32_t k[2] = {0}, ke[2] = {0};
  inet_pton(AF_INET, lo, &k[0]); inet_pton(AF_INET, hi, &ke[0]);
  uint16_t p = htons(plo), pe = htons(phi);
  memcpy(&k[1], &p, 2); memcpy(&ke[1], &pe, 2);
  struct nftnl_set* s = set_of(set);
  struct nftnl_set_elem* e = nftnl_set_elem_alloc();
  nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, k, sizeof k);
  nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY_END, ke, sizeof ke);
  nftnl_set_elem_add(s, e);
  put_set_msg(b, s, NFT_MSG_NEWSETELEM, NLM_F_CREATE);
  nftnl_set_free(s);
}
static int use_vmap = 0;
static int run(struct mnl_socket* nl, int narrow) {
  static char buf[1 << 16];
  struct mnl_nlmsg_batch* b = mnl_nlmsg_batch_start(buf, sizeof buf);
  nftnl_batch_begin(mnl_nlmsg_batch_current(b), seq++); mnl_nlmsg_batch_next(b);
  uint32_t first = seq;
  flush(b, "jcidr7"); flush(b, "jdeny7");
  if (narrow) { cidr(b, "jcidr7", "198.51.100.10", "198.51.100.10", 443, 443); cidr(b, "jcidr7", "198.51.100.0", "198.51.100.15", 80, 80); if (use_vmap) mode(b, "spab37", "j7"); else narrowed(b, "spab37", 1); }
  else { flush(b, "dyn7"); flush(b, "dynany7"); if (use_vmap) mode(b, "spab37", "t7"); else narrowed(b, "spab37", 0); }
  uint32_t last = seq;
  nftnl_batch_end(mnl_nlmsg_batch_current(b), seq++); mnl_nlmsg_batch_next(b);
  if (mnl_socket_sendto(nl, mnl_nlmsg_batch_head(b), mnl_nlmsg_batch_size(b)) < 0) { perror("send"); return -1; }
  mnl_nlmsg_batch_stop(b);
  // one ack per message
  int acks = 0, err = 0; char rb[MNL_SOCKET_BUFFER_SIZE];
  while (acks < (int)(last - first)) {
    int n = mnl_socket_recvfrom(nl, rb, sizeof rb);
    if (n <= 0) { perror("recv"); return -1; }
    for (struct nlmsghdr* h = (struct nlmsghdr*)rb; mnl_nlmsg_ok(h, n); h = mnl_nlmsg_next(h, &n)) {
      if (h->nlmsg_type == NLMSG_ERROR) { struct nlmsgerr* e = mnl_nlmsg_get_payload(h); if (e->error) err = e->error; acks++; }
    }
    if (err) break;
  }
  return err;
}
int main(int argc, char** argv) {
  use_vmap = argc > 2 && strcmp(argv[2], "vmap") == 0;
  struct mnl_socket* nl = mnl_socket_open(NETLINK_NETFILTER);
  mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID);
  int n = 2000; double* a = malloc(sizeof(double) * n); double* r = malloc(sizeof(double) * n);
  for (int i = 0; i < n; i++) {
    double t0 = now_ms(); int e1 = run(nl, 1); double t1 = now_ms(); int e2 = run(nl, 0); double t2 = now_ms();
    if (e1 || e2) { fprintf(stderr, "error %d %d\n", e1, e2); return 1; }
    a[i] = t1 - t0; r[i] = t2 - t1;
  }
  qsort(a, n, sizeof(double), cmp); qsort(r, n, sizeof(double), cmp);
  printf("slots %s, libnftnl batch, %s: narrow p50 %.3f p90 %.3f ms; reset p50 %.3f p90 %.3f ms\n", argv[1], use_vmap ? "verdict map swap" : "data set element", a[n/2], a[n*9/10], r[n/2], r[n*9/10]);
  run(nl, 1);
  return 0;
}
