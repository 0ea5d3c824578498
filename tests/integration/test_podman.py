"""sandpoold in a container with the least privilege that works, under podman and runc, never
--privileged: all capabilities dropped but the eight scheduler/daemon/preflight.cc names, podman's
default seccomp profile, /proc unmasked, the container's cgroup remounted writable inside it, a
read-only root. The container's root is this machine's own root through an overlay (`--rootfs
/:O`: the daemon built here, python3, node), so the test needs no image and no registry. Redis
is the harness's, on a unix socket shared into the container; jobs and sessions come from the
host. Opt-in (SANDPOOL_CONTAINER_TESTS=1; CI sets it): podman and runc must be installed.

On hosts with a hybrid cgroup layout Debian's crun 1.8 refuses every container: runc is used.
Where root lacks CAP_SYS_RESOURCE podman's default rlimits fail: lower ones are passed."""

import os
import shutil
import subprocess
import time
import uuid

import pytest

from sandpool import Client
from sandpool_harness import SANDPOOLD, job_map, submit, wait_for, wait_results

pytestmark = pytest.mark.skipif(
    os.environ.get("SANDPOOL_CONTAINER_TESTS") != "1" or not shutil.which("podman") or not shutil.which("runc"),
    reason="container tests are opt-in (SANDPOOL_CONTAINER_TESTS=1, podman and runc installed)")

CAPS = "sys_admin,setuid,setgid,dac_override,chown,net_admin,mknod,kill"


def _cgroup_remount() -> str:
    """The shell lines that make the container's own cgroup writable (runtimes mount it
    read-only): v1, each controller sandpoold uses; v2, the unified hierarchy."""
    v1 = os.path.isdir("/sys/fs/cgroup/memory")
    targets = [f"/sys/fs/cgroup/{c}" for c in ("cpu", "cpuacct", "memory", "pids")] if v1 else ["/sys/fs/cgroup"]
    return "; ".join(f"mount -o remount,bind,rw {t}" for t in targets)


def _podman(name, redis_dir, extra, script):
    return ["podman", "--runtime", "runc", "run", "--rm", "--name", name,
            "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
            "--cap-drop", "all", "--cap-add", CAPS,
            # The root read-only, /tmp too (the host's /tmp is not copied in); the state
            # directory is the one writable place.
            "--read-only", "--read-only-tmpfs=false",
            "--mount", "type=tmpfs,destination=/run/sandpool-state,notmpcopyup",
            # Sessions mount their disk through a loop device: the control device, and the
            # loop block devices (major 7) the daemon makes with mknod.
            "--device", "/dev/loop-control", "--device-cgroup-rule", "b 7:* rwm",
            # Sessions idmap-mount /usr into their sandboxes; the overlay root of a container
            # cannot be idmapped on this kernel, the host's /usr (bound read-only) can.
            "-v", "/usr:/usr:ro",
            "-v", f"{redis_dir}:{redis_dir}"] + extra + ["--rootfs", "/:O", "sh", "-c", script]


@pytest.fixture
def container_name():
    name = "sandpool-test-" + uuid.uuid4().hex[:8]
    yield name
    subprocess.run(["podman", "rm", "-f", "-t", "2", name], capture_output=True, timeout=60)


def test_jobs_sessions_and_isolation_in_a_least_privilege_container(redis_server, container_name, tmp_path):
    log = tmp_path / "container.log"
    consumer = "podman-" + container_name[-8:]
    script = (f"{_cgroup_remount()} && exec {SANDPOOLD} --redis {redis_server.url} --metrics-addr off "
              f"--consumer {consumer} --workers 1 --python-workers 1 --node-workers 0 --state-dir /run/sandpool-state "
              "--session-disk 128M --uid-base 300000 --max-sandboxes 8")
    proc = subprocess.Popen(_podman(container_name, redis_server.dir, ["--security-opt", "unmask=ALL"], script),
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    r = redis_server.client()
    client = Client(redis_server.url, poll_interval=0.2)
    try:
        wait_for(lambda: r.exists(f"sandpool:daemon:{consumer}") or proc.poll() is not None, 120,
                 "the daemon in the container")
        assert proc.poll() is None, log.read_text()[-3000:]
        probe = ("import socket\ns = socket.socket(); s.settimeout(2)\n"
                 "try:\n    s.connect(('1.1.1.1', 53)); print('reached')\n"
                 "except OSError as e:\n    print('no network', e.errno)\n")
        ids = [submit(r, job_map("pm-sh", argv=["sh", "-c", "echo hi; id -u"])),
               submit(r, job_map("pm-py", argv=["python3", "-c", "print(6*7)"], template="python")),
               submit(r, job_map("pm-ps", argv=["sh", "-c", "ls /proc | grep -c '^[0-9]'; cat /proc/*/cmdline | tr '\\0' ' '"])),
               submit(r, job_map("pm-root", argv=["sh", "-c", "touch /x /usr/x 2>&1; echo rc=$?"])),
               submit(r, job_map("pm-net", argv=["python3", "-c", probe]))]
        res = wait_results(r, ids, 60)
        assert res["pm-sh"]["stdout"] == b"hi\n1000\n", res["pm-sh"]
        assert res["pm-py"]["stdout"] == b"42\n", res["pm-py"]
        # Its own pid namespace: its init and itself, none of the container's processes.
        count, cmdlines = res["pm-ps"]["stdout"].split(b"\n", 1)
        assert int(count) <= 4 and b"sandpoold" not in cmdlines and b"sandpool-spawner" not in cmdlines.replace(
            b"sandpool-spawner ", b"", 1), res["pm-ps"]
        assert b"Read-only file system" in res["pm-root"]["stdout"] and b"rc=1" in res["pm-root"]["stdout"], res["pm-root"]
        assert res["pm-net"]["stdout"].startswith(b"no network"), res["pm-net"]

        s = client.session("pm-session")
        bg = s.spawn(shell="sleep 300")
        s.write_file("/work/a", "kept\n")
        assert s.exec(shell="cat /work/a").stdout == b"kept\n"
        assert {p["pid"]: p for p in s.processes()}[bg.pid]["state"] == "running"
        s.destroy()
    finally:
        client.close()
        subprocess.run(["podman", "kill", "-s", "TERM", container_name], capture_output=True, timeout=30)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_a_container_without_unmasked_proc_is_refused_at_start(redis_server, container_name):
    # podman's defaults mask parts of /proc and mount the cgroups read-only: the daemon names
    # both and exits non-zero at once, before any job.
    t0 = time.monotonic()
    out = subprocess.run(_podman(container_name, redis_server.dir, [],
                                 f"exec {SANDPOOLD} --redis {redis_server.url} --metrics-addr off"),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "sandpoold: /proc has paths masked or mounted over" in out.stderr
    assert "sandpoold: the cgroup filesystem is read-only" in out.stderr
    assert time.monotonic() - t0 < 60
