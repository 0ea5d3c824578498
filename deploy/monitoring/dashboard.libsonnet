// The Grafana dashboard: fleet overview, per template, per host, latency heatmap, outcomes,
// Redis. Every panel's query is built here from the recording rules' names (rules.libsonnet) or
// from a metric, never copied from a rule by hand. Variables: datasource, queue, template, host.
{
  local c = self._config,
  local rec = self.recording,
  local tpl = 'template=~"$template"',
  local host = 'instance=~"$host"',
  local queue = 'queue=~"$queue"',
  local q(rule, matchers) = '%s{%s}' % [rule.record, matchers],

  local target(expr, legend, format='time_series') = {
    expr: expr,
    legendFormat: legend,
    format: format,
  },
  local panel(title, unit, targets, type='timeseries') = {
    type: type,
    title: title,
    datasource: { type: 'prometheus', uid: '${datasource}' },
    fieldConfig: { defaults: { unit: unit }, overrides: [] },
    targets: targets,
  },
  local row(title) = { type: 'row', title: title, collapsed: false, panels: [] },

  local variable(name, label, query) = {
    name: name,
    label: label,
    type: 'query',
    datasource: { type: 'prometheus', uid: '${datasource}' },
    query: { query: query, refId: name },
    definition: query,
    refresh: 2,
    includeAll: true,
    allValue: '.*',
    multi: true,
    current: { text: 'All', value: '$__all' },
  },

  // [row, panels...] in reading order; grid positions are computed below.
  local sections = [
    ['Fleet overview', [
      panel('Jobs completed per second (fleet)', 'ops', [target(rec.fleetJobsRate.record, 'jobs/s')]),
      panel('Slot utilisation (busy / max)', 'percentunit', [target(rec.fleetUtilisation.record, 'fleet')]),
      panel('Oldest waiting job', 's', [target(q(rec.oldest, queue), '{{queue}}')]),
      panel('Backlog (lag + pending)', 'short', [target(q(rec.backlog, queue), '{{queue}}')]),
      panel('Daemons up', 'short', [target('sum(up{%s, %s})' % [c.selector, host], 'up')], 'stat'),
    ]],
    ['Per template', [
      panel('Jobs per second', 'ops', [target(q(rec.templateJobsRate, tpl), '{{template}}')]),
      panel('Schedule-to-start p50 / p99', 's', [
        target(q(rec.startP50, tpl), 'p50 {{template}}'),
        target(q(rec.startP99, tpl), 'p99 {{template}}'),
      ]),
      panel('Run time p50 / p99', 's', [
        target(q(rec.runP50, tpl), 'p50 {{template}}'),
        target(q(rec.runP99, tpl), 'p99 {{template}}'),
      ]),
      panel('Slots ready / busy / max', 'short', [
        target(q(rec.ready, tpl), 'ready {{template}}'),
        target(q(rec.busy, tpl), 'busy {{template}}'),
        target(q(rec.max, tpl), 'max {{template}}'),
      ]),
      panel('Utilisation', 'percentunit', [target(q(rec.templateUtilisation, tpl), '{{template}}')]),
      panel('Jobs waiting for a sandbox', 'short', [target(q(rec.waiting, tpl), '{{template}}')]),
      panel('Failure ratio (errors, lost workers, kills)', 'percentunit', [target(q(rec.failureRatio, tpl), '{{template}}')]),
      panel('Refill time p99', 's', [target(q(rec.prepareP99, tpl), '{{template}}')]),
    ]],
    ['Per host', [
      panel('Jobs per second', 'ops', [target('sum by (instance) (%s)' % q(rec.instanceJobsRate, '%s, %s' % [tpl, host]), '{{instance}}')]),
      panel('Utilisation', 'percentunit', [target(q(rec.instanceUtilisation, host), '{{instance}}')]),
      panel('Heartbeat age', 's', [target(q(rec.heartbeatAge, host), '{{instance}}')]),
      panel('Event loop lag p99', 's', [target(q(rec.loopLagP99, host), '{{instance}}')]),
    ]],
    ['Latency', [
      panel('Schedule-to-start heatmap', 's', [
        target('sum by (le) (%s)' % q(rec.startBuckets, tpl), '{{le}}', 'heatmap'),
      ], 'heatmap'),
    ]],
    ['Outcomes', [
      panel('Outcomes per second', 'ops', [target('sum by (outcome) (%s)' % q(rec.outcomeRate, tpl), '{{outcome}}')]),
    ]],
    ['Redis', [
      panel('Command round trip p99', 's', [target(q(rec.redisP99, host), '{{instance}}')]),
      panel('Error replies per second', 'ops', [target(q(rec.redisErrors, host), '{{instance}}')]),
      panel('Reconnects per second', 'ops', [target(q(rec.redisReconnects, host), '{{instance}}')]),
    ]],
  ],

  local width = 8,
  local height = 8,
  // Rows take one line; panels go three to a line under their row.
  local layout(sections) = std.foldl(function(acc, s)
    local rowY = acc.y;
    local panels = s[1];
    local placed = [
      panels[i] { gridPos: { x: (i % 3) * width, y: rowY + 1 + std.floor(i / 3) * height, w: width, h: height } }
      for i in std.range(0, std.length(panels) - 1)
    ];
    {
      y: rowY + 1 + std.ceil(std.length(panels) / 3) * height,
      panels: acc.panels + [row(s[0]) { gridPos: { x: 0, y: rowY, w: 24, h: 1 } }] + placed,
    }, sections, { y: 0, panels: [] }).panels,

  local numbered(panels) = [
    panels[i] { id: i + 1 } + (if std.objectHas(panels[i], 'targets')
                               then { targets: [panels[i].targets[k] { refId: std.char(65 + k) } for k in std.range(0, std.length(panels[i].targets) - 1)] }
                               else {})
    for i in std.range(0, std.length(panels) - 1)
  ],

  grafanaDashboards+:: {
    'sandpool-fleet.json': {
      uid: c.dashboardUid,
      title: c.dashboardTitle,
      tags: ['sandpool'],
      timezone: 'utc',
      schemaVersion: 36,
      refresh: '30s',
      time: { from: 'now-1h', to: 'now' },
      templating: {
        list: [
          { name: 'datasource', label: 'Data source', type: 'datasource', query: 'prometheus' },
          variable('queue', 'Queue', 'label_values(sandpool_queue_lag_entries{%s}, queue)' % c.selector),
          variable('template', 'Template', 'label_values(sandpool_pool_max_sandboxes{%s}, template)' % c.selector),
          variable('host', 'Host', 'label_values(up{%s}, instance)' % c.selector),
        ],
      },
      panels: numbered(layout(sections)),
    },
  },
}
