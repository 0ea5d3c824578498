#include "worker/sandbox/conntrack_flush.h"

#include <arpa/inet.h>
#include <libnetfilter_conntrack/libnetfilter_conntrack.h>
#include <sys/socket.h>

#include <vector>

namespace sandpool {
namespace {

struct Matches {
  uint32_t src_be;
  std::vector<struct nf_conntrack*> found;
};

int Collect(enum nf_conntrack_msg_type, struct nf_conntrack* ct, void* arg) {
  auto* m = static_cast<Matches*>(arg);
  if (nfct_get_attr_u8(ct, ATTR_ORIG_L3PROTO) == AF_INET && nfct_get_attr_u32(ct, ATTR_ORIG_IPV4_SRC) == m->src_be) {
    m->found.push_back(nfct_clone(ct));
  }
  return NFCT_CB_CONTINUE;
}

}  // namespace

Status FlushConntrackFrom(uint32_t sandbox_addr, uint64_t* removed) {
  struct nfct_handle* h = nfct_open(CONNTRACK, 0);
  if (h == nullptr) return ErrnoStatus("nfct_open");
  Matches m{htonl(sandbox_addr), {}};
  nfct_callback_register(h, NFCT_T_ALL, Collect, &m);
  uint32_t family = AF_INET;
  int rc = nfct_query(h, NFCT_Q_DUMP, &family);
  Status s = rc == 0 ? Status::Ok() : ErrnoStatus("conntrack dump");
  nfct_callback_unregister(h);
  uint64_t n = 0;
  for (struct nf_conntrack* ct : m.found) {
    if (nfct_query(h, NFCT_Q_DESTROY, ct) == 0) ++n;  // gone meanwhile: fine
    nfct_destroy(ct);
  }
  nfct_close(h);
  if (removed) *removed = n;
  return s;
}

}  // namespace sandpool
