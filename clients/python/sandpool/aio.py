"""The asyncio client: :class:`AsyncClient`, the same calls as :class:`sandpool.Client` as
coroutines (redis.asyncio), with the same semantics and the same protocol code (sandpool.protocol
builds and decodes every map, sandpool._batch drives map and submit_many, the job-channel follower
is the sync client's with its waits made asynchronous).

Sessions: ``await client.session(...)`` gives an :class:`AsyncSession` whose methods run the sync
:class:`sandpool.Session`'s in a worker thread (one operation at a time per session), so they
share its encoding exactly.

Not thread-safe: use an AsyncClient from the event loop that created it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
from typing import Any, AsyncIterator, Callable, Dict, Iterable, List, Mapping, NoReturn, Optional, Sequence, Union

import redis
import redis.asyncio as aioredis

from ._batch import total_of, READ_COUNT, SUBMIT_CHUNK, JobLike, MapState, Progress, encode_entries, new_stream_name
from ._url import DEFAULT_URL, RedisAddress, parse_redis_url
from .client import (
    MAP_DEFAULTS,
    URL_ENV,
    Client,
    JobStatus,
    Keys,
    OutputCallback,
    _check_id,
    _Follower,
    cancel_commands,
    job_of,
    map_defaults,
    new_job_id,
)
from .errors import WaitTimeout, check_options, translate_errors
from .protocol import (
    BytesLike,
    Completion,
    Event,
    ProtocolError,
    Result,
    build_job_map,
    decode_completion,
    decode_event,
    decode_result,
    encode_job,
    entry_fields,
)

_CONN_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


@translate_errors
class AsyncClient:
    """An asyncio connection to one sandpool deployment; arguments as for
    :class:`sandpool.Client`.  No connection is made until the first command."""

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        prefix: str = "sandpool",
        queue: str = "default",
        poll_interval: float = 1.0,
    ) -> None:
        if url is None:
            url = os.environ.get(URL_ENV) or DEFAULT_URL
        self._url = url
        self.address: RedisAddress = parse_redis_url(url)
        if not prefix or not isinstance(prefix, str):
            raise ValueError("prefix must be a non-empty str")
        if not queue or not isinstance(queue, str):
            raise ValueError("queue must be a non-empty str")
        if not poll_interval > 0:
            raise ValueError("poll_interval must be > 0")
        self.prefix = prefix
        self.queue = queue
        self.keys = Keys(prefix)
        self.poll_interval = float(poll_interval)
        self.redis: aioredis.Redis = aioredis.Redis(
            **self.address.redis_kwargs(), decode_responses=False, socket_keepalive=True
        )
        self._sync: Optional[Client] = None  # sessions only

    async def close(self) -> None:
        """Close the connections of this client."""
        await self.redis.close()
        await self.redis.connection_pool.disconnect()
        if self._sync is not None:
            self._sync.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient({self.address.redacted()!r}, prefix={self.prefix!r}, queue={self.queue!r})"

    # -- submitting --------------------------------------------------------------------------

    async def submit(
        self,
        *,
        argv: Optional[Sequence[str]] = None,
        shell: Optional[str] = None,
        code: Optional[str] = None,
        runtime: Optional[str] = None,
        template: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[Union[BytesLike, str]] = None,
        timeout_ms: Optional[int] = None,
        max_output_bytes: Optional[int] = None,
        retries: Optional[int] = None,
        memory_bytes: Optional[int] = None,
        pids: Optional[int] = None,
        cpu_time_ms: Optional[int] = None,
        job_id: Optional[str] = None,
        **unknown: NoReturn,
    ) -> str:
        """As :meth:`sandpool.Client.submit`."""
        job = job_of("submit", dict(locals()), unknown)
        job_id = new_job_id() if job_id is None else job_id
        payload = encode_job(build_job_map(job_id, **job.options()))
        await self.redis.xadd(self.keys.queue(self.queue), entry_fields(job_id, payload))
        return job_id

    async def submit_many(self, jobs: Iterable[JobLike], *, notify: Optional[str] = None,
                          notify_result: bool = False) -> List[str]:
        """As :meth:`sandpool.Client.submit_many`."""
        entries = encode_entries(jobs, notify, notify_result, new_stream_name("batch"))
        await self._xadd_entries(entries)
        return [job_id for job_id, _ in entries]

    async def _xadd_entries(self, entries: List[Any]) -> None:
        q = self.keys.queue(self.queue)
        for i in range(0, len(entries), SUBMIT_CHUNK):
            pipe = self.redis.pipeline(transaction=False)
            for _, fields in entries[i:i + SUBMIT_CHUNK]:
                pipe.xadd(q, fields)
            await pipe.execute()

    async def completions(self, notify: str, *, after: str = "0",
                          block_ms: int = 1000) -> AsyncIterator[Any]:
        """As :meth:`sandpool.Client.completions`: ``(stream id, Completion)`` forever."""
        key = f"{self.prefix}:notify:{notify}"
        while True:
            for _key, entries in await self.redis.xread({key: after}, count=READ_COUNT, block=block_ms) or []:
                for entry_id, fields in entries:
                    after = entry_id.decode()
                    yield after, decode_completion(fields)

    def map(
        self,
        jobs: Iterable[JobLike],
        *,
        concurrency: int = 64,
        ordered: bool = False,
        on_progress: Optional[Callable[[Progress], None]] = None,
        template: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        max_output_bytes: Optional[int] = None,
        retries: Optional[int] = None,
        memory_bytes: Optional[int] = None,
        pids: Optional[int] = None,
        cpu_time_ms: Optional[int] = None,
        **unknown: NoReturn,
    ) -> AsyncIterator[Result]:
        """As :meth:`sandpool.Client.map`, an async iterator (``async for r in c.map(...)``).
        Closing it early (``break`` then ``aclose()``, task cancellation, an exception) cancels
        the jobs in flight."""
        check_options(unknown, MAP_DEFAULTS + ("concurrency", "ordered", "on_progress"), "map")
        defaults = {k: v for k, v in locals().items() if k in MAP_DEFAULTS}
        state = MapState(map_defaults(jobs, defaults), concurrency=concurrency, ordered=ordered,
                         prefix=self.prefix, on_progress=on_progress, total=total_of(jobs))
        return self._map(state)

    async def _map(self, state: MapState) -> AsyncIterator[Result]:
        try:
            while not state.finished:
                entries = state.to_submit()
                if entries:
                    await self._xadd_entries(entries)
                if state.finished:
                    break
                reply = await self.redis.xread({state.stream_key: state.last_id}, count=READ_COUNT, block=1000)
                fetch: List[str] = []
                for _key, records in reply or []:
                    for entry_id, fields in records:
                        ready, more = state.on_record(entry_id, fields)
                        fetch += more
                        for r in ready:
                            yield r
                for job_id in fetch:
                    for r in state.on_fetched(job_id, await self._get_result(job_id)):
                        yield r
        finally:
            outstanding = state.outstanding()
            # Shielded: a cancelled task still cancels its jobs.
            await asyncio.shield(self._map_cleanup(outstanding, state.stream_key))

    async def _map_cleanup(self, outstanding: List[str], stream_key: str) -> None:
        try:
            if outstanding:
                await self._cancel_many(outstanding)
            await self.redis.delete(stream_key)
        except _CONN_ERRORS:
            pass  # Redis is away: the stream expires on its own

    async def run(
        self,
        *,
        argv: Optional[Sequence[str]] = None,
        shell: Optional[str] = None,
        code: Optional[str] = None,
        runtime: Optional[str] = None,
        template: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[Union[BytesLike, str]] = None,
        timeout_ms: Optional[int] = None,
        max_output_bytes: Optional[int] = None,
        retries: Optional[int] = None,
        memory_bytes: Optional[int] = None,
        pids: Optional[int] = None,
        cpu_time_ms: Optional[int] = None,
        job_id: Optional[str] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        wait_timeout: Optional[float] = None,
        **unknown: NoReturn,
    ) -> Result:
        """As :meth:`sandpool.Client.run` (the callbacks are plain functions, called in the
        event loop)."""
        job = job_of("run", dict(locals()), unknown)
        job_id = new_job_id() if job_id is None else job_id
        payload = encode_job(build_job_map(job_id, **job.options()))
        deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
        started_at = time.monotonic()
        pubsub = await self._subscribe(job_id)
        try:
            await self.redis.xadd(self.keys.queue(self.queue), entry_fields(job_id, payload))
            async for ev in _AsyncFollower(self, job_id, pubsub, from_start=True).events(deadline, started_at):
                if ev.type == "stdout" and on_stdout is not None:
                    on_stdout(ev.data)
                elif ev.type == "stderr" and on_stderr is not None:
                    on_stderr(ev.data)
                elif ev.type == "exited":
                    assert ev.result is not None
                    return ev.result
            raise AssertionError("event stream ended without an exited event")  # unreachable
        finally:
            await _close_quietly(pubsub)

    # -- following ---------------------------------------------------------------------------

    def stream(self, job_id: str, *, timeout: Optional[float] = None) -> AsyncIterator[Event]:
        """As :meth:`sandpool.Client.stream`, an async iterator."""
        _check_id(job_id)
        return self._stream(job_id, timeout)

    async def _stream(self, job_id: str, timeout: Optional[float]) -> AsyncIterator[Event]:
        deadline = None if timeout is None else time.monotonic() + timeout
        started_at = time.monotonic()
        pubsub = await self._subscribe(job_id)
        try:
            stored = await self._get_result(job_id)
            if stored is not None:
                yield Event(type="exited", seq=None, result=stored)
                return
            async for ev in _AsyncFollower(self, job_id, pubsub, from_start=False).events(deadline, started_at):
                yield ev
        finally:
            await _close_quietly(pubsub)

    async def result(self, job_id: str, wait: bool = False, timeout: Optional[float] = None) -> Optional[Result]:
        """As :meth:`sandpool.Client.result`."""
        _check_id(job_id)
        if not wait:
            return await self._get_result(job_id)
        try:
            async for ev in self._stream(job_id, timeout):
                if ev.type == "exited":
                    return ev.result
        except WaitTimeout:
            return None
        return None

    async def _get_result(self, job_id: str) -> Optional[Result]:
        raw = await self.redis.get(self.keys.result(job_id))
        return None if raw is None else decode_result(raw)

    async def _subscribe(self, job_id: str, timeout: float = 30.0) -> Any:
        pubsub = self.redis.pubsub()
        try:
            await pubsub.subscribe(self.keys.out(job_id))
            end = time.monotonic() + timeout
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    raise redis.TimeoutError("no confirmation of SUBSCRIBE from Redis")
                msg = await pubsub.get_message(timeout=left)
                if msg is not None and msg.get("type") == "subscribe":
                    return pubsub
        except BaseException:
            await _close_quietly(pubsub)
            raise

    # -- control -----------------------------------------------------------------------------

    async def cancel(self, job_id: str) -> None:
        """As :meth:`sandpool.Client.cancel`."""
        await self._cancel_many([_check_id(job_id)])

    async def _cancel_many(self, job_ids: List[str]) -> None:
        pipe = self.redis.pipeline(transaction=True)
        for args in cancel_commands(self.keys, job_ids):
            pipe.execute_command(*args)
        await pipe.execute()

    async def status(self, job_id: str) -> JobStatus:
        """As :meth:`sandpool.Client.status`."""
        _check_id(job_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(self.keys.job(job_id))
        pipe.exists(self.keys.result(job_id))
        raw_fields, exists = await pipe.execute()
        return JobStatus.from_reply(job_id, raw_fields, exists)

    # -- sessions ----------------------------------------------------------------------------

    async def session(self, session_id: Optional[str] = None, *, start: bool = True,
                      **create_options: Any) -> "AsyncSession":
        """As :meth:`sandpool.Client.session`: an :class:`AsyncSession`."""
        if self._sync is None:
            self._sync = Client(self._url, prefix=self.prefix, queue=self.queue, poll_interval=self.poll_interval)
        sync = self._sync
        s = await asyncio.to_thread(functools.partial(sync.session, session_id, start=start, **create_options))
        return AsyncSession(s)


class AsyncSession:
    """A session for asyncio code: every method of :class:`sandpool.Session` (``exec``,
    ``spawn``, ``processes``, ``write_file``, ``read_file``, ``list_dir``, ``stop``,
    ``destroy``, ...) as a coroutine, run in a worker thread one at a time."""

    def __init__(self, session: Any) -> None:
        self.sync = session
        self.id: str = session.id
        self._lock = asyncio.Lock()

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.sync, name)
        if name.startswith("_") or not callable(fn):
            return fn

        async def call(*a: Any, **k: Any) -> Any:
            async with self._lock:
                return await asyncio.to_thread(fn, *a, **k)

        call.__name__ = name
        call.__doc__ = fn.__doc__
        return call


async def _close_quietly(pubsub: Any) -> None:
    try:
        await pubsub.close()
    except Exception:
        pass


class _AsyncFollower(_Follower):
    """The sync client's follower (sequence checks, loss detection, result fallback) with
    asynchronous waits."""

    async def _apoll(self) -> Optional[Result]:
        try:
            r = await self.client._get_result(self.job_id)
        except _CONN_ERRORS:
            now = time.monotonic()
            if self._conn_error_since is None:
                self._conn_error_since = now
            elif now - self._conn_error_since > self.RECONNECT_GRACE:
                raise
            return None
        self._conn_error_since = None
        return r

    async def events(self, deadline: Optional[float], started_at: float) -> AsyncIterator[Event]:  # type: ignore[override]
        interval = self.client.poll_interval
        last_heard = time.monotonic()
        last_poll = last_heard
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise WaitTimeout(self.job_id, now - started_at)
            wait = interval if deadline is None else max(0.0, min(interval, deadline - now))
            msg = None
            if self.pubsub is not None:
                try:
                    msg = await self.pubsub.get_message(timeout=wait)
                except _CONN_ERRORS:
                    await _close_quietly(self.pubsub)
                    self.pubsub = None
                    self.lost = True
            else:
                await asyncio.sleep(max(0.0, wait))
            if msg is not None and msg.get("type") == "message":
                last_heard = time.monotonic()
                try:
                    ev = decode_event(msg["data"])
                except ProtocolError:
                    self.lost = True
                    continue
                live = self._on_event(ev)
                if ev.type == "exited":
                    assert ev.result is not None
                    for e in self._finish(ev.result, ev.seq):
                        yield e
                    return
                if live and ev.type in ("started", "stdout", "stderr"):
                    if ev.type != "started":
                        self.delivered[ev.type] += len(ev.data)
                    yield ev
                continue
            if msg is not None:
                continue
            now = time.monotonic()
            if now - last_poll >= interval and (self.lost or now - last_heard >= interval):
                last_poll = now
                result = await self._apoll()
                if result is not None:
                    for e in self._finish(result, None):
                        yield e
                    return
