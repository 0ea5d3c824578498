"""The sandpool client: submit jobs, follow them live, fetch results, cancel.

Everything here follows docs/PROTOCOL.md; the daemon is never contacted directly, only Redis.
:class:`Client` carries out the operations of sandpool._ops (written once, shared with the
asyncio client) with the blocking redis client.

Thread safety: a :class:`Client` may be shared between threads (redis-py's connection pool is
thread-safe); every :meth:`Client.run`, :meth:`Client.stream` and waiting :meth:`Client.result`
uses its own pub/sub connection, closed when it returns.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping, NoReturn, Optional, Sequence, Union

import redis

from . import _drive as drive
from ._batch import JobLike, Progress
from ._keys import Keys, new_job_id
from ._ops import URL_ENV, ClientOps, JobStatus, OutputCallback
from .errors import translate_errors
from .protocol import BytesLike, Result
from .session import Session


@translate_errors
@drive.facade(ClientOps, asynchronous=False)
class Client(ClientOps):
    __doc__ = ClientOps.__doc__

    _session_cls = Session

    def __init__(self, url: Optional[str] = None, *, prefix: str = "sandpool", queue: str = "default",
                 poll_interval: float = 1.0) -> None:
        super().__init__(url, prefix=prefix, queue=queue, poll_interval=poll_interval)
        self.redis: redis.Redis = redis.Redis(
            **self.address.redis_kwargs(), decode_responses=False, socket_keepalive=True
        )

    @property
    def _redis(self) -> redis.Redis:
        return self.redis

    def close(self) -> None:
        """Close the connections of this client."""
        self.redis.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the typed calls (the same signatures as AsyncClient's, for editors) ------------------

    def submit(
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
        """Enqueue a job and return its id (a random 128-bit hex id unless ``job_id`` is given).

        The options are those of PROTOCOL.md section 3: exactly one of ``argv`` (run directly),
        ``shell`` (run as ``/bin/sh -c``) or ``code`` with ``runtime`` (``"python"``, ``"node"``,
        ``"bash"``: run in a warm interpreter), and optionally ``template``, ``env``, ``cwd``,
        ``stdin``, ``timeout_ms``, ``max_output_bytes``, ``retries``, ``memory_bytes``, ``pids``,
        ``cpu_time_ms``.  A misspelt option raises :class:`~sandpool.InvalidOptionError` naming
        the valid ones; ``ValueError`` for input no daemon could accept; limits are judged by the
        daemon (it clamps, or stores an error result).  Submitting an id that already ran is a
        no-op on the daemon side (idempotency): the original result stands.  Does not wait; see
        :meth:`result` and :meth:`stream`.
        """
        return drive.run(self.redis, self._submit_op(dict(locals()), unknown))

    def run(
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
        """Submit a job (options as for :meth:`submit`), deliver its output live, and return its
        :class:`Result`.

        Subscribes to the job's channel before submitting, so no event is missed while the
        subscription holds.  ``on_stdout``/``on_stderr`` are called in this thread with each
        chunk, in order.  If live events are lost (a sequence gap, a dropped subscription) no
        further chunks are delivered live; the rest of the output is delivered from the stored
        result just before returning.  So, for a job run once, the chunks of each stream add up
        to ``result.stdout`` / ``result.stderr`` exactly (if the job is re-run after its worker
        was lost, chunks of the lost attempt may come first).

        Raises :class:`WaitTimeout` if no result arrives within ``wait_timeout`` seconds (the job
        goes on; fetch it later with :meth:`result`).  Exceptions raised by a callback propagate
        and end the wait, not the job.
        """
        return drive.run(self.redis, self._run_op(dict(locals()), unknown))

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
    ) -> Iterator[Result]:
        """Run many jobs and yield their :class:`Result` as they finish (``ordered``: in input
        order), with at most ``concurrency`` submitted and not finished at any time.

        ``jobs``: :class:`Job`, mappings of options or shell lines (read lazily).  The keyword
        options are defaults for jobs that do not set them.  A job's failure is its Result (errors
        as values); only the client's own problems raise.  ``on_progress`` gets a
        :class:`Progress` after each result.  Closing the iterator early (``break``, Ctrl-C, an
        exception) cancels the jobs still in flight.  Follows one completion stream (PROTOCOL.md
        section 21), deleted at the end.
        """
        return drive.iterate(self.redis, self._map_op(jobs, dict(locals()), unknown))


__all__ = ["Client", "JobStatus", "Keys", "URL_ENV", "new_job_id"]
