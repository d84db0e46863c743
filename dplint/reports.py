"""What a run reports: each file's report, the whole run's, and the findings dplint makes about a
file itself rather than about its code (DPL000: unreadable or unparsable; DPL099: not analysed
in time).

Plain records, at the bottom of the house with `dplint.rule`'s findings: the runner makes
them, the cache stores and restores them, notebooks relocate their findings, and the
reporters (`dplint.reporters`) render them, all without importing one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from dplint.rule import Finding, Position, Severity
from dplint.source import AnalysisTimeout

PARSE_ERROR_CODE, PARSE_ERROR_NAME = "DPL000", "parse-error"
TIMEOUT_CODE, TIMEOUT_NAME = "DPL099", "analysis-timeout"


@dataclass
class FileReport:
    path: str
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # internal errors
    facts: dict = field(default_factory=dict)
    applied: list[Finding] = field(default_factory=list)  # fixes applied (fix mode)
    diff: str = ""  # unified diff of the fix (fix mode)
    fixed_text: Optional[str] = None  # for stdin
    fixed_bytes: Optional[bytes] = None  # for stdin: the fixed text in the input's encoding, its BOM kept
    dependencies: dict = field(default_factory=dict)  # other project files read: {path: hash}


@dataclass
class RunReport:
    files: list[FileReport]
    checked: int

    @property
    def findings(self) -> list[Finding]:
        return sorted((f for report in self.files for f in report.findings), key=lambda f: f.sort_key)

    @property
    def errors(self) -> list[str]:
        return [error for report in self.files for error in report.errors]

    @property
    def applied(self) -> list[Finding]:
        return [finding for report in self.files for finding in report.applied]


def problem_finding(path: str, message: str, code: str = PARSE_ERROR_CODE, name: str = PARSE_ERROR_NAME) -> Finding:
    """A finding about the file itself (unreadable, unparsable, not analysed), at its start."""
    location = Position(1, 1)
    return Finding(code, name, message, Severity.ERROR, path, location, location)


def timeout_finding(path: str, timeout: AnalysisTimeout) -> Finding:
    """The one finding of a file whose analysis ran out of time: nothing in it was checked."""
    where = f" in {timeout.stage}" if timeout.stage else ""
    message = (f"analysis stopped after {timeout.seconds:g} s{where}: nothing in this file was checked "
               f"(raise `analysis-timeout` in the configuration, or `--analysis-timeout`, to allow more)")
    return problem_finding(path, message, TIMEOUT_CODE, TIMEOUT_NAME)


def cacheable(report: FileReport) -> bool:
    """Whether the report is the file's result (not an internal error, not a stopped analysis,
    whose next run may have more time)."""
    return not report.errors and not any(finding.code == TIMEOUT_CODE for finding in report.findings)
