// What libnetfilter-conntrack's filtered flush (NFCT_Q_FLUSH_FILTER with a mark/mask filter) deletes.
//   ct_flush_filter <mark> <mask>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
int main(int argc, char** argv) {
  struct nfct_handle* h = nfct_open(CONNTRACK, 0);
  struct nfct_filter_dump* f = nfct_filter_dump_create();
  struct nfct_filter_dump_mark m = {.val = strtoul(argv[1], 0, 0), .mask = strtoul(argv[2], 0, 0)};
  nfct_filter_dump_set_attr(f, NFCT_FILTER_DUMP_MARK, &m);
  nfct_filter_dump_set_attr_u8(f, NFCT_FILTER_DUMP_L3NUM, AF_INET);
  int r = nfct_query(h, NFCT_Q_FLUSH_FILTER, f);
  printf("flush filter rc=%d\n", r);
  nfct_filter_dump_destroy(f);
  nfct_close(h);
  return r == 0 ? 0 : 1;
}
