#!/usr/bin/python3
"""Session operations through the Python client, one after another, against a running daemon:
JSON lines in bench/e2e_bench.cc's format on stdout (system "sandpool-session").

    /usr/bin/python3 bench/sessions_bench.py --redis unix:///path/redis.sock [--n 200]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python"))

from sandpool import Client  # noqa: E402


def emit(command, samples, inflight=1, note=None):
    s = sorted(samples)
    pick = lambda p: round(s[min(len(s), max(1, -(-p * len(s) // 100))) - 1], 4)  # noqa: E731
    out = {"system": "sandpool-session", "variant": "python", "mode": "latency", "command": command, "measured": True,
           "inflight": inflight, "n": len(s), "errors": 0, "lost": 0, "p50_ms": pick(50), "p90_ms": pick(90),
           "p99_ms": pick(99), "max_ms": round(s[-1], 4), "mean_ms": round(sum(s) / len(s), 4)}
    if note:
        out["note"] = note
    print(json.dumps(out), flush=True)
    print(f"{command:60} p50 {out['p50_ms']:8.3f}  p90 {out['p90_ms']:8.3f}  p99 {out['p99_ms']:8.3f} ms", file=sys.stderr)


def timed(n, fn, warmup=10):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redis", required=True)
    ap.add_argument("--n", type=int, default=200)
    a = ap.parse_args()
    c = Client(a.redis, poll_interval=0.5)
    n = a.n
    # Creates: adopting the warm spare (default limits), and cold (limits of its own).
    warm, cold = [], []
    c.session("bench-prime").destroy()  # the first create of the template starts its spare
    time.sleep(0.5)
    for i in range(min(n, 40)):
        t = time.perf_counter()
        s = c.session(f"bench-w{i}")
        warm.append((time.perf_counter() - t) * 1000)
        s.destroy()
        time.sleep(0.15)  # the next spare
    for i in range(min(n, 20)):
        t = time.perf_counter()
        s = c.session(f"bench-c{i}", limits={"memory_bytes": 256 << 20})
        cold.append((time.perf_counter() - t) * 1000)
        s.destroy()
    emit("create (takes a warm session sandbox)", warm)
    emit("create with its own limits (cold: new disk + sandbox)", cold)
    s = c.session("bench-main")
    emit("exec argv ['true']", timed(n, lambda: s.exec(argv=["true"])))
    emit("exec shell 'echo hi'", timed(n, lambda: s.exec(shell="echo hi")))
    s.run_code("x = 1")
    emit("code (python context) 'x + 1'", timed(n, lambda: s.run_code("x + 1")))
    # File transfer, side by side with Redis itself from the same client (issue 18): SET + GET of
    # the same bytes under one key (Redis reuses the value's memory), and under a new key each time
    # that stays (Redis touches fresh memory for it; on the bench machines' VMs a page fault costs
    # ~20 us, so that is most of what a MiB costs Redis). A session's large read result used to stay
    # for its ttl like the second; since the client takes it (GETDEL, PROTOCOL.md section 16) Redis
    # reuses its memory like the first.
    # In a session of its own: the disk image keeps the blocks of every rewrite (the filesystem
    # inside does not give them back), and bench-main's is snapshotted below, within
    # --max-snapshot-bytes.
    r = c.redis  # the client's own connection
    files = c.session("bench-files")
    for size, k in ((1, min(n, 100)), (16, max(3, min(n, 100) // 10))):
        data = os.urandom(size << 20)
        emit(f"write_file + read_file, {size} MiB",
             timed(k, lambda: (files.write_file("/work/b", data), files.read_file("/work/b")), warmup=3))
        emit(f"redis SET + GET, {size} MiB, one key", timed(k, lambda: (r.set("bench:file", data), r.get("bench:file")), warmup=3))
        seq = iter(range(1 << 30))

        def new_key_kept() -> None:
            key = f"bench:file:{size}:{next(seq)}"
            r.set(key, data, ex=600)
            r.get(key)
        emit(f"redis SET + GET, {size} MiB, a new key kept", timed(k, new_key_kept, warmup=3))
        r.delete(*r.keys(f"bench:file:{size}:*"))
    r.delete("bench:file")
    files.destroy()
    emit("write_file 100 bytes", timed(n, lambda: s.write_file("/work/small", b"x" * 100)))
    # Resume with 100 MiB of files in the session (100 files of 1 MiB, in /work and /tmp).
    for k in range(10):
        s.write_files([{"path": f"/work/big/f{k}-{i}" if i % 2 else f"/tmp/big/f{k}-{i}", "data": os.urandom(1 << 20),
                        "parents": True} for i in range(10)])
    stops, resumes = [], []
    for _ in range(min(n, 20)):
        t = time.perf_counter()
        s.stop()
        stops.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        s.start()
        resumes.append((time.perf_counter() - t) * 1000)
    emit("stop (files kept), holding 100 MiB", stops)
    emit("resume (create of a stopped session), holding 100 MiB", resumes)
    assert s.exec(shell="cat /work/big/* /tmp/big/* | wc -c").stdout.strip() == str(100 << 20).encode()
    s.exec(shell="rm -rf /work/big /tmp/big")
    s.write_file("/work/data", os.urandom(8 << 20))
    t = time.perf_counter()
    s.snapshot("bench-snap")
    emit("snapshot of a running session holding 8 MiB", [(time.perf_counter() - t) * 1000])
    froms = []
    for i in range(min(n, 10)):
        t = time.perf_counter()
        x = c.session(f"bench-from-{i}", template="bench-snap")
        froms.append((time.perf_counter() - t) * 1000)
        x.destroy()
    emit("create from that snapshot", froms)
    c.delete_snapshot("bench-snap")
    s.destroy()
    c.close()


if __name__ == "__main__":
    main()
