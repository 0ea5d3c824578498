#!/usr/bin/env bash
# The mixin's own tests (ctest: monitoring_mixin): generated/ is what the jsonnet makes, promtool
# accepts the rules, every alert fires and stays quiet where tests/alerts_test.yaml says, and
# every metric the rules and the dashboard name is one docs/METRICS.md lists.
# The real-Prometheus test is tests/integration/test_monitoring.py.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/generate.sh" --check
promtool check rules "$here/generated/rules.yaml" "$here/generated/alerts.yaml"
promtool test rules "$here/tests/alerts_test.yaml"
/usr/bin/python3 "$here/tests/check_names.py"
