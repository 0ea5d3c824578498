"""Network templates end to end (docs/design/network.md; issue 10, CIDR egress): a real daemon in
a private "test host" network namespace, its sandboxes' links, its nftables table, and a fake
internet (tests/support/fake_internet.py). No packet leaves this machine: the test host has no
default route, and every refusal is checked against a second fake host that is not allowed.

Longer than 800 lines: every test here uses the same configuration (CONF), daemon start-up in the
test host and the fake internet fixture defined below; a split by guarantee (egress, resolver,
exposure and preview, narrowing) would first move those into tests/support.
"""

import json
import os
import secrets
import subprocess
import sys

import pytest

from fake_internet import ALLOWED, DENIED, DNS_SERVER, HOST_UPLINK, IN_RANGE, OTHER, PRIVATE, FakeInternet
from sandpool_harness import SANDPOOL_CLI, Daemon, new_id, result, submit, wait_for, wait_results

if subprocess.run(["which", "nft"], capture_output=True).returncode != 0:
    pytest.skip("the nft command (package nftables) checks the table", allow_module_level=True)

METRICS = "127.0.0.1:19464"  # inside the test host's namespace: no clash with anything else

CONF = f"""[template web]
runtime = sh
workers = 1
egress = {ALLOWED}/32:80 203.0.113.0/24
egress = registry.npm.example:80 www.npm.example:80 *.cdn.example:80 rebind.npm.example meta.npm.example hostaddr.npm.example
egress-deny = {DENIED} evil.cdn.example
expose = on
"""

# Runs in the sandbox: one line per target, "<target> ok <last line>" or "<target> <errno name>".
# "gw" is the sandbox's gateway (the host end of its link).
PROBE = r"""
import errno, socket, struct, sys
routes = [l.split() for l in open("/proc/net/route").read().splitlines()[1:]]
gw = [socket.inet_ntoa(struct.pack("<I", int(r[2], 16))) for r in routes if r[1] == "00000000"]
for spec in sys.argv[1:]:
    host, port = spec.rsplit(":", 1)
    host = {"gw": gw[0] if gw else "none"}.get(host, host)
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(20)
    try:
        s.connect((host.strip("[]"), int(port)))
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = s.recv(4096).decode(errors="replace").splitlines()
        print(spec, "ok", data[-1] if data else "")
    except socket.timeout:
        print(spec, "TIMEOUT")
    except OSError as e:
        print(spec, errno.errorcode.get(e.errno, str(e.errno)))
    finally:
        s.close()
"""


@pytest.fixture
def internet(tmp_path):
    net = FakeInternet(tmp_path)
    yield net
    net.close()


def start(redis_server, internet, tmp_path, conf=CONF, extra=(), env=None, conf_name="sandpool.conf"):
    conf_path = tmp_path / conf_name
    conf_path.write_text(conf)
    d = Daemon(redis_server.url, workers=1, env=env,
               extra=["--config", str(conf_path), "--net", "on", "--net-ip-forward", "set",
                      "--net-dns-upstream", DNS_SERVER, "--net-preview-listen", "0.0.0.0:0",
                      "--net-preview-url", f"http://{HOST_UPLINK}:{{port}}/", "--net-expose-ports", "40000-40099", *extra])
    d.args = internet.in_host(d.args)
    d.args[d.args.index("--metrics-addr") + 1] = METRICS
    d.start(wait_ready=redis_server.client())
    return d


def stop(d: Daemon, failed: bool = False) -> None:
    d.stop()
    d.cleanup(keep_log=failed)


def run(redis_server, template, line, check=True):
    p = subprocess.run([SANDPOOL_CLI, "--redis", redis_server.url, "run", "--template", template, "--shell", line],
                       capture_output=True, timeout=120)
    if check:
        assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stdout.decode()


def probe(redis_server, template, *targets):
    script = PROBE.replace("'", "'\\''")
    out = run(redis_server, template, f"python3 -c '{script}' " + " ".join(targets))
    return dict(line.split(" ", 1) for line in out.splitlines())


def metrics(internet) -> str:
    p = subprocess.run(internet.in_host([sys.executable, "-c",
                                         f"import urllib.request; print(urllib.request.urlopen('http://{METRICS}/metrics').read().decode())"]),
                       capture_output=True, text=True, timeout=30)
    return p.stdout


def refusals(internet, reason: str) -> int:
    prefix = f'sandpool_net_connections_refused_total{{reason="{reason}",template="web"}} '
    for line in metrics(internet).splitlines():
        if line.startswith(prefix):
            return int(float(line[len(prefix):]))
    return 0


def test_allowed_ranges_are_reached_and_everything_else_is_refused_at_once(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path)
    try:
        assert "sandpool_" in internet.nft("list", "tables")
        # The template's policy is in the daemon's record.
        import msgpack
        record = msgpack.unpackb(redis_server.client().get(f"sandpool:daemon:{d.consumer}"))
        assert record["templates"]["web"]["network"]["egress"]["deny"] == [DENIED + "/32", "evil.cdn.example"], record
        assert record["templates"]["web"]["expose"] is True
        got = probe(redis_server, "web",
                    f"{ALLOWED}:80",       # allowed address and port
                    f"{ALLOWED}:8080",     # allowed address, another port
                    f"{OTHER}:80",         # a fake internet host nobody allowed
                    f"{HOST_UPLINK}:6379",  # the host's own address (a canary listens there)
                    "gw:6379",             # the host end of the sandbox's own link
                    "gw:19464", f"{HOST_UPLINK}:19464",  # the daemon's metrics port (on the test host's 127.0.0.1)
                    "127.0.0.1:6379",      # the sandbox's own loopback, not the host's
                    *(f"{a}:80" for a in PRIVATE),  # private ranges, cloud metadata
                    f"{IN_RANGE}:80",      # inside an allowed range
                    f"{DENIED}:80",        # inside an allowed range, but denied
                    f"{ALLOWED}:853")      # DNS over TLS to anyone
        assert got[f"{ALLOWED}:80"] == f"ok hello from {ALLOWED}:80"
        assert got[f"{IN_RANGE}:80"] == f"ok hello from {IN_RANGE}:80"
        # Refused by the policy: a reset at once (ECONNREFUSED), never a timeout; that nothing
        # listening did not cause it shows in the servers' logs below.
        refused = [f"{ALLOWED}:8080", f"{OTHER}:80", f"{HOST_UPLINK}:6379", "gw:6379", "gw:19464", f"{HOST_UPLINK}:19464",
                   *(f"{a}:80" for a in PRIVATE), f"{DENIED}:80", f"{ALLOWED}:853"]
        for t in refused:
            assert got[t] == "ECONNREFUSED", (t, got)
        assert got["127.0.0.1:6379"] == "ECONNREFUSED"
        # Nothing but the allowed connection arrived anywhere.
        assert sorted(internet.connections("inet")) == [f"{ALLOWED}:80 from {HOST_UPLINK}",  # masqueraded
                                                        f"{IN_RANGE}:80 from {HOST_UPLINK}"]
        assert internet.connections("host") == []
        # Refusals are counted by template and reason, never by job.
        want = {"policy": 3, "host": 4, "always": len(PRIVATE) + 1, "limit": 0}
        wait_for(lambda: refusals(internet, "policy") >= 3, 30, "the policy refusals in the metrics")
        assert {r: refusals(internet, r) for r in want} == want
    finally:
        stop(d)
    # The table goes with the daemon.
    assert "sandpool_" not in internet.nft("list", "tables")


def test_a_sandbox_has_no_ipv6_no_raw_sockets_and_cannot_change_its_link(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path)
    try:
        got = probe(redis_server, "web", "[2001:db8::10]:80", "[::1]:9")
        assert got["[2001:db8::10]:80"] == "ENETUNREACH"
        assert got["[::1]:9"] == "ECONNREFUSED"  # loopback IPv6 works as in any sandbox
        out = run(redis_server, "web", r"""
python3 -c '
import socket
for fam, typ, proto in ((socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP), (socket.AF_PACKET, socket.SOCK_RAW, 0),
                        (socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)):
    try:
        socket.socket(fam, typ, proto); print("opened")
    except OSError as e:
        print(e.errno)
'
cat /proc/net/if_inet6 | awk '{print $6}'
ip addr add 10.200.0.99/31 dev eth0 2>&1 | tail -1 || true
ip link set eth0 address 02:00:00:00:00:01 2>&1 | tail -1 || true
ip neigh replace 10.200.0.1 lladdr 02:00:00:00:00:02 dev eth0 2>&1 | tail -1 || true
""", check=False)
        # Raw IP: EPERM (no CAP_NET_RAW where the namespace belongs); packet sockets: EPERM (seccomp);
        # ICMP datagram sockets: EACCES (ping_group_range). IPv6 only on loopback. The link's
        # address and MAC: EPERM (no CAP_NET_ADMIN).
        assert out.splitlines() == ["1", "1", "13", "lo"] + ["RTNETLINK answers: Operation not permitted"] * 3, out
    finally:
        stop(d)


def test_a_packet_whose_ttl_runs_out_at_the_host_gets_no_answer_from_it(redis_server, internet, tmp_path):
    # Without the rule, the host's routing code answers a forwarded packet with TTL 1 with ICMP
    # time-exceeded from its own address (what traceroute shows).
    d = start(redis_server, internet, tmp_path)
    try:
        out = run(redis_server, "web", f"""python3 -c '
import select, socket
IP_RECVERR = 11
for ttl in (1, 64):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
    s.sendto(b"x", ("{ALLOWED}", 80))
    p = select.poll(); p.register(s, select.POLLERR)
    if p.poll(2000):
        msg, anc, flags, addr = s.recvmsg(512, 512, socket.MSG_ERRQUEUE)
        err = anc[0][2]  # struct sock_extended_err, then the sender of the ICMP error
        print(ttl, "icmp", err[5], socket.inet_ntoa(err[20:24]))
    else:
        print(ttl, "silent")
'""")
        # TTL 64: the fake internet's own "port unreachable" (type 3) comes back, so errors are heard.
        assert out.splitlines() == ["1 silent", f"64 icmp 3 {ALLOWED}"], out
    finally:
        stop(d)


def test_a_packet_with_a_forged_source_is_dropped_and_counted(redis_server, internet, tmp_path):
    """Sandboxes cannot forge packets (no CAP_NET_RAW); root on the host can, in a slot's
    namespace: the host end drops what does not come from the slot's own address."""
    d = start(redis_server, internet, tmp_path)
    try:
        run(redis_server, "web", "true")  # the template's slot exists
        def slot_netns():
            # Held open at once: the sandbox found may end (and its /proc entry with it) before
            # nsenter runs; the open fd keeps the slot's namespace reachable (seen failing in CI).
            for pid in d.sandbox_processes():  # the web slot's next sandbox may still be starting
                try:
                    if "eth0:" in open(f"/proc/{pid}/net/dev").read():
                        return os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    pass
            return None

        netns_fd = wait_for(slot_netns, 30, "a sandbox of the network template")
        forge = f"""
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
for src in ("10.200.99.99", "{OTHER}", "8.8.8.8"):
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28, 0, 0, 64, 17, 0, socket.inet_aton(src), socket.inet_aton("{IN_RANGE}"))
    s.sendto(ip + struct.pack("!HHHH", 4000, 9999, 8, 0), ("{IN_RANGE}", 0))
"""
        try:
            subprocess.run(["nsenter", f"--net=/proc/self/fd/{netns_fd}", sys.executable, "-c", forge],
                           pass_fds=(netns_fd,), check=True, timeout=60)
        finally:
            os.close(netns_fd)
        wait_for(lambda: "sandpool_net_spoofed_packets_total 3" in metrics(internet), 30, "the forged packets in the metrics")
    finally:
        stop(d)


def test_connection_limit_per_sandbox(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path, extra=["--net-connections", "4"])
    try:
        out = run(redis_server, "web", f"""python3 -c '
import errno, socket
held = []
for i in range(6):
    s = socket.socket(); s.settimeout(20)
    try:
        s.connect(("{ALLOWED}", 80)); held.append(s); print("ok")
    except OSError as e:
        print(errno.errorcode[e.errno])
'""")
        assert out.splitlines() == ["ok"] * 4 + ["ECONNREFUSED"] * 2, out
        wait_for(lambda: refusals(internet, "limit") == 2, 30, "the limit refusals in the metrics")
    finally:
        stop(d)


def test_no_network_templates_keep_loopback_only(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path)
    try:
        got = probe(redis_server, "default", f"{ALLOWED}:80")
        assert got[f"{ALLOWED}:80"] == "ENETUNREACH"
        assert run(redis_server, "default", "ls /sys/class/net 2>/dev/null || cat /proc/net/dev | tail -n +3 | cut -d: -f1") \
            .split() == ["lo"]
    finally:
        stop(d)


def test_sessions_of_a_network_template_get_its_policy(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path)
    cli = [SANDPOOL_CLI, "--redis", redis_server.url, "session"]
    try:
        p = subprocess.run(cli + ["create", "s-net", "--template", "web"], capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr
        script = PROBE.replace("'", "'\\''")
        p = subprocess.run(cli + ["exec", "s-net", "--shell", f"python3 -c '{script}' {ALLOWED}:80 {OTHER}:80"],
                           capture_output=True, timeout=120)
        got = dict(line.split(" ", 1) for line in p.stdout.decode().splitlines())
        assert got == {f"{ALLOWED}:80": f"ok hello from {ALLOWED}:80", f"{OTHER}:80": "ECONNREFUSED"}, p
        # Another sandbox (a job of the same template) cannot reach a server the session runs,
        # on any address.
        p = subprocess.run(cli + ["spawn", "s-net", "--", "python3", "-m", "http.server", "8000"], capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        addr = subprocess.run(cli + ["exec", "s-net", "--shell", "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1"],
                              capture_output=True, timeout=60).stdout.decode().strip()
        wait_for(lambda: subprocess.run(cli + ["exec", "s-net", "--", "python3", "-c",
                                               "import socket; socket.create_connection(('127.0.0.1', 8000), 5)"],
                                        capture_output=True, timeout=60).returncode == 0, 30, "the session's server")
        got = probe(redis_server, "web", f"{addr}:8000")
        assert got == {f"{addr}:8000": "ECONNREFUSED"}, (addr, got)
        subprocess.run(cli + ["destroy", "s-net"], capture_output=True, timeout=120)
    finally:
        stop(d)


# Runs in the sandbox: one line per name, "<name> <addresses>" or "<name> <gaierror name>", then
# for names that resolved, whether port 80 answers by name.
RESOLVE = r"""
import socket, sys
for name in sys.argv[1:]:
    try:
        addrs = sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)})
    except socket.gaierror as e:
        names = {socket.EAI_NONAME: "EAI_NONAME", socket.EAI_AGAIN: "EAI_AGAIN", socket.EAI_FAIL: "EAI_FAIL"}
        print(name, names.get(e.errno, e.errno)); continue
    try:
        s = socket.create_connection((name, 80), 20); s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        print(name, ",".join(addrs), s.recv(4096).decode().splitlines()[-1]); s.close()
    except OSError as e:
        import errno; print(name, ",".join(addrs), errno.errorcode.get(e.errno, e.errno))
"""


def resolve(redis_server, template, *names):
    script = RESOLVE.replace("'", "'\\''")
    out = run(redis_server, template, f"python3 -c '{script}' " + " ".join(names))
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_allowed_names_resolve_through_sandpool_and_open_only_what_they_answered(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path)
    try:
        # Before anything resolved it, the wildcard's address is closed.
        assert probe(redis_server, "web", f"{OTHER}:80") == {f"{OTHER}:80": "ECONNREFUSED"}
        got = resolve(redis_server, "web", "registry.npm.example", "www.npm.example", "a.cdn.example",
                      "other.example", "evil.cdn.example", "cdn.example", "nosuch.cdn.example")
        assert got["registry.npm.example"] == f"{ALLOWED} hello from {ALLOWED}:80"
        assert got["www.npm.example"] == f"{ALLOWED} hello from {ALLOWED}:80"      # through its CNAME
        assert got["a.cdn.example"] == f"{OTHER} hello from {OTHER}:80"           # wildcard: opened by the answer
        # Not allowed, denied though under the wildcard, the wildcard's own apex: "not found"
        # at once, answered by sandpool and never asked upstream.
        for name in ("other.example", "evil.cdn.example", "cdn.example"):
            assert got[name] == "EAI_NONAME", (name, got)
        assert got["nosuch.cdn.example"] == "EAI_NONAME"  # allowed, but upstream has no such name
        asked = internet.dns_queries()
        assert "other.example" not in asked and "evil.cdn.example" not in asked and "cdn.example" not in asked, asked
        assert "a.cdn.example" in asked and "nosuch.cdn.example" in asked
        # AAAA is never asked upstream (sandboxes have no IPv6): only A questions leave.
        assert all(not q.startswith("AAAA") for q in asked)
        # An allowed name opens its address on the rule's ports only.
        assert probe(redis_server, "web", f"{ALLOWED}:8080") == {f"{ALLOWED}:8080": "ECONNREFUSED"}
        wait_for(lambda: 'sandpool_net_dns_queries_total{result="denied",template="web"} 3' in metrics(internet),
                 30, "the denied names in the metrics")
    finally:
        stop(d)


PORTS_CONF = CONF + """[template ports]
runtime = sh
workers = 1
egress = registry.npm.example@198.51.100.0/28:8080 registry.npm.example@203.0.113.0/24:80 www.npm.example

[template overlap]
runtime = sh
workers = 1
egress = registry.npm.example:8080 www.npm.example
"""


def test_each_name_rule_opens_its_own_ports_and_names_sharing_an_address_add_up(redis_server, internet, tmp_path):
    # registry.npm.example is ALLOWED (198.51.100.10, servers on 80 and 8080), and so is
    # www.npm.example (its CNAME). Of the two filtered rules for registry.npm.example only the
    # first holds its address: 8080, not the other rule's 80. www.npm.example (every port) then
    # opens the same address wider; when its TTL is over, the address is back to 8080 alone.
    d = start(redis_server, internet, tmp_path, conf=PORTS_CONF, extra=["--net-dns-ttl-min", "4", "--net-dns-ttl-max", "4"])
    try:
        out = run(redis_server, "ports", f"""python3 -c '
import errno, socket, time
def c(port):
    s = socket.socket(); s.settimeout(10)
    try:
        s.connect(("{ALLOWED}", port)); return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
    finally:
        s.close()
def r(name):
    try:
        return socket.getaddrinfo(name, 80, socket.AF_INET)[0][4][0]
    except socket.gaierror:
        return "gaierror"
out = [r("registry.npm.example"), c(80), c(8080), r("www.npm.example"), c(80), c(8080)]
time.sleep(3)
out.append(r("registry.npm.example"))
time.sleep(3)
out += [c(80), c(8080)]
print(" ".join(out))
'""")
        assert out.split() == [ALLOWED, "ECONNREFUSED", "ok", ALLOWED, "ok", "ok", ALLOWED, "ECONNREFUSED", "ok"], out
        # Without address filters: one name's every port, then another name's one port of the
        # same address (an interval set refuses an element inside another: the second name's
        # answer failed).
        out = run(redis_server, "overlap", f"""python3 -c '
import errno, socket
def c(port):
    s = socket.socket(); s.settimeout(10)
    try:
        s.connect(("{ALLOWED}", port)); return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
    finally:
        s.close()
def r(name):
    try:
        return socket.getaddrinfo(name, 80, socket.AF_INET)[0][4][0]
    except socket.gaierror:
        return "gaierror"
print(r("www.npm.example"), c(80), r("registry.npm.example"), c(8080))
'""")
        assert out.split() == [ALLOWED, "ok", ALLOWED, "ok"], out
    finally:
        stop(d)


DNS_TCP_CLIENT = r"""
import socket, struct, random, time
def query(name):
    m = struct.pack(">HHHHHH", random.randrange(65536), 0x0100, 1, 0, 0, 0)
    m += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    return struct.pack(">H", len(m)) + m
def ask(s, name):
    try:
        s.sendall(query(name))
        return "answer" if len(s.recv(2)) == 2 else "closed"
    except OSError:
        return "closed"
# Six connections from one sandbox, held open: each asked a name (a refused one: answered at once).
conns = [socket.create_connection(("198.51.100.10", 53), 5) for i in range(6)]
for s in conns:
    s.settimeout(5)
print(" ".join(ask(s, "n%d.other.example" % i) for i, s in enumerate(conns)))
for s in conns:
    s.close()
# A client that asks and never reads: 2000 questions whose answers are 270 bytes each.
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("198.51.100.10", 53)); s.settimeout(3)
long = ".".join(["x" * 60] * 4) + ".example"
try:
    for i in range(2000):
        s.sendall(query(long))
    time.sleep(1)
    got = 0
    while True:
        data = s.recv(65536)
        if not data:
            print("closed", got); break
        got += len(data)
except socket.timeout:
    print("open", got)
except OSError:
    print("closed", 0)
"""


def test_the_resolver_caps_tcp_connections_per_sandbox_and_what_each_may_queue(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path, extra=["--net-dns-qps", "100000"])
    try:
        script = DNS_TCP_CLIENT.replace("'", "'\\''")
        out = run(redis_server, "web", f"python3 -c '{script}'").splitlines()
        assert out[0].split() == ["answer"] * 4 + ["closed"] * 2, out
        assert out[1].split()[0] == "closed" and int(out[1].split()[1]) < 2000 * 270, out
        # Closed connections give their places back: the next job has its four.
        out = run(redis_server, "web", f"python3 -c '{script}'").splitlines()
        assert out[0].split() == ["answer"] * 4 + ["closed"] * 2, out
    finally:
        stop(d)


def test_dns_rebinding_tunnelling_and_other_resolvers(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path)
    try:
        got = resolve(redis_server, "web", "rebind.npm.example", "meta.npm.example", "hostaddr.npm.example")
        # An allowed name answering a private or metadata address: refused, nothing opened.
        assert got["rebind.npm.example"] in ("EAI_AGAIN", "EAI_FAIL"), got
        assert got["meta.npm.example"] in ("EAI_AGAIN", "EAI_FAIL"), got
        # ... answering the host's own address: resolvable, but the host stays unreachable.
        assert got["hostaddr.npm.example"] == f"{HOST_UPLINK} ECONNREFUSED", got
        assert internet.connections("host") == []
        assert probe(redis_server, "web", "10.0.0.1:80", "169.254.169.254:80") == \
            {"10.0.0.1:80": "ECONNREFUSED", "169.254.169.254:80": "ECONNREFUSED"}
        # Tunnelling: names under a denied zone, TXT for an allowed one, and DNS sent straight to
        # another resolver over UDP and TCP: all answered by sandpool, nothing reaches dnsmasq.
        out = run(redis_server, "web", f"""python3 -c '
import random, socket, struct
def query(name, qtype):
    q = struct.pack(">HHHHHH", random.randrange(65536), 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\\0" + struct.pack(">HH", qtype, 1)
    return q
def rcode(reply): return reply[3] & 15
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(10)
codes = []
for i in range(40):
    u.sendto(query("x%08x.exfil.example" % random.randrange(1 << 32), 1), ("{DNS_SERVER}", 53))
    codes.append(rcode(u.recv(4096)))
print("udp", sorted(set(codes)))
u.sendto(query("registry.npm.example", 16), ("{DNS_SERVER}", 53)); print("txt", rcode(u.recv(4096)))
t = socket.create_connection(("{DNS_SERVER}", 53), 10)
q = query("registry.npm.example", 1); t.sendall(struct.pack(">H", len(q)) + q)
n = struct.unpack(">H", t.recv(2))[0]; r = t.recv(n)
print("tcp", rcode(r), socket.inet_ntoa(r[-4:]))
'""")
        assert out.splitlines() == ["udp [3]", "txt 5", f"tcp 0 {ALLOWED}"], out
        asked = internet.dns_queries()
        assert not any("exfil" in q or q.startswith("TXT") for q in asked), asked
    finally:
        stop(d)


def test_a_session_installs_a_package_from_an_allowed_registry_and_a_disallowed_one_fails_at_once(
        redis_server, internet, tmp_path):
    internet.publish_npm_package("tiny-pkg", "1.0.0", "module.exports = () => 'tiny says hi';\n")
    d = start(redis_server, internet, tmp_path)
    cli = [SANDPOOL_CLI, "--redis", redis_server.url, "session"]
    try:
        p = subprocess.run(cli + ["create", "s-npm", "--template", "web"], capture_output=True, timeout=120)
        assert p.returncode == 0, p.stderr
        p = subprocess.run(cli + ["exec", "s-npm", "--timeout", "120", "--shell",
                                  "cd /work && npm install --registry http://registry.npm.example/ --no-audit --no-fund "
                                  "--no-update-notifier tiny-pkg && node -e \"console.log(require('tiny-pkg')())\""],
                           capture_output=True, timeout=180)
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert p.stdout.decode().splitlines()[-1] == "tiny says hi", p.stdout
        p = subprocess.run(cli + ["exec", "s-npm", "--timeout", "120", "--shell",
                                  "cd /work && npm install --registry http://other.example/ --no-audit --no-fund "
                                  "--no-update-notifier --fetch-retries=0 other-pkg"],
                           capture_output=True, timeout=180)
        assert p.returncode != 0
        err = (p.stdout + p.stderr).decode()
        assert "ENOTFOUND" in err and "other.example" in err, err
        assert "other.example" not in internet.dns_queries()
        subprocess.run(cli + ["destroy", "s-npm"], capture_output=True, timeout=120)
    finally:
        stop(d)


def fetch(internet, url: str, ns: str = "") -> str:
    """GET from the test host (not a sandbox), or from namespace `ns`: "<status> <body>", or the
    error's name."""
    argv = [sys.executable, "-c", f"""
import errno, urllib.request, urllib.error
try:
    r = urllib.request.urlopen({url!r}, timeout=20); print(r.status, r.read().decode(), end="")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(), end="")
except urllib.error.URLError as e:
    print(errno.errorcode.get(getattr(e.reason, "errno", 0), str(e.reason)), end="")
"""]
    cmd = ["nsenter", f"--net=/run/netns/{ns}", *argv] if ns else internet.in_host(argv)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout


def test_a_session_server_is_reached_through_its_preview_url_and_nothing_else(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path)
    cli = [SANDPOOL_CLI, "--redis", redis_server.url, "session"]

    def session(*args, check=True):
        p = subprocess.run(cli + list(args), capture_output=True, timeout=120)
        assert p.returncode == 0 or not check, (args, p.stdout, p.stderr)
        return p.stdout.decode()

    try:
        session("create", "s-web", "--template", "web")
        session("exec", "s-web", "--shell", "mkdir -p /work/site && echo 'hello preview' > /work/site/index.html")
        # Bound to localhost only, as dev servers are by default.
        session("spawn", "s-web", "--cwd", "/work/site", "--", "python3", "-m", "http.server", "8000", "--bind", "127.0.0.1")
        wait_for(lambda: subprocess.run(cli + ["exec", "s-web", "--", "python3", "-c",
                                               "import socket; socket.create_connection(('127.0.0.1', 8000), 5)"],
                                        capture_output=True, timeout=60).returncode == 0, 30, "the session's server")
        exposed = json.loads(session("expose", "s-web", "8000"))
        url = exposed["url"]
        assert url.startswith(f"http://{HOST_UPLINK}:") and exposed["port"] == 8000 and exposed["protocol"] == "http"
        token = url.rstrip("/").rsplit("/", 1)[1]
        assert len(token) == 26
        assert json.loads(session("expose", "s-web", "8000"))["url"] == url  # idempotent
        assert fetch(internet, url + "index.html") == "200 hello preview\n"
        # Its host port: from the fake internet and from the host itself, on the host's address.
        host_port = exposed["host_port"]
        assert 40000 <= host_port <= 40099, exposed
        assert fetch(internet, f"http://{HOST_UPLINK}:{host_port}/index.html", ns=internet.inet_ns) == "200 hello preview\n"
        assert fetch(internet, f"http://{HOST_UPLINK}:{host_port}/index.html") == "200 hello preview\n"
        base = url[: -len(token) - 1]
        # Without the token, with another one, or with a prefix of it: the same 404.
        assert fetch(internet, base + "index.html").startswith("404 ")
        assert fetch(internet, base + "a" * 26 + "/index.html").startswith("404 ")
        assert fetch(internet, base + token[:-1] + "/index.html").startswith("404 ")
        # Clients that reset right after asking (the answer cannot be written) leave nothing
        # behind: more of them than the proxy's connection limit, and it still serves.
        port = url.split(":")[2].split("/")[0]
        subprocess.run(internet.in_host([sys.executable, "-c", f"""
import socket, struct
for i in range(1100):
    s = socket.create_connection(("{HOST_UPLINK}", {port}), 10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.sendall(b"GET /nosuchtoken/ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    s.close()
"""]), check=True, timeout=120)
        assert fetch(internet, url + "index.html") == "200 hello preview\n"
        # An exposed port that nothing listens on: 502, not a hang.
        other = json.loads(session("expose", "s-web", "8001"))["url"]
        assert fetch(internet, other).startswith("502 ")
        assert [p["port"] for p in json.loads(session("ports", "s-web"))["ports"]] == [8000, 8001]
        # Nothing but the preview proxy opens connections into a sandbox: not the host's root.
        addr = session("exec", "s-web", "--shell", "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1").strip()
        p = subprocess.run(internet.in_host([sys.executable, "-c", f"""
import errno, socket
s = socket.socket(); s.settimeout(20)
try:
    s.connect(({addr!r}, 8000)); print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
"""]), capture_output=True, text=True, timeout=60)
        assert p.stdout.strip() == "ECONNREFUSED", p
        # Nor can a sandbox reach the preview port (an address of the host).
        port = url.split(":")[2].split("/")[0]
        got = probe(redis_server, "web", f"{HOST_UPLINK}:{port}", f"{HOST_UPLINK}:{host_port}")
        assert got == {f"{HOST_UPLINK}:{port}": "ECONNREFUSED", f"{HOST_UPLINK}:{host_port}": "ECONNREFUSED"}, got
        # Unexposed, or the session stopped: gone.
        session("unexpose", "s-web", "8000")
        assert fetch(internet, url + "index.html").startswith("404 ")
        assert fetch(internet, f"http://{HOST_UPLINK}:{host_port}/index.html", ns=internet.inet_ns) == "ECONNREFUSED"
        assert [p["port"] for p in json.loads(session("ports", "s-web"))["ports"]] == [8001]
        session("expose", "s-web", "8000")
        session("stop", "s-web")
        assert fetch(internet, other).startswith("404 ")
        session("destroy", "s-web")
    finally:
        stop(d)


def preview_proxy_pid(d: Daemon) -> int:
    """The daemon's child that does not run as root: its preview proxy (keepers and the spawner
    are root; sandboxes are their children, not the daemon's)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = open(f"/proc/{entry}/status").read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["PPid"]) == d.proc.pid and fields["Uid"].split()[0] != "0":
            return int(entry)
    raise AssertionError("no preview proxy process")


def memory_of(pid: int) -> bytes:
    """Every readable mapping of the process (read as root), but those of 256 MiB or more (a
    sanitizer's shadow memory: reserved, never written by the program)."""
    out = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if not parts[1].startswith("r") or (len(parts) > 5 and parts[5] == "[vvar]") or hi - lo >= 256 << 20:
                continue
            try:
                mem.seek(lo)
                out.append(mem.read(hi - lo))
            except (OSError, ValueError, OverflowError):
                pass
    return b"".join(out)


def test_the_preview_proxy_is_its_own_program_and_holds_none_of_the_daemons_secrets(redis_server, internet, tmp_path):
    canaries = {k: f"cnry{k}" + secrets.token_hex(12) for k in ("env", "argv", "conf")}
    d = start(redis_server, internet, tmp_path, conf=f"# secret: {canaries['conf']}\n" + CONF,
              env={"SANDPOOL_TEST_SECRET": canaries["env"]}, conf_name=f"sandpool-{canaries['argv']}.conf")
    try:
        # The daemon itself carries its environment's and its command line's (so the scan below
        # can see them where they are); its config file's text may be gone from its memory.
        daemon_memory = memory_of(d.proc.pid)
        for key in ("env", "argv"):
            assert canaries[key].encode() in daemon_memory, key
        pid = preview_proxy_pid(d)
        environ = open(f"/proc/{pid}/environ", "rb").read()
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        memory = memory_of(pid)
        for key, value in canaries.items():
            found = value.encode() in environ + cmdline + memory
            assert not found, f"the daemon's {key} secret is in the preview proxy"
        assert environ == b""
        exe = os.readlink(f"/proc/{pid}/exe")
        assert os.path.basename(exe) == "sandpool-preview-proxy", exe
        # The Redis URL is not there either, nor the daemon's configuration.
        found = redis_server.url.encode() in memory or b"[template web]" in memory
        assert not found, "the daemon's Redis URL or configuration is in the preview proxy"
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":" in line)
        assert status["Seccomp"].strip() == "2", status["Seccomp"]  # a filter of its own
        assert status["NoNewPrivs"].strip() == "1"
        assert status["CapEff"].strip() == status["CapPrm"].strip() == "0000000000000000"
        uids = status["Uid"].split()
        assert len(set(uids)) == 1 and int(uids[0]) > d.uid_base, uids  # its own uid, past the slots'
        assert len(set(status["Gid"].split())) == 1 and status["Gid"].split()[0] == uids[0]
        assert status["Groups"].strip() == ""
        # Nothing but stdio, its listening socket and its channel (past them: its own epoll and
        # libevent's internal pipe, no file, no other socket).
        fds = sorted(int(f) for f in os.listdir(f"/proc/{pid}/fd"))
        links = {f: os.readlink(f"/proc/{pid}/fd/{f}") for f in fds}
        assert fds[:5] == [0, 1, 2, 3, 4] and links[3].startswith("socket:") and links[4].startswith("socket:"), links
        assert all(link.startswith(("anon_inode:", "pipe:")) for f, link in links.items() if f > 4), links
        assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    finally:
        stop(d)


# A server that answers any request with 101 Switching Protocols and then echoes what it gets:
# a WebSocket's shape, without the framing.
UPGRADE_SERVER = r"""
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8002)); s.listen(8)
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(4096)
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
    while True:
        data = c.recv(4096)
        if not data:
            return
        c.sendall(data)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""

# From the test host: upgrade through the preview URL, echo once, say "upgraded", then wait for a
# line on stdin and report whether the connection is closed within 10 s.
UPGRADE_CLIENT = r"""
import socket, sys
host, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
c = socket.create_connection((host, port), 10); c.settimeout(10)
c.sendall(f"GET /{token}/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    head += c.recv(4096)
assert head.startswith(b"HTTP/1.1 101"), head
c.sendall(b"ping"); assert c.recv(4096) == b"ping"
print("upgraded", flush=True)
sys.stdin.readline()
try:
    print("closed" if c.recv(4096) == b"" else "open", flush=True)
except socket.timeout:
    print("open", flush=True)
except ConnectionResetError:
    print("closed", flush=True)
"""


def test_an_upgraded_connection_ends_when_its_port_is_unexposed(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path)
    cli = [SANDPOOL_CLI, "--redis", redis_server.url, "session"]
    try:
        subprocess.run(cli + ["create", "s-ws", "--template", "web"], capture_output=True, timeout=120, check=True)
        subprocess.run(cli + ["spawn", "s-ws", "--", "python3", "-c", UPGRADE_SERVER], capture_output=True, timeout=60, check=True)
        wait_for(lambda: subprocess.run(cli + ["exec", "s-ws", "--", "python3", "-c",
                                               "import socket; socket.create_connection(('127.0.0.1', 8002), 5)"],
                                        capture_output=True, timeout=60).returncode == 0, 30, "the session's server")
        url = json.loads(subprocess.run(cli + ["expose", "s-ws", "8002"], capture_output=True, timeout=60, check=True).stdout)["url"]
        port, token = url.split(":")[2].split("/")[0], url.rstrip("/").rsplit("/", 1)[1]
        client = subprocess.Popen(internet.in_host([sys.executable, "-c", UPGRADE_CLIENT, HOST_UPLINK, port, token]),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert client.stdout.readline().strip() == "upgraded"
            subprocess.run(cli + ["unexpose", "s-ws", "8002"], capture_output=True, timeout=60, check=True)
            client.stdin.write("go\n")
            client.stdin.flush()
            assert client.stdout.readline().strip() == "closed"
        finally:
            client.kill()
            client.wait()
        subprocess.run(cli + ["destroy", "s-ws"], capture_output=True, timeout=120)
    finally:
        stop(d)


def test_templates_without_expose_refuse_to_expose(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path, conf=CONF.replace("expose = on\n", ""))
    try:
        cli = [SANDPOOL_CLI, "--redis", redis_server.url, "session"]
        subprocess.run(cli + ["create", "s-no", "--template", "web"], capture_output=True, timeout=120, check=True)
        p = subprocess.run(cli + ["expose", "s-no", "8000"], capture_output=True, timeout=60)
        assert p.returncode == 1 and b"unsupported" in p.stderr, p
        subprocess.run(cli + ["destroy", "s-no"], capture_output=True, timeout=120)
    finally:
        stop(d)


def run_job(redis_server, shell: str, **fields) -> dict:
    """A job map of version 3 (egress) through Redis; its result map."""
    r = redis_server.client()
    job = {"v": 3, "id": new_id("net"), "shell": shell, "template": "web", **fields}
    submit(r, job)
    return wait_results(r, [job["id"]], 120)[job["id"]]


def test_a_job_narrows_its_templates_policy_and_the_next_job_has_the_templates_again(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path)
    script = RESOLVE.replace("'", "'\\''")
    targets = "registry.npm.example a.cdn.example"
    try:
        # Only the registry: the wildcard and the template's CIDRs are closed to this job, even
        # though the template allows them and another job just opened them.
        wide = resolve(redis_server, "web", "a.cdn.example")
        assert wide["a.cdn.example"] == f"{OTHER} hello from {OTHER}:80"
        res = run_job(redis_server, f"python3 -c '{script}' {targets}; python3 -c '{PROBE.replace(chr(39), chr(39) + chr(92) + chr(39) + chr(39))}' {IN_RANGE}:80 {OTHER}:80",
                      egress={"allow": ["registry.npm.example:80"]})
        assert res["outcome"] == "exit" and res["exit_code"] == 0, res
        got = dict(line.split(" ", 1) for line in res["stdout"].decode().splitlines())
        assert got["registry.npm.example"] == f"{ALLOWED} hello from {ALLOWED}:80"
        assert got["a.cdn.example"] == "EAI_NONAME"
        assert got[f"{IN_RANGE}:80"] == "ECONNREFUSED" and got[f"{OTHER}:80"] == "ECONNREFUSED", got
        # Its result says which policy it had.
        assert res["network"] == {"egress": {"allow": ["registry.npm.example:80"], "deny": [DENIED + "/32", "evil.cdn.example"]}}
        # The next job of the same slot has the template's policy again.
        res = run_job(redis_server, f"python3 -c '{script}' a.cdn.example")
        assert res["stdout"].decode().strip() == f"a.cdn.example {OTHER} hello from {OTHER}:80", res
        assert "203.0.113.0/24" in res["network"]["egress"]["allow"]
        # No egress at all, and asking for more than the template allows.
        res = run_job(redis_server, f"python3 -c '{script}' registry.npm.example", egress={"allow": []})
        assert res["stdout"].decode().strip() == "registry.npm.example EAI_NONAME", res
        res = run_job(redis_server, "true", egress={"allow": ["other.example:80"]})
        assert res["error"]["code"] == "bad_field" and "outside what template 'web' allows" in res["error"]["message"], res
        res = run_job(redis_server, "true", v=1, egress={"allow": []})
        assert res["error"]["code"] == "bad_field" and "version 3" in res["error"]["message"], res
        res = run_job(redis_server, "true", template="default", egress={"allow": []})
        assert res["error"]["code"] == "bad_field" and "has no network" in res["error"]["message"], res
    finally:
        stop(d)


def test_a_session_narrows_its_templates_policy_for_its_whole_life(redis_server, internet, tmp_path):
    import msgpack
    d = start(redis_server, internet, tmp_path)
    r = redis_server.client()
    cli = [SANDPOOL_CLI, "--redis", redis_server.url, "session"]

    def op(op_name, sid, **fields):
        """A session operation of version 3, straight through Redis (the CLI speaks version 2)."""
        op_id = new_id("op")
        payload = {"v": 3, "id": op_id, "op": op_name, "session": sid, **fields}
        r.xadd("sandpool:sreq:default", {"id": op_id, "req": msgpack.packb(payload)})
        raw = wait_for(lambda: r.get(f"sandpool:result:{op_id}"), 60, f"the {op_name} result")
        return msgpack.unpackb(raw)

    try:
        res = op("create", "s-narrow", template="web", egress={"allow": ["registry.npm.example:80"]})
        assert res["ok"], res
        info = msgpack.unpackb(res["value"]) if isinstance(res["value"], bytes) else res["value"]
        assert info["network"]["egress"]["allow"] == ["registry.npm.example:80"], info
        script = RESOLVE.replace("'", "'\\''")
        check = ["exec", "s-narrow", "--shell", f"python3 -c '{script}' registry.npm.example a.cdn.example"]
        expect = {"registry.npm.example": f"{ALLOWED} hello from {ALLOWED}:80", "a.cdn.example": "EAI_NONAME"}
        out = subprocess.run(cli + check, capture_output=True, timeout=60).stdout.decode()
        assert dict(l.split(" ", 1) for l in out.splitlines()) == expect, out
        # Stopped and resumed (another slot, perhaps): still narrowed.
        subprocess.run(cli + ["stop", "s-narrow"], capture_output=True, timeout=60, check=True)
        subprocess.run(cli + ["create", "s-narrow", "--template", "web"], capture_output=True, timeout=60, check=True)
        out = subprocess.run(cli + check, capture_output=True, timeout=60).stdout.decode()
        assert dict(l.split(" ", 1) for l in out.splitlines()) == expect, out
        # More than the template allows: refused at create.
        res = op("create", "s-wide", template="web", egress={"allow": ["other.example"]})
        assert not res["ok"] and res["error"]["code"] == "bad_field", res
        subprocess.run(cli + ["destroy", "s-narrow"], capture_output=True, timeout=60)
    finally:
        stop(d)


def test_a_narrowed_job_does_not_inherit_the_previous_jobs_udp_flows(redis_server, internet, tmp_path):
    """A UDP flow stays established in conntrack after its job; established flows pass before any
    policy check. A narrowed job must not be able to use one its slot's previous job opened."""
    d = start(redis_server, internet, tmp_path, conf=CONF.replace("workers = 1", "workers = 1\nmax-workers = 1"))
    send = "python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((\"0.0.0.0\", 40000)); s.sendto(b\"x\", (\"{}\", 9999)); print(\"sent\")'"
    try:
        assert run_job(redis_server, send.format(IN_RANGE))["stdout"] == b"sent\n"
        entries = subprocess.run(internet.in_host(["cat", "/proc/net/nf_conntrack"]), capture_output=True, text=True).stdout
        assert f"dst={IN_RANGE}" in entries and "dport=9999" in entries, entries
        # Narrowed to nothing: the same flow (source port, destination) is refused, and counted.
        assert run_job(redis_server, send.format(IN_RANGE), egress={"allow": ["registry.npm.example:80"]})["outcome"] == "exit"
        entries = subprocess.run(internet.in_host(["cat", "/proc/net/nf_conntrack"]), capture_output=True, text=True).stdout
        assert not any(f"dst={IN_RANGE}" in l and "dport=9999" in l and "ASSURED" in l for l in entries.splitlines()), entries
        wait_for(lambda: refusals(internet, "policy") >= 1, 30, "the refused flow in the metrics")
    finally:
        stop(d)


def test_bandwidth_is_limited_per_sandbox(redis_server, internet, tmp_path):
    # 1 MiB through a link of 256 KiB/s (a bucket of 64 KiB) cannot take less than 3.75 s; without
    # the limit it takes milliseconds. A lower bound set by the limit itself, not a speed claim.
    big = internet.workdir / "files" / ALLOWED / "big.bin"
    big.parent.mkdir(parents=True, exist_ok=True)
    big.write_bytes(b"x" * (1 << 20))
    d = start(redis_server, internet, tmp_path, extra=["--net-rate", "256k"])
    try:
        out = run(redis_server, "web", f"""python3 -c '
import time, urllib.request
t = time.monotonic(); n = len(urllib.request.urlopen("http://{ALLOWED}/big.bin", timeout=60).read())
print(n, round(time.monotonic() - t, 2))
'""")
        size, seconds = out.split()
        assert int(size) == 1 << 20
        assert float(seconds) >= 3.0, out
    finally:
        stop(d)


def test_a_resolved_address_closes_after_its_ttl(redis_server, internet, tmp_path):
    d = start(redis_server, internet, tmp_path, extra=["--net-dns-ttl-min", "2", "--net-dns-ttl-max", "2"])
    try:
        out = run(redis_server, "web", f"""python3 -c '
import errno, socket, time
def connect():
    s = socket.socket(); s.settimeout(20)
    try:
        s.connect(("{OTHER}", 80)); return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
    finally:
        s.close()
print(connect())
socket.getaddrinfo("a.cdn.example", 80, socket.AF_INET)
print(connect())
time.sleep(3.5)
print(connect())
'""")
        assert out.split() == ["ECONNREFUSED", "ok", "ECONNREFUSED"], out
    finally:
        stop(d)


@pytest.mark.parametrize("conf,extra,message", [
    ("[template web]\negress = *registry.npmjs.org:443\n", ["--net", "on"], "egress rule '*registry.npmjs.org:443'"),
    ("[template web]\negress = 203.0.113.0/24\n", [], "egress needs the daemon's --net on"),
    ("[template web]\negress = 10.1.2.3/8\n", ["--net", "on"], "host bits are set"),
])
def test_bad_network_configuration_stops_start_up_with_a_clear_error(redis_server, tmp_path, conf, extra, message):
    conf_path = tmp_path / "sandpool.conf"
    conf_path.write_text(conf)
    d = Daemon(redis_server.url, workers=1, extra=["--config", str(conf_path), *extra])
    p = subprocess.run(d.args, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr
