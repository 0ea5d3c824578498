#!/usr/bin/python3
"""Chaos: three daemons on one Redis, thousands of mixed jobs (some with retries, some cancelled
at random moments, some timing out), while daemons are killed with SIGKILL and restarted, Redis
is restarted (append-only file, fsync always; by SIGTERM and by SIGKILL) and paused for longer
than the lease. Then it proves:

  1. every job ended with exactly one terminal result (one stored result; never two different
     `exited` events for one id);
  2. no job without retries ran twice (never two `started` events of different attempts or
     daemons), and every `worker_lost` came from a daemon that was really killed;
  3. nothing was left on the host once the daemons stopped: no process in their uid ranges, no
     cgroup, no mount, no loop device of theirs.

Live events are read by a pattern subscription of our own; they are at-most-once, so they can
miss a second run but never invent one: every violation they show is real.

    sudo /usr/bin/python3 bench/chaos.py --seed 2026 --markdown bench/RESULTS-chaos.md
                                       # the full run (its figures: bench/RESULTS-chaos.md, and
                                       # through bench/report.py in bench/RESULTS.md)
    sudo /usr/bin/python3 bench/chaos.py --jobs 300 --seconds 40   # about a minute

Exit status 0 when every check holds; the figures are printed as JSON on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Set

import msgpack
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from sandpool_harness import Daemon, RedisServer, job_map, submit, wait_for  # noqa: E402

LEASE_MS = 2000
FLAGS = ["--heartbeat-ms", "250", "--lease-ms", str(LEASE_MS), "--grace-ms", "3000", "--workers", "3",
         "--max-workers", "6", "--python-workers", "1", "--python-max-workers", "2", "--node-workers", "0",
         "--log-level", os.environ.get("CHAOS_LOG_LEVEL", "warn")]


class EventLog:
    """Every live event of every job, from a pattern subscription that reconnects by itself."""

    def __init__(self, server: RedisServer):
        self.server = server
        self.started: Dict[str, Set[tuple]] = {}
        self.exited: Dict[str, List[bytes]] = {}
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop:
            try:
                p = redis.Redis(unix_socket_path=self.server.sock, socket_timeout=5).pubsub()
                p.psubscribe("sandpool:out:*")
                while not self.stop:
                    m = p.get_message(timeout=0.5)
                    if not m or m["type"] != "pmessage":
                        continue
                    job = m["channel"].decode().split(":", 2)[2]
                    ev = msgpack.unpackb(m["data"], raw=False)
                    if ev.get("type") == "started":
                        self.started.setdefault(job, set()).add((ev.get("worker"), ev.get("attempt")))
                    elif ev.get("type") == "exited":
                        self.exited.setdefault(job, []).append(msgpack.packb(ev.get("result")))
            except Exception:  # noqa: BLE001 - Redis restarting or paused: subscribe again
                time.sleep(0.2)


def host_leftovers(daemons: List[Daemon]) -> List[str]:
    """Processes, cgroups, mounts and loop devices of these daemons still on the host."""
    out = []
    for d in daemons:
        for p in d.sandbox_processes():
            out.append(f"process {p} of {d.consumer}")
        for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu,cpuacct",
                     "/sys/fs/cgroup/unified"):
            for dirpath, dirnames, _ in os.walk(root):
                for name in dirnames:
                    if name == f"sandpool-{d.consumer}":
                        out.append(f"cgroup {dirpath}/{name}")
                dirnames[:] = [n for n in dirnames if not n.startswith("sandpool-")]
    mounts = Path("/proc/mounts").read_text()
    for d in daemons:
        if d.state_dir in mounts:
            out.append(f"mount under {d.state_dir}")
    try:
        for line in Path("/sys/block").iterdir():
            backing = line / "loop" / "backing_file"
            if backing.exists() and any(d.state_dir in backing.read_text() for d in daemons):
                out.append(f"loop device {line.name} -> {backing.read_text().strip()}")
    except OSError:
        pass
    return out


def where_is_entry(r: redis.Redis, entry: Optional[bytes]) -> List[str]:
    """Which streams hold a job's entry, and who has it pending (for the report of a job that
    ended without a result)."""
    if not entry:
        return []
    out = []
    for key in r.scan_iter(match="sandpool:*", count=1000):
        if r.type(key) != b"stream":
            continue
        if r.xrange(key, entry, entry):
            out.append(f"in {key.decode()}")
        try:
            for p in r.xpending_range(key, "workers", entry, entry, 1):
                out.append(f"pending in {key.decode()} under {p['consumer'].decode()} idle {p['time_since_delivered']} ms "
                           f"delivered {p['times_delivered']}x")
        except redis.exceptions.ResponseError:
            pass
    return out or ["in no stream, pending nowhere"]


def run(jobs: int, seconds: float, seed: int, verbose: bool = True) -> dict:
    rnd = random.Random(seed)
    log = (lambda *a: print("[chaos]", *a, file=sys.stderr, flush=True)) if verbose else (lambda *a: None)
    server = RedisServer(aof=True)
    daemons = [Daemon(server.url, extra=FLAGS, consumer=f"chaos-{i}-{secrets.token_hex(3)}") for i in range(3)]
    for d in daemons:
        d.start(wait_ready=server.client())
        log("daemon", d.consumer, "logs to", d.log_path)
    events = EventLog(server)
    r = redis.Redis(unix_socket_path=server.sock, socket_timeout=30)
    specs: Dict[str, dict] = {}
    killed: Dict[str, List[float]] = {d.consumer: [] for d in daemons}
    actions = {"daemon_kill": 0, "redis_restart_term": 0, "redis_restart_kill": 0, "redis_pause": 0, "cancels": 0}
    t_start = time.monotonic()

    def with_redis(fn):
        for _ in range(200):
            try:
                return fn()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.BusyLoadingError):
                time.sleep(0.1)
        raise RuntimeError("Redis unreachable for 20 s")

    def submitter():
        interval = seconds * 0.8 / max(1, jobs)
        for i in range(jobs):
            jid = f"c{i}-{secrets.token_hex(4)}"
            kind = rnd.random()
            fields: dict
            if kind < 0.55:
                fields = {"shell": f"echo {jid}; sleep {rnd.choice([0, 0.05, 0.2, 0.5, 1.5])}"}
            elif kind < 0.7:
                fields = {"code": f"print('{jid}')", "runtime": "python"}
            elif kind < 0.85:
                fields = {"shell": f"echo {jid}; sleep {rnd.choice([0.5, 2, 4])}", "retries": 2}
            else:
                fields = {"shell": "sleep 10", "timeout_ms": rnd.choice([300, 1500])}
            specs[jid] = fields
            with_redis(lambda: submit(r, job_map(jid, **fields)))
            if rnd.random() < 0.08:
                delay = rnd.uniform(0, 2)

                def cancel(j=jid):
                    time.sleep(delay)
                    def tx():
                        p = r.pipeline(transaction=True)
                        p.hset(f"sandpool:job:{j}", "cancel", 1)
                        p.expire(f"sandpool:job:{j}", 86400)
                        p.publish("sandpool:cancel", j)
                        p.execute()
                    with_redis(tx)
                    actions["cancels"] += 1

                threading.Thread(target=cancel, daemon=True).start()
            time.sleep(interval * rnd.uniform(0.2, 1.8))

    sub = threading.Thread(target=submitter, daemon=True)
    sub.start()
    while time.monotonic() - t_start < seconds:
        time.sleep(rnd.uniform(1.5, 4))
        what = rnd.random()
        if what < 0.5:
            d = rnd.choice(daemons)
            log("kill -9", d.consumer)
            killed[d.consumer].append(time.monotonic())
            actions["daemon_kill"] += 1
            d.kill9()
            # Back soon, or after peers had time to take its jobs.
            time.sleep(rnd.choice([0.2, 1.0, LEASE_MS / 1000 * 2]))
            d.start()
        elif what < 0.65:
            log("redis restart (SIGTERM)")
            actions["redis_restart_term"] += 1
            server.restart(down_for=rnd.uniform(0.2, 2))
        elif what < 0.8:
            log("redis restart (SIGKILL)")
            actions["redis_restart_kill"] += 1
            server.proc.kill()
            server.proc.wait(10)
            time.sleep(rnd.uniform(0.2, 1))
            server.start()
        else:
            pause = rnd.uniform(LEASE_MS / 1000 * 1.5, LEASE_MS / 1000 * 4)
            log(f"redis pause {pause:.1f}s")
            actions["redis_pause"] += 1
            server.pause()
            time.sleep(pause)
            server.resume()
    sub.join()
    log("chaos over; waiting for every result")
    results: Dict[str, dict] = {}

    def all_done():
        for jid in specs:
            if jid not in results:
                raw = with_redis(lambda: r.get(f"sandpool:result:{jid}"))
                if raw is not None:
                    results[jid] = msgpack.unpackb(raw, raw=False)
        return len(results) == len(specs)

    try:
        wait_for(all_done, 180, "every result", interval=0.5)
    except AssertionError:
        pass
    time.sleep(1)  # the last events
    violations: List[str] = []
    missing = [j for j in specs if j not in results]
    for j in missing:
        violations.append(f"no result: {j} {specs[j]} hash={r.hgetall(f'sandpool:job:{j}')} "
                          f"entry={where_is_entry(r, r.hget(f'sandpool:job:{j}', 'entry'))}")
    for j, exits in events.exited.items():
        if len(set(exits)) > 1:
            violations.append(f"two different terminal results: {j}")
    twice = 0
    for j, runs in events.started.items():
        if j in specs and not specs[j].get("retries") and len(runs) > 1:
            twice += 1
            violations.append(f"ran twice without retries: {j} {sorted(runs)}")
    false_lost = 0
    for j, res in results.items():
        if res.get("outcome") == "worker_lost":
            workers = {w for (w, _) in events.started.get(j, set())}
            if workers and not any(killed.get(w) for w in workers):
                false_lost += 1
                violations.append(f"worker_lost but its daemon was never killed: {j} {workers}")
    outcomes: Dict[str, int] = {}
    for res in results.values():
        outcomes[res.get("outcome", "?")] = outcomes.get(res.get("outcome", "?"), 0) + 1
    events.stop = True
    for d in daemons:
        d.stop()
    deadline = time.monotonic() + 20
    left = host_leftovers(daemons)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = host_leftovers(daemons)
    violations += [f"left on the host: {x}" for x in left]
    for d in daemons:
        d.cleanup(keep_log=bool(violations))
    server.stop()
    figures = {
        "jobs": len(specs), "results": len(results), "seconds": round(time.monotonic() - t_start, 1),
        "actions": actions, "outcomes": outcomes, "ran_twice_without_retries": twice,
        "false_worker_lost": false_lost, "missing_results": len(missing), "host_leftovers": len(left),
        "violations": violations[:50], "seed": seed,
    }
    return figures


def write_markdown(path: Path, f: dict, args: argparse.Namespace, started: float) -> None:
    from runinfo import header

    cmd = (f"sudo /usr/bin/python3 bench/chaos.py --jobs {args.jobs} --seconds {args.seconds:g} --seed {args.seed}"
           f" --markdown {args.markdown}")
    a = f["actions"]
    lines = header("sandpool chaos: results", cmd, started, args.code) + [
        f"Three daemons (`{' '.join(FLAGS)}`) on one redis-server (append-only file, `appendfsync always`); "
        f"{f['jobs']} mixed jobs over {args.seconds:g} s: shell jobs of 0-1.5 s, python jobs, jobs with "
        "`retries: 2`, jobs that time out; 8% cancelled at a random moment.", "",
        "| what was done | count |", "|---|---|",
        f"| daemons killed with SIGKILL (and restarted) | {a['daemon_kill']} |",
        f"| Redis restarted after SIGTERM | {a['redis_restart_term']} |",
        f"| Redis restarted after SIGKILL | {a['redis_restart_kill']} |",
        f"| Redis paused (SIGSTOP) for 1.5-4 x the {LEASE_MS} ms lease | {a['redis_pause']} |",
        f"| cancels sent | {a['cancels']} |", "",
        "| check | figure |", "|---|---|",
        f"| jobs with exactly one terminal result | {f['results']} of {f['jobs']} |",
        f"| jobs without a result | {f['missing_results']} |",
        f"| jobs without retries that ran twice | {f['ran_twice_without_retries']} |",
        f"| `worker_lost` from a daemon that was never killed | {f['false_worker_lost']} |",
        f"| processes, cgroups, mounts, loop devices left on the host | {f['host_leftovers']} |",
        f"| violations (all checks) | {len(f['violations'])} |", "",
        "Outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(f["outcomes"].items())) + ".",
        "",
    ]
    if f["violations"]:
        lines += ["Violations (first 50):", "", "```", *f["violations"], "```", ""]
    path.write_text("\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--markdown", help="also write the figures as a results file here")
    args = ap.parse_args()
    started = time.time()
    from runinfo import code_state
    args.code = code_state()  # now: the tree may move on before the results are written
    figures = run(args.jobs, args.seconds, args.seed)
    print(json.dumps(figures))
    if args.markdown:
        write_markdown(Path(args.markdown), figures, args, started)
    return 0 if not figures["violations"] else 1


if __name__ == "__main__":
    sys.exit(main())
