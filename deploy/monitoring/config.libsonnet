// The mixin's settings. Override any of them: `jsonnet -S -m out --tla-code 'config={...}'
// build.jsonnet`, or `(import 'mixin.libsonnet') + {_config+:: {...}}` from your own jsonnet.
// Every default says why it is what it is (docs/RUNBOOK.md has what to do when an alert fires).
{
  _config+:: {
    // Which scrape targets are sandpoold: the job name of your scrape config.
    selector: 'job="sandpool"',
    // Where docs/RUNBOOK.md is served for your operators; each alert links to its section.
    runbookUrlBase: 'docs/RUNBOOK.md',
    // Grafana dashboard identity.
    dashboardUid: 'sandpool-fleet',
    dashboardTitle: 'sandpool fleet',

    // Queue: the oldest entry no daemon has taken (sandpool_queue_oldest_waiting_seconds).
    // A healthy pool starts a job within milliseconds of its arrival; the default job timeout is
    // 30 s. A job that has waited 2 minutes has waited four of its own timeouts: capacity is far
    // behind or no daemon can take its template. 5 minutes of that is not a burst.
    oldestWaitingSeconds: 120,
    oldestWaitingFor: '5m',

    // Queue: lag + pending (entries not finished) above this and still growing over 15 minutes.
    // A burst of a few hundred jobs is what pools absorb (they grow to demand within seconds);
    // a backlog that grows for 15 minutes will not drain by itself.
    backlogMin: 100,
    backlogFor: '15m',

    // Failures that are the platform's or a limit's, never the user's own exit code or signal:
    // errors (sandbox failed, internal, shutdown, rejected), lost workers, and every kill.
    failureOutcomes: 'error|worker_lost|timeout|memory_limit|pids_limit|cpu_limit|disk_limit|output_limit|seccomp',
    // Celery's mixin pages at 5% for 10 minutes; a sandbox pool should fail fewer jobs than a
    // task queue (no user code decides these outcomes, except limit kills), so 5% is lenient
    // enough for workloads that hit limits now and then and still catches a broken template.
    failureRatio: 0.05,
    failureRatioFor: '10m',
    // Ratios of tiny numbers are noise: a template must complete at least this many jobs/s.
    failureMinJobsPerSecond: 0.01,

    // A template with no ready sandbox anywhere: every job of it waits for a refill. Full pools
    // under a burst last seconds; 10 minutes means the pools are at their maximum (raise
    // --max-workers, add hosts) or cannot refill (see the refill alert).
    noReadySlotsFor: '10m',

    // A daemon that Prometheus cannot scrape. Its jobs are taken over by peers after the lease
    // (30 s by default), so 2 minutes is past any restart, short of a silent loss of capacity.
    daemonDownFor: '2m',

    // The heartbeat record is written every second (--heartbeat-ms) and expires after three;
    // 30 s without a stored one means the daemon cannot reach Redis although it runs.
    heartbeatAgeSeconds: 30,
    heartbeatFor: '2m',

    // The daemon's Redis connection down: nothing is read or stored.
    redisDownFor: '1m',
    // Error replies from Redis (OOM, scripts failing, wrong types) never happen in a healthy
    // deployment: any sustained rate is worth a look.
    redisErrorsFor: '5m',

    // Refills that fail: a keeper dying once (the host short of memory) is retried at once;
    // more than 3 in 15 minutes on one host and template is a template that cannot be prepared.
    refillFailuresMax: 3,
  },
}
