#!/usr/bin/python3
"""Turns bench/out/network.jsonl (bench/network.sh: sandpool_bench lines tagged with "round" and
"template") into bench/RESULTS-network.md, and a one-line summary (JSON) that bench/report.py puts
into bench/RESULTS.md. Standard library only.

Only ratios web/plain are claimed: each ratio is taken within one round (the two templates measured
one right after the other), and the figure given is the median over the rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runinfo import header  # noqa: E402

TARGET = 1.10  # the issue: a job with network starts within 10% of one without


def load(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return rows


# The measurements of one round and template: (mode, variant) as sandpool_bench names them.
SERIES = {
    "b2b": ("latency", "isolated", "back to back"),
    "paced": ("latency", "isolated-paced", "paced"),
    "tp": ("throughput", "isolated", "throughput"),
}


def pick(rows, rnd, tpl, key, mode=None):
    m, v, _ = SERIES[key]
    for r in rows:
        if r.get("round") == rnd and r.get("template") == tpl and r.get("mode") == (mode or m) and r.get("variant") == v:
            return r
    return None


def counters(text):
    """{(template, "hits"|"misses"): value} from sandpool_pool_{hits,misses}_total lines."""
    out = {}
    for kind, tpl, v in re.findall(r'sandpool_pool_(hits|misses)_total\{template="([^"]+)"\} ([0-9.e+]+)', text):
        out[(tpl, kind)] = float(v)
    return out


def hit_share(r):
    if not r or r.get("pool_hits") is None or r.get("pool_misses") is None:
        return "–"
    total = r["pool_hits"] + r["pool_misses"]
    return f"{100 * r['pool_hits'] / total:.0f}%" if total else "–"


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def f(x, d=3):
    return "–" if x is None else f"{x:.{d}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--summary", required=True)
    ap.add_argument("--started", type=float, required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--meta", action="append", default=[])
    ap.add_argument("--daemon-log")
    a = ap.parse_args()
    meta = dict(m.split("=", 1) for m in a.meta)
    rows = load(a.results)
    rounds = sorted({r["round"] for r in rows if "round" in r})

    def val(rnd, tpl, key, field, mode=None):
        r = pick(rows, rnd, tpl, key, mode)
        return r.get(field) if r and r.get("measured") else None

    def ratios(key, field, mode=None):  # web/plain per round
        out = []
        for rnd in rounds:
            w, p = val(rnd, "web", key, field, mode), val(rnd, "plain", key, field, mode)
            out.append(w / p if w is not None and p else None)
        return out

    errors = sum(r.get("errors", 0) for r in rows if r.get("mode") in ("latency", "throughput"))
    lost = sum(r.get("lost", 0) for r in rows if r.get("mode") in ("latency", "throughput"))

    L = header("sandpool network templates: benchmark results", a.command, a.started)
    w = L.append
    w("Does a job of a template with egress (a veth link, filtered by the daemon's nftables table) start "
      "as fast as a job of a template without network? One daemon serves two templates that differ only "
      "in `egress`; the same `echo hi` jobs (sandpool_bench `--template`) go to each, interleaved: every "
      "measurement is taken for both templates one right after the other, and the order flips every "
      "round (plain first in odd rounds, web first in even ones). Only ratios web/plain are claimed: each is "
      "taken within a round and the median over the rounds is given.")
    w("")
    w("- **Setup:** private network namespace (`ip netns add`; `lo` up), `nsenter --net=/run/netns/<ns> sandpoold "
      f"{meta.get('daemon_flags')}`, private redis-server {meta.get('redis')} on a unix socket. Config: "
      f"`{meta.get('config')}`. {meta.get('nft')}.")
    w(f"- **Sanity:** interfaces inside a sandbox: plain `{meta.get('if_plain')}`, web `{meta.get('if_web')}`; "
      f"nftables in the namespace: `{meta.get('nft_tables')}`; links in the namespace besides lo: {meta.get('ns_links')}.")
    quick = meta.get("quick") == "1"
    w(f"- **Sizes, per round and template:** back to back N={meta.get('n')} (after {meta.get('warmup')} warm-up); "
      f"paced N={meta.get('paced_n')}, {meta.get('pace_ms')} ms idle before each job; throughput "
      f"{meta.get('tp_n')} jobs, {meta.get('inflight')} in flight. {meta.get('rounds')} rounds. Each pool: "
      f"{meta.get('pool')} sandboxes, fixed (workers = max-workers)."
      + (" **BENCH_QUICK smoke run: small samples, not for quoting.**" if quick else ""))
    w(f"- **Pools** (template ready total): at the start `{meta.get('pools_start')}`; at the end (up to 20 s "
      f"allowed to refill) `{meta.get('pools_end')}`.")
    c0, c1 = counters(meta.get("counters_start", "")), counters(meta.get("counters_end", ""))
    hm = "; ".join(f"{t}: {c1.get((t, 'hits'), 0) - c0.get((t, 'hits'), 0):.0f} hits, "
                   f"{c1.get((t, 'misses'), 0) - c0.get((t, 'misses'), 0):.0f} misses" for t in ("plain", "web"))
    w(f"- **Pool hits / misses during the measurements** (a miss: the job found no ready sandbox and waited "
      f"for one): {hm}. Per series, below.")
    w(f"- **Jobs:** unexpected results {errors}, never finished {lost}; sandpoold alive at the end: {meta.get('daemon_alive')}.")
    w("")

    # ---- verdict
    verdict = {}
    w("## Result (medians over the rounds)")
    w("")
    w("| measure | plain | web | web / plain (median of per-round ratios; range) | target |")
    w("|---|---|---|---|---|")
    lines = [("b2b", "p50_ms", "echo latency back to back, p50 (ms)", True),
             ("b2b", "p90_ms", "echo latency back to back, p90 (ms)", False),
             ("b2b", "p99_ms", "echo latency back to back, p99 (ms)", False),
             ("paced", "p50_ms", f"echo latency paced, p50 (ms)", True),
             ("paced", "p90_ms", "echo latency paced, p90 (ms)", False),
             ("paced", "p99_ms", "echo latency paced, p99 (ms)", False),
             ("tp", "per_s", f"echo throughput, {meta.get('inflight')} in flight (jobs/s)", False)]
    for key, field, label, target in lines:
        pm = med([val(r, "plain", key, field) for r in rounds])
        wm = med([val(r, "web", key, field) for r in rounds])
        rs = [x for x in ratios(key, field) if x is not None]
        rm = med(rs)
        rng = f" ({min(rs):.3f}–{max(rs):.3f})" if rs else ""
        if target:
            met = None if rm is None else rm <= TARGET
            tcol = f"<= {TARGET:.2f}: " + ("not measured" if met is None else ("**yes**" if met else "**NO**"))
            verdict[key] = {"plain_p50_ms": pm, "web_p50_ms": wm, "ratio": rm,
                            "ratio_min": min(rs) if rs else None, "ratio_max": max(rs) if rs else None, "met": met}
        else:
            tcol = "(for reference)"
            if key == "tp":
                verdict["tp"] = {"plain_per_s": pm, "web_per_s": wm, "ratio": rm}
        d = 0 if field == "per_s" else 3
        w(f"| {label} | {f(pm, d)} | {f(wm, d)} | {f(rm)}{rng} | {tcol} |")
    # Where the time goes, from the bench's breakdown lines (back to back): the same for both?
    for field, label in (("submit_to_started_event_p50_ms", "back to back: submit → `started` event, p50 (ms)"),
                         ("daemon_exec_time_p50_ms", "back to back: daemon's exec_time (execve → exit), p50 (ms)"),
                         ("daemon_queue_wait_p50_ms", "back to back: daemon's queue_wait (1 ms resolution), p50 (ms)")):
        pm = med([val(r, "plain", "b2b", field, "breakdown") for r in rounds])
        wm = med([val(r, "web", "b2b", field, "breakdown") for r in rounds])
        rs = [x for x in ratios("b2b", field, "breakdown") if x is not None]
        w(f"| {label} | {f(pm)} | {f(wm)} | {f(med(rs))} | (for reference) |")
    w("")

    # ---- per round
    w("## Every round")
    w("")
    for rnd in rounds:
        order = "plain, then web" if rnd % 2 else "web, then plain"
        w(f"### Round {rnd} ({order})")
        w("")
        w("| template | back to back p50 / p90 / p99 (ms) | paced p50 / p90 / p99 (ms) | throughput (jobs/s) | "
          "pool hits: back to back / paced / throughput | errors / lost |")
        w("|---|---|---|---|---|---|")
        for tpl in ("plain", "web"):
            cells = []
            bad = 0
            for key in ("b2b", "paced"):
                r = pick(rows, rnd, tpl, key)
                if r and r.get("measured"):
                    cells.append(f"{r['p50_ms']:.3f} / {r['p90_ms']:.3f} / {r['p99_ms']:.3f}")
                    bad += r.get("errors", 0) + r.get("lost", 0)
                else:
                    cells.append("–")
            t = pick(rows, rnd, tpl, "tp")
            cells.append(f"{t['per_s']:.0f}" if t and t.get("per_s") else "–")
            bad += (t or {}).get("errors", 0) + (t or {}).get("lost", 0)
            cells.append(" / ".join(hit_share(pick(rows, rnd, tpl, k)) for k in ("b2b", "paced", "tp")))
            w(f"| {tpl} | {' | '.join(cells)} | {bad} |")
        rs = [ratios(k, "p50_ms")[rounds.index(rnd)] for k in ("b2b", "paced")]
        tr = ratios("tp", "per_s")[rounds.index(rnd)]
        w(f"| web / plain | p50 {f(rs[0])} | p50 {f(rs[1])} | {f(tr)} | | |")
        w("")
    w("Pool hits: the share of the series' jobs (warm-up included) that found a ready sandbox; the others "
      "waited for one to be made (the pools are fixed, so jobs sent faster than a pool refills wait). Paced p99 is "
      "close to the series' maximum at this N. Raw lines: `bench/out/network.jsonl`.")
    w("")

    # ---- daemon log
    lines_ = []
    if a.daemon_log and os.path.exists(a.daemon_log):
        with open(a.daemon_log, encoding="utf-8", errors="replace") as fh:
            lines_ = [ln.rstrip() for ln in fh if ln.strip()]
    w("## Daemon log (`--log-level warn`)")
    w("")
    if lines_:
        msgs = Counter()
        for ln in lines_:
            m = re.search(r'"level":"(\w+)".*?"msg":"([^"]*)"', ln)
            msgs[(m.group(1), m.group(2)) if m else ("?", ln[:160])] += 1
        w("| level | message | count |")
        w("|---|---|---|")
        for (lvl, msg), cnt in msgs.most_common(10):
            w(f"| {lvl} | {msg.replace('|', '/')} | {cnt} |")
    else:
        w("Empty.")
    w("")

    with open(a.out, "w", encoding="utf-8") as fh:
        fh.write("\n".join(L) + "\n")

    b2b, paced = verdict.get("b2b", {}), verdict.get("paced", {})
    summary = {"measured": bool(rounds) and b2b.get("ratio") is not None, "rounds": len(rounds),
               "command": a.command, "b2b": b2b, "paced": paced, "tp": verdict.get("tp", {}),
               "errors": errors, "lost": lost, "target": TARGET, "quick": quick}
    if not summary["measured"]:
        summary["note"] = "not measured: no complete round in bench/out/network.jsonl"
    with open(a.summary, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(summary) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
