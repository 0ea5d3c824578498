"""A private "test host" and "fake internet" in network namespaces of their own, for the network
tests (docs/design/network.md section 10). Nothing here touches the real host's network: the
daemon under test runs inside the test host namespace (nsenter), whose only route out leads to
the fake internet namespace, and neither has a default route. No packet leaves this machine.

    test host netns (sandpoold, canaries)            fake internet netns
      up0 192.0.2.1/24  <---------------------->  eth0 192.0.2.2/24
      routes via 192.0.2.2 to 198.51.100.0/24       lo: 198.51.100.10 (allowed), .20 (not allowed),
        and to the always-refused PRIVATE targets       and the PRIVATE addresses
      canaries: 127.0.0.1:6379, 192.0.2.1:6379      HTTP servers on port 80 of all, and 8080 of .10

Servers answer GET with "hello from <address>:<port>" and record every connection they accept,
so a test can tell "refused" from "arrived".
"""

import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

ALLOWED = "198.51.100.10"
OTHER = "198.51.100.20"
HOST_UPLINK = "192.0.2.1"
# Always refused whatever a policy says; routed to the fake internet, where servers listen, so
# that only the sandbox's rules stand between them and a sandbox.
# 203.0.113.0/24: a range a policy allows whole, DENIED the one address it denies in it.
IN_RANGE, DENIED = "203.0.113.8", "203.0.113.7"
PRIVATE = ["10.0.0.1", "169.254.169.254", "192.168.1.1", "172.16.0.1"]
# The fake internet's DNS server (dnsmasq, authoritative for what it is given), and its names.
DNS_SERVER = "203.0.113.53"
NAMES = {
    "registry.npm.example": ALLOWED,
    "a.cdn.example": OTHER,
    "evil.cdn.example": OTHER,
    "other.example": OTHER,
    "rebind.npm.example": "10.0.0.1",        # an allowed name pointing at a private address
    "meta.npm.example": "169.254.169.254",  # ... at cloud metadata
    "hostaddr.npm.example": HOST_UPLINK,     # ... at the test host itself
}
CNAMES = {"www.npm.example": "registry.npm.example"}

# One server process per namespace: HTTP listeners and plain TCP canaries, each logging
# "address:port" to `log` for every connection it accepts.
SERVER = r"""
import os, socket, sys, threading
log = open(sys.argv[1], "a", buffering=1)
files = os.path.join(os.path.dirname(sys.argv[1]), "files")
def serve(addr, port, http):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(64)
    while True:
        c, peer = s.accept()
        log.write(f"{addr}:{port} from {peer[0]}\n")
        if http:
            try:
                c.settimeout(5); head = c.recv(65536).decode(errors="replace")
                path = head.split(" ")[1] if head.count(" ") >= 2 else "/"
                # Files under files/<address>/ (a package registry), else a greeting.
                f = os.path.join(files, addr, path.split("?")[0].lstrip("/").replace("..", "_"))
                if os.path.isdir(f):
                    f = os.path.join(f, "index.json")
                if path != "/" and os.path.isfile(f):
                    body = open(f, "rb").read()
                    kind = b"application/json" if f.endswith(".json") or "." not in os.path.basename(f) else b"application/octet-stream"
                else:
                    body, kind = f"hello from {addr}:{port}\n".encode(), b"text/plain"
                c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (kind, len(body)) + body)
            except (OSError, IndexError):
                pass
        c.close()
for spec in sys.argv[2:]:
    addr, port, kind = spec.split(":")
    threading.Thread(target=serve, args=(addr, int(port), kind == "http"), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class FakeInternet:
    def __init__(self, workdir: Path):
        tag = secrets.token_hex(3)
        self.host_ns, self.inet_ns = f"spt-host-{tag}", f"spt-inet-{tag}"
        self.workdir = workdir
        self.procs: List[subprocess.Popen] = []
        self.logs: Dict[str, Path] = {}
        ip("netns", "add", self.host_ns)
        ip("netns", "add", self.inet_ns)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        h, i = ["-n", self.host_ns], ["-n", self.inet_ns]
        ip(*h, "link", "set", "lo", "up")
        ip(*i, "link", "set", "lo", "up")
        ip(*h, "link", "add", "up0", "type", "veth", "peer", "name", "eth0", "netns", self.inet_ns)
        ip(*h, "addr", "add", f"{HOST_UPLINK}/24", "dev", "up0")
        ip(*h, "link", "set", "up0", "up")
        ip(*i, "addr", "add", "192.0.2.2/24", "dev", "eth0")
        ip(*i, "link", "set", "eth0", "up")
        for a in (ALLOWED, OTHER, IN_RANGE, DENIED, DNS_SERVER, *PRIVATE):
            ip(*i, "addr", "add", f"{a}/32", "dev", "lo")
        for dst in ("198.51.100.0/24", "203.0.113.0/24", *(f"{a}/32" for a in PRIVATE)):
            ip(*h, "route", "add", dst, "via", "192.0.2.2")
        routes = subprocess.run(["ip", *h, "route", "show", "default"], capture_output=True, text=True, check=True)
        assert routes.stdout.strip() == "", "the test host must have no default route"
        self.start_servers("inet", self.inet_ns, [f"{ALLOWED}:80:http", f"{ALLOWED}:8080:http", f"{OTHER}:80:http", f"{IN_RANGE}:80:http", f"{DENIED}:80:http", *(f"{a}:80:http" for a in PRIVATE)])
        self.start_servers("host", self.host_ns, [f"127.0.0.1:6379:tcp", f"{HOST_UPLINK}:6379:tcp", f"{HOST_UPLINK}:80:tcp"])
        self.start_dns()

    def start_dns(self) -> None:
        """dnsmasq on DNS_SERVER:53, answering NAMES and CNAMES with a TTL of 1 s and nothing else
        (no upstream), logging every query it gets to `dns.log`."""
        self.dns_log = self.workdir / "dns.log"
        args = ["nsenter", f"--net=/run/netns/{self.inet_ns}", "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
                "--no-resolv", "--no-hosts", "--bind-interfaces", f"--listen-address={DNS_SERVER}", "--port=53",
                "--local-ttl=1", "--local=/example/", "--log-queries", f"--log-facility={self.dns_log}", "--user=root", "--pid-file="]
        args += [f"--host-record={n},{a}" for n, a in NAMES.items()]
        args += [f"--cname={n},{t}" for n, t in CNAMES.items()]
        self.procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while not (self.dns_log.exists() and "started" in self.dns_log.read_text()):
            assert time.monotonic() < deadline and self.procs[-1].poll() is None, "dnsmasq did not start"
            time.sleep(0.05)

    def dns_queries(self) -> List[str]:
        """The names dnsmasq was asked for, in order."""
        out = []
        for line in self.dns_log.read_text().splitlines():
            if " query[" in line:
                out.append(line.split(" query[", 1)[1].split("] ", 1)[1].split(" from ")[0])
        return out

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.host_ns}"

    def in_host(self, argv: List[str]) -> List[str]:
        """argv run inside the test host's network namespace (and nothing else of it)."""
        return ["nsenter", f"--net={self.netns_path}", *argv]

    def start_servers(self, name: str, ns: str, specs: List[str]) -> None:
        log = self.workdir / f"{name}-connections.log"
        log.touch()
        self.logs[name] = log
        p = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", sys.executable, "-c", SERVER, str(log), *specs],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert p.stdout.readline().strip() == "ready"
        self.procs.append(p)

    def publish_npm_package(self, name: str, version: str, source: str) -> None:
        """A package in the registry at registry.npm.example (served from ALLOWED:80): its
        packument and tarball, as `npm install --registry http://registry.npm.example/` reads them."""
        import base64, hashlib, io, json, tarfile
        root = self.workdir / "files" / ALLOWED / name
        (root / "-").mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for fname, data in (("package/package.json", json.dumps({"name": name, "version": version, "main": "index.js"})),
                                ("package/index.js", source)):
                info = tarfile.TarInfo(fname)
                info.size, info.mode = len(data.encode()), 0o644
                tar.addfile(info, io.BytesIO(data.encode()))
        tgz = buf.getvalue()
        (root / "-" / f"{name}-{version}.tgz").write_bytes(tgz)
        dist = {"tarball": f"http://registry.npm.example/{name}/-/{name}-{version}.tgz",
                "shasum": hashlib.sha1(tgz).hexdigest(),
                "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()}
        packument = {"name": name, "dist-tags": {"latest": version},
                     "versions": {version: {"name": name, "version": version, "main": "index.js", "dist": dist}}}
        (self.workdir / "files" / ALLOWED / name).mkdir(parents=True, exist_ok=True)
        # The packument lives at /<name>: a file next to the directory of the same name cannot,
        # so the server also looks for /<name>/index.json.
        (root / "index.json").write_text(json.dumps(packument))

    def connections(self, name: str) -> List[str]:
        return self.logs[name].read_text().splitlines()

    def nft(self, *args: str) -> str:
        return subprocess.run(self.in_host(["nft", *args]), capture_output=True, text=True, check=True).stdout

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()
        for ns in (self.host_ns, self.inet_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
