"""Every job operation of the client, written once without I/O (see sandpool._drive): submitting,
batches and maps, following a job's channel, results, status, cancel, and the deployment's
session and snapshot records.  :class:`sandpool.Client` and :class:`sandpool.AsyncClient` are
this class carried out by the blocking and the asyncio driver.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, TypeVar

import msgpack
import redis

from ._batch import READ_COUNT, SUBMIT_CHUNK, JobLike, MapState, Progress, encode_entries, new_stream_name, total_of
from ._drive import CONN_ERRORS, DONE, Close, Cmd, Cursor, Emit, Listen, Op, Pipe, Raw, Sleep, Subscribe, streaming
from ._keys import Keys, check_id, new_job_id
from ._url import DEFAULT_URL, RedisAddress, parse_redis_url
from .errors import WaitTimeout, check_options
from .protocol import (
    JOB_OPTIONS,
    Event,
    Job,
    ProtocolError,
    Result,
    as_job,
    build_job_map,
    decode_completion,
    decode_event,
    decode_result,
    encode_job,
    entry_fields,
)

T = TypeVar("T")

#: Environment variable holding the Redis URL when ``Client(url=None)``.
URL_ENV = "SANDPOOL_REDIS_URL"

#: TTL the cancel block of PROTOCOL.md section 7 puts on the job hash.
CANCEL_TTL_SECONDS = 86400

#: Options of map() applied to every job that does not set them itself.
MAP_DEFAULTS = ("template", "env", "cwd", "timeout_ms", "max_output_bytes", "retries", "memory_bytes", "pids",
                "cpu_time_ms")
MAP_OPTIONS = MAP_DEFAULTS + ("concurrency", "ordered", "on_progress")

OutputCallback = Callable[[bytes], None]

# How long the result key may be unreachable (Redis restarting) before waiting gives up.
RECONNECT_GRACE = 30.0


def job_of(where: str, options: Mapping[str, Any], unknown: Mapping[str, Any]) -> Job:
    """The Job of a call's keyword options (its locals()); a misspelt one raises
    InvalidOptionError naming every keyword the call takes."""
    check_options(unknown, [k for k in options if k not in ("self", "unknown")], where)
    return Job(**{k: v for k, v in options.items() if k in JOB_OPTIONS})


def map_defaults(jobs: Iterable[JobLike], defaults: Mapping[str, Any]) -> Iterator[Job]:
    """Each job with the map's default options filled in where it left them unset."""
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


def cancel_commands(keys: Keys, job_ids: Iterable[str]) -> List[Tuple[Any, ...]]:
    """The commands of PROTOCOL.md section 7 for each job, to send in one MULTI block."""
    out: List[Tuple[Any, ...]] = []
    for job_id in job_ids:
        out += [("HSET", keys.job(job_id), "cancel", 1), ("EXPIRE", keys.job(job_id), CANCEL_TTL_SECONDS),
                ("PUBLISH", keys.cancel, job_id)]
    return out


# --- following one job's channel ----------------------------------------------------------------


def get_result(keys: Keys, job_id: str) -> Op[Optional[Result]]:
    raw = yield Cmd(("GET", keys.result(job_id)))
    return None if raw is None else decode_result(raw)


def subscribe(keys: Keys, job_id: str, timeout: float = 30.0) -> Op[Any]:
    """Subscribes to the job's channel and waits until Redis confirms it; the handle."""
    sub, _ = yield from subscribe_during(keys, job_id, value_op(None), timeout)
    return sub


def value_op(value: T) -> Op[T]:
    """An Op that asks for nothing and returns ``value``."""
    return value
    yield  # a generator


def subscribe_during(keys: Keys, job_id: str, op: Op[T], timeout: float = 30.0) -> Op[Tuple[Any, T]]:
    """:func:`subscribe`, with ``op`` run while the confirmation travels (Subscribe sends
    SUBSCRIBE on a connection of its own without waiting for it): the handle and ``op``'s value.
    What ``op`` sends is not ordered after the subscription; only what follows this is."""
    sub = yield Subscribe(keys.out(job_id))
    try:
        value = yield from op
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise redis.TimeoutError("no confirmation of SUBSCRIBE from Redis")
            msg = yield Listen(sub, left)
            if msg is not None and msg.get("type") == "subscribe":
                return sub, value
    except BaseException:
        yield Close(sub)
        raise


class _Sequence:
    """The sequence state of one job's events: loss detection, a new attempt, what was passed on."""

    def __init__(self, from_start: bool) -> None:
        # Next expected seq; None until the first event when joining a job midway.
        self.expected: Optional[int] = 0 if from_start else None
        # True when the events seen so far are the output from its very beginning.
        self.from_start = from_start
        self.lost = False
        self.delivered = {"stdout": 0, "stderr": 0}

    def on_event(self, ev: Event) -> bool:
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

    def tail(self, result: Result) -> Iterator[Event]:
        """The output not passed on live, from the result (when followed from the start)."""
        if self.from_start:
            for name in ("stdout", "stderr"):
                full: bytes = getattr(result, name)
                if self.delivered[name] < len(full):
                    yield Event(type=name, seq=None, data=full[self.delivered[name]:])
                    self.delivered[name] = len(full)


def follow(keys: Keys, poll_interval: float, job_id: str, sub: Any, from_start: bool,
           deadline: Optional[float], started_at: float) -> Op[Event]:
    """Emits a job's live events (``started``, ``stdout``, ``stderr``) from the subscription
    ``sub`` and returns its ``exited`` event: sequence checks, loss detection, and the result
    key as the fallback (and the truth) when the channel is silent or lost events.  Raises
    :class:`WaitTimeout` at ``deadline``.  Does not close ``sub``."""
    seq = _Sequence(from_start)
    last_heard = time.monotonic()
    last_poll = last_heard
    conn_error_since: Optional[float] = None
    while True:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise WaitTimeout(job_id, now - started_at)
        wait = poll_interval if deadline is None else max(0.0, min(poll_interval, deadline - now))
        msg = None
        if sub is not None:
            try:
                msg = yield Listen(sub, wait)
            except CONN_ERRORS:
                yield Close(sub)
                sub = None
                seq.lost = True
        else:
            yield Sleep(wait)
        if msg is not None:
            if msg.get("type") != "message":
                continue  # subscribe confirmations, pongs
            last_heard = time.monotonic()
            try:
                ev = decode_event(msg["data"])
            except ProtocolError:
                seq.lost = True  # an undecodable message counts as a lost one
                continue
            live = seq.on_event(ev)
            if ev.type == "exited":
                assert ev.result is not None
                for e in seq.tail(ev.result):
                    yield Emit(e)
                return ev
            if live and ev.type in ("started", "stdout", "stderr"):
                if ev.type != "started":
                    seq.delivered[ev.type] += len(ev.data)
                yield Emit(ev)
            continue
        now = time.monotonic()
        if now - last_poll >= poll_interval and (seq.lost or now - last_heard >= poll_interval):
            last_poll = now
            try:
                result = yield from get_result(keys, job_id)
            except CONN_ERRORS:
                if conn_error_since is None:
                    conn_error_since = now
                elif now - conn_error_since > RECONNECT_GRACE:
                    raise
                continue
            conn_error_since = None
            if result is not None:
                # Live events may still be in flight; the output not yet passed on comes from
                # the result itself.
                for e in seq.tail(result):
                    yield Emit(e)
                return Event(type="exited", seq=None, result=result)


def relay(op: Op[Any], on_emit: Callable[[Any], None]) -> Op[Any]:
    """``op`` with its Emits given to ``on_emit`` instead of passed on; its value.  An exception
    of ``on_emit`` is raised into ``op``, which unwinds."""
    cursor = Cursor(op)
    while (step := cursor.next()) is not DONE:
        try:
            if type(step) is Emit:
                on_emit(step.value)
            else:
                cursor.reply = yield step
        except BaseException as e:  # noqa: BLE001 - raised into op
            cursor.fail(e)
    return cursor.value


def output_to(on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]) -> Callable[[Event], None]:
    """An Emit handler for :func:`follow` that gives each chunk to its callback."""
    def deliver(ev: Event) -> None:
        if ev.type == "stdout" and on_stdout is not None:
            on_stdout(ev.data)
        elif ev.type == "stderr" and on_stderr is not None:
            on_stderr(ev.data)
    return deliver


def run_followed(keys: Keys, poll_interval: float, op_id: str, find_stream: Op[str], fields: Mapping[str, Any],
                 on_emit: Callable[[Event], None], wait_timeout: Optional[float]) -> Op[Result]:
    """Subscribes to ``op_id``'s channel, XADDs ``fields`` to the stream ``find_stream`` gives (run
    while the subscription is confirmed; so no event is missed), gives each live event to
    ``on_emit`` and returns the result: a job's run, a session command."""
    deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
    started_at = time.monotonic()
    sub, stream = yield from subscribe_during(keys, op_id, find_stream)
    try:
        yield Cmd(("XADD", stream, "*", *flat_fields(fields)))
        exited = yield from relay(follow(keys, poll_interval, op_id, sub, True, deadline, started_at), on_emit)
        return exited.result
    finally:
        yield Close(sub)


def _entry_of(where: str, options: Mapping[str, Any], unknown: Mapping[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """The job id and queue entry of a submit's or run's keyword options (their locals())."""
    job = job_of(where, options, unknown)
    job_id = new_job_id() if options.get("job_id") is None else options["job_id"]
    return job_id, entry_fields(job_id, encode_job(build_job_map(job_id, **job.options())))


def flat_fields(fields: Mapping[str, Any]) -> List[Any]:
    """The arguments of XADD for an entry's fields: name, value, name, value, ..."""
    out: List[Any] = []
    for k, v in fields.items():
        out += (k, v)
    return out


# --- the client's operations --------------------------------------------------------------------


class ClientOps:
    """A connection to one sandpool deployment (a Redis server, a key prefix and a queue).

    ``url`` is ``redis://[user:password@]host[:port][/db]`` or ``unix:///path[?db=N]``; when
    ``None`` it comes from the environment variable ``SANDPOOL_REDIS_URL``, else
    ``redis://127.0.0.1:6379``.  ``prefix`` and ``queue`` must match the daemon's ``--prefix``
    and ``--queue``.  ``poll_interval`` is how long a waiting call may hear nothing on the job's
    channel before it checks the result key (the durable record).

    No connection is made until the first command.
    """

    _session_cls: Any = None  # the facade's session class

    def __init__(self, url: Optional[str] = None, *, prefix: str = "sandpool", queue: str = "default",
                 poll_interval: float = 1.0) -> None:
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

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.address.redacted()!r}, prefix={self.prefix!r}, queue={self.queue!r})"

    # -- submitting (the typed submit, run and map of each facade come here) -----------------

    def _submit_op(self, options: Mapping[str, Any], unknown: Mapping[str, Any]) -> Op[str]:
        job_id, fields = _entry_of("submit", options, unknown)
        yield Cmd(("XADD", self.keys.queue(self.queue), "*", *flat_fields(fields)))
        return job_id

    def _run_op(self, options: Mapping[str, Any], unknown: Mapping[str, Any]) -> Op[Result]:
        job_id, fields = _entry_of("run", options, unknown)
        queue = value_op(self.keys.queue(self.queue))
        return (yield from run_followed(self.keys, self.poll_interval, job_id, queue, fields,
                                        output_to(options.get("on_stdout"), options.get("on_stderr")),
                                        options.get("wait_timeout")))

    def _map_op(self, jobs: Iterable[JobLike], options: Mapping[str, Any], unknown: Mapping[str, Any]) -> Op[Any]:
        check_options(unknown, MAP_OPTIONS, "map")
        defaults = {k: v for k, v in options.items() if k in MAP_DEFAULTS}
        state = MapState(map_defaults(jobs, defaults), concurrency=options["concurrency"],
                         ordered=options["ordered"], prefix=self.prefix, on_progress=options["on_progress"],
                         total=total_of(jobs))
        return self._map(state)

    def _map(self, state: MapState) -> Op[None]:
        try:
            while not state.finished:
                entries = state.to_submit()
                if entries:
                    yield from self._xadd_entries(entries)
                if state.finished:
                    break
                (reply,) = yield Raw([("XREAD", "COUNT", READ_COUNT, "BLOCK", 1000, "STREAMS", state.stream_key,
                                       state.last_id)])
                fetch: List[str] = []
                for _key, records in reply or ():
                    for entry_id, fields in records:
                        ready, more = state.on_record(entry_id, fields)
                        fetch += more
                        for r in ready:
                            yield Emit(r)
                for job_id in fetch:
                    got = yield from get_result(self.keys, job_id)
                    for r in state.on_fetched(job_id, got):
                        yield Emit(r)
        finally:
            outstanding = state.outstanding()
            try:
                if outstanding:
                    yield Pipe(cancel_commands(self.keys, outstanding), transaction=True)
                yield Cmd(("DEL", state.stream_key))
            except CONN_ERRORS:
                pass  # Redis is away: the stream expires on its own

    def _xadd_entries(self, entries: List[Tuple[str, Dict[str, Any]]]) -> Op[None]:
        q = self.keys.queue(self.queue)
        for i in range(0, len(entries), SUBMIT_CHUNK):
            yield Raw([("XADD", q, "*", *flat_fields(fields)) for _, fields in entries[i:i + SUBMIT_CHUNK]])

    def submit_many(self, jobs: Iterable[JobLike], *, notify: Optional[str] = None,
                    notify_result: bool = False) -> Op[List[str]]:
        """Enqueue many jobs in pipelined round trips (PROTOCOL.md section 21) and return their ids.

        Each job is a :class:`Job`, a mapping of options (``id`` included) or a shell line.  Jobs
        without an id get ``<batch>-<index>`` (random batch).  With ``notify``, every job's end is
        recorded on the completion stream of that name (``notify_result``: with its result);
        follow it with :meth:`completions`.  Resubmitting the same ids after a crash runs nothing
        twice.
        """
        entries = encode_entries(jobs, notify, notify_result, new_stream_name("batch"))
        yield from self._xadd_entries(entries)
        return [job_id for job_id, _ in entries]

    @streaming
    def completions(self, notify: str, *, after: str = "0", block_ms: int = 1000) -> Op[None]:
        """Yield ``(stream id, Completion)`` of the completion stream ``notify`` from ``after``,
        forever (stop iterating when you have what you need; remember the last stream id to go
        on from there after a reconnect)."""
        key = self.keys.notify(notify)
        while True:
            (reply,) = yield Raw([("XREAD", "COUNT", READ_COUNT, "BLOCK", block_ms, "STREAMS", key, after)])
            for _key, entries in reply or ():
                for entry_id, fields in entries:
                    after = entry_id.decode()
                    yield Emit((after, decode_completion(fields)))

    # -- following ---------------------------------------------------------------------------

    @streaming
    def stream(self, job_id: str, *, timeout: Optional[float] = None) -> Op[None]:
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
        return self._stream(check_id(job_id), timeout)

    def _stream(self, job_id: str, timeout: Optional[float]) -> Op[None]:
        deadline = None if timeout is None else time.monotonic() + timeout
        started_at = time.monotonic()
        sub = yield from subscribe(self.keys, job_id)
        try:
            stored = yield from get_result(self.keys, job_id)
            if stored is not None:
                yield Emit(Event(type="exited", seq=None, result=stored))
                return
            exited = yield from follow(self.keys, self.poll_interval, job_id, sub, False, deadline, started_at)
            yield Emit(exited)
        finally:
            yield Close(sub)

    def result(self, job_id: str, wait: bool = False, timeout: Optional[float] = None) -> Op[Optional[Result]]:
        """The stored result of a job, or ``None`` if there is none (yet, or any more: TTL).

        With ``wait=True``, blocks until the result exists, or returns ``None`` once ``timeout``
        seconds (if given) have passed.
        """
        check_id(job_id)
        if not wait:
            return (yield from get_result(self.keys, job_id))
        last: List[Event] = []
        try:
            yield from relay(self._stream(job_id, timeout), last.append)
        except WaitTimeout:
            return None
        return last[-1].result

    # -- control -----------------------------------------------------------------------------

    def cancel(self, job_id: str) -> Op[None]:
        """Ask the daemons to cancel a job (PROTOCOL.md section 7, exactly its MULTI block).

        A queued job (or one not submitted yet) will never start; a running job is killed and
        keeps its output so far; a finished job is unaffected.  The outcome shows in the result.
        """
        yield Pipe(cancel_commands(self.keys, [check_id(job_id)]), transaction=True)

    def status(self, job_id: str) -> Op[JobStatus]:
        """Read the job hash and whether the result exists, atomically (one MULTI block)."""
        check_id(job_id)
        raw_fields, exists = yield Pipe([("HGETALL", self.keys.job(job_id)), ("EXISTS", self.keys.result(job_id))],
                                        transaction=True)
        return JobStatus.from_reply(job_id, raw_fields, exists)

    # -- sessions ----------------------------------------------------------------------------

    def session(self, session_id: Optional[str] = None, *, start: bool = True, **create_options: Any) -> Op[Any]:
        """A session (PROTOCOL.md sections 12-19): created, connected to, or resumed when
        ``start`` (the default); a random id unless given. ``create_options`` as for
        :meth:`Session.start`."""
        s = self._session_cls(self, session_id or "s-" + new_job_id(), **create_options)
        if start:
            yield from s._start()
        return s

    def sessions(self) -> Op[List[Dict[str, Any]]]:
        """Every session's record (state, template, consumer, labels, ...), from Redis."""
        members = yield Cmd(("SMEMBERS", self.keys.sessions))
        ids = sorted(m.decode() for m in members)
        records = (yield Pipe([("HGETALL", self.keys.session(sid)) for sid in ids])) if ids else []
        out = []
        for sid, rec in zip(ids, records):
            if rec:
                row = {k.decode(): v for k, v in rec.items()}
                labels = row.pop("labels", b"")
                row.pop("options", None)
                out.append(dict({k: v.decode("utf-8", "replace") for k, v in row.items()}, session=sid,
                                labels=msgpack.unpackb(labels, raw=False) if labels else {}))
        return out

    def snapshots(self) -> Op[List[Dict[str, str]]]:
        """Every snapshot template's record (name, base, host, created_ms, size, data_bytes, ...)."""
        members = yield Cmd(("SMEMBERS", self.keys.snapshots))
        names = sorted(m.decode() for m in members)
        records = (yield Pipe([("HGETALL", self.keys.snapshot(n)) for n in names])) if names else []
        return [{k.decode(): v.decode("utf-8", "replace") for k, v in rec.items()} for rec in records if rec]

    def delete_snapshot(self, name: str) -> Op[None]:
        """Deletes a snapshot template everywhere (``snapshot_delete``, sent to the session intake:
        any daemon does it). Idempotent."""
        yield from self._session_cls(self, "snapshot-delete")._call("snapshot_delete", {"name": name}, intake=True)


__all__ = ["ClientOps", "JobStatus", "MAP_DEFAULTS", "Progress", "URL_ENV"]
