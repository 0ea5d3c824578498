"""The floor for a warm Python job (issue 18): a warm python3, no sandbox, no queue, that forks a
child per snippet; the child compiles and runs it (stdout to /dev/null) and ends with os._exit.
The parent preloads the modules sandpool's python template preloads (the zygote's own preload,
run from worker/runners/zygote.cc), turns the collector off and freezes its heap first
(gc.freeze), which is the best a fork server does here (shared/reference/floor-pieces.md,
variant 2b). K children are kept in flight until N are done.

Prints one JSON line per in-flight count, in sandpool_bench's shape (system python3-warm-fork):
jobs/s, latency percentiles (fork to reaped) and the CPU per job of the parent and its children
(rusage), the figure sandpool's CPU per job is held against.

  /usr/bin/python3 bench/peers/warm_fork.py --n 600 --inflight 8,64 [--code 'print(1)'] [--variant V]
"""

import argparse
import gc
import json
import os
import resource
import sys
import time

ZYGOTE_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "worker", "runners", "zygote.cc")


def preload():
    """Imports what sandpool's python template preloads, so that the child's work is the same: the
    zygote's own `_sandpool_preload` (worker/runners/zygote.cc, kPythonZygote), run from its source
    rather than a list of the same modules kept here a second time."""
    with open(ZYGOTE_SOURCE, encoding="utf-8") as f:
        script = f.read().split('kPythonZygote = R"py(', 1)[1].split(')py";', 1)[0]
    defs, found, _ = script.rpartition("\n_sandpool_preload()\n")
    if not found:
        sys.exit(f"warm_fork.py: no _sandpool_preload() call in {ZYGOTE_SOURCE}'s python zygote")
    zygote = {"__name__": "sandpool_zygote"}
    exec(compile(defs, "zygote.cc:kPythonZygote", "exec"), zygote)
    zygote["_sandpool_preload"]()


def cpu_us():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime) * 1e6


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return 0.0
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def snippet(code):
    """The child's path: compile and run the snippet, flush its output."""
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    sys.stdout.flush()


def run(code, n, k, settle, variant):
    devnull = os.open("/dev/null", os.O_WRONLY)
    running = {}
    samples = []
    started = finished = errors = 0
    c0, t0 = cpu_us(), time.monotonic()
    while finished < n:
        while started < n and len(running) < k:
            ts = time.monotonic()
            pid = os.fork()
            if pid == 0:
                try:
                    os.dup2(devnull, 1)
                    snippet(code)
                    os._exit(0)
                except BaseException:
                    os._exit(1)
            running[pid] = ts
            started += 1
        pid, st = os.wait()
        ts = running.pop(pid, None)
        if ts is None:
            continue
        samples.append((time.monotonic() - ts) * 1000)
        if st != 0:
            errors += 1
        finished += 1
    wall, cpu = time.monotonic() - t0, cpu_us() - c0
    os.close(devnull)
    return {"system": "python3-warm-fork", "variant": variant, "settle": settle, "mode": "throughput",
            "command": code, "measured": True, "inflight": k, "n": finished, "errors": errors, "lost": 0,
            "p50_ms": pct(samples, 50), "p90_ms": pct(samples, 90), "p99_ms": pct(samples, 99),
            "max_ms": pct(samples, 100), "wall_s": wall, "per_s": finished / wall,
            "cpu_ms_per_job_peer": cpu / 1000 / finished}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--inflight", default="8,64")
    ap.add_argument("--code", default="print(1)")
    ap.add_argument("--settle", type=int, default=0,
                    help="run the child's path (compile and run the snippet, stdout to /dev/null) this many "
                         "times in the parent first, as sandpool's python mother does with a job's path "
                         "(worker/runners/zygote.cc): the code the children run no longer writes into itself. "
                         "0 (the default) is the floor as issue 18 states it")
    ap.add_argument("--variant", default=None,
                    help="the variant the lines carry (default: none, or settled with --settle; run.sh's "
                         "alternated rounds: paired-N)")
    a = ap.parse_args()
    preload()
    # The compiler's one-time set-up done here, in the parent, as in any fork server that has
    # compiled anything (sandpool's mother compiles the zygote and her rehearsals): CPython 3.11
    # makes its AST types on the first compile() of a process (PyAST_Check, init_types), ~170 pages
    # written. A parent that had only imported (marshal, no compiler) left that to every child: it
    # cost the child 244 faults in compile() instead of 81, and the floor 3.8 ms of CPU a job
    # instead of 2.0 (bench/analysis.md, 2026-11-29 midday). preload() compiles the zygote's
    # script; this says so, whatever preload() becomes.
    compile("pass", "<warm_fork>", "exec")
    gc.disable()
    if a.settle:
        devnull, saved = os.open("/dev/null", os.O_WRONLY), os.dup(1)
        sys.stdout.flush()
        os.dup2(devnull, 1)
        for _ in range(a.settle):
            snippet(a.code)
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    gc.collect()
    gc.freeze()
    variant = a.variant or ("settled" if a.settle else "none")
    for k in (int(x) for x in a.inflight.split(",")):
        run(a.code, a.warmup, k, a.settle, variant)
        m = run(a.code, a.n, k, a.settle, variant)
        print(json.dumps(m), flush=True)
        print(f"python3-warm-fork throughput [{a.code}] x{k}  n={m['n']}  p50 {m['p50_ms']:.3f} ms  "
              f"{m['per_s']:.1f} /s  cpu {m['cpu_ms_per_job_peer']:.3f} ms/job", file=sys.stderr)


if __name__ == "__main__":
    main()
