"""Codecs against PROTOCOL.md: job map encoding (section 11 vectors), result and event decoding."""

from __future__ import annotations

import msgpack
import pytest

from sandpool import (
    ErrorInfo,
    Event,
    ProtocolError,
    Result,
    build_job_map,
    decode_event,
    decode_result,
    encode_job,
    valid_job_id,
)


def hexbytes(s: str) -> bytes:
    return bytes.fromhex("".join(s.split()))


VECTOR_T1 = hexbytes("83 a1 76 01 a2 69 64 a2 74 31 a5 73 68 65 6c 6c a7 65 63 68 6f 20 68 69")
VECTOR_T2 = hexbytes(
    """85 a1 76 01 a2 69 64 a2 74 32 a4 61 72 67 76 92 a9 2f 62 69 6e 2f 65 63
    68 6f a3 61 20 62 a3 65 6e 76 81 a1 58 a1 31 aa 74 69 6d 65 6f 75 74 5f
    6d 73 cd 13 88"""
)
VECTOR_STARTED = hexbytes(
    """85 a1 76 01 a4 74 79 70 65 a7 73 74 61 72 74 65 64 a3 73 65 71 00 a6 77
    6f 72 6b 65 72 a1 77 a7 61 74 74 65 6d 70 74 01"""
)


# --- job map --------------------------------------------------------------------------------


def test_vector_t1() -> None:
    assert encode_job(build_job_map("t1", shell="echo hi")) == VECTOR_T1


def test_vector_t2() -> None:
    m = build_job_map("t2", argv=["/bin/echo", "a b"], env={"X": "1"}, timeout_ms=5000)
    assert encode_job(m) == VECTOR_T2


def test_vector_t2_keyword_order_does_not_matter() -> None:
    m = build_job_map("t2", timeout_ms=5000, env={"X": "1"}, argv=("/bin/echo", "a b"))
    assert encode_job(m) == VECTOR_T2


def test_full_job_map_field_order_and_types() -> None:
    m = build_job_map(
        "j", argv=["a"], env={"B": "2", "A": "1"}, cwd="/tmp", stdin="é",
        timeout_ms=1, max_output_bytes=0, retries=5,
    )
    assert list(m) == ["v", "id", "argv", "env", "cwd", "stdin", "timeout_ms",
                       "max_output_bytes", "retries"]
    assert list(m["env"]) == ["B", "A"]  # caller's order kept
    raw = encode_job(m)
    # stdin is msgpack bin (0xc4), UTF-8 encoded when given as str
    assert b"\xa5stdin\xc4\x02\xc3\xa9" in raw
    back = msgpack.unpackb(raw, raw=False)
    assert back == {"v": 1, "id": "j", "argv": ["a"], "env": {"B": "2", "A": "1"},
                    "cwd": "/tmp", "stdin": "é".encode(), "timeout_ms": 1,
                    "max_output_bytes": 0, "retries": 5}


def test_binary_stdin_kept_exactly() -> None:
    data = bytes(range(256)) * 3
    for given in (data, bytearray(data), memoryview(data)):
        m = build_job_map("j", shell="cat", stdin=given)
        assert msgpack.unpackb(encode_job(m))["stdin"] == data


def test_server_limits_are_left_to_the_daemon() -> None:
    # Over the default server maxima, but only the daemon knows its limits: no local error.
    m = build_job_map("j", shell="x" * (2 << 20), timeout_ms=10**9,
                      max_output_bytes=1 << 40, retries=99, stdin=b"\0" * (17 << 20))
    assert m["timeout_ms"] == 10**9 and m["retries"] == 99


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # neither argv nor shell
        {"argv": ["a"], "shell": "a"},
        {"argv": []},
        {"argv": "ls -l"},
        {"argv": [""]},
        {"argv": ["a", 1]},
        {"argv": ["a", b"b"]},
        {"argv": ["a\0b"]},
        {"shell": 3},
        {"shell": "a\0"},
        {"shell": "x", "env": {"1X": "a"}},
        {"shell": "x", "env": {"A-B": "a"}},
        {"shell": "x", "env": {"": "a"}},
        {"shell": "x", "env": {"A": 1}},
        {"shell": "x", "env": {"A": "a\0"}},
        {"shell": "x", "env": [("A", "b")]},
        {"shell": "x", "cwd": "work"},
        {"shell": "x", "cwd": "/a\0"},
        {"shell": "x", "stdin": 5},
        {"shell": "x", "timeout_ms": 0},
        {"shell": "x", "timeout_ms": -1},
        {"shell": "x", "timeout_ms": 1.5},
        {"shell": "x", "timeout_ms": True},
        {"shell": "x", "max_output_bytes": -1},
        {"shell": "x", "retries": -1},
        {"shell": "x", "retries": "1"},
        {"shell": "x", "timeout_ms": 2**64},
    ],
)
def test_obviously_bad_jobs_raise_value_error(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        build_job_map("j", **kwargs)


@pytest.mark.parametrize("job_id", ["", "a b", "a/b", "x" * 129, "é", "a\n", 5, None])
def test_bad_job_ids(job_id: object) -> None:
    assert not valid_job_id(job_id)
    with pytest.raises(ValueError):
        build_job_map(job_id, shell="true")  # type: ignore[arg-type]


@pytest.mark.parametrize("job_id", ["a", "x" * 128, "A-Z_a.z:0-9", "0123456789abcdef" * 2])
def test_good_job_ids(job_id: str) -> None:
    assert valid_job_id(job_id)
    assert build_job_map(job_id, shell="true")["id"] == job_id


# --- result map -----------------------------------------------------------------------------


def full_result_map(**override: object) -> dict:
    m = {
        "v": 1, "id": "r1", "outcome": "exit", "exit_code": 0, "signal": None,
        "timed_out": False, "killed": False, "stdout": b"out\xff", "stderr": b"err",
        "stdout_truncated": True, "stderr_truncated": False,
        "stdout_dropped_bytes": 12, "stderr_dropped_bytes": 0,
        "exec_time_us": 1500, "cpu_time_us": 900, "peak_memory_bytes": 1 << 20,
        "queue_wait_us": 42, "worker": "w1", "attempt": 1, "error": None,
    }
    m.update(override)
    return m


def test_decode_full_result() -> None:
    r = decode_result(msgpack.packb(full_result_map(), use_bin_type=True))
    assert r == Result(
        id="r1", outcome="exit", exit_code=0, signal=None, timed_out=False, killed=False,
        stdout=b"out\xff", stderr=b"err", stdout_truncated=True, stderr_truncated=False,
        stdout_dropped_bytes=12, stderr_dropped_bytes=0, exec_time_us=1500, cpu_time_us=900,
        peak_memory_bytes=1 << 20, queue_wait_us=42, worker="w1", attempt=1, error=None, v=1,
    )
    assert r.ok


def test_result_field_set_matches_protocol_section_5() -> None:
    import dataclasses
    names = {f.name for f in dataclasses.fields(Result)}
    assert names == set(full_result_map())


def test_decode_result_accepts_str_for_bytes() -> None:
    r = decode_result(msgpack.packb(full_result_map(stdout="héllo", stderr=""), use_bin_type=True))
    assert r.stdout == "héllo".encode() and r.stderr == b""


def test_decode_result_str_with_invalid_utf8_roundtrips() -> None:
    # a daemon that sends raw bytes as msgpack str (non-UTF-8): bytes come back unchanged
    raw = msgpack.packb(full_result_map(stdout="X"), use_bin_type=True).replace(
        b"\xa6stdout\xa1X", b"\xa6stdout\xa2\xff\xfe")
    assert decode_result(raw).stdout == b"\xff\xfe"


def test_decode_result_ignores_unknown_fields() -> None:
    m = full_result_map(future_field={"a": [1, 2]}, another=7)
    m[5] = "non-string key"
    r = decode_result(msgpack.packb(m, use_bin_type=True, strict_types=False))
    assert r.outcome == "exit" and r.worker == "w1"


def test_decode_error_result() -> None:
    m = full_result_map(outcome="error", exit_code=None,
                        error={"code": "bad_field", "message": "shell: not a string",
                               "retryable": False, "extra": 1})
    r = decode_result(msgpack.packb(m, use_bin_type=True))
    assert r.error == ErrorInfo(code="bad_field", message="shell: not a string", retryable=False)
    assert r.exit_code is None and not r.ok


@pytest.mark.parametrize(
    "override, ok",
    [
        ({"outcome": "exit", "exit_code": 0}, True),
        ({"outcome": "exit", "exit_code": 3}, False),
        ({"outcome": "signal", "exit_code": None, "signal": 9}, False),
        ({"outcome": "timeout", "exit_code": None, "timed_out": True, "killed": True}, False),
        ({"outcome": "error", "exit_code": 0}, False),
    ],
)
def test_ok(override: dict, ok: bool) -> None:
    assert decode_result(msgpack.packb(full_result_map(**override))).ok is ok


def test_decode_minimal_result_defaults() -> None:
    r = decode_result(msgpack.packb({"v": 1, "id": "x", "outcome": "cancelled",
                                     "error": {"code": "cancelled"}}))
    assert r.outcome == "cancelled" and r.stdout == b"" and r.exit_code is None
    assert r.error == ErrorInfo("cancelled", "", False) and r.attempt == 0


@pytest.mark.parametrize(
    "raw",
    [
        b"\xc1",
        b"",
        msgpack.packb([1, 2, 3]),
        msgpack.packb({"v": 1, "id": "x"}),  # no outcome
        msgpack.packb(full_result_map(exit_code="0")),
        msgpack.packb(full_result_map(stdout=5)),
        msgpack.packb(full_result_map(error="oops")),
        msgpack.packb(full_result_map()) + b"\x00",  # trailing bytes
    ],
)
def test_decode_bad_result(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_result(raw)


# --- events ---------------------------------------------------------------------------------


def test_started_event_vector() -> None:
    assert decode_event(VECTOR_STARTED) == Event(type="started", seq=0, worker="w", attempt=1)


def test_output_and_exited_events() -> None:
    ev = decode_event(msgpack.packb({"v": 1, "type": "stderr", "seq": 4, "data": b"\x00x"},
                                    use_bin_type=True))
    assert ev == Event(type="stderr", seq=4, data=b"\x00x")
    ev = decode_event(msgpack.packb({"v": 1, "type": "exited", "seq": 9,
                                     "result": full_result_map(outcome="timeout")},
                                    use_bin_type=True))
    assert ev.type == "exited" and ev.seq == 9 and ev.result is not None
    assert ev.result.outcome == "timeout" and ev.result.stdout == b"out\xff"


def test_unknown_event_type_and_fields_decode() -> None:
    ev = decode_event(msgpack.packb({"v": 1, "type": "progress", "seq": 2, "pct": 50}))
    assert ev == Event(type="progress", seq=2)


@pytest.mark.parametrize(
    "obj",
    [
        {"v": 1, "seq": 0},  # no type
        {"v": 1, "type": "stdout"},  # no seq
        {"v": 1, "type": "exited", "seq": 1},  # no result
        [1],
    ],
)
def test_bad_events(obj: object) -> None:
    with pytest.raises(ProtocolError):
        decode_event(msgpack.packb(obj))
