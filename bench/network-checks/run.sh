#!/usr/bin/env bash
# Checks behind docs/design/network.md (issue 10), run in a private network namespace (nothing
# here touches the host's own rules or conntrack table):
#   - the design's nftables table parses and loads in this nft (meters, concatenated intervals,
#     ifname maps, dnat to a concatenated map);
#   - a libnftables buffer of several commands is one transaction;
#   - what one slot's Narrow and Reset cost through libnftables, and as raw libnftnl batches with
#     a verdict-map swap or a data-set element, at 8, 64 and 256 slots;
#   - what libnetfilter-conntrack's filtered flush deletes, against conntrack's dump-and-delete;
#   - a slot's veth pair made from inside its namespace with the peer placed in the host's by the
#     same request (libnl), and where IPv6 address generation can be turned off on the host end.
# Needs root and: nftables libnftables-dev libnftnl-dev libmnl-dev conntrack
#   libnetfilter-conntrack-dev libnl-route-3-dev netcat-openbsd.
#   sudo bash bench/network-checks/run.sh
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
w=$(mktemp -d /tmp/sandpool-netcheck-XXXXXX)
trap 'rm -rf "$w"' EXIT
cc -O2 -Wall -o "$w/libnftables_cost" "$HERE/libnftables_cost.c" -lnftables
cc -O2 -Wall -o "$w/nftnl_cost" "$HERE/nftnl_cost.c" -lnftnl -lmnl
cc -O2 -Wall -o "$w/ct_flush_filter" "$HERE/ct_flush_filter.c" -lnetfilter_conntrack
cc -O2 -Wall -o "$w/veth_setup" "$HERE/veth_setup.c" $(pkg-config --cflags --libs libnl-route-3.0)
echo "nft: $(nft --version); kernel $(uname -r)"
for s in 8 64 256; do
  for how in vmap set; do python3 "$HERE/ruleset.py" "$s" "$how" > "$w/t$s-$how.nft"; done
  unshare -n sh -c "nft -c -f '$w/t$s-vmap.nft' && '$w/libnftables_cost' '$w/t$s-vmap.nft' $s"
  for how in vmap set; do unshare -n sh -c "nft -f '$w/t$s-$how.nft' && '$w/nftnl_cost' $s $how"; done
done
# Conntrack: three UDP flows marked as slot 1 (upper 16 bits 0x0001), three as slot 2; delete slot 1's.
ct() {
  unshare -n bash -c "
    ip link set lo up
    nft add table inet t
    nft add chain inet t out '{ type filter hook output priority 0; }'
    nft add rule inet t out udp dport 7001 ct mark set 0x00010005
    nft add rule inet t out udp dport 7002 ct mark set 0x00020005
    for p in 7001 7002; do for s in 1 2 3; do echo x | timeout 0.2 nc -u -w0 -p \$((40000+s+p-7000)) 127.0.0.1 \$p || true; done; done
    before=\$(conntrack -L 2>/dev/null | grep -c 'dport=700')
    $1 >/dev/null 2>&1
    echo \"$2: \$before flows before, after: slot 1 \$(conntrack -L 2>/dev/null | grep -c 'dport=7001'), slot 2 \$(conntrack -L 2>/dev/null | grep -c 'dport=7002')\""
}
ct "$w/ct_flush_filter 0x10000 0xffff0000" "NFCT_Q_FLUSH_FILTER mark 0x10000/0xffff0000"
ct "conntrack -D -m 0x10000/0xffff0000" "conntrack -D -m 0x10000/0xffff0000 (dump, delete each)"
for how in at-create change; do
  unshare -n "$w/veth_setup" 32 "$how" \
    'echo "  host ends: $(ip -br link | grep -c spab3) links, $(ip -6 addr | grep -c inet6) IPv6 addresses, $(ip -4 addr | grep -c "inet 10.200") IPv4"'
done
