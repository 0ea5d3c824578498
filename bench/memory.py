#!/usr/bin/python3
"""Memory of sandpoold's warm sandboxes, measured from the host (bench/run.sh calls this while the
daemon idles with its pools full). Standard library only; needs root (smaps_rollup of other uids).

Sandbox processes run as host uids uid_base .. uid_base + 2 * slots - 1 (2 per slot): the even uid
is the sandbox's init (comm `sandpool-spawner`; for python, sh and bash, also the slot's nursery
mother, whose address space the sandbox's init shares and which is counted once), the odd one the warm zygote:
`/bin/sh -c ...` (template default), `/usr/bin/python3 -c ...` (python), `/usr/bin/node -e ...`
(node). Each init is the child of a host-side keeper (root, comm `sandpoold`), reported apart.

Prints one JSON line per template (same shape as sandpool_bench's lines, mode "memory"), and one
for the daemon itself (daemon + spawner + keepers).

  memory.py --uid-base 870000 [--uid-span 4000] --daemon-pid PID [--phase idle]
"""
import argparse
import json
import os
from collections import defaultdict


def read_status(pid):
    st = {}
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as f:
            for line in f:
                k, _, v = line.partition(":")
                st[k] = v.strip()
    except OSError:
        return None
    return st


def rollup(pid):
    """(rss_kib, pss_kib) from smaps_rollup, or None if the process is gone."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] in ("Rss:", "Pss:", "Pss_Anon:", "Pss_File:"):
                    out[parts[0][:-1]] = int(parts[1])
    except OSError:
        return None
    return out


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def classify(cmd):
    if cmd.startswith("/bin/sh -c") or cmd.startswith("sh -c"):
        return "default"
    if "python3" in cmd.split(" ", 1)[0]:
        return "python"
    if cmd.split(" ", 1)[0].endswith("/node") or cmd.startswith("node "):
        return "node"
    if "bash" in cmd.split(" ", 1)[0]:
        return "bash"
    return "other"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uid-base", type=int, required=True)
    ap.add_argument("--uid-span", type=int, default=4000)
    ap.add_argument("--daemon-pid", type=int, default=0)
    ap.add_argument("--phase", default="idle")
    a = ap.parse_args()

    procs = {}  # pid -> dict(uid, ppid, comm, cmd)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = read_status(name)
        if st is None:
            continue
        try:
            uid = int(st.get("Uid", "0").split()[0])
            ppid = int(st.get("PPid", "0"))
        except ValueError:
            continue
        procs[int(name)] = {"uid": uid, "ppid": ppid, "comm": st.get("Name", "")}

    lo, hi = a.uid_base, a.uid_base + a.uid_span
    slots = defaultdict(lambda: {"init": [], "zygote": [], "other": []})
    for pid, p in procs.items():
        if not lo <= p["uid"] < hi:
            continue
        slot = (p["uid"] - lo) // 2
        if (p["uid"] - lo) % 2 == 0:
            slots[slot]["init"].append(pid)
        else:
            slots[slot]["zygote"].append(pid)

    def maps_key(pid):
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                return hash(f.read())
        except OSError:
            return None

    # A nursery sandbox's init shares its nursery mother's memory (CLONE_VM, worker/runners/nursery.h): the
    # same address space, whose figures /proc shows for each of them. Counted once per slot.
    for slot, s in slots.items():
        seen, keep = set(), []
        for pid in sorted(s["init"]):
            k = maps_key(pid)
            if k is not None and k in seen:
                continue
            seen.add(k)
            keep.append(pid)
        s["init"] = keep

    per_tpl = defaultdict(list)  # template -> list of per-sandbox dicts
    keeper_pids = set()
    for slot, s in sorted(slots.items()):
        tpl = "preparing"
        zcmd = ""
        if s["zygote"]:
            # the zygote is the odd-uid process whose parent is the init
            zpid = min(s["zygote"])
            zcmd = cmdline(zpid)
            tpl = classify(zcmd)
        rec = {"init_rss": 0, "init_pss": 0, "zygote_rss": 0, "zygote_pss": 0, "procs": 0}
        ok = True
        for pid in s["init"]:
            r = rollup(pid)
            if r is None:
                ok = False
                continue
            rec["init_rss"] += r.get("Rss", 0)
            rec["init_pss"] += r.get("Pss", 0)
            rec["procs"] += 1
            keeper_pids.add(procs[pid]["ppid"])
        for pid in s["zygote"]:
            r = rollup(pid)
            if r is None:
                ok = False
                continue
            rec["zygote_rss"] += r.get("Rss", 0)
            rec["zygote_pss"] += r.get("Pss", 0)
            rec["procs"] += 1
        if ok:
            per_tpl[tpl].append(rec)

    keepers = [k for k in keeper_pids if k in procs]
    keeper_mem = [rollup(k) for k in keepers]
    keeper_mem = [m for m in keeper_mem if m]

    def mean(xs):
        return sum(xs) / len(xs) if xs else None

    mib = 1024.0
    for tpl, recs in sorted(per_tpl.items()):
        out = {
            "system": "sandpool", "variant": tpl, "mode": "memory", "command": f"warm sandbox, template {tpl}",
            "measured": True, "phase": a.phase, "sandboxes": len(recs),
            "init_pss_mib": mean([r["init_pss"] for r in recs]) / mib,
            "init_rss_mib": mean([r["init_rss"] for r in recs]) / mib,
            "zygote_pss_mib": mean([r["zygote_pss"] for r in recs]) / mib,
            "zygote_rss_mib": mean([r["zygote_rss"] for r in recs]) / mib,
            "sandbox_pss_mib": mean([r["init_pss"] + r["zygote_pss"] for r in recs]) / mib,
            "sandbox_rss_mib": mean([r["init_rss"] + r["zygote_rss"] for r in recs]) / mib,
            "total_pss_mib": sum(r["init_pss"] + r["zygote_pss"] for r in recs) / mib,
            "procs_per_sandbox": mean([r["procs"] for r in recs]),
        }
        if keeper_mem:
            out["keeper_pss_mib"] = mean([m.get("Pss", 0) for m in keeper_mem]) / mib
            out["keeper_rss_mib"] = mean([m.get("Rss", 0) for m in keeper_mem]) / mib
        print(json.dumps(out))

    if a.daemon_pid > 0:
        d = rollup(a.daemon_pid) or {}
        kids = [pid for pid, p in procs.items() if p["ppid"] == a.daemon_pid]
        spawner = [rollup(k) or {} for k in kids]
        out = {
            "system": "sandpool", "variant": "daemon", "mode": "memory", "command": "sandpoold host side",
            "measured": True, "phase": a.phase,
            "daemon_pss_mib": d.get("Pss", 0) / mib, "daemon_rss_mib": d.get("Rss", 0) / mib,
            "spawner_pss_mib": sum(s.get("Pss", 0) for s in spawner) / mib,
            "spawner_rss_mib": sum(s.get("Rss", 0) for s in spawner) / mib,
            "keepers": len(keeper_mem),
            "keepers_pss_mib": sum(m.get("Pss", 0) for m in keeper_mem) / mib,
            "keepers_rss_mib": sum(m.get("Rss", 0) for m in keeper_mem) / mib,
        }
        print(json.dumps(out))


if __name__ == "__main__":
    main()
