"""Redis address parsing: the same URL forms the daemon accepts with ``--redis``.

Accepted forms::

    redis://[user:password@]host[:port][/db]     port defaults to 6379, db to 0
    redis://:password@host:port                  password only (AUTH <password>)
    redis://password@host:port                   a lone userinfo is the password (as redis-cli -u)
    redis://[::1]:6379                           IPv6 in brackets
    unix:///path/to/redis.sock[?db=N][&user=U][&password=P]

User and password are percent-decoded, so they may contain ``:``, ``@`` or ``/`` as ``%3A``,
``%40``, ``%2F``.  An empty password means no AUTH; a password without a user means
``AUTH <password>``; both mean ``AUTH <user> <password>``.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from typing import Any, Dict, Optional, Tuple

DEFAULT_URL = "redis://127.0.0.1:6379"


@dataclasses.dataclass(frozen=True)
class RedisAddress:
    """A parsed Redis URL.  Exactly one of ``host`` and ``unix_path`` is set."""

    host: Optional[str] = None
    port: int = 6379
    unix_path: Optional[str] = None
    user: Optional[str] = None  # None: AUTH with password only (or no AUTH)
    password: Optional[str] = None  # None: no AUTH
    db: int = 0

    def redacted(self) -> str:
        """The address as a URL with the password replaced by ``***`` (for logs and errors)."""
        if self.unix_path is not None:
            params = []
            if self.db:
                params.append(f"db={self.db}")
            if self.user:
                params.append(f"user={urllib.parse.quote(self.user, safe='')}")
            if self.password is not None:
                params.append("password=***")
            return f"unix://{self.unix_path}" + ("?" + "&".join(params) if params else "")
        auth = ""
        if self.password is not None or self.user:
            auth = urllib.parse.quote(self.user or "", safe="")
            auth += ":***@" if self.password is not None else "@"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"redis://{auth}{host}:{self.port}/{self.db}"

    def redis_kwargs(self) -> Dict[str, Any]:
        """Keyword arguments for ``redis.Redis(...)`` that connect to this address."""
        kw: Dict[str, Any] = {"db": self.db}
        if self.unix_path is not None:
            kw["unix_socket_path"] = self.unix_path
        else:
            kw["host"] = self.host
            kw["port"] = self.port
        if self.password is not None:
            kw["password"] = self.password
            if self.user:
                kw["username"] = self.user
        return kw


def _parse_db(text: str, url: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"invalid db number {text!r} in Redis URL {_redact_raw(url)!r}")
    return int(text)


def _redact_raw(url: str) -> str:
    """Hide user information and password parameters so that no error message shows a secret."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    rest = re.sub(r"(?i)(password=)[^&#]*", r"\1***", rest)
    return f"{scheme}{sep}{rest}"


def _userinfo(parts: urllib.parse.SplitResult) -> Tuple[Optional[str], Optional[str]]:
    netloc = parts.netloc
    if "@" not in netloc:
        return None, None
    info = netloc.rsplit("@", 1)[0]
    if ":" in info:
        user, password = info.split(":", 1)
    else:
        user, password = "", info  # "redis://secret@host": the lone userinfo is the password
    return (urllib.parse.unquote(user) or None), (urllib.parse.unquote(password) or None)


def parse_redis_url(url: str) -> RedisAddress:
    """Parse ``url`` into a :class:`RedisAddress`.

    Raises ``ValueError`` (with the password redacted from the message) if the URL is not one of
    the accepted forms.
    """
    if not isinstance(url, str) or not url:
        raise ValueError("Redis URL must be a non-empty string")
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as e:
        raise ValueError(f"invalid Redis URL {_redact_raw(url)!r}: {e}") from None
    scheme = parts.scheme.lower()
    if parts.fragment:
        raise ValueError(f"Redis URL must not have a fragment: {_redact_raw(url)!r}")
    if scheme == "redis":
        user, password = _userinfo(parts)
        try:
            host = parts.hostname
            port = parts.port
        except ValueError:
            raise ValueError(f"invalid port in Redis URL {_redact_raw(url)!r}") from None
        if not host:
            raise ValueError(f"Redis URL has no host: {_redact_raw(url)!r}")
        if parts.query:
            raise ValueError(f"redis:// URL takes no query: {_redact_raw(url)!r}")
        path = parts.path
        db = 0
        if path not in ("", "/"):
            db = _parse_db(path[1:], url)
        if port is None:
            port = 6379
        if port == 0:
            raise ValueError(f"invalid port in Redis URL {_redact_raw(url)!r}")
        return RedisAddress(host=host, port=port, user=user, password=password, db=db)
    if scheme == "unix":
        if "@" in parts.netloc:
            raise ValueError(
                "unix:// URLs take credentials as query parameters: "
                "unix:///path?user=U&password=P"
            )
        if parts.netloc:
            raise ValueError(
                f"unix:// URL must be unix:///absolute/path (got host {parts.netloc!r})"
            )
        path = urllib.parse.unquote(parts.path)
        if not path.startswith("/") or path == "/":
            raise ValueError(f"unix:// URL needs an absolute socket path: {_redact_raw(url)!r}")
        db = 0
        user: Optional[str] = None
        password: Optional[str] = None
        if parts.query:
            q = urllib.parse.parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
            unknown = set(q) - {"db", "user", "password"}
            if unknown:
                raise ValueError(
                    f"unknown query parameter(s) {sorted(unknown)} in Redis URL "
                    "(known: db, user, password)"
                )
            for name, values in q.items():
                if len(values) != 1:
                    raise ValueError(f"{name} given more than once in Redis URL")
            if "db" in q:
                db = _parse_db(q["db"][0], url)
            user = q.get("user", [""])[0] or None
            password = q.get("password", [""])[0] or None
        return RedisAddress(unix_path=path, user=user, password=password, db=db)
    raise ValueError(
        f"unsupported Redis URL scheme {parts.scheme!r} (expected redis:// or unix://)"
    )
