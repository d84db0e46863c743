"""Old code: files that only parse with a pre-3.7 grammar, where `async` was still a name.

Training scripts of the PyTorch 0.3/0.4 era wrote `x.cuda(async=True)` (renamed
`non_blocking` in 0.4) and sometimes `async = ...`. Python 3.7 made `async` a keyword, so
LibCST (and Python) reject the whole file, and every finding in it was lost behind one
DPL000. Here each `async` that is used as a name (not `async def` / `async for` /
`async with`) is rewritten to a placeholder of the same length that the file never uses, so
every line and column stays exactly where it was; the rewritten module is linted and the
findings are reported on the original file, with the placeholder spelled back as `async` in
messages.

Fixes are dropped: they were computed on the rewritten text, and the fixer re-parses its
result with the modern grammar, which the original file does not pass.
"""

from __future__ import annotations

import io
import tokenize
from typing import Callable, Optional

from dplint.fast_cst import parse_module

KEYWORD = "async"
# Same length as `async`; the first one the file does not contain is used.
PLACEHOLDERS = ("asyn_", "_asyn", "asyn0", "asyn1", "asyn2", "a_syn", "as_yn")
# `async` is a keyword only before these.
KEYWORD_FOLLOWERS = {"def", "for", "with"}


def rewrite_async_names(text: str) -> Optional[tuple[str, str]]:
    """(the text with every `async` name replaced, the placeholder), or None when the text has
    no such name, no free placeholder, or does not tokenize."""
    if KEYWORD not in text:
        return None
    from dplint.source import scanned_text

    text = scanned_text(text)  # `readline` splits at `\n` only (fixes are dropped here: no line end is written)
    placeholder = next((name for name in PLACEHOLDERS if name not in text), None)
    if placeholder is None:
        return None
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    spans = []
    significant = [t for t in tokens if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)]
    for index, token in enumerate(significant):
        if token.type != tokenize.NAME or token.string != KEYWORD:
            continue
        following = significant[index + 1] if index + 1 < len(significant) else None
        if following is not None and following.type == tokenize.NAME and following.string in KEYWORD_FOLLOWERS:
            continue
        spans.append(token.start)
    if not spans:
        return None
    lines = io.StringIO(text).readlines()  # split exactly where tokenize counts rows
    for row, column in spans:
        line = lines[row - 1]
        lines[row - 1] = line[:column] + placeholder + line[column + len(KEYWORD):]
    return "".join(lines), placeholder


def lint_legacy(text: str, path: str, active, rules, project, lint_module: Callable):
    """The engine's fallback when the modern grammar rejects a file: a LintResult of the file
    read with `async` as a name, or None when that does not parse either."""
    rewritten = rewrite_async_names(text)
    if rewritten is None:
        return None
    new_text, placeholder = rewritten
    from dplint.source import refused_by_every_python

    if refused_by_every_python(new_text) is not None:
        return None
    try:
        module = parse_module(new_text)
    except Exception:
        return None
    result = lint_module(new_text, path, module, active, rules, project)
    for finding in result.findings:
        finding.message = finding.message.replace(placeholder, KEYWORD)
        finding.edits = []
        finding.fix_applicability = None
        finding.fix_message = None
    return result
