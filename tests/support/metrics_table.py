"""docs/METRICS.md's table and a Prometheus text exposition, as data, so tests can compare them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Set, Tuple

REPO = Path(__file__).resolve().parents[2]
METRICS_MD = REPO / "docs" / "METRICS.md"

_ROW = re.compile(r"^\|\s*`(sandpool_[a-z0-9_]+)`\s*\|\s*([a-z]+)\s*\|([^|]*)\|")


def on_first_use(path: Path = METRICS_MD) -> Set[str]:
    """The families the table says have no series until something uses them."""
    return {m.group(1) for m in map(_ROW.match, path.read_text().splitlines())
            if m and "(series on first use)" in m.string}


def documented(path: Path = METRICS_MD) -> Dict[str, Tuple[str, Set[str]]]:
    """{family name: (type, {label names})} from the table's rows."""
    out: Dict[str, Tuple[str, Set[str]]] = {}
    for line in path.read_text().splitlines():
        m = _ROW.match(line)
        if m:
            name, kind, labels = m.group(1), m.group(2), m.group(3)
            assert name not in out, f"{name} is listed twice in {path}"
            out[name] = (kind, set(re.findall(r"`([a-z_]+)`", labels)))
    return out


def exported(text: str) -> Dict[str, Tuple[str, Set[str]]]:
    """{family name: (type, {label names seen on its series})} from a /metrics body. A family
    with no series yet has an empty label set."""
    types: Dict[str, str] = {}
    labels: Dict[str, Set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            labels.setdefault(name, set())
            continue
        if not line or line.startswith("#"):
            continue
        series = line.split(" ", 1)[0]
        name, _, rest = series.partition("{")
        family = name
        if family not in types:
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in types:
                    family = name[: -len(suffix)]
        assert family in types, f"series {series} has no # TYPE line"
        names = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', rest))
        names.discard("le")
        labels[family] |= names
    return {n: (types[n], labels[n]) for n in types}
