"""Python client for sandpool, the self-hosted sandbox worker pool.

Talks only to Redis, following docs/PROTOCOL.md (version 1: jobs; version 2: sessions; version 4:
completion streams, for ``map`` and ``submit_many``).  ``AsyncClient`` is the asyncio twin of
``Client``.  Every error raised is a ``SandpoolError``::

    from sandpool import Client

    c = Client("redis://127.0.0.1:6379")
    r = c.run(shell="echo hi", on_stdout=lambda b: print(b.decode(), end=""))
    assert r.ok and r.stdout == b"hi\\n"
"""

from ._url import DEFAULT_URL, RedisAddress, parse_redis_url
from ._batch import Progress
from ._keys import Keys, new_job_id
from ._ops import URL_ENV, JobStatus
from .aio import AsyncClient
from .client import Client
from .errors import (
    InvalidOptionError,
    ProtocolError,
    SandpoolConnectionError,
    SandpoolError,
    SandpoolTimeout,
    WaitTimeout,
)
from .session import AsyncProcess, AsyncSession, OpResult, Process, Session, SessionError, SessionInfo
from .protocol import (
    ERROR_CODES,
    EVENT_TYPES,
    JOB_OPTIONS,
    NOTIFY_PROTOCOL_VERSION,
    OUTCOMES,
    PROTOCOL_VERSION,
    Completion,
    ErrorInfo,
    Event,
    Job,
    Result,
    build_job_map,
    decode_completion,
    decode_event,
    decode_result,
    encode_job,
    valid_job_id,
)

__all__ = [
    "AsyncClient",
    "AsyncProcess",
    "AsyncSession",
    "Client",
    "Completion",
    "InvalidOptionError",
    "JOB_OPTIONS",
    "Job",
    "NOTIFY_PROTOCOL_VERSION",
    "Progress",
    "SandpoolConnectionError",
    "SandpoolError",
    "SandpoolTimeout",
    "decode_completion",
    "DEFAULT_URL",
    "ERROR_CODES",
    "EVENT_TYPES",
    "ErrorInfo",
    "Event",
    "JobStatus",
    "Keys",
    "OpResult",
    "Process",
    "OUTCOMES",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "RedisAddress",
    "Result",
    "Session",
    "SessionError",
    "SessionInfo",
    "URL_ENV",
    "WaitTimeout",
    "build_job_map",
    "decode_event",
    "decode_result",
    "encode_job",
    "new_job_id",
    "parse_redis_url",
    "valid_job_id",
]

__version__ = "0.1.0"
