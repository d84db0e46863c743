"""Output formats. Each reporter turns a run's findings into text; the CLI prints or writes it.

Every reporter takes the findings and `unsafe_fixes` (whether `[*]` counts unsafe fixes), and
may use `files` (every file checked, for formats that list clean files) and `root` (the folder
that paths are made relative to; default: the repository around the current folder).

Every report is valid UTF-8: a file name that is not (the byte 0xff on Linux, which
`os.fsdecode` makes the lone surrogate U+DCFF) is written `bad\\xff.py`, in SARIF's URIs as
its bytes percent-encoded (`bad%FF.py`).
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any, Callable, Optional, Sequence

from dplint import __version__
from dplint.rule import Applicability, Finding, Severity, finding_to_dict


_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def readable(text: str) -> str:
    """`text` with each lone surrogate escaped: `\\xff` for one `os.fsdecode` made of a byte
    that is not UTF-8 (U+DC80..U+DCFF), `\\ud800` for any other. Valid UTF-8, still legible."""

    def escape(match: re.Match) -> str:
        code = ord(match.group())
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"

    return _LONE_SURROGATE.sub(escape, text)


def _readable_data(value: Any) -> Any:
    """`readable` on every string of JSON-able data (before `json.dumps`, which would write a
    lone surrogate as `\\udcff`, text that strict JSON and UTF-8 readers refuse)."""
    if isinstance(value, str):
        return readable(value)
    if isinstance(value, dict):
        return {readable(key): _readable_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_readable_data(item) for item in value]
    return value


def _utf8(reporter: Callable[..., str]) -> Callable[..., str]:
    """A text reporter whose output is made valid UTF-8 (see `readable`), so that writing it to
    a file or a strict standard output cannot fail."""

    @functools.wraps(reporter)
    def render(*args, **kwargs) -> str:
        return readable(reporter(*args, **kwargs))

    return render


def _path_bytes(path: str) -> bytes:
    """A path's bytes as stored (`os.fsencode`), also for a surrogate no byte made."""
    try:
        return os.fsencode(path)
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogatepass")


def fixable(finding: Finding, unsafe_fixes: bool) -> bool:
    """Whether `dplint fix` (with `--unsafe-fixes` when `unsafe_fixes`) would fix the finding."""
    return finding.fix_applicability is Applicability.SAFE or (
        unsafe_fixes and finding.fix_applicability is Applicability.UNSAFE
    )


def _fix_marker(finding: Finding, unsafe_fixes: bool) -> str:
    return " [*]" if fixable(finding, unsafe_fixes) else ""


def fix_summary(findings: Sequence[Finding], unsafe_fixes: bool) -> str:
    safe = sum(f.fix_applicability is Applicability.SAFE for f in findings)
    unsafe = sum(f.fix_applicability is Applicability.UNSAFE for f in findings)
    if unsafe_fixes:
        safe, unsafe = safe + unsafe, 0
    if not safe and not unsafe:
        return ""
    if not unsafe:
        return f"[*] {safe} fixable with dplint fix."
    if not safe:
        return f"No fixes available ({unsafe} hidden fixes can be enabled with --unsafe-fixes)."
    return f"[*] {safe} fixable with dplint fix ({unsafe} more with --unsafe-fixes)."


def _header(finding: Finding, unsafe_fixes: bool) -> str:
    f = finding
    where = f"{f.filename}:cell {f.cell}" if f.cell is not None else f.filename  # notebooks, as ruff
    return f"{where}:{f.location.row}:{f.location.column}: {f.code} {f.severity.value}{_fix_marker(f, unsafe_fixes)}"


def _stored_region(finding: Finding) -> tuple:
    """(line, column, end line, end column) in the file as stored: for a notebook finding, in
    the notebook's JSON (where GitHub and SARIF viewers point), else the finding's own."""
    f = finding
    if f.cell is not None:
        from dplint.notebook import json_position

        start = json_position(f.filename, f.cell, f.location.row, f.location.column)
        end = json_position(f.filename, f.cell, f.end_location.row, f.end_location.column)
        if start is not None:
            end = end if end is not None and (end.row, end.column) >= (start.row, start.column) else start
            return start.row, start.column, end.row, end.column
        return 1, 1, 1, 1  # cannot tell: the file's start (the message still names the cell)
    return f.location.row, f.location.column, f.end_location.row, f.end_location.column


def _line(finding: Finding, unsafe_fixes: bool) -> str:
    return f"{_header(finding, unsafe_fixes)} {finding.message}"


def _summary(findings: Sequence[Finding], unsafe_fixes: bool) -> list[str]:
    if not findings:
        return ["All checks passed!"]
    count = len(findings)
    lines = [f"Found {count} problem{'s' if count != 1 else ''}."]
    summary = fix_summary(findings, unsafe_fixes)
    if summary:
        lines.append(summary)
    return lines


@_utf8
def text(findings: Sequence[Finding], unsafe_fixes: bool = False, summary: bool = True, **_) -> str:
    """One line per finding (`path:line:col: CODE severity [*] message`), then the summary."""
    lines = [_line(f, unsafe_fixes) for f in findings] + (_summary(findings, unsafe_fixes) if summary else [])
    return "".join(line + "\n" for line in lines)


# ---------------------------------------------------------------------------- full (ruff's code frame)
_OPENERS, _CLOSERS = "([{", ")]}"


def _top_level_breaks(message: str, separators: tuple[str, ...]) -> list[tuple[int, int]]:
    """(start, end) of each separator outside `code`, brackets and quoted text."""
    found = []
    depth, in_code = 0, False
    for index, char in enumerate(message):
        if char == "`":
            in_code = not in_code
        elif in_code:
            continue
        elif char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth = max(0, depth - 1)
        elif depth == 0:
            for separator in separators:
                if message.startswith(separator, index):
                    found.append((index, index + len(separator)))
                    break
    return found


def message_parts(finding: Finding) -> tuple[str, str, str]:
    """(title, note, help): a message split where the rules' messages put their parts:
    "what is wrong: what torch does; what to do". The help is the part after the last `; `
    (or the last sentence), the title what comes before the first `: ` of the rest, the note
    what lies between. Without advice in the message, the help is the fix's title."""
    message = " ".join(finding.message.split())
    rest, advice = message, ""
    breaks = [b for b in _top_level_breaks(message, ("; ", ". ")) if message[b[1] : b[1] + 1].strip()]
    if breaks:
        start, end = breaks[-1]
        rest, advice = message[:start], message[end:]
    title, note = rest, ""
    colons = _top_level_breaks(rest, (": ",))
    if colons:
        start, end = colons[0]
        title, note = rest[:start], rest[end:]
    help_text = advice.strip() or (finding.fix_message or "")
    if help_text[:1].islower():
        help_text = help_text[0].upper() + help_text[1:]
    return title.strip(), note.strip(), help_text


def _display(line: str) -> str:
    return line.replace("\t", "    ").replace("\x0c", " ").rstrip("\r\n")


def _source_lines(finding: Finding, cache: dict[tuple, Optional[list[str]]]) -> Optional[list[str]]:
    """The lines the finding's rows count: its file's, or for a notebook its cell's."""
    key = (finding.filename, finding.cell)
    if key not in cache:
        from dplint.source import LINE_BREAK, SourceError, read_source

        if finding.cell is not None:
            from dplint.notebook import cell_lines

            cache[key] = cell_lines(finding.filename, finding.cell)
        else:
            try:
                cache[key] = LINE_BREAK.split(read_source(finding.filename).text)
            except (SourceError, OSError, ValueError):
                cache[key] = None  # standard input, or a file gone since: no code frame
    return cache[key]


def _frame(finding: Finding, lines: Optional[list[str]]) -> list[str]:
    row, column = finding.location.row, finding.location.column
    if lines is None or not 1 <= row <= len(lines):
        return []
    source = lines[row - 1]
    start = len(_display(source[: column - 1]))
    if finding.end_location.row == row:
        width = len(_display(source[: finding.end_location.column - 1])) - start
    else:
        width = len(_display(source).rstrip()) - start
    gutter = " " * len(str(row))
    return [
        f"{gutter} |",
        f"{row} | {_display(source)}".rstrip(),
        f"{gutter} | {' ' * start}{'^' * max(1, width)} {finding.code}",
        f"{gutter} |",
    ]


@_utf8
def full(findings: Sequence[Finding], unsafe_fixes: bool = False, summary: bool = True, **_) -> str:
    """As ruff's `full` output: each finding's title, the source line with a caret under the
    finding, a note (what torch does) and the help (what to do); then the summary."""
    sources: dict[tuple, Optional[list[str]]] = {}
    blocks = []
    for f in findings:
        title, note, help_text = message_parts(f)
        block = [f"{_header(f, unsafe_fixes)} {title}", *_frame(f, _source_lines(f, sources))]
        gutter = " " * len(str(f.location.row))
        if note:
            block.append(f"{gutter} = note: {note}")
        if help_text:
            block.append(f"{gutter} = help: {help_text}")
        blocks.append("\n".join(block) + "\n")
    if summary:
        blocks.append("\n".join(_summary(findings, unsafe_fixes)) + "\n")
    return "\n".join(blocks)


@_utf8
def concise(findings: Sequence[Finding], unsafe_fixes: bool = False, **_) -> str:
    """One line per finding and nothing else: for grep, editors' problem matchers and diffs."""
    return "".join(_line(f, unsafe_fixes) + "\n" for f in findings)


@_utf8
def grouped(findings: Sequence[Finding], unsafe_fixes: bool = False, summary: bool = True, **_) -> str:
    """As ruff's `grouped`: the findings under their file's name, `row:column` aligned (rows to
    the right, columns to the left), a blank line after each file; then the summary."""
    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.filename, []).append(f)
    blocks = []
    for path, found in by_file.items():
        rows = [f"cell {f.cell}:{f.location.row}" if f.cell is not None else str(f.location.row) for f in found]
        columns = [str(f.location.column) for f in found]
        row_width, column_width = max(map(len, rows)), max(map(len, columns))
        lines = [f"{path}:"]
        for f, row, column in zip(found, rows, columns):
            lines.append(
                f"  {row:>{row_width}}:{column:<{column_width}} {f.code} {f.severity.value}"
                f"{_fix_marker(f, unsafe_fixes)} {f.message}"
            )
        blocks.append("\n".join(lines) + "\n")
    if summary:
        blocks.append("\n".join(_summary(findings, unsafe_fixes)) + "\n")
    return "\n".join(blocks)


def _cell_prefix(finding: Finding) -> str:
    """For formats that point into the file as stored (a notebook's JSON): where in the cell."""
    return f"cell {finding.cell}, line {finding.location.row}: " if finding.cell is not None else ""


@_utf8
def pylint(findings: Sequence[Finding], unsafe_fixes: bool = False, **_) -> str:
    """As pylint's parseable output (and ruff's `pylint`): `path:line: [CODE(slug)] message`."""
    return "".join(
        f"{f.filename}:{_stored_region(f)[0]}: [{f.code}({f.name})] {_cell_prefix(f)}{f.message}\n" for f in findings
    )


def json_array(findings: Sequence[Finding], unsafe_fixes: bool = False, **_) -> str:
    return json.dumps([_readable_data(finding_to_dict(f)) for f in findings], indent=2) + "\n"


def json_lines(findings: Sequence[Finding], unsafe_fixes: bool = False, **_) -> str:
    return "".join(json.dumps(_readable_data(finding_to_dict(f))) + "\n" for f in findings)


# ---------------------------------------------------------------------------- GitHub Actions
GITHUB_COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def github_escape_data(value: str) -> str:
    """A workflow command's message, escaped as @actions/core does (`escapeData`)."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_escape_property(value: str) -> str:
    """A workflow command's property value, escaped as @actions/core does (`escapeProperty`)."""
    return github_escape_data(value).replace(":", "%3A").replace(",", "%2C")


@_utf8
def github(findings: Sequence[Finding], unsafe_fixes: bool = False, **_) -> str:
    """GitHub Actions workflow commands: each finding becomes an annotation on the pull request."""
    lines = []
    for f in findings:
        row, column, end_row, end_column = _stored_region(f)
        properties = ",".join(
            f"{key}={github_escape_property(str(value))}"
            for key, value in (
                ("file", f.filename.replace(os.sep, "/")),
                ("line", row),
                ("col", column),
                ("endLine", end_row),
                ("endColumn", end_column),
                ("title", f"dplint ({f.code})"),
            )
        )
        lines.append(f"::{GITHUB_COMMAND[f.severity]} {properties}::{github_escape_data(_line(f, unsafe_fixes))}\n")
    return "".join(lines)


# ---------------------------------------------------------------------------- SARIF
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def repository_root(start: Optional[str] = None) -> str:
    """The nearest folder at or above `start` (default: the current folder) holding `.git`;
    `start` itself outside a repository. SARIF paths are relative to it, as GitHub wants."""
    start = os.path.abspath(start or os.getcwd())
    folder = start
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return start
        folder = parent


def _sarif_rules() -> list[dict]:
    from dplint.registry import all_rules
    from dplint.reports import PARSE_ERROR_CODE, PARSE_ERROR_NAME, TIMEOUT_CODE, TIMEOUT_NAME

    def meta_rule(code: str, name: str, short: str, full: str, help_text: str) -> dict:
        """A code dplint reports about a file itself, not a rule's finding."""
        return {"id": code, "name": name, "shortDescription": {"text": short}, "fullDescription": {"text": full},
                "help": {"text": help_text}, "defaultConfiguration": {"level": "error"}}

    rules = [
        meta_rule(PARSE_ERROR_CODE, PARSE_ERROR_NAME, "a file that cannot be read, decoded or parsed",
                  "dplint could not read, decode or parse this file, so it checked nothing in it.",
                  "Fix the syntax or encoding error; dplint reports what the parser said."),
        meta_rule(TIMEOUT_CODE, TIMEOUT_NAME, "a file whose analysis ran past the per-file time budget",
                  "dplint stopped analysing this file after `analysis-timeout` seconds, so it checked nothing in it.",
                  "Raise `analysis-timeout` (or `--analysis-timeout`); please report the file: no real file should need it."),
    ]
    for rule in all_rules():
        documentation = rule.documentation()
        rules.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": _what_it_does(documentation) or rule.summary},
                "help": {"text": documentation, "markdown": documentation},
                "defaultConfiguration": {"level": SARIF_LEVEL[rule.severity]},
                "properties": {"tags": [rule.severity.value], "fixable": rule.fix_applicability is not None},
            }
        )
    return rules


def _what_it_does(documentation: str) -> str:
    match = re.search(r"## What it does\n(.*?)(?:\n## |\Z)", documentation, re.S)
    return " ".join(match.group(1).split()) if match else ""


def _artifact_location(filename: str, root: str) -> dict:
    absolute = os.path.abspath(filename)
    try:
        relative = os.path.relpath(absolute, root)
    except ValueError:  # another drive
        relative = ".."
    if relative == ".." or relative.startswith(".." + os.sep):
        from pathlib import Path

        return {"uri": Path(absolute).as_uri()}  # outside the repository: an absolute file URI
    from urllib.parse import quote

    return {"uri": quote(_path_bytes(relative.replace(os.sep, "/"))), "uriBaseId": "%SRCROOT%"}


def sarif(findings: Sequence[Finding], unsafe_fixes: bool = False, root: Optional[str] = None, **_) -> str:
    """SARIF 2.1.0, as GitHub code scanning reads it (`github/codeql-action/upload-sarif`)."""
    root = os.path.abspath(root or repository_root())
    rules = _sarif_rules()
    index = {rule["id"]: position for position, rule in enumerate(rules)}
    results = []
    for f in findings:
        row, column, end_row, end_column = _stored_region(f)
        result = {
            "ruleId": f.code,
            "level": SARIF_LEVEL[f.severity],
            "message": {"text": f.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": _artifact_location(f.filename, root),
                        "region": {
                            "startLine": row,
                            "startColumn": column,
                            "endLine": end_row,
                            "endColumn": end_column,
                        },
                    }
                }
            ],
        }
        if f.code in index:
            result["ruleIndex"] = index[f.code]
        if f.cell is not None:  # notebooks: where in the cell, as the text output says it
            result["properties"] = {"cell": f.cell, "cellLine": f.location.row, "cellColumn": f.location.column}
        results.append(result)
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "dplint",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": rules,
                    }
                },
                "columnKind": "unicodeCodePoints",  # dplint's columns count characters
                "results": results,
            }
        ],
    }
    return json.dumps(_readable_data(log), indent=2) + "\n"


# ---------------------------------------------------------------------------- GitLab Code Quality
GITLAB_SEVERITY = {Severity.ERROR: "major", Severity.WARNING: "minor", Severity.INFO: "info"}


def gitlab(findings: Sequence[Finding], unsafe_fixes: bool = False, root: Optional[str] = None, **_) -> str:
    """GitLab Code Quality (a CI job's `artifacts: reports: codequality:`): paths relative to
    the project (`$CI_PROJECT_DIR` in a GitLab job, else the repository); each finding's
    fingerprint is a hash of its code, path and message, numbered among equal ones, so that it
    stays the same while the code around it moves."""
    import hashlib

    root = os.path.abspath(root or os.environ.get("CI_PROJECT_DIR") or repository_root())
    seen: dict[bytes, int] = {}
    issues = []
    for f in findings:
        try:
            path = os.path.relpath(os.path.abspath(f.filename), root).replace(os.sep, "/")
        except ValueError:  # another drive
            path = os.path.abspath(f.filename)
        key = b"\0".join((f.code.encode(), _path_bytes(path), f.message.encode("utf-8", "surrogatepass")))
        seen[key] = seen.get(key, 0) + 1
        row, _, end_row, _ = _stored_region(f)
        issues.append(
            {
                "description": f"{f.code} ({f.name}) {_cell_prefix(f)}{f.message}",
                "check_name": f.code,
                "fingerprint": hashlib.sha256(key + b"\0%d" % seen[key]).hexdigest()[:32],
                "severity": GITLAB_SEVERITY[f.severity],
                "location": {"path": path, "lines": {"begin": row, "end": end_row}},
            }
        )
    return json.dumps(_readable_data(issues), indent=2) + "\n"


# ---------------------------------------------------------------------------- JUnit XML
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # characters XML 1.0 cannot carry


def _xml_text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


@_utf8
def junit(findings: Sequence[Finding], unsafe_fixes: bool = False, files: Sequence[str] = (), **_) -> str:
    """JUnit XML for CI test reports: a test suite per file, a failed test case per finding,
    and one passing test case for each checked file without findings."""
    from xml.etree import ElementTree

    by_file: dict[str, list[Finding]] = {path: [] for path in files}
    for f in findings:
        by_file.setdefault(f.filename, []).append(f)
    suites = ElementTree.Element("testsuites", name="dplint", tests="0", failures=str(len(findings)), errors="0")
    total = 0
    for path in sorted(by_file):
        found = by_file[path]
        suite = ElementTree.SubElement(
            suites, "testsuite", name=_xml_text(path), tests=str(max(1, len(found))), failures=str(len(found)), errors="0"
        )
        if not found:
            ElementTree.SubElement(suite, "testcase", name="dplint", classname=_xml_text(path), file=_xml_text(path))
        for f in found:
            case = ElementTree.SubElement(
                suite,
                "testcase",
                name=f"{f.code} ({f.name}) at {f.location.row}:{f.location.column}",
                classname=_xml_text(path),
                file=_xml_text(path),
                line=str(f.location.row),
            )
            failure = ElementTree.SubElement(case, "failure", message=_xml_text(f.message), type=f.code)
            failure.text = _xml_text(_line(f, unsafe_fixes))
        total += max(1, len(found))
    if not by_file:  # nothing was checked: still a valid report, with one passing test
        suite = ElementTree.SubElement(suites, "testsuite", name="dplint", tests="1", failures="0", errors="0")
        ElementTree.SubElement(suite, "testcase", name="dplint", classname="dplint")
        total = 1
    suites.set("tests", str(total))
    ElementTree.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(suites, encoding="unicode") + "\n"


REPORTERS: dict[str, Callable[..., str]] = {
    "text": text,
    "concise": concise,
    "json": json_array,
    "json-lines": json_lines,
    "github": github,
    "sarif": sarif,
    "junit": junit,
    "full": full,
    "grouped": grouped,
    "pylint": pylint,
    "gitlab": gitlab,
}
