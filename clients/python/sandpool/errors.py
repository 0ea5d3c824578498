"""The exceptions of the sandpool client: one hierarchy, rooted at :class:`SandpoolError`.

* :class:`SandpoolConnectionError`: Redis could not be reached or the connection broke.
* :class:`SandpoolTimeout`: waiting ended first (also a built-in ``TimeoutError``);
  :class:`WaitTimeout` is the one for a job's result.
* :class:`ProtocolError`: a message could not be decoded, or the daemon refused a request;
  ``code`` is the protocol's error code (PROTOCOL.md sections 8 and 19) when there is one.
* :class:`InvalidOptionError`: a misspelt keyword option (also a ``TypeError``); names the valid
  ones.
* ``SessionError`` (sandpool.session): an operation of a session ended with an error.

No exception of the ``redis`` package leaves the client: :func:`translate` turns them into these.
Jobs that run and fail are not exceptions: their :class:`~sandpool.Result` says how they ended.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, TypeVar

import redis

T = TypeVar("T")


class SandpoolError(Exception):
    """The base of every error this client raises."""


class SandpoolConnectionError(SandpoolError, ConnectionError):
    """Redis could not be reached, or the connection broke during a call."""


class SandpoolTimeout(SandpoolError, TimeoutError):
    """Waiting (for a reply, a result or a completion) ended before it was over."""


class WaitTimeout(SandpoolTimeout):
    """Waiting for a job ended before its result arrived.  The job itself is not affected."""

    def __init__(self, job_id: str, waited: float) -> None:
        super().__init__(f"job {job_id} has no result after {waited:.1f} s")
        self.job_id = job_id


class ProtocolError(SandpoolError, ValueError):
    """A message from the daemon could not be decoded, or a request was refused.

    ``code`` is the protocol's error code (``bad_payload``, ``bad_field``, ... of PROTOCOL.md
    sections 8 and 19) when the daemon gave one, else ``None``.
    """

    def __init__(self, message: str, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.code = code


class InvalidOptionError(SandpoolError, TypeError):
    """An option that does not exist: the message names it and the valid options."""


def check_options(given: Mapping[str, object], valid: Iterable[str], where: str) -> None:
    """Raises :class:`InvalidOptionError` when ``given`` has a name outside ``valid``."""
    valid = tuple(valid)
    unknown = [k for k in given if k not in valid]
    if not unknown:
        return
    name = unknown[0]
    near = difflib.get_close_matches(name, valid, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise InvalidOptionError(
        f"{where}: unknown option {name!r}{hint}; the valid options are: {', '.join(sorted(valid))}"
    )


def translate(e: BaseException) -> BaseException:
    """The client's exception for one raised by the redis package (others are returned as they
    are)."""
    if isinstance(e, SandpoolError) or not isinstance(e, redis.RedisError):
        return e
    if isinstance(e, redis.TimeoutError):
        out: SandpoolError = SandpoolTimeout(f"Redis did not answer in time: {e}")
    elif isinstance(e, redis.AuthenticationError) or (
            isinstance(e, redis.ResponseError) and str(e).startswith(("WRONGPASS", "NOAUTH"))):
        out = SandpoolConnectionError(f"Redis refused the login: {e}")
    elif isinstance(e, redis.ConnectionError):
        out = SandpoolConnectionError(f"Redis connection failed: {e}")
    elif isinstance(e, redis.ResponseError):
        out = ProtocolError(f"Redis refused a command: {e}", code="redis")
    else:
        out = SandpoolError(f"Redis error: {e}")
    out.__cause__ = e
    return out


def translate_errors(cls: T) -> T:
    """Class decorator: every public method (plain, generator, coroutine or async generator)
    raises the client's exceptions (sandpool.errors) instead of the redis package's."""
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        setattr(cls, name, _translating(fn))
    return cls


def _translating(fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(fn):
        @functools.wraps(fn)
        def agen(*a: Any, **k: Any) -> Any:
            return _translated_aiter(fn(*a, **k))
        return agen
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def coro(*a: Any, **k: Any) -> Any:
            try:
                return await fn(*a, **k)
            except redis.RedisError as e:
                raise translate(e) from e
        return coro
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*a: Any, **k: Any) -> Any:
            try:
                return (yield from fn(*a, **k))
            except redis.RedisError as e:
                raise translate(e) from e
        return gen

    @functools.wraps(fn)
    def plain(*a: Any, **k: Any) -> Any:
        try:
            out = fn(*a, **k)
        except redis.RedisError as e:
            raise translate(e) from e
        if inspect.isgenerator(out):
            return _translated_iter(out)
        if inspect.isasyncgen(out):
            return _translated_aiter(out)
        return out
    return plain


def _translated_iter(it: Iterator[T]) -> Iterator[T]:
    try:
        return (yield from it)
    except redis.RedisError as e:
        raise translate(e) from e


async def _translated_aiter(it: Any) -> Any:
    # The inner generator is closed here, at once, so that its cleanup (cancelling a map's jobs)
    # runs when the caller stops, not whenever it is collected.
    try:
        async for x in it:
            yield x
    except redis.RedisError as e:
        raise translate(e) from e
    finally:
        await it.aclose()
