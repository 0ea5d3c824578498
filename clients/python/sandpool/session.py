"""Sessions (PROTOCOL.md sections 12-19): a sandbox an agent can live in.

A session keeps its files and processes between calls, stops (files kept) and resumes::

    from sandpool import Client

    c = Client()
    s = c.session("my-agent-1")            # create, or connect to a running one, or resume
    s.write_file("/work/hello.py", b"print('hi')")
    r = s.exec(shell="python3 hello.py")  # a job Result
    p = s.spawn(shell="python3 -m http.server 8000")
    s.exec(shell="curl -s localhost:8000 | head -1")
    s.expose(8000)["url"]                 # a preview URL (templates with expose = on)
    s.stop()                              # processes end, files stay
    s.start()                             # resumed on the same host
    s.destroy()

Every call is one operation: a request XADDed to the stream of the daemon holding the session
(found in the session's record), answered with a stored result and an ``exited`` event.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import msgpack

from .errors import SandpoolError, translate_errors
from .protocol import ErrorInfo, ProtocolError, Result, build_job_map, valid_job_id

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client

SESSION_PROTOCOL_VERSION = 2
BytesLike = Union[bytes, bytearray, memoryview]
OutputCallback = Callable[[bytes], None]

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


@translate_errors
class Process:
    """A background process of a session (``spawn``). ``pid`` is the session's id for it."""

    def __init__(self, session: "Session", pid: str) -> None:
        self.session = session
        self.pid = pid

    def output(self, *, tail_lines: Optional[int] = None, wait: bool = False,
               wait_timeout_ms: Optional[int] = None) -> Dict[str, Any]:
        """Its output so far (the newest 1 MiB of each stream), and whether it still runs."""
        fields: Dict[str, Any] = {"pid": self.pid}
        if tail_lines is not None:
            fields["tail_lines"] = tail_lines
        if wait:
            fields["wait"] = True
        if wait_timeout_ms is not None:
            fields["wait_timeout_ms"] = wait_timeout_ms
        timeout = None if not wait else (wait_timeout_ms or 30000) / 1000 + 30
        return self.session._call("output", fields, timeout=timeout)

    def wait(self, timeout_ms: int = 600000) -> Dict[str, Any]:
        """Waits until it exits (or ``timeout_ms``); returns :meth:`output`."""
        return self.output(wait=True, wait_timeout_ms=timeout_ms)

    def write_stdin(self, data: Union[BytesLike, str], *, close: bool = False) -> None:
        payload = data.encode() if isinstance(data, str) else bytes(data)
        self.session._call("stdin", {"pid": self.pid, "data": payload, "close": close})

    def close_stdin(self) -> None:
        self.session._call("stdin", {"pid": self.pid, "close": True})

    def kill(self, signal: int = 15) -> bool:
        """Signals its process group; False if it had already exited."""
        return bool(self.session._call("kill", {"pid": self.pid, "signal": signal}).get("killed"))

    def __repr__(self) -> str:
        return f"Process({self.session.id!r}, {self.pid!r})"


@translate_errors
class Session:
    """A handle on one session id. Creating the handle does nothing; :meth:`start` creates the
    session (or connects to it, or resumes it). Every method is one operation."""

    def __init__(self, client: "Client", session_id: str, **create_options: Any) -> None:
        if not valid_job_id(session_id):
            raise ValueError(f"invalid session id {session_id!r}: need 1..128 characters of [A-Za-z0-9._:-]")
        self.client = client
        self.id = session_id
        self.create_options = create_options

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    # -- life cycle --------------------------------------------------------------------------

    def start(self, **create_options: Any) -> SessionInfo:
        """Create-or-connect (PROTOCOL.md section 15, ``create``): ``template``, ``env``,
        ``limits`` ({memory_bytes, pids, cpus, disk_bytes}), ``idle_timeout_ms``,
        ``max_lifetime_ms``, ``ephemeral``, ``labels``, ``wait_ms``."""
        opts = dict(self.create_options, **create_options)
        wait_ms = int(opts.get("wait_ms", 30000))
        return SessionInfo.from_value(self._call("create", opts, timeout=wait_ms / 1000 + 60))

    def info(self) -> SessionInfo:
        return SessionInfo.from_value(self._call("info", {}))

    def stop(self) -> SessionInfo:
        """Ends every process; keeps every file. Idempotent."""
        return SessionInfo.from_value(self._call("stop", {}, timeout=120))

    def destroy(self) -> None:
        """Removes the session, its processes and its files. Idempotent."""
        if self.client.redis.hget(self.client.keys.session(self.id), "consumer") is None:
            return  # nothing holds it: nothing to remove
        self._call("destroy", {}, timeout=120)

    def snapshot(self, name: str) -> Dict[str, Any]:
        """Captures the session's files as a template `name` (PROTOCOL.md section 18): new
        sessions on any host can start from it (``template=name``). Returns {name, template,
        bytes}."""
        return self._call("snapshot", {"name": name}, timeout=600)

    # -- commands ----------------------------------------------------------------------------

    def exec(self, *, as_root: bool = False, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None, wait_timeout: Optional[float] = None,
             op_id: Optional[str] = None, **command: Any) -> Result:
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
        return self._command("exec", fields, on_stdout, on_stderr, wait_timeout, op_id)

    def run_code(self, code: str, *, runtime: str = "python", context: str = "default",
                 timeout_ms: Optional[int] = None, max_output_bytes: Optional[int] = None,
                 on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None,
                 wait_timeout: Optional[float] = None, op_id: Optional[str] = None) -> Result:
        """Runs ``code`` in a code context: variables and imports persist between calls of the
        same context (a REPL per context). Exit code 0, or 1 if the code raised."""
        fields: Dict[str, Any] = {"code": code, "runtime": runtime, "context": context}
        if timeout_ms is not None:
            fields["timeout_ms"] = timeout_ms
        if max_output_bytes is not None:
            fields["max_output_bytes"] = max_output_bytes
        return self._command("code", fields, on_stdout, on_stderr, wait_timeout, op_id)

    def restart_context(self, runtime: str = "python", context: str = "default") -> None:
        self._call("context_restart", {"runtime": runtime, "context": context})

    # -- background processes ----------------------------------------------------------------

    def spawn(self, *, argv: Optional[Sequence[str]] = None, shell: Optional[str] = None,
              env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None, as_root: bool = False,
              stdin: str = "pipe") -> Process:
        fields = _command_fields({"argv": argv, "shell": shell, "env": env, "cwd": cwd})
        fields["stdin"] = stdin
        if as_root:
            fields["as_root"] = True
        return Process(self, str(self._call("spawn", fields)["pid"]))

    def processes(self) -> List[Dict[str, Any]]:
        return list(self._call("ps", {}).get("processes", []))

    def process(self, pid: str) -> Process:
        return Process(self, pid)

    # -- files -------------------------------------------------------------------------------

    def write_files(self, files: Sequence[Mapping[str, Any]], *, as_root: bool = False) -> List[Dict[str, Any]]:
        """Each file: ``path``, ``data`` (bytes or str), optional ``mode``, ``parents``,
        ``overwrite``, ``expected_mtime_ns``."""
        out = []
        for f in files:
            g = dict(f)
            if isinstance(g.get("data"), str):
                g["data"] = g["data"].encode()
            out.append(g)
        return list(self._call("write", {"files": out, **_root(as_root)}).get("files", []))

    def write_file(self, path: str, data: Union[BytesLike, str], *, mode: Optional[int] = None,
                   as_root: bool = False) -> Dict[str, Any]:
        f: Dict[str, Any] = {"path": path, "data": data}
        if mode is not None:
            f["mode"] = mode
        return self.write_files([f], as_root=as_root)[0]

    def append_file(self, path: str, data: Union[BytesLike, str], *, as_root: bool = False) -> Dict[str, Any]:
        payload = data.encode() if isinstance(data, str) else bytes(data)
        return self._call("append", {"path": path, "data": payload, **_root(as_root)})

    def read_file(self, path: str, *, offset: Optional[int] = None, length: Optional[int] = None,
                  as_root: bool = False) -> bytes:
        fields: Dict[str, Any] = {"path": path, **_root(as_root)}
        if offset is not None:
            fields["offset"] = offset
        if length is not None:
            fields["length"] = length
        return bytes(self._call("read", fields).get("data", b""))

    def list_dir(self, path: str, *, recursive: bool = False, as_root: bool = False) -> List[Dict[str, Any]]:
        return list(self._call("list", {"path": path, "recursive": recursive, **_root(as_root)}).get("entries", []))

    def stat(self, path: str, *, follow: bool = False, as_root: bool = False) -> Dict[str, Any]:
        return self._call("stat", {"path": path, "follow": follow, **_root(as_root)})

    def exists(self, path: str, *, as_root: bool = False) -> bool:
        return bool(self._call("exists", {"path": path, **_root(as_root)}).get("exists"))

    def mkdir(self, path: str, *, parents: bool = True, as_root: bool = False) -> None:
        self._call("mkdir", {"path": path, "parents": parents, **_root(as_root)})

    def remove(self, path: str, *, recursive: bool = False, force: bool = False, as_root: bool = False) -> int:
        v = self._call("remove", {"path": path, "recursive": recursive, "force": force, **_root(as_root)})
        return int(v.get("removed", 0))

    def copy(self, src: str, dst: str, *, recursive: bool = False, overwrite: bool = False,
             as_root: bool = False) -> None:
        self._call("copy", {"from": src, "to": dst, "recursive": recursive, "overwrite": overwrite, **_root(as_root)})

    def rename(self, src: str, dst: str, *, overwrite: bool = False, as_root: bool = False) -> None:
        self._call("rename", {"from": src, "to": dst, "overwrite": overwrite, **_root(as_root)})

    # -- ports -------------------------------------------------------------------------------

    def expose(self, port: int, *, protocol: str = "http") -> Dict[str, Any]:
        """Gives a server the session runs on ``port`` (bound to localhost or to every address)
        an HTTP preview URL (PROTOCOL.md section 15, "Ports"). Returns the entry ``{port,
        protocol, url, host_port (None), created_ms}``. Idempotent: exposing a port again returns
        the same entry. :class:`SessionError` ``unsupported`` if the session's template has no
        ``expose = on`` or the daemon serves no preview URLs."""
        return self._call("expose", {"port": _port(port), "protocol": protocol})

    def unexpose(self, port: int) -> None:
        """Ends the port's preview URL (its token then gets 404). Idempotent."""
        self._call("unexpose", {"port": _port(port)})

    def ports(self) -> List[Dict[str, Any]]:
        """The session's exposed ports (entries as :meth:`expose` returns them), by port."""
        return list(self._call("ports", {}).get("ports", []))

    # -- the wire ----------------------------------------------------------------------------

    def _stream(self, op: str) -> str:
        keys = self.client.keys
        holder = self.client.redis.hget(keys.session(self.id), "consumer")
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
              intake: bool = False) -> Dict[str, Any]:
        """Sends one operation and returns its value; raises :class:`SessionError` if it failed.
        Subscribes to the op's channel first, so the answer is heard the moment it exists; the
        result key is the fallback (and the truth) if the event is missed."""
        from .client import new_job_id

        op_id = new_job_id()
        stream = self.client.keys.session_intake(self.client.queue) if intake else self._stream(op)
        deadline = None if timeout is None else time.monotonic() + timeout
        pubsub = self.client._subscribe(op_id)
        try:
            self.client.redis.xadd(stream, self._request(op, op_id, fields))
            raw = _wait_result(self.client, pubsub, op_id, deadline)
        finally:
            try:
                pubsub.close()
            except Exception:  # noqa: BLE001
                pass
        res = OpResult.from_bytes(raw)
        if not res.ok:
            e = res.error or ErrorInfo(code="internal", message="no error given", retryable=False)
            raise SessionError(op, self.id, e.code, e.message, e.retryable)
        return res.value

    def _command(self, op: str, fields: Dict[str, Any], on_stdout: Optional[OutputCallback],
                 on_stderr: Optional[OutputCallback], wait_timeout: Optional[float],
                 op_id: Optional[str] = None) -> Result:
        from .client import _Follower, new_job_id

        op_id = op_id or new_job_id()
        stream = self._stream(op)
        deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
        started = time.monotonic()
        pubsub = self.client._subscribe(op_id)
        try:
            self.client.redis.xadd(stream, self._request(op, op_id, fields))
            for ev in _Follower(self.client, op_id, pubsub, from_start=True).events(deadline, started):
                if ev.type == "stdout" and on_stdout is not None:
                    on_stdout(ev.data)
                elif ev.type == "stderr" and on_stderr is not None:
                    on_stderr(ev.data)
                elif ev.type == "exited":
                    assert ev.result is not None
                    err = ev.result.error
                    if err is not None and err.code in _SESSION_ERRORS:
                        raise SessionError(op, self.id, err.code, err.message, err.retryable)
                    return ev.result
            raise AssertionError("event stream ended without an exited event")  # unreachable
        finally:
            try:
                pubsub.close()
            except Exception:  # noqa: BLE001
                pass


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


def _wait_result(client: "Client", pubsub: Any, op_id: str, deadline: Optional[float]) -> bytes:
    """The operation's stored result: from its exited event, or the result key."""
    from .client import WaitTimeout

    started = time.monotonic()
    interval = client.poll_interval
    while True:
        stored = client.redis.get(client.keys.result(op_id))
        if stored is not None:
            return stored
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise WaitTimeout(op_id, now - started)
        wait = interval if deadline is None else max(0.0, min(interval, deadline - now))
        end = time.monotonic() + wait
        while time.monotonic() < end:
            msg = pubsub.get_message(timeout=max(0.0, end - time.monotonic()))
            if msg is None or msg.get("type") != "message":
                continue
            try:
                ev = msgpack.unpackb(msg["data"], raw=False, strict_map_key=False)
            except Exception:  # noqa: BLE001 - a bad message: the result key decides
                break
            if isinstance(ev, dict) and ev.get("type") == "exited" and isinstance(ev.get("result"), dict):
                return msgpack.packb(ev["result"], use_bin_type=True)
            break


__all__ = ["OpResult", "Process", "Session", "SessionError", "SessionInfo"]
