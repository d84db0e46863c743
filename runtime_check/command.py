"""The `dplint verify` click command (also `python -m dplint.runtime_check`).

No torch here, so `dplint verify --help` works without the runtime extra; the command itself
imports `dplint.runtime_check.cli`, which needs torch.
"""

from __future__ import annotations

import sys

import click

EXIT_ERROR = 2


class ScriptCommand(click.Command):
    """Options before or after SCRIPT; everything after `--` goes to the script untouched."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = list(args)
        script_args: list[str] = []
        if "--" in args:
            split = args.index("--")
            args, script_args = args[:split], args[split + 1 :]
        ctx.meta["dplint.script_args"] = script_args
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "[-- SCRIPT_ARGS...]"]


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for value in values:
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return tuple(out)


@click.command(
    "verify", cls=ScriptCommand, context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit status: 0 every finding got a verdict (confirmed, not-reproduced, no-runtime-effect, "
           "needs-gpu); 1 a fix failed or a finding was not reached (the report says why and what would "
           "reach it); 2 verify itself failed (or was stopped).",
)
@click.argument("script", type=click.Path(dir_okay=False))
@click.option("--select", multiple=True, help="Verify only these rules' findings (codes, slugs or prefixes); every fix is still applied.")
@click.option("--cwd", type=click.Path(file_okay=False), default=None,
              help="Working directory of the runs (default: the script's folder); it is run in a scratch overlay.")
@click.option("--cpu-remap", is_flag=True, help="Without CUDA: map cuda->cpu and nccl->gloo for scripts hard-wired to CUDA.")
@click.option("--nproc-per-node", type=click.IntRange(min=1), default=None, metavar="N",
              help="Ranks for a distributed script (default 2; with CUDA, the GPUs up to 2).")
@click.option("--batches", type=click.IntRange(min=1), default=3, show_default=True, metavar="K",
              help="Iterations of a batch loop before verify ends it.")
@click.option("--epochs", type=click.IntRange(min=1), default=2, show_default=True, metavar="E",
              help="Iterations of an epoch loop before verify ends it (the script goes on after the loop).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True, metavar="S",
              help="Seconds per run of one variant.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format.")
@click.option("--keep", is_flag=True, help="Keep the temporary folder (variants, overlays, records, logs).")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option("--migration", "migration_original", type=click.Path(dir_okay=False), default=None, metavar="ORIGINAL",
              help="`verify --migration ORIGINAL MIGRATED`: run ORIGINAL in one process and SCRIPT (its DDP "
                   "migration) as 2 CPU ranks; compare losses, parameters, samples per epoch, checkpoints.")
@click.option("--report", "migration_report", type=click.Path(dir_okay=False), default=None, metavar="HTML",
              help="With --migration: also write a self-contained HTML page (loss curves, per-rank coverage).")
@click.option("--data-stub", "migration_data_stub", default=None, metavar="FIELDS[@N]",
              help='With --migration: every Dataset class the script or a library defines reads no file and holds '
                   'N synthetic items (64 by default) of these fields, the same in both runs: a shape (3x32x32), '
                   'int:K (a label below K) or int:K:AxB; e.g. "3x32x32,int:10".')
@click.option("--no-dropout", "migration_no_dropout", is_flag=True,
              help="With --migration: every dropout keeps every unit in both runs (per-process masks cannot match).")
@click.pass_context
def verify(ctx: click.Context, script: str, select, migration_original, migration_report, migration_data_stub,
           migration_no_dropout, **options) -> None:
    """Run SCRIPT's findings one at a time, with probes; say, per finding, whether it is real.

    For each finding, a copy with only that bug (every other fix applied) and a copy with every
    fix run where the script lives, in a scratch overlay: the script reads the user's files,
    and whatever it writes lands in a temporary folder. Loops end after the budget and the
    script goes on after them (saves, loads, evaluation run).
    """
    if migration_original is not None:  # runtime_check/migration.py: the proof of `dplint migrate`
        from dplint.runtime_check.migration import run_migration

        sys.exit(run_migration(migration_original, script, ctx.meta.get("dplint.script_args", []),
                               report=migration_report, timeout=options["timeout"], quiet=options["quiet"],
                               data_stub=migration_data_stub, no_dropout=migration_no_dropout))
    if script.endswith(".ipynb"):  # notebooks (dplint/notebook.py) are checked and fixed, not run
        click.echo(
            f"dplint: error: verify runs scripts, not notebooks; export {script} first "
            "(`jupyter nbconvert --to script`) and verify the .py file",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    try:
        from dplint.runtime_check.cli import run_verify
    except ImportError as error:
        click.echo(f"dplint: error: verify needs the runtime extra: pip install '.[runtime]' in a clone of dplint, or pip install torch ({error})", err=True)
        sys.exit(EXIT_ERROR)
    codes = None
    if select:
        from dplint.registry import UnknownRuleError, selected_codes

        try:
            codes = selected_codes(select=_split(select))
        except UnknownRuleError as error:
            click.echo(f"dplint: error: {error}", err=True)
            sys.exit(EXIT_ERROR)
    sys.exit(run_verify(script, ctx.meta.get("dplint.script_args", []), select=codes, **options))


def main(argv: list[str], prog_name: str = "dplint verify") -> int:
    """Runs the command on argv; returns its exit status."""
    try:
        verify.main(args=list(argv), prog_name=prog_name, standalone_mode=True)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else EXIT_ERROR)
    return 0
