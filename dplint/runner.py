"""One run over many files: discover, read, lint or fix each (in parallel when it pays), cache,
then the project-wide checks that link files (a checkpoint saved in one, loaded in another).

Nothing here imports LibCST at module level: a run whose files all come from the cache, or
are skipped by the pre-filter, never loads it.
"""

from __future__ import annotations

import difflib
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

from dplint.config import Settings, is_excluded
from dplint.discovery import discover
from dplint.rule import Finding, Position, Severity
from dplint.source import SourceError, decode, read_source, write_atomic

PARALLEL_THRESHOLD = 8  # below this many files a process pool costs more than it saves


@dataclass(frozen=True)
class FixOptions:
    unsafe: bool = False
    only_codes: Optional[frozenset[str]] = None  # --rule
    write: bool = True  # False with --diff


@dataclass
class FileReport:
    path: str
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # internal errors
    facts: dict = field(default_factory=dict)
    applied: list[Finding] = field(default_factory=list)  # fixes applied (fix mode)
    diff: str = ""  # unified diff of the fix (fix mode)
    fixed_text: Optional[str] = None  # for stdin


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


def problem_finding(path: str, message: str) -> Finding:
    location = Position(1, 1)
    return Finding("DPL000", "parse-error", message, Severity.ERROR, path, location, location)


def process_text(text: str, path: str, settings: Settings, fix: Optional[FixOptions]) -> FileReport:
    from dplint.engine import fix_source, lint_source, rules_for

    rules = rules_for(settings.enabled_codes(path))
    report = FileReport(path)
    if fix is None:
        result = lint_source(text, path, rules)
        report.findings, report.errors, report.facts = result.findings, result.errors, result.facts
        return report
    fixed = fix_source(text, path, rules, unsafe=fix.unsafe, only_codes=fix.only_codes)
    report.findings, report.errors, report.facts = fixed.remaining.findings, fixed.remaining.errors, fixed.remaining.facts
    report.applied = fixed.applied
    if fixed.text != text:
        report.fixed_text = fixed.text
        report.diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True), fixed.text.splitlines(keepends=True), path, path
            )
        )
    return report


def process_file(path: str, settings: Settings, fix: Optional[FixOptions]) -> FileReport:
    try:
        source = read_source(path)
    except SourceError as error:
        return FileReport(path, [problem_finding(path, str(error))])
    report = process_text(source.text, path, settings, fix)
    if fix is not None and fix.write and report.fixed_text is not None:
        try:
            if read_source(path).raw != source.raw:
                report.errors.append(f"{path}: changed while being fixed; left as it is")
                report.applied = []
            else:
                write_atomic(path, report.fixed_text.encode(source.encoding))
        except (OSError, SourceError) as error:
            report.errors.append(f"{path}: cannot write the fix: {getattr(error, 'strerror', None) or error}; the file is unchanged")
            report.applied = []
    return report


def _process_star(args) -> FileReport:
    return process_file(*args)


def run(
    paths: list[str],
    settings: Settings,
    fix: Optional[FixOptions] = None,
    jobs: Optional[int] = None,
    cache_dir: Optional[str] = None,
    force_exclude: bool = False,
) -> RunReport:
    files, problems = discover(paths)
    explicit = {os.path.normpath(p) for p in paths}
    files = [
        f for f in files
        if not is_excluded(f, settings) or (f in explicit and not force_exclude)
    ]
    reports: dict[str, FileReport] = {p.path: FileReport(p.path, [problem_finding(p.path, p.message)]) for p in problems}

    cache = None
    if cache_dir is not None and fix is None:
        from dplint.cache import Cache

        cache = Cache(cache_dir, settings)
    todo = []
    for path in files:
        cached = cache.get(path) if cache else None
        if cached is not None:
            reports[path] = cached
        else:
            todo.append(path)

    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and len(todo) >= PARALLEL_THRESHOLD:
        import multiprocessing

        context = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=context) as pool:
            chunk = max(1, len(todo) // (jobs * 4))
            done = list(pool.map(_process_star, [(p, settings, fix) for p in todo], chunksize=chunk))
    else:
        done = [process_file(p, settings, fix) for p in todo]
    for report in done:
        reports[report.path] = report
        if cache is not None and not report.errors:
            cache.put(report.path, report)
    if cache is not None:
        cache.save()

    ordered = [reports[path] for path in sorted(reports)]
    add_project_findings(ordered, settings)
    return RunReport(ordered, len(files))


def add_project_findings(reports: list[FileReport], settings: Settings) -> None:
    """Run the rules' project-wide checks over the facts every file reported."""
    codes_with_facts = {code for report in reports for code in report.facts}
    if not codes_with_facts:
        return
    from dplint.registry import all_rules

    by_path = {report.path: report for report in reports}
    for rule in all_rules():
        if rule.code not in codes_with_facts:
            continue
        facts = {report.path: report.facts[rule.code] for report in reports if rule.code in report.facts}
        for finding in rule.check_project(facts):
            report = by_path.get(finding.filename)
            if report is not None and finding.code in settings.enabled_codes(finding.filename):
                report.findings.append(finding)
                report.findings.sort(key=lambda f: f.sort_key)


def process_stdin(data: bytes, display_path: str, settings: Settings, fix: Optional[FixOptions]) -> FileReport:
    try:
        text, _ = decode(data)
    except SourceError as error:
        return FileReport(display_path, [problem_finding(display_path, str(error))])
    return process_text(text, display_path, settings, fix)
