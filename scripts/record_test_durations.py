#!/usr/bin/env python
"""Record how long each test file took, for the order in which `make test` hands files to its workers.

    scripts/record_test_durations.py fast build/fast.xml   # a JUnit report of the fast tier
    scripts/record_test_durations.py slow ci.log           # or pytest's --durations lines, as `make test` prints

rewrites that tier's part of tests/durations.json. tests/conftest.py's scheduler gives the
longest files of the tier out first (longest processing time first), so that no long file starts
last while the other worker idles. A file the record does not name counts 0.05 s a test. The
record only orders the work: a stale one costs time, never a result.
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

RECORD = Path(__file__).resolve().parents[1] / "tests" / "durations.json"
TIERS = ("fast", "slow")
DURATION_LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(tests/[^:]+\.py)::")


def file_seconds(report: Path) -> dict[str, float]:
    """Seconds per test file (setup, call and teardown) in a JUnit XML report or in --durations lines."""
    seconds: dict[str, float] = defaultdict(float)
    if report.suffix == ".xml":
        for case in ET.parse(report).getroot().iter("testcase"):
            parts = [p for p in case.get("classname", "").split(".") if p]  # tests.test_x[.TestClass]
            if len(parts) >= 2 and parts[1].startswith("test_"):
                seconds[f"{parts[0]}/{parts[1]}.py"] += float(case.get("time", 0))
    else:
        for line in report.read_text().splitlines():
            if match := DURATION_LINE.match(line):
                seconds[match[3]] += float(match[1])
    return seconds


def main(args: list[str]) -> int:
    if len(args) < 2 or args[0] not in TIERS:
        print(__doc__, file=sys.stderr)
        return 2
    record = json.loads(RECORD.read_text()) if RECORD.is_file() else {}
    tier: dict[str, float] = {}
    for report in args[1:]:
        for name, s in file_seconds(Path(report)).items():
            tier[name] = tier.get(name, 0.0) + s
    record[args[0]] = {name: round(s, 1) for name, s in sorted(tier.items(), key=lambda kv: -kv[1])}
    RECORD.write_text(json.dumps({t: record.get(t, {}) for t in TIERS}, indent=1) + "\n")
    print(f"{RECORD}: {args[0]}, {len(tier)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
