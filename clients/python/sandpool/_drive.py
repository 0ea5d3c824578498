"""The client's I/O, and nothing else: every operation (sandpool._ops, sandpool._session_ops) is
written once, without I/O, as a generator that yields steps and receives their replies; the two
drivers here carry the steps out, one with redis (blocking) and one with redis.asyncio.

An operation (an ``Op``) yields:

* :class:`Cmd`: one Redis command; the reply is redis-py's reply to it (bytes, dicts as its
  response callbacks make them);
* :class:`Pipe`: commands sent in one round trip (``transaction``: in MULTI/EXEC); the reply is
  the list of their replies;
* :class:`Raw`: as Pipe, through the client's own RESP code (sandpool._resp), for the hot
  path of batches; the replies are raw;
* :class:`Subscribe`, :class:`Listen`, :class:`Close`: a pub/sub connection of its own (the reply
  to Subscribe is its handle; to Listen, the next message or ``None`` after ``timeout``);
* :class:`Sleep`;
* :class:`Emit` (streaming operations only): a value for the caller's iteration.

A step that fails raises its exception into the operation at the ``yield`` (so an operation can
catch a lost connection and go on).  When the caller stops iterating a streaming operation
(``close()``/``aclose()``, ``break``, Ctrl-C, task cancellation), that exception is raised into
it too (GeneratorExit as :class:`Stopped`, since a generator cannot answer GeneratorExit with
more steps) and the driver goes on executing the steps it yields while it unwinds (its cleanup:
a map cancels its jobs), ignoring any Emit, until it ends.  An operation whose ``finally`` yields
steps must therefore be driven to its end, as the drivers and :func:`sandpool._ops.relay` do.

:func:`facade` turns the public operations of a class into methods of a sync or an async client.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import Any, AsyncIterator, Callable, Generator, Iterator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

import redis

from ._resp import Reader, ReplyError, pack

T = TypeVar("T")

# How much one read from the socket takes at most.
_READ_SIZE = 1 << 18

#: An operation: yields steps, receives their replies, returns its value.
Op = Generator[Any, Any, T]

#: The exceptions that mean the connection to Redis broke (not a refused command).
CONN_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


class Cmd(NamedTuple):
    args: Tuple[Any, ...]


class Pipe(NamedTuple):
    cmds: Sequence[Tuple[Any, ...]]
    transaction: bool = False


class Raw(NamedTuple):
    """Like :class:`Pipe` (no transaction), but packed and parsed by sandpool._resp: the replies
    come back raw (XREAD's as nested lists, not redis-py's tuples and dicts).  For the hot path."""
    cmds: Sequence[Tuple[Any, ...]]


class Subscribe(NamedTuple):
    channel: str


class Listen(NamedTuple):
    handle: Any
    timeout: float


class Close(NamedTuple):
    handle: Any


class Sleep(NamedTuple):
    seconds: float


class Emit(NamedTuple):
    value: Any


class Stopped(BaseException):
    """Raised into a streaming operation when its caller stopped iterating (the driver's
    GeneratorExit, which an operation cannot answer with steps)."""


def streaming(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Marks an operation whose value is an iteration (its Emits), not a return value."""
    fn._sandpool_streaming = True  # type: ignore[attr-defined]
    return fn


DONE = object()


class Cursor:
    """Where an operation stands: :meth:`next` resumes it with the reply to its last step (or
    the exception that step raised, given to :meth:`fail`) and returns its next step, or
    ``DONE`` once it has ended (its return value then in :attr:`value`).  ``stopping`` is set once
    the caller has stopped (GeneratorExit, Ctrl-C, cancellation): its Emits are dropped."""

    __slots__ = ("op", "reply", "exc", "value", "stopping")

    def __init__(self, op: Op[Any]) -> None:
        self.op = op
        self.reply: Any = None
        self.exc: Optional[BaseException] = None
        self.value: Any = None
        self.stopping = False

    def next(self) -> Any:
        reply, exc = self.reply, self.exc
        self.reply = self.exc = None
        try:
            return self.op.throw(exc) if exc is not None else self.op.send(reply)
        except StopIteration as stop:
            self.value = stop.value
            return DONE

    def fail(self, e: BaseException) -> None:
        if isinstance(e, GeneratorExit):
            e = Stopped()  # an operation may answer this one with cleanup steps
        if not isinstance(e, Exception):
            self.stopping = True
        self.exc = e


# --- the blocking driver ------------------------------------------------------------------------


def _execute(r: "redis.Redis", step: Any) -> Any:
    kind = type(step)
    if kind is Cmd:
        return r.execute_command(*step.args)
    if kind is Pipe:
        pipe = r.pipeline(transaction=step.transaction)
        for args in step.cmds:
            pipe.execute_command(*args)
        return pipe.execute()
    if kind is Raw:
        return _raw(r, step.cmds)
    if kind is Listen:
        return step.handle.get_message(timeout=step.timeout)
    if kind is Subscribe:
        pubsub = r.pubsub()
        try:
            pubsub.subscribe(step.channel)
        except BaseException:
            _close(pubsub)
            raise
        return pubsub
    if kind is Close:
        return _close(step.handle)
    if kind is Sleep:
        return time.sleep(max(0.0, step.seconds))
    raise TypeError(f"not a step: {step!r}")


def _raw(r: "redis.Redis", cmds: Sequence[Tuple[Any, ...]]) -> List[Any]:
    pool = r.connection_pool
    conn = pool.get_connection("_")  # connected, with nothing unread (the pool checks)
    try:
        conn.send_packed_command([pack(cmds)], check_health=False)
        reader, out, sock = Reader(), [], conn._sock
        while len(out) < len(cmds):
            reply = reader.get()
            if reply is Reader.NOTHING:
                data = sock.recv(_READ_SIZE)
                if not data:
                    raise redis.ConnectionError("Connection closed by server.")
                reader.feed(data)
            else:
                out.append(reply)
    except OSError as e:
        conn.disconnect()
        raise redis.ConnectionError(f"Error reading from Redis: {e}") from e
    except BaseException:
        conn.disconnect()  # replies may be left unread: the connection is not reusable
        raise
    finally:
        pool.release(conn)
    return _checked(out)


def _checked(replies: List[Any]) -> List[Any]:
    for reply in replies:
        if type(reply) is ReplyError:
            raise redis.ResponseError(reply)
    return replies


def _close(pubsub: Any) -> None:
    try:
        pubsub.close()
    except Exception:  # noqa: BLE001 - it may be broken already
        pass


def iterate(r: "redis.Redis", op: Op[Any]) -> Iterator[Any]:
    """Carries the streaming ``op`` out with ``r``, yielding what it emits."""
    return _steps(r, Cursor(op))


def run(r: "redis.Redis", op: Op[T]) -> T:
    """Carries ``op`` out with the blocking client ``r``; its return value."""
    cursor = Cursor(op)
    for _ in _steps(r, cursor):
        raise TypeError("an operation that emits must be iterated")
    return cursor.value


def _steps(r: "redis.Redis", cursor: "Cursor") -> Iterator[Any]:
    try:
        while (step := cursor.next()) is not DONE:
            try:
                if type(step) is Emit:
                    if not cursor.stopping:
                        yield step.value
                else:
                    cursor.reply = _execute(r, step)
            except BaseException as e:  # noqa: BLE001 - raised into the operation, which decides
                cursor.fail(e)
    except Stopped:
        return  # the operation has unwound after its caller stopped


# --- the asyncio driver -------------------------------------------------------------------------


async def _aexecute(r: Any, step: Any) -> Any:
    kind = type(step)
    if kind is Cmd:
        return await r.execute_command(*step.args)
    if kind is Pipe:
        pipe = r.pipeline(transaction=step.transaction)
        for args in step.cmds:
            pipe.execute_command(*args)
        return await pipe.execute()
    if kind is Raw:
        return await _araw(r, step.cmds)
    if kind is Listen:
        return await step.handle.get_message(timeout=step.timeout)
    if kind is Subscribe:
        pubsub = r.pubsub()
        try:
            await pubsub.subscribe(step.channel)
        except BaseException:
            await _aclose(pubsub)
            raise
        return pubsub
    if kind is Close:
        return await _aclose(step.handle)
    if kind is Sleep:
        return await asyncio.sleep(max(0.0, step.seconds))
    raise TypeError(f"not a step: {step!r}")


async def _araw(r: Any, cmds: Sequence[Tuple[Any, ...]]) -> List[Any]:
    pool = r.connection_pool
    conn = await pool.get_connection("_")  # connected, with nothing unread (the pool checks)
    try:
        await conn.send_packed_command([pack(cmds)], check_health=False)
        reader, out, stream = Reader(), [], conn._reader
        while len(out) < len(cmds):
            reply = reader.get()
            if reply is Reader.NOTHING:
                data = await stream.read(_READ_SIZE)
                if not data:
                    raise redis.ConnectionError("Connection closed by server.")
                reader.feed(data)
            else:
                out.append(reply)
    except OSError as e:
        await conn.disconnect()
        raise redis.ConnectionError(f"Error reading from Redis: {e}") from e
    except BaseException:
        await conn.disconnect()  # replies may be left unread: the connection is not reusable
        raise
    finally:
        await pool.release(conn)
    return _checked(out)


async def _aclose(pubsub: Any) -> None:
    try:
        await pubsub.close()
    except Exception:  # noqa: BLE001 - it may be broken already
        pass


def aiterate(r: Any, op: Op[Any]) -> AsyncIterator[Any]:
    """Carries the streaming ``op`` out with ``r``, yielding what it emits.  A cancelled task or
    an ``aclose()`` still runs the operation's cleanup steps."""
    return _asteps(r, Cursor(op))


async def arun(r: Any, op: Op[T]) -> T:
    """Carries ``op`` out with the asyncio client ``r``; its return value."""
    cursor = Cursor(op)
    async for _ in _asteps(r, cursor):
        raise TypeError("an operation that emits must be iterated")
    return cursor.value


async def _asteps(r: Any, cursor: "Cursor") -> AsyncIterator[Any]:
    try:
        while (step := cursor.next()) is not DONE:
            try:
                if type(step) is Emit:
                    if not cursor.stopping:
                        yield step.value
                else:
                    cursor.reply = await _aexecute(r, step)
            except BaseException as e:  # noqa: BLE001 - raised into the operation, which decides
                cursor.fail(e)
    except Stopped:
        return  # the operation has unwound after its caller stopped


# --- facades ------------------------------------------------------------------------------------


def facade(ops: type, asynchronous: bool) -> Callable[[type], type]:
    """Class decorator: every public operation of the class ``ops`` (a generator method, or one
    marked :func:`streaming` that returns an Op; defined once there) becomes a method of the decorated class that carries it out with
    ``self._redis``: blocking (returns the value, or an iterator for a streaming operation) or
    with asyncio (a coroutine, or an async iterator).  Signatures and docstrings are kept."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        wrapper = _wrap(fn)
        # What the caller gets: the Op's value, or an iterator of its Emits (for help() and
        # editors that read signatures at run time).
        sig = inspect.signature(fn)
        ret = sig.return_annotation
        if getattr(fn, "_sandpool_streaming", False):
            ret = "AsyncIterator" if asynchronous else "Iterator"
        elif isinstance(ret, str) and ret.startswith("Op["):
            ret = ret[3:-1]
        wrapper.__signature__ = sig.replace(return_annotation=ret)  # type: ignore[attr-defined]
        return wrapper

    def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        if getattr(fn, "_sandpool_streaming", False):
            if asynchronous:
                def astream(self: Any, *a: Any, **k: Any) -> Any:
                    return aiterate(self._redis, fn(self, *a, **k))
                return functools.wraps(fn)(astream)

            def stream(self: Any, *a: Any, **k: Any) -> Any:
                return iterate(self._redis, fn(self, *a, **k))
            return functools.wraps(fn)(stream)
        if asynchronous:
            async def acall(self: Any, *a: Any, **k: Any) -> Any:
                return await arun(self._redis, fn(self, *a, **k))
            return functools.wraps(fn)(acall)

        def call(self: Any, *a: Any, **k: Any) -> Any:
            return run(self._redis, fn(self, *a, **k))
        return functools.wraps(fn)(call)

    def decorate(cls: type) -> type:
        for klass in reversed(ops.__mro__):
            for name, fn in vars(klass).items():
                if name.startswith("_") or name in vars(cls) or not inspect.isfunction(fn):
                    continue
                if inspect.isgeneratorfunction(fn) or getattr(fn, "_sandpool_streaming", False):
                    setattr(cls, name, wrap(fn))
        return cls

    return decorate
