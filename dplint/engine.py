"""The engine: parse once, build the semantic model once, run the rules, apply fixes in rounds.

LibCST is imported here, so the CLI imports this module only when a file needs parsing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import libcst as cst

from dplint.fast_cst import parse_module
from dplint.registry import all_rules
from dplint.rule import (
    Applicability,
    Edit,
    EditKind,
    Finding,
    Position,
    Rule,
    TextEdit,
    Violation,
    rule_may_match,
    token_parts,
    tokens_in,
)
from dplint.flow import analysed
from dplint.semantic import SemanticModel
from dplint.project import owns
from dplint.reports import PARSE_ERROR_CODE, PARSE_ERROR_NAME
from dplint.source import LINE_BREAK, call_with_deep_stack, line_starts, python_syntax_error, refused_by_every_python, scanned_text, set_stage
from dplint.suppressions import apply_suppressions

MAX_FIX_ROUNDS = 10


class InternalError(Exception):
    """dplint itself failed on a file (a rule crashed, a fix produced invalid code)."""


@dataclass
class LintResult:
    findings: list[Finding] = field(default_factory=list)
    facts: dict = field(default_factory=dict)  # rule code -> JSON-able facts for project checks
    errors: list[str] = field(default_factory=list)  # internal errors, one line each
    # Other project files the analysis read ({path: content hash}): the cache checks them.
    dependencies: dict = field(default_factory=dict)


def rules_for(codes: Iterable[str]) -> list[Rule]:
    wanted = set(codes)
    return [rule() for rule in all_rules() if rule.code in wanted]


def could_match(text: str, rule: Rule, own: Optional[str] = None) -> bool:
    """The pre-filter: can this rule possibly fire on this text (with `own`, the file's own
    text when `text` adds its import closure: `Rule.anchor_tokens`)? Never parses."""
    return rule_may_match(text, rule, own)


def parse_error_finding(path: str, message: str, row: int = 1, column: int = 1) -> Finding:
    from dplint.rule import Severity

    location = Position(row, column)
    return Finding(PARSE_ERROR_CODE, PARSE_ERROR_NAME, message, Severity.ERROR, path, location, location)


def lint_source(text: str, path: str, rules: Sequence[Rule], project=None) -> LintResult:
    """Lint one file's text. Never raises for bad input: a syntax error becomes DPL000.

    With a `project` (`dplint.project.Project`), values are followed into the project files
    this one imports, and the pre-filter reads their text too (a loader built by an imported
    helper makes a file without the word `DistributedSampler` worth parsing); without one,
    the file is analysed alone."""
    set_stage("reading the project's imports")
    scanned = scanned_text(text)  # what the text scanners read; LibCST parses `text` itself
    closure = project.import_closure(path, scanned) if project is not None else {}
    searched = scanned if not closure else tokens_in((scanned, *closure.values()), token_parts(rules))
    active = [rule for rule in rules if could_match(searched, rule, scanned)]
    if not active:
        return LintResult(dependencies=project.hashes(closure) if closure else {})
    model = project.parsed(path, text) if project is not None else None
    if model is not None:  # parsed already, as a file an earlier one imports
        return _lint_module_guarded(text, path, model.module, active, rules, project, model)
    set_stage("parsing")
    refused = refused_by_every_python(text)  # before LibCST, which may spend gigabytes on it
    if refused is not None:
        message, row, column = refused
        return LintResult([parse_error_finding(path, f"cannot parse: {message}", row, column)])
    try:
        module = parse_module(text)
    except cst.ParserSyntaxError:
        from dplint.legacy import lint_legacy  # pre-3.7 code: `x.cuda(async=True)`

        legacy = lint_legacy(text, path, active, rules, project, _lint_module)
        if legacy is not None:
            return legacy
        # Python's own message and position: LibCST's point at the wrong place (Python 2's
        # `print x` comes out on line 2) and dump its grammar.
        python = python_syntax_error(text)
        if python is None:  # Python accepts it: a LibCST limit (e.g. >3,000 joined strings)
            return LintResult([parse_error_finding(path, "cannot analyse: LibCST cannot parse this file, although Python can")])
        message, row, column = python
        return LintResult([parse_error_finding(path, f"cannot parse: {message}", row, column)])
    except (RecursionError, MemoryError) as error:
        return LintResult([parse_error_finding(path, f"cannot parse: {type(error).__name__}")])
    return _lint_module_guarded(text, path, module, active, rules, project)


def _lint_module_guarded(text: str, path: str, module: cst.Module, active: Sequence[Rule], rules: Sequence[Rule],
                         project=None, model: Optional[SemanticModel] = None) -> LintResult:
    try:
        return _lint_module(text, path, module, active, rules, project, model)
    except RecursionError:
        pass
    if model is not None:  # what the failed pass memoised on it is not to be trusted
        model = project.parsed(path, text)
    try:  # deeply nested code: once more, on a thread with a deep stack
        return call_with_deep_stack(_lint_module, text, path, module, active, rules, project, model)
    except RecursionError:
        return LintResult([parse_error_finding(path, "cannot analyse: nested too deeply")])


def _lint_module(text: str, path: str, module: cst.Module, active: Sequence[Rule], rules: Sequence[Rule],
                 project=None, model: Optional[SemanticModel] = None) -> LintResult:
    if model is None:
        model = analysed(module, path)
        model.text = scanned_text(text)  # for the rules' text scans (the same offsets as `text`)
    if project is not None:
        project.register(model, text=text)
    result = LintResult()
    reported: list[tuple[Rule, Violation]] = []
    for rule in active:
        set_stage(f"{rule.code} ({rule.name})")
        try:
            reported.extend((rule, violation) for violation in rule.check(model))
            facts = rule.project_facts(model)
            if facts:
                result.facts[rule.code] = facts
        except Exception as error:  # a rule bug must not take the other rules or files down
            result.errors.append(f"{path}: internal error in {rule.code} ({rule.name}): {type(error).__name__}: {error}")
    set_stage("placing the findings")
    codes = frozenset(rule.code for rule in rules)
    elsewhere: dict[SemanticModel, list[Finding]] = {}
    if reported:
        resolver = _EditResolver(text, model)
        for rule, violation in reported:
            owner = project.model_owning(violation.node) if project is not None and not owns(model, violation.node) else None
            if owner is None:
                result.findings.append(resolver.finding(rule, violation))
            else:  # the place to fix is in a file this one imports from: report it there, no fix
                elsewhere.setdefault(owner, []).append(_EditResolver(owner.text, owner).finding(rule, violation, with_fix=False))
    result.findings.sort(key=lambda finding: finding.sort_key)
    result.findings = apply_suppressions(model.text, path, result.findings, codes)
    for owner, findings in elsewhere.items():
        findings.sort(key=lambda finding: finding.sort_key)
        result.findings.extend(apply_suppressions(owner.text, owner.path, findings, codes))
    if project is not None:
        result.dependencies = {**project.hashes(project.import_closure(path, model.text)), **project.dependencies(path)}
    return result


class _EditResolver:
    """Turns node-anchored violations and edits into positions and text offsets."""

    def __init__(self, text: str, model: SemanticModel) -> None:
        self.text = text
        self.model = model
        self.starts = line_starts(text)

    def finding(self, rule: Rule, violation: Violation, with_fix: bool = True) -> Finding:
        start, end = self.model.position(violation.node)
        finding = Finding(
            code=rule.code,
            name=rule.name,
            message=violation.message,
            severity=violation.severity or rule.severity,
            filename=self.model.path,
            location=Position(start.line, start.column + 1),
            end_location=Position(end.line, end.column + 1),
        )
        fix = violation.fix if with_fix else None
        if fix is not None:
            edits = [self.resolve(edit) for edit in fix.edits]
            if fix.applicability is Applicability.DISPLAY or all(edit is not None for edit in edits):
                finding.fix_applicability = fix.applicability
                finding.fix_message = fix.message
                finding.edits = [edit for edit in edits if edit is not None]
        return finding

    def offset(self, line: int, column: int) -> int:
        return self.starts[line - 1] + column

    def _text_edit(self, start: int, end: int, content: str) -> TextEdit:
        def position(offset: int) -> Position:
            line = _bisect_right(self.starts, offset)
            return Position(line, offset - self.starts[line - 1] + 1)

        return TextEdit(start, end, content, position(start), position(end))

    def _line_break_after(self, line: int) -> str:
        match = LINE_BREAK.search(self.text, self.starts[line - 1])
        return match.group(0) if match else "\n"

    def resolve(self, edit: Edit) -> Optional[TextEdit]:
        """The edit as a text change, or None when it cannot be applied cleanly here."""
        if not owns(self.model, edit.node):
            return None  # anchored in another file: this file's fix cannot apply it
        content = edit.content if isinstance(edit.content, str) else self.model.code(edit.content, edit.node)
        start, end = self.model.position(edit.node)
        start_offset = self.offset(start.line, start.column)
        end_offset = self.offset(end.line, end.column)
        if edit.kind is EditKind.REPLACE:
            return self._text_edit(start_offset, end_offset, content)
        # Statement edits need the statement to own its lines: nothing but indentation before
        # it, nothing but a comment after it.
        line_start = self.starts[start.line - 1]
        indent = self.text[line_start:start_offset]
        if indent.strip():
            return None
        next_line = end.line + 1
        rest = self.text[end_offset : self.starts[next_line - 1] if next_line <= len(self.starts) else len(self.text)]
        if rest.strip() and not rest.strip().startswith("#"):
            return None
        newline = self._line_break_after(start.line)
        if edit.kind is EditKind.INSERT_BEFORE_STATEMENT:
            lines = "".join(indent + line + newline for line in content.splitlines())
            return self._text_edit(line_start, line_start, lines)
        if edit.kind is EditKind.INSERT_AFTER_STATEMENT:
            lines = "".join(indent + line + newline for line in content.splitlines())
            if next_line <= len(self.starts):
                at = self.starts[next_line - 1]
                return self._text_edit(at, at, lines)
            return self._text_edit(len(self.text), len(self.text), newline + lines.rstrip("\r\n"))
        if edit.kind is EditKind.DELETE_STATEMENT:
            stop = self.starts[next_line - 1] if next_line <= len(self.starts) else len(self.text)
            return self._text_edit(line_start, stop, "")
        raise ValueError(edit.kind)


def _bisect_right(starts: list[int], offset: int) -> int:
    low, high = 0, len(starts)
    while low < high:
        middle = (low + high) // 2
        if starts[middle] <= offset:
            low = middle + 1
        else:
            high = middle
    return low


# ---------------------------------------------------------------------------- fixing
def fix_is_wanted(finding: Finding, unsafe: bool, only_codes: Optional[frozenset[str]] = None) -> bool:
    if not finding.edits or finding.fix_applicability in (None, Applicability.DISPLAY):
        return False
    if finding.fix_applicability is Applicability.UNSAFE and not unsafe:
        return False
    return only_codes is None or finding.code in only_codes


def apply_edits(text: str, findings: Sequence[Finding]) -> tuple[str, list[Finding]]:
    """Apply the fixes whose edits do not overlap an earlier fix's; returns (text, applied)."""
    accepted: list[TextEdit] = []
    applied: list[Finding] = []
    for finding in sorted(findings, key=lambda f: min(edit.start for edit in f.edits)):
        new = [edit for edit in finding.edits if edit not in accepted]
        if any(_overlaps(edit, other) for edit in new for other in accepted):
            continue  # the next round re-lints and tries again
        accepted.extend(new)
        applied.append(finding)
    for edit in sorted(accepted, key=lambda e: (e.start, e.end), reverse=True):
        text = text[: edit.start] + edit.content + text[edit.end :]
    return text, applied


def _overlaps(a: TextEdit, b: TextEdit) -> bool:
    if a.start == a.end == b.start == b.end:
        return True  # two insertions at one point: their order would be arbitrary
    return a.start < b.end and b.start < a.end


@dataclass
class FixResult:
    text: str
    applied: list[Finding]
    remaining: LintResult
    errors: list[str] = field(default_factory=list)


def fix_source(
    text: str,
    path: str,
    rules: Sequence[Rule],
    unsafe: bool = False,
    only_codes: Optional[frozenset[str]] = None,
    project=None,
) -> FixResult:
    """Fix in rounds: apply non-overlapping fixes, re-parse, re-lint, until nothing changes."""
    applied: list[Finding] = []
    errors: list[str] = []
    current = text
    result = lint_source(current, path, rules, project)
    for _ in range(MAX_FIX_ROUNDS):
        wanted = [finding for finding in result.findings if fix_is_wanted(finding, unsafe, only_codes)]
        if not wanted:
            break
        candidate, round_applied = apply_edits(current, wanted)
        if candidate == current:
            break
        try:
            cst.parse_module(candidate)
        except Exception as error:
            errors.append(
                f"{path}: internal error: fixing {', '.join(sorted({f.code for f in round_applied}))} "
                f"produced code that does not parse ({type(error).__name__}); this round was reverted"
            )
            break
        current = candidate
        applied.extend(round_applied)
        result = lint_source(current, path, rules, project)
    else:
        if any(fix_is_wanted(finding, unsafe, only_codes) for finding in result.findings):
            errors.append(f"{path}: fixes did not converge after {MAX_FIX_ROUNDS} rounds; kept the last valid result")
    result.errors[:0] = errors
    return FixResult(current, applied, result, errors)
