"""Every .py file of some checkouts, checked one by one as pre-commit names them (single-file
mode, from the checkout's root): how long each takes, which ran out of the per-file budget
(DPL099), which hit an internal error. A measurement, not a test.

    python tests/benchmarks/single_files.py CHECKOUTS_DIR [--jobs 2] [--limit N] [--out results.jsonl]

Each file is checked in-process with `dplint.runner.run([file], settings)`, which is what the
command runs (a fresh project per run), so thousands of files need no thousand interpreters."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor


def check_checkout(args: tuple[str, int]) -> list[dict]:
    checkout, limit = args
    from dplint import runner
    from dplint.config import Settings

    os.chdir(checkout)
    files = sorted(os.path.relpath(os.path.join(folder, name), checkout)
                   for folder, _, names in os.walk(checkout) for name in names if name.endswith(".py"))
    rows = []
    for path in files[:limit] if limit else files:
        started = time.perf_counter()
        try:
            report = runner.run([path], Settings(root=checkout), jobs=1)
            codes = [finding.code for finding in report.findings]
            errors = report.errors
        except BaseException as error:  # noqa: BLE001 - a crash of the run is what this looks for
            codes, errors = [], [f"run crashed: {type(error).__name__}: {error}"]
        rows.append({"checkout": os.path.basename(checkout), "path": path, "seconds": round(time.perf_counter() - started, 3),
                     "timeouts": codes.count("DPL099"), "findings": len(codes), "errors": errors})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkouts")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="files per checkout (0: all)")
    parser.add_argument("--out", default="single_files.jsonl")
    options = parser.parse_args()
    checkouts = sorted(os.path.join(options.checkouts, name) for name in os.listdir(options.checkouts)
                       if os.path.isdir(os.path.join(options.checkouts, name)))
    rows: list[dict] = []
    started = time.perf_counter()
    with ProcessPoolExecutor(options.jobs) as pool, open(options.out, "w") as out:
        for found in pool.map(check_checkout, [(checkout, options.limit) for checkout in checkouts]):
            rows.extend(found)
            out.writelines(json.dumps(row) + "\n" for row in found)
            out.flush()
    slowest = max(rows, key=lambda row: row["seconds"]) if rows else None
    print(f"{len(rows)} files in {len(checkouts)} checkouts, {time.perf_counter() - started:.0f} s wall")
    print(f"timed out (DPL099): {sum(1 for row in rows if row['timeouts'])}; "
          f"internal errors: {sum(1 for row in rows if row['errors'])}")
    if slowest:
        print(f"slowest: {slowest['checkout']}/{slowest['path']} {slowest['seconds']:.2f} s")
    over = sorted(rows, key=lambda row: -row["seconds"])[:10]
    for row in over:
        print(f"  {row['seconds']:7.2f} s  {row['checkout']}/{row['path']}")
    for row in rows:
        for error in row["errors"][:1]:
            print(f"  error: {row['checkout']}/{row['path']}: {error}"[:300], file=sys.stderr)


if __name__ == "__main__":
    main()
