# The table of docs/design/network.md 3.1 for N slots of one template, as nft text (stdout), with
# both ways of switching a slot's policy that bench/network-checks measures: the `mode` verdict map
# of the first sketch and the `narrowed` data set that replaced it (section 3.2).
#   python3 ruleset.py 64 [vmap|set] > t64.nft     (set: the default)
import sys
N = int(sys.argv[1]) if len(sys.argv) > 1 else 64
SWITCH = sys.argv[2] if len(sys.argv) > 2 else "set"
tag = "ab3"
L = []
a = L.append
a(f"table inet sandpool_{tag} {{")
a("  set never4 { type ipv4_addr; flags interval; elements = { 0.0.0.0/8, 10.0.0.0/8, 100.64.0.0/10, 127.0.0.0/8, 169.254.0.0/16, 172.16.0.0/12, 192.0.0.0/24, 192.168.0.0/16, 198.18.0.0/15, 224.0.0.0/4, 240.0.0.0/4 } }")
a("  set exempt4 { type ipv4_addr; flags interval; }")
a("  set slot_src { type ifname . ipv4_addr; }")
a("  set slot_gw { type ifname . ipv4_addr; }")
a("  map mode { type ifname : verdict; }")
a("  set narrowed { type ifname; }")
a("  map host_ref { type ifname : verdict; }")
a("  map slot_entry { type ifname : verdict; }")
a("  set conns4 { type ipv4_addr; size 65536; flags dynamic; }")
a("  set rate4 { type ipv4_addr; size 65536; flags dynamic,timeout; timeout 60s; }")
a("  set dnsrate4 { type ipv4_addr; size 65536; flags dynamic,timeout; timeout 60s; }")
a("  set exposed4 { type ipv4_addr . inet_service; }")
a("  map hostport4 { type inet_service : ipv4_addr . inet_service; }")
a("  set tcidr_py { type ipv4_addr . inet_service; flags interval; elements = { 198.51.100.0/24 . 443, 203.0.113.7 . 0-65535 } }")
a("  set tdeny_py { type ipv4_addr; flags interval; }")
a("  counter spoofed { }")
a("  counter host_to_slot { }")
for n in range(N):
    for c in ("policy", "never", "limit", "host"):
        a(f"  counter {c}{n} {{ }}")
    a(f"  set jcidr{n} {{ type ipv4_addr . inet_service; flags interval; }}")
    a(f"  set jdeny{n} {{ type ipv4_addr; flags interval; }}")
    a(f"  set dyn{n} {{ type ipv4_addr . inet_service; flags timeout; }}")
    a(f"  set dynany{n} {{ type ipv4_addr; flags timeout; }}")
a(f'  chain raw_pre {{ type filter hook prerouting priority raw; iifname "sp{tag}*" udp dport 53 notrack; }}')
a(f'  chain raw_out {{ type filter hook output priority raw; oifname "sp{tag}*" udp sport 53 notrack; }}')
a(f'  chain nat_pre {{ type nat hook prerouting priority dstnat; iifname != "sp{tag}*" fib daddr type local dnat ip to tcp dport map @hostport4; }}')
a(f'  chain nat_out {{ type nat hook output priority -100; fib daddr type local dnat ip to tcp dport map @hostport4; }}')
a(f'  chain nat_post {{ type nat hook postrouting priority srcnat; iifname "sp{tag}*" oifname != "sp{tag}*" masquerade; }}')
a(f'  chain input {{ type filter hook input priority filter; policy accept; iifname "sp{tag}*" jump from_slot_to_host; }}')
a("  chain from_slot_to_host {")
a("    meta nfproto ipv6 drop")
a("    iifname . ip saddr != @slot_src counter name spoofed drop")
a("    ct state established,related accept")
a("    iifname . ip daddr @slot_gw meta l4proto { udp, tcp } th dport 53 update @dnsrate4 { ip saddr limit rate over 100/second burst 200 packets } drop")
a("    iifname . ip daddr @slot_gw meta l4proto { udp, tcp } th dport 53 accept")
a("    iifname vmap @host_ref")
a("  }")
a(f'  chain forward {{ type filter hook forward priority filter; policy accept; iifname "sp{tag}*" jump from_slot; oifname "sp{tag}*" jump to_slot; }}')
a("  chain from_slot {")
a("    meta nfproto ipv6 drop")
a("    iifname . ip saddr != @slot_src counter name spoofed drop")
a("    ct state established,related accept")
a("    ct state invalid drop")
a("    iifname vmap @slot_entry")
a("  }")
for n in range(N):
    a(f"  chain r{n} {{ counter name policy{n} reject with icmpx admin-prohibited; }}")
    a(f"  chain h{n} {{ counter name host{n} reject with icmpx admin-prohibited; }}")
    a(f"  chain t{n} {{ ip daddr @tdeny_py goto r{n}; ip daddr . th dport @tcidr_py accept; ip daddr . th dport @dyn{n} accept; ip daddr @dynany{n} accept; goto r{n}; }}")
    a(f"  chain j{n} {{ ip daddr @jdeny{n} goto r{n}; ip daddr . th dport @jcidr{n} accept; ip daddr . th dport @dyn{n} accept; ip daddr @dynany{n} accept; goto r{n}; }}")
    a(f"  chain s{n} {{")
    a(f"    ct mark set ct mark and 0x0000ffff or 0x{(n+1):04x}0000")
    a(f"    ip daddr @never4 ip daddr != @exempt4 counter name never{n} reject with icmpx admin-prohibited")
    a(f"    meta l4proto {{ udp, tcp }} th dport {{ 53, 853 }} counter name never{n} reject with icmpx admin-prohibited")
    a(f"    add @conns4 {{ ip saddr ct count over 256 }} counter name limit{n} reject with icmpx admin-prohibited")
    a(f"    update @rate4 {{ ip saddr limit rate over 50/second burst 100 packets }} counter name limit{n} drop")
    a(f"    meta l4proto != {{ tcp, udp }} goto r{n}")
    if SWITCH == "vmap":
        a(f"    iifname vmap @mode")
    else:
        a(f"    iifname @narrowed goto j{n}")
        a(f"    goto t{n}")
    a("  }")
a("  chain to_slot { ct state established,related accept; ct status dnat ip daddr . tcp dport @exposed4 accept; drop; }")
a(f'  chain output {{ type filter hook output priority filter; policy accept; oifname "sp{tag}*" jump host_to_slot; }}')
a("  chain host_to_slot {")
a("    ct state established,related accept")
a("    oifname . ip saddr @slot_gw udp sport 53 accept")
a("    meta skuid 65534 ip daddr . tcp dport @exposed4 accept")
a("    ct status dnat ip daddr . tcp dport @exposed4 accept")
a("    counter name host_to_slot drop")
a("  }")
a("}")
# slot elements
for n in range(N):
    ifn = f"sp{tag}{n}"
    base = 0x0ac80000 + 2 * n
    gw = f"10.200.{(2*n)>>8}.{(2*n)&255}"; sb = f"10.200.{(2*n+1)>>8}.{(2*n+1)&255}"
    a(f'add element inet sandpool_{tag} slot_src {{ "{ifn}" . {sb} }}')
    a(f'add element inet sandpool_{tag} slot_gw {{ "{ifn}" . {gw} }}')
    a(f'add element inet sandpool_{tag} slot_entry {{ "{ifn}" : jump s{n} }}')
    a(f'add element inet sandpool_{tag} host_ref {{ "{ifn}" : goto h{n} }}')
    a(f'add element inet sandpool_{tag} mode {{ "{ifn}" : jump t{n} }}')
a(f"add element inet sandpool_{tag} hostport4 {{ 30007 : 10.200.0.15 . 3000 }}")
a(f"add element inet sandpool_{tag} exposed4 {{ 10.200.0.15 . 3000 }}")
print("\n".join(L))
