"""RESP2 (the Redis wire format) for the client's hot path: packing pipelined commands and reading
their replies, for the XADD batches and the completion-stream XREADs of ``map``,
``submit_many`` and ``completions`` (sandpool._drive's :class:`~sandpool._drive.Raw` step).

Why: redis-py's pure-Python reply parser makes several function calls per element (an awaited
coroutine each with redis.asyncio), which was the largest share of the client's CPU per job when
following a batch; this reader parses a buffer in one loop.  (With the optional hiredis package
redis-py would be fast too, but the client depends on python3-redis and python3-msgpack only.)

Replies come back raw: bulk and simple strings as bytes, integers as int, arrays as lists, nil as
None, and error replies as :class:`ReplyError` values (the caller decides what to raise).  No I/O.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Sequence


class ReplyError(str):
    """An error reply (``-ERR ...``), as a value."""


def pack(cmds: Iterable[Sequence[Any]]) -> bytes:
    """The bytes of ``cmds`` (each a sequence of str, bytes or int arguments), pipelined."""
    out: List[bytes] = []
    add = out.append
    for args in cmds:
        add(b"*%d\r\n" % len(args))
        for a in args:
            kind = type(a)
            if kind is str:
                a = a.encode()
            elif kind is not bytes:
                a = _as_bytes(a)
            add(b"$%d\r\n%b\r\n" % (len(a), a))
    return b"".join(out)


def _as_bytes(a: Any) -> bytes:
    if type(a) is str:
        return a.encode()
    if type(a) is int:
        return b"%d" % a
    if isinstance(a, (bytes, bytearray, memoryview)):
        return bytes(a)
    return str(a).encode()


_NOTHING = object()


class Reader:
    """Parses replies from bytes fed in any pieces.  :meth:`get` gives the next complete reply,
    or :data:`Reader.NOTHING` until more bytes are fed.  Arrays in progress are kept between
    calls, so a large reply is parsed once however it was split."""

    NOTHING = _NOTHING

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0
        self._stack: List[List[Any]] = []  # [items so far, items still to come] of open arrays

    def feed(self, data: bytes) -> None:
        self._buf = self._buf[self._pos:] + data if self._pos < len(self._buf) else data
        self._pos = 0

    def get(self) -> Any:
        buf, pos, stack = self._buf, self._pos, self._stack
        end_of_buf = len(buf)
        while True:
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                break
            kind = buf[pos]
            if kind == 36:  # $ bulk string
                n = int(buf[pos + 1:nl])
                if n < 0:
                    val: Any = None
                    pos = nl + 2
                else:
                    end = nl + 2 + n
                    if end + 2 > end_of_buf:
                        break
                    val = buf[nl + 2:end]
                    pos = end + 2
            elif kind == 42:  # * array
                n = int(buf[pos + 1:nl])
                pos = nl + 2
                if n > 0:
                    stack.append([[], n])
                    continue
                val = [] if n == 0 else None
            elif kind == 58:  # : integer
                val = int(buf[pos + 1:nl])
                pos = nl + 2
            elif kind == 43:  # + simple string
                val = buf[pos + 1:nl]
                pos = nl + 2
            elif kind == 45:  # - error
                val = ReplyError(buf[pos + 1:nl].decode("utf-8", "replace"))
                pos = nl + 2
            else:
                raise ValueError(f"not a RESP2 reply: type byte {kind!r}")
            while stack:
                top = stack[-1]
                top[0].append(val)
                top[1] -= 1
                if top[1]:
                    break
                val = stack.pop()[0]
            else:
                self._pos = pos
                return val
        self._pos = pos
        return _NOTHING
