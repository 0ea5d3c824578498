"""Every session operation (PROTOCOL.md sections 12-19), written once without I/O (see
sandpool._drive): :class:`sandpool.Session` and :class:`sandpool.AsyncSession` (and their
processes) are these classes carried out by the blocking and the asyncio driver.

Every call is one operation: a request XADDed to the stream of the daemon holding the session
(found in the session's record), answered with a stored result and an ``exited`` event.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import msgpack
import redis

from ._drive import Cmd, Close, Listen, Op
from ._keys import check_id, new_job_id
from ._ops import OutputCallback, flat_fields, output_to, run_followed, subscribe_during, value_op
from .errors import SandpoolError, WaitTimeout
from .protocol import BytesLike, ErrorInfo, ProtocolError, Result, build_job_map

SESSION_PROTOCOL_VERSION = 2

# Errors of a command's session rather than of the command: raised, not returned as a Result.
_SESSION_ERRORS = ("session_not_found", "session_lost", "session_stopped", "session_busy", "host_full")
# The job-map fields each command operation takes.
_EXEC_FIELDS = ("argv", "shell", "code", "runtime", "env", "cwd", "stdin", "timeout_ms", "max_output_bytes")


class SessionError(SandpoolError):
    """An operation ended with an error (PROTOCOL.md section 19): ``code``, ``message``,
    ``retryable``."""

    def __init__(self, op: str, session: str, code: str, message: str, retryable: bool) -> None:
        super().__init__(f"{op} on session {session}: {code}: {message}")
        self.op = op
        self.session = session
        self.code = code
        self.message = message
        self.retryable = retryable


@dataclass
class OpResult:
    """An operation result map (PROTOCOL.md section 13)."""

    id: str
    op: str
    session: str
    ok: bool
    error: Optional[ErrorInfo]
    value: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_bytes(cls, data: bytes) -> "OpResult":
        try:
            m = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as e:  # noqa: BLE001 - any decode failure is a protocol error
            raise ProtocolError(f"undecodable operation result: {e}") from e
        return cls.from_map(m)

    @classmethod
    def from_map(cls, m: Any) -> "OpResult":
        """From a decoded result map (an `exited` event carries one: no second decode)."""
        if not isinstance(m, dict) or m.get("v") != SESSION_PROTOCOL_VERSION:
            raise ProtocolError("not an operation result map (v 2)")
        err = m.get("error")
        error = None
        if isinstance(err, dict):
            error = ErrorInfo(
                code=str(err.get("code", "internal")),
                message=str(err.get("message", "")),
                retryable=bool(err.get("retryable", False)),
            )
        value = m.get("value")
        return cls(
            id=str(m.get("id", "")),
            op=str(m.get("op", "")),
            session=str(m.get("session", "")),
            ok=bool(m.get("ok", False)),
            error=error,
            value=value if isinstance(value, dict) else {},
        )


@dataclass
class SessionInfo:
    """What ``create``, ``info`` and ``stop`` return (PROTOCOL.md section 15)."""

    session: str
    state: str
    template: str
    host: str
    created_ms: int
    last_used_ms: int
    timeout_at_ms: int
    labels: Dict[str, str]
    ephemeral: bool
    memory_bytes: int
    memory_limit_bytes: int
    cpu_time_us: int
    cpus: float
    disk_bytes: int
    disk_limit_bytes: int
    processes: int
    error: str = ""

    @classmethod
    def from_value(cls, v: Mapping[str, Any]) -> "SessionInfo":
        return cls(
            session=str(v.get("session", "")),
            state=str(v.get("state", "")),
            template=str(v.get("template", "")),
            host=str(v.get("host", "")),
            created_ms=int(v.get("created_ms", 0)),
            last_used_ms=int(v.get("last_used_ms", 0)),
            timeout_at_ms=int(v.get("timeout_at_ms", 0)),
            labels=dict(v.get("labels") or {}),
            ephemeral=bool(v.get("ephemeral", False)),
            memory_bytes=int(v.get("memory_bytes", 0)),
            memory_limit_bytes=int(v.get("memory_limit_bytes", 0)),
            cpu_time_us=int(v.get("cpu_time_us", 0)),
            cpus=float(v.get("cpus", 0)),
            disk_bytes=int(v.get("disk_bytes", 0)),
            disk_limit_bytes=int(v.get("disk_limit_bytes", 0)),
            processes=int(v.get("processes", 0)),
            error=str(v.get("error", "")),
        )


class ProcessOps:
    """A background process of a session (``spawn``). ``pid`` is the session's id for it."""

    def __init__(self, session: Any, pid: str) -> None:
        self.session = session
        self.pid = pid

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.session.id!r}, {self.pid!r})"

    @property
    def _redis(self) -> Any:
        return self.session._redis

    def output(self, *, tail_lines: Optional[int] = None, wait: bool = False,
               wait_timeout_ms: Optional[int] = None) -> Op[Dict[str, Any]]:
        """Its output so far (the newest 1 MiB of each stream), and whether it still runs."""
        return (yield from self._output(tail_lines, wait, wait_timeout_ms))

    def _output(self, tail_lines: Optional[int], wait: bool, wait_timeout_ms: Optional[int]) -> Op[Dict[str, Any]]:
        fields: Dict[str, Any] = {"pid": self.pid}
        if tail_lines is not None:
            fields["tail_lines"] = tail_lines
        if wait:
            fields["wait"] = True
        if wait_timeout_ms is not None:
            fields["wait_timeout_ms"] = wait_timeout_ms
        timeout = None if not wait else (wait_timeout_ms or 30000) / 1000 + 30
        return (yield from self.session._call("output", fields, timeout=timeout))

    def wait(self, timeout_ms: int = 600000) -> Op[Dict[str, Any]]:
        """Waits until it exits (or ``timeout_ms``); returns :meth:`output`."""
        return (yield from self._output(None, True, timeout_ms))

    def write_stdin(self, data: Union[BytesLike, str], *, close: bool = False) -> Op[None]:
        payload = data.encode() if isinstance(data, str) else bytes(data)
        yield from self.session._call("stdin", {"pid": self.pid, "data": payload, "close": close})

    def close_stdin(self) -> Op[None]:
        yield from self.session._call("stdin", {"pid": self.pid, "close": True})

    def kill(self, signal: int = 15) -> Op[bool]:
        """Signals its process group; False if it had already exited."""
        return bool((yield from self.session._call("kill", {"pid": self.pid, "signal": signal})).get("killed"))


class SessionOps:
    """A handle on one session id. Creating the handle does nothing; :meth:`start` creates the
    session (or connects to it, or resumes it). Every method is one operation."""

    _process_cls: Any = ProcessOps  # the facade's process class

    def __init__(self, client: Any, session_id: str, **create_options: Any) -> None:
        self.client = client
        self.id = check_id(session_id, "session")
        self.create_options = create_options

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r})"

    @property
    def _redis(self) -> Any:
        return self.client._redis

    # -- life cycle --------------------------------------------------------------------------

    def start(self, **create_options: Any) -> Op[SessionInfo]:
        """Create-or-connect (PROTOCOL.md section 15, ``create``): ``template``, ``env``,
        ``limits`` ({memory_bytes, pids, cpus, disk_bytes}), ``idle_timeout_ms``,
        ``max_lifetime_ms``, ``ephemeral``, ``labels``, ``wait_ms``."""
        opts = dict(self.create_options, **create_options)
        wait_ms = int(opts.get("wait_ms", 30000))
        return SessionInfo.from_value((yield from self._call("create", opts, timeout=wait_ms / 1000 + 60)))

    _start = start  # for Client.session, which starts the handle it makes

    def info(self) -> Op[SessionInfo]:
        return SessionInfo.from_value((yield from self._call("info", {})))

    def stop(self) -> Op[SessionInfo]:
        """Ends every process; keeps every file. Idempotent."""
        return SessionInfo.from_value((yield from self._call("stop", {}, timeout=120)))

    def destroy(self) -> Op[None]:
        """Removes the session, its processes and its files. Idempotent."""
        holder = yield Cmd(("HGET", self.client.keys.session(self.id), "consumer"))
        if holder is None:
            return  # nothing holds it: nothing to remove
        yield from self._call("destroy", {}, timeout=120)

    def snapshot(self, name: str) -> Op[Dict[str, Any]]:
        """Captures the session's files as a template `name` (PROTOCOL.md section 18): new
        sessions on any host can start from it (``template=name``). Returns {name, template,
        bytes}."""
        return (yield from self._call("snapshot", {"name": name}, timeout=600))

    # -- commands ----------------------------------------------------------------------------

    def exec(self, *, as_root: bool = False, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None, wait_timeout: Optional[float] = None,
             op_id: Optional[str] = None, **command: Any) -> Op[Result]:
        """Runs a command in the session: exactly one of ``argv``, ``shell`` or ``code`` (with
        ``runtime``), and ``env``, ``cwd`` (default /work), ``stdin``, ``timeout_ms``,
        ``max_output_bytes``. Returns its job :class:`Result`; output is delivered live.
        ``op_id`` (default random) is what :meth:`Client.cancel` takes to cancel it."""
        unknown = set(command) - set(_EXEC_FIELDS)
        if unknown:
            raise ValueError(f"exec takes no {', '.join(sorted(unknown))}")
        fields = _command_fields(command)
        if as_root:
            fields["as_root"] = True
        return (yield from self._command("exec", fields, on_stdout, on_stderr, wait_timeout, op_id))

    def run_code(self, code: str, *, runtime: str = "python", context: str = "default",
                 timeout_ms: Optional[int] = None, max_output_bytes: Optional[int] = None,
                 on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
                 wait_timeout: Optional[float] = None, op_id: Optional[str] = None) -> Op[Result]:
        """Runs ``code`` in a code context: variables and imports persist between calls of the
        same context (a REPL per context). Exit code 0, or 1 if the code raised."""
        fields: Dict[str, Any] = {"code": code, "runtime": runtime, "context": context}
        if timeout_ms is not None:
            fields["timeout_ms"] = timeout_ms
        if max_output_bytes is not None:
            fields["max_output_bytes"] = max_output_bytes
        return (yield from self._command("code", fields, on_stdout, on_stderr, wait_timeout, op_id))

    def restart_context(self, runtime: str = "python", context: str = "default") -> Op[None]:
        yield from self._call("context_restart", {"runtime": runtime, "context": context})

    # -- background processes ----------------------------------------------------------------

    def spawn(self, *, argv: Optional[Sequence[str]] = None, shell: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None, as_root: bool = False,
              stdin: str = "pipe") -> Op[Any]:
        """Starts a background process; its :class:`Process` handle."""
        fields = _command_fields({"argv": argv, "shell": shell, "env": env, "cwd": cwd})
        fields["stdin"] = stdin
        if as_root:
            fields["as_root"] = True
        return self._process_cls(self, str((yield from self._call("spawn", fields))["pid"]))

    def processes(self) -> Op[List[Dict[str, Any]]]:
        return list((yield from self._call("ps", {})).get("processes", []))

    def process(self, pid: str) -> Any:
        """The handle of the background process ``pid`` (no I/O)."""
        return self._process_cls(self, pid)

    # -- files -------------------------------------------------------------------------------

    def write_files(self, files: Sequence[Mapping[str, Any]], *, as_root: bool = False) -> Op[List[Dict[str, Any]]]:
        """Each file: ``path``, ``data`` (bytes or str), optional ``mode``, ``parents``,
        ``overwrite``, ``expected_mtime_ns``."""
        return (yield from self._write_files(files, as_root))

    def _write_files(self, files: Sequence[Mapping[str, Any]], as_root: bool) -> Op[List[Dict[str, Any]]]:
        out = []
        for f in files:
            g = dict(f)
            if isinstance(g.get("data"), str):
                g["data"] = g["data"].encode()
            out.append(g)
        return list((yield from self._call("write", {"files": out, **_root(as_root)})).get("files", []))

    def write_file(self, path: str, data: Union[BytesLike, str], *, mode: Optional[int] = None,
                   as_root: bool = False) -> Op[Dict[str, Any]]:
        f: Dict[str, Any] = {"path": path, "data": data}
        if mode is not None:
            f["mode"] = mode
        return (yield from self._write_files([f], as_root))[0]

    def append_file(self, path: str, data: Union[BytesLike, str], *, as_root: bool = False) -> Op[Dict[str, Any]]:
        payload = data.encode() if isinstance(data, str) else bytes(data)
        return (yield from self._call("append", {"path": path, "data": payload, **_root(as_root)}))

    def read_file(self, path: str, *, offset: Optional[int] = None, length: Optional[int] = None,
                  as_root: bool = False) -> Op[bytes]:
        fields: Dict[str, Any] = {"path": path, **_root(as_root)}
        if offset is not None:
            fields["offset"] = offset
        if length is not None:
            fields["length"] = length
        return bytes((yield from self._call("read", fields)).get("data", b""))

    def list_dir(self, path: str, *, recursive: bool = False, as_root: bool = False) -> Op[List[Dict[str, Any]]]:
        v = yield from self._call("list", {"path": path, "recursive": recursive, **_root(as_root)})
        return list(v.get("entries", []))

    def stat(self, path: str, *, follow: bool = False, as_root: bool = False) -> Op[Dict[str, Any]]:
        return (yield from self._call("stat", {"path": path, "follow": follow, **_root(as_root)}))

    def exists(self, path: str, *, as_root: bool = False) -> Op[bool]:
        return bool((yield from self._call("exists", {"path": path, **_root(as_root)})).get("exists"))

    def mkdir(self, path: str, *, parents: bool = True, as_root: bool = False) -> Op[None]:
        yield from self._call("mkdir", {"path": path, "parents": parents, **_root(as_root)})

    def remove(self, path: str, *, recursive: bool = False, force: bool = False, as_root: bool = False) -> Op[int]:
        v = yield from self._call("remove", {"path": path, "recursive": recursive, "force": force, **_root(as_root)})
        return int(v.get("removed", 0))

    def copy(self, src: str, dst: str, *, recursive: bool = False, overwrite: bool = False,
             as_root: bool = False) -> Op[None]:
        yield from self._call("copy", {"from": src, "to": dst, "recursive": recursive, "overwrite": overwrite,
                                       **_root(as_root)})

    def rename(self, src: str, dst: str, *, overwrite: bool = False, as_root: bool = False) -> Op[None]:
        yield from self._call("rename", {"from": src, "to": dst, "overwrite": overwrite, **_root(as_root)})

    # -- ports -------------------------------------------------------------------------------

    def expose(self, port: int, *, protocol: str = "http") -> Op[Dict[str, Any]]:
        """Gives a server the session runs on ``port`` (bound to localhost or to every address)
        an HTTP preview URL (PROTOCOL.md section 15, "Ports"). Returns the entry ``{port,
        protocol, url, host_port (None), created_ms}``. Idempotent: exposing a port again returns
        the same entry. :class:`SessionError` ``unsupported`` if the session's template has no
        ``expose = on`` or the daemon serves no preview URLs."""
        return (yield from self._call("expose", {"port": _port(port), "protocol": protocol}))

    def unexpose(self, port: int) -> Op[None]:
        """Ends the port's preview URL (its token then gets 404). Idempotent."""
        yield from self._call("unexpose", {"port": _port(port)})

    def ports(self) -> Op[List[Dict[str, Any]]]:
        """The session's exposed ports (entries as :meth:`expose` returns them), by port."""
        return list((yield from self._call("ports", {})).get("ports", []))

    # -- the wire ----------------------------------------------------------------------------

    def _stream(self, op: str) -> Op[str]:
        keys = self.client.keys
        holder = yield Cmd(("HGET", keys.session(self.id), "consumer"))
        if holder is None:
            if op != "create":
                raise SessionError(op, self.id, "session_not_found", f"no session {self.id}", False)
            return keys.session_intake(self.client.queue)
        return keys.session_stream(self.client.queue, holder.decode())

    def _request(self, op: str, op_id: str, fields: Mapping[str, Any]) -> Dict[str, bytes]:
        req: Dict[str, Any] = {"v": SESSION_PROTOCOL_VERSION, "id": op_id, "op": op, "session": self.id}
        req.update(fields)
        return {"id": op_id.encode(), "req": msgpack.packb(req, use_bin_type=True)}

    def _call(self, op: str, fields: Mapping[str, Any], timeout: Optional[float] = 60.0,
              intake: bool = False) -> Op[Dict[str, Any]]:
        """Sends one operation and returns its value; raises :class:`SessionError` if it failed.
        Subscribes to the op's channel first, so the answer is heard the moment it exists; the
        result key is the fallback (and the truth) if the event is missed."""
        op_id = new_job_id()
        keys = self.client.keys
        deadline = None if timeout is None else time.monotonic() + timeout
        # The session's stream is looked up while Redis confirms the subscription: one round
        # trip for the two.
        find = value_op(keys.session_intake(self.client.queue)) if intake else self._stream(op)
        sub, stream = yield from subscribe_during(keys, op_id, find)
        try:
            yield Cmd(("XADD", stream, "*", *flat_fields(self._request(op, op_id, fields))))
            res = yield from _wait_result(keys, self.client.poll_interval, sub, op_id, deadline)
        finally:
            yield Close(sub)
        if not res.ok:
            e = res.error or ErrorInfo(code="internal", message="no error given", retryable=False)
            raise SessionError(op, self.id, e.code, e.message, e.retryable)
        return res.value

    def _command(self, op: str, fields: Dict[str, Any], on_stdout: Optional[OutputCallback],
                 on_stderr: Optional[OutputCallback], wait_timeout: Optional[float],
                 op_id: Optional[str] = None) -> Op[Result]:
        op_id = op_id or new_job_id()
        result = yield from run_followed(self.client.keys, self.client.poll_interval, op_id, self._stream(op),
                                         self._request(op, op_id, fields), output_to(on_stdout, on_stderr),
                                         wait_timeout)
        err = result.error
        if err is not None and err.code in _SESSION_ERRORS:
            raise SessionError(op, self.id, err.code, err.message, err.retryable)
        return result


def _port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be an integer in 1..65535, not {port!r}")
    return port


def _root(as_root: bool) -> Dict[str, Any]:
    return {"as_root": True} if as_root else {}


def _command_fields(command: Mapping[str, Any]) -> Dict[str, Any]:
    """The job-map fields of a command, validated by the job map's own rules."""
    given = {k: v for k, v in command.items() if v is not None}
    m = build_job_map("x", **given)
    return {k: v for k, v in m.items() if k not in ("v", "id")}


def _wait_result(keys: Any, poll_interval: float, sub: Any, op_id: str, deadline: Optional[float]) -> Op[OpResult]:
    """The operation's stored result: from its exited event (decoded once), or the result key.
    As :func:`follow` does, the key is read only once the channel has been silent for
    ``poll_interval`` or has sent something other than a whole result: the caller subscribed
    before it sent the operation, so the event cannot have gone by unheard, and a read before
    the first wait found nothing but cost every operation a round trip."""
    started = time.monotonic()
    take = False
    read = False
    while True:
        key = keys.result(op_id)
        if read:
            stored = (yield from _take_result(key)) if take else (yield Cmd(("GET", key)))
            if stored is not None:
                return OpResult.from_bytes(stored)
        read = True
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise WaitTimeout(op_id, now - started)
        wait = poll_interval if deadline is None else max(0.0, min(poll_interval, deadline - now))
        end = time.monotonic() + wait
        while time.monotonic() < end:
            msg = yield Listen(sub, max(0.0, end - time.monotonic()))
            if msg is None or msg.get("type") != "message":
                continue
            try:
                ev = msgpack.unpackb(msg["data"], raw=False, strict_map_key=False)
            except Exception:  # noqa: BLE001 - a bad message: the result key decides
                break
            if isinstance(ev, dict) and ev.get("type") == "exited" and isinstance(ev.get("result"), dict):
                return OpResult.from_map(ev["result"])
            # Any other message, such as an exited event that names a large result instead of
            # carrying it (section 16): the result key is read at once, and a large one taken.
            take = isinstance(ev, dict) and ev.get("type") == "exited" and "result_bytes" in ev
            break


def _take_result(key: str) -> Op[Optional[bytes]]:
    """A large result, read and deleted (GETDEL): it was stored for this client alone (PROTOCOL.md
    section 16), and Redis gives the memory of a deleted one to the next instead of faulting in
    fresh pages for each, which was most of what reading back a MiB cost.  Under an ACL that
    allows only GET on result keys (SECURITY.md section 4's client user), a GET: the result then
    stays for its ttl, as every result did."""
    try:
        return (yield Cmd(("GETDEL", key)))
    except redis.ResponseError:
        return (yield Cmd(("GET", key)))
