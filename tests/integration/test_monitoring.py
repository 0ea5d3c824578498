"""The monitoring mixin (deploy/monitoring) against the real thing: Debian's prometheus, on
loopback with its data in a temporary directory, loads the mixin's rules (generated with short
`for`s and thresholds through its _config) and scrapes two real sandpoolds. Jobs succeed, fail,
time out and are rejected; a daemon is killed. Then every recording rule and every dashboard
query must return data, and the daemon-down and stuck-queue alerts must go pending, then
firing, then resolve."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

from sandpool_harness import REPO, Daemon, job_map, new_id, submit, submit_raw, wait_for, wait_results

MIXIN = REPO / "deploy" / "monitoring"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
# Not skipped when missing: scripts/install-deps.sh installs it, and a skip would hide.
assert os.path.exists(PROMETHEUS), "prometheus is not installed: run scripts/install-deps.sh"
# Short thresholds so the alerts move within seconds; everything else keeps its default.
TEST_CONFIG = "{oldestWaitingSeconds: 2, oldestWaitingFor: '2s', daemonDownFor: '2s'}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, targets, rule_dir):
        self.dir = tempfile.mkdtemp(prefix="sandpool-prom-")
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
            "rule_files": [str(Path(rule_dir) / "rules.yaml"), str(Path(rule_dir) / "alerts.yaml")],
            "scrape_configs": [{"job_name": "sandpool", "static_configs": [{"targets": targets}]}],
        }
        config_path = Path(self.dir) / "prometheus.yml"
        config_path.write_text(json.dumps(config))  # JSON is YAML
        self.log = open(Path(self.dir) / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config_path}", f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=self.log)
        wait_for(self._ready, 60, "prometheus to be ready", interval=0.2)

    def _ready(self):
        assert self.proc.poll() is None, self.log_tail()
        try:
            return urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2).status == 200
        except OSError:
            return False

    def api(self, path, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?" + urllib.parse.urlencode(params)
        body = json.load(urllib.request.urlopen(url, timeout=10))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]

    def alert_states(self, name):
        return {a["state"] for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name}

    def log_tail(self):
        return (Path(self.dir) / "prometheus.log").read_text(errors="replace")[-3000:]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def cancel(r, job_id):
    r.hset(f"sandpool:job:{job_id}", "cancel", "1")
    r.publish("sandpool:cancel", job_id)


def dashboard_queries():
    dash = json.loads((MIXIN / "generated" / "sandpool-fleet.json").read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"]
            for var in ("$template", "$host", "$queue"):
                expr = expr.replace(var, ".*")
            out.append((p["title"], expr))
    return out


def wait_alert(prom, name, state, timeout):
    return wait_for(lambda: state in prom.alert_states(name), timeout, f"{name} to be {state}", interval=0.2)


def was_pending(prom, name):
    """The ALERTS series kept the pending state, however short it was."""
    return prom.query(f'max_over_time(ALERTS{{alertname="{name}",alertstate="pending"}}[10m])')


def test_mixin_against_real_prometheus_and_two_daemons(redis_server, tmp_path):
    rule_dir = tmp_path / "rules"
    subprocess.run([str(MIXIN / "generate.sh"), "--out", str(rule_dir), "--config", TEST_CONFIG], check=True)
    # One slot each (template default only), so that two long jobs fill the fleet.
    one_slot = ["--workers", "1", "--max-workers", "1", "--python-workers", "0", "--node-workers", "0"]
    ports = [free_port(), free_port()]
    daemons = [Daemon(redis_server.url, workers=1, extra=one_slot + ["--metrics-addr", f"127.0.0.1:{p}"])
               for p in ports]
    prom = None
    failed = True
    try:
        r = redis_server.client()
        for d in daemons:
            d.start(wait_ready=r)
        prom = Prometheus([f"127.0.0.1:{p}" for p in ports], rule_dir)
        wait_for(lambda: len([s for s in prom.query('up{job="sandpool"} == 1')]) == 2, 60, "both daemons scraped",
                 interval=0.2)

        # Successes, user failures, platform failures (exec failed), timeouts, a dead letter.
        jobs = [job_map(new_id(), shell="exit 0") for _ in range(4)]
        jobs += [job_map(new_id(), shell="exit 3") for _ in range(2)]
        jobs += [job_map(new_id(), argv=["/no/such/program"])]
        jobs += [job_map(new_id(), shell="sleep 30", timeout_ms=300) for _ in range(2)]
        for j in jobs:
            submit(r, j)
        submit_raw(r, new_id("dead"), b"\xc1 not msgpack")
        outcomes = {res["outcome"] for res in wait_results(r, [j["id"] for j in jobs], 120).values()}
        assert {"exit", "error", "timeout"} <= outcomes, outcomes

        # Every recording rule and every dashboard query returns data.
        rules = [rule["name"] for g in prom.api("rules", type="record")["groups"] for rule in g["rules"]]
        assert len(rules) >= 20, rules
        missing = lambda: [name for name in rules if not prom.query(name)]  # noqa: E731
        wait_for(lambda: not missing(), 60, "every recording rule to have data", interval=0.5)
        queries = dashboard_queries()
        assert len(queries) >= 20
        empty = lambda: [title for title, expr in queries if not prom.query(expr)]  # noqa: E731
        wait_for(lambda: not empty(), 60, "every dashboard query to have data", interval=0.5)
        # The rejected entry is answered apart from the jobs: wait for it, then for its scrape.
        wait_for(lambda: r.xlen("sandpool:dead") > 0, 60, "the dead letter")
        wait_for(lambda: prom.query('sum(sandpool_dead_letters_total{code="bad_payload"}) > 0'), 60,
                 "the dead letter in Prometheus", interval=0.2)

        # Stuck queue: two long jobs fill both slots; a third waits, untaken.
        blockers = [submit(r, job_map(new_id("block"), shell="sleep 300")) for _ in range(2)]
        wait_for(lambda: all(r.hget(f"sandpool:job:{b}", "state") == b"running" for b in blockers), 60,
                 "both slots busy")
        waiting = submit(r, job_map(new_id("wait"), shell="exit 0"))
        wait_alert(prom, "SandpoolQueueStuck", "firing", 60)
        assert was_pending(prom, "SandpoolQueueStuck"), "never seen pending before firing"
        assert r.get(f"sandpool:result:{waiting}") is None
        for b in blockers:
            cancel(r, b)
        assert wait_results(r, [waiting], 60)[waiting]["outcome"] == "exit"
        wait_for(lambda: not prom.alert_states("SandpoolQueueStuck"), 60, "SandpoolQueueStuck to resolve",
                 interval=0.2)

        # A daemon killed: its target goes down, the alert fires; it comes back: resolved.
        daemons[1].kill9()
        wait_alert(prom, "SandpoolDaemonDown", "firing", 60)
        assert was_pending(prom, "SandpoolDaemonDown"), "never seen pending before firing"
        down = prom.query('ALERTS{alertname="SandpoolDaemonDown",alertstate="firing"}')
        assert [a["metric"]["instance"] for a in down] == [f"127.0.0.1:{ports[1]}"]
        daemons[1].start(wait_ready=r)
        wait_for(lambda: not prom.alert_states("SandpoolDaemonDown"), 60, "SandpoolDaemonDown to resolve",
                 interval=0.2)
        # The survivor kept working meanwhile.
        jid = submit(r, job_map(new_id(), shell="exit 0"))
        assert wait_results(r, [jid], 60)[jid]["outcome"] == "exit"
        failed = False
    finally:
        if prom is not None:
            if failed:
                print(prom.log_tail())
            prom.stop()
        for d in daemons:
            d.stop()
            d.cleanup(keep_log=failed)
            if failed:
                print(f"daemon {d.consumer} logged to {d.log_path}")
