"""Redis URL parsing, and connecting with each form to a real private redis-server."""

from __future__ import annotations

import pytest
import redis

from conftest import RedisServer
from sandpool import Client, RedisAddress, SandpoolConnectionError, parse_redis_url


@pytest.mark.parametrize(
    "url, expected",
    [
        ("redis://127.0.0.1:6379", RedisAddress(host="127.0.0.1", port=6379)),
        ("redis://localhost", RedisAddress(host="localhost", port=6379)),
        ("redis://h:7000/3", RedisAddress(host="h", port=7000, db=3)),
        ("redis://h:7000/", RedisAddress(host="h", port=7000)),
        ("redis://:s3cret@h:7000", RedisAddress(host="h", port=7000, password="s3cret")),
        ("redis://alice:pw@h:1/2", RedisAddress(host="h", port=1, user="alice", password="pw", db=2)),
        ("redis://alice:p%40ss%3Aw@h:1", RedisAddress(host="h", port=1, user="alice", password="p@ss:w")),
        ("redis://alice:a:b@h:1", RedisAddress(host="h", port=1, user="alice", password="a:b")),
        ("REDIS://H:5", RedisAddress(host="h", port=5)),
        ("redis://[::1]:6380", RedisAddress(host="::1", port=6380)),
        ("unix:///run/redis.sock", RedisAddress(unix_path="/run/redis.sock")),
        ("unix:///run/redis.sock?db=4", RedisAddress(unix_path="/run/redis.sock", db=4)),
        ("unix:///run/r.sock?password=pw", RedisAddress(unix_path="/run/r.sock", password="pw")),
        ("unix:///run/r.sock?db=1&user=u&password=p%26w",
         RedisAddress(unix_path="/run/r.sock", user="u", password="p&w", db=1)),
        ("redis://secret@h:1", RedisAddress(host="h", port=1, password="secret")),
        ("redis://u:@h:1", RedisAddress(host="h", port=1, user="u")),  # empty password: no AUTH
        ("redis://a:b@c@h:1", RedisAddress(host="h", port=1, user="a", password="b@c")),
    ],
)
def test_parse_valid(url: str, expected: RedisAddress) -> None:
    assert parse_redis_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "",
        "127.0.0.1:6379",
        "http://h:1",
        "rediss://h:1",
        "redis://",
        "redis://h:notaport",
        "redis://h:70000",
        "redis://h:0",
        "redis://h:1/x",
        "redis://h:1/-1",
        "redis://h:1/1/2",
        "redis://h:1?db=2",
        "unix://:pw@/run/r.sock",
        "unix:///s.sock?passwd=x",
        "unix://",
        "unix://host/path.sock",
        "unix://relative.sock",
        "unix:///",
        "unix:///s.sock?db=x",
        "unix:///s.sock?db=1&db=2",
        "unix:///s.sock?timeout=1",
        "redis://h:1#frag",
    ],
)
def test_parse_invalid(url: str) -> None:
    with pytest.raises(ValueError):
        parse_redis_url(url)


def test_errors_never_show_the_password() -> None:
    for url in ("redis://u:topsecret@h:notaport", "redis://u:topsecret@h:1/zz",
                "unix:///s.sock?password=topsecret&db=zz", "redis://topsecret@h:x"):
        with pytest.raises(ValueError) as e:
            parse_redis_url(url)
        assert "topsecret" not in str(e.value)


def test_redacted() -> None:
    a = parse_redis_url("redis://alice:topsecret@h:7/1")
    assert a.redacted() == "redis://alice:***@h:7/1"
    assert "topsecret" not in repr(Client("redis://alice:topsecret@h:7/1"))
    assert parse_redis_url("unix:///s.sock?db=2").redacted() == "unix:///s.sock?db=2"
    assert (parse_redis_url("unix:///s.sock?user=u&password=topsecret").redacted()
            == "unix:///s.sock?user=u&password=***")


def test_url_from_argument_env_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDPOOL_REDIS_URL", raising=False)
    assert Client().address == RedisAddress(host="127.0.0.1", port=6379)
    monkeypatch.setenv("SANDPOOL_REDIS_URL", "unix:///tmp/x.sock?db=5")
    assert Client().address == RedisAddress(unix_path="/tmp/x.sock", db=5)
    assert Client("redis://h:9").address == RedisAddress(host="h", port=9)


# redis-py 4.3 reports WRONGPASS as ResponseError and NOAUTH as AuthenticationError
# The client raises its own exceptions (no redis exception leaks): a refused login is a
# connection error.
AUTH_ERRORS = (SandpoolConnectionError,)


def _roundtrip(c: Client, raw: redis.Redis) -> None:
    """A submit through the client lands in the database the raw connection sees."""
    job_id = c.submit(shell="true")
    entries = raw.xrange("sandpool:q:default")
    assert [e[1][b"id"] for e in entries] == [job_id.encode()]


def test_connect_unix_with_db() -> None:
    srv = RedisServer()
    try:
        c = Client(srv.url + "?db=3")
        _roundtrip(c, srv.client(db=3))
        assert srv.client(db=0).exists("sandpool:q:default") == 0
        c.close()
    finally:
        srv.stop()


def test_connect_tcp_password_only() -> None:
    srv = RedisServer(tcp=True, extra_args=["--requirepass", "pa:ss@word"])
    try:
        with pytest.raises(AUTH_ERRORS, match="WRONGPASS|NOAUTH|[Aa]uthentication"):
            Client(f"redis://:wrong@127.0.0.1:{srv.port}").submit(shell="true")
        with pytest.raises(AUTH_ERRORS, match="WRONGPASS|NOAUTH|[Aa]uthentication"):
            Client(f"redis://127.0.0.1:{srv.port}").submit(shell="true")
        c = Client(f"redis://:pa%3Ass%40word@127.0.0.1:{srv.port}/2")
        _roundtrip(c, srv.client(password="pa:ss@word", db=2))
    finally:
        srv.stop()


def test_connect_tcp_user_and_password() -> None:
    srv = RedisServer(tcp=True, extra_args=["--user", "alice", "on", ">wonder", "~*", "&*", "+@all",
                                            "--user", "default", "off"])
    try:
        with pytest.raises(AUTH_ERRORS, match="WRONGPASS|NOAUTH|[Aa]uthentication"):
            Client(f"redis://alice:wrong@127.0.0.1:{srv.port}").submit(shell="true")
        with pytest.raises(AUTH_ERRORS, match="WRONGPASS|NOAUTH|[Aa]uthentication"):
            # password only = AUTH as "default", which is disabled here
            Client(f"redis://:wonder@127.0.0.1:{srv.port}").submit(shell="true")
        c = Client(f"redis://alice:wonder@127.0.0.1:{srv.port}")
        _roundtrip(c, srv.client(username="alice", password="wonder"))
    finally:
        srv.stop()


def test_connect_unix_with_password() -> None:
    srv = RedisServer(extra_args=["--requirepass", "pw1"])
    try:
        c = Client(f"unix://{srv.sock}?db=1&password=pw1")
        _roundtrip(c, srv.client(password="pw1", db=1))
    finally:
        srv.stop()
