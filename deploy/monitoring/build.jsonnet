// The mixin's files: `jsonnet -S -m generated build.jsonnet` (generate.sh does it). `config`
// overrides _config (config.libsonnet), e.g. --tla-code 'config={oldestWaitingSeconds: 60}'.
function(config={})
  local mixin = (import 'mixin.libsonnet') + { _config+:: config };
  local yaml(v) = '# Generated from deploy/monitoring/*.libsonnet by generate.sh: edit those, not this.\n' +
                  std.manifestYamlDoc(v, indent_array_in_object=true, quote_keys=false) + '\n';
  {
    'rules.yaml': yaml(mixin.prometheusRules),
    'alerts.yaml': yaml(mixin.prometheusAlerts),
  } + {
    [name]: std.manifestJsonEx(mixin.grafanaDashboards[name], '  ') + '\n'
    for name in std.objectFields(mixin.grafanaDashboards)
  }
