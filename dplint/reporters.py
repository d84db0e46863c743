"""Output formats. Each reporter turns a run's findings into text; the CLI prints or writes it."""

from __future__ import annotations

import json
from typing import Callable, Sequence

from dplint.rule import Applicability, Finding, finding_to_dict


def _fix_marker(finding: Finding, unsafe_fixes: bool) -> str:
    if finding.fix_applicability is Applicability.SAFE or (
        unsafe_fixes and finding.fix_applicability is Applicability.UNSAFE
    ):
        return " [*]"
    return ""


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


def text(findings: Sequence[Finding], unsafe_fixes: bool = False) -> str:
    lines = [
        f"{f.filename}:{f.location.row}:{f.location.column}: {f.code}{_fix_marker(f, unsafe_fixes)} {f.message}"
        for f in findings
    ]
    if findings:
        count = len(findings)
        lines.append(f"Found {count} problem{'s' if count != 1 else ''}.")
        summary = fix_summary(findings, unsafe_fixes)
        if summary:
            lines.append(summary)
    else:
        lines.append("All checks passed!")
    return "\n".join(lines) + "\n"


def json_array(findings: Sequence[Finding], unsafe_fixes: bool = False) -> str:
    return json.dumps([finding_to_dict(f) for f in findings], indent=2) + "\n"


REPORTERS: dict[str, Callable[..., str]] = {
    "text": text,
    "json": json_array,
}
