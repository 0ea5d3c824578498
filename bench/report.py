#!/usr/bin/python3
"""Turns bench/out/results.jsonl (one JSON line per measurement) into bench/RESULTS.md.

Called by bench/run.sh; standard library only.
"""
import argparse
import json
import os
import re
from collections import Counter


def load(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def find(rows, system, variant=None, mode=None, command_prefix=None, inflight=None):
    for r in rows:
        if r.get("system") != system:
            continue
        if variant is not None and r.get("variant") != variant:
            continue
        if mode is not None and r.get("mode") != mode:
            continue
        if command_prefix is not None and not r.get("command", "").startswith(command_prefix):
            continue
        if inflight is not None and r.get("inflight", 1) != inflight:
            continue
        return r
    return None


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return None if n == 0 else (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)


def cpu_sp(r):
    """sandpool's host CPU per job of a throughput row: the daemon's tree (sandboxes included) + Redis."""
    tree, redis = val(r, "cpu_ms_per_job_daemon_tree"), val(r, "cpu_ms_per_job_redis")
    return None if tree is None else tree + (redis or 0)


def paired_rounds(rows):
    """run.sh's alternated rounds (variant paired-N): per round, (sandpool, floor, ratio) jobs/s for
    python x8 and x64 against the warm fork and `echo` x8 against posix_spawn, and CPU per job pairs."""
    names = sorted({r.get("variant") for r in rows if str(r.get("variant", "")).startswith("paired-")},
                   key=lambda v: int(v.split("-", 1)[1]) if v.split("-", 1)[1].isdigit() else 0)
    def per_s(r):
        return val(r, "per_s") if r and r.get("measured", True) and not r.get("errors") and not r.get("lost") else None

    def pair(mine, floor):
        a, b = per_s(mine), per_s(floor)
        return (a, b, a / b if a is not None and b else None)

    def cpu(mine, floor):
        return (cpu_sp(mine), val(floor, "cpu_ms_per_job_peer"))

    out = []
    for v in names:
        py = {f: find(rows, "sandpool", v, "throughput", "code python: print", f) for f in (8, 64)}
        wf = {f: find(rows, "python3-warm-fork", v, "throughput", inflight=f) for f in (8, 64)}
        echo = find(rows, "sandpool", v, "throughput", "shell: echo", 8)
        spawn = find(rows, "posix_spawn", v, "throughput", "/bin/echo")
        out.append({"round": v.split("-", 1)[1], "py8": pair(py[8], wf[8]), "py64": pair(py[64], wf[64]),
                    "echo8": pair(echo, spawn), "cpu_py8": cpu(py[8], wf[8]), "cpu_echo8": cpu(echo, spawn)})
    return out


def fmt(x, digits=2):
    if x is None:
        return "–"
    if isinstance(x, float) and abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}f}"


def val(r, key):
    if r is None or not r.get("measured", False):
        return None
    return r.get(key)


def pct(x):
    return "–" if x is None else f"{x * 100:.0f}%"


def read_text(path):
    if path and os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().rstrip()
    return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", action="append", default=[])
    ap.add_argument("--daemon-log")
    ap.add_argument("--out-dir")
    ap.add_argument("--analysis", help="hand-written analysis (markdown) to include")
    ap.add_argument("--network-summary", help="bench/network.sh's summary (JSON) of this run")
    a = ap.parse_args()
    meta = dict(m.split("=", 1) for m in a.meta)
    rows = load(a.results)
    quick = meta.get("quick") == "1"

    def sp(kind_prefix, variant="isolated", mode="latency", inflight=None):
        return find(rows, "sandpool", variant, mode, kind_prefix, inflight)

    echo_b, echo_p = sp("shell: echo"), sp("shell: echo", "isolated-paced")
    true_b = sp("argv: /bin/true")
    py_b, py_p = sp("code python: print"), sp("code python: print", "isolated-paced")
    imp_b, imp_p = sp("code python: import"), sp("code python: import", "isolated-paced")
    bd = {k: find(rows, "sandpool", v, "breakdown", c) for k, (v, c) in {
        "echo": ("isolated", "shell: echo"), "echo_p": ("isolated-paced", "shell: echo"),
        "true": ("isolated", "argv: /bin/true"), "py": ("isolated", "code python: print"),
        "py_p": ("isolated-paced", "code python: print"), "imp": ("isolated", "code python: import"),
        "imp_p": ("isolated-paced", "code python: import")}.items()}
    tp = {(k, f): sp(c, mode="throughput", inflight=f) for k, c in (("echo", "shell: echo"), ("py", "code python: print"))
          for f in (1, 2, 4, 8, 16, 64)}
    ECHO = "executeCommand('echo', ['hi'])"
    PYC = "executeCommand('/usr/bin/python3'"
    ms_none = find(rows, "mastra-localsandbox", "none", "latency", ECHO)
    ms_bwrap = find(rows, "mastra-localsandbox", "bwrap", "latency", ECHO)
    ms_none_tp = find(rows, "mastra-localsandbox", "none", "throughput")
    ms_bwrap_tp = find(rows, "mastra-localsandbox", "bwrap", "throughput")
    ms_py_none = find(rows, "mastra-localsandbox", "none", "latency", PYC)
    ms_py_bwrap = find(rows, "mastra-localsandbox", "bwrap", "latency", PYC)
    bull = find(rows, "bullmq", mode="latency")
    bull_tp = find(rows, "bullmq", mode="throughput")
    bw = find(rows, "bwrap", mode="per_run")
    bw_tp = find(rows, "bwrap", mode="throughput")
    ps = find(rows, "posix_spawn", "none", mode="per_run")
    py_cold = find(rows, "python3", mode="per_run", command_prefix="/usr/bin/python3 -c print(1)")
    py_cold_tp = find(rows, "python3", mode="throughput", command_prefix="/usr/bin/python3 -c print(1)")
    py_cold_imp = find(rows, "python3", mode="per_run", command_prefix="/usr/bin/python3 -c import")
    mem = {r.get("variant"): r for r in rows if r.get("mode") == "memory"}

    L = []
    w = L.append
    w("# sandpool benchmark results")
    w("")
    w("Generated by `bench/run.sh` (do not edit by hand; re-run it). Raw JSON lines of this run: "
      "`bench/out/results.jsonl`; logs and profiles in `bench/out/` (not committed).")
    w("")
    w(f"- **Date (UTC):** {meta.get('date')}  (run took {meta.get('elapsed_s')} s)")
    w(f"- **Machine:** {meta.get('nproc')} CPUs, `{meta.get('cpu')}`, kernel {meta.get('kernel')}")
    w(f"- **Command:** `{meta.get('command')}` (as root, from the repository root)")
    dirty = meta.get("dirty", "").strip()
    w(f"- **Code:** commit {meta.get('commit')}" + (
        f", **dirty tree**: uncommitted or untracked: {dirty} (sandpoold and the bench were built from the "
        "working tree as it stood)" if dirty else ", clean tree"))
    w(f"- **Versions:** redis-server {meta.get('redis')}, node {meta.get('node')}, {meta.get('bwrap')}")
    w(f"- **Daemon:** `sandpoold --redis unix://<tmp>/redis.sock {meta.get('daemon_flags')} --consumer bench-<pid>`; "
      "private redis-server on a unix socket (`--port 0 --save '' --appendonly no`). Pools "
      f"(template ready total) when memory was measured: `{meta.get('pools_at_mem')}`; after the throughput "
      f"runs: `{meta.get('pools_after_tp')}`.")
    w(f"- **Sizes:** {meta.get('sizes')}" + (" (**BENCH_QUICK smoke run**: small samples, not for quoting)" if quick else ""))
    w(f"- **Load:** load average {meta.get('load_start')} at start, {meta.get('load_end')} at the end; "
      f"at start: {meta.get('others_start')}. This machine is shared (other sessions build and run tests "
      "and their own daemons): absolute times are noisy. Everything below was measured in one run, side by "
      "side, so compare ratios.")
    w("")

    # ---------------------------------------------------------------- targets
    def verdict(ok):
        if ok is None:
            return "not measured"
        return "**yes**" if ok else "**NO**"

    def r_(x, y):
        return x / y if x is not None and y else None

    w("## Targets")
    w("")
    w("Latency is measured two ways, both one job at a time: **back to back** (the next job is sent "
      "the moment the previous result arrives, so the daemon's pool refill competes with it) and "
      f"**paced** ({meta.get('pace_ms')} ms idle between jobs, so each job finds a full pool: what an agent "
      "that thinks between commands sees). Verdicts are given for both.")
    w("")
    w("| target | measured | met? |")
    w("|---|---|---|")
    for label, r in (("back to back", echo_b), ("paced", echo_p)):
        e50 = val(r, "p50_ms")
        w(f"| warm `echo` end-to-end p50 < 2 ms ({label}) | {fmt(e50, 3)} ms | {verdict(None if e50 is None else e50 < 2.0)} |")
    b50, n50 = val(ms_bwrap, "p50_ms"), val(ms_none, "p50_ms")
    for label, r in (("back to back", echo_b), ("paced", echo_p)):
        e50 = val(r, "p50_ms")
        x = r_(e50, b50)
        w(f"| `echo` p50 <= 0.3 x LocalSandbox+bwrap p50 ({label}) | {fmt(e50, 3)} / {fmt(b50, 3)} ms = {fmt(x, 2)}x | "
          f"{verdict(None if x is None else x <= 0.3)} |")
    for label, r in (("back to back", echo_b), ("paced", echo_p)):
        e50 = val(r, "p50_ms")
        x = r_(e50, n50)
        w(f"| `echo` p50 below LocalSandbox, no isolation ({label}) | {fmt(e50, 3)} vs {fmt(n50, 3)} ms = {fmt(x, 2)}x | "
          f"{verdict(None if x is None else x < 1.0)} |")
    c50 = val(py_cold, "p50_ms")
    for label, r in (("back to back", py_b), ("paced", py_p)):
        p50 = val(r, "p50_ms")
        x = r_(p50, c50)
        w(f"| Python `print(1)` p50 <= 0.15 x cold `/usr/bin/python3 -c 'print(1)'` ({label}) | "
          f"{fmt(p50, 3)} / {fmt(c50, 3)} ms = {fmt(x, 2)}x | {verdict(None if x is None else x <= 0.15)} |")
    for kind, label in (("echo", "shell `echo hi`"), ("py", "python `print(1)` (not a stated target; for reference)")):
        got = [(val(tp[(kind, f)], "per_s"), f, (tp[(kind, f)] or {}).get("errors", 0) + (tp[(kind, f)] or {}).get("lost", 0))
               for f in (8, 64)]
        got = [g for g in got if g[0] is not None]
        if got:
            best = max(got, key=lambda t: t[0])
            each = ", ".join(f"x{f}: {v:.0f}" for v, f, _ in got)
            bad = "" if all(g[2] == 0 for g in got) else "; some jobs failed or were lost, see below"
            w(f"| >= 800 isolated one-shot jobs/s, {label} | {each} jobs/s{bad} | {verdict(best[0] >= 800)} |")
        else:
            w(f"| >= 800 isolated one-shot jobs/s, {label} | – | not measured |")
    w("")

    # ---------------------------------------------------------------- issue 18: the floors
    w("## Jobs per core against the machine's floor (issue 18)")
    w("")
    w("Every floor below was measured in this run, on this machine: a warm python3 that forks a child "
      "per snippet (`bench/peers/warm_fork.py`: modules preloaded, collector off, heap frozen; no sandbox, "
      "no queue), cold `/usr/bin/python3 -c` and `node -e`, bare `posix_spawn('/bin/echo')` + wait, and "
      "Mastra's LocalSandbox with bwrap. CPU per job: sandpool's is every sandbox's (the daemon's instance "
      "cgroup, cpuacct) plus the daemon, spawner and keepers themselves (/proc) plus redis-server; a floor's is its own processes' "
      "(rusage of the children it reaped). 1 core: the daemon's tree, Redis and the bench client pinned "
      "with `taskset -c 0` for the run.")
    w("")
    wf = {f: find(rows, "python3-warm-fork", "none", "throughput", inflight=f) for f in (8, 64)}
    wf_settled = find(rows, "python3-warm-fork", "settled", "throughput", inflight=8)
    spawn_echo = find(rows, "posix_spawn", "none", mode="throughput", command_prefix="/bin/echo")
    spawn_echo_1core = find(rows, "posix_spawn", "1core", mode="throughput", command_prefix="/bin/echo")
    node_cold = find(rows, "node", mode="throughput")
    node_cold_run = find(rows, "node", mode="per_run")
    node_tp = sp("code node", mode="throughput", inflight=8)
    one = {k: find(rows, "sandpool", "isolated-1core", "throughput", c, 8)
           for k, c in (("echo", "shell: echo"), ("py", "code python: print"))}

    rows18 = []

    def row(label, mine, floor, target, higher=True, unit="jobs/s"):
        x = r_(mine, floor)
        ok = None if x is None else (x >= target if higher else x <= target)
        rows18.append(f"| {label} | {fmt(mine)} | {fmt(floor)} {unit} | {fmt(x)}x | {'>=' if higher else '<='} {target}x | {verdict(ok)} |")

    for f in (8, 64):
        row(f"Python `print(1)` jobs/s x{f} vs warm fork x{f}", val(tp.get(("py", f)), "per_s"), val(wf[f], "per_s"), 0.7)
    row("Python `print(1)` jobs/s x8 vs cold `python3 -c` x8", val(tp.get(("py", 8)), "per_s"), val(py_cold_tp, "per_s"), 1.7)
    row("`echo` jobs/s x8 vs `posix_spawn('/bin/echo')` + wait x8", val(tp.get(("echo", 8)), "per_s"), val(spawn_echo, "per_s"), 0.6)
    row("`echo` jobs/s x8 vs Mastra LocalSandbox + bwrap x8", val(tp.get(("echo", 8)), "per_s"), val(ms_bwrap_tp, "per_s"), 5)
    row("`node -e 'console.log(1)'` jobs/s x8 vs cold `node -e` x8", val(node_tp, "per_s"), val(node_cold, "per_s"), 4)
    pairs = paired_rounds(rows)
    for key, label, target in (("py8", "Python `print(1)` jobs/s x8 vs warm fork x8", 0.7),
                               ("py64", "Python `print(1)` jobs/s x64 vs warm fork x64", 0.7),
                               ("echo8", "`echo` jobs/s x8 vs `posix_spawn('/bin/echo')` + wait x8", 0.6)):
        got = [p[key] for p in pairs if p[key][2] is not None]
        if not got:
            continue
        x = median([g[2] for g in got])
        rows18.append(f"| {label}, **alternated** in {len(got)} rounds (median of the rounds' ratios; range "
                      f"{fmt(min(g[2] for g in got))}-{fmt(max(g[2] for g in got))}) | {fmt(median([g[0] for g in got]))} | "
                      f"{fmt(median([g[1] for g in got]))} jobs/s | {fmt(x)}x | >= {target}x | {verdict(x >= target)} |")
    for k, label in (("echo", "`echo`"), ("py", "Python")):
        row(f"{label} jobs/s x8 on 2 cores vs pinned to 1 core", val(tp.get((k, 8)), "per_s"), val(one[k], "per_s"), 1.8)
    own = r_(val(spawn_echo, "per_s"), val(spawn_echo_1core, "per_s"))
    rows18.append(f"| the machine's own: `posix_spawn('/bin/echo')` x8 on 2 cores vs pinned to 1 core (no sandpool; "
                  f"what the two rows above can reach here) | {fmt(val(spawn_echo, 'per_s'))} | "
                  f"{fmt(val(spawn_echo_1core, 'per_s'))} jobs/s | {fmt(own)}x | (reported) | – |")
    for label, r, peer in (("back to back", echo_b, ms_bwrap), ("paced", echo_p, ms_bwrap)):
        row(f"`echo` p50 ({label}) vs LocalSandbox + bwrap p50", val(r, "p50_ms"), val(peer, "p50_ms"), 0.30, False, "ms")
    for label, r in (("back to back", py_b), ("paced", py_p)):
        row(f"Python `print(1)` p50 ({label}) vs cold `python3 -c` p50", val(r, "p50_ms"), val(py_cold, "p50_ms"), 0.25, False, "ms")
    w("| figure | sandpool | floor | ratio | target | met? |")
    w("|---|---|---|---|---|---|")
    for line in rows18:
        w(line)
    rt = val(tp.get(("echo", 64)), "redis_daemon_round_trips_per_job")
    w(f"| Redis round trips per job, `echo` x64 (daemon side, INFO commandstats) | {fmt(rt)} | | | <= 3 | "
      f"{verdict(None if rt is None else rt <= 3)} |")
    ws = r_(val(tp.get(("py", 8)), "per_s"), val(wf_settled, "per_s"))
    w(f"| Python `print(1)` jobs/s x8 vs a *settled* warm fork x8 (its parent ran the snippet's path "
      f"{val(wf_settled, 'settle') or '?'} times before forking, as sandpool's mother runs a job's; not the issue's floor, reported beside it) | "
      f"{fmt(val(tp.get(('py', 8)), 'per_s'))} | {fmt(val(wf_settled, 'per_s'))} jobs/s | {fmt(ws)}x | (reported) | – |")
    pym = mem.get("python")
    pss = val(pym, "sandbox_pss_mib") if pym else None
    w(f"| warm Python sandbox memory (PSS, MiB) | {fmt(pss)} | | | <= 6 | {verdict(None if pss is None else pss <= 6)} |")
    w("")
    w("CPU per job (ms), the same runs, 8 in flight:")
    w("")
    w("| kind | sandpool: daemon tree + Redis | of which Redis | floor | floor's CPU per job | ratio |")
    w("|---|---|---|---|---|---|")
    for label, r, floor_label, fr in (
            ("`echo hi`", tp.get(("echo", 8)), "posix_spawn /bin/echo", spawn_echo),
            ("python `print(1)`", tp.get(("py", 8)), "warm fork", wf[8]),
            ("python `print(1)`", tp.get(("py", 8)), "settled warm fork", wf_settled),
            ("python `print(1)`", tp.get(("py", 8)), "cold python3 -c", py_cold_tp),
            ("node `console.log(1)`", node_tp, "cold node -e", node_cold)):
        mine, floor = cpu_sp(r), val(fr, "cpu_ms_per_job_peer")
        w(f"| {label} | {fmt(mine)} | {fmt(val(r, 'cpu_ms_per_job_redis'), 3)} | {floor_label} | {fmt(floor)} | {fmt(r_(mine, floor))}x |")
    w("")
    if pairs:
        w("The throughput ratios above, measured again with sandpool and its floor **alternated** (`paired-N` in "
          "results.jsonl): in each round sandpool's run and the floor's follow each other, in turn first, so that "
          "a drift of the shared machine between phases reaches both. Jobs/s, and CPU per job in ms (sandpool: "
          "daemon tree + Redis; floor: its own processes):")
        w("")
        w("| round | python x8 | warm fork x8 | ratio | python x64 | warm fork x64 | ratio | `echo` x8 | posix_spawn x8 | ratio | CPU python x8 / warm fork | CPU `echo` x8 / posix_spawn |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for p in pairs:
            cells = []
            for key in ("py8", "py64", "echo8"):
                mine, floor, x = p[key]
                cells += [fmt(mine), fmt(floor), f"{fmt(x)}x"]
            cpus = [f"{fmt(c[0])} / {fmt(c[1])} ({fmt(r_(c[0], c[1]))}x)" for c in (p["cpu_py8"], p["cpu_echo8"])]
            w(f"| {p['round']} | " + " | ".join(cells + cpus) + " |")
        w("")
    w("Redis per job (INFO commandstats over each throughput run; round trips = the daemon's script calls, "
      "XREADGROUPs and PUBLISHes outside a script; a read carried inside a FINISH call, which the daemon counts "
      "in `sandpool_redis_reads_carried_total`, is no round trip of its own):")
    w("")
    w("| run | round trips | script calls | XREADGROUP (own call) | reads carried in FINISH | PUBLISH (all) | Redis CPU ms | command time µs | top command shares |")
    w("|---|---|---|---|---|---|---|---|---|")
    for (k, f), r in sorted(tp.items()):
        if val(r, "per_s") is None:
            continue
        shares = ", ".join(f"{key[len('redis_usec_share_'):]} {v * 100:.0f}%" for key, v in r.items()
                           if key.startswith("redis_usec_share_"))
        w(f"| {k} x{f} | {fmt(val(r, 'redis_daemon_round_trips_per_job'))} | {fmt(val(r, 'redis_script_calls_per_job'))} | "
          f"{fmt(val(r, 'redis_xreadgroup_per_job'))} | {fmt(val(r, 'redis_reads_carried_per_job'))} | "
          f"{fmt(val(r, 'redis_publish_per_job'))} | "
          f"{fmt(val(r, 'cpu_ms_per_job_redis'), 3)} | {fmt(val(r, 'redis_command_usec_per_job'), 1)} | {shares} |")
    w("")
    w("Throughput curve (jobs/s; latency per job under that load, p50 / p99 ms):")
    w("")
    w("| in flight | `echo` jobs/s | `echo` p50 / p99 | python jobs/s | python p50 / p99 |")
    w("|---|---|---|---|---|")
    for f in (1, 2, 4, 8, 16, 64):
        e, p = tp.get(("echo", f)), tp.get(("py", f))
        w(f"| {f} | {fmt(val(e, 'per_s'))} | {fmt(val(e, 'p50_ms'))} / {fmt(val(e, 'p99_ms'))} | "
          f"{fmt(val(p, 'per_s'))} | {fmt(val(p, 'p50_ms'))} / {fmt(val(p, 'p99_ms'))} |")
    w("")

    # ---------------------------------------------------------------- network templates
    w("## Network template (bench/network.sh, same run)")
    w("")
    net = None
    if a.network_summary and os.path.exists(a.network_summary):
        try:
            with open(a.network_summary, encoding="utf-8") as f:
                net = json.loads(f.read())
        except (OSError, json.JSONDecodeError):
            net = None
    if net and net.get("measured"):
        tgt = net.get("target", 1.10)
        w(f"A second daemon, in a private network namespace, serves two templates that differ only in `egress` "
          f"(`web` gets a veth link and the nftables policy, `plain` none); `echo hi` jobs go to each, interleaved over "
          f"{net.get('rounds')} rounds. web / plain is the median of the per-round ratios (range in brackets). "
          "Details, every round and the setup: `bench/RESULTS-network.md`."
          + (" (BENCH_QUICK smoke run: small samples.)" if net.get("quick") else ""))
        w("")
        w(f"| measure | plain | web | web / plain | within {tgt:.2f}? |")
        w("|---|---|---|---|---|")
        for key, label in (("b2b", "`echo` p50 back to back (ms)"), ("paced", f"`echo` p50 paced (ms)")):
            d = net.get(key) or {}
            rng = f" ({fmt(d.get('ratio_min'), 3)}–{fmt(d.get('ratio_max'), 3)})" if d.get("ratio_min") is not None else ""
            w(f"| {label} | {fmt(d.get('plain_p50_ms'), 3)} | {fmt(d.get('web_p50_ms'), 3)} | {fmt(d.get('ratio'), 3)}{rng} | "
              f"{verdict(d.get('met'))} |")
        t = net.get("tp") or {}
        w(f"| `echo` throughput, 8 in flight (jobs/s) | {fmt(t.get('plain_per_s'), 0)} | {fmt(t.get('web_per_s'), 0)} | "
          f"{fmt(t.get('ratio'), 3)} | (for reference) |")
        w("")
        if net.get("errors") or net.get("lost"):
            w(f"Jobs with an unexpected result: {net.get('errors')}, never finished: {net.get('lost')}.")
            w("")
        w(f"For orientation only (another daemon, other pool sizes, minutes apart): this run's `default` template "
          f"above, without network, `echo` p50 {fmt(val(echo_b, 'p50_ms'), 3)} ms back to back, "
          f"{fmt(val(echo_p, 'p50_ms'), 3)} ms paced.")
    else:
        why = []  # network.sh's own reason (it writes one when it stops early), then run.sh's
        if net and net.get("note"):
            why.append(net["note"].removeprefix("not measured: "))
        if meta.get("network_note"):
            why.append(meta["network_note"])
        w("not measured: " + ("; ".join(why) or "bench/network.sh wrote no summary"))
    w("")

    # ---------------------------------------------------------------- headline side by side
    w("## Side by side (p50 / p99, ms; one run)")
    w("")
    w("| what | sandpool back to back | sandpool paced | peer | peer p50 / p99 |")
    w("|---|---|---|---|---|")

    def pp(r):
        p50, p99 = val(r, "p50_ms"), val(r, "p99_ms")
        return "–" if p50 is None else f"{p50:.2f} / {p99:.2f}"

    w(f"| shell `echo hi` | {pp(echo_b)} | {pp(echo_p)} | Mastra LocalSandbox `executeCommand('echo', ['hi'])`, no isolation | {pp(ms_none)} |")
    w(f"| | | | Mastra LocalSandbox, `isolation: 'bwrap'` | {pp(ms_bwrap)} |")
    w(f"| | | | BullMQ + `execFile('/bin/echo', ['hi'])` (no isolation) | {pp(bull)} |")
    w(f"| | | | `bwrap --unshare-all ... /bin/true`, per run | {pp(bw)} |")
    w(f"| argv `/bin/true` | {pp(true_b)} | | `posix_spawn('/bin/true')` + `waitpid`, no isolation | {pp(ps)} |")
    w(f"| code python `print(1)` | {pp(py_b)} | {pp(py_p)} | cold `/usr/bin/python3 -c 'print(1)'` | {pp(py_cold)} |")
    w(f"| | | | Mastra LocalSandbox `executeCommand('/usr/bin/python3', ['-c', 'print(1)'])`, none | {pp(ms_py_none)} |")
    w(f"| | | | the same, `isolation: 'bwrap'` | {pp(ms_py_bwrap)} |")
    w(f"| code python `import json, re, math; print(...)` | {pp(imp_b)} | {pp(imp_p)} | cold `/usr/bin/python3 -c` of the same code | {pp(py_cold_imp)} |")
    w("")
    w("Throughput (jobs/s; 8 or 64 kept in flight; fresh isolated sandbox per job for sandpool):")
    w("")
    w("| what | x8 | x64 | peer x8 |")
    w("|---|---|---|---|")

    def ps_(r):
        v = val(r, "per_s")
        if v is None:
            return "–" if r is None else "not measured"
        e = (r.get("errors", 0) or 0) + (r.get("lost", 0) or 0)
        return f"{v:.0f}" + (f" ({r.get('errors', 0)} errors, {r.get('lost', 0)} lost)" if e else "")

    w(f"| sandpool shell `echo hi` | {ps_(tp[('echo', 8)])} | {ps_(tp[('echo', 64)])} | LocalSandbox none {ps_(ms_none_tp)}, bwrap {ps_(ms_bwrap_tp)}; BullMQ {ps_(bull_tp)}; bwrap {ps_(bw_tp)} |")
    w(f"| sandpool python `print(1)` | {ps_(tp[('py', 8)])} | {ps_(tp[('py', 64)])} | cold python3 -c 'print(1)' {ps_(py_cold_tp)} |")
    w("")

    # ---------------------------------------------------------------- memory
    w("## Memory per warm sandbox (measured from the host, daemon idle, pools full)")
    w("")
    if meta.get("mem_note"):
        w(f"Not measured: {meta['mem_note']}.")
    if mem:
        w("`bench/memory.py`: every process whose host uid is in the daemon's range (`--uid-base` .. +2 per "
          "slot; even uid = the sandbox's init, odd uid = its warm zygote), grouped by slot, classified by the "
          "zygote's command line; `/proc/<pid>/smaps_rollup`. MiB, mean per sandbox. PSS shares pages "
          "with every other process mapping them (other daemons' zygotes on this machine too), RSS counts "
          "them in full. The keeper is the daemon's host-side process per slot (root), outside the sandbox.")
        w("")
        w("| template (zygote) | sandboxes | init PSS / RSS | zygote PSS / RSS | **sandbox (init + zygote) PSS** / RSS | + keeper PSS / RSS | all sandboxes of the template, PSS |")
        w("|---|---|---|---|---|---|---|")
        names = {"default": "default (warm `/bin/sh`)", "python": "python (warm `python3`, modules preloaded)",
                 "node": "node (warm `node`)", "preparing": "slots still preparing"}
        for t in ("default", "python", "node", "bash", "other", "preparing"):
            r = mem.get(t)
            if not r:
                continue
            w(f"| {names.get(t, t)} | {r['sandboxes']} | {r['init_pss_mib']:.2f} / {r['init_rss_mib']:.2f} | "
              f"{r['zygote_pss_mib']:.2f} / {r['zygote_rss_mib']:.2f} | **{r['sandbox_pss_mib']:.2f}** / {r['sandbox_rss_mib']:.2f} | "
              f"{fmt(r.get('keeper_pss_mib'), 2)} / {fmt(r.get('keeper_rss_mib'), 2)} | {r['total_pss_mib']:.1f} |")
        d = mem.get("daemon")
        if d:
            w("")
            w(f"Daemon itself: sandpoold PSS {d['daemon_pss_mib']:.2f} MiB (RSS {d['daemon_rss_mib']:.2f}), spawner "
              f"{d['spawner_pss_mib']:.2f} ({d['spawner_rss_mib']:.2f}), {d['keepers']} keepers {d['keepers_pss_mib']:.2f} "
              f"({d['keepers_rss_mib']:.2f}) in total.")
    w("")

    # ---------------------------------------------------------------- all figures
    w("## Every measurement")
    w("")
    w("Latency = submit to result (sandpool: XADD to the `exited` event; Mastra: the "
      "`executeCommand` promise; BullMQ: `queue.add` to `job.waitUntilFinished`; process peers: "
      "`posix_spawn` to `waitpid`). Milliseconds. Throughput rows keep `inflight` jobs running until "
      "`n` are done; their latency is per job under that load.")
    w("")
    w("| system | isolation | mode | command | in flight | n | errors / lost | p50 | p90 | p99 | max | per s |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("mode") in ("breakdown", "memory"):
            continue
        cmd = r.get("command", "").replace("|", "\\|")
        if not r.get("measured", False):
            w(f"| {r.get('system')} | {r.get('variant')} | {r.get('mode')} | `{cmd}` | | | | "
              f"{r.get('note', '')} | | | | |")
            continue
        el = f"{r.get('errors', 0)} / {r.get('lost', 0)}"
        w(f"| {r.get('system')} | {r.get('variant')} | {r.get('mode')} | `{cmd}` | {r.get('inflight', 1)} | "
          f"{r.get('n')} | {el} | {fmt(r.get('p50_ms'), 3)} | {fmt(r.get('p90_ms'), 3)} | "
          f"{fmt(r.get('p99_ms'), 3)} | {fmt(r.get('max_ms'), 3)} | {fmt(r.get('per_s'), 0) if r.get('per_s') else ''} |")
    notes = [(r, r["note"]) for r in rows if r.get("measured") and r.get("note") and r.get("mode") not in ("breakdown", "memory")]
    if notes:
        w("")
        w("Notes on the rows above:")
        w("")
        for r, n in notes:
            w(f"- {r.get('system')}/{r.get('variant')} {r.get('mode')} `{r.get('command')}` x{r.get('inflight', 1)}: {n}")
    w("")
    w("Peers, exactly as run:")
    w("")
    w("- `bwrap`: `/usr/bin/bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true` "
      "(as root, so `--unshare-all` includes a user namespace), stdin/stdout to /dev/null, timed by "
      "`sandpool_bench` from `posix_spawn` to `waitpid`.")
    w("- Every peer process (and `warm_fork.py`, and LocalSandbox's) runs with the environment a sandbox job "
      "gets by default (`sandpool_bench --job-env`: PATH, HOME, LANG), not the bench shell's: a host variable "
      "such as `NODE_EXTRA_CA_CERTS` makes each cold `node` parse a CA bundle that no sandbox sees.")
    w("- `posix_spawn`: `/bin/true`, no isolation, same timing.")
    w("- `python3`: `/usr/bin/python3 -c 'print(1)'` and `-c` of the import job's code (the system python, "
      "not the pyenv shim), same timing.")
    w("- `mastra-localsandbox`: `@mastra/core` 1.71.0 `new LocalSandbox({ workingDirectory: <tmp>, "
      "isolation: 'none' | 'bwrap' })`, `_start()`, then `executeCommand('echo', ['hi'])` and "
      "`executeCommand('/usr/bin/python3', ['-c', 'print(1)'])` (`bench/peers/mastra.mjs`; Node 20 with "
      "@mastra/core's node>=22 engine warning). Its bwrap mode adds --unshare-pid/ipc/uts/net and read-only "
      "binds; no user namespace, seccomp or cgroup.")
    w("- `bullmq`: BullMQ 6.7.0 + ioredis on the same private Redis; a Worker in a child process "
      "(concurrency 8) runs `child_process.execFile('/bin/echo', ['hi'])` and returns its stdout; "
      "latency is `queue.add()` to `job.waitUntilFinished(queueEvents)` (`bench/peers/bullmq.mjs`).")
    w("- sandpool code jobs name no template: the daemon routes `runtime: python` to its `python` template "
      "(a warm `python3` that already imported json, re, math and ~60 other modules), so the import job's "
      "imports are dictionary look-ups there, while the cold peer really imports.")
    w("")

    # ---------------------------------------------------------------- ratios
    w("## Ratios (sandpool / peer; below 1 means sandpool is faster)")
    w("")
    w("| figure | sandpool | peer | ratio |")
    w("|---|---|---|---|")

    def ratio_row(label, a_r, a_key, b_r, b_key):
        x, y = val(a_r, a_key), val(b_r, b_key)
        if x is None or y is None or y == 0:
            w(f"| {label} | {fmt(x, 3)} | {fmt(y, 3)} | not measured |")
            return
        w(f"| {label} | {fmt(x, 3)} | {fmt(y, 3)} | {x / y:.2f}x |")

    ratio_row("echo p50 (back to back) / LocalSandbox+bwrap echo p50", echo_b, "p50_ms", ms_bwrap, "p50_ms")
    ratio_row("echo p50 (paced) / LocalSandbox+bwrap echo p50", echo_p, "p50_ms", ms_bwrap, "p50_ms")
    ratio_row("echo p99 (back to back) / LocalSandbox+bwrap echo p99", echo_b, "p99_ms", ms_bwrap, "p99_ms")
    ratio_row("echo p50 (back to back) / LocalSandbox (none) p50", echo_b, "p50_ms", ms_none, "p50_ms")
    ratio_row("echo p50 (paced) / LocalSandbox (none) p50", echo_p, "p50_ms", ms_none, "p50_ms")
    ratio_row("echo p50 (back to back) / BullMQ + execFile p50", echo_b, "p50_ms", bull, "p50_ms")
    ratio_row("echo p50 (back to back) / bwrap --unshare-all per run p50", echo_b, "p50_ms", bw, "p50_ms")
    ratio_row("/bin/true p50 / posix_spawn /bin/true p50", true_b, "p50_ms", ps, "p50_ms")
    ratio_row("python print(1) p50 (back to back) / cold python3 -c p50", py_b, "p50_ms", py_cold, "p50_ms")
    ratio_row("python print(1) p50 (paced) / cold python3 -c p50", py_p, "p50_ms", py_cold, "p50_ms")
    ratio_row("python print(1) p50 (paced) / LocalSandbox+bwrap python3 -c p50", py_p, "p50_ms", ms_py_bwrap, "p50_ms")
    ratio_row("python imports p50 (paced) / cold python3 -c imports p50", imp_p, "p50_ms", py_cold_imp, "p50_ms")
    ratio_row("echo jobs/s x8 / LocalSandbox+bwrap x8 (above 1 = more)", tp[("echo", 8)], "per_s", ms_bwrap_tp, "per_s")
    ratio_row("echo jobs/s x8 / LocalSandbox (none) x8", tp[("echo", 8)], "per_s", ms_none_tp, "per_s")
    ratio_row("echo jobs/s x8 / BullMQ x8", tp[("echo", 8)], "per_s", bull_tp, "per_s")
    ratio_row("python jobs/s x8 / cold python3 x8", tp[("py", 8)], "per_s", py_cold_tp, "per_s")
    w("")

    # ---------------------------------------------------------------- breakdown
    w("## Where the time of one job goes")
    w("")
    w("Per sequential job, timestamps taken by the client (one PSUBSCRIBE connection, one command "
      "connection) and figures the daemon puts in the result. p50 (p99) in ms.")
    w("")
    cols = [("echo", "`echo hi` b2b"), ("echo_p", "`echo hi` paced"), ("true", "`/bin/true` b2b"),
            ("py", "py `print(1)` b2b"), ("py_p", "py `print(1)` paced"), ("imp", "py imports b2b"),
            ("imp_p", "py imports paced")]
    cols = [(k, h) for k, h in cols if bd.get(k) is not None and bd[k].get("measured")]
    w("| segment | " + " | ".join(h for _, h in cols) + " |")
    w("|---|" + "---|" * len(cols))

    def seg(key):
        out = []
        for k, _ in cols:
            p50, p99 = val(bd[k], key + "_p50_ms"), val(bd[k], key + "_p99_ms")
            out.append("–" if p50 is None else f"{p50:.3f} ({p99:.3f})")
        return out

    for key, label in [
        ("xadd_roundtrip", "XADD round trip"),
        ("submit_to_started_event", "XADD sent -> `started` event (claim, wait for a ready sandbox, hand-over, start)"),
        ("started_to_exited_event", "`started` -> `exited` event"),
        ("daemon_exec_time", "  of which the daemon's `exec_time_us`"),
        ("started_minus_exec_to_exited", "  rest (reap, cgroup read, result write, publish)"),
        ("daemon_queue_wait", "daemon's `queue_wait_us` (1 ms resolution)"),
        ("sandbox_cpu_time", "daemon's `cpu_time_us` (the sandbox cgroup's CPU during the job)"),
    ]:
        w(f"| {label} | " + " | ".join(seg(key)) + " |")
    w("| **end to end** | " + " | ".join(fmt(val(bd[k], "p50_ms"), 3) for k, _ in cols) + " |")
    w("")

    # CPU per job
    w("### CPU per job (throughput runs)")
    w("")
    w("From /proc: the daemon's whole process tree (daemon, spawner, keepers and, through "
      "cutime/cstime, every reaped sandbox, including the pool refills), Redis, the bench client, and the "
      "whole host (busy ticks of all CPUs, 10 ms resolution; includes other tenants' load). ms of CPU per job.")
    w("")
    w("| run | jobs/s | daemon tree | redis | client | host total | jobs/s bound on 2 CPUs from the daemon tree alone |")
    w("|---|---|---|---|---|---|---|")
    for r in (tp[("echo", 8)], tp[("echo", 64)], tp[("py", 8)], tp[("py", 64)], bw_tp,
              find(rows, "posix_spawn", mode="throughput"), py_cold_tp):
        if r is None or not r.get("measured"):
            continue
        dt = r.get("cpu_ms_per_job_daemon_tree")
        if dt is not None and dt <= 0:
            dt = None  # the tree lost a process whose CPU no parent collected: not measurable
        bound = f"{2000.0 / dt:.0f}" if dt else "–"
        w(f"| {r['system']} `{r['command'][:40]}` x{r.get('inflight')} | {fmt(r.get('per_s'), 0)} | "
          f"{fmt(dt, 2)} | {fmt(r.get('cpu_ms_per_job_redis'), 2)} | "
          f"{fmt(r.get('cpu_ms_per_job_client'), 2)} | {fmt(r.get('cpu_ms_per_job_host_total'), 2)} | {bound} |")
    w("")
    w("With 2 CPUs, jobs/s can be at most 2000 / (host CPU ms per job): 800 jobs/s needs a fresh sandbox "
      "per job, its job, the result and Redis to fit in 2.5 ms of CPU in total.")
    w("")

    # ---------------------------------------------------------------- perf
    w("## CPU profiles")
    w("")
    if meta.get("perf_note"):
        w(f"Note: {meta['perf_note']}")
        w("")
    for name, what in (("echo", "`echo hi` shell jobs"), ("py", "python `print(1)` code jobs")):
        comm = read_text(os.path.join(a.out_dir, f"perf-{name}-comm.txt")) if a.out_dir else ""
        sym = read_text(os.path.join(a.out_dir, f"perf-{name}-sym.txt")) if a.out_dir else ""
        prof = load(os.path.join(a.out_dir, f"profile-{name}.jsonl")) if a.out_dir and os.path.exists(
            os.path.join(a.out_dir, f"profile-{name}.jsonl")) else []
        if not comm:
            w(f"### {what}: no profile")
            w("")
            continue
        p = prof[0] if prof else {}
        w(f"### {what}, 8 in flight")
        w("")
        w(f"`perf record -a -g -e cpu-clock -F 499` (software clock: no hardware counters on this VM) during a "
          f"separate run of {p.get('n')} jobs ({fmt(p.get('per_s'), 0)} jobs/s under perf; errors "
          f"{p.get('errors')}, lost {p.get('lost')}; daemon tree {fmt(p.get('cpu_ms_per_job_daemon_tree'), 2)} ms "
          f"CPU per job). `perf report --no-children --sort comm` (share of all samples; `-a` sees the whole "
          "shared machine: `swapper` is idle; `sandpoold` = daemon, spawner, keepers and sandbox inits before "
          "they exec; `sh` / `python3` = warm zygotes and jobs):")
        w("")
        w("```")
        w(comm)
        w("```")
        if sym:
            w("")
            w("`--sort comm,sym` (self time, top entries):")
            w("")
            w("```")
            w(sym)
            w("```")
        w("")

    if a.analysis and os.path.exists(a.analysis):
        w(read_text(a.analysis))
        w("")

    # ---------------------------------------------------------------- daemon health
    w("## Daemon health during the run")
    w("")
    errs = sum(r.get("errors", 0) for r in rows if r.get("system") == "sandpool" and r.get("measured") and r.get("mode") not in ("breakdown", "memory"))
    lost = sum(r.get("lost", 0) for r in rows if r.get("system") == "sandpool" and r.get("measured") and r.get("mode") not in ("breakdown", "memory"))
    w(f"- sandpoold still running at the end of the sandpool runs: **{meta.get('daemon_alive_after')}**; "
      f"heartbeat key present: {meta.get('heartbeat_after')}")
    w(f"- sandpool jobs with an unexpected result (errors): **{errs}**; jobs never finished (lost): **{lost}**")
    if meta.get("wedged"):
        w(f"- **sandpoold stopped finishing jobs**: {meta['wedged']}. Later sandpool phases were skipped; "
          "see the row notes above for the pending jobs and the stream length.")
    w(f"- consumer group after the runs: `{meta.get('group_after')}`; `sandpool:dead` length: {meta.get('dead_len')}")
    lines = []
    if a.daemon_log and os.path.exists(a.daemon_log):
        with open(a.daemon_log, encoding="utf-8", errors="replace") as f:
            lines = [ln.rstrip() for ln in f if ln.strip()]
    if lines:
        msgs = Counter()
        for ln in lines:
            m = re.search(r'"level":"(\w+)".*?"msg":"([^"]*)"', ln)
            msgs[(m.group(1), m.group(2)) if m else ("?", ln[:160])] += 1
        w(f"- daemon log (`--log-level warn`): {len(lines)} lines:")
        w("")
        w("| level | message | count |")
        w("|---|---|---|")
        for (lvl, msg), cnt in msgs.most_common(20):
            w(f"| {lvl} | {msg.replace('|', '/')} | {cnt} |")
        w("")
        w("First lines:")
        w("")
        w("```")
        for ln in lines[:8]:
            w(ln[:400])
        w("```")
    else:
        w("- daemon log (`--log-level warn`): empty (no warnings or errors)")
    w("")

    # The figures of the other benchmark scripts, each from its own run (it states its command):
    # fuzzing, chaos, soak, sessions. Their headings move down one level.
    bench_dir = os.path.dirname(os.path.abspath(a.out))
    companions = [("fuzz-results.md", "sudo bash bench/fuzz.sh"),
                  ("RESULTS-chaos.md", "sudo /usr/bin/python3 bench/chaos.py ... --markdown bench/RESULTS-chaos.md"),
                  ("RESULTS-soak.md", "sudo /usr/bin/python3 bench/soak.py ... --markdown bench/RESULTS-soak.md"),
                  ("RESULTS-sessions.md", "sudo bash bench/sessions.sh")]
    w("## Fuzzing, chaos, soak and sessions (separate runs)")
    w("")
    w("Copied from the files each script writes; each states its own command, date and commit.")
    w("")
    for name, cmd in companions:
        text = read_text(os.path.join(bench_dir, name))
        if not text:
            w(f"- `bench/{name}`: not run yet (`{cmd}`).")
            w("")
            continue
        for line in text.splitlines():
            w("#" + line if line.startswith("#") else line)
        w("")

    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
