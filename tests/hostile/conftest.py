"""Fixtures of the hostile-code suite (see hostile_support.py for what every test checks)."""

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hostile_support import Host, Pool, RedisServer, compile_c  # noqa: E402


@pytest.fixture(scope="session")
def host():
    h = Host()
    yield h
    h.cleanup()


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pool(request, redis_server, host):
    """One daemon per test module; a module may set POOL_EXTRA = [flags] to change its limits."""
    p = Pool(redis_server, host, extra=getattr(request.module, "POOL_EXTRA", None))
    yield p
    p.stop()


@pytest.fixture(autouse=True)
def _after_each(request):
    """After every test that uses the pool: no leak, no residue, host intact, pool serving."""
    yield
    if "pool" in request.fixturenames:
        p = request.getfixturevalue("pool")
        p.check_all()


@pytest.fixture(scope="session")
def cc():
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the attack programs")
    return compile_c


