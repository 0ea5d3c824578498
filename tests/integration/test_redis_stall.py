"""A Redis that stops answering (paused, stuck in a long fork, failing over) without dropping the
connection: the daemon logs it once when it starts and once when it ends, with how long it
lasted. Before, only /readyz showed it, and the log of a chaos run had no line for 30 s."""

import json
import time

from sandpool_harness import wait_for


def _lines(d, msg):
    out = []
    for line in d.log_tail(10**7).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg") == msg:
            out.append(rec)
    return out


def test_a_redis_stall_is_logged_once_at_its_start_and_once_at_its_end(redis_server, daemons):
    d = daemons(workers=1)
    redis_server.pause()
    paused = time.monotonic()
    try:
        # kRedisStallMs (3 s) after the oldest command waiting, at the next heartbeat.
        wait_for(lambda: _lines(d, "redis not answering"), 10, "the stall's first line")
        assert time.monotonic() - paused >= 2.5
        time.sleep(3)
        assert len(_lines(d, "redis not answering")) == 1, "one line per stall, not one per beat"
        assert not _lines(d, "redis answering again")
    finally:
        redis_server.resume()
    stalled_for = time.monotonic() - paused
    end = wait_for(lambda: _lines(d, "redis answering again"), 10, "the stall's last line")
    assert len(end) == 1 and end[0]["conn"] == "commands", end
    # Counted from the oldest unanswered command (sent within a heartbeat of the pause) to the
    # first answer after it.
    assert stalled_for - 1.5 <= end[0]["stalled_ms"] / 1000 <= stalled_for + 1.0, (stalled_for, end)
    start = _lines(d, "redis not answering")[0]
    assert start["waited_ms"] > 3000 and start["level"] == "warn", start
    # A second, short hiccup below the threshold leaves no line.
    redis_server.pause()
    time.sleep(1)
    redis_server.resume()
    time.sleep(2.5)
    assert len(_lines(d, "redis not answering")) == 1 and len(_lines(d, "redis answering again")) == 1
