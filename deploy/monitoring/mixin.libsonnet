// sandpool's monitoring mixin: recording rules, alerts and a Grafana dashboard, from one source.
(import 'config.libsonnet') +
(import 'rules.libsonnet') +
(import 'alerts.libsonnet') +
(import 'dashboard.libsonnet')
