"""The chaos run of bench/chaos.py, CI-sized: three daemons, mixed jobs with retries, cancels and
timeouts, daemons killed and restarted, Redis restarted (SIGTERM and SIGKILL) and paused past
the lease. Every job ends with exactly one result, none without retries runs twice, no
worker_lost comes from a live daemon, nothing is left on the host."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import chaos  # noqa: E402


def test_chaos_leaves_every_job_exactly_one_result_and_the_host_clean():
    figures = chaos.run(jobs=150, seconds=25, seed=1123, verbose=False)
    assert figures["violations"] == [], figures
    assert figures["results"] == figures["jobs"] == 150
    # The run did what it says: daemons were killed and Redis was disturbed.
    a = figures["actions"]
    assert a["daemon_kill"] + a["redis_restart_term"] + a["redis_restart_kill"] + a["redis_pause"] >= 4, figures
