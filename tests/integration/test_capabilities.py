"""The least privilege sandpoold runs with, found by running it: a daemon whose bounding set (and
so its permitted set) holds only the capabilities scheduler/daemon/preflight.cc names runs jobs, Python
jobs, sessions with background processes and template builds, and recovers from a crash. The same
list is what deploy/systemd/sandpoold.service (CapabilityBoundingSet=) and the Kubernetes
manifests (capabilities.add) grant. Started with one of them missing, or with a masked /proc or a
read-only cgroup filesystem (what a container runtime does by default), it names what is missing
and exits at start-up, not on the first job."""

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from sandpool import Client
from sandpool_harness import (REPO, SANDPOOLD, Daemon, job_map, submit, wait_for, wait_results)

# The list in scheduler/daemon/preflight.cc, in setpriv's spelling.
NEEDED = ["sys_admin", "setuid", "setgid", "dac_override", "net_admin", "mknod", "kill", "chown"]
SMALL = ["--python-workers", "1", "--node-workers", "0", "--session-disk", "128M"]


def _preflight_list():
    text = (REPO / "scheduler/daemon/preflight.cc").read_text()
    return [m.lower() for m in re.findall(r'\{CAP_(\w+), "CAP_\w+"', text)]


def _with_caps(d: Daemon, caps):
    d.args = ["setpriv", "--bounding-set", "-all," + ",".join("+" + c for c in caps), "--"] + d.args
    return d


def test_the_documented_capabilities_are_the_checked_ones():
    assert sorted(_preflight_list()) == sorted(NEEDED)
    unit = (REPO / "deploy/systemd/sandpoold.service").read_text()
    bounding = re.search(r"^CapabilityBoundingSet=(.*)$", unit, re.M).group(1).split()
    assert sorted(c.lower().removeprefix("cap_") for c in bounding) == sorted(NEEDED)
    deployment = (REPO / "deploy/kubernetes/base/sandpoold.yaml").read_text()
    added = re.search(r"^\s*add: \[([^\]]*)\]", deployment, re.M).group(1)
    assert sorted(c.strip().lower() for c in added.split(",")) == sorted(NEEDED)


def test_jobs_sessions_templates_and_a_restart_with_only_the_needed_capabilities(redis_server, tmp_path):
    conf = tmp_path / "sandpool.conf"
    conf.write_text("[template built]\nworkers = 1\nsetup = mkdir -p /opt/app && echo v1 > /opt/app/version\n")
    d = _with_caps(Daemon(redis_server.url, workers=1, extra=SMALL + ["--config", str(conf)]), NEEDED)
    r = redis_server.client()
    client = Client(redis_server.url, poll_interval=0.2)
    try:
        d.start(wait_ready=r)
        effective = int(re.search(r"CapEff:\s*(\w+)", Path(f"/proc/{d.proc.pid}/status").read_text()).group(1), 16)
        assert bin(effective).count("1") == len(NEEDED)
        ids = [submit(r, job_map("caps-sh", argv=["sh", "-c", "echo hi; id -u"])),
               submit(r, job_map("caps-py", argv=["python3", "-c", "print(6*7)"], template="python")),
               submit(r, job_map("caps-built", argv=["cat", "/opt/app/version"], template="built")),
               submit(r, job_map("caps-timeout", argv=["sleep", "30"], timeout_ms=500))]
        res = wait_results(r, ids, 60)
        assert res["caps-sh"]["stdout"] == b"hi\n1000\n", res["caps-sh"]
        assert res["caps-py"]["stdout"] == b"42\n", res["caps-py"]
        assert res["caps-built"]["stdout"] == b"v1\n", res["caps-built"]
        assert res["caps-timeout"]["outcome"] == "timeout", res["caps-timeout"]

        s = client.session("caps-session")
        bg = s.spawn(shell="sleep 300")
        s.write_file("/work/a", "kept\n")
        assert s.exec(shell="cat /work/a").stdout == b"kept\n"
        assert {p["pid"]: p for p in s.processes()}[bg.pid]["state"] == "running"

        # A crash leaves sandboxes and cgroups behind; the restarted daemon (same consumer)
        # clears them with the same capabilities.
        d.kill9()
        d.start(wait_ready=r)
        assert submit(r, job_map("caps-after", argv=["echo", "again"]))
        assert wait_results(r, ["caps-after"], 60)["caps-after"]["stdout"] == b"again\n"
        assert d.proc.poll() is None, d.log_tail()
    finally:
        client.close()
        d.stop()
        d.cleanup(keep_log=False)


def _start_fails(redis_server, prefix, caps=None):
    d = Daemon(redis_server.url, workers=1)
    args = (["setpriv", "--bounding-set", "-all," + ",".join("+" + c for c in caps), "--"] if caps else []) + d.args
    t0 = time.monotonic()
    out = subprocess.run(prefix + args, capture_output=True, text=True, timeout=30)
    d.cleanup()
    return out, time.monotonic() - t0


@pytest.mark.parametrize("dropped", NEEDED)
def test_a_missing_capability_is_named_at_start_up(redis_server, dropped):
    out, took = _start_fails(redis_server, [], [c for c in NEEDED if c != dropped])
    assert out.returncode == 1, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("sandpoold: ")]
    assert lines == [l for l in lines if "CAP_" + dropped.upper() + " is missing" in l] and len(lines) == 1, lines
    assert took < 10


def test_a_masked_proc_is_named_at_start_up(redis_server):
    # What a container runtime does by default: /dev/null over /proc/kcore, /proc/keys and the like.
    masked = next(p for p in ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sysrq-trigger"] if os.path.exists(p))
    out, _ = _start_fails(redis_server, ["unshare", "-m", "--propagation", "private", "sh", "-c",
                                         f'mount --bind /dev/null {masked} && exec "$@"', "sh"])
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"/proc has paths masked or mounted over ({masked})" in out.stderr
    assert "procMount: Unmasked" in out.stderr


def test_a_read_only_cgroup_filesystem_is_named_at_start_up(redis_server):
    mounts = [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines()]

    def fs(m):
        return m[m.index("-") + 1], m[m.index("-") + 3]
    v1 = [m[4] for m in mounts if fs(m)[0] == "cgroup" and "memory" in fs(m)[1].split(",")]
    target = v1[0] if v1 else "/sys/fs/cgroup"
    out, _ = _start_fails(redis_server, ["unshare", "-m", "--propagation", "private", "sh", "-c",
                                         f'mount -o remount,bind,ro {target} && exec "$@"', "sh"])
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"the cgroup filesystem is read-only ({target})" in out.stderr
