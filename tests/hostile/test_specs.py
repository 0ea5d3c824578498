"""Hostile job specs (hostile-tests.md case 23): every malformed or out-of-range job is rejected
with the error code PROTOCOL.md names (or clamped where it says so), and the daemon keeps serving.
Case 24 (file API) is not applicable: protocol v1 has no file API (see FINDINGS.md)."""

import msgpack
import pytest

from hostile_support import new_id

MAX_TIMEOUT_MS = 2000
POOL_EXTRA = ["--max-timeout-ms", str(MAX_TIMEOUT_MS), "--default-timeout-ms", "1000",
              "--max-payload-bytes", "8M"]


def bad(pool, job: dict, code: str, raw: bytes = None):
    job_id = job.get("id") if isinstance(job.get("id"), str) else new_id("spec")
    payload = raw if raw is not None else msgpack.packb(job, use_bin_type=True)
    res = pool.run_raw(job_id, payload)
    assert res["outcome"] == "error", res
    assert res["error"]["code"] == code, res
    assert res["error"]["retryable"] is False, res
    assert res["stdout"] == b"" and res["stderr"] == b"", res
    return res


def j(**fields):
    m = {"v": 1, "id": new_id("spec")}
    m.update(fields)
    return m


@pytest.mark.parametrize("raw", [b"\xc1", b"not msgpack at all", b"", b"\x93\x01\x02\x03",
                                 msgpack.packb({"v": 1, "id": "x", "shell": "true"}) + b"\x00",
                                 b"\xdd\xff\xff\xff\xff",          # array32 claiming 4G elements
                                 b"\xdf\xff\xff\xff\xff",          # map32 claiming 4G pairs
                                 b"\xdb\xff\xff\xff\xff",          # str32 claiming 4 GiB
                                 b"\x91" * 100000 + b"\x01"],     # 100k-deep nesting
                         ids=["c1", "text", "empty", "array", "trailing", "arr32", "map32", "str32", "deep"])
def test_undecodable_payloads(pool, raw):
    job_id = new_id("spec")
    res = pool.run_raw(job_id, raw)
    assert res["outcome"] == "error" and res["error"]["retryable"] is False, res
    # a header claiming billions of elements is refused before allocating: too_large is as clear
    # as bad_payload; pathological nesting is refused by depth (bad_field says which rule)
    allowed = {b"\xdd": {"bad_payload", "too_large"}, b"\xdf": {"bad_payload", "too_large"},
               b"\x91": {"bad_payload", "bad_field"}}.get(raw[:1], {"bad_payload"})
    assert res["error"]["code"] in allowed, res
    assert pool.r.xlen("sandpool:dead") > 0


@pytest.mark.parametrize("fields,code", [
    ({"v": 5}, "bad_version"),  # 4 is the completion streams version (PROTOCOL.md section 21)
    ({"v": 0}, "bad_version"),
    ({"v": -1}, "bad_version"),
    ({"v": "1"}, "bad_version"),
    ({"v": None}, "bad_version"),
])
def test_bad_versions(pool, fields, code):
    bad(pool, j(shell="true", **fields), code)


def test_missing_version(pool):
    job = {"id": new_id("spec"), "shell": "true"}
    bad(pool, job, "bad_version")


@pytest.mark.parametrize("fields", [
    {"shell": 5}, {"argv": "echo hi"}, {"argv": [1, 2]}, {"argv": []}, {"argv": ["echo", None]},
    {"env": ["A=1"]}, {"env": {"A": 1}}, {"env": {"1A": "x"}}, {"env": {"A=B": "x"}}, {"env": {"": "x"}},
    {"env": {"A B": "x"}}, {"stdin": 5}, {"timeout_ms": "100"}, {"timeout_ms": -1}, {"timeout_ms": 1.5},
    {"max_output_bytes": -5}, {"retries": -1}, {"cwd": 5}, {"cwd": "work"}, {"cwd": ""},
    {"foo": 1}, {"shell": "true", "argv": ["true"]}, {}, {"shell": "true", "x" * 1000: 1},
    {"queue": 5}, {"memory_bytes": -1}, {"pids": "many"}, {"cpu_time_ms": -1},
    {"template": "../../etc"}, {"template": "no-such-template"}, {"runtime": "cobol", "code": "x"},
    {"code": "print(1)"}, {"shell": "true", "unknown": {"nested": [[[[]]]]}},
], ids=lambda f: repr(f)[:40])
def test_bad_fields(pool, fields):
    job = j(**fields)
    if not any(k in fields for k in ("shell", "argv", "code")) and fields:
        job["shell"] = "true"
    bad(pool, job, "bad_field")


@pytest.mark.parametrize("fields", [
    {"argv": ["echo", "a\0b"]}, {"argv": ["ec\0ho"]}, {"shell": "echo a\0b"}, {"env": {"A": "x\0y"}},
    {"cwd": "/work\0/../etc"}, {"code": "print(1)\0", "runtime": "python"},
], ids=["argv", "argv0", "shell", "env", "cwd", "code"])
def test_nul_bytes_are_rejected(pool, fields):
    bad(pool, j(**fields), "bad_field")


@pytest.mark.parametrize("fields", [
    {"argv": ["true", "x" * (10 << 20)]},             # 10 MiB argv (and over the entry limit)
    {"argv": ["true", "x" * (1 << 20)]},              # just over the 1 MiB argv total
    {"argv": ["true"] + ["x"] * 5000},                # more than 4096 elements
    {"shell": "true #" + "x" * (1 << 20)},
    {"env": {f"V{i}": "x" for i in range(2000)}},     # more than 1024 entries
    {"env": {"BIG": "x" * (300 << 10)}},              # over 256 KiB of env
    {"stdin": b"x" * (9 << 20)},                      # over this daemon's 8 MiB entry limit
], ids=["argv10M", "argv1M", "argv5000", "shell1M", "env2000", "env300K", "stdin9M"])
def test_oversized_specs(pool, fields):
    bad(pool, j(**fields), "too_large")


def test_timeout_above_the_maximum_is_clamped(pool):
    for t in (10**9, 2**64 - 1):
        res, dt = pool.run_timed(shell="sleep 30", timeout_ms=t)
        assert res["outcome"] == "timeout", res
        assert res["exec_time_us"] < (MAX_TIMEOUT_MS + 3000) * 1000, res
        assert dt < MAX_TIMEOUT_MS / 1000 + 8


def test_zero_timeout_is_rejected_or_clamped(pool):
    res = pool.run(shell="echo hi", timeout_ms=0)
    # PROTOCOL.md: 1..max_timeout_ms
    assert res["outcome"] == "error" and res["error"]["code"] == "bad_field", res


def test_memory_and_pids_above_the_maximum_are_clamped(pool):
    res = pool.run(argv=["/usr/bin/python3", "-c", "b = b'x' * (300 << 20)"], memory_bytes=2**62, timeout_ms=2000)
    assert res["outcome"] == "memory_limit", res
    res = pool.run(argv=["/usr/bin/bash", "-c", ":(){ :|:& };:; sleep 1"], pids=10**9, timeout_ms=2000)
    assert res["outcome"] == "pids_limit", res


def test_retries_above_the_maximum(pool):
    for n in (6, 1000, 2**64 - 1):   # PROTOCOL.md: 0..5
        res = pool.run(shell="echo hi", retries=n)
        assert res["outcome"] == "error" and res["error"]["code"] == "bad_field", res


def test_id_mismatch_and_bad_ids(pool):
    job_id = new_id("spec")
    payload = msgpack.packb({"v": 1, "id": new_id("other"), "shell": "true"})
    res = pool.run_raw(job_id, payload)
    assert res["error"]["code"] == "bad_field", res
    # an id with characters outside [A-Za-z0-9._:-]: the result goes under entry-<stream id>
    for bad_id in ["../../etc/passwd", "a b", "x" * 129, "sandpool:result:victim\r\nSET"]:
        res = pool.run_raw(None, msgpack.packb({"v": 1, "id": bad_id, "shell": "true"}))
        assert res["outcome"] == "error" and res["error"]["code"] in ("bad_field",), res
    assert pool.r.get("sandpool:result:../../etc/passwd") is None


def test_entry_without_job_field(pool):
    job_id = new_id("spec")
    pool.r.xadd("sandpool:q:default", {"id": job_id})
    res = pool.wait([job_id], 30)[job_id]
    assert res["outcome"] == "error" and res["error"]["code"] in ("bad_payload", "bad_field"), res


def test_duplicate_keys_do_not_smuggle_a_second_command(pool):
    # {"v":1, "id":X, "shell":"echo first", "shell":"echo second"} encoded by hand
    job_id = new_id("spec")
    body = b"\x84" + msgpack.packb("v") + msgpack.packb(1) + msgpack.packb("id") + msgpack.packb(job_id)
    body += msgpack.packb("shell") + msgpack.packb("echo first") + msgpack.packb("shell") + msgpack.packb("echo second")
    res = pool.run_raw(job_id, body)
    assert res["outcome"] == "error" and res["error"]["code"] == "bad_field", res


def test_burst_of_garbage_does_not_stop_the_daemon(pool):
    ids = []
    for i in range(200):
        job_id = new_id("garbage")
        pool.r.xadd("sandpool:q:default", {"id": job_id, "job": bytes([i]) * (i % 7 + 1)})
        ids.append(job_id)
    good = pool.submit(shell="echo alive")
    out = pool.wait(ids + [good], 60)
    assert out[good]["stdout"] == b"alive\n"
    assert all(out[i]["outcome"] == "error" for i in ids)


def test_cwd_outside_work(pool):
    for cwd, ok in [("/", True), ("/proc/1/root", False), ("/nonexistent", False), ("/work/../etc", True)]:
        res = pool.run(shell="pwd", cwd=cwd)
        if ok:
            assert res["outcome"] == "exit", res
        else:
            assert res["outcome"] == "error" and res["error"]["code"] == "exec_failed", res
