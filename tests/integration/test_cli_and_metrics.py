"""The CLI and the HTTP endpoints, against a real daemon."""

import socket
import subprocess
import urllib.error
import urllib.request

from sandpool_harness import SANDPOOL_CLI, wait_for


def cli(redis_server, *args, stdin=b""):
    return subprocess.run([SANDPOOL_CLI, "--redis", redis_server.url, *args], input=stdin,
                          capture_output=True, timeout=60)


def test_cli_run_streams_both_streams_and_exits_with_the_job_code(redis_server, daemons):
    daemons(workers=2)
    p = cli(redis_server, "run", "--shell", "echo out; echo err >&2; exit 3")
    assert (p.returncode, p.stdout, p.stderr) == (3, b"out\n", b"err\n")


def test_cli_passes_stdin_env_and_cwd_and_nothing_of_the_host(redis_server, daemons):
    daemons(workers=2, env={"SANDPOOL_HOST_CANARY": "leaked-canary-4711"})
    p = cli(redis_server, "run", "--stdin", "--env", "GREETING=hi there", "--cwd", "/tmp", "--",
            "sh", "-c", "cat; echo; echo \"$GREETING\"; pwd; env", stdin=b"from stdin")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().splitlines()
    assert lines[:3] == ["from stdin", "hi there", "/tmp"]
    env = dict(line.split("=", 1) for line in lines[3:] if "=" in line)
    assert set(env) == {"GREETING", "PATH", "HOME", "LANG", "PWD"}, env
    assert b"leaked-canary-4711" not in p.stdout


def test_cli_json_and_exit_codes_of_outcomes(redis_server, daemons):
    daemons(workers=2)
    p = cli(redis_server, "run", "--json", "--", "/no/such/program")
    assert p.returncode == 127
    assert b'"code":"exec_failed"' in p.stdout
    p = cli(redis_server, "run", "--timeout", "0.3", "--", "sleep", "10")
    assert p.returncode == 124
    p = cli(redis_server, "run", "--shell", "kill -TERM $$")
    assert p.returncode == 128 + 15


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url):
    """The status code, also for errors (urlopen raises on 503: not ready yet)."""
    try:
        return urllib.request.urlopen(url, timeout=5).status
    except urllib.error.HTTPError as e:
        return e.code


def test_metrics_livez_readyz(redis_server, daemons):
    port = free_port()
    daemons(workers=2, extra=["--metrics-addr", f"127.0.0.1:{port}"])
    base = f"http://127.0.0.1:{port}"
    assert urllib.request.urlopen(base + "/livez", timeout=5).status == 200
    wait_for(lambda: http_status(base + "/readyz") == 200, 30, "readiness")
    assert cli(redis_server, "run", "--shell", "exit 0").returncode == 0
    assert cli(redis_server, "run", "--shell", "exit 1").returncode == 1
    body = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    assert 'sandpool_jobs_completed_total{outcome="exit",template="default"} 2' in body, body
    assert "sandpool_jobs_received_total 2" in body
    assert 'sandpool_job_run_seconds_bucket{template="default",le="0.0005"}' in body
    assert 'sandpool_workers{state="ready"}' in body
    assert "sandpool_redis_up 1" in body
