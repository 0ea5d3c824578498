"""Exposed ports (PROTOCOL.md section 15, "Ports") against the real daemon.

The daemon runs inside a private network namespace of its own (``ip netns add``; only its
loopback is up, so no packet can leave the machine), its preview proxy on 127.0.0.1 of that
namespace. Redis is on a unix socket, which works across namespaces, so the client runs here as
usual; preview URLs are fetched from inside the namespace (``nsenter --net=...``). The namespace,
the daemon and its state directory are removed afterwards.

Needs root, ``ip`` and ``nsenter``, and the daemon binary (see conftest.py).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from typing import Iterator, Tuple

import pytest

from conftest import RedisServer, _require_daemon_binary, stop_process
from sandpool import Client, SessionError

CONF = """[template web]
runtime = sh
expose = on

[template closed]
runtime = sh
"""

# The daemon's host uids: away from the default fixture's (200000...) and the other harnesses'
# (400000..1000000), so two daemons running at once never share a uid.
UID_BASE = 1_500_000 + (os.getpid() % 500) * 1000

FETCH = r"""
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=20)
    print(r.status, r.read().decode(), end="")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(), end="")
"""


class NetnsDaemon:
    def __init__(self, ns: str, redis_url: str, consumer: str) -> None:
        self.ns = ns
        self.url = redis_url
        self.consumer = consumer

    def run_in_ns(self, argv, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", f"--net=/run/netns/{self.ns}", *argv], **kw)

    def fetch(self, url: str) -> str:
        """GET `url` from inside the daemon's namespace: "<status> <body>"."""
        p = self.run_in_ns(["/usr/bin/python3", "-c", FETCH, url], capture_output=True, text=True, timeout=60)
        return p.stdout or p.stderr


@pytest.fixture(scope="module")
def netns_daemon() -> Iterator[NetnsDaemon]:
    """A private network namespace holding a sandpoold with templates `web` (expose = on) and
    `closed` (no expose), serving a private redis-server over its unix socket."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nsenter") is None:
        pytest.fail("the ports tests need root, ip and nsenter", pytrace=False)
    binary = _require_daemon_binary()
    ns = "spc-py-" + secrets.token_hex(3)
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    srv = None
    proc = None
    log = None
    state = tempfile.mkdtemp(prefix="sandpool-py-ports-")
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, capture_output=True)
        srv = RedisServer()
        conf = os.path.join(state, "sandpool.conf")
        with open(conf, "w") as f:
            f.write(CONF)
        consumer = "py-ports-" + secrets.token_hex(4)
        log_path = os.path.join(srv.dir, "sandpoold.log")
        log = open(log_path, "wb")
        env = dict(os.environ)
        env.pop("SANDPOOL_REDIS_URL", None)
        cmd = ["nsenter", f"--net=/run/netns/{ns}", binary,
               "--redis", srv.url, "--consumer", consumer, "--workers", "1", "--max-sandboxes", "8",
               "--metrics-addr", "off", "--uid-base", str(UID_BASE), "--state-dir", os.path.join(state, "state"),
               "--log-level", os.environ.get("SANDPOOL_TEST_LOG_LEVEL", "warn"),
               "--config", conf, "--net", "on", "--net-ip-forward", "set",
               "--net-preview-listen", "127.0.0.1:0", "--net-preview-url", "http://127.0.0.1:{port}/"]
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        r = srv.client()
        deadline = time.monotonic() + 60
        while not r.exists(f"sandpool:daemon:{consumer}"):
            if proc.poll() is not None or time.monotonic() > deadline:
                with open(log_path, errors="replace") as f:
                    tail = f.read()[-4000:]
                pytest.fail(f"sandpoold in netns {ns} did not come up (exit {proc.poll()}); log:\n{tail}", pytrace=False)
            time.sleep(0.1)
        r.close()
        yield NetnsDaemon(ns, srv.url, consumer)
    finally:
        if proc is not None:
            rc = stop_process(proc, grace=20)
            keep = os.environ.get("SANDPOOL_TEST_LOG_DIR")
            if keep and srv is not None:
                os.makedirs(keep, exist_ok=True)
                shutil.copy(os.path.join(srv.dir, "sandpoold.log"), os.path.join(keep, "sandpoold-py-ports.log"))
            if rc not in (0, None):
                print(f"sandpoold exited with {rc} at teardown")
        if log is not None:
            log.close()
        if srv is not None:
            srv.stop()
        # Sessions' disk images are unmounted by the daemon when it stops; anything a killed one
        # left is unmounted here before the directory goes.
        with open("/proc/self/mounts") as f:
            left = [line.split()[1] for line in f if line.split()[1].startswith(state + "/")]
        for m in sorted(left, key=len, reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
        shutil.rmtree(state, ignore_errors=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.fixture
def client(netns_daemon: NetnsDaemon) -> Iterator[Client]:
    c = Client(netns_daemon.url, poll_interval=0.5)
    yield c
    c.close()


def _serving(session, port: int) -> bool:
    r = session.exec(argv=["python3", "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}), 5)"])
    return r.ok


def test_a_server_is_reached_through_its_preview_url_until_unexposed(client: Client, netns_daemon: NetnsDaemon) -> None:
    s = client.session("py-ports-" + secrets.token_hex(4), template="web")
    s.start()
    try:
        s.write_file("/work/site/index.html", "hello from python\n")
        s.spawn(argv=["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], cwd="/work/site")
        deadline = time.monotonic() + 30
        while not _serving(s, 8000):
            assert time.monotonic() < deadline, "the session's server did not start"
            time.sleep(0.2)
        assert s.ports() == []

        entry = s.expose(8000)
        assert entry["port"] == 8000 and entry["protocol"] == "http" and entry["host_port"] is None
        assert isinstance(entry["created_ms"], int) and entry["created_ms"] > 0
        url = entry["url"]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        token = url.rstrip("/").rsplit("/", 1)[1]
        assert len(token) == 26 and set(token) <= set("abcdefghijklmnopqrstuvwxyz234567")
        assert s.expose(8000) == entry  # idempotent: the same entry
        assert s.ports() == [entry]

        assert netns_daemon.fetch(url + "index.html") == "200 hello from python\n"
        # An exposed port nothing listens on answers 502; ports are listed by port.
        other = s.expose(8001)
        assert netns_daemon.fetch(other["url"]).startswith("502 ")
        assert [p["port"] for p in s.ports()] == [8000, 8001]

        assert s.unexpose(8000) is None
        assert netns_daemon.fetch(url + "index.html").startswith("404 ")
        assert [p["port"] for p in s.ports()] == [8001]
        s.unexpose(8000)  # idempotent
        again = s.expose(8000)
        assert again["url"] != url  # a new token
        assert netns_daemon.fetch(again["url"] + "index.html") == "200 hello from python\n"
    finally:
        s.destroy()


def test_a_template_without_expose_answers_unsupported(client: Client) -> None:
    s = client.session("py-closed-" + secrets.token_hex(4), template="closed")
    s.start()
    try:
        with pytest.raises(SessionError) as e:
            s.expose(8000)
        assert e.value.code == "unsupported" and e.value.op == "expose" and not e.value.retryable
    finally:
        s.destroy()


def test_ports_are_checked_before_sending(client: Client) -> None:
    s = client.session("py-nothing-sent")  # no session: a bad port fails before any lookup
    for bad in (0, 65536, -1, "80", 8000.0, True):
        with pytest.raises(ValueError):
            s.expose(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            s.unexpose(bad)  # type: ignore[arg-type]
