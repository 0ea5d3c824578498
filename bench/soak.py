#!/usr/bin/python3
"""Soak: many one-shot jobs through one daemon (and, beside them, a session that keeps working:
commands, files, background processes, stop and resume), with the daemon's resources sampled
throughout. Flat curves are the claim: nothing grows with the number of jobs.

Sampled every --every seconds: the daemon's RSS, open fds and threads; zombies anywhere under
it; its cgroups; the host's mounts and loop devices; processes in its sandbox uid range; Redis's
used memory. Writes bench/out/soak.csv and bench/out/soak.svg (a plot, one panel per series),
and prints the first and last samples and the verdict as JSON.

    sudo /usr/bin/python3 bench/soak.py --jobs 1000000 --svg bench/soak.svg --markdown bench/RESULTS-soak.md
                                                            # the full soak (about an hour on 2 cores)
    sudo /usr/bin/python3 bench/soak.py --jobs 20000        # a quick look
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

import msgpack
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "clients" / "python"))

from sandpool_harness import Daemon, RedisServer, job_map, parent_pid  # noqa: E402

SERIES = ["rss_kib", "fds", "threads", "zombies", "cgroups", "host_mounts", "loop_devices", "sandbox_procs",
          "redis_used_kib"]


def descendants(pid: int) -> List[int]:
    children: Dict[int, List[int]] = {}
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            children.setdefault(parent_pid(int(e)), []).append(int(e))
        except (OSError, ValueError):
            pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def sample(d: Daemon, r: redis.Redis) -> Dict[str, int]:
    pid = d.proc.pid
    status = Path(f"/proc/{pid}/status").read_text()
    field = lambda name: int(status.split(name + ":")[1].split()[0])  # noqa: E731
    zombies = 0
    for p in descendants(pid):
        try:
            if Path(f"/proc/{p}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z":
                zombies += 1
        except OSError:
            pass
    cgroups = 0
    for root in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        for dirpath, dirnames, _ in os.walk(root):
            if f"sandpool-{d.consumer}" in dirpath:
                cgroups += 1
        if cgroups:
            break
    loops = sum(1 for b in Path("/sys/block").glob("loop*") if (b / "loop" / "backing_file").exists())
    return {
        "rss_kib": field("VmRSS"), "fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": field("Threads"),
        "zombies": zombies, "cgroups": cgroups, "host_mounts": len(Path("/proc/mounts").read_text().splitlines()),
        "loop_devices": loops, "sandbox_procs": len(d.sandbox_processes()),
        "redis_used_kib": int(r.info("memory")["used_memory"]) // 1024,
    }


def svg(rows: List[dict], path: Path) -> None:
    """One small line chart per series against jobs done; no plotting library needed."""
    w, h, pad = 420, 120, 30
    panels = []
    xs = [row["jobs_done"] for row in rows] or [0]
    xmax = max(xs) or 1
    for i, name in enumerate(SERIES):
        ys = [row[name] for row in rows] or [0]
        ymax = max(ys) or 1
        ymin = min(ys)
        pts = " ".join(f"{pad + (x / xmax) * (w - 2 * pad):.1f},{h - pad + 10 - ((y / ymax) * (h - 2 * pad)):.1f}" for x, y in zip(xs, ys))
        ox, oy = (i % 3) * (w + 10), (i // 3) * (h + 20)
        panels.append(
            f'<g transform="translate({ox},{oy})"><rect width="{w}" height="{h}" fill="white" stroke="#ccc"/>'
            f'<text x="8" y="14" font-size="11">{name}: min {ymin}, max {ymax}, last {ys[-1]}</text>'
            f'<polyline fill="none" stroke="#2a6" stroke-width="1.5" points="{pts}"/>'
            f'<text x="{w - 8}" y="{h - 6}" font-size="9" text-anchor="end">jobs done: {xmax}</text></g>')
    rows_n = (len(SERIES) + 2) // 3
    path.write_text(f'<svg xmlns="http://www.w3.org/2000/svg" width="{3 * (w + 10)}" height="{rows_n * (h + 20)}" '
                    f'font-family="sans-serif">{"".join(panels)}</svg>\n')


def write_markdown(path: Path, v: dict, rows: List[dict], args: argparse.Namespace, svg_path: Path,
                   started: float) -> None:
    from runinfo import header

    cmd = f"sudo /usr/bin/python3 bench/soak.py --jobs {args.requested_jobs}"
    if args.result_ttl != 600:
        cmd += f" --result-ttl {args.result_ttl}"
    if args.max_seconds:
        cmd += f" --max-seconds {args.max_seconds:g}"
    if args.svg:
        cmd += f" --svg {args.svg}"
    cmd += f" --markdown {args.markdown}"
    rel = os.path.relpath(svg_path, path.parent)
    lines = header("sandpool soak: results", cmd, started, args.code) + [
        (f"**Stopped by `--max-seconds` after {v['jobs']} of the {args.requested_jobs} jobs asked for.** "
         if v["jobs"] < args.requested_jobs else "") +
        f"One daemon (`--workers 8 --max-workers 16`), {v['jobs']} one-shot `/bin/echo soak` jobs, {args.in_flight} "
        "in flight, and beside them one session that keeps working (64 KiB file written and read, a background "
        "process spawned and waited for, a command, and a stop and resume every 50 rounds). Sampled every "
        f"{args.every:g} s. The plot: [{rel}]({rel}).", "",
        f"- jobs: {v['jobs']}, wrong results: {v['failed_jobs']}, missing (no result after "
        f"{args.stall_seconds:g} s): {len(v['missing'])}; session operations: {v['session_ops']}, "
        f"failed: {v['session_failures']}; {v['seconds']:.0f} s "
        f"({v['jobs'] / max(1.0, v['seconds']):.0f} jobs/s)", "",
        "| series | first sample | min | max | last sample | second half's max - first half's max |",
        "|---|---|---|---|---|---|",
    ]
    for name in SERIES:
        ys = [r[name] for r in rows]
        lines.append(f"| {name} | {rows[0][name]} | {min(ys)} | {max(ys)} | {rows[-1][name]} | "
                     f"{v['second_half_growth'][name]} |")
    lines += ["", "RSS and Redis memory move with the allocator and with results that live for `--result-ttl` "
              f"({args.result_ttl} s here); the counts (fds, threads, zombies, cgroups, mounts, loop devices, sandbox "
              "processes) must not grow at all.", ""]
    path.write_text("\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--in-flight", type=int, default=32)
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="stop submitting after this long even if --jobs are not all done (0: no limit); "
                         "the figures then say how many ran")
    ap.add_argument("--result-ttl", type=int, default=600,
                    help="the daemon's --result-ttl: longer than any stall of this client, so that a result "
                         "the client has not polled yet cannot expire unseen")
    ap.add_argument("--stall-seconds", type=float, default=120,
                    help="a job without a result this long is reported with what Redis knows of it (its hash, "
                         "its entry, its result's TTL); once every job left is that old the soak ends and "
                         "counts them missing")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--svg", help="where the plot goes (default: <out>/soak.svg); rewritten every minute")
    ap.add_argument("--markdown", help="also write the figures as a results file here")
    args = ap.parse_args()
    args.requested_jobs = args.jobs
    started = time.time()
    from runinfo import code_state
    args.code = code_state()  # now: the tree may move on before the results are written
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    svg_path = Path(args.svg) if args.svg else out / "soak.svg"
    server = RedisServer()
    d = Daemon(server.url, workers=8, extra=["--max-workers", "16", "--python-workers", "0", "--node-workers", "0",
                                             "--log-level", "warn", "--result-ttl", str(args.result_ttl)])
    try:
        d.start(wait_ready=server.client())
        return soak(args, server, d, svg_path, out, started)
    finally:
        # Also after Ctrl-C or a failure: the daemon, its sandboxes and Redis do not outlive the soak.
        d.stop()
        d.cleanup()
        server.stop()


def soak(args, server: RedisServer, d: Daemon, svg_path: Path, out: Path, started: float) -> int:
    r = redis.Redis(unix_socket_path=server.sock, socket_timeout=60)
    done = {"jobs": 0, "failed": 0, "session_ops": 0, "session_failures": 0}
    stop = threading.Event()

    def session_worker():
        from sandpool import Client

        c = Client(server.url, poll_interval=0.5)
        s = c.session("soak-session")
        n = 0
        while not stop.is_set():
            n += 1
            try:
                s.write_file(f"/work/f{n % 50}", os.urandom(64 << 10))
                assert len(s.read_file(f"/work/f{n % 50}")) == 64 << 10
                p = s.spawn(shell="echo bg; sleep 0.2")
                assert s.exec(shell="ls /work | wc -l").ok
                p.wait(5000)
                if n % 50 == 0:
                    s.stop()
                    s.start()
                done["session_ops"] += 5
            except Exception as e:  # noqa: BLE001
                done["session_failures"] += 1
                print("session op failed:", e, file=sys.stderr)
            time.sleep(0.05)
        s.destroy()
        c.close()

    sess = threading.Thread(target=session_worker, daemon=True)
    sess.start()
    rows: List[dict] = []
    t0 = time.monotonic()
    last_sample = 0.0
    pending: Dict[str, tuple] = {}  # job id -> (when submitted, its entry id)
    reported: set = set()
    missing: List[dict] = []
    submitted = 0
    with open(out / "soak.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["seconds", "jobs_done"] + SERIES)
        w.writeheader()
        while done["jobs"] < args.jobs and (pending or submitted < args.jobs):
            if args.max_seconds and time.monotonic() - t0 > args.max_seconds:
                args.jobs = submitted  # the rest are not sent; what was sent is waited for
            while submitted < args.jobs and len(pending) < args.in_flight:
                jid = f"soak-{submitted}-{secrets.token_hex(3)}"
                entry = r.xadd("sandpool:q:default", {"id": jid, "job": msgpack.packb(job_map(jid, argv=["/bin/echo", "soak"]))})
                pending[jid] = (time.monotonic(), entry.decode())
                submitted += 1
            ids = list(pending)
            got = r.mget([f"sandpool:result:{j}" for j in ids])
            for jid, raw in zip(ids, got):
                if raw is None:
                    continue
                del pending[jid]
                done["jobs"] += 1
                res = msgpack.unpackb(raw, raw=False)
                if res.get("outcome") != "exit" or res.get("stdout") != b"soak\n":
                    done["failed"] += 1
            now = time.monotonic()
            stalled = [j for j, (t, _) in pending.items() if now - t > args.stall_seconds]
            for jid in stalled:
                if jid in reported:
                    continue
                reported.add(jid)
                info = {"job": jid, "entry": pending[jid][1], "waited_s": round(now - pending[jid][0], 1),
                        "hash": {k.decode(): v.decode(errors="replace") for k, v in r.hgetall(f"sandpool:job:{jid}").items()},
                        "result_ttl": r.ttl(f"sandpool:result:{jid}"),
                        "queue_pending": r.xpending("sandpool:q:default", "workers")["pending"],
                        "queue_len": r.xlen("sandpool:q:default")}
                missing.append(info)
                print("stalled:", json.dumps(info), file=sys.stderr, flush=True)
            if stalled and len(stalled) == len(pending) and submitted >= args.jobs:
                print(f"soak: {len(stalled)} job(s) without a result after {args.stall_seconds:g} s; ending",
                      file=sys.stderr, flush=True)
                break
            if now - last_sample >= args.every:
                last_sample = now
                row = {"seconds": round(now - t0, 1), "jobs_done": done["jobs"], **sample(d, r)}
                rows.append(row)
                w.writerow(row)
                f.flush()
                print(json.dumps(row), file=sys.stderr, flush=True)
                if len(rows) % 12 == 0:
                    svg(rows, svg_path)
            time.sleep(0.002)
    stop.set()
    sess.join(60)
    time.sleep(2)
    rows.append({"seconds": round(time.monotonic() - t0, 1), "jobs_done": done["jobs"], **sample(d, r)})
    svg(rows, svg_path)
    # Flat: the second half's maximum is not above the first half's by more than a margin
    # (RSS: allocator noise; Redis: results live for --result-ttl).
    half = len(rows) // 2
    growth = {}
    for name in SERIES:
        a = max(x[name] for x in rows[:half]) if half else 0
        b = max(x[name] for x in rows[half:]) if rows else 0
        growth[name] = b - a
    verdict = {
        "jobs": done["jobs"], "failed_jobs": done["failed"], "session_ops": done["session_ops"],
        "session_failures": done["session_failures"], "seconds": round(time.monotonic() - t0, 1),
        "missing": [m for m in missing if m["job"] in pending],
        "first": rows[0] if rows else {}, "last": rows[-1] if rows else {}, "second_half_growth": growth,
    }
    print(json.dumps(verdict))
    if args.markdown:
        write_markdown(Path(args.markdown), verdict, rows, args, svg_path, started)
    return 0 if done["failed"] == 0 and done["session_failures"] == 0 and not verdict["missing"] else 1


if __name__ == "__main__":
    sys.exit(main())
