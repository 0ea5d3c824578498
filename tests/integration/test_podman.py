"""sandpool's container image (deploy/container, built by scripts/build-image.sh without a
registry) under podman and runc, with the least privilege that works and never --privileged:
all capabilities dropped but the eight scheduler/daemon/preflight.cc names, podman's default seccomp
profile, only /proc unmasked (not /sys), the container's cgroup remounted writable inside it, a
read-only root with one tmpfs for the state. Redis is the harness's, on a unix socket shared
into the container; jobs and sessions come from the host. Started with less, sandpoold names
what is missing and exits 1 at once. docs/SECURITY.md section 5.1 is the written form of these
command lines; deploy/kubernetes/base/sandpoold.yaml grants the same.

Opt-in (SANDPOOL_CONTAINER_TESTS=1; CI sets it, and scripts/test.sh builds the image before the
tests, so the build here finds it cached): podman, runc and mmdebstrap must be installed. The
first build in a checkout makes build-release/ (a Release build) and the image: minutes.

On hosts with a hybrid cgroup layout Debian's crun 1.8 refuses every container: runc is used.
Where root lacks CAP_SYS_RESOURCE podman's default rlimits fail: lower ones are passed."""

import json
import os
import re
import shutil
import subprocess
import time
import uuid

import pytest

from sandpool import Client
from sandpool_harness import REPO, job_map, submit, wait_for, wait_results

pytestmark = pytest.mark.skipif(
    os.environ.get("SANDPOOL_CONTAINER_TESTS") != "1"
    or not all(shutil.which(t) for t in ("podman", "runc", "mmdebstrap")),
    reason="container tests are opt-in (SANDPOOL_CONTAINER_TESTS=1; podman, runc and mmdebstrap installed)")

# scheduler/daemon/preflight.cc's list (test_capabilities.py checks that the two agree).
CAPS = ["sys_admin", "setuid", "setgid", "dac_override", "chown", "net_admin", "mknod", "kill"]


def _cgroup_remount() -> str:
    """The shell lines that make the container's own cgroup writable (runtimes mount it
    read-only): v1, each controller sandpoold uses; v2, the unified hierarchy. Only the
    container's mount namespace sees the change; CAP_SYS_ADMIN allows it."""
    v1 = os.path.isdir("/sys/fs/cgroup/memory")
    targets = [f"/sys/fs/cgroup/{c}" for c in ("cpu", "cpuacct", "memory", "pids")] if v1 else ["/sys/fs/cgroup"]
    return "; ".join(f"mount -o remount,bind,rw {t}" for t in targets)


def _project_version() -> str:
    return re.search(r"project\(sandpool VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)


@pytest.fixture(scope="module")
def image():
    """scripts/build-image.sh's tag: built once, then found cached (same binaries, same inputs).
    SANDPOOL_TEST_IMAGE names another build of the image instead (e.g. the Containerfile's)."""
    if os.environ.get("SANDPOOL_TEST_IMAGE"):
        return os.environ["SANDPOOL_TEST_IMAGE"]
    out = subprocess.run(["bash", str(REPO / "scripts/build-image.sh")], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-4000:]
    tag = out.stdout.strip().splitlines()[-1]
    assert tag == f"sandpool:{_project_version()}"
    return tag


def _podman(name, image, redis, caps, extra, args, entrypoint=None):
    """podman run of the image: the least privilege that works, less where `caps` and `extra`
    say so. The root is read-only; the state directory is the one writable place."""
    cmd = ["podman", "--runtime", "runc", "run", "--rm", "--name", name,
           "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
           "--cap-drop", "all", "--cap-add", ",".join(caps),
           "--read-only", "--read-only-tmpfs=false",
           "--mount", "type=tmpfs,destination=/var/lib/sandpool,notmpcopyup",
           "-v", f"{redis.dir}:{redis.dir}", "--env", f"SANDPOOL_REDIS_URL={redis.url}"] + extra
    if entrypoint:
        cmd += ["--entrypoint", entrypoint]
    return cmd + [image] + args


@pytest.fixture
def container_name():
    name = "sandpool-test-" + uuid.uuid4().hex[:8]
    yield name
    subprocess.run(["podman", "rm", "-f", "-t", "2", name], capture_output=True, timeout=60)


@pytest.fixture
def usr_volume(image):
    """A named volume podman fills with the image's /usr on first use: on the host's file
    system, which allows idmapped mounts (sessions idmap /usr into their sandboxes; a
    container's overlay root does not allow them). One per test, so it is never stale."""
    name = "sandpool-test-usr-" + uuid.uuid4().hex[:8]
    yield name
    subprocess.run(["podman", "volume", "rm", "-f", name], capture_output=True, timeout=60)


def test_jobs_sessions_and_isolation_in_a_least_privilege_container(image, redis_server, container_name,
                                                                    usr_volume, tmp_path):
    log = tmp_path / "container.log"
    consumer = "podman-" + container_name[-8:]
    extra = ["--security-opt", "unmask=/proc/*",
             # Sessions only: their disks are mounted through loop devices, the control device
             # and the block devices (major 7) sandpoold makes with mknod; /usr where it can be
             # idmapped (usr_volume).
             "--device", "/dev/loop-control", "--device-cgroup-rule", "b 7:* rwm",
             "--mount", f"type=volume,source={usr_volume},destination=/usr,ro=true"]
    # The image's entrypoint is sandpoold; the cgroup remount goes before it, as in
    # deploy/kubernetes/base/sandpoold.yaml.
    script = f'{_cgroup_remount()} && exec sandpoold "$@"'
    args = ["-c", script, "sandpoold", "--metrics-addr", "off", "--consumer", consumer, "--workers", "1",
            "--python-workers", "1", "--node-workers", "0", "--session-disk", "128M", "--max-sandboxes", "8"]
    proc = subprocess.Popen(_podman(container_name, image, redis_server, CAPS, extra, args, entrypoint="/bin/sh"),
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
        # The container has a network (podman's default); the job's namespace has none: no
        # route at all (ENETUNREACH), not a connection that merely failed.
        assert res["pm-net"]["stdout"] == b"no network 101\n", res["pm-net"]

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


@pytest.mark.parametrize("case", ["podman-defaults", "no-mknod"])
def test_too_little_privilege_is_named_at_start(image, redis_server, container_name, case):
    """The image's own entrypoint and command. podman's defaults (with the capabilities) mask
    parts of /proc and mount the cgroups read-only; a capability left out is named by name.
    Either way sandpoold exits 1 at once, before any job."""
    if case == "podman-defaults":
        caps, extra = CAPS, []
        # Each with what to do about it.
        expected = ["sandpoold: /proc has paths masked or mounted over", "podman --security-opt unmask=/proc/*",
                    "sandpoold: the cgroup filesystem is read-only", "remount its own cgroup writable"]
    else:
        caps, extra = [c for c in CAPS if c != "mknod"], ["--security-opt", "unmask=/proc/*"]
        expected = ["sandpoold: capability CAP_MKNOD is missing"]
    t0 = time.monotonic()
    out = subprocess.run(_podman(container_name, image, redis_server, caps, extra, []),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    for e in expected:
        assert e in out.stderr, out.stderr
    assert "sandpoold started" not in out.stderr
    assert time.monotonic() - t0 < 60


def test_the_image_metadata_and_its_non_root_user(image):
    """The OCI labels, sandpoold as the entrypoint, and the `sandpool` user the CLI runs as."""
    config = json.loads(subprocess.run(["podman", "image", "inspect", "--format", "{{json .Config}}", image],
                                       capture_output=True, text=True, check=True, timeout=60).stdout)
    assert config["Entrypoint"] == ["/usr/local/bin/sandpoold"]
    assert config["Labels"]["org.opencontainers.image.version"] == _project_version()
    assert config["Labels"]["org.opencontainers.image.title"] == "sandpool"
    out = subprocess.run(["podman", "--runtime", "runc", "run", "--rm", "--ulimit", "nofile=1024:1024",
                          "--ulimit", "nproc=1024:1024", "--cap-drop", "all", "--network", "none", "--user", "sandpool",
                          "--entrypoint", "/bin/sh", image, "-c", "id -u; sandpool --help | head -1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("999\nusage: sandpool"), out.stdout + out.stderr
