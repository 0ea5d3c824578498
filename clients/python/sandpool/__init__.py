"""Python client for sandpool, the self-hosted sandbox worker pool.

Talks only to Redis, following docs/PROTOCOL.md (version 1: jobs; version 2: sessions)::

    from sandpool import Client

    c = Client("redis://127.0.0.1:6379")
    r = c.run(shell="echo hi", on_stdout=lambda b: print(b.decode(), end=""))
    assert r.ok and r.stdout == b"hi\\n"
"""

from ._url import DEFAULT_URL, RedisAddress, parse_redis_url
from .client import URL_ENV, Client, JobStatus, Keys, WaitTimeout, new_job_id
from .session import OpResult, Process, Session, SessionError, SessionInfo
from .protocol import (
    ERROR_CODES,
    EVENT_TYPES,
    OUTCOMES,
    PROTOCOL_VERSION,
    ErrorInfo,
    Event,
    ProtocolError,
    Result,
    build_job_map,
    decode_event,
    decode_result,
    encode_job,
    valid_job_id,
)

__all__ = [
    "Client",
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
