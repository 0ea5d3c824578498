import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from sandpool_harness import Daemon, RedisServer  # noqa: E402


@pytest.fixture
def redis_server():
    server = RedisServer(aof=True)
    yield server
    server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test, so fixtures know whether it failed."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def daemons(redis_server, request):
    """Factory: daemons(workers=..., extra=[...]) -> a started Daemon; all stopped at the end."""
    started = []

    def make(workers=4, extra=None, consumer=None, env=None, wait=True):
        d = Daemon(redis_server.url, workers=workers, extra=extra, consumer=consumer, env=env)
        d.start(wait_ready=redis_server.client() if wait else None)
        started.append(d)
        return d

    yield make
    failed = getattr(getattr(request.node, "rep_call", None), "failed", True)
    for d in started:
        d.stop()
        d.cleanup(keep_log=failed)
        if failed:
            print(f"daemon {d.consumer} logged to {d.log_path}")
