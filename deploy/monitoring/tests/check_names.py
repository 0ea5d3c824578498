"""Every series name the generated rules and dashboard query is a metric docs/METRICS.md lists,
`up`, or a recording rule of the mixin: a renamed metric cannot leave a rule querying nothing."""

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE.parents[1] / "tests" / "support"))
from metrics_table import documented  # noqa: E402

FUNCTIONS = {"sum", "max", "min", "rate", "increase", "deriv", "histogram_quantile", "time", "by", "on", "and",
             "label_values", "up"}


def names(expr: str):
    expr = re.sub(r'"[^"]*"', '""', expr)        # label values
    expr = re.sub(r"\{[^}]*\}", "", expr)         # matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)        # ranges
    expr = re.sub(r"by \([^)]*\)|on \([^)]*\)", "", expr)
    expr = re.sub(r",\s*[a-z_]+\)", ")", expr)      # label_values(metric, label)
    return set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr)) - FUNCTIONS


def main() -> int:
    metrics = set(documented())
    series = metrics | {m + s for m in metrics for s in ("_bucket", "_sum", "_count")}
    rules = re.findall(r'^\s+(?:- )?record: "([^"]+)"', (HERE / "generated/rules.yaml").read_text(), re.M)
    exprs = [json.loads(e) for e in re.findall(r'^\s+(?:- )?expr: ("(?:[^"\\]|\\.)*")', (HERE / "generated/rules.yaml").read_text()
                                                + (HERE / "generated/alerts.yaml").read_text(), re.M)]
    dash = json.loads((HERE / "generated/sandpool-fleet.json").read_text())
    exprs += [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    assert rules and exprs, "nothing parsed from generated/"
    unknown = {n for e in exprs for n in names(e)} - series - set(rules)
    if unknown:
        print("queried but neither a metric in docs/METRICS.md nor a recording rule:", sorted(unknown))
        return 1
    print(f"check_names: {len(exprs)} queries name only known series")
    return 0


if __name__ == "__main__":
    sys.exit(main())
