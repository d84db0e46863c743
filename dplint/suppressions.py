"""Suppression comments, and DPL100 unused-suppression for those that suppress nothing.

- `# noqa` silences every finding on its line; `# noqa: DPL004, E501` only the DPL codes it
  names (the other codes belong to other tools and are left alone).
- `# dplint: ignore[strip-module, DPL007]` (codes or slugs) silences them on its line, or, on a
  line of its own, on the next line of code. `# dplint: file-ignore[...]` anywhere in the file
  silences them in the whole file. Without `[...]` either form silences every rule.

Only real comments count: they are found with `tokenize`, so a directive inside a string does
nothing. A finding is matched on its first line.

An unused suppression is reported (DPL100, with a safe fix removing it) only when dplint can
tell: it names a rule that is enabled in this run and reported nothing there, or a rule that
does not exist. A bare `# noqa` or bare `# dplint: ignore` is never reported: it may be meant
for other tools or for rules not enabled in this run.
"""

from __future__ import annotations

import bisect
import re
import tokenize
from dataclasses import dataclass, field
from typing import Optional, Sequence

from dplint.rule import Applicability, Finding, Position, Severity, TextEdit
from dplint.source import LINE_BREAK, line_starts

UNUSED_CODE = "DPL100"
UNUSED_NAME = "unused-suppression"

# flake8's syntax: codes after `noqa:` are letters then digits; anything else makes it bare.
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
# `[...]` or nothing; `ignore-x` or an unclosed `[` is no directive (it must not silence everything).
DPLINT = re.compile(r"#\s*dplint:\s*(?P<kind>file-ignore|ignore)(?:\s*\[(?P<codes>[^\]]*)\]|(?![\w\[-]|\s+\[))")
MAY_HAVE_DIRECTIVE = re.compile(r"noqa|dplint:", re.IGNORECASE)
# A directive that names a dplint rule: `# noqa: ... DPL004` or any `# dplint:` form (the
# letters alone are in common words: `DeepSpeedPlugin`).
MAY_NAME_DPLINT = re.compile(r"noqa[^\r\n]*dpl|dplint:", re.IGNORECASE)


@dataclass
class Directive:
    kind: str  # "noqa", "ignore" or "file-ignore"
    # Each entry as written, and the rule code it names (None: not a dplint rule, or unknown).
    entries: Optional[list[tuple[str, Optional[str]]]]  # None: bare, silences every rule
    row: int  # the comment's line
    target_row: Optional[int]  # the line it silences; None for file-ignore, 0 when there is none
    start: int  # offsets of the directive in the text
    end: int
    codes_span: Optional[tuple[int, int]]  # offsets of the list of entries
    comment_start: int
    comment_end: int
    own_line: bool  # nothing but the comment on its line
    used: set[str] = field(default_factory=set)

    def covers(self, code: str) -> bool:
        return self.entries is None or any(named == code for _, named in self.entries)

    def silences(self, code: str, row: int) -> bool:
        """Whether this directive silences a finding of `code` that starts on `row`."""
        return (self.kind == "file-ignore" or self.target_row == row) and self.covers(code)


def apply_suppressions(text: str, path: str, findings: Sequence[Finding], enabled_codes: frozenset[str]) -> list[Finding]:
    """The findings that no suppression comment silences (plus unused-suppression findings)."""
    report_unused = UNUSED_CODE in enabled_codes
    # Tokenizing costs a fifth of a parse: skip it when no directive can matter. Without
    # findings only a directive naming a dplint rule (or the dplint form) can be reported.
    if not MAY_HAVE_DIRECTIVE.search(text) or not (findings or (report_unused and MAY_NAME_DPLINT.search(text))):
        return list(findings)
    directives = find_directives(text)
    if directives is None:  # the tokenizer disagrees with the parser: suppress nothing, claim nothing
        return list(findings)
    kept = [finding for finding in findings if not _silenced(finding, directives)]
    if report_unused and not any(d.kind == "file-ignore" and d.covers(UNUSED_CODE) for d in directives):
        kept.extend(_unused_findings(text, path, directives, enabled_codes))
    kept.sort(key=lambda finding: finding.sort_key)
    return kept


def _silenced(finding: Finding, directives: list[Directive]) -> bool:
    """Whether some directive silences the finding; every one that does counts as used."""
    silenced = False
    for directive in directives:
        if directive.silences(finding.code, finding.location.row):
            directive.used.add(finding.code)
            silenced = True
    return silenced


# ---------------------------------------------------------------------------- finding directives
def find_directives(text: str) -> Optional[list[Directive]]:
    """Every suppression directive in the file's comments, or None if the text does not tokenize."""
    from dplint.registry import all_rules

    by_name = {rule.code: rule.code for rule in all_rules()}
    by_name.update({rule.name: rule.code for rule in all_rules()})
    starts = line_starts(text)
    lines = _lines(text)
    comments: list[tuple[int, int, str]] = []  # (row, column, text)
    code_rows: set[int] = set()
    comment_rows: set[int] = set()
    try:
        for token in tokenize.generate_tokens(iter(lines).__next__):
            if token.type == tokenize.COMMENT:
                comments.append((token.start[0], token.start[1], token.string))
                comment_rows.add(token.start[0])
            elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
                code_rows.update(range(token.start[0], token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        return None

    directives = []
    for row, column, comment in comments:
        comment_start = starts[row - 1] + column
        own_line = row not in code_rows
        for match in NOQA.finditer(comment):
            codes = match.group("codes")
            entries = None
            if codes is not None:
                entries = [(entry, entry.upper() if entry.upper().startswith("DPL") else None) for entry in re.split(r"[,\s]+", codes)]
                entries = [(entry, named if named in by_name else None) for entry, named in entries]
            directives.append(_directive("noqa", entries, row, row, match, comment_start, comment, own_line))
        for match in DPLINT.finditer(comment):
            codes = match.group("codes")
            entries = None
            if codes is not None:
                written = [entry for entry in re.split(r"[,\s]+", codes) if entry]
                entries = [(entry, by_name.get(entry.upper(), by_name.get(entry.lower()))) for entry in written]
            if match.group("kind") == "file-ignore":
                target = None
            elif own_line:
                target = _next_code_row(row, code_rows, comment_rows)
            else:
                target = row
            directives.append(_directive(match.group("kind"), entries, row, target, match, comment_start, comment, own_line))
    return directives


def _lines(text: str) -> list[str]:
    """The text's lines with their endings, split where the parser splits (`\\r` included)."""
    lines, position = [], 0
    for match in LINE_BREAK.finditer(text):
        lines.append(text[position : match.end()])
        position = match.end()
    if position < len(text):
        lines.append(text[position:])
    return lines


def _next_code_row(row: int, code_rows: set[int], comment_rows: set[int]) -> int:
    """The line a directive on a line of its own silences: the next line of code, passing over
    comment lines (stacked directives) but not over a blank line."""
    row += 1
    while row in comment_rows and row not in code_rows:
        row += 1
    return row if row in code_rows else 0


def _directive(kind, entries, row, target_row, match, comment_start, comment, own_line) -> Directive:
    codes_span = None
    if match.group("codes") is not None:
        codes_span = (comment_start + match.start("codes"), comment_start + match.end("codes"))
    return Directive(
        kind=kind,
        entries=entries,
        row=row,
        target_row=target_row,
        start=comment_start + match.start(),
        end=comment_start + match.end(),
        codes_span=codes_span,
        comment_start=comment_start,
        comment_end=comment_start + len(comment),
        own_line=own_line,
    )


# ---------------------------------------------------------------------------- unused directives
def _unused_findings(text: str, path: str, directives: list[Directive], enabled_codes: frozenset[str]) -> list[Finding]:
    project_codes = _project_rule_codes()
    findings = []
    for directive in directives:
        if directive.entries is None or directive.covers(UNUSED_CODE):
            continue  # bare: maybe meant for other tools or rules; naming DPL100 opts out
        unused: list[str] = []  # entries as written
        unknown: list[str] = []
        for written, code in directive.entries:
            if code is None:
                if directive.kind != "noqa" or written.upper().startswith("DPL"):
                    unknown.append(written)  # another tool's noqa code is none of our business
            elif code in enabled_codes and code not in directive.used and code not in project_codes:
                unused.append(written)
        if unused or unknown:
            findings.append(_unused_finding(text, path, directive, unused, unknown))
    return findings


def _project_rule_codes() -> set[str]:
    """Rules that can also report across files, after this file's suppressions ran: whether
    their suppressions are used cannot be told here, so they are never called unused."""
    from dplint.registry import all_rules
    from dplint.rule import Rule

    return {rule.code for rule in all_rules() if getattr(rule.check_project, "__func__", None) is not Rule.check_project.__func__}


def _unused_finding(text: str, path: str, directive: Directive, unused: list[str], unknown: list[str]) -> Finding:
    where = {
        "file-ignore": "in this file",
        "ignore": "on the next line of code" if directive.own_line else "on this line",
        "noqa": "on this line",
    }[directive.kind]
    parts = []
    if unused:
        parts.append(f"nothing to suppress {where} for {', '.join(f'`{entry}`' for entry in unused)}")
    if unknown:
        parts.append(f"no rule named {', '.join(f'`{entry}`' for entry in unknown)}")
    message = f"Unused suppression `{text[directive.start:directive.end].strip()}`: {'; '.join(parts)}"
    if directive.kind == "noqa" and directive.own_line:
        message += " (`# noqa` covers only its own line; put it at the end of the flagged line, or use `# dplint: ignore[...]` on the line above)"
    starts = line_starts(text)
    removed = set(unused) | set(unknown)
    kept = [written for written, _ in directive.entries if written not in removed]
    edit = _removal(text, starts, directive) if not kept else _rewrite(starts, directive, kept)
    return Finding(
        code=UNUSED_CODE,
        name=UNUSED_NAME,
        message=message,
        severity=Severity.INFO,
        filename=path,
        location=_position(starts, directive.start),
        end_location=_position(starts, directive.end),
        fix_applicability=Applicability.SAFE,
        fix_message="Remove the unused suppression" if not kept else f"Remove {', '.join(sorted(removed))} from the suppression",
        edits=[edit],
    )


def _position(starts: list[int], offset: int) -> Position:
    row = bisect.bisect_right(starts, offset)
    return Position(row, offset - starts[row - 1] + 1)


def _edit(starts: list[int], start: int, end: int, content: str) -> TextEdit:
    return TextEdit(start, end, content, _position(starts, start), _position(starts, end))


def _rewrite(starts: list[int], directive: Directive, kept: list[str]) -> TextEdit:
    start, end = directive.codes_span
    return _edit(starts, start, end, ", ".join(kept))


def _removal(text: str, starts: list[int], directive: Directive) -> TextEdit:
    """Delete the directive; the whole comment when nothing else in it is a comment of its own,
    and the whole line when the comment was alone on it."""
    before = text[directive.comment_start : directive.start]
    after = text[directive.end : directive.comment_end]
    if before.strip():  # `# why  # noqa: DPL004`: keep `# why` (and anything after)
        return _edit(starts, directive.comment_start + len(before.rstrip()), directive.end, "")
    if after.strip().startswith("#"):  # `# noqa: DPL004  # why`: keep `# why`
        return _edit(starts, directive.start, directive.end + len(after) - len(after.lstrip()), "")
    line_start = starts[directive.row - 1]
    if directive.own_line:
        if directive.row < len(starts):
            return _edit(starts, line_start, starts[directive.row], "")
        # The last line, without a line break: take the previous line's break instead.
        previous = LINE_BREAK.search(text, starts[directive.row - 2]) if directive.row > 1 else None
        return _edit(starts, previous.start() if previous else line_start, directive.comment_end, "")
    code_end = line_start + len(text[line_start : directive.comment_start].rstrip())
    return _edit(starts, code_end, directive.comment_end, "")


# ---------------------------------------------------------------------------- adding directives
def add_noqa(text: str, codes_by_row: dict[int, set[str]]) -> tuple[str, int, int]:
    """`check --add-noqa`: `# noqa: CODE, ...` at the end of each given line (1-based rows), the
    codes merged into a `# noqa: X` already there and after any other comment on the line.

    Returns the new text, the number of lines that got codes, and the number that cannot take a
    comment (the line ends inside a string or continues with a backslash), left unchanged."""
    lines = _lines(text)
    starts = line_starts(text)
    line_ends: dict[int, tuple[int, int]] = {}  # row -> the line's trailing blanks, where a comment may go
    try:
        for token in tokenize.generate_tokens(iter(lines).__next__):
            if token.type in (tokenize.NL, tokenize.NEWLINE) and token.start[0] <= len(lines):
                row, column = token.start
                end = starts[row - 1] + column
                line_ends[row] = (starts[row - 1] + len(lines[row - 1][:column].rstrip()), end)
    except (tokenize.TokenError, SyntaxError):
        return text, 0, len(codes_by_row)
    directives = find_directives(text) or []
    edits: list[tuple[int, int, str]] = []  # (start, end, new text)
    cannot = 0
    for row, codes in sorted(codes_by_row.items()):
        existing = next((d for d in directives if d.kind == "noqa" and d.row == row), None)
        if existing is not None and existing.entries is None:
            continue  # a bare `# noqa` silences everything already
        if existing is not None:
            written = {entry.upper() for entry, _ in existing.entries}
            new = sorted(code for code in codes if code not in written)
            if new:
                end = existing.codes_span[1]
                edits.append((end, end, "".join(f", {code}" for code in new)))
            continue
        if row not in line_ends:
            cannot += 1
            continue
        edits.append((*line_ends[row], f"  # noqa: {', '.join(sorted(codes))}"))
    for start, end, new_text in sorted(edits, reverse=True):
        text = text[:start] + new_text + text[end:]
    return text, len(edits), cannot
