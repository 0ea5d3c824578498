"""The sandpool client: submit jobs, follow them live, fetch results, cancel.

Everything here follows docs/PROTOCOL.md; the daemon is never contacted directly, only Redis.

Thread safety: a :class:`Client` may be shared between threads (redis-py's connection pool is
thread-safe); every :meth:`Client.run`, :meth:`Client.stream` and waiting :meth:`Client.result`
uses its own pub/sub connection, closed when it returns.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import secrets
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping, NoReturn, Optional,
                    Sequence, TypeVar, Union)

import msgpack

import redis

if TYPE_CHECKING:  # pragma: no cover
    from .session import Session

from ._batch import total_of, SUBMIT_CHUNK, READ_COUNT, JobLike, MapState, Progress, encode_entries, new_stream_name
from ._url import DEFAULT_URL, RedisAddress, parse_redis_url
from .errors import WaitTimeout, check_options, translate_errors
from .protocol import (
    JOB_OPTIONS,
    BytesLike,
    Event,
    Job,
    ProtocolError,
    Result,
    build_job_map,
    decode_event,
    decode_result,
    encode_job,
    entry_fields,
    valid_job_id,
)

#: Environment variable holding the Redis URL when ``Client(url=None)``.
URL_ENV = "SANDPOOL_REDIS_URL"

#: TTL the cancel block of PROTOCOL.md section 7 puts on the job hash.
CANCEL_TTL_SECONDS = 86400

OutputCallback = Callable[[bytes], None]

_CONN_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)

#: Options of map() applied to every job that does not set them itself.
MAP_DEFAULTS = ("template", "env", "cwd", "timeout_ms", "max_output_bytes", "retries", "memory_bytes", "pids",
                "cpu_time_ms")

T = TypeVar("T")


def job_of(where: str, options: Mapping[str, Any], unknown: Mapping[str, Any]) -> Job:
    """The Job of a call's keyword options (its locals()); a misspelt one raises
    InvalidOptionError naming every keyword the call takes."""
    check_options(unknown, [k for k in options if k not in ("self", "unknown")], where)
    return Job(**{k: v for k, v in options.items() if k in JOB_OPTIONS})


def map_defaults(jobs: Iterable[JobLike], defaults: Mapping[str, Any]) -> Iterator[Job]:
    """Each job with the map's default options filled in where it left them unset."""
    from .protocol import as_job

    given = {k: v for k, v in defaults.items() if v is not None}
    for j in jobs:
        job = as_job(j)
        if given:
            job = dataclasses.replace(job, **{k: v for k, v in given.items() if getattr(job, k) is None})
        yield job


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """A snapshot of ``sandpool:job:<id>`` plus whether ``sandpool:result:<id>`` exists.

    ``state`` is ``None`` while the job is queued (no hash, or only ``cancel``), then
    ``"running"``, then ``"done"``.  The job is terminal exactly when ``has_result`` is true.
    ``fields`` holds every field of the hash, decoded as UTF-8.
    """

    job_id: str
    state: Optional[str]
    entry: Optional[str]
    consumer: Optional[str]
    attempt: Optional[int]
    cancel_requested: bool
    has_result: bool
    fields: Dict[str, str]

    @property
    def terminal(self) -> bool:
        """True once the result is stored (PROTOCOL.md section 4)."""
        return self.has_result

    @classmethod
    def from_reply(cls, job_id: str, raw_fields: Mapping[bytes, bytes], exists: Any) -> "JobStatus":
        """From the replies of HGETALL on the job hash and EXISTS on the result key."""
        fields = {
            k.decode("utf-8", "replace"): v.decode("utf-8", "replace")
            for k, v in raw_fields.items()
        }
        attempt: Optional[int]
        try:
            attempt = int(fields["attempt"]) if "attempt" in fields else None
        except ValueError:
            attempt = None
        return cls(
            job_id=job_id,
            state=fields.get("state"),
            entry=fields.get("entry"),
            consumer=fields.get("consumer"),
            attempt=attempt,
            cancel_requested=fields.get("cancel", "0") not in ("", "0"),
            has_result=bool(exists),
            fields=fields,
        )


def cancel_commands(keys: "Keys", job_ids: Iterable[str]) -> List[tuple]:
    """The commands of PROTOCOL.md section 7 for each job, to send in one MULTI block."""
    out: List[tuple] = []
    for job_id in job_ids:
        out += [("HSET", keys.job(job_id), "cancel", 1), ("EXPIRE", keys.job(job_id), CANCEL_TTL_SECONDS),
                ("PUBLISH", keys.cancel, job_id)]
    return out


@dataclasses.dataclass(frozen=True)
class Keys:
    """Redis key and channel names of PROTOCOL.md section 1 for one prefix."""

    prefix: str = "sandpool"

    def queue(self, name: str) -> str:
        return f"{self.prefix}:q:{name}"

    def job(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    def result(self, job_id: str) -> str:
        return f"{self.prefix}:result:{job_id}"

    def out(self, job_id: str) -> str:
        return f"{self.prefix}:out:{job_id}"

    @property
    def cancel(self) -> str:
        return f"{self.prefix}:cancel"

    def daemon(self, consumer: str) -> str:
        return f"{self.prefix}:daemon:{consumer}"

    def session(self, session_id: str) -> str:
        return f"{self.prefix}:session:{session_id}"

    def session_intake(self, queue: str) -> str:
        return f"{self.prefix}:sreq:{queue}"

    def session_stream(self, queue: str, consumer: str) -> str:
        return f"{self.prefix}:sreq:{queue}:{consumer}"

    @property
    def sessions(self) -> str:
        return f"{self.prefix}:sessions"

    def snapshot(self, name: str) -> str:
        return f"{self.prefix}:snapshot:{name}"

    @property
    def snapshots(self) -> str:
        return f"{self.prefix}:snapshots"

    @property
    def dead(self) -> str:
        return f"{self.prefix}:dead"


def new_job_id() -> str:
    """A random 128-bit job id as 32 lowercase hex digits."""
    return secrets.token_hex(16)


def _check_id(job_id: str) -> str:
    if not valid_job_id(job_id):
        raise ValueError(f"invalid job id {job_id!r}: need 1..128 characters of [A-Za-z0-9._:-]")
    return job_id


@translate_errors
class Client:
    """A connection to one sandpool deployment (a Redis server, a key prefix and a queue).

    ``url`` is ``redis://[user:password@]host[:port][/db]`` or ``unix:///path[?db=N]``; when
    ``None`` it comes from the environment variable ``SANDPOOL_REDIS_URL``, else
    ``redis://127.0.0.1:6379``.  ``prefix`` and ``queue`` must match the daemon's ``--prefix``
    and ``--queue``.  ``poll_interval`` is how long a waiting call may hear nothing on the job's
    channel before it checks the result key (the durable record).

    No connection is made until the first command.
    """

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
        self.redis: redis.Redis = redis.Redis(
            **self.address.redis_kwargs(), decode_responses=False, socket_keepalive=True
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connections of this client."""
        self.redis.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.address.redacted()!r}, prefix={self.prefix!r}, queue={self.queue!r})"

    # -- submitting --------------------------------------------------------------------------

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
        job = job_of("submit", dict(locals()), unknown)
        job_id = new_job_id() if job_id is None else job_id
        self._xadd(job_id, encode_job(build_job_map(job_id, **job.options())))
        return job_id

    def submit_many(self, jobs: Iterable[JobLike], *, notify: Optional[str] = None,
                    notify_result: bool = False) -> List[str]:
        """Enqueue many jobs in pipelined round trips (PROTOCOL.md section 21) and return their ids.

        Each job is a :class:`Job`, a mapping of options (``id`` included) or a shell line.  Jobs
        without an id get ``<batch>-<index>`` (random batch).  With ``notify``, every job's end is
        recorded on the completion stream of that name (``notify_result``: with its result);
        follow it with :meth:`completions`.  Resubmitting the same ids after a crash runs nothing
        twice.
        """
        entries = encode_entries(jobs, notify, notify_result, new_stream_name("batch"))
        q = self.keys.queue(self.queue)
        for i in range(0, len(entries), SUBMIT_CHUNK):
            pipe = self.redis.pipeline(transaction=False)
            for _, fields in entries[i:i + SUBMIT_CHUNK]:
                pipe.xadd(q, fields)
            pipe.execute()
        return [job_id for job_id, _ in entries]

    def completions(self, notify: str, *, after: str = "0", block_ms: int = 1000) -> Iterator[Any]:
        """Yield ``(stream id, Completion)`` of the completion stream ``notify`` from ``after``,
        forever (stop iterating when you have what you need; remember the last stream id to go
        on from there after a reconnect)."""
        from .protocol import decode_completion

        key = f"{self.prefix}:notify:{notify}"
        while True:
            for _key, entries in self.redis.xread({key: after}, count=READ_COUNT, block=block_ms) or []:
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
        check_options(unknown, MAP_DEFAULTS + ("concurrency", "ordered", "on_progress"), "map")
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1 (got {concurrency!r})")
        defaults = {k: v for k, v in locals().items() if k in MAP_DEFAULTS}
        state = MapState(map_defaults(jobs, defaults), concurrency=concurrency, ordered=ordered,
                         prefix=self.prefix, on_progress=on_progress, total=total_of(jobs))
        return self._map(state)

    def _map(self, state: MapState) -> Iterator[Result]:
        q = self.keys.queue(self.queue)
        try:
            while not state.finished:
                entries = state.to_submit()
                if entries:
                    pipe = self.redis.pipeline(transaction=False)
                    for _, fields in entries:
                        pipe.xadd(q, fields)
                    pipe.execute()
                if state.finished:
                    break
                reply = self.redis.xread({state.stream_key: state.last_id}, count=READ_COUNT, block=1000)
                fetch: List[str] = []
                for _key, records in reply or []:
                    for entry_id, fields in records:
                        ready, more = state.on_record(entry_id, fields)
                        fetch += more
                        yield from ready
                for job_id in fetch:
                    yield from state.on_fetched(job_id, self._get_result(job_id))
        finally:
            outstanding = state.outstanding()
            try:
                if outstanding:
                    self._cancel_many(outstanding)
                self.redis.delete(state.stream_key)
            except _CONN_ERRORS:
                pass  # Redis is away: the stream expires on its own

    def _cancel_many(self, job_ids: List[str]) -> None:
        pipe = self.redis.pipeline(transaction=True)
        for args in cancel_commands(self.keys, job_ids):
            pipe.execute_command(*args)
        pipe.execute()

    def _xadd(self, job_id: str, payload: bytes) -> None:
        self.redis.xadd(self.keys.queue(self.queue), entry_fields(job_id, payload))

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
        job = job_of("run", dict(locals()), unknown)
        job_id = new_job_id() if job_id is None else job_id
        payload = encode_job(build_job_map(job_id, **job.options()))
        deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
        started_at = time.monotonic()
        pubsub = self._subscribe(job_id)
        try:
            self._xadd(job_id, payload)
            follower = _Follower(self, job_id, pubsub, from_start=True)
            for ev in follower.events(deadline, started_at):
                if ev.type == "stdout":
                    if on_stdout is not None:
                        on_stdout(ev.data)
                elif ev.type == "stderr":
                    if on_stderr is not None:
                        on_stderr(ev.data)
                elif ev.type == "exited":
                    assert ev.result is not None
                    return ev.result
            raise AssertionError("event stream ended without an exited event")  # unreachable
        finally:
            _close_quietly(pubsub)

    # -- following ---------------------------------------------------------------------------

    def stream(self, job_id: str, *, timeout: Optional[float] = None) -> Iterator[Event]:
        """Yield the live events of a job: ``started``, ``stdout``, ``stderr``, then ``exited``.

        Subscribes when iteration begins, then checks the result key: a finished job yields just
        its ``exited`` event (``seq`` None).  Events published before the subscription are not
        seen (subscribe-before-submit needs :meth:`run`).  If live events are lost, no further
        output is yielded live; the ``exited`` event (and, when the stream was followed from its
        start, the missing tail of the output as events with ``seq`` None) then comes from the
        stored result.  The last event is always ``exited`` with its ``result``.  Event types this
        client does not know are skipped.  Raises :class:`WaitTimeout` after ``timeout`` seconds
        without a result.  An invalid ``job_id`` raises ``ValueError`` at once.
        """
        _check_id(job_id)
        return self._stream(job_id, timeout)

    def _stream(self, job_id: str, timeout: Optional[float]) -> Iterator[Event]:
        deadline = None if timeout is None else time.monotonic() + timeout
        started_at = time.monotonic()
        pubsub = self._subscribe(job_id)
        try:
            stored = self._get_result(job_id)
            if stored is not None:
                yield Event(type="exited", seq=None, result=stored)
                return
            yield from _Follower(self, job_id, pubsub, from_start=False).events(
                deadline, started_at
            )
        finally:
            _close_quietly(pubsub)

    def result(
        self, job_id: str, wait: bool = False, timeout: Optional[float] = None
    ) -> Optional[Result]:
        """The stored result of a job, or ``None`` if there is none (yet, or any more: TTL).

        With ``wait=True``, blocks until the result exists, or returns ``None`` once ``timeout``
        seconds (if given) have passed.
        """
        _check_id(job_id)
        if not wait:
            return self._get_result(job_id)
        try:
            for ev in self.stream(job_id, timeout=timeout):
                if ev.type == "exited":
                    return ev.result
        except WaitTimeout:
            return None
        return None  # unreachable: stream always ends with exited or raises

    def _get_result(self, job_id: str) -> Optional[Result]:
        raw = self.redis.get(self.keys.result(job_id))
        if raw is None:
            return None
        return decode_result(raw)

    def _subscribe(self, job_id: str, timeout: float = 30.0) -> "redis.client.PubSub":
        """Subscribe to the job's channel and wait until Redis confirms the subscription."""
        pubsub = self.redis.pubsub()
        try:
            pubsub.subscribe(self.keys.out(job_id))
            end = time.monotonic() + timeout
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    raise redis.TimeoutError("no confirmation of SUBSCRIBE from Redis")
                msg = pubsub.get_message(timeout=left)
                if msg is not None and msg.get("type") == "subscribe":
                    return pubsub
        except BaseException:
            _close_quietly(pubsub)
            raise

    # -- sessions ----------------------------------------------------------------------------

    def session(self, session_id: Optional[str] = None, *, start: bool = True, **create_options: Any) -> "Session":
        """A session (PROTOCOL.md sections 12-19): created, connected to, or resumed when
        ``start`` (the default); a random id unless given. ``create_options`` as for
        :meth:`Session.start`."""
        from .session import Session

        s = Session(self, session_id or "s-" + new_job_id(), **create_options)
        if start:
            s.start()
        return s

    def sessions(self) -> List[Dict[str, str]]:
        """Every session's record (state, template, consumer, labels, ...), from Redis."""
        ids = sorted(m.decode() for m in self.redis.smembers(self.keys.sessions))
        pipe = self.redis.pipeline(transaction=False)
        for sid in ids:
            pipe.hgetall(self.keys.session(sid))
        out = []
        for sid, rec in zip(ids, pipe.execute()):
            if rec:
                row = {k.decode(): v for k, v in rec.items()}
                labels = row.pop("labels", b"")
                row.pop("options", None)
                out.append(dict({k: v.decode("utf-8", "replace") for k, v in row.items()}, session=sid,
                                labels=msgpack.unpackb(labels, raw=False) if labels else {}))
        return out

    def snapshots(self) -> List[Dict[str, str]]:
        """Every snapshot template's record (name, base, host, created_ms, size, data_bytes, ...)."""
        names = sorted(m.decode() for m in self.redis.smembers(self.keys.snapshots))
        pipe = self.redis.pipeline(transaction=False)
        for n in names:
            pipe.hgetall(self.keys.snapshot(n))
        return [{k.decode(): v.decode("utf-8", "replace") for k, v in rec.items()}
                for rec in pipe.execute() if rec]

    def delete_snapshot(self, name: str) -> None:
        """Deletes a snapshot template everywhere (``snapshot_delete``, sent to the session intake:
        any daemon does it). Idempotent."""
        from .session import Session

        Session(self, "snapshot-delete")._call("snapshot_delete", {"name": name}, intake=True)

    # -- control -----------------------------------------------------------------------------

    def cancel(self, job_id: str) -> None:
        """Ask the daemons to cancel a job (PROTOCOL.md section 7, exactly its MULTI block).

        A queued job (or one not submitted yet) will never start; a running job is killed and
        keeps its output so far; a finished job is unaffected.  The outcome shows in the result.
        """
        self._cancel_many([_check_id(job_id)])

    def status(self, job_id: str) -> JobStatus:
        """Read the job hash and whether the result exists, atomically (one MULTI block)."""
        _check_id(job_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(self.keys.job(job_id))
        pipe.exists(self.keys.result(job_id))
        raw_fields, exists = pipe.execute()
        return JobStatus.from_reply(job_id, raw_fields, exists)


def _close_quietly(pubsub: "redis.client.PubSub") -> None:
    """Close a pub/sub connection, ignoring errors (it may already be broken)."""
    try:
        pubsub.close()
    except Exception:
        pass


class _Follower:
    """Follows one job's channel: sequence checks, loss detection, result-key fallback."""

    # How long the result key may be unreachable (Redis restarting) before waiting gives up.
    RECONNECT_GRACE = 30.0

    def __init__(
        self, client: Client, job_id: str, pubsub: "redis.client.PubSub", from_start: bool
    ) -> None:
        self.client = client
        self.job_id = job_id
        self.pubsub: Optional["redis.client.PubSub"] = pubsub
        # Next expected seq; None until the first event when joining a job midway.
        self.expected: Optional[int] = 0 if from_start else None
        # True when the events seen so far are the output from its very beginning.
        self.from_start = from_start
        self.lost = False
        self.delivered = {"stdout": 0, "stderr": 0}
        self._conn_error_since: Optional[float] = None

    def _poll(self) -> Optional[Result]:
        try:
            r = self.client._get_result(self.job_id)
        except _CONN_ERRORS:
            now = time.monotonic()
            if self._conn_error_since is None:
                self._conn_error_since = now
            elif now - self._conn_error_since > self.RECONNECT_GRACE:
                raise
            return None
        self._conn_error_since = None
        return r

    def _finish(self, result: Result, seq: Optional[int]) -> Iterator[Event]:
        if self.from_start:
            for name in ("stdout", "stderr"):
                full: bytes = getattr(result, name)
                if self.delivered[name] < len(full):
                    yield Event(type=name, seq=None, data=full[self.delivered[name] :])
                    self.delivered[name] = len(full)
        yield Event(type="exited", seq=seq, result=result)

    def _on_event(self, ev: Event) -> bool:
        """Update sequence state; return True if the event may be passed on live."""
        assert ev.seq is not None
        if ev.type == "started" and ev.seq == 0 and self.expected not in (None, 0):
            # A new attempt (the job was re-run after its worker was lost): seq restarts.
            self.expected = 1
            self.lost = False
            self.from_start = True
            self.delivered = {"stdout": 0, "stderr": 0}
            return True
        if self.expected is None:
            self.from_start = ev.seq == 0
            self.expected = ev.seq + 1
            return True
        if ev.seq != self.expected:
            self.lost = True
        self.expected = ev.seq + 1
        return not self.lost

    def events(self, deadline: Optional[float], started_at: float) -> Iterator[Event]:
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
                    msg = self.pubsub.get_message(timeout=wait)
                except _CONN_ERRORS:
                    _close_quietly(self.pubsub)
                    self.pubsub = None
                    self.lost = True
            else:
                time.sleep(max(0.0, wait))
            if msg is not None and msg.get("type") == "message":
                last_heard = time.monotonic()
                try:
                    ev = decode_event(msg["data"])
                except ProtocolError:
                    self.lost = True  # an undecodable message counts as a lost one
                    continue
                live = self._on_event(ev)
                if ev.type == "exited":
                    assert ev.result is not None
                    yield from self._finish(ev.result, ev.seq)
                    return
                if live and ev.type in ("started", "stdout", "stderr"):
                    if ev.type != "started":
                        self.delivered[ev.type] += len(ev.data)
                    yield ev
                continue
            if msg is not None:
                continue  # subscribe confirmations, pongs
            now = time.monotonic()
            if now - last_poll >= interval and (self.lost or now - last_heard >= interval):
                last_poll = now
                result = self._poll()
                if result is not None:
                    # Live events may still be in flight; _finish delivers the output not yet
                    # passed on from the result itself.
                    yield from self._finish(result, None)
                    return
