"""The asyncio client: :class:`AsyncClient`, the calls of :class:`sandpool.Client` as coroutines
(and async iterators), on redis.asyncio.  Both clients carry out the same operations
(sandpool._ops, sandpool._session_ops: written once, without I/O), so they have the same
semantics; only the driver differs (sandpool._drive).

Sessions: ``await client.session(...)`` gives an :class:`AsyncSession` (pure asyncio, no thread).

Not thread-safe: use an AsyncClient from the event loop that created it.
"""

from __future__ import annotations

from typing import AsyncIterator, Callable, Iterable, Mapping, NoReturn, Optional, Sequence, Union

import redis.asyncio as aioredis

from . import _drive as drive
from ._batch import JobLike, Progress
from ._ops import ClientOps, OutputCallback
from .errors import translate_errors
from .protocol import BytesLike, Result
from .session import AsyncSession


@translate_errors
@drive.facade(ClientOps, asynchronous=True)
class AsyncClient(ClientOps):
    """An asyncio connection to one sandpool deployment; arguments as for
    :class:`sandpool.Client`.  No connection is made until the first command."""

    _session_cls = AsyncSession

    def __init__(self, url: Optional[str] = None, *, prefix: str = "sandpool", queue: str = "default",
                 poll_interval: float = 1.0) -> None:
        super().__init__(url, prefix=prefix, queue=queue, poll_interval=poll_interval)
        self.redis: aioredis.Redis = aioredis.Redis(
            **self.address.redis_kwargs(), decode_responses=False, socket_keepalive=True
        )

    @property
    def _redis(self) -> aioredis.Redis:
        return self.redis

    async def close(self) -> None:
        """Close the connections of this client."""
        await self.redis.close()
        await self.redis.connection_pool.disconnect()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the typed calls (the same signatures as Client's, for editors) -----------------------

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
        return await drive.arun(self.redis, self._submit_op(dict(locals()), unknown))

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
        return await drive.arun(self.redis, self._run_op(dict(locals()), unknown))

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
        return drive.aiterate(self.redis, self._map_op(jobs, dict(locals()), unknown))


__all__ = ["AsyncClient", "AsyncSession"]
