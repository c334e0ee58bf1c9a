#!/usr/bin/env python
"""Record how long each test file took, for the order in which `make test` hands files to its workers.

    python -m pytest -m "not slow" -n 2 --dist loadfile --junitxml=build/fast.xml
    scripts/record_test_durations.py build/fast.xml [more.xml ...]   # rewrites tests/durations.json

tests/conftest.py's scheduler gives the longest files out first (longest processing time first),
so that no long file starts last while the other worker idles. A file the record does not name
counts 0.05 s a test. The record only orders the work: a stale one costs time, never a result.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

RECORD = Path(__file__).resolve().parents[1] / "tests" / "durations.json"


def file_seconds(report: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown of its tests) in a JUnit XML report."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        # classname is "tests.test_x" or "tests.test_x.TestClass"
        parts = [p for p in module if p]
        if len(parts) >= 2 and parts[1].startswith("test_"):
            seconds[f"{parts[0]}/{parts[1]}.py"] += float(case.get("time", 0))
    return seconds


def main(reports: list[str]) -> int:
    if not reports:
        print(__doc__, file=sys.stderr)
        return 2
    record = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    for report in reports:
        record.update({name: round(s, 1) for name, s in file_seconds(Path(report)).items()})
    RECORD.write_text(json.dumps(dict(sorted(record.items(), key=lambda kv: -kv[1])), indent=1) + "\n")
    print(f"{RECORD}: {len(record)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
