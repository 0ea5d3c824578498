"""Fixtures: a private redis-server per test module (or per test), and the real sandpoold.

Nothing here imports the sandpool package, so protocol-only tests can use these fixtures without
touching the client library.

Environment:
  SANDPOOLD             path of the daemon binary (default <repo>/build/bin/sandpoold)
  SANDPOOL_ALLOW_SKIP=1 skip the daemon tests when the binary is missing (otherwise they fail)
  REDIS_SERVER          path of redis-server (default: found in PATH)
  SANDPOOL_TEST_LOG_LEVEL the daemon's --log-level (default warn)
  SANDPOOL_TEST_LOG_DIR keep the daemon's log there (it is deleted otherwise)
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest
import redis

HERE = Path(__file__).resolve().parent
CLIENT_ROOT = HERE.parent
REPO_ROOT = CLIENT_ROOT.parent.parent
if str(CLIENT_ROOT) not in sys.path:
    sys.path.insert(0, str(CLIENT_ROOT))

CANARY_NAME = "SANDPOOL_TEST_CANARY"


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A private redis-server: unix socket (default) or a free TCP port on 127.0.0.1.

    Never uses port 6379.  No persistence.  ``stop()`` terminates it and removes its directory.
    """

    def __init__(self, *, tcp: bool = False, extra_args: Optional[List[str]] = None) -> None:
        exe = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
        if not exe:
            raise RuntimeError("redis-server not found (set REDIS_SERVER)")
        self.dir = tempfile.mkdtemp(prefix="sandpool-redis-")
        self.sock = os.path.join(self.dir, "redis.sock")
        self.port = free_tcp_port() if tcp else 0
        assert self.port != 6379
        args = [
            exe,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.dir,
            "--daemonize", "no",
            "--loglevel", "warning",
        ]
        if not tcp:
            args += ["--unixsocket", self.sock, "--unixsocketperm", "700"]
        args += extra_args or []
        self.log_path = os.path.join(self.dir, "redis.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        self.tcp = tcp
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"redis-server exited: {tail}")
            try:
                s = socket.socket(socket.AF_INET if tcp else socket.AF_UNIX)
                s.settimeout(1)
                s.connect(("127.0.0.1", self.port) if tcp else self.sock)
                s.sendall(b"PING\r\n")
                reply = s.recv(64)
                s.close()
                if reply.startswith((b"+PONG", b"-NOAUTH")):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("redis-server did not come up")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}" if self.tcp else f"unix://{self.sock}"

    def client(self, **kw) -> redis.Redis:
        if self.tcp:
            return redis.Redis(host="127.0.0.1", port=self.port, **kw)
        return redis.Redis(unix_socket_path=self.sock, **kw)

    def log_tail(self) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh private redis-server on a unix socket for one test."""
    srv = RedisServer()
    try:
        yield srv
    finally:
        srv.stop()


# --- the daemon -----------------------------------------------------------------------------


@dataclasses.dataclass
class Daemon:
    url: str  # Redis URL for clients
    consumer: str  # --consumer
    redis: redis.Redis  # raw connection to its Redis (bytes replies)
    proc: subprocess.Popen
    log_path: str
    canary: str  # value of SANDPOOL_TEST_CANARY in the daemon's environment
    prefix: str = "sandpool"
    queue: str = "default"

    def log_tail(self, n: int = 4000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def assert_alive(self) -> None:
        rc = self.proc.poll()
        assert rc is None, f"sandpoold exited with {rc}; log:\n{self.log_tail()}"


def daemon_binary() -> str:
    return os.environ.get("SANDPOOLD") or str(REPO_ROOT / "build" / "bin" / "sandpoold")


def _require_daemon_binary() -> str:
    binary = daemon_binary()
    if os.path.isfile(binary) and os.access(binary, os.X_OK):
        return binary
    msg = f"sandpoold is not built: no executable at {binary} (build it or set SANDPOOLD)"
    if os.environ.get("SANDPOOL_ALLOW_SKIP") == "1":
        pytest.skip(msg + "; skipped because SANDPOOL_ALLOW_SKIP=1")
    pytest.fail(msg + ". Set SANDPOOL_ALLOW_SKIP=1 to skip the daemon tests.", pytrace=False)
    raise AssertionError("unreachable")


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> Optional[int]:
    """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    """A private redis-server plus sandpoold (4 workers), shared by the daemon tests.

    Ready once the daemon's heartbeat key exists.  Stopped with SIGTERM (SIGKILL after 10 s).
    """
    binary = _require_daemon_binary()
    srv = RedisServer()
    consumer = "test-" + secrets.token_hex(4)
    canary = "canary-" + secrets.token_hex(8)
    env = dict(os.environ)
    env.pop("SANDPOOL_REDIS_URL", None)
    env[CANARY_NAME] = canary
    log_path = os.path.join(srv.dir, "sandpoold.log")
    log = open(log_path, "wb")
    cmd = [
        binary,
        "--redis", srv.url,
        "--metrics-addr", "127.0.0.1:0",
        "--workers", "4",
        "--consumer", consumer,
        "--log-level", os.environ.get("SANDPOOL_TEST_LOG_LEVEL", "warn"),
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    r = srv.client()
    d = Daemon(url=srv.url, consumer=consumer, redis=r, proc=proc, log_path=log_path,
               canary=canary)
    try:
        deadline = time.monotonic() + 60
        key = f"sandpool:daemon:{consumer}"
        while not r.exists(key):
            if proc.poll() is not None:
                pytest.fail(
                    f"sandpoold exited with {proc.returncode} before its heartbeat appeared;"
                    f" command: {' '.join(cmd)}\nlog:\n{d.log_tail()}",
                    pytrace=False,
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"no heartbeat key {key} 60 s after starting sandpoold;"
                    f" command: {' '.join(cmd)}\nlog:\n{d.log_tail()}",
                    pytrace=False,
                )
            time.sleep(0.1)
        yield d
    finally:
        rc = stop_process(proc)
        log.close()
        keep = os.environ.get("SANDPOOL_TEST_LOG_DIR")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(log_path, os.path.join(keep, f"sandpoold-{consumer}.log"))
        if rc not in (0, None):
            sys.stderr.write(f"\nsandpoold exited with {rc} at teardown; log:\n{d.log_tail()}\n")
        r.close()
        srv.stop()
