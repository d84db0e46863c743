"""Suppression comments (`# noqa: DPL004`, `# dplint: ignore[strip-module]`).

Called by the engine on every file's findings before they are reported or fixed.
"""

from __future__ import annotations

from typing import Sequence

from dplint.rule import Finding


def apply_suppressions(text: str, path: str, findings: Sequence[Finding], enabled_codes: frozenset[str]) -> list[Finding]:
    """The findings that no suppression comment silences (plus unused-suppression findings)."""
    return list(findings)
