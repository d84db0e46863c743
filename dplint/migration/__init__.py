"""`dplint migrate`: turn a single-process (DataParallel or one-device) script into a DDP one.

`migrate_source(text, path, options)`:
1. plan every change on the script's semantic model (`analysis.plan`), or refuse with one
   blocker per line;
2. rewrite the script in one LibCST pass (`rewrite.rewrite`): the process group from
   torchrun's environment, `set_device`, the DDP wrap, the DistributedSampler and batch size,
   evaluation, rank-0 saves and prints, `map_location`, `no_sync`, `destroy_process_group`;
3. let dplint's own fixes finish the steps they already know (`set_epoch`, saves and loads
   of `model.module.state_dict()`), then check the result with every rule: a finding left
   means a refusal, never a half-migrated script.
Never imports torch, never runs the script.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from dplint.migration.analysis import Options

__all__ = ["Options", "MigrationResult", "migrate_source"]


@dataclass
class MigrationResult:
    text: str  # the migrated script (the input unchanged when refused or already DDP)
    blockers: list[tuple[int, str]] = field(default_factory=list)  # (line, reason): refused
    notes: list[str] = field(default_factory=list)  # what was decided, for the user
    already_distributed: Optional[int] = None  # the line showing the script is DDP already

    @property
    def migrated(self) -> bool:
        return not self.blockers and self.already_distributed is None


def migrate_source(text: str, path: str = "<string>", options: Optional[Options] = None) -> MigrationResult:
    import libcst as cst

    from dplint.engine import fix_source, lint_source, rules_for
    from dplint.migration.analysis import already_distributed, plan
    from dplint.migration.rewrite import NameTaken, rewrite
    from dplint.registry import selected_codes
    from dplint.flow import analysed

    options = options or Options()
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as error:
        return MigrationResult(text, [(error.raw_line, f"the script does not parse: {error.message}")])
    model = analysed(module, path)
    done = already_distributed(model)
    if done is not None:
        return MigrationResult(text, already_distributed=done)
    found, blockers = plan(model, options)
    if found is None:
        return MigrationResult(text, sorted(set(blockers)))
    try:
        first = rewrite(model, found)
    except NameTaken as error:
        return MigrationResult(text, [(1, str(error))])
    rules = rules_for(selected_codes())
    fixed = fix_source(first, path, rules, unsafe=True)
    notes = list(found.notes)
    if fixed.applied:
        notes.append("dplint's own fixes then applied: " + ", ".join(
            f"{f.code} ({f.name}) line {f.location.row}" for f in fixed.applied))
    left = lint_source(fixed.text, path, rules)
    if fixed.errors or left.errors or left.findings:
        reasons = [(f.location.row, f"after migration, {f.code} ({f.name}) would remain: {f.message}") for f in left.findings]
        reasons += [(1, f"dplint failed on the migrated script: {error}") for error in [*fixed.errors, *left.errors]]
        return MigrationResult(text, reasons or [(1, "the migrated script did not check clean")])
    return MigrationResult(fixed.text, notes=notes)
