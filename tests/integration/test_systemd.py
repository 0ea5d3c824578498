"""sandpoold under systemd: the notify protocol spoken to a fake $NOTIFY_SOCKET by a real daemon
(READY=1, STATUS=, WATCHDOG=1 from the event loop, STOPPING=1 and EXTEND_TIMEOUT_USEC= while it
drains), and the unit file checked by systemd's own tools (systemd-analyze verify and security).

The tests machines have no systemd as PID 1, so the unit is checked offline and the protocol by a
socket that plays systemd's part: exactly the datagrams systemd would read."""

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from sandpool_harness import REPO, SANDPOOLD, job_map, submit, wait_for, wait_results

UNIT = REPO / "deploy/systemd/sandpoold.service"


class FakeSystemd:
    """The receiving end of $NOTIFY_SOCKET: every datagram, with the time it came."""

    def __init__(self, address: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.sock.settimeout(0.05)
        self.messages = []  # (monotonic time, {VAR: value})

    def pump(self, seconds: float = 0.0):
        deadline = time.monotonic() + seconds
        while True:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                if time.monotonic() >= deadline:
                    return
                continue
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
            self.messages.append((time.monotonic(), fields))

    def wait(self, key: str, timeout: float, value: str = None):
        def seen():
            self.pump()
            return any(key in m and (value is None or m[key] == value) for _, m in self.messages)
        wait_for(seen, timeout, f"{key}={value or '*'} on the notify socket")

    def index(self, key: str) -> int:
        return next(i for i, (_, m) in enumerate(self.messages) if key in m)

    def count(self, key: str, since: float = 0.0) -> int:
        return sum(1 for t, m in self.messages if key in m and t >= since)

    def close(self):
        self.sock.close()


def test_ready_status_watchdog_from_the_loop_and_stopping(redis_server, daemons, tmp_path):
    notify = FakeSystemd(str(tmp_path / "notify.sock"))
    # WatchdogSec=0.4s: a ping every 200 ms.
    d = daemons(workers=2, wait=False, env={"NOTIFY_SOCKET": notify.sock.getsockname(), "WATCHDOG_USEC": "400000"})
    r = redis_server.client()
    notify.wait("READY", 30, "1")
    # Ready means serving: a job submitted now runs at once (Redis reached, a sandbox warm).
    job = job_map(submit_id := "sd-ready", argv=["sh", "-c", "echo up"])
    submit(r, job)
    res = wait_results(r, [submit_id], 30)[submit_id]
    assert res["outcome"] == "exit" and res["stdout"] == b"up\n", res
    notify.wait("STATUS", 10)
    statuses = [m["STATUS"] for _, m in notify.messages if "STATUS" in m]
    assert any(re.search(r"\d+ of \d+ slots ready, \d+ busy; queue lag \d+, pending \d+; redis ok", s) for s in statuses), statuses

    # The pings keep coming at WATCHDOG_USEC/2 while the loop turns...
    t0 = time.monotonic()
    notify.pump(1.0)
    assert notify.count("WATCHDOG", since=t0) >= 3, notify.messages[-10:]
    # ... and stop when the loop does (the daemon has one thread: a stopped process is a loop
    # that does not turn), then come back with it.
    d.pause()
    notify.pump(0.3)  # what was in flight
    stalled = time.monotonic()
    notify.pump(1.5)
    assert notify.count("WATCHDOG", since=stalled) == 0, "pings came while the loop was stopped"
    d.resume()
    resumed = time.monotonic()
    notify.pump(1.0)
    assert notify.count("WATCHDOG", since=resumed) >= 2

    assert d.terminate(30) == 0, d.log_tail()
    notify.pump(0.2)
    stopping = notify.index("STOPPING")
    ready = notify.index("READY")
    assert ready < stopping
    assert sum(1 for _, m in notify.messages[ready:stopping] if "WATCHDOG" in m) >= 5
    extend = [m for _, m in notify.messages[stopping:] if "EXTEND_TIMEOUT_USEC" in m]
    assert extend and int(extend[0]["EXTEND_TIMEOUT_USEC"]) > 0, notify.messages[stopping:]
    assert not any("READY" in m for _, m in notify.messages[stopping:])
    notify.close()


def test_abstract_notify_socket_and_a_daemon_that_never_warms(redis_server, daemons, tmp_path):
    # "@name" is an abstract socket. A daemon whose Redis is away is not READY (it says why in
    # STATUS), and is once Redis comes.
    name = f"@sandpool-notify-{os.getpid()}-{time.monotonic_ns()}"
    notify = FakeSystemd(name)
    redis_server.pause()
    try:
        daemons(workers=1, wait=False, env={"NOTIFY_SOCKET": name})
        notify.wait("STATUS", 20)
        notify.pump(2.0)
        assert notify.count("READY") == 0
        assert all(m["STATUS"].startswith("warming up") for _, m in notify.messages if "STATUS" in m), notify.messages
    finally:
        redis_server.resume()
    notify.wait("READY", 30, "1")
    assert notify.count("WATCHDOG") == 0  # no WATCHDOG_USEC: no pings
    notify.close()


def test_a_bad_notify_socket_is_refused_at_start(redis_server, tmp_path):
    out = subprocess.run([SANDPOOLD, "--redis", redis_server.url, "--metrics-addr", "off"],
                         env=dict(os.environ, NOTIFY_SOCKET="relative/path"), capture_output=True, timeout=30)
    assert out.returncode == 2
    assert b"NOTIFY_SOCKET must be an absolute path" in out.stderr


# ---- the unit file ----------------------------------------------------------------------------

def _unit_copy(tmp_path: Path, text: str = None) -> Path:
    """The unit with ExecStart pointing at the daemon built here (verify checks that it exists)."""
    text = text if text is not None else UNIT.read_text()
    assert "ExecStart=/usr/local/bin/sandpoold " in text
    unit = tmp_path / "sandpoold.service"
    unit.write_text(text.replace("/usr/local/bin/sandpoold", SANDPOOLD))
    return unit


def _verify(unit: Path) -> subprocess.CompletedProcess:
    # verify reports unknown keys and bad values on stderr but exits 0 for them: both count.
    return subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60,
                          cwd=unit.parent)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_verifies_clean_and_a_typo_does_not(tmp_path):
    good = _verify(_unit_copy(tmp_path))
    assert good.returncode == 0 and good.stderr.strip() == "", good.stderr
    text = UNIT.read_text()
    assert "Type=notify" in text and "WatchdogSec=" in text and "Delegate=yes" in text
    bad = _verify(_unit_copy(tmp_path, text.replace("ProtectHome=yes", "ProtectHoem=yes")))
    assert "Unknown key" in bad.stderr and "ProtectHoem" in bad.stderr, bad.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_exposure_is_what_the_hardening_buys(tmp_path):
    # systemd's own score (0 = locked down, 10 = nothing restricted). A sandbox manager cannot go
    # below the namespaces, cgroups and capabilities it exists to use; the unit documents each
    # setting that stays off. An unhardened copy scores far worse, so the check can fail.
    def exposure(unit: Path) -> float:
        out = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)], capture_output=True,
                             text=True, timeout=60, cwd=unit.parent)
        m = re.search(r"Overall exposure level for \S+: ([\d.]+)", out.stdout)
        assert m, out.stdout + out.stderr
        return float(m.group(1))

    hardened = exposure(_unit_copy(tmp_path))
    assert hardened <= 7.0, hardened
    plain = "\n".join(line for line in UNIT.read_text().splitlines()
                      if not re.match(r"(Protect|Private|Restrict|Capability|NoNew|Lock|SystemCall)", line))
    (tmp_path / "plain").mkdir()
    assert exposure(_unit_copy(tmp_path / "plain", plain)) >= hardened + 1.5
