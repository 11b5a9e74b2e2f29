"""Where the test suite's time goes, from the durations pytest prints.

    make test PYTEST_ARGS="--durations=0" | tee test.log
    .venv/bin/python scripts/test_costs.py test.log        # per module, costliest first
    .venv/bin/python scripts/test_costs.py test.log --write tests/module_costs.json

Sums each module's setup, call and teardown seconds (worker seconds: with `-n 2` the suite's wall
time is about half their total) and counts its tests; docs/tests.md records a run of it. With
--write, the seconds per module go to the file tests/conftest.py orders the suite by (costliest
module first, as pytest-split's stored durations do), so neither worker finishes a long module
alone at the end; a stale file costs only balance.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict

LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(tests/[^:]+)::(\S+)")


def costs(lines: list[str]) -> dict[str, dict[str, float]]:
    """module -> {"setup", "call", "teardown", "tests", "total"} from `--durations` lines."""
    table: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    seen: set[str] = set()
    for line in lines:
        match = LINE.match(line)
        if match is None:
            continue
        seconds, phase, module, test = float(match[1]), match[2], match[3], match[4]
        row = table[module]
        row[phase] += seconds
        row["total"] += seconds
        if (module, test) not in seen:
            seen.add((module, test))
            row["tests"] += 1
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", help="pytest's output with --durations=0")
    parser.add_argument("--write", metavar="JSON", help="also write {module: seconds} here")
    args = parser.parse_args()
    with open(args.log) as f:
        table = costs(f.readlines())
    ranked = sorted(table.items(), key=lambda kv: -kv[1]["total"])
    if args.write:
        with open(args.write, "w") as f:
            json.dump({module: round(row["total"], 1) for module, row in ranked}, f, indent=1)
            f.write("\n")
    total = sum(row["total"] for row in table.values())
    print("| module | tests | setup s | call s | share |\n|---|---:|---:|---:|---:|")
    for module, row in ranked:
        share = row["total"] / total
        print(f"| {module} | {row['tests']:.0f} | {row['setup']:.0f} | {row['call']:.0f} | {share:.1%} |")
    print(f"\n{total:.0f} worker seconds over {sum(r['tests'] for r in table.values()):.0f} tests")


if __name__ == "__main__":
    main()
