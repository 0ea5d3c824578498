"""Names of PROTOCOL.md section 1 (Redis keys and channels) and of ids: what every other module
of the client shares, so that it imports from here and nothing imports back."""

from __future__ import annotations

import dataclasses
import secrets

from .protocol import valid_job_id


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

    def notify(self, name: str) -> str:
        return f"{self.prefix}:notify:{name}"

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


def check_id(job_id: str, what: str = "job") -> str:
    """``job_id`` itself, or ``ValueError`` when it is not a valid id (PROTOCOL.md section 2)."""
    if not valid_job_id(job_id):
        raise ValueError(f"invalid {what} id {job_id!r}: need 1..128 characters of [A-Za-z0-9._:-]")
    return job_id
