"""torch's own errors for misuses dplint knows, seen in a run at a line with no finding of that
rule: the static check missed them, and the report says so (runner side, no torch).

A load of a checkpoint that another script saved from a DataParallel, a sampler built in a way
the flow model does not follow: the run raises torch's error for the misuse (or verify records
it and goes past it), and the report names the rule instead of leaving the error unexplained.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from dplint.rule import Finding
from dplint.runtime_check.lines import statement_lines
from dplint.runtime_check.verdicts import RunView

PREFIX = "module."
ORIGINAL_LABEL = "original"
# torch's message -> the rule whose misuse it is (first match wins)
KNOWN_MESSAGES = (
    (re.compile(r"sampler option is mutually exclusive with shuffle"), "sampler-shuffle"),
    # the optimizer's own methods through the DataParallel that wraps it
    (re.compile(r"'(?:DistributedDataParallel|DataParallel)' object has no attribute "
                r"'(?:step|param_groups|add_param_group)'"), "optimizer-in-dataparallel"),
    (re.compile(r"'(?:DistributedDataParallel|DataParallel)' object has no attribute"), "attribute-through-wrapper"),
    (re.compile(r"object has no attribute 'module'"), "module-on-bare-model"),
    (re.compile(r'(?:Missing|Unexpected) key\(s\) in state_dict: "module\.'), "strip-module"),
)
# rules whose finding is where the wrapper is built, not where its error is raised
FLAGGED_ELSEWHERE = {"optimizer-in-dataparallel"}


@dataclass(frozen=True)
class Unflagged:
    line: int
    error: str  # torch's message, shortened
    rule: str  # the rule's slug
    code: str
    runs: tuple[str, ...]  # the labels of the runs that raised it

    def describe(self) -> str:
        runs = " and ".join(self.runs)
        return (f"line {self.line}: {self.error} ({runs} run) is torch's error for {self.rule} ({self.code}), "
                f"but dplint did not flag this line: the static check missed it")


def rule_for(message: str) -> Optional[str]:
    for pattern, rule in KNOWN_MESSAGES:
        if pattern.search(message):
            return rule
    return None


def errors_in(run: RunView) -> list[tuple[int, str, Optional[str]]]:
    """(line, message, rule) of every error a run raised or verify went past."""
    found = []
    for load in run.all("load"):
        # the load event has every key; a long message is cut before its `Unexpected key(s)`
        if load.get("error") and load.get("line") and (
            load.get("prefixed") or any(key.startswith(PREFIX) for key in load.get("missing", ()))
        ):
            found.append((load["line"], load["error"], "strip-module"))
    for event in [*run.recoveries(), *(end for end in run.ends if end["status"] == "error")]:
        if event.get("line") and event.get("error"):
            found.append((event["line"], event["error"], rule_for(event["error"])))
    return found


def unflagged_errors(text: str, findings: list[Finding], runs: dict[str, RunView]) -> list[Unflagged]:
    """torch's errors for known misuses at lines where no finding of the matching rule is."""
    from dplint.registry import all_rules

    codes = {rule.name: rule.code for rule in all_rules()}
    flagged: dict[str, list[range]] = {}
    for finding in findings:
        flagged.setdefault(finding.name, []).append(
            statement_lines(text, finding.location.row, finding.end_location.row))
    seen: dict[tuple[int, str], Unflagged] = {}
    for label, run in runs.items():
        if label != ORIGINAL_LABEL and run is runs.get(ORIGINAL_LABEL):
            continue  # no fix changed the script: the fixed run is the original one
        for line, message, rule in errors_in(run):
            if rule is None or rule not in codes:
                continue
            if rule in FLAGGED_ELSEWHERE and flagged.get(rule):
                continue
            lines = statement_lines(text, line)
            if any(set(lines) & set(covered) for covered in flagged.get(rule, ())):
                continue
            error = message if len(message) <= 160 else message[:157] + "..."
            key = (line, rule)
            before = seen.get(key)
            labels = before.runs if before else ()
            if label not in labels:
                labels = (*labels, label)
            seen[key] = Unflagged(line, before.error if before else error, rule, codes[rule], labels)
    return sorted(seen.values(), key=lambda item: (item.line, item.code))
