"""Do two dplint builds find exactly the same things on real repositories?

    python tests/benchmarks/same_findings.py record BEFORE_DIR [--python PY] [--pythonpath DIR] CHECKOUT...
    python tests/benchmarks/same_findings.py compare BEFORE_DIR AFTER_DIR

`record` runs `dplint check --output-format json --no-cache --exit-zero .` inside each checkout
(as a user checks a repository whole) and stores the findings, one JSON file per checkout, with
the CPU seconds the run took (user + system, all processes). `compare` prints, per checkout,
whether both sides found the same findings (every field: code, place, message, fix) and the
CPU ratio, and exits 1 on any difference.

A speed-up must not change a finding: run `record` before a change (`--pythonpath` pointing at a
copy of the old `dplint` package is enough), `record` again after it, then `compare`.
Not a test: pytest does not collect it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path


def record(out: Path, checkouts: list[str], python: str, pythonpath: str | None, jobs: int | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    for checkout in checkouts:
        folder = Path(checkout).resolve()
        command = [python, "-m", "dplint", "check", "--output-format", "json", "--no-cache", "--exit-zero", "."]
        if jobs:
            command += ["--jobs", str(jobs)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = subprocess.run(command, cwd=folder, capture_output=True, text=True, env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        if result.returncode not in (0, 1):
            print(f"{folder.name}: dplint failed ({result.returncode}): {result.stderr[-1000:]}", file=sys.stderr)
            continue
        findings = sorted(json.loads(result.stdout), key=lambda f: json.dumps(f, sort_keys=True))
        stored = {"checkout": folder.name, "cpu": round(cpu, 2), "stderr": result.stderr, "findings": findings}
        (out / f"{folder.name}.json").write_text(json.dumps(stored, indent=1, sort_keys=True), encoding="utf-8")
        print(f"{folder.name}: {len(findings)} findings, {cpu:.2f} s CPU", flush=True)


def compare(before: Path, after: Path) -> int:
    differ = 0
    for old_file in sorted(before.glob("*.json")):
        new_file = after / old_file.name
        if not new_file.exists():
            print(f"{old_file.stem}: missing after")
            differ += 1
            continue
        old, new = (json.loads(p.read_text(encoding="utf-8")) for p in (old_file, new_file))
        same = old["findings"] == new["findings"] and old["stderr"] == new["stderr"]
        differ += not same
        ratio = new["cpu"] / old["cpu"] if old["cpu"] else float("nan")
        print(f"{old_file.stem}: {len(old['findings'])} -> {len(new['findings'])} findings, "
              f"{'same' if same else 'DIFFERENT'}; CPU {old['cpu']:.2f} -> {new['cpu']:.2f} s ({ratio:.2f}x)")
        if not same:
            gone = [f for f in old["findings"] if f not in new["findings"]]
            added = [f for f in new["findings"] if f not in old["findings"]]
            for label, items in (("only before", gone), ("only after", added)):
                for f in items[:10]:
                    print(f"    {label}: {f['filename']}:{f['location']['row']}:{f['location']['column']} {f['code']} {f['message'][:80]}")
            if old["stderr"] != new["stderr"]:
                print(f"    stderr differs: {old['stderr'][-300:]!r} vs {new['stderr'][-300:]!r}")
    print("ALL SAME" if not differ else f"{differ} checkout(s) differ")
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record")
    rec.add_argument("out")
    rec.add_argument("checkouts", nargs="+")
    rec.add_argument("--python", default=sys.executable)
    rec.add_argument("--pythonpath", default=None)
    rec.add_argument("--jobs", type=int, default=None)
    cmp_ = commands.add_parser("compare")
    cmp_.add_argument("before")
    cmp_.add_argument("after")
    args = parser.parse_args()
    if args.command == "record":
        record(Path(args.out), args.checkouts, args.python, args.pythonpath, args.jobs)
    else:
        sys.exit(compare(Path(args.before), Path(args.after)))


if __name__ == "__main__":
    main()
