"""Redis CPU per job on the daemon's side, in three phases on one private redis-server: N `true`
entries queued (XADD with a `notify` stream, pipelined by 1000), the stand-in of batch_bench.py
claiming and finishing them all with the daemon's CLAIM and FINISH scripts, and a reader
collecting the N completion records (XREAD COUNT 1000). Each phase runs alone, so Redis's CPU
(INFO cpu) is split between them exactly; INFO commandstats of the stand-in's phase shows where
it goes. Not run by the tests.

CPU time on a shared machine moves with the load (two runs minutes apart can differ 2x), so
`--callgrind` runs redis-server under valgrind's callgrind instead and counts the instructions
Redis executes in the stand-in's phase: a figure that does not depend on the machine's load, for
comparing two versions of the scripts (slow: use --n 2000). `--batch` sets the entries per CLAIM
and FINISH call (128 is the most the daemon sends; a daemon whose loop turns gather few results
sends 1-4).

    cmake --build build --target sandpool_dump_scripts && mkdir -p /tmp/s \\
      && build/bin/sandpool_dump_scripts claim > /tmp/s/claim.lua \\
      && build/bin/sandpool_dump_scripts finish > /tmp/s/finish.lua
    /usr/bin/python3 bench/standin_cpu.py --scripts /tmp/s --n 20000
    /usr/bin/python3 bench/standin_cpu.py --scripts /tmp/s --n 2000 --callgrind --batch 4
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import tempfile
from pathlib import Path

import msgpack

import batch_bench as bb


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scripts", type=Path, required=True, help="claim.lua and finish.lua (see above)")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--bench", default=bb.__file__, help="the batch_bench.py whose stand-in runs")
    ap.add_argument("--batch", type=int, default=128, help="entries per CLAIM and FINISH call")
    ap.add_argument("--callgrind", action="store_true", help="count Redis's instructions (see above)")
    a = ap.parse_args()
    n = a.n
    tmp = Path(tempfile.mkdtemp(prefix="sp-standin-"))
    rs = bb.Redis(tmp, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/callgrind.%p"]
                  if a.callgrind else None)
    r = rs.r
    load0 = open("/proc/loadavg").read().split()[:3]
    try:
        r.xgroup_create("sandpool:q:default", "workers", id="0", mkstream=True)
        c0 = rs.cpu_s()
        for i in range(0, n, 1000):
            p = r.pipeline(transaction=False)
            for j in range(i, min(n, i + 1000)):
                jid = f"b-{j}"
                p.xadd("sandpool:q:default",
                       {"id": jid, "job": msgpack.packb({"v": 4, "id": jid, "shell": "true"}), "notify": "b"})
            p.execute()
        c1 = rs.cpu_s()
        r.config_resetstat()
        if a.callgrind:
            subprocess.run(["callgrind_control", "--zero", str(rs.proc.pid)], capture_output=True, check=True)
        out = subprocess.run([bb.PY, a.bench, "standin", "--socket", rs.sock, "--scripts", str(a.scripts),
                              "--n", str(n), "--batch", str(a.batch)], capture_output=True, text=True, check=True).stdout
        instructions = None
        if a.callgrind:
            subprocess.run(["callgrind_control", "--dump", str(rs.proc.pid)], capture_output=True, check=True)
            dump = max(glob.glob(f"{tmp}/callgrind.*"), key=os.path.getmtime)
            instructions = int(next(l for l in open(dump) if l.startswith(("summary:", "totals:"))).split()[1])
        c2 = rs.cpu_s()
        stats = r.info("commandstats")
        last, got = "0", 0
        while got < n:
            x = r.xread({"sandpool:notify:b": last}, count=1000)
            if not x:
                break
            got += len(x[0][1])
            last = x[0][1][-1][0]
        c3 = rs.cpu_s()
        row = {"n": n, "submit_us_per_job": (c1 - c0) / n * 1e6, "standin_us_per_job": (c2 - c1) / n * 1e6,
               "collect_us_per_job": (c3 - c2) / n * 1e6, "total_us_per_job": (c3 - c0) / n * 1e6, "batch": a.batch,
               "standin_redis_kinstr_per_job": instructions / n / 1000 if instructions else None,
               "records": got, "results": len(r.keys("sandpool:result:*")), "left_queued": r.xlen("sandpool:q:default"),
               "standin": json.loads(out.strip().splitlines()[-1]),
               "load": [load0, open("/proc/loadavg").read().split()[:3]]}
        print(json.dumps(row))
        for k, v in sorted(stats.items(), key=lambda kv: -kv[1]["usec"]):
            print(f"  {k:24s} calls={v['calls']:>7} usec/job={v['usec'] / n:.2f}")
    finally:
        rs.stop()


if __name__ == "__main__":
    main()
