"""`sandpool top` in a real terminal (tmux on a private socket, a wider pane than top may use),
against a real daemon and Redis: what it shows, that it keeps going through no daemon and no
Redis, that it fits 80 columns, and that q and Ctrl-C leave it cleanly (exit status 0)."""

import json
import shlex
import shutil
import subprocess

import pytest

from sandpool_harness import SANDPOOL_CLI, job_map, new_id, submit, wait_for, wait_results

# Not skipped when tmux is missing: scripts/install-deps.sh installs it, and a skip would hide.
assert shutil.which("tmux"), "tmux is not installed: run scripts/install-deps.sh"


class Tmux:
    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.sock = str(tmp_path / "tmux.sock")

    def run(self, *args, check=True):
        return subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True, check=check)

    def start(self, name, command):
        """Runs `command` in a pane of its own. A shell around it writes its exit status to a file
        when it ends: tmux's own #{pane_dead_status} is not reliable (under load tmux 3.3a was
        seen to mark the pane dead and leave top a zombie it never reaped, so the status never
        came). The shell ignores SIGINT, so Ctrl-C reaches only top, which sets its own handler."""
        status = self.dir / f"{name}.status"
        wrapped = f"trap '' INT; {command}; echo $? > {shlex.quote(str(status))}"
        # 120 columns: wider than top may use, so a line past 80 would show.
        self.run("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "sh -c " + shlex.quote(wrapped))
        self.run("set-option", "-t", name, "remain-on-exit", "on")

    def screen(self, name):
        return self.run("capture-pane", "-p", "-t", name).stdout

    def dead_status(self, name):
        """None while the command runs, else its exit status."""
        text = (self.dir / f"{name}.status").read_text() if (self.dir / f"{name}.status").exists() else ""
        # The shell may have created the file and not yet written it: not known yet, ask again.
        return int(text) if text.strip() else None

    def kill(self):
        self.run("kill-server", check=False)


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    yield t
    t.kill()


def top_command(redis_server, *extra):
    return " ".join([SANDPOOL_CLI, "--redis", redis_server.url, "top", "--interval", "0.2", *extra])


def shows(tmux, name, text, timeout=60):
    return wait_for(lambda: text in tmux.screen(name), timeout, f"top to show {text!r}; it shows:\n" + tmux.screen(name),
                    interval=0.1)


def assert_fits_80_columns(screen):
    wide = [line for line in screen.splitlines() if len(line.rstrip()) > 80]
    assert wide == [], wide


def test_top_live_view_through_no_daemon_and_no_redis_then_q(redis_server, daemons, tmux):
    tmux.start("top", top_command(redis_server))
    shows(tmux, "top", "no daemon alive")

    d = daemons(workers=2)
    r = redis_server.client()
    ids = [submit(r, job_map(new_id(), shell="exit 0")) for _ in range(3)]
    ids.append(submit(r, job_map(new_id(), shell="exit 1")))
    ids.append(submit(r, job_map(new_id(), shell="sleep 30", timeout_ms=300)))
    wait_results(r, ids, 120)
    shows(tmux, "top", d.consumer)
    shows(tmux, "top", "recent failures: timeout 1")
    screen = tmux.screen("top")
    assert "1 daemon alive" in screen, screen
    assert "DAEMON" in screen and "python" in screen and "default" in screen, screen
    assert_fits_80_columns(screen)

    # Redis goes away: top says so and keeps trying; Redis back: the daemon is shown again.
    redis_server.proc.kill()
    redis_server.proc.wait(10)
    shows(tmux, "top", "Redis unreachable")
    assert tmux.dead_status("top") is None
    redis_server.start()
    shows(tmux, "top", d.consumer)

    tmux.run("send-keys", "-t", "top", "q")
    status = wait_for(lambda: tmux.dead_status("top") is not None, 30, "top to exit on q", interval=0.1)
    assert status and tmux.dead_status("top") == 0


def test_top_exits_cleanly_on_ctrl_c(redis_server, daemons, tmux):
    d = daemons(workers=1)
    tmux.start("top", top_command(redis_server))
    shows(tmux, "top", d.consumer)
    tmux.run("send-keys", "-t", "top", "C-c")
    wait_for(lambda: tmux.dead_status("top") is not None, 30, "top to exit on Ctrl-C", interval=0.1)
    assert tmux.dead_status("top") == 0
    # The alternate screen was left: the shell's screen is back, top's table is gone.
    assert "DAEMON" not in tmux.screen("top")


def test_top_once_json_gives_the_same_figures(redis_server, daemons):
    d = daemons(workers=2)
    r = redis_server.client()
    ids = [submit(r, job_map(new_id(), shell="exit 0")) for _ in range(3)]
    ids.append(submit(r, job_map(new_id(), argv=["/no/such/program"])))
    wait_results(r, ids, 120)

    def view():
        p = subprocess.run([SANDPOOL_CLI, "--redis", redis_server.url, "top", "--once", "--json"],
                           capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr
        v = json.loads(p.stdout)
        return v if v["daemons"] and v["daemons"][0]["jobs"] >= 4 else None

    v = wait_for(view, 30, "the heartbeat to count the jobs", interval=0.2)
    assert v["redis_error"] is None
    assert v["queue"]["name"] == "default" and v["queue"]["lag"] == 0
    (daemon,) = v["daemons"]
    assert daemon["consumer"] == d.consumer
    assert daemon["outcomes"] == {"exit": 3, "error": 1}
    assert v["failures"] == {"error": 1}
    assert daemon["start_p50_ms"] is not None and daemon["run_p99_ms"] is not None
    assert daemon["pools"]["default"]["max"] >= daemon["pools"]["default"]["slots"] >= 1

    text = subprocess.run([SANDPOOL_CLI, "--redis", redis_server.url, "top", "--once"], capture_output=True,
                          timeout=30, text=True)
    assert text.returncode == 0 and d.consumer in text.stdout
    assert_fits_80_columns(text.stdout)

    gone = subprocess.run([SANDPOOL_CLI, "--redis", "unix:///nonexistent/redis.sock", "top", "--once", "--json"],
                          capture_output=True, timeout=30)
    assert gone.returncode == 125
    assert "nonexistent" in json.loads(gone.stdout)["redis_error"]
