"""What a rule is, and what it reports.

A rule is a class in its own module under ``rules/``. The class docstring is the user
documentation (ruff's sections: What it does / Why is this bad? / Example / Use instead /
Fix safety); ``dplint explain`` prints it. ``VALID`` and ``INVALID`` carry the rule's own
examples, and ``tests/test_rule_examples.py`` turns every one of them into a test.
"""

from __future__ import annotations

import enum
import inspect
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AbstractSet, ClassVar, Iterable, Iterator, Optional, Sequence, Union

if TYPE_CHECKING:  # keep `import dplint.rule` free of LibCST
    import libcst as cst

    from dplint.semantic import SemanticModel


class Severity(str, enum.Enum):
    ERROR = "error"  # crashes, or silently wrong results
    WARNING = "warning"  # wrong under realistic conditions, or slow
    INFO = "info"  # consistency


class Applicability(str, enum.Enum):
    SAFE = "safe"  # cannot break code that works today
    UNSAFE = "unsafe"  # may change what runs; needs --unsafe-fixes
    DISPLAY = "display"  # a suggestion shown to the user, never applied


class EditKind(str, enum.Enum):
    REPLACE = "replace"  # replace the node's source range with the content
    INSERT_BEFORE_STATEMENT = "insert-before-statement"  # new line(s) above the node's line, same indent
    INSERT_AFTER_STATEMENT = "insert-after-statement"  # new line(s) below the node's last line, same indent
    DELETE_STATEMENT = "delete-statement"  # remove the node's whole line(s)


@dataclass(frozen=True)
class Edit:
    """One change, anchored on a node of the parsed module.

    ``content`` is text or a replacement node (rendered with the module's own
    formatting defaults). For the statement kinds the content is the statement text
    without indentation or newline; the engine adds both from the anchor's line.
    """

    node: "cst.CSTNode"
    content: Union[str, "cst.CSTNode"] = ""
    kind: EditKind = EditKind.REPLACE


@dataclass(frozen=True)
class Fix:
    applicability: Applicability
    message: str
    edits: tuple[Edit, ...] = ()


@dataclass
class Violation:
    """What a rule's ``check`` yields: a node, a message and maybe a fix."""

    node: "cst.CSTNode"
    message: str
    fix: Fix | None = None
    severity: Severity | None = None  # overrides the rule's default when set


@dataclass(frozen=True)
class Example:
    """A rule's own example. ``expected`` is the exact code after ``dplint fix --unsafe-fixes``
    (None: the fix leaves the code unchanged or there is no fix). ``count``: findings expected."""

    code: str
    expected: str | None = None
    count: int = 1


class Rule:
    code: ClassVar[str]  # stable, e.g. "DPL004"
    name: ClassVar[str]  # the slug, e.g. "strip-module"
    severity: ClassVar[Severity]
    summary: ClassVar[str]  # one line for `dplint rules`
    fix_applicability: ClassVar[Applicability | None] = None  # the best fix the rule can offer
    # how `dplint rules` names the fix's safety where it depends on the code ("safe when ...")
    fix_safety: ClassVar[str | None] = None
    # What the source of every file this rule can flag contains, for the pre-filter (which
    # never parses a file no enabled rule's tokens match). Each entry is a substring, or a
    # tuple of substrings that must all be present; the file must match at least one entry.
    # ("save", "init_process_group"): both words; ("DataLoader",): that word.
    tokens: ClassVar[tuple[Union[str, tuple[str, ...]], ...]] = ()
    # The same for the file's own text, where `tokens` may also be met by what the files it
    # imports (and those importing it) hold: set when every finding of the rule is a construct
    # spelled in the file itself (`k[7:]`), so that a helper's text never makes a file worth
    # parsing for this rule alone. Empty: no requirement.
    anchor_tokens: ClassVar[tuple[Union[str, tuple[str, ...]], ...]] = ()
    VALID: ClassVar[Sequence[str]] = ()
    INVALID: ClassVar[Sequence[Example]] = ()

    def check(self, model: "SemanticModel") -> Iterator[Violation]:
        raise NotImplementedError

    # Project-wide checks (across files): `project_facts` returns JSON-able facts about one
    # file (cached with its findings); `check_project` sees the facts of every file in the run.
    def project_facts(self, model: "SemanticModel") -> dict | None:
        return None

    @classmethod
    def check_project(cls, facts_by_path: dict[str, dict]) -> Iterator["Finding"]:
        return iter(())

    @classmethod
    def documentation(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")


def rule_may_match(text: str, rule, own: Optional[str] = None) -> bool:
    """Whether a rule (or its catalog entry) may fire on `text`: its tokens there and, with
    `own` (the file's own text when `text` adds its import closure), its anchor tokens in
    `own`. The pre-filter of the engine and of the runner."""
    return tokens_match(text, rule.tokens) and tokens_match(text if own is None else own, rule.anchor_tokens)


def tokens_match(text: Union[str, AbstractSet[str]], tokens: Sequence[Union[str, Sequence[str]]]) -> bool:
    """Whether text satisfies a rule's pre-filter tokens (see Rule.tokens); no tokens: always.
    `text` may also be the set of token parts a text holds (`tokens_in`)."""
    if not tokens:
        return True
    return any(
        (entry in text) if isinstance(entry, str) else all(part in text for part in entry)
        for entry in tokens
    )


def token_parts(rules: Iterable) -> frozenset[str]:
    """Every string the rules' pre-filter tokens test for (a pair's parts one by one)."""
    return frozenset(
        part for rule in rules for entry in (*rule.tokens, *rule.anchor_tokens)
        for part in ((entry,) if isinstance(entry, str) else entry)
    )


# parts -> {text: the parts it holds}. A file's import closure is made of the imported
# definitions' texts, and the same ones (a library's central class) are in most files'
# closures: each is read once per run, not once per file and rule.
_PARTS_FOUND: dict[frozenset[str], dict[str, frozenset[str]]] = {}


def tokens_in(texts: Iterable[str], parts: frozenset[str]) -> frozenset[str]:
    """Which of `parts` the texts hold, together: what `tokens_match` reads in place of the
    texts joined by newlines (no part holds a newline, so none spans two texts)."""
    known = _PARTS_FOUND.setdefault(parts, {})
    if len(known) > 20_000:
        known.clear()
    found: set[str] = set()
    for text in texts:
        held = known.get(text)
        if held is None:
            held = known[text] = frozenset(part for part in parts if part in text)
        found |= held
    return frozenset(found)


@dataclass(frozen=True)
class Position:
    row: int  # 1-based
    column: int  # 1-based, in characters


@dataclass(frozen=True)
class TextEdit:
    """An edit resolved to offsets into the file's text."""

    start: int
    end: int
    content: str
    location: Position
    end_location: Position


@dataclass
class Finding:
    code: str
    name: str
    message: str
    severity: Severity
    filename: str
    location: Position
    end_location: Position
    fix_applicability: Applicability | None = None
    fix_message: str | None = None
    edits: list[TextEdit] = field(default_factory=list)
    cell: int | None = None  # notebooks: the 1-based cell; rows are then counted inside it

    @property
    def sort_key(self) -> tuple:
        return (self.filename, self.cell or 0, self.location.row, self.location.column, self.code)


def finding_to_dict(finding: Finding) -> dict:
    """The JSON shape of a finding (ruff's: 1-based rows and columns)."""
    fix = None
    if finding.fix_applicability is not None:
        fix = {
            "applicability": finding.fix_applicability.value,
            "message": finding.fix_message,
            "edits": [
                {
                    "content": edit.content,
                    "location": {"row": edit.location.row, "column": edit.location.column},
                    "end_location": {"row": edit.end_location.row, "column": edit.end_location.column},
                }
                for edit in finding.edits
            ],
        }
    data = {
        "code": finding.code,
        "name": finding.name,
        "message": finding.message,
        "severity": finding.severity.value,
        "filename": finding.filename,
        "location": {"row": finding.location.row, "column": finding.location.column},
        "end_location": {"row": finding.end_location.row, "column": finding.end_location.column},
        "fix": fix,
    }
    if finding.cell is not None:  # notebooks only (as ruff's `cell`): rows count inside the cell
        data["cell"] = finding.cell
    return data


def finding_from_dict(data: dict) -> Finding:
    """The inverse of finding_to_dict, for the cache (edit offsets are not kept: check only)."""
    fix = data.get("fix")
    return Finding(
        code=data["code"],
        name=data["name"],
        message=data["message"],
        severity=Severity(data["severity"]),
        filename=data["filename"],
        location=Position(**data["location"]),
        end_location=Position(**data["end_location"]),
        fix_applicability=Applicability(fix["applicability"]) if fix else None,
        fix_message=fix["message"] if fix else None,
        edits=[
            TextEdit(-1, -1, edit["content"], Position(**edit["location"]), Position(**edit["end_location"]))
            for edit in (fix["edits"] if fix else ())
        ],
        cell=data.get("cell"),
    )


def shown_path(path: str) -> str:
    """Another file's path as the user typed it: relative to the working folder when inside it."""
    relative = os.path.relpath(os.path.abspath(path))
    return path if relative.startswith("..") else relative
