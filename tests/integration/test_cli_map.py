"""`sandpool map` against a real daemon: result lines, bad lines, --shell, exit statuses, the
progress display on a terminal (tmux), kill -9 then --resume, and Ctrl-C.

Waits are for events (a line in a file, text on the terminal); the timeouts only bound them.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time

import msgpack
import pytest

from sandpool_harness import SANDPOOL_CLI, wait_for

WAIT = 60


def run_map(redis_server, tmp_path, *args, stdin=None, out_name="out.jsonl"):
    out = tmp_path / out_name
    with open(out, "ab") as f:
        p = subprocess.run([SANDPOOL_CLI, "--redis", redis_server.url, "map", *args], stdin=stdin,
                           stdout=f, stderr=subprocess.PIPE, timeout=120)
    return p, [json.loads(line) for line in out.read_text().splitlines()]


def test_map_writes_one_line_per_job_and_errors_for_bad_lines(redis_server, daemons, tmp_path):
    daemons(workers=2)
    jobs = tmp_path / "jobs.jsonl"
    lines = [json.dumps({"shell": f"echo {i}; exit {i % 2}"}) for i in range(20)]
    lines[3] = "{not json"
    lines[7] = json.dumps({"shell": 5})
    lines[9] = json.dumps({"argv": ["echo", "own id"], "id": "my-own-id"})
    lines.insert(12, "   ")  # blank: skipped
    jobs.write_text("\n".join(lines) + "\n")
    p, out = run_map(redis_server, tmp_path, "--concurrency", "4", str(jobs))
    assert p.returncode == 1, p.stderr  # two lines could not run
    assert len(out) == 20
    by_line = {r["line"]: r for r in out}
    assert set(by_line) == set(range(1, 22)) - {13}
    assert by_line[4]["outcome"] == "error" and by_line[4]["error"]["code"] == "bad_payload"
    assert by_line[4]["error"]["message"].startswith("line 4: invalid JSON")
    assert by_line[8]["error"]["code"] == "bad_field" and "line 8" in by_line[8]["error"]["message"]
    assert by_line[10]["id"] == "my-own-id" and by_line[10]["stdout"] == "own id\n"
    for n, r in by_line.items():
        if n not in (4, 8, 10):
            i = n - 1 if n < 13 else n - 2
            assert (r["outcome"], r["exit_code"], r["stdout"]) == ("exit", i % 2, f"{i}\n"), r
    # not a terminal: no progress display, only the summary table
    err = p.stderr.decode()
    assert "\r" not in err and "jobs/s" in err.splitlines()[0] and "bad lines" in err


def test_exit_status_is_about_running_not_exit_codes(redis_server, daemons, tmp_path):
    daemons(workers=2)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"shell": f"exit {i}"}) + "\n" for i in range(4)))
    p, out = run_map(redis_server, tmp_path, str(jobs))
    assert p.returncode == 0 and sorted(r["exit_code"] for r in out) == [0, 1, 2, 3]
    p, _ = run_map(redis_server, tmp_path, "--fail-on-nonzero", str(jobs), out_name="out2.jsonl")
    assert p.returncode == 1


def test_shell_mode_substitutes_each_line_as_one_word(redis_server, daemons, tmp_path):
    daemons(workers=2)
    inputs = ["plain", "it's quoted", "$HOME `id` ; rm -rf /", "a  b"]
    with open_input(tmp_path, inputs) as stdin:
        p, out = run_map(redis_server, tmp_path, "--shell", "printf '%s|' {} {}", "--template", "default", "-",
                         stdin=stdin)
    assert p.returncode == 0, p.stderr
    assert sorted(r["stdout"] for r in out) == sorted(f"{x}|{x}|" for x in inputs)


def open_input(tmp_path, lines):
    f = tmp_path / "in.txt"
    f.write_text("\n".join(lines) + "\n")
    return open(f, "rb")


def test_kill_9_then_resume_runs_every_job_once(redis_server, daemons, tmp_path):
    daemons(workers=2)
    jobs = tmp_path / "jobs.jsonl"
    n = 30
    jobs.write_text("".join(json.dumps({"shell": f"sleep 0.2; echo {i}"}) + "\n" for i in range(n)))
    out = tmp_path / "out.jsonl"
    with open(out, "ab") as f:
        p = subprocess.Popen([SANDPOOL_CLI, "--redis", redis_server.url, "map", "--concurrency", "4",
                              str(jobs)], stdout=f, stderr=subprocess.DEVNULL)
    wait_for(lambda: len(out.read_text().splitlines()) >= 6 or p.poll() is not None, WAIT, "six results")
    p.send_signal(signal.SIGKILL)
    p.wait()
    before = [json.loads(x) for x in out.read_text().splitlines()]
    assert 6 <= len(before) < n, "the run ended before it could be killed"
    p2, after = run_map(redis_server, tmp_path, "--resume", "--concurrency", "4", str(jobs))
    assert p2.returncode == 0, p2.stderr
    ids = [r["id"] for r in after]
    assert len(ids) == n and len(set(ids)) == n  # every job once in the output
    assert sorted(r["stdout"] for r in after) == sorted(f"{i}\n" for i in range(n))
    skipped = re.search(r"skipped \(resume\) +(\d+)", p2.stderr.decode())
    assert skipped and int(skipped.group(1)) == len(before)
    r = redis_server.client()
    for rec in after:
        stored = msgpack.unpackb(r.get(f"sandpool:result:{rec['id']}"), raw=False)
        # the job ran once: its stored result is the one written, from its first attempt
        assert stored["attempt"] == 1 and stored["exec_time_us"] == rec["exec_time_us"]


def test_ctrl_c_cancels_what_is_in_flight(redis_server, daemons, tmp_path):
    daemons(workers=2)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"id": f"cc-{i}", "shell": "sleep 600"}) + "\n" for i in range(5)))
    p = subprocess.Popen([SANDPOOL_CLI, "--redis", redis_server.url, "map", "--concurrency", "2", str(jobs)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    r = redis_server.client()
    wait_for(lambda: all(r.hget(f"sandpool:job:cc-{i}", "state") == b"running" for i in range(2)), WAIT,
             "two jobs running")
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=WAIT)
    assert p.returncode == 130 and b"interrupted" in err
    for i in range(2):
        wait_for(lambda: r.get(f"sandpool:result:cc-{i}"), WAIT, "the cancelled result")
        assert msgpack.unpackb(r.get(f"sandpool:result:cc-{i}"), raw=False)["outcome"] == "cancelled"
    assert r.get("sandpool:result:cc-4") is None


@pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux")
def test_progress_on_a_terminal(redis_server, daemons, tmp_path):
    daemons(workers=2)
    jobs = tmp_path / "jobs.jsonl"
    n = 24
    jobs.write_text("".join(json.dumps({"shell": f"sleep 0.3; exit {1 if i % 6 == 0 else 0}"}) + "\n"
                            for i in range(n)))
    session = f"spmap{os.getpid()}"
    sock = str(tmp_path / "tmux.sock")
    tmux = ["tmux", "-S", sock]
    cmd = (f"{SANDPOOL_CLI} --redis {redis_server.url} map --concurrency 2 {jobs} > {tmp_path}/out.jsonl;"
           f" echo EXIT=$? > {tmp_path}/rc; sleep 600")
    subprocess.run(tmux + ["new-session", "-d", "-s", session, "-x", "160", "-y", "20", cmd], check=True)
    try:
        def screen():
            return subprocess.run(tmux + ["capture-pane", "-p", "-t", session], capture_output=True,
                                  text=True).stdout
        bar = re.compile(r"\[[#.]{30}\] (\d+)/24 +[\d.]+ jobs/s +ETA \d+:\d\d:\d\d")
        # the bar while it runs (not yet finished), with failures by outcome once there are any
        live = wait_for(lambda: (m := bar.search(screen())) and 0 < int(m.group(1)) < n and m, WAIT,
                        "a progress bar mid-run")
        assert live
        wait_for(lambda: (tmp_path / "rc").exists(), WAIT, "the run to end")
        final = screen()
        assert "[" + "#" * 30 + "] 24/24" in final and "failed: non-zero exit 4" in final
        assert re.search(r"outcome +jobs\s+exit +24\s+\(exit non-zero\) +4", final), final
        assert (tmp_path / "rc").read_text().strip() == "EXIT=0"
        # stdout got the results only
        assert len((tmp_path / "out.jsonl").read_text().splitlines()) == n
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True)
