"""Protocol v1 codecs (docs/PROTOCOL.md): the job map, the result map and live events.

Pure data and functions, no I/O.  Contracts:

* :func:`build_job_map` returns a dict whose insertion order is the field order of PROTOCOL.md
  section 3 (``v, id, argv|shell, env, cwd, stdin, timeout_ms, max_output_bytes, retries``), so
  :func:`encode_job` reproduces the section 11 test vectors byte for byte.  It raises
  ``ValueError`` for input that is wrong whatever the server's limits (wrong types, NUL bytes,
  bad names, both/neither of argv and shell, negative numbers); limits that depend on the server
  (sizes, maximum timeout) are left to the daemon, which clamps or rejects with ``too_large``.
* :func:`decode_result` and :func:`decode_event` accept msgpack str where bytes are expected,
  ignore unknown fields and raise :class:`ProtocolError` only when the input is not a msgpack map
  or a known field has an unusable type.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Union

import msgpack

from .errors import ProtocolError, check_options

PROTOCOL_VERSION = 1
#: The version of job maps in entries that name a completion stream (PROTOCOL.md section 21),
#: and the highest version this client speaks.
NOTIFY_PROTOCOL_VERSION = 4

#: Event types of PROTOCOL.md section 6.
EVENT_TYPES = ("started", "stdout", "stderr", "exited")

#: Outcomes of PROTOCOL.md section 5.
OUTCOMES = (
    "exit",
    "signal",
    "timeout",
    "cancelled",
    "output_limit",
    "memory_limit",
    "pids_limit",
    "cpu_limit",
    "disk_limit",
    "seccomp",
    "worker_lost",
    "error",
)

#: Error codes of PROTOCOL.md section 8 and whether each is retryable.
ERROR_CODES = {
    "bad_payload": False,
    "bad_version": False,
    "bad_field": False,
    "too_large": False,
    "exec_failed": False,
    "cancelled": False,
    "worker_lost": True,
    "sandbox_failed": True,
    "shutdown": True,
    "internal": True,
}

_JOB_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UINT64_MAX = 2**64 - 1

BytesLike = Union[bytes, bytearray, memoryview]


def valid_job_id(job_id: object) -> bool:
    """True when ``job_id`` is a str of 1..128 characters from ``[A-Za-z0-9._:-]``."""
    return isinstance(job_id, str) and _JOB_ID_RE.fullmatch(job_id) is not None


def _check_text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    return value


def _check_uint(name: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum or value > _UINT64_MAX:
        raise ValueError(f"{name} must be >= {minimum} (got {value})")
    return value


RUNTIMES = ("python", "node", "bash")
_TEMPLATE_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")


def build_job_map(
    job_id: str,
    *,
    argv: Optional[Sequence[str]] = None,
    shell: Optional[str] = None,
    code: Optional[str] = None,
    runtime: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    stdin: Optional[Union[BytesLike, str]] = None,
    timeout_ms: Optional[int] = None,
    max_output_bytes: Optional[int] = None,
    retries: Optional[int] = None,
    template: Optional[str] = None,
    memory_bytes: Optional[int] = None,
    pids: Optional[int] = None,
    cpu_time_ms: Optional[int] = None,
    version: int = PROTOCOL_VERSION,
) -> Dict[str, Any]:
    """Build the job map of PROTOCOL.md section 3, fields in the documented order.

    Fields given as ``None`` are omitted (the daemon applies its defaults).  ``env`` keeps the
    caller's order.  ``stdin`` may be bytes-like (sent as msgpack bin) or str (UTF-8 encoded).
    Raises ``ValueError`` for input no daemon could accept.
    """
    if not valid_job_id(job_id):
        raise ValueError(f"invalid job id {job_id!r}: need 1..128 characters of [A-Za-z0-9._:-]")
    if sum(x is not None for x in (argv, shell, code)) != 1:
        raise ValueError("exactly one of argv, shell and code must be given")
    if (code is None) != (runtime is None):
        raise ValueError("code and runtime go together")
    if runtime is not None and runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)} (got {runtime!r})")
    m: Dict[str, Any] = {"v": version, "id": job_id}
    if code is not None:
        m["code"] = _check_text("code", code)
        m["runtime"] = runtime
    elif argv is not None:
        if isinstance(argv, (str, bytes, bytearray)) or not isinstance(argv, Iterable):
            raise ValueError("argv must be a list of str (use shell= for a command line)")
        items = list(argv)
        if not items:
            raise ValueError("argv must not be empty")
        m["argv"] = [_check_text(f"argv[{i}]", a) for i, a in enumerate(items)]
        if not m["argv"][0]:
            raise ValueError("argv[0] must not be empty")
    else:
        m["shell"] = _check_text("shell", shell)
    if env is not None:
        if not isinstance(env, Mapping):
            raise ValueError(f"env must be a mapping of str to str, not {type(env).__name__}")
        out_env: Dict[str, str] = {}
        for k, v in env.items():
            if not isinstance(k, str) or _ENV_NAME_RE.fullmatch(k) is None:
                raise ValueError(f"invalid environment variable name {k!r}")
            out_env[k] = _check_text(f"env[{k!r}]", v)
        m["env"] = out_env
    if cwd is not None:
        _check_text("cwd", cwd)
        if not cwd.startswith("/"):
            raise ValueError(f"cwd must be an absolute path (got {cwd!r})")
        m["cwd"] = cwd
    if stdin is not None:
        if isinstance(stdin, str):
            m["stdin"] = stdin.encode("utf-8")
        elif isinstance(stdin, (bytes, bytearray, memoryview)):
            m["stdin"] = bytes(stdin)
        else:
            raise ValueError(f"stdin must be bytes or str, not {type(stdin).__name__}")
    if timeout_ms is not None:
        m["timeout_ms"] = _check_uint("timeout_ms", timeout_ms, minimum=1)
    if max_output_bytes is not None:
        m["max_output_bytes"] = _check_uint("max_output_bytes", max_output_bytes)
    if retries is not None:
        m["retries"] = _check_uint("retries", retries)
    if template is not None:
        if not isinstance(template, str) or _TEMPLATE_RE.fullmatch(template) is None:
            raise ValueError(f"invalid template name {template!r}: need 1..64 characters of [A-Za-z0-9._-]")
        m["template"] = template
    for name, value in (("memory_bytes", memory_bytes), ("pids", pids), ("cpu_time_ms", cpu_time_ms)):
        if value is not None:
            m[name] = _check_uint(name, value, minimum=1)
    return m


@dataclasses.dataclass(frozen=True)
class Job:
    """One job's options (PROTOCOL.md section 3), for :meth:`Client.map` and ``submit_many``.

    Exactly one of ``argv``, ``shell`` or ``code`` (with ``runtime``).  ``id`` is the job id (a
    random or batch-derived one when ``None``); give stable ids to resubmit a batch after a crash
    without running anything twice.
    """

    argv: Optional[Sequence[str]] = None
    shell: Optional[str] = None
    code: Optional[str] = None
    runtime: Optional[str] = None
    template: Optional[str] = None
    env: Optional[Mapping[str, str]] = None
    cwd: Optional[str] = None
    stdin: Optional[Union[BytesLike, str]] = None
    timeout_ms: Optional[int] = None
    max_output_bytes: Optional[int] = None
    retries: Optional[int] = None
    memory_bytes: Optional[int] = None
    pids: Optional[int] = None
    cpu_time_ms: Optional[int] = None
    id: Optional[str] = None

    def options(self) -> Dict[str, Any]:
        """The options given (not None), without ``id``."""
        return {f: v for f, v in self.__dict__.items() if v is not None and f != "id"}


#: The names of a job's options: the keyword arguments of submit, run and Job.
JOB_OPTIONS = tuple(f.name for f in dataclasses.fields(Job) if f.name != "id")


def as_job(job: Union[Job, Mapping[str, Any], str], where: str = "job") -> Job:
    """A :class:`Job` from a Job, a mapping of options (``id`` allowed) or a shell line (str).

    A misspelt option raises :class:`~sandpool.errors.InvalidOptionError` naming the valid ones.
    """
    if isinstance(job, Job):
        return job
    if isinstance(job, str):
        return Job(shell=job)
    if isinstance(job, Mapping):
        check_options(job, JOB_OPTIONS + ("id",), where)
        return Job(**job)
    raise ValueError(f"{where}: a Job, a mapping of options or a shell line, not {type(job).__name__}")


def encode_job(job_map: Mapping[str, Any]) -> bytes:
    """msgpack-encode a job map: str as msgpack str, bytes as msgpack bin, keys in dict order."""
    return msgpack.packb(job_map, use_bin_type=True)


# --- decoding -------------------------------------------------------------------------------


def _unpack_map(data: bytes, what: str) -> Dict[str, Any]:
    try:
        obj = msgpack.unpackb(
            data, raw=False, unicode_errors="surrogateescape", strict_map_key=False
        )
    except Exception as e:  # msgpack raises several unrelated exception types
        raise ProtocolError(f"{what} is not valid msgpack: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what} is not a msgpack map (got {type(obj).__name__})")
    return obj  # read with .get(name): keys of other types are never looked at


def _as_bytes(v: Any, field: str) -> bytes:
    if v is None:
        return b""
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):  # str accepted where bytes are expected (PROTOCOL.md conventions)
        return v.encode("utf-8", "surrogateescape")
    raise ProtocolError(f"field {field!r} must be bytes, got {type(v).__name__}")


def _as_str(v: Any, field: str, default: Optional[str] = "") -> Optional[str]:
    if v is None:
        return default
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    raise ProtocolError(f"field {field!r} must be a string, got {type(v).__name__}")


def _as_int(v: Any, field: str, default: Optional[int] = 0) -> Optional[int]:
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f"field {field!r} must be an integer, got {type(v).__name__}")
    return v


def _as_bool(v: Any, field: str) -> bool:
    if v is None:
        return False
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v != 0
    raise ProtocolError(f"field {field!r} must be a bool, got {type(v).__name__}")


@dataclasses.dataclass(frozen=True)
class ErrorInfo:
    """The ``error`` map of a result (PROTOCOL.md sections 5 and 8).  Data, not an exception."""

    code: str
    message: str = ""
    retryable: bool = False


@dataclasses.dataclass(frozen=True)
class Result:
    """The final result of a job (PROTOCOL.md section 5).

    Every field of the result map is here; fields missing from the map take the zero value shown
    (``None`` for nil-able ones).  ``stdout``/``stderr`` are the bytes kept by the daemon (the
    first ``max_output_bytes`` of each stream).
    """

    id: str
    outcome: str
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    timed_out: bool = False
    killed: bool = False
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    stdout_dropped_bytes: int = 0
    stderr_dropped_bytes: int = 0
    exec_time_us: int = 0
    cpu_time_us: int = 0
    peak_memory_bytes: int = 0
    queue_wait_us: int = 0
    worker: str = ""
    attempt: int = 0
    error: Optional[ErrorInfo] = None
    v: int = PROTOCOL_VERSION

    @property
    def ok(self) -> bool:
        """True exactly when the process exited with status 0."""
        return self.outcome == "exit" and self.exit_code == 0

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> "Result":
        """Build a Result from a decoded result map; unknown fields are ignored."""
        err = m.get("error")
        error: Optional[ErrorInfo] = None
        if isinstance(err, Mapping):
            code = _as_str(err.get("code"), "error.code")
            error = ErrorInfo(
                code=code or "",
                message=_as_str(err.get("message"), "error.message") or "",
                retryable=_as_bool(err.get("retryable"), "error.retryable"),
            )
        elif err is not None:
            raise ProtocolError(f"field 'error' must be a map or nil, got {type(err).__name__}")
        outcome = _as_str(m.get("outcome"), "outcome", None)
        if outcome is None:
            raise ProtocolError("result has no 'outcome'")
        # Built without the dataclass's __init__ (a frozen one sets each field through
        # object.__setattr__): a map decodes once per job, and this is the client's hot path.
        # Fields of the expected type are taken as they are; others go through the converters,
        # which accept the protocol's alternatives (str for bytes, ...) or raise.
        out = object.__new__(cls)
        d = out.__dict__
        d.update(_RESULT_DEFAULTS)
        for name, kind, convert in _RESULT_FIELDS:
            v = m.get(name)
            if v is not None:
                d[name] = v if type(v) is kind else convert(v, name)
        d["outcome"], d["error"] = outcome, error
        d.setdefault("id", "")
        return out


#: (name, type, converter) of the plain fields of a result map.
_RESULT_FIELDS = tuple(
    [(n, int, _as_int) for n in ("v", "exit_code", "signal", "stdout_dropped_bytes", "stderr_dropped_bytes",
                                 "exec_time_us", "cpu_time_us", "peak_memory_bytes", "queue_wait_us", "attempt")]
    + [(n, bool, _as_bool) for n in ("timed_out", "killed", "stdout_truncated", "stderr_truncated")]
    + [(n, bytes, _as_bytes) for n in ("stdout", "stderr")]
    + [(n, str, _as_str) for n in ("id", "worker")])
_RESULT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Result) if f.default is not dataclasses.MISSING}


def entry_fields(job_id: str, payload: bytes, notify: Optional[str] = None,
                 notify_result: bool = False) -> Dict[str, Union[str, bytes]]:
    """The fields of a queue entry (PROTOCOL.md sections 2 and 21).  With ``notify`` the payload
    must be a job map of version 4 (:data:`NOTIFY_PROTOCOL_VERSION`)."""
    fields: Dict[str, Union[str, bytes]] = {"id": job_id, "job": payload}
    if notify is not None:
        if not valid_job_id(notify):
            raise ValueError(f"invalid notify stream name {notify!r}: need 1..128 characters of [A-Za-z0-9._:-]")
        fields["notify"] = notify
        if notify_result:
            fields["notify_result"] = "1"
    return fields


@dataclasses.dataclass(frozen=True)
class Completion:
    """One record of a completion stream (PROTOCOL.md section 21).

    ``result`` is the decoded result when the record carries it; ``result_bytes`` the result's
    size when it was asked for but too large to carry (fetch it with GET).
    """

    id: str
    outcome: str
    exit_code: Optional[int]
    error: Optional[str] = None
    result: Optional[Result] = None
    result_bytes: Optional[int] = None


def decode_completion(fields: Union[Mapping[Any, Any], Sequence[Any]]) -> Completion:
    """Decode the fields of a completion record: a mapping, or XREAD's flat list of names and
    values (bytes or str)."""
    if type(fields) is list:
        it = iter(fields)
        fields = dict(zip(it, it))
    f: Mapping[Any, Any] = fields  # type: ignore[assignment]
    if f and type(next(iter(f))) is str:
        f = {k.encode(): v for k, v in f.items()}
    job_id, outcome = _text(f.get(b"id")), _text(f.get(b"outcome"))
    if not job_id or outcome is None:
        raise ProtocolError("completion record without id or outcome", code="bad_payload")
    code = f.get(b"exit_code")
    try:
        exit_code = int(code) if code else None
        size = int(f.get(b"result_bytes") or 0) or None
    except ValueError:
        raise ProtocolError(f"completion record of {job_id}: bad number", code="bad_payload") from None
    raw = f.get(b"result")
    result = decode_result(raw if type(raw) is bytes else raw.encode()) if raw is not None else None
    return Completion(id=job_id, outcome=outcome, exit_code=exit_code, error=_text(f.get(b"error")),
                      result=result, result_bytes=size)


def _text(v: Any) -> Any:
    return v.decode("utf-8", "replace") if type(v) is bytes else v


def decode_result(data: bytes) -> Result:
    """Decode the msgpack result map stored at ``sandpool:result:<id>``."""
    return Result.from_map(_unpack_map(data, "result"))


@dataclasses.dataclass(frozen=True)
class Event:
    """One live event of a job (PROTOCOL.md section 6).

    ``type`` is ``started``, ``stdout``, ``stderr`` or ``exited`` (or a type this client does not
    know, which :meth:`Client.stream` never yields).  ``seq`` is the daemon's sequence number, or
    ``None`` for an event this client rebuilt from the stored result after live events were lost.
    ``data`` is set for stdout/stderr, ``worker``/``attempt`` for started, ``result`` for exited.
    """

    type: str
    seq: Optional[int]
    data: bytes = b""
    worker: Optional[str] = None
    attempt: Optional[int] = None
    result: Optional[Result] = None


def decode_event(data: bytes) -> Event:
    """Decode one pub/sub message of ``sandpool:out:<id>``; unknown fields are ignored."""
    m = _unpack_map(data, "event")
    etype = _as_str(m.get("type"), "type", None)
    if etype is None:
        raise ProtocolError("event has no 'type'")
    seq = _as_int(m.get("seq"), "seq", None)
    if seq is None:
        raise ProtocolError("event has no 'seq'")
    if etype == "started":
        return Event(
            type=etype,
            seq=seq,
            worker=_as_str(m.get("worker"), "worker"),
            attempt=_as_int(m.get("attempt"), "attempt"),
        )
    if etype in ("stdout", "stderr"):
        return Event(type=etype, seq=seq, data=_as_bytes(m.get("data"), "data"))
    if etype == "exited":
        r = m.get("result")
        if not isinstance(r, Mapping):
            raise ProtocolError("exited event has no result map")
        return Event(type=etype, seq=seq, result=Result.from_map(r))
    return Event(type=etype, seq=seq)
