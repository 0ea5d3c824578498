"""Batch clients, measured: 100k `true` jobs submitted and collected by the Python AsyncClient
(map, and submit_many + completions), the CLI (`sandpool map`), the naive one-at-a-time loop
(sync Client.run), and BullMQ addBulk, on one private redis-server. Writes bench/RESULTS-batch.md.

The client and Redis side is what is measured, so the daemon is replaced by a stand-in
(`standin` below) that does to Redis exactly what sandpoold does per job: the real CLAIM and
FINISH scripts of scheduler/redis/scripts.cc (dumped by bench/batch.sh), batched as JobLedger
batches them and pipelined, with a result map of the size a `true` job has, and no sandbox. Its own CPU is reported apart. A last, smaller run
goes through the real daemon (with sandboxes) for the end-to-end rate on this machine.

    bash bench/batch.sh        (builds, dumps the scripts, runs this, writes RESULTS-batch.md)
    python3 bench/batch_bench.py client --scripts DIR --n 20000
                               (the Python client's CPU per job only; DIR holds claim.lua and
                               finish.lua as bench/batch.sh dumps them)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import msgpack
import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "clients" / "python"))

from sandpool import AsyncClient, Client, Job  # noqa: E402

PY = "/usr/bin/python3"


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# --- the daemon stand-in ------------------------------------------------------------------------


def standin(sock: str, scripts: Path, stop_after: int, batch: int = 128) -> None:
    """Reads the queue like a daemon (XREADGROUP) and claims and finishes what it read the way
    JobLedger batches them: one CLAIM call per 128 entries (kMaxBatch), then one FINISH call per 128
    results, each result with the `started` event the daemon holds back for it; the calls of one
    read are pipelined. `batch` smaller than 128 stands for a daemon whose loop turns gather fewer
    results (a real daemon's usually do). Exits after `stop_after` jobs (0: never) or on SIGTERM.
    Prints its CPU at the end."""
    r = redis.Redis(unix_socket_path=sock)
    claim = r.script_load((scripts / "claim.lua").read_text())
    finish = r.script_load((scripts / "finish.lua").read_text())
    q, group, consumer = "sandpool:q:default", "workers", "standin"
    try:
        r.xgroup_create(q, group, id="0", mkstream=True)
    except redis.ResponseError:
        pass
    done = 0
    t0 = cpu_self()
    try:
        while stop_after == 0 or done < stop_after:
            got = r.xreadgroup(group, consumer, {q: ">"}, count=2000, block=1000)
            if not got:
                continue
            entries = got[0][1]
            now = str(int(time.time() * 1000))
            jobs = []
            for eid, f in entries:
                target = ""
                if b"notify" in f:
                    target = f[b"notify"].decode() + ("!" if f.get(b"notify_result") == b"1" else "")
                jobs.append((eid, f[b"id"].decode(), target))
            pipe = r.pipeline(transaction=False)
            for i in range(0, len(jobs), batch):
                part = jobs[i:i + batch]
                keys = [k for _, jid, _ in part for k in (f"sandpool:job:{jid}", f"sandpool:result:{jid}")]
                args = [consumer, now, "86400", "sandpool"]
                for eid, jid, target in part:
                    args += [eid, "1", "0", target, jid]
                pipe.evalsha(claim, len(keys), *keys, *args)
            for verdicts in pipe.execute():
                assert all(v in (b"run", b"done", b"dup") for v in verdicts[::2]), verdicts[:4]
            pipe = r.pipeline(transaction=False)
            for i in range(0, len(jobs), batch):
                keys, args = [], [consumer, "86400", group, "sandpool", "0", "0"]  # no read carried
                for eid, jid, _ in jobs[i:i + batch]:
                    result = {"v": 1, "id": jid, "outcome": "exit", "exit_code": 0, "signal": None,
                              "timed_out": False, "killed": False, "stdout": b"", "stderr": b"",
                              "stdout_truncated": False, "stderr_truncated": False, "stdout_dropped_bytes": 0,
                              "stderr_dropped_bytes": 0, "exec_time_us": 900, "cpu_time_us": 400,
                              "peak_memory_bytes": 300000, "queue_wait_us": 0, "worker": consumer, "attempt": 1,
                              "error": None}
                    res = msgpack.packb(result, use_bin_type=True)
                    ev = msgpack.packb({"v": 1, "type": "exited", "seq": 1, "result": result}, use_bin_type=True)
                    started = msgpack.packb({"v": 1, "type": "started", "seq": 0, "worker": consumer, "attempt": 1})
                    keys += [f"sandpool:job:{jid}", f"sandpool:result:{jid}", q, f"sandpool:out:{jid}"]
                    args += [eid, "1", res, ev, jid, "exit", "0", "", "", "1", started]
                pipe.evalsha(finish, len(keys), *keys, *args)
            for verdicts in pipe.execute():
                assert all(v == b"ok" for v in verdicts), verdicts[:4]
            done += len(entries)
    except KeyboardInterrupt:
        pass
    print(json.dumps({"standin_jobs": done, "standin_cpu_s": cpu_self() - t0}), flush=True)


# --- measurements -------------------------------------------------------------------------------


def measure_async_map(url: str, n: int, concurrency: int) -> Dict[str, Any]:
    async def main() -> Dict[str, Any]:
        async with AsyncClient(url) as c:
            t0, c0 = time.monotonic(), cpu_self()
            count = 0
            async for r in c.map((Job(shell="true") for _ in range(n)), concurrency=concurrency):
                count += 1 if r.ok else 0
            wall, cpu = time.monotonic() - t0, cpu_self() - c0
        return {"name": f"Python AsyncClient.map (concurrency {concurrency})", "n": n, "ok": count,
                "wall_s": wall, "client_cpu_s": cpu, "submitted_per_s": n / wall, "collected_per_s": n / wall}
    return asyncio.run(main())


def measure_async_batch(url: str, n: int) -> Dict[str, Any]:
    """submit_many of all n (pipelined), then one completions loop until every record is in."""
    async def main() -> Dict[str, Any]:
        async with AsyncClient(url) as c:
            name = f"bench-{os.getpid()}"
            jobs = [Job(shell="true", id=f"{name}-{i}") for i in range(n)]
            t0, c0 = time.monotonic(), cpu_self()
            await c.submit_many(jobs, notify=name)
            t_sub = time.monotonic() - t0
            seen = set()
            async for _sid, comp in c.completions(name):
                seen.add(comp.id)
                if len(seen) == n:
                    break
            wall, cpu = time.monotonic() - t0, cpu_self() - c0
            # The same records read again from the start, as a client that resumes after a crash
            # reads them, with no daemon running: the rate the client and Redis collect at alone.
            t1, c1, r1 = time.monotonic(), cpu_self(), await redis_cpu(c)
            again = 0
            async for _sid, comp in c.completions(name):
                again += 1
                if again == n:
                    break
            reread = {"name": "Python AsyncClient.completions: the same records read again, no daemon running",
                      "n": n, "ok": again, "wall_s": time.monotonic() - t1, "client_cpu_s": cpu_self() - c1,
                      "redis_cpu_s": await redis_cpu(c) - r1}
            reread["collected_per_s"] = n / reread["wall_s"]
            await c.redis.delete(f"sandpool:notify:{name}")
        return {"name": "Python AsyncClient.submit_many + completions", "n": n, "ok": len(seen), "wall_s": wall,
                "client_cpu_s": cpu, "submitted_per_s": n / t_sub, "collected_per_s": n / wall, "reread": reread}
    return asyncio.run(main())


async def redis_cpu(c: AsyncClient) -> float:
    return cpu_of(await c.redis.info("cpu"))


def cpu_of(info: Dict[str, Any]) -> float:
    """redis-server's CPU seconds so far, from INFO cpu."""
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure_sync_map(url: str, n: int, concurrency: int) -> Dict[str, Any]:
    c = Client(url)
    t0, c0 = time.monotonic(), cpu_self()
    ok = sum(1 for r in c.map((Job(shell="true") for _ in range(n)), concurrency=concurrency) if r.ok)
    wall, cpu = time.monotonic() - t0, cpu_self() - c0
    c.close()
    return {"name": f"Python Client.map (concurrency {concurrency})", "n": n, "ok": ok, "wall_s": wall,
            "client_cpu_s": cpu, "submitted_per_s": n / wall, "collected_per_s": n / wall}


def measure_cli_map(url: str, cli: str, n: int, concurrency: int, tmp: Path) -> Dict[str, Any]:
    jobs = tmp / "jobs.jsonl"
    jobs.write_text('{"shell":"true"}\n' * n)
    out = tmp / "results.jsonl"
    t0 = time.monotonic()
    with open(out, "wb") as f:
        p = subprocess.Popen([cli, "--redis", url, "map", "--concurrency", str(concurrency), str(jobs)],
                             stdout=f, stderr=subprocess.PIPE)
        _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    lines = out.read_bytes().count(b"\n")
    return {"name": f"CLI sandpool map (concurrency {concurrency})", "n": n, "ok": lines, "wall_s": wall,
            "client_cpu_s": ru.ru_utime + ru.ru_stime, "submitted_per_s": n / wall, "collected_per_s": n / wall,
            "exit": os.waitstatus_to_exitcode(status)}


def measure_naive(url: str, n: int) -> Dict[str, Any]:
    c = Client(url, poll_interval=1.0)
    t0, c0 = time.monotonic(), cpu_self()
    ok = sum(1 for _ in range(n) if c.run(shell="true").ok)
    wall, cpu = time.monotonic() - t0, cpu_self() - c0
    c.close()
    return {"name": "naive loop: Client.run one at a time", "n": n, "ok": ok, "wall_s": wall, "client_cpu_s": cpu,
            "submitted_per_s": n / wall, "collected_per_s": n / wall}


def measure_bullmq(sock: str, n: int, peer: Path) -> Optional[Dict[str, Any]]:
    script = peer / "bullmq_bulk.mjs"
    if not (peer / "node_modules" / "bullmq").exists() or shutil.which("node") is None:
        return {"name": "BullMQ addBulk", "not_measured": f"{peer}/node_modules has no bullmq"}
    p = subprocess.run(["node", str(script), "--socket", sock, "--n", str(n)], capture_output=True, text=True,
                       timeout=1800)
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"name": "BullMQ addBulk", "not_measured": f"peer failed: {p.stderr[-500:]}"}


class Redis:
    def __init__(self, tmp: Path, wrap: Optional[List[str]] = None) -> None:
        """wrap: a command the server runs under (valgrind, for bench/standin_cpu.py --callgrind)."""
        self.sock = str(tmp / "redis.sock")
        self.proc = subprocess.Popen((wrap or []) + ["redis-server", "--port", "0", "--unixsocket", self.sock, "--save",
                                                     "", "--appendonly", "no", "--dir", str(tmp)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if wrap else None)
        deadline = time.monotonic() + (120 if wrap else 10)
        while True:
            try:
                if redis.Redis(unix_socket_path=self.sock).ping():
                    break
            except redis.ConnectionError:
                pass
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        self.r = redis.Redis(unix_socket_path=self.sock)

    def cpu_s(self) -> float:
        return cpu_of(self.r.info("cpu"))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def with_standin(rs: Redis, scripts: Path, n: int, fn) -> Dict[str, Any]:
    rs.r.flushall()
    p = subprocess.Popen([PY, __file__, "standin", "--socket", rs.sock, "--scripts", str(scripts), "--n", str(n)],
                         stdout=subprocess.PIPE, text=True)
    r0 = rs.cpu_s()
    try:
        out = fn()
    finally:
        sout, _ = p.communicate(timeout=600)
    out["redis_cpu_s"] = rs.cpu_s() - r0
    out.update(json.loads(sout.strip().splitlines()[-1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["all", "client", "standin", "report"],
                    help="client: only the Python client's rows (AsyncClient submit_many + completions, AsyncClient.map, "
                         "Client.map) against the stand-in, printed as JSON, no report written")
    ap.add_argument("--rows", type=Path, help="report: a file of raw JSON rows (from a run's output)")
    ap.add_argument("--load", default="? ? ?,? ? ?", help="report: the load averages before,after")
    ap.add_argument("--socket")
    ap.add_argument("--scripts", type=Path)
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=128, help="standin: entries per CLAIM and FINISH call")
    ap.add_argument("--naive-n", type=int, default=3000)
    ap.add_argument("--daemon-n", type=int, default=1000)
    ap.add_argument("--bullmq-dir", type=Path, default=HERE / "out" / "bullmq-peer")
    ap.add_argument("--cli", default=str(ROOT / "build" / "bin" / "sandpool"))
    ap.add_argument("--daemon", default=str(ROOT / "build" / "bin" / "sandpoold"))
    ap.add_argument("--out", type=Path, default=HERE / "RESULTS-batch.md")
    ap.add_argument("--cmdline", default="bash bench/batch.sh")
    a = ap.parse_args()
    if a.mode == "standin":
        standin(a.socket, a.scripts, a.n, a.batch)
        return
    if a.mode == "report":
        rows = [json.loads(x) for x in a.rows.read_text().splitlines() if x.startswith("{")]
        before, after = a.load.split(",")
        write_report(a, rows, before.split(), after.split())
        return
    tmp = Path(tempfile.mkdtemp(prefix="sp-batch-"))
    rs = Redis(tmp)
    url = f"unix://{rs.sock}"
    if a.mode == "client":
        try:
            for fn in (lambda: measure_async_batch(url, a.n), lambda: measure_async_map(url, a.n, 5000),
                       lambda: measure_sync_map(url, a.n, 5000)):
                row = with_standin(rs, a.scripts, a.n, fn)
                row["client_us_per_job"] = round(1e6 * row["client_cpu_s"] / a.n, 1)
                print(json.dumps(row), flush=True)
        finally:
            rs.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        return
    rows: List[Dict[str, Any]] = []
    load0 = open("/proc/loadavg").read().split()[:3]
    try:
        rows.append(with_standin(rs, a.scripts, a.n, lambda: measure_async_batch(url, a.n)))
        rows.append(rows[-1].pop("reread"))
        rows[-2]["redis_cpu_s"] -= rows[-1]["redis_cpu_s"]  # the first row's Redis CPU without the re-read
        rows.append(with_standin(rs, a.scripts, a.n, lambda: measure_async_map(url, a.n, 5000)))
        rows.append(with_standin(rs, a.scripts, a.n, lambda: measure_cli_map(url, a.cli, a.n, 5000, tmp)))
        rows.append(with_standin(rs, a.scripts, a.naive_n, lambda: measure_naive(url, a.naive_n)))
        rs.r.flushall()
        r0 = rs.cpu_s()
        b = measure_bullmq(rs.sock, a.n, a.bullmq_dir)
        if b and "not_measured" not in b:
            b["redis_cpu_s"] = rs.cpu_s() - r0
        rows.append(b)
        # End to end through the real daemon (sandboxes), smaller.
        rs.r.flushall()
        d = subprocess.Popen([a.daemon, "--redis", url, "--metrics-addr", "off", "--workers", "2",
                              "--consumer", "bench-batch", "--log-level", "warn"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not rs.r.exists("sandpool:daemon:bench-batch"):
                assert time.monotonic() < deadline and d.poll() is None, "sandpoold did not start"
                time.sleep(0.1)
            r0 = rs.cpu_s()
            row = measure_async_map(url, a.daemon_n, 256)
            row["name"] += ", real sandpoold (2 workers, sandboxes)"
            row["redis_cpu_s"] = rs.cpu_s() - r0
            rows.append(row)
        finally:
            d.terminate()
            d.wait(30)
    finally:
        rs.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    load1 = open("/proc/loadavg").read().split()[:3]
    write_report(a, rows, load0, load1)


EARLIER = "## Earlier runs (newest first)"


def write_report(a, rows, load0, load1) -> None:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    lines = [
        "# Batch clients: submission and collection rates",
        "",
        f"Command: `{a.cmdline}` at {commit}{' (uncommitted changes)' if dirty else ''}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores shared with other users "
        f"(load average {' '.join(load0)} before, {' '.join(load1)} after). One private redis-server (unix socket).",
        "",
        "**What is measured.** The client and Redis side. Except in the last row, the daemon is a stand-in "
        "(bench/batch_bench.py `standin`, Python): it reads the queue with XREADGROUP and runs the real CLAIM and "
        "FINISH scripts of scheduler/redis/scripts.cc, batched by up to 128 entries per call as JobLedger batches them, "
        "pipelined, with a result map like a `true` job's, and "
        "no sandbox. Its CPU is given apart. The last row goes through the real sandpoold (2 workers), so it "
        "measures sandboxes, not the client. Submitted/s: jobs over the time their submission took (for map, "
        "whose submission is bounded by its concurrency, the whole run). Collected/s: jobs over the whole run. "
        "CPU per job: user + system time of the client process / jobs. The row \"read again\" reads the first "
        "row's completion records a second time from the start, after every job finished: the client and Redis "
        "collecting alone.",
        "",
        "Wall-clock rates depend on how much of the 2 shared cores the run got (the load average above); "
        "CPU per job does much less, so the last two columns turn it into the rate one core would sustain: "
        "the client's (1e6 / client µs per job) and Redis's (1e6 / Redis µs per job, Redis being single-threaded).",
        "",
        "| client | jobs | wall s | submitted/s | collected/s | client CPU µs/job | Redis CPU µs/job | "
        "stand-in CPU µs/job | client jobs/s per core | Redis jobs/s per core |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r is None:
            continue
        if "not_measured" in r:
            lines.append(f"| {r['name']} | not measured: {r['not_measured']} | | | | | | | | |")
            continue
        n = r["n"]
        st = r.get("standin_cpu_s")
        sub = f"{r['submitted_per_s']:,.0f}" if "submitted_per_s" in r else "-"
        lines.append(
            f"| {r['name']} | {r.get('ok', n)}/{n} | {r['wall_s']:.1f} | {sub} | "
            f"{r['collected_per_s']:,.0f} | {1e6 * r['client_cpu_s'] / n:.0f} | "
            f"{1e6 * r.get('redis_cpu_s', 0) / n:.0f} | {'' if st is None else f'{1e6 * st / n:.0f}'} | "
            f"{n / r['client_cpu_s']:,.0f} | {n / r['redis_cpu_s'] if r.get('redis_cpu_s') else 0:,.0f} |")
    lines += ["", "Raw rows:", "", "```"] + [json.dumps(r) for r in rows if r] + ["```", ""]
    # Earlier runs stay below the new one (headings one level down), readings written by hand included.
    if a.out.exists():
        old = a.out.read_text().splitlines()
        if old and old[0].startswith("# "):
            old = old[1:]
        old = [("#" + x if x.startswith("## ") and x != EARLIER else x) for x in old if x != EARLIER]
        lines += [EARLIER, "", "### The run before this one"] + old
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
