"""The `dplint migrate` command: rewrite a DataParallel (or one-device) script for DDP.

The rewriting itself is `dplint.migration`; this module reads the script, writes the result
where asked and tells the user what was decided and how to launch it. No torch here.

Exit codes: 0 migrated (or nothing to do: already DDP), 1 refused (one line per blocker, the
script untouched), 2 usage error or unreadable file.
"""

from __future__ import annotations

import sys
from typing import Optional

import click

EXIT_MIGRATED, EXIT_REFUSED, EXIT_ERROR = 0, 1, 2


@click.command("migrate", context_settings={"help_option_names": ["-h", "--help"]},
               epilog="Exit status: 0 migrated (or already DDP: nothing changed); 1 refused, "
                      "one line per blocker (nothing written); 2 usage error.")
@click.argument("script", type=click.Path(dir_okay=False))
@click.option("--to", "target", type=click.Choice(["ddp"]), default="ddp", show_default=True,
              help="What to migrate to (DistributedDataParallel launched by torchrun).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write the migrated script here.")
@click.option("--diff", is_flag=True, help="Print the whole change as a unified diff; write nothing.")
@click.option("--in-place", is_flag=True, help="Rewrite SCRIPT itself.")
@click.option("--validation", type=click.Choice(["all-reduce", "rank0"]), default="all-reduce", show_default=True,
              help="Evaluation loops: on every rank over a DistributedSampler shard, sums all-reduced "
                   "(all-reduce), or on rank 0 alone over the whole set (rank0).")
@click.option("--batch", type=click.Choice(["global", "per-rank"]), default="global", show_default=True,
              help="The training batch size as written is the global one (each rank loads batch_size // "
                   "world_size), or each rank's (the global batch grows with the world size).")
@click.option("-q", "--quiet", is_flag=True, help="Print neither the decisions nor the launch command.")
def migrate(script: str, target: str, output: Optional[str], diff: bool, in_place: bool,
            validation: str, batch: str, quiet: bool) -> None:
    """Rewrite SCRIPT (nn.DataParallel, or one device) into a torchrun-ready DDP script.

    The migrated text goes to stdout unless -o, --diff or --in-place says otherwise; the
    decisions and the launch command go to stderr. A script that cannot be migrated safely
    is refused, one line per blocker, and nothing is written.
    """
    from dplint.diffs import unified_diff
    from dplint.migration import Options, migrate_source
    from dplint.source import SourceError, read_source, write_atomic

    if sum((output is not None, diff, in_place)) > 1:
        click.echo("dplint: error: give at most one of -o, --diff and --in-place", err=True)
        sys.exit(EXIT_ERROR)
    try:
        source = read_source(script)
    except SourceError as error:
        click.echo(f"dplint: error: {error}", err=True)
        sys.exit(EXIT_ERROR)
    result = migrate_source(source.text, script, Options(validation=validation, batch=batch))
    if result.blockers:
        click.echo(f"{script}: not migrated ({len(result.blockers)} blocker{'s' * (len(result.blockers) != 1)}):", err=True)
        for row, reason in result.blockers:
            click.echo(f"{script}:{row}: {reason}", err=True)
        sys.exit(EXIT_REFUSED)
    if result.already_distributed is not None and not quiet:
        click.echo(f"{script}:{result.already_distributed}: already a DDP script; nothing to migrate", err=True)
    if diff:
        click.echo(unified_diff(source.text, result.text, script), nl=False)
    elif in_place:
        if result.text != source.text:
            write_atomic(script, result.text.encode(source.encoding))
    elif output is not None:
        try:
            with open(output, "wb") as out:
                out.write(result.text.encode(source.encoding))
        except OSError as error:
            click.echo(f"dplint: error: cannot write {output}: {error.strerror}", err=True)
            sys.exit(EXIT_ERROR)
    else:
        click.echo(result.text, nl=False)
    if quiet or not result.migrated:
        return
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    launched = output if output is not None else script
    click.echo(f"Launch with: torchrun --nproc_per_node=N {launched}  (N: the GPUs of the machine)", err=True)
