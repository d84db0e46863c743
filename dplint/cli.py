"""The command line: `dplint check`, `dplint fix`, `dplint rules`, `dplint explain`, `dplint verify`.

Exit codes are a contract (as ruff's): 0 clean, 1 findings, 2 usage or internal error.
"""

from __future__ import annotations

import os
import sys

import click

from dplint import __version__
from dplint.reporters import REPORTERS

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _split(values: tuple[str, ...]) -> tuple[str, ...]:
    """`--select DPL001,strip-module --select DPL00` -> each selector once, in order."""
    out: list[str] = []
    for value in values:
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return tuple(out)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="dplint")
def main() -> None:
    """Find and fix DataParallel / DistributedDataParallel misuses in PyTorch training scripts."""


def _common_options(function):
    options = [
        click.argument("paths", nargs=-1, type=click.Path()),
        click.option("--select", multiple=True, help="Rules to enable (codes, slugs or prefixes such as DPL00)."),
        click.option("--ignore", multiple=True, help="Rules to disable."),
        click.option("--extend-select", multiple=True, help="Rules to enable on top of the selection."),
        click.option(
            "--output-format", envvar="DPLINT_OUTPUT_FORMAT", default=None,
            help=f"Output format: {', '.join(REPORTERS)} (default text; also DPLINT_OUTPUT_FORMAT).",
        ),
        click.option("-o", "--output-file", type=click.Path(dir_okay=False), help="Write the report to this file."),
        click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain."),
        click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also apply (or show) unsafe fixes."),
        click.option("--diff", is_flag=True, help="With fix: print a diff of the fixes instead of writing."),
        click.option("--show-fixes", is_flag=True, help="With fix: list what was fixed per file and rule."),
        click.option("--exit-non-zero-on-fix", is_flag=True, help="With fix: exit 1 when anything was fixed."),
        click.option("--rule", "rules", multiple=True, help="With fix: fix only these rules (repeatable)."),
        click.option("--statistics", is_flag=True, help="Print the number of findings per rule."),
        click.option("--stdin-filename", default=None, help="The name of the file read from stdin (`-`)."),
        click.option("--force-exclude", is_flag=True, help="Apply excludes to paths given on the command line too."),
        click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Processes to use (default: CPU count)."),
        click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache."),
        click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help="Where the cache lives (default .dplint_cache)."),
        click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None, help="Use this configuration file."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@main.command()
@_common_options
@click.option("--fix", "do_fix", is_flag=True, help="Apply fixes (same as `dplint fix`).")
def check(do_fix: bool, **options) -> None:
    """Check files for DataParallel / DDP misuses."""
    sys.exit(_run(fix_mode=do_fix, **options))


@main.command()
@_common_options
def fix(**options) -> None:
    """Apply the safe fixes (and the unsafe ones with --unsafe-fixes), in place."""
    sys.exit(_run(fix_mode=True, **options))


def _run(fix_mode: bool, paths, select, ignore, extend_select, output_format, output_file, exit_zero,
         unsafe_fixes, diff, show_fixes, exit_non_zero_on_fix, rules, statistics, stdin_filename,
         force_exclude, jobs, no_cache, cache_dir, config_file) -> int:
    from dplint.config import ConfigError, is_excluded, load_settings
    from dplint.registry import UnknownRuleError, codes_for
    from dplint.runner import FileReport, FixOptions, RunReport, process_stdin, run

    # As ruff: `-`, or a --stdin-filename, means the code comes on standard input.
    use_stdin = list(paths) == ["-"] or stdin_filename is not None
    if use_stdin and [path for path in paths if path != "-"]:
        click.echo("dplint: warning: reading standard input (--stdin-filename); the paths given are ignored", err=True)
    paths = list(paths) or ["."]
    try:
        overrides = {
            "select": _split(select) or None,
            "ignore": _split(ignore) or None,
            "extend_select": _split(extend_select) or None,
            "unsafe_fixes": unsafe_fixes,
            "output_format": output_format,
        }
        if use_stdin:
            start = os.path.dirname(os.path.abspath(stdin_filename)) if stdin_filename else os.getcwd()
        else:
            start = paths[0]
        settings = load_settings(start, overrides, config_file=config_file)
        settings.enabled_codes()  # resolve selectors now: an unknown one is a usage error
        only_codes = frozenset().union(*(codes_for(rule) for rule in _split(rules))) if rules else None
    except (ConfigError, UnknownRuleError) as error:
        click.echo(f"dplint: error: {error}", err=True)
        return EXIT_ERROR
    if settings.output_format not in REPORTERS:
        click.echo(
            f"dplint: error: unknown output format {settings.output_format!r} (choose from {', '.join(REPORTERS)})",
            err=True,
        )
        return EXIT_ERROR

    fix = FixOptions(unsafe=settings.unsafe_fixes, only_codes=only_codes, write=not diff) if fix_mode or diff else None
    try:
        if use_stdin:
            data = sys.stdin.buffer.read()
            display_path = stdin_filename or "-"
            if force_exclude and stdin_filename and is_excluded(stdin_filename, settings):
                report = RunReport([], 0)  # an excluded file: nothing to say, and the code goes back as it came
                report_one = FileReport(display_path)
            else:
                report_one = process_stdin(data, display_path, settings, fix)
                report = RunReport([report_one], 1)
            if fix is not None and not diff:
                # stdout carries the code, fixed or not, so `dplint fix -` works as an editor filter
                if report_one.fixed_text is not None:
                    sys.stdout.write(report_one.fixed_text)
                    sys.stdout.flush()
                else:
                    sys.stdout.buffer.write(data)
                    sys.stdout.buffer.flush()
        else:
            cache = None if no_cache or fix is not None else (cache_dir or os.path.join(os.getcwd(), ".dplint_cache"))
            report = run(paths, settings, fix=fix, jobs=jobs, cache_dir=cache, force_exclude=force_exclude)
    except ConfigError as error:  # a nested configuration file met on the way
        click.echo(f"dplint: error: {error}", err=True)
        return EXIT_ERROR

    for error in report.errors:
        click.echo(f"dplint: error: {error}", err=True)

    changed = [r for r in report.files if r.diff]
    if diff:
        sys.stdout.flush()
        for file_report in changed:  # bytes: a patch carries the file's characters as they are
            sys.stdout.buffer.write(file_report.diff.encode("utf-8", "surrogateescape"))
        sys.stdout.buffer.flush()
        count = sum(len(r.applied) for r in changed)
        click.echo(f"Would fix {_plural(count, 'problem')} in {_plural(len(changed), 'file')}.", err=True)
        if report.errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if changed else EXIT_CLEAN

    findings = report.findings
    if statistics:
        rendered = _statistics(findings, settings.unsafe_fixes, as_json=settings.output_format in ("json", "json-lines"))
    else:
        rendered = REPORTERS[settings.output_format](
            findings,
            unsafe_fixes=settings.unsafe_fixes,
            files=[file_report.path for file_report in report.files],
        )
    if output_file:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(output_file)), exist_ok=True)
            with open(output_file, "w", encoding="utf-8") as handle:
                handle.write(rendered)
        except OSError as error:
            click.echo(f"dplint: error: cannot write {output_file}: {error.strerror or error}", err=True)
            return EXIT_ERROR
    elif use_stdin and fix is not None:
        click.echo(rendered, nl=False, err=True)  # stdout carries the fixed code
    else:
        click.echo(rendered, nl=False)

    if fix is not None:
        applied = report.applied
        if applied:
            click.echo(f"Fixed {_plural(len(applied), 'problem')} in {_plural(len(changed), 'file')}.", err=True)
        if show_fixes:
            for file_report in report.files:
                if file_report.applied:
                    click.echo(f"- {file_report.path}:", err=True)
                for finding in file_report.applied:
                    click.echo(f"    {finding.code} ({finding.name}) {finding.fix_message}", err=True)

    if report.errors:
        return EXIT_ERROR
    if fix is not None and exit_non_zero_on_fix and report.applied:
        return EXIT_FINDINGS
    if findings and not exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def _statistics(findings, unsafe_fixes: bool, as_json: bool) -> str:
    """The number of findings per rule, most frequent first (instead of the findings)."""
    import json

    from dplint.reporters import fixable

    counts: dict[tuple[str, str], list[int]] = {}
    for finding in findings:
        entry = counts.setdefault((finding.code, finding.name), [0, 0])
        entry[0] += 1
        entry[1] += fixable(finding, unsafe_fixes)
    rows = sorted(counts.items(), key=lambda item: (-item[1][0], item[0]))
    if as_json:
        return json.dumps(
            [{"code": code, "name": name, "count": count, "fixable": fixable} for (code, name), (count, fixable) in rows],
            indent=2,
        ) + "\n"
    lines = [f"{count:5d}\t{code}\t{'[*] ' if fixable else ''}{name}" for (code, name), (count, fixable) in rows]
    if findings:
        lines.append(f"Found {_plural(len(findings), 'problem')}.")
    else:
        lines.append("All checks passed!")
    return "\n".join(lines) + "\n"


@main.command(name="rules")
def list_rules() -> None:
    """List every rule: code, slug, severity, fixable, summary."""
    from dplint.registry import all_rules

    for rule in all_rules():
        fixable = rule.fix_applicability.value if rule.fix_applicability else "no"
        click.echo(f"{rule.code}  {rule.name:<28} {rule.severity.value:<8} fix: {fixable:<8} {rule.summary}")


@main.command()
@click.argument("rule")
def explain(rule: str) -> None:
    """Print a rule's full documentation."""
    from dplint.registry import UnknownRuleError, find_rule

    try:
        found = find_rule(rule)
    except UnknownRuleError as error:
        click.echo(f"dplint: error: {error}", err=True)
        sys.exit(EXIT_ERROR)
    fixable = found.fix_applicability.value if found.fix_applicability else "none"
    click.echo(f"# {found.name} ({found.code})\n\nSeverity: {found.severity.value}. Fix: {fixable}.\n")
    click.echo(found.documentation())


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}, add_help_option=False)
@click.argument("script", type=click.Path())
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def verify(ctx: click.Context, script: str, script_args: tuple[str, ...]) -> None:
    """Run SCRIPT and its fixed version with probes; report, per finding, whether it is real."""
    try:
        from dplint.runtime_check.cli import main as verify_main
    except ImportError as error:
        click.echo(f"dplint: error: verify needs the runtime extra: pip install 'dplint[runtime]' ({error})", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(verify_main([script, *script_args]))
