"""Score dplint on labelled public repositories (the real-world benchmark).

Usage:
    python tests/realworld/score.py --checkouts DIR [--dplint CMD] [--manifest F ...]
    python tests/realworld/score.py --checkouts DIR --list-unjudged

DIR holds one folder per repository, named ``owner__name@commit10``, with the
repository's files at that commit (see checkout.sh).  For each folder that the
manifest names, dplint runs once at the folder's root, the way a user runs it
(``dplint check --output-format json --exit-zero --no-cache .``), so findings
that need several files count.

Matching: a finding matches a row when the rule slug and the path agree and its
line is within 2 lines of one of the row's ``lines`` (the nearest rows win when
several qualify); a ``clean`` row with no lines covers the whole file.  A matched ``flag`` row is a true positive, an
unmatched one a false negative; a finding on a ``clean`` row is a false
positive.  Findings on a (path, rule) pair that no row judges are listed as
unjudged and not counted, so that judging stays complete.  Rows marked
``ambiguous`` are reported apart and not counted.

Every count is also kept per part of the blind split (split.py): "developed on" and "blind"
figures are printed side by side, per rule and overall.  Blind rows are scored only to be
reported; see README.md, "Blind split".
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from split import BLIND, DEVELOPED, part_of  # noqa: E402

sys.path.remove(str(HERE))
DEFAULT_MANIFESTS = [HERE / "cases.jsonl"]
LINE_SLACK = 2


def load_rows(paths):
    """Rows of every manifest file that exists, in order; duplicates kept once."""
    rows, seen = [], set()
    for path in paths:
        path = Path(path)
        if not path.exists():
            continue
        for number, text in enumerate(path.read_text().splitlines(), 1):
            if not text.strip():
                continue
            row = json.loads(text)
            key = (row["repo"], row["commit"], row["path"], row["rule"],
                   row["expect"], tuple(row["lines"]))
            if key in seen:
                continue
            seen.add(key)
            row["_where"] = f"{path.name}:{number}"
            rows.append(row)
    return rows


def folder_name(repo, commit):
    return f"{repo.replace('/', '__')}@{commit[:10]}"


class DplintFailed(Exception):
    """dplint exited with an error (not findings: --exit-zero) in one checkout."""


def run_dplint(dplint_cmd, folder, internal_errors=None):
    """dplint's findings at a checkout's root, as (path, slug, line, message); the internal
    errors it printed (a rule that crashed on a file) are appended to `internal_errors`."""
    command = shlex.split(dplint_cmd) + [
        "check", "--output-format", "json", "--exit-zero", "--no-cache", "."]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise DplintFailed(f"dplint failed in {folder}: {done.stderr.strip().splitlines()[-1:]}")
    if internal_errors is not None:
        internal_errors.extend(f"{Path(folder).name}/{line}" for line in done.stderr.splitlines()
                               if "internal error" in line)
    findings = []
    for item in json.loads(done.stdout or "[]"):
        path = Path(item["filename"])
        if path.is_absolute():
            path = path.relative_to(Path(folder).resolve())
        findings.append((path.as_posix().removeprefix("./"), item["name"],
                         item["location"]["row"], item["message"]))
    return findings


def distance(row, line):
    """How far a finding is from a row's lines; None when the row does not cover it."""
    if not row["lines"]:
        return LINE_SLACK + 1 if row["expect"] == "clean" else None  # whole file: weakest match
    gap = min(abs(line - wanted) for wanted in row["lines"])
    return gap if gap <= LINE_SLACK else None


def score_folder(rows, findings):
    """Per-rule counts and the listed outcomes for one checkout's rows."""
    by_key = defaultdict(list)
    for row in rows:
        by_key[(row["path"], row["rule"])].append(row)
    counts = defaultdict(lambda: {"tp": 0, "fp": 0, "fn": 0})
    events = {"tp": [], "fp": [], "fn": [], "unjudged": [], "ambiguous": []}
    hit_rows = set()
    for path, rule, line, message in findings:
        near = [(distance(r, line), r) for r in by_key.get((path, rule), [])]
        near = [(gap, r) for gap, r in near if gap is not None]
        # The nearest rows judge the finding, so rows on neighbouring lines do not overlap.
        candidates = [r for gap, r in near if gap == min(g for g, _ in near)] if near else []
        if not candidates:
            events["unjudged"].append((path, rule, line, message))
            continue
        for row in candidates:
            hit_rows.add(id(row))
        judged = [r for r in candidates if not r.get("ambiguous")]
        if not judged:
            events["ambiguous"].append((candidates[0], line, "reported"))
        elif any(r["expect"] == "flag" for r in judged):
            pass  # counted once per flag row below
        else:
            counts[rule]["fp"] += 1
            events["fp"].append((judged[0], line))
    for row in rows:
        if row["expect"] != "flag":
            continue
        if row.get("ambiguous"):
            if id(row) not in hit_rows:
                events["ambiguous"].append((row, None, "silent"))
            continue
        if id(row) in hit_rows:
            counts[row["rule"]]["tp"] += 1
            events["tp"].append(row)
        else:
            counts[row["rule"]]["fn"] += 1
            events["fn"].append(row)
    return counts, events


def ratio(num, den):
    return num / den if den else float("nan")


PARTS = (DEVELOPED, BLIND)


def split_table(totals_by_part):
    """The per-rule table with the developed-on and blind figures side by side, and one
    summary line per part; `totals_by_part[part][rule]` holds tp/fp/fn counts."""
    def cells(c):
        return (f"{c['tp']:>4} {c['fp']:>4} {c['fn']:>4} "
                f"{ratio(c['tp'], c['tp'] + c['fp']):>5.2f} {ratio(c['tp'], c['tp'] + c['fn']):>5.2f}")

    head = f"{'tp':>4} {'fp':>4} {'fn':>4} {'prec':>5} {'rec':>5}"
    lines = [f"{'':28} {'developed on':^28} | {'blind':^28}", f"{'rule':28} {head} | {head}"]
    rules = sorted({rule for part in PARTS for rule in totals_by_part.get(part, {})})
    overall = {part: {"tp": 0, "fp": 0, "fn": 0} for part in PARTS}
    empty = {"tp": 0, "fp": 0, "fn": 0}
    for rule in rules:
        row = [totals_by_part.get(part, {}).get(rule, empty) for part in PARTS]
        for part, c in zip(PARTS, row):
            for k in overall[part]:
                overall[part][k] += c[k]
        lines.append(f"{rule:28} {cells(row[0])} | {cells(row[1])}")
    lines.append(f"{'all':28} {cells(overall[DEVELOPED])} | {cells(overall[BLIND])}")
    summary = [f"realworld {part}: precision {ratio(c['tp'], c['tp'] + c['fp']):.2f} "
               f"recall {ratio(c['tp'], c['tp'] + c['fn']):.2f} ({c['tp']}/{c['fp']}/{c['fn']})"
               for part, c in overall.items()]
    return lines, summary


def describe(row):
    lines = ",".join(map(str, row["lines"])) or "whole file"
    return f"{row['repo']}@{row['commit'][:10]} {row['path']}:{lines} {row['rule']}: {row['note']}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkouts", required=True, type=Path)
    parser.add_argument("--dplint", default="dplint", help="command that runs dplint")
    parser.add_argument("--manifest", action="append", type=Path,
                        help="manifest file(s); default cases.jsonl")
    parser.add_argument("--list-unjudged", action="store_true",
                        help="only list findings that no row judges, as path:line rule message")
    parser.add_argument("--quiet", action="store_true", help="no per-case lists")
    parser.add_argument("--only", metavar="TEXT", help="score only checkouts whose folder name contains TEXT")
    args = parser.parse_args(argv)

    rows = load_rows(args.manifest or DEFAULT_MANIFESTS)
    by_folder = defaultdict(list)
    for row in rows:
        name = folder_name(row["repo"], row["commit"])
        if not args.only or args.only in name:
            by_folder[name].append(row)

    started = time.perf_counter()
    totals = defaultdict(lambda: {"tp": 0, "fp": 0, "fn": 0})
    totals_by_part = {part: defaultdict(lambda: {"tp": 0, "fp": 0, "fn": 0}) for part in PARTS}
    listed = {"tp": [], "fp": [], "fn": [], "unjudged": [], "ambiguous": []}
    missing, failed, internal = [], [], []
    for name in sorted(by_folder):
        folder = args.checkouts / name
        if not folder.is_dir():
            missing.append(name)
            continue
        try:
            findings = run_dplint(args.dplint, folder, internal)
        except DplintFailed as error:
            failed.append(str(error))
            continue
        counts, events = score_folder(by_folder[name], findings)
        part = part_of(by_folder[name][0]["repo"])
        for rule, c in counts.items():
            for k in c:
                totals[rule][k] += c[k]
                totals_by_part[part][rule][k] += c[k]
        for k in listed:
            listed[k].extend((name, e) for e in events[k])
    elapsed = time.perf_counter() - started

    if args.list_unjudged:
        for name, (path, rule, line, message) in listed["unjudged"]:
            print(f"{name}/{path}:{line} {rule}: {message}")
        return 0

    if missing:
        print(f"missing checkouts ({len(missing)}): " + " ".join(missing))
    for error in failed:
        print(error)
    for error in internal:
        print(f"INTERNAL {error}")
    if not args.quiet:
        for name, (row, line) in listed["fp"]:
            print(f"FP  line {line}: {describe(row)}")
        for name, row in listed["fn"]:
            print(f"FN  {describe(row)}")
        for name, (row, line, how) in listed["ambiguous"]:
            print(f"AMBIGUOUS ({how}{'' if line is None else f' at {line}'}): {describe(row)}")
        for name, (path, rule, line, message) in listed["unjudged"]:
            print(f"UNJUDGED {name}/{path}:{line} {rule}")
    print(f"\n{'rule':28} {'tp':>4} {'fp':>4} {'fn':>4} {'precision':>9} {'recall':>7}")
    tp = fp = fn = 0
    for rule in sorted(totals):
        c = totals[rule]
        tp, fp, fn = tp + c["tp"], fp + c["fp"], fn + c["fn"]
        print(f"{rule:28} {c['tp']:>4} {c['fp']:>4} {c['fn']:>4} "
              f"{ratio(c['tp'], c['tp'] + c['fp']):>9.2f} {ratio(c['tp'], c['tp'] + c['fn']):>7.2f}")
    split_lines, split_summary = split_table(totals_by_part)
    print()
    print("\n".join(split_lines))
    scored = [name for name in by_folder if name not in missing and not any(name in e for e in failed)]
    print(f"\nrepositories {len({name.split('@')[0] for name in scored})} "
          f"({len(scored)} checkouts), rows {sum(len(by_folder[n]) for n in scored)}, "
          f"unjudged findings {len(listed['unjudged'])}, ambiguous rows "
          f"{sum(1 for n in scored for r in by_folder[n] if r.get('ambiguous'))}, {elapsed:.1f} s")
    print("\n".join(split_summary))
    print(f"realworld: precision {ratio(tp, tp + fp):.2f} recall {ratio(tp, tp + fn):.2f} "
          f"({tp}/{fp}/{fn})" + (f"; {len(internal)} internal errors" if internal else ""))
    return 1 if failed or missing or internal else 0


if __name__ == "__main__":
    sys.exit(main())
