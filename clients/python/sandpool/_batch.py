"""The protocol side of ``map`` and ``submit_many`` (PROTOCOL.md section 21), without I/O.

:class:`MapState` decides what to submit and what to yield; the sync :class:`~sandpool.Client`
and the :class:`~sandpool.AsyncClient` only move its commands to Redis and its records back, so
both follow a batch the same way.  Not thread-safe: one driver at a time.
"""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

from .protocol import (
    NOTIFY_PROTOCOL_VERSION,
    Job,
    Result,
    as_job,
    build_job_map,
    decode_completion,
    encode_job,
    entry_fields,
    valid_job_id,
)

#: How many XADDs go to Redis per pipelined round trip.
SUBMIT_CHUNK = 1000
#: How many records one XREAD asks for.
READ_COUNT = 1000

JobLike = Union[Job, Mapping[str, Any], str]


@dataclasses.dataclass(frozen=True)
class Progress:
    """What a map has done so far, given to its ``on_progress`` callback after each result.

    ``total`` is the number of jobs when known (the input has a length), else ``None``.
    ``failures`` counts the results that are not ``ok`` by outcome (``exit`` for a non-zero exit).
    """

    done: int
    submitted: int
    total: Optional[int]
    failures: Dict[str, int]


def total_of(jobs: Iterable[Any]) -> Optional[int]:
    """The number of jobs when the input knows it (a list, a tuple), else None."""
    try:
        return len(jobs)  # type: ignore[arg-type]
    except TypeError:
        return None


def new_stream_name(kind: str = "map") -> str:
    """A fresh completion stream name for one batch."""
    return f"{kind}-{secrets.token_hex(8)}"


def encode_entries(jobs: Iterable[JobLike], notify: Optional[str], notify_result: bool,
                   id_prefix: str, start: int = 0) -> List[Tuple[str, Dict[str, Union[str, bytes]]]]:
    """(id, entry fields) of each job; jobs without an id get ``<id_prefix>-<index>``."""
    out = []
    version = NOTIFY_PROTOCOL_VERSION if notify is not None else 1
    # The fields after id and job are the same for every entry: checked and built once.
    tail = entry_fields("-", b"", notify, notify_result)
    del tail["id"], tail["job"]
    for i, j in enumerate(jobs, start):
        job = as_job(j)
        job_id = job.id if job.id is not None else f"{id_prefix}-{i}"
        payload = encode_job(build_job_map(job_id, version=version, **job.options()))  # checks job_id
        out.append((job_id, {"id": job_id, "job": payload, **tail}))
    return out


class MapState:
    """One map: at most ``concurrency`` jobs in flight, results as their records arrive.

    The driver loops: :meth:`to_submit` (XADD them), read records from :attr:`stream_key` after
    :attr:`last_id` and give each to :meth:`on_record`, fetch the results named by
    :meth:`on_record`'s second value with GET and give them to :meth:`on_fetched`; yield what
    those return, until :attr:`finished`.  On an early stop it cancels :meth:`outstanding` and
    deletes the stream (records of the cancelled jobs that come later make it again; it then
    expires after the daemon's result TTL).
    """

    def __init__(self, jobs: Iterable[JobLike], *, concurrency: int, ordered: bool, prefix: str,
                 on_progress: Optional[Callable[[Progress], None]] = None, total: Optional[int] = None) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1 (got {concurrency!r})")
        self.total = total
        self.name = new_stream_name()
        self.stream_key = f"{prefix}:notify:{self.name}"
        self.last_id = "0"
        self._jobs: Iterator[JobLike] = iter(jobs)
        self._exhausted = False
        self._concurrency = concurrency
        self._ordered = ordered
        self._on_progress = on_progress
        self._index = 0
        self._in_flight: Dict[str, int] = {}  # job id -> input index
        self._buffer: Dict[int, Result] = {}  # ordered: results waiting for earlier ones
        self._next = 0  # ordered: the next index to yield
        self.done = 0
        self.failures: Dict[str, int] = {}

    @property
    def finished(self) -> bool:
        return self._exhausted and not self._in_flight and not self._buffer

    def outstanding(self) -> List[str]:
        """Ids submitted whose results have not arrived."""
        return list(self._in_flight)

    def to_submit(self) -> List[Tuple[str, Dict[str, Union[str, bytes]]]]:
        """Entries to XADD now (up to the free concurrency), in input order."""
        batch: List[JobLike] = []
        while not self._exhausted and len(self._in_flight) + len(batch) < self._concurrency:
            try:
                batch.append(next(self._jobs))
            except StopIteration:
                self._exhausted = True
        entries = encode_entries(batch, self.name, True, self.name, self._index)
        for job_id, _ in entries:
            if job_id in self._in_flight:
                raise ValueError(f"job id {job_id!r} appears twice in one map")
            self._in_flight[job_id] = self._index
            self._index += 1
        return entries

    def on_record(self, entry_id: Any, fields: Mapping[Any, Any]) -> Tuple[List[Result], List[str]]:
        """A record read from the stream: (results to yield now, ids whose result must be fetched
        with GET because the record could not carry it)."""
        self.last_id = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
        c = decode_completion(fields)
        if c.id not in self._in_flight:
            return [], []  # a second record of one job (at least once), or not ours
        if c.result is None:
            return [], [c.id]
        return self._complete(c.result), []

    def on_fetched(self, job_id: str, result: Optional[Result]) -> List[Result]:
        if result is None or job_id not in self._in_flight:
            return []  # expired already: nothing more will come for it
        return self._complete(result)

    def _complete(self, r: Result) -> List[Result]:
        index = self._in_flight.pop(r.id)
        self.done += 1
        if not r.ok:
            self.failures[r.outcome] = self.failures.get(r.outcome, 0) + 1
        if self._on_progress is not None:
            self._on_progress(Progress(self.done, self._index, self.total, dict(self.failures)))
        if not self._ordered:
            return [r]
        self._buffer[index] = r
        out = []
        while self._next in self._buffer:
            out.append(self._buffer.pop(self._next))
            self._next += 1
        return out
