"""What every results file states about its run: when, on what code and machine, under what load,
and the command that reproduces it. Shared by chaos.py, soak.py and sessions.sh."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def _bench_output(path: str) -> bool:
    """Whether `path` is a file the benchmarks write (results, figures, raw output)."""
    return path.startswith(("bench/RESULTS", "bench/out/")) or path in ("bench/soak.svg", "bench/fuzz-results.md")


def code_state() -> str:
    """The commit and whether the tree is dirty, as "<commit>" or "<commit> (dirty ...)". Take it
    when the run starts: a long run's tree may move on before its results are written."""
    commit = _git("rev-parse", "--short", "HEAD") or "?"
    # What the benchmarks write themselves does not make the code dirty.
    dirty = [l for l in (_git("status", "--porcelain") or "").splitlines() if not _bench_output(l[3:])]
    return commit + (" (dirty tree: built from the working tree)" if dirty else "")


def _repo_relative(path: str) -> str:
    """`path` relative to the repository root when it lies inside it; otherwise only its name (a
    results file is tracked, and this machine's directories mean nothing on another)."""
    root = Path(__file__).resolve().parent.parent
    resolved = Path(path).resolve()
    try:
        return str(resolved.relative_to(root))
    except ValueError:
        return f"{resolved.name} (outside the repository)"


def header(title: str, command: str, started: float, code: str = "") -> List[str]:
    """Markdown lines: the title and the run's facts. `started` is time.time() at the start;
    `code`, code_state() at the start (now, when not given)."""
    code = code or code_state()
    daemon = os.environ.get("SANDPOOLD")
    if daemon:
        code += f"; daemon binary `{_repo_relative(daemon)}` (SANDPOOLD)"
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return [
        f"# {title}", "",
        f"Written by `{command}` (as root, from the repository root; do not edit by hand, re-run it).", "",
        f"- **Date (UTC):** {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(started))} "
        f"(run took {time.time() - started:.0f} s)",
        f"- **Code:** commit {code}",
        f"- **Machine:** {os.cpu_count()} CPUs, `{cpu_model()}`, kernel {platform.release()}; load average {load} "
        "at the end. Shared and noisy: absolute times vary, counts do not.",
        "",
    ]
