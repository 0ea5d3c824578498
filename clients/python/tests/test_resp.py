"""sandpool._resp (the client's own RESP code for batches) and the Raw step of both drivers,
against a real redis-server."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio as aioredis

from conftest import RedisServer
from sandpool import _drive
from sandpool._resp import Reader, ReplyError, pack


def test_replies_split_anywhere_parse_the_same() -> None:
    data = (b"*2\r\n$3\r\nabc\r\n*3\r\n:5\r\n$-1\r\n$0\r\n\r\n-ERR bad\r\n*-1\r\n+OK\r\n*0\r\n"
            b"$11\r\n0123\r\n56789\r\n")
    want = [[b"abc", [5, None, b""]], "ERR bad", None, b"OK", [], b"0123\r\n56789"]
    for size in (1, 2, 3, 7, len(data)):
        r, got = Reader(), []
        for i in range(0, len(data), size):
            r.feed(data[i:i + size])
            while (v := r.get()) is not Reader.NOTHING:
                got.append(v)
        assert got == want, size
        assert type(got[1]) is ReplyError


def test_pack_is_what_redis_reads(redis_server: RedisServer) -> None:
    r = redis_server.client()
    args = ("SET", "k", b"\x00\r\n\xff")
    assert _drive.run(r, _one(args)) == [b"OK"]
    assert r.get("k") == b"\x00\r\n\xff"
    assert pack([("PING",)]) == b"*1\r\n$4\r\nPING\r\n"


def _one(*cmds):
    return (yield _drive.Raw(list(cmds)))


def test_raw_steps_in_both_drivers(redis_server: RedisServer) -> None:
    r = redis_server.client()
    cmds = [("XADD", "s", "*", "id", f"j{i}", "n", i) for i in range(2500)] + [("XLEN", "s")]
    replies = _drive.run(r, _one(*cmds))
    assert len(replies) == 2501 and replies[-1] == 2500
    (xread,) = _drive.run(r, _one(("XREAD", "COUNT", 5000, "STREAMS", "s", "0")))
    assert len(xread[0][1]) == 2500 and xread[0][1][7][1] == [b"id", b"j7", b"n", b"7"]
    # An error reply raises (as redis-py's pipelines do); the connection stays usable.
    r.set("str", "x")
    with pytest.raises(redis.ResponseError):
        _drive.run(r, _one(("XADD", "str", "*", "a", "b")))
    assert _drive.run(r, _one(("XLEN", "s"))) == [2500]

    async def main() -> None:
        a = aioredis.Redis(unix_socket_path=redis_server.sock)
        (got,) = await _drive.arun(a, _one(("XREAD", "COUNT", 5000, "STREAMS", "s", "0")))
        assert got == xread
        with pytest.raises(redis.ResponseError):
            await _drive.arun(a, _one(("XADD", "str", "*", "a", "b")))
        assert await _drive.arun(a, _one(("XLEN", "s"))) == [2500]
        await a.close()

    asyncio.run(main())
