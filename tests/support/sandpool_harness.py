"""Test harness shared by the end-to-end suites: a private redis-server and real sandpoold
processes, plus small helpers that speak the wire protocol directly (docs/PROTOCOL.md).

Nothing here mocks anything: every test talks to a real Redis and a real daemon that makes real
sandboxes. Needs root (sandpoold does) and Debian's python3-redis / python3-msgpack.

Environment: SANDPOOLD (daemon binary), SANDPOOL_CLI (CLI binary), REDIS_SERVER.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional

import msgpack
import redis

REPO = Path(__file__).resolve().parents[2]
SANDPOOLD = os.environ.get("SANDPOOLD", str(REPO / "build/bin/sandpoold"))
SANDPOOL_CLI = os.environ.get("SANDPOOL_CLI", str(REPO / "build/bin/sandpool"))
QUEUE = "sandpool:q:default"


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05):
    """Polls predicate() until it returns a truthy value; fails the test with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def published_stdout(pubsub) -> bool:
    """True once a stdout event (PROTOCOL.md section 6) has come on the job channel `pubsub` is
    subscribed to; reads what has arrived, without waiting."""
    while (msg := pubsub.get_message(timeout=0.01)) is not None:
        if msg["type"] == "message" and msgpack.unpackb(msg["data"], raw=False).get("type") == "stdout":
            return True
    return False


class RedisServer:
    """A private redis-server on a unix socket (no TCP), stopped by stop(). With aof=True every
    write is fsynced to an append-only file, so restart() loses nothing."""

    def __init__(self, aof: bool = False, extra: Optional[List[str]] = None):
        self.dir = tempfile.mkdtemp(prefix="sandpool-it-")
        os.chmod(self.dir, 0o755)
        self.sock = os.path.join(self.dir, "redis.sock")
        self.args = [os.environ.get("REDIS_SERVER", "redis-server"), "--port", "0", "--unixsocket", self.sock,
                     "--unixsocketperm", "700", "--dir", self.dir, "--save", "", "--loglevel", "warning",
                     "--appendonly", "yes" if aof else "no", "--appendfsync", "always"] + (extra or [])
        self.proc: Optional[subprocess.Popen] = None
        self.start()

    @property
    def url(self) -> str:
        return "unix://" + self.sock

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._pings, 10, "redis-server to answer")

    def _pings(self) -> bool:
        try:
            return self.client().ping()
        except redis.exceptions.ConnectionError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.sock, socket_timeout=30)

    def restart(self, down_for: float = 1.0) -> None:
        self.proc.send_signal(signal.SIGTERM)  # writes and fsyncs the AOF, then exits
        self.proc.wait(10)
        time.sleep(down_for)
        self.start()

    def pause(self) -> None:
        """Freezes the server (SIGSTOP): connections stay open, nothing is answered. A failover
        or a long fork looks like this to its clients."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Daemon:
    """One sandpoold. Each gets its own consumer name and host uid range, so tests can find
    exactly its sandbox processes."""

    _next_uid_base = 400000 + (os.getpid() % 500) * 1000

    MAX_SANDBOXES = 24  # every pool (default, python, node) and its growth fits below this

    def __init__(self, redis_url: str, workers: int = 4, consumer: Optional[str] = None,
                 extra: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None,
                 state_dir: Optional[str] = None):
        self.consumer = consumer or "it-" + secrets.token_hex(4)
        # Its own state directory (template layers, session disks), kept across restarts of this
        # Daemon object and removed by cleanup().
        self.owns_state = state_dir is None and not any(a.startswith("--state-dir") for a in (extra or []))
        self.state_dir = state_dir or tempfile.mkdtemp(prefix=f"sandpool-state-{self.consumer}-")
        self.workers = workers
        self.uid_base = Daemon._next_uid_base
        # Pool slots, one template-build slot per template, then session keepers (as many as
        # sandboxes, plus a spare per template): all of the daemon's host uids (Pools::UidSpan).
        self.uid_span = 2 * (2 * self.MAX_SANDBOXES + 2 * 8)
        Daemon._next_uid_base += self.uid_span + 16
        self.log_path = tempfile.mktemp(prefix=f"sandpoold-{self.consumer}-", suffix=".log")
        self.args = [SANDPOOLD, "--redis", redis_url, "--metrics-addr", "off", "--workers", str(workers),
                     "--max-sandboxes", str(self.MAX_SANDBOXES), "--consumer", self.consumer,
                     "--uid-base", str(self.uid_base), "--log-level", "info"]
        if not any(a.startswith("--state-dir") for a in (extra or [])):
            self.args += ["--state-dir", self.state_dir]
        self.args += extra or []
        self.env = dict(os.environ, **(env or {}))
        self.proc: Optional[subprocess.Popen] = None

    def start(self, wait_ready: Optional[redis.Redis] = None) -> "Daemon":
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=log, env=self.env)
        if wait_ready is not None:
            try:
                wait_for(lambda: wait_ready.exists(f"sandpool:daemon:{self.consumer}") or self._dead(), 30,
                         "the daemon's heartbeat")
                assert self.proc.poll() is None, self.log_tail()
            except BaseException:
                # A daemon that never became ready is not left running behind the failure.
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()
                raise
        return self

    def _dead(self) -> bool:
        return self.proc.poll() is not None

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def terminate(self, timeout: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def pause(self) -> None:
        """Freezes the daemon process alone (SIGSTOP); its keepers and sandboxes go on."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def cleanup(self, keep_log: bool = False) -> None:
        """Removes the state directory this harness made and the daemon's log (after stop()); a
        failed test keeps the log to read (keep_log)."""
        if self.owns_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)
        if not keep_log:
            try:
                os.unlink(self.log_path)
            except FileNotFoundError:
                pass

    def sandbox_processes(self) -> List[int]:
        """Host pids of every process running as one of this daemon's sandbox uids."""
        lo, hi = self.uid_base, self.uid_base + self.uid_span
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if lo <= os.stat(f"/proc/{entry}").st_uid < hi:
                        pids.append(int(entry))
                except FileNotFoundError:
                    pass
        return pids

    def job_processes(self) -> List[int]:
        """Host pids running as a job's uid (the odd uids): running jobs, and warm interpreters."""
        return [p for p in self.sandbox_processes() if (os.stat(f"/proc/{p}").st_uid - self.uid_base) % 2 == 1]

    def spawner_pid(self) -> int:
        """The daemon's spawner: its one child whose command line it wiped to a title."""
        for pid in children_of(self.proc.pid):
            if read_cmdline(pid).startswith(b"sandpool-spawner"):
                return pid
        raise AssertionError("the daemon has no spawner")

    def keeper_of(self, pid: int) -> int:
        """The keeper whose sandbox holds `pid`: its ancestor whose parent is the spawner."""
        spawner = self.spawner_pid()
        while True:
            parent = parent_pid(pid)
            if parent == spawner:
                return pid
            if parent <= 1:
                raise AssertionError(f"process {pid} is not in a sandbox of this daemon")
            pid = parent

    def log_tail(self, n: int = 3000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-n:]
        except FileNotFoundError:
            return ""


def proc_stat_field(pid: int, field: int) -> int:
    """Field `field` of /proc/<pid>/stat, numbered as in proc(5) (4: ppid, 41: policy), read after the
    comm's closing parenthesis so that a comm with spaces or parentheses cannot shift it."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[field - 3])


def parent_pid(pid: int) -> int:
    return proc_stat_field(pid, 4)


def children_of(pid: int) -> List[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if parent_pid(int(entry)) == pid:
                    out.append(int(entry))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return out


def read_cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def job_map(job_id: str, **fields) -> dict:
    m = {"v": 1, "id": job_id}
    m.update(fields)
    return m


def submit(r: redis.Redis, job: dict, queue: str = QUEUE) -> str:
    r.xadd(queue, {"id": job["id"], "job": msgpack.packb(job)})
    return job["id"]


def submit_raw(r: redis.Redis, job_id: Optional[str], payload: bytes, queue: str = QUEUE) -> str:
    fields = {"job": payload}
    if job_id is not None:
        fields["id"] = job_id
    return r.xadd(queue, fields).decode()


def result(r: redis.Redis, job_id: str) -> Optional[dict]:
    raw = r.get(f"sandpool:result:{job_id}")
    return msgpack.unpackb(raw) if raw is not None else None


def wait_results(r: redis.Redis, ids: Iterable[str], timeout: float) -> Dict[str, dict]:
    ids = list(ids)
    out: Dict[str, dict] = {}

    def all_done():
        for i in ids:
            if i not in out:
                res = result(r, i)
                if res is not None:
                    out[i] = res
        return len(out) == len(ids)

    try:
        wait_for(all_done, timeout, f"{len(ids)} results", interval=0.1)
    except AssertionError:
        # Say how far it got, and where the missing ones stand (their job hashes), at the time.
        missing = [i for i in ids if i not in out]
        where = {i: r.hgetall(f"sandpool:job:{i}") for i in missing[:5]}
        raise AssertionError(f"timed out after {timeout}s waiting for {len(ids)} results: {len(out)} came; "
                             f"the first missing: {where}") from None
    return out


def running(r: redis.Redis, ids: Iterable[str]) -> bool:
    """True when every job's record says it is running (claimed by a daemon)."""
    return all(r.hget(f"sandpool:job:{i}", "state") == b"running" for i in ids)


def new_id(prefix: str = "j") -> str:
    return f"{prefix}-{secrets.token_hex(6)}"
