"""Shared helpers of the hostile-code suite: every test runs attacks as real jobs through a real
sandpoold (real Redis, real sandboxes), following shared/reference/hostile-tests.md (beside the repository) and going
beyond it. Findings are listed in FINDINGS.md next to this file.

One private Redis per session and ONE daemon per test module, with small limits so that every
attack ends quickly. The daemon carries planted secrets (a canary in its environment, in its
command line and in its config file); the host carries canary files and a canary TCP listener on
127.0.0.1. After every test an autouse check asserts that:
  - no canary string appeared in any output of any job of that test,
  - the host files we watch are byte-for-byte unchanged,
  - nothing connected to the host canary listener,
  - no process of the daemon's sandbox uid range is left except the prepared sandboxes (one
    init and one stub or warm interpreter per slot uid pair, never a job's program),
  - the daemon is alive and a normal job (`echo ok`) succeeds on the same pool.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import msgpack
from pathlib import Path
from typing import Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))

from sandpool_harness import (  # noqa: E402
    SANDPOOLD,
    Daemon,
    RedisServer,
    job_map,
    new_id,
    parent_pid,
    submit,
    submit_raw,
    wait_for,
    wait_results,
)

# Limits of the daemon under test (small, so attacks finish fast).
MEMORY = 128 << 20
PIDS = 64
WORK_SIZE = 16 << 20
TMP_SIZE = 16 << 20
OUTPUT = 64 << 10
CPU_TIME_MS = 2000
MAX_TIMEOUT_MS = 20000
WORKERS = 3
PYTHON_WORKERS = 1   # one warm python sandbox (template 'python', a zygote)
NODE_WORKERS = 1     # one warm node sandbox (template 'node')
MAX_SANDBOXES = WORKERS + PYTHON_WORKERS + NODE_WORKERS

DAEMON_FLAGS = [
    "--memory", "128M", "--pids", str(PIDS), "--work-size", "16M", "--tmp-size", "16M",
    "--default-output-bytes", "64K", "--max-output-bytes", "1M", "--cpu-time-ms", str(CPU_TIME_MS),
    "--max-timeout-ms", str(MAX_TIMEOUT_MS), "--default-timeout-ms", "15000",
    "--grace-ms", "2000",
    # fixed pool sizes: the sandbox uid range is uid_base .. uid_base + 2 * MAX_SANDBOXES
    "--max-workers", str(WORKERS), "--python-workers", str(PYTHON_WORKERS),
    "--python-max-workers", str(PYTHON_WORKERS), "--node-workers", str(NODE_WORKERS),
    "--node-max-workers", str(NODE_WORKERS), "--max-sandboxes", str(MAX_SANDBOXES),
]
# What a prepared, idle sandbox runs: init (a fork of sandpoold) and the stub, itself a fork of
# sandpoold or, in a template with a warm runtime, that interpreter waiting for its job.
IDLE_EXES = {os.path.realpath(p) for p in ("/bin/sh", "/bin/bash", "/usr/bin/python3", "/usr/bin/node")}

# Planted secrets. Any of them in any job output is a leak.
CANARY_ENV = "cnryenv" + secrets.token_hex(12)      # in the daemon's environment
CANARY_ARGV = "cnryargv" + secrets.token_hex(12)    # in the daemon's command line (config path)
CANARY_CONF = "cnryconf" + secrets.token_hex(12)    # inside the daemon's config file
CANARY_FILE = "cnryfile" + secrets.token_hex(12)    # inside host canary files
CANARIES = [CANARY_ENV, CANARY_ARGV, CANARY_CONF, CANARY_FILE]

HOST_CANARY_FILES = [f"/root/sandpool-canary-{secrets.token_hex(4)}", f"/etc/sandpool-canary-{secrets.token_hex(4)}"]
WATCHED_HOST_FILES = ["/etc/passwd", "/etc/shadow", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf"] + HOST_CANARY_FILES


def _hash(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        return None


class CanaryListener:
    """A TCP listener on the host's 127.0.0.1 that records every connection. A sandbox has its own
    network namespace, so nothing a job does may ever reach it."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections: List[tuple] = []
        self._stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                conn, addr = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections.append(addr)
            conn.close()

    def close(self):
        self._stop = True
        self.thread.join(2)
        self.sock.close()


class Host:
    """Everything the host plants and watches for one session."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix=f"sandpool-hostile-{CANARY_ARGV}-")
        os.chmod(self.dir, 0o700)
        self.config_path = os.path.join(self.dir, f"sandpoold-{CANARY_ARGV}.conf")
        with open(self.config_path, "w") as f:
            f.write(f"# secret: {CANARY_CONF}\nlog-level = info\n")
        os.chmod(self.config_path, 0o644)  # readable by anyone on the host: the sandbox still must not see it
        for p in HOST_CANARY_FILES:
            with open(p, "w") as f:
                f.write(CANARY_FILE + "\n")
            os.chmod(p, 0o644)
        self.listener = CanaryListener()
        self.hashes = {p: _hash(p) for p in WATCHED_HOST_FILES}
        self.hostname = socket.gethostname()
        atexit.register(self.cleanup)  # the canary files go even if the session is interrupted

    def cleanup(self):
        self.listener.close()
        for p in HOST_CANARY_FILES:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:100]
    except OSError:
        return b"?"


def _is_nursery(pid: int) -> bool:
    """A template's nursery mother, or the init of a sandbox it cloned (worker/runners/nursery.h):
    for python both run the interpreter as the slot's sandbox root, with "mother" as their last
    argument; for a shell template both are named sandpool-mother (the mother runs the warm shell
    with the nursery library preloaded, and names herself so)."""
    try:
        return (Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").endswith(b"\0mother")
                or Path(f"/proc/{pid}/comm").read_text().strip() == "sandpool-mother")
    except OSError:
        return False


def _parent(pid: int) -> int:
    try:
        return parent_pid(pid)
    except (OSError, ValueError):
        return 0


def _real_exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return ""


class Pool:
    """One daemon plus the helpers the tests use to run jobs through it."""

    def __init__(self, redis_server: RedisServer, host: Host, workers: int = WORKERS,
                 extra: Optional[List[str]] = None):
        self.redis_server = redis_server
        self.r = redis_server.client()
        self.host = host
        self.daemon = Daemon(redis_server.url, workers=workers,
                             extra=["--config", host.config_path] + DAEMON_FLAGS + (extra or []),
                             env={"HOSTILE_CANARY": CANARY_ENV, "SANDPOOL_HOSTILE_SECRET": CANARY_ENV})
        self.daemon.start(wait_ready=self.r)
        self.results: List[dict] = []  # every result seen since the last check
        self.daemon_exe = os.path.realpath(SANDPOOLD)

    # -- running jobs ------------------------------------------------------------------------
    def submit(self, shell: Optional[str] = None, argv: Optional[List[str]] = None, **fields) -> str:
        job_id = new_id(fields.pop("prefix", "h"))
        if shell is not None:
            fields["shell"] = shell
        if argv is not None:
            fields["argv"] = argv
        if isinstance(fields.get("stdin"), str):
            fields["stdin"] = fields["stdin"].encode()
        return submit(self.r, job_map(job_id, **fields))

    def submit_until(self, marker: bytes, shell: Optional[str] = None, argv: Optional[List[str]] = None,
                     timeout: float = 60, **fields) -> str:
        """Submits a job and returns once its live stdout has shown `marker` (the job reached
        the state a test needs: it listens, it holds its resources...), following the job's own
        events instead of sleeping and assuming (a test must not pass without testing anything
        because a loaded machine was slow). Fails the test if the job ends first."""
        job_id = new_id(fields.pop("prefix", "h"))
        p = self.r.pubsub()
        p.subscribe(f"sandpool:out:{job_id}")
        try:
            while p.get_message(timeout=1) is None:  # the subscribe confirmation
                pass
            if shell is not None:
                fields["shell"] = shell
            if argv is not None:
                fields["argv"] = argv
            if isinstance(fields.get("stdin"), str):
                fields["stdin"] = fields["stdin"].encode()
            submit(self.r, job_map(job_id, **fields))
            seen = b""
            deadline = time.monotonic() + timeout
            while marker not in seen:
                if time.monotonic() > deadline:
                    raise AssertionError(f"job {job_id} never printed {marker!r}; got {seen!r}")
                m = p.get_message(timeout=0.5)
                if not m or m["type"] != "message":
                    continue
                ev = msgpack.unpackb(m["data"])
                if ev["type"] == "stdout":
                    seen += ev["data"]
                elif ev["type"] == "exited":
                    raise AssertionError(f"job {job_id} ended before printing {marker!r}: {ev['result']}")
            return job_id
        finally:
            p.close()

    def wait(self, ids, timeout: float = 60) -> Dict[str, dict]:
        out = wait_results(self.r, ids, timeout)
        self.results.extend(out.values())
        return out

    def run(self, shell: Optional[str] = None, argv: Optional[List[str]] = None, wait: float = 60,
            **fields) -> dict:
        """Runs one job through the real daemon; returns its result map (stdout/stderr bytes)."""
        job_id = self.submit(shell, argv, **fields)
        return self.wait([job_id], wait)[job_id]

    def run_timed(self, shell=None, argv=None, wait: float = 60, **fields):
        t0 = time.monotonic()
        res = self.run(shell, argv, wait=wait, **fields)
        return res, time.monotonic() - t0

    def run_raw(self, job_id: Optional[str], payload: bytes, wait: float = 30) -> dict:
        entry = submit_raw(self.r, job_id, payload)
        key = job_id if job_id is not None else f"entry-{entry}"
        return self.wait([key], wait)[key]

    def python(self, code: str, **fields) -> dict:
        """Runs a Python program in the sandbox (the source goes through stdin)."""
        return self.run(argv=["/usr/bin/python3", "-"], stdin=code.encode(), **fields)

    def binary(self, elf: bytes, args: str = "", **fields) -> dict:
        """Runs a host-compiled static binary in the sandbox: shipped through stdin into /work."""
        fields.setdefault("stdin", elf)
        return self.run(shell=f"cat > /work/x && chmod +x /work/x && exec /work/x {args} </dev/null", **fields)

    # -- checks ------------------------------------------------------------------------------
    def sandbox_processes(self) -> Dict[int, int]:
        """pid -> host uid of every process in this daemon's sandbox uid range."""
        lo, hi = self.daemon.uid_base, self.daemon.uid_base + 2 * MAX_SANDBOXES
        out = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    uid = os.stat(f"/proc/{entry}").st_uid
                except FileNotFoundError:
                    continue
                if lo <= uid < hi:
                    out[int(entry)] = uid
        return out

    def leftover_processes(self) -> List[str]:
        """Processes of finished jobs. An idle slot holds exactly one init (sandbox root's uid)
        and one stub or warm interpreter (the job uid) whose exe is sandpoold or an interpreter;
        a slot with a nursery (python, sh, bash) also holds its mother and that mother's init, so its
        sandbox root's uid may have two nursery processes (the mother, the ready sandbox's init)
        beside the mother's init. A mother's ready sandbox is her only child among them: a second
        one is an init that outlived its job. Anything else in the
        uid range (a second process of a slot's job uid, any other program) outlived its job."""
        procs = self.sandbox_processes()
        per_uid: Dict[int, List[int]] = {}
        for pid, uid in procs.items():
            per_uid.setdefault(uid, []).append(pid)
        bad = []
        for uid, pids in per_uid.items():
            for pid in pids:
                exe = _real_exe(pid)
                if exe and exe != self.daemon_exe and os.path.realpath(exe) not in IDLE_EXES:
                    bad.append(f"pid {pid} uid {uid} exe={exe} cmd={_cmdline(pid)!r}")
            nursery = [p for p in pids if _is_nursery(p)]
            children: Dict[int, int] = {}
            for p in nursery:
                children[_parent(p)] = children.get(_parent(p), 0) + 1
            if len(nursery) > 2 or len(pids) - len(nursery) > 1 or any(n > 1 for n in children.values()):
                bad.append(f"uid {uid} has {len(pids)} processes: " + ", ".join(f"{p}:{_real_exe(p)}:{_cmdline(p)!r}" for p in pids))
        return bad

    def assert_no_leftovers(self, timeout: float = 10):
        last: List[str] = []

        def clean():
            nonlocal last
            last = self.leftover_processes()
            return not last

        try:
            wait_for(clean, timeout, "sandbox processes of finished jobs to die", interval=0.1)
        except AssertionError:
            raise AssertionError(f"processes survived their jobs: {last}")

    def assert_no_canary(self, results=None):
        for res in (results if results is not None else self.results):
            blob = b"".join(v for v in (res.get("stdout"), res.get("stderr")) if isinstance(v, bytes))
            err = res.get("error") or {}
            blob += str(err).encode()
            for c in CANARIES:
                assert c.encode() not in blob, f"canary {c} leaked in job {res.get('id')}: {res}"

    def assert_host_intact(self):
        for p, h in self.host.hashes.items():
            assert _hash(p) == h, f"host file {p} changed"
        assert not self.host.listener.connections, f"a job reached the host canary listener: {self.host.listener.connections}"
        assert socket.gethostname() == self.host.hostname, "host name changed"

    def assert_healthy(self):
        assert self.daemon.proc.poll() is None, "sandpoold died:\n" + self.daemon.log_tail()
        res = self.run(shell="echo ok", wait=30)
        assert res["outcome"] == "exit" and res["exit_code"] == 0 and res["stdout"] == b"ok\n", res

    def check_all(self):
        try:
            self.assert_no_canary()
            self.assert_host_intact()
            self.assert_no_leftovers()
            self.assert_healthy()
            self.assert_no_leftovers()
        finally:
            self.results = []

    def stop(self):
        self.daemon.stop()
        self.daemon.cleanup()


# -- host-compiled helper programs -----------------------------------------------------------
_compiled: Dict[str, bytes] = {}


_int80_on_host: Optional[bool] = None


def host_delivers_int80(binary: bytes) -> bool:
    """`int $0x80` is the i386 system call gate; the sandbox's filter kills whatever comes
    through it. Where the host's kernel or hypervisor has no such gate (the program dies of
    SIGSEGV on the host itself, outside any sandbox: IA32 emulation off, or a paravirtual
    hypervisor that does not deliver it), nothing comes through, so there is nothing to test.
    `binary` is the INT80 program; it only calls getpid."""
    global _int80_on_host
    if _int80_on_host is None:
        d = tempfile.mkdtemp(prefix="sandpool-hostile-int80-")
        try:
            exe = os.path.join(d, "int80")
            Path(exe).write_bytes(binary)
            os.chmod(exe, 0o755)
            rc = subprocess.run([exe], capture_output=True, timeout=30).returncode
            _int80_on_host = rc != -signal.SIGSEGV
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return _int80_on_host


def skip_unless_host_delivers_int80(binary: bytes) -> None:
    if not host_delivers_int80(binary):
        pytest.skip("int $0x80 is not delivered on this host (SIGSEGV outside any sandbox too)")


def compile_c(source: str, flags: Optional[List[str]] = None) -> bytes:
    """Compiles `source` on the host into a static binary and returns its bytes (cached)."""
    key = source + repr(flags)
    if key not in _compiled:
        d = tempfile.mkdtemp(prefix="sandpool-hostile-cc-")
        try:
            src = os.path.join(d, "x.c")
            out = os.path.join(d, "x")
            Path(src).write_text(source)
            subprocess.run(["gcc", "-O1", "-static", "-o", out, src] + (flags or []), check=True,
                           capture_output=True)
            _compiled[key] = Path(out).read_bytes()
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return _compiled[key]


