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

:class:`Session` and :class:`Process` block; :class:`AsyncSession` and :class:`AsyncProcess`
(from ``await AsyncClient.session()``) have the same methods as coroutines, on redis.asyncio.
Both are the operations of sandpool._session_ops, carried out by the two drivers of
sandpool._drive, so they have one implementation and the same semantics.
"""

from __future__ import annotations

from ._drive import facade
from ._session_ops import OpResult, ProcessOps, SessionError, SessionInfo, SessionOps
from .errors import translate_errors


@translate_errors
@facade(ProcessOps, asynchronous=False)
class Process(ProcessOps):
    """A background process of a session (``spawn``). ``pid`` is the session's id for it."""


@translate_errors
@facade(SessionOps, asynchronous=False)
class Session(SessionOps):
    """A handle on one session id. Creating the handle does nothing; :meth:`start` creates the
    session (or connects to it, or resumes it). Every method is one operation."""

    _process_cls = Process


@translate_errors
@facade(ProcessOps, asynchronous=True)
class AsyncProcess(ProcessOps):
    """:class:`Process` for asyncio code: the same methods as coroutines."""


@translate_errors
@facade(SessionOps, asynchronous=True)
class AsyncSession(SessionOps):
    """:class:`Session` for asyncio code: the same methods as coroutines (``spawn`` gives an
    :class:`AsyncProcess`).  Operations of one session may run concurrently, as with threads
    on a :class:`Session`."""

    _process_cls = AsyncProcess


__all__ = ["AsyncProcess", "AsyncSession", "OpResult", "Process", "Session", "SessionError", "SessionInfo"]
