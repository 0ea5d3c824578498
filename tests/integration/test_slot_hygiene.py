"""Nothing of one job's kernel footprint follows the next into its slot (issue 11): every sandbox
has a cgroup of its own, so a job's figures and headroom are its own."""

from sandpool_harness import job_map, new_id, submit, wait_results


def test_kernel_memory_a_job_leaves_is_not_the_next_jobs(redis_server, daemons):
    r = redis_server.client()
    daemons(workers=1, extra=["--python-workers", "0", "--node-workers", "0", "--max-workers", "1"])
    # Negative dentries: lookups of names that do not exist (on a disk file system: tmpfs keeps
    # none), charged to the job's cgroup. The names are new to this host's dentry cache.
    prefix = new_id("missing")
    lookups = submit(r, job_map(new_id("dent"), code=(
        "import os\n"
        "for i in range(400000):\n"
        f"    os.path.exists('/usr/{prefix}-%d' % i)\n"), runtime="python", timeout_ms=120000))
    first = wait_results(r, [lookups], 180)[lookups]
    assert first["outcome"] == "exit", first
    assert first["peak_memory_bytes"] > 48 << 20, "the lookups should have cost the job memory"
    after = [submit(r, job_map(new_id("next"), shell="true")) for _ in range(3)]
    for res in wait_results(r, after, 60).values():
        assert res["outcome"] == "exit", res
        assert res["peak_memory_bytes"] < 24 << 20, (res["peak_memory_bytes"], first["peak_memory_bytes"])
        assert res["peak_memory_bytes"] < first["peak_memory_bytes"] // 2, (res, first["peak_memory_bytes"])
