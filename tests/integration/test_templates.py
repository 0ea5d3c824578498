"""Templates end to end, through a real daemon: layers baked from setup commands once, seen by
every sandbox copy-on-write; a broken setup stops start-up; prepared root directories."""

import shutil
import subprocess
from pathlib import Path

import pytest

from sandpool_harness import SANDPOOL_CLI, SANDPOOLD, Daemon, wait_for


def cli(redis_server, *args):
    return subprocess.run([SANDPOOL_CLI, "--redis", redis_server.url, *args], capture_output=True, timeout=60)


def run_shell(redis_server, template, line):
    p = cli(redis_server, "run", "--template", template, "--shell", line)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return p.stdout.decode()


def start(daemons, conf: Path, state: Path):
    return daemons(workers=1, extra=["--config", str(conf), "--state-dir", str(state)])


def restart(d: Daemon) -> None:
    """Stops and starts the same daemon (same consumer and host ids) and waits until the new
    process serves: its predecessor's heartbeat key may still be in Redis."""
    count = lambda: d.log_tail(1 << 20).count('"msg":"sandpoold started"')  # noqa: E731
    before = count()
    d.stop()
    d.start()
    wait_for(lambda: count() > before or d.proc.poll() is not None, 120, "the restarted daemon")
    assert d.proc.poll() is None, d.log_tail()


TOOLS = """[template tools]
runtime = sh
workers = 1
upper-size = 4M
setup = mkdir -p /opt/app && echo {version} > /opt/app/version
setup = echo built >> /opt/app/log
"""


def test_layer_is_built_once_and_each_sandbox_changes_it_copy_on_write(redis_server, daemons, tmp_path):
    conf, state = tmp_path / "sandpool.conf", tmp_path / "state"
    conf.write_text(TOOLS.format(version="v1"))
    d = start(daemons, conf, state)
    assert "building template layer" in d.log_tail(100000)

    out = run_shell(redis_server, "tools",
                    "cat /opt/app/version /opt/app/log; echo v2 > /opt/app/version; rm /opt/app/log; "
                    "echo new > /opt/app/new; stat -c %u /opt/app/new; cat /opt/app/version; ls /opt/app")
    assert out == "v1\nbuilt\n1000\nv2\nnew\nversion\n"
    # The next sandbox sees the layer as setup left it; the host's copy never changed.
    assert run_shell(redis_server, "tools", "cat /opt/app/version /opt/app/log; ls /opt/app") == \
        "v1\nbuilt\nlog\nversion\n"
    layers = sorted(state.glob("templates/tools-*/layer"))
    assert len(layers) == 1
    assert (layers[0] / "app/version").read_text() == "v1\n"
    assert not (layers[0] / "app/new").exists()
    # The upper layer is capped: filling it fails in the job, and the result says the disk was full.
    p = cli(redis_server, "run", "--json", "--template", "tools", "--shell", "head -c 8000000 /dev/zero > /opt/big")
    assert p.returncode != 0
    assert b'"outcome":"disk_limit"' in p.stdout, p.stdout

    # Same definition after a restart (same host ids): the layer is reused, not rebuilt (setup
    # appends to log). The log file is appended to across restarts.
    builds = lambda: d.log_tail(1 << 20).count("building template layer")  # noqa: E731
    restart(d)
    assert builds() == 1
    assert run_shell(redis_server, "tools", "cat /opt/app/log") == "built\n"

    # A changed definition is a new layer.
    conf.write_text(TOOLS.format(version="v3"))
    restart(d)
    assert builds() == 2
    assert run_shell(redis_server, "tools", "cat /opt/app/version") == "v3\n"
    assert len(list(state.glob("templates/tools-*/complete"))) == 2


def test_python_template_with_a_layer(redis_server, daemons, tmp_path):
    """Python sandboxes are clones of the slot's nursery mother; each still gets its own
    copy-on-write layer over what setup made."""
    conf, state = tmp_path / "sandpool.conf", tmp_path / "state"
    conf.write_text("[template pylib]\nruntime = python\nworkers = 1\n"
                    "setup = mkdir -p /opt/lib && echo 'VALUE = 41' > /opt/lib/settings.py\n"
                    "env = PYTHONPATH=/opt/lib\n")
    start(daemons, conf, state)

    def code(src):
        p = cli(redis_server, "run", "--template", "pylib", "--python", src)
        assert p.returncode == 0, (p.stdout, p.stderr)
        return p.stdout.decode()

    assert code("import settings; print(settings.VALUE)\n"
                "open('/opt/lib/settings.py', 'w').write('VALUE = 42')\n"
                "print(open('/opt/lib/settings.py').read())") == "41\nVALUE = 42\n"
    nursery = (Path(SANDPOOLD).parent / "libsandpool_nursery.so").exists()  # not in sanitizer builds
    out = code("import settings; print(settings.VALUE, open('/proc/1/cmdline', 'rb').read().split(b'\\0')[-2] == b'mother')")
    assert out == f"41 {nursery}\n"
    layer = next(state.glob("templates/pylib-*/layer"))
    assert (layer / "lib/settings.py").read_text() == "VALUE = 41\n"


def test_a_broken_setup_stops_start_up_with_its_output(redis_server, tmp_path):
    conf = tmp_path / "sandpool.conf"
    conf.write_text("[template broken]\nsetup = echo about to fail\nsetup = false\n")
    d = Daemon(redis_server.url, workers=1, extra=["--config", str(conf), "--state-dir", str(tmp_path / "state")])
    d.start()
    try:
        assert d.proc.wait(120) != 0
        log = d.log_tail(100000)
    finally:
        d.stop()
        d.cleanup()
    assert "template 'broken'" in log and "about to fail" in log, log


def make_image(root: Path) -> None:
    """A tiny prepared root: the host's dash and libc, an /etc, a home owned by the image's 1000."""
    files = ["/bin/dash", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"]
    if not all(Path(f).exists() for f in files):
        pytest.skip("no dash/libc at the x86_64 paths to build a test image from")
    for f in files:
        (root / f[1:]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, root / f[1:])
    (root / "bin/sh").symlink_to("dash")
    (root / "etc").mkdir()
    (root / "etc/image-id").write_text("test-image\n")
    (root / "home/sandbox").mkdir(parents=True)
    shutil.chown(root / "home/sandbox", 1000, 1000)


def test_prepared_root_with_a_layer(redis_server, daemons, tmp_path):
    image = tmp_path / "image"
    make_image(image)
    conf, state = tmp_path / "sandpool.conf", tmp_path / "state"
    conf.write_text(f"[template img]\nroot = {image}\nruntime = sh\nworkers = 1\n"
                    "setup = echo from-setup > /opt/note\n")
    start(daemons, conf, state)
    out = run_shell(redis_server, "img",
                    "read id < /etc/image-id; read n < /opt/note; echo $id $n; "
                    "test -e /usr/bin/python3 && echo HOST-USR; echo hi > /home/sandbox/f && echo home-ok; "
                    "echo changed > /opt/note; read n < /opt/note; echo $n")
    assert out == "test-image from-setup\nhome-ok\nchanged\n"
    assert run_shell(redis_server, "img", "read n < /opt/note; echo $n; test -e /home/sandbox/f && echo LEAK; echo end") == \
        "from-setup\nend\n"
    assert not (image / "home/sandbox/f").exists()
    assert not (image / "opt").exists(), "the layer lives in the state directory, not in the image"


def test_a_root_that_is_not_a_directory_is_a_clear_error(redis_server, tmp_path):
    conf = tmp_path / "sandpool.conf"
    conf.write_text(f"[template img]\nroot = {tmp_path}/missing\n")
    d = Daemon(redis_server.url, workers=1, extra=["--config", str(conf)])
    d.start()
    try:
        assert d.proc.wait(60) != 0
        log = d.log_tail(100000)
    finally:
        d.stop()
        d.cleanup()
    assert "is not a directory" in log
