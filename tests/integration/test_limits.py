"""Every documented limit of PROTOCOL.md section 3, for every field, at the limit and one past it,
in every kind of template (a warm shell, warm python, warm node, and none: the stub execs).

At the limit a job must run and finish normally; past it, it must end at once with the documented
error code. Issue 11 found jobs well inside these limits wedging their slot for good (a large Run
frame half-sent to the keeper), so the last test also floods the pool with large jobs and checks
that every one ends and the pool still serves.
"""

import os
import tempfile

import msgpack
import pytest

from sandpool_harness import job_map, new_id, submit, submit_raw, wait_results

MIB = 1 << 20
ARG_MAX_ONE = 128 * 1024 - 1  # the kernel's limit for one argument or variable, without its NUL
WAIT = 180

TEMPLATES = ["default", "python", "node", "plain"]


@pytest.fixture(scope="module")
def pool(request):
    """One daemon for the module, with a template whose sandboxes keep no interpreter warm."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
    from sandpool_harness import Daemon, RedisServer

    server = RedisServer()
    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    conf.write("[template plain]\nruntime = none\nworkers = 1\nmax-workers = 2\n")
    conf.close()
    d = Daemon(server.url, workers=2, extra=["--config", conf.name, "--max-output-bytes", "16M"])
    d.start(wait_ready=server.client())
    yield server.client(), d
    d.stop()
    d.cleanup()
    server.stop()
    os.unlink(conf.name)


def run(r, timeout=WAIT, **fields):
    job_id = new_id("lim")
    submit(r, job_map(job_id, **fields))
    return wait_results(r, [job_id], timeout)[job_id]


def assert_ok(res, stdout=None):
    assert res["outcome"] == "exit" and res["exit_code"] == 0, (res["outcome"], res["error"], res["stderr"][-500:])
    if stdout is not None:
        assert res["stdout"] == stdout


def assert_error(res, code):
    assert res["outcome"] == "error", res["outcome"]
    assert res["error"]["code"] == code, res["error"]


@pytest.mark.parametrize("template", TEMPLATES)
def test_argv_item_count(pool, template):
    r, _ = pool
    head = ["/bin/sh", "-c", 'printf %s "$#"', "sh"]
    assert_ok(run(r, argv=head + ["x"] * (4096 - len(head)), template=template), b"4092")
    assert_error(run(r, argv=head + ["x"] * (4097 - len(head)), template=template), "too_large")


@pytest.mark.parametrize("template", TEMPLATES)
def test_argv_total_and_item_size(pool, template):
    r, _ = pool
    head = ["/bin/sh", "-c", 'for a; do n=$((n + ${#a})); done; printf %s "$n"', "sh"]
    room = MIB - sum(len(a) for a in head)
    pieces = [ARG_MAX_ONE] * (room // ARG_MAX_ONE) + [room % ARG_MAX_ONE]
    argv = head + ["a" * n for n in pieces if n]
    assert sum(len(a) for a in argv) == MIB
    assert_ok(run(r, argv=argv, template=template), str(room).encode())
    argv[-1] += "a"
    assert_error(run(r, argv=argv, template=template), "too_large")
    assert_error(run(r, argv=["/bin/true", "b" * (ARG_MAX_ONE + 1)], template=template), "too_large")


@pytest.mark.parametrize("template", TEMPLATES)
def test_shell_line_size(pool, template):
    r, _ = pool
    line = "printf '%s' ok #"
    line += "#" * (MIB - len(line))
    assert_ok(run(r, shell=line, template=template), b"ok")
    assert_error(run(r, shell=line + "#", template=template), "too_large")


@pytest.mark.parametrize("runtime,template,code", [
    ("python", "python", "print('ok', end='')\n#"),
    ("node", "node", "process.stdout.write('ok')\n//"),
    ("bash", "default", "printf ok\n#"),
    ("bash", "plain", "printf ok\n#"),
])
def test_code_size(pool, runtime, template, code):
    r, _ = pool
    code += "#" * (MIB - len(code))
    assert_ok(run(r, code=code, runtime=runtime, template=template), b"ok")
    assert_error(run(r, code=code + "#", runtime=runtime, template=template), "too_large")


def test_code_for_an_interpreter_that_is_not_warm_goes_on_a_command_line(pool):
    r, _ = pool
    code = "print('ok', end='')\n#"
    assert_ok(run(r, code=code + "#" * (ARG_MAX_ONE - len(code)), runtime="python", template="default"), b"ok")
    res = run(r, code=code + "#" * (ARG_MAX_ONE + 1 - len(code)), runtime="python", template="default")
    assert_error(res, "too_large")
    assert "command line" in res["error"]["message"]


@pytest.mark.parametrize("template", TEMPLATES)
def test_env_entry_count_and_size(pool, template):
    r, _ = pool
    count = 'env | grep -c "^E[0-9]*="'
    env = {f"E{i}": "v" * 200 for i in range(1024)}
    assert_ok(run(r, shell=count, env=env, template=template), b"1024\n")
    env["E1024"] = "v"
    assert_error(run(r, shell=count, env=env, template=template), "too_large")
    # 256 KiB in total: two variables as large as one may be, and the rest.
    big = {"E0": "v" * (ARG_MAX_ONE - 3), "E1": "w" * (ARG_MAX_ONE - 3)}
    big["E2"] = "x" * (256 * 1024 - sum(len(k) + len(v) for k, v in big.items()) - 2)
    assert sum(len(k) + len(v) for k, v in big.items()) == 256 * 1024
    assert_ok(run(r, shell=count, env=big, template=template), b"3\n")
    big["E2"] += "x"
    assert_error(run(r, shell=count, env=big, template=template), "too_large")
    assert_error(run(r, shell=count, env={"E0": "v" * (ARG_MAX_ONE - 2)}, template=template), "too_large")


@pytest.mark.parametrize("template", TEMPLATES)
def test_argv_and_env_at_their_limits_together(pool, template):
    r, _ = pool
    head = ["/bin/sh", "-c", 'printf %s "$#"', "sh"]
    room = MIB - sum(len(a) for a in head)
    argv = head + ["a" * ARG_MAX_ONE] * (room // ARG_MAX_ONE) + ["a" * (room % ARG_MAX_ONE)]
    env = {f"E{i}": "v" * 250 for i in range(1024)}
    assert_ok(run(r, argv=argv, env=env, template=template), str(len(argv) - 4).encode())


@pytest.mark.parametrize("template", TEMPLATES)
def test_stdin_size(pool, template):
    r, _ = pool
    assert_ok(run(r, shell="wc -c", stdin=b"s" * (16 * MIB), template=template), b"16777216\n")
    assert_error(run(r, shell="wc -c", stdin=b"s" * (16 * MIB + 1), template=template), "too_large")


def test_output_cap_at_the_maximum_and_clamped(pool):
    r, _ = pool
    res = run(r, shell="head -c 16777216 /dev/zero", max_output_bytes=16 * MIB)
    assert_ok(res)
    assert len(res["stdout"]) == 16 * MIB and not res["stdout_truncated"]
    res = run(r, shell="head -c 17825792 /dev/zero", max_output_bytes=1 << 40)  # clamped to 16 MiB
    assert res["outcome"] == "output_limit"
    assert len(res["stdout"]) == 16 * MIB and res["stdout_truncated"]


def test_retries(pool):
    r, _ = pool
    assert_ok(run(r, shell="true", retries=5))
    assert_error(run(r, shell="true", retries=6), "bad_field")


def test_id_size(pool):
    r, _ = pool
    ok_id = "i" * 128
    submit(r, job_map(ok_id, shell="true"))
    assert_ok(wait_results(r, [ok_id], WAIT)[ok_id])
    long_id = "i" * 129
    entry = submit_raw(r, long_id, msgpack.packb(job_map(long_id, shell="true")))
    res = wait_results(r, [f"entry-{entry}"], WAIT)[f"entry-{entry}"]
    assert_error(res, "bad_field")


def test_cwd_size(pool):
    r, _ = pool
    res = run(r, shell="true", cwd="/" + "c" * 4095)
    assert_error(res, "exec_failed")
    assert res["exit_code"] == 126
    assert_error(run(r, shell="true", cwd="/" + "c" * 4096), "bad_field")


def test_whole_entry_size(pool):
    r, _ = pool
    job_id = new_id("lim")
    r.xadd("sandpool:q:default", {"id": job_id, "job": msgpack.packb(job_map(job_id, shell="true")),
                                   "pad": b"p" * (20 * MIB)})
    assert_error(wait_results(r, [job_id], WAIT)[job_id], "too_large")


def test_many_large_jobs_leave_no_slot_stuck(pool):
    """Issue 11: about 30 of these stopped the daemon. Each must end as it should, quickly
    relative to its timeout, and the pool must still serve a plain job afterwards."""
    r, _ = pool
    specs = []
    for i in range(12):
        specs.append(dict(argv=["/bin/sh", "-c", "exit 0", "sh"] + ["a" * 100_000] * 5, timeout_ms=60_000))
        specs.append(dict(shell="exit 0 #" + "#" * 250_000, timeout_ms=60_000))
        specs.append(dict(shell="exit 0", env={f"E{k}": "x" * 250 for k in range(1000)}, timeout_ms=60_000))
    ids = [submit(r, job_map(new_id("big"), **s)) for s in specs]
    results = wait_results(r, ids, WAIT)
    for res in results.values():
        assert_ok(res)
        assert not res["timed_out"]
    assert_ok(run(r, shell="echo hi"), b"hi\n")
