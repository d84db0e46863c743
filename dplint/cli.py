"""The command line: `dplint check`, `dplint fix`, `dplint rules`, `dplint explain`, `dplint verify`.

Exit codes are a contract (as ruff's): 0 clean, 1 findings, 2 usage or internal error.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from typing import Callable, Optional

import click

from dplint import __version__
from dplint.reporters import REPORTERS

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT: what shells (and ruff) report for a command stopped with Ctrl-C


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


# Set by `entry_point`: this process ends when the command does. A check then leaves the
# garbage collector off after its run (see `_run`) and nothing is torn down at exit.
_PROCESS_ENDS_WITH_COMMAND = False


def entry_point() -> None:
    """The `dplint` command (and `python -m dplint`): `main`, then a hard exit.

    A whole-repository check ends holding millions of tree nodes. A normal interpreter exit
    deallocates each of them and collects garbage once more: a fifth of the CPU time of such a
    run, for memory the operating system takes back anyway. So, like mypy, the command flushes
    its output and leaves with `os._exit`. Were the flush to fail (a closed pipe), the exit is
    Python's own, with its usual message and status."""
    global _PROCESS_ENDS_WITH_COMMAND
    _PROCESS_ENDS_WITH_COMMAND = True
    try:
        main()  # click's standalone mode ends every command with SystemExit
    except SystemExit as done:
        status = done.code
        if status is not None and not isinstance(status, int):
            raise  # a message for Python to print
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            raise done from None
        os._exit(status or 0)
    except Exception as error:
        # A dplint bug: a traceback would exit 1, which means "findings"; 2 is the tool failing.
        _internal_error(error)


def _internal_error(error: Exception) -> None:
    """One line on stderr, and exit 2."""
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    try:
        sys.stderr.write(f"dplint: internal error: {type(error).__name__}: {' '.join(str(error).split())}\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_ERROR)


def _interruptible(command: Callable[[], int]) -> int:
    """`command()`, or EXIT_INTERRUPTED when Ctrl-C stops it, without click's `Aborted!` (exit 1).

    Ctrl-C sends SIGINT to the whole process group: the pool's forked workers inherit the
    handler and leave at once, quietly, so the pool neither prints their tracebacks nor waits
    for the rest of the work. Where SIGINT is ignored (a background job), it stays ignored."""
    installed = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if installed:
        this_process = os.getpid()

        def on_interrupt(signum, frame):
            if os.getpid() != this_process:
                os._exit(EXIT_INTERRUPTED)
            # The pool's manager thread can fail while the broken pool shuts down (Python 3.11:
            # InvalidStateError on a future that the interrupted `map` cancelled): the run is
            # over, and no thread's traceback is news to the user.
            threading.excepthook = lambda args: None
            raise KeyboardInterrupt

        signal.signal(signal.SIGINT, on_interrupt)
    try:
        return command()
    except KeyboardInterrupt:
        _Progress.clear_line()
        return EXIT_INTERRUPTED
    finally:
        if installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _common_options(function):
    options = [
        # Not `readable`: an unreadable path is a DPL000 finding and the run goes on, as in a folder walk.
        click.argument("paths", nargs=-1, type=click.Path(readable=False)),
        click.option("--select", multiple=True, help="Rules to enable (codes, slugs or prefixes such as DPL00)."),
        click.option("--ignore", multiple=True, help="Rules to disable."),
        click.option("--extend-ignore", multiple=True, help="Rules to disable (as --ignore; ruff's spelling)."),
        click.option("--extend-select", multiple=True, help="Rules to enable on top of the selection."),
        click.option(
            "--per-file-ignores", multiple=True, metavar="GLOB:RULES",
            help="Rules to disable in the files a glob matches, e.g. 'tests/*:DPL004,strip-module' (repeatable; "
            "added to the configuration's).",
        ),
        click.option("--exclude", multiple=True, help="Files and folders not to check (globs; replaces the configuration's)."),
        click.option("--extend-exclude", multiple=True, help="More files and folders not to check (globs)."),
        click.option(
            "--output-format", envvar="DPLINT_OUTPUT_FORMAT", default=None,
            help=f"Output format: {', '.join(REPORTERS)} (default: full on a terminal, text otherwise; "
            "also DPLINT_OUTPUT_FORMAT).",
        ),
        click.option("-o", "--output-file", type=click.Path(dir_okay=False, readable=False), help="Write the report to this file."),
        click.option(
            "--fail-on", type=click.Choice(["error", "warning", "info"]), default=None,
            help="The least severe finding that makes the exit code 1 (default info: any finding).",
        ),
        click.option("-e", "--exit-zero", is_flag=True, help="Exit 0 even when findings remain."),
        click.option("-q", "--quiet", is_flag=True, help="Print the findings and nothing else."),
        click.option("-s", "--silent", is_flag=True, help="Print nothing (errors aside); the exit code tells."),
        click.option("--show-files", is_flag=True, help="List the files that would be checked, and exit."),
        click.option("--show-settings", is_flag=True, help="Print the settings the first file is checked with, and exit."),
        click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help="Also apply (or show) unsafe fixes."),
        click.option("--diff", is_flag=True, help="With fix: print a diff of the fixes instead of writing."),
        click.option("--show-fixes", is_flag=True, help="With fix: list what was fixed per file and rule."),
        click.option("--exit-non-zero-on-fix", is_flag=True, help="With fix: exit 1 when anything was fixed."),
        click.option("--rule", "rules", multiple=True, help="With fix: fix only these rules (repeatable)."),
        click.option("--statistics", is_flag=True, help="Print the number of findings per rule."),
        click.option("--stdin-filename", default=None, help="The name of the file read from stdin (`-`)."),
        click.option("--force-exclude", is_flag=True, help="Apply excludes to paths given on the command line too."),
        click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Processes to use (default: CPU count)."),
        click.option("-n", "--no-cache", is_flag=True, help="Neither read nor write the result cache."),
        click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help="Where the cache lives (default .dplint_cache)."),
        click.option(
            "--analysis-timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
            help="The most time one file's analysis may take (default 10); a file that takes longer is reported, unchecked.",
        ),
        click.option("-w", "--watch", is_flag=True, help="Check again whenever a checked file changes (Ctrl-C stops)."),
        click.option(
            "--config", "config", multiple=True,
            help='A configuration file to use for every file, or a `key = value` setting over it (repeatable), '
            'e.g. --config "fail-on = \'error\'".',
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@main.command()
@_common_options
@click.option("--fix", "do_fix", is_flag=True, help="Apply fixes (same as `dplint fix`).")
@click.option("--add-noqa", is_flag=True, help="Add a `# noqa: DPLxxx` to each line with findings, and exit.")
def check(do_fix: bool, add_noqa: bool, **options) -> None:
    """Check files for DataParallel / DDP misuses."""
    sys.exit(_interruptible(lambda: _run(fix_mode=do_fix, add_noqa=add_noqa, **options)))


@main.command()
@_common_options
def fix(**options) -> None:
    """Apply the safe fixes (and the unsafe ones with --unsafe-fixes), in place."""
    sys.exit(_interruptible(lambda: _run(fix_mode=True, **options)))


STATISTICS_FORMATS = ("text", "full", "concise", "json", "json-lines")  # --statistics has a shape for these


def _config_files_and_settings(config: tuple[str, ...]) -> tuple[Optional[str], Optional[tuple]]:
    """`--config` values: a configuration file (at most one), and `key = value` settings."""
    from dplint.config import ConfigError, parse_config_override

    files = [value for value in config if "=" not in value or os.path.isfile(value)]
    pairs = [value for value in config if value not in files]
    if len(files) > 1:
        raise ConfigError(f"--config: one configuration file at most, not {len(files)} ({', '.join(files)})")
    return (files[0] if files else None), (parse_config_override("\n".join(pairs)) if pairs else None)


def _run(*, watch: bool = False, **options) -> int:
    """One run, or with `watch` a run each time a checked file changes, until Ctrl-C."""
    if not watch:
        return _run_once(**options)
    if list(options["paths"]) == ["-"] or options["stdin_filename"] is not None:
        click.echo("dplint: error: --watch needs files to watch, not standard input", err=True)
        return EXIT_ERROR
    if options.get("add_noqa") or options["show_files"] or options["show_settings"]:
        click.echo("dplint: error: --watch cannot be combined with --add-noqa, --show-files or --show-settings", err=True)
        return EXIT_ERROR
    quiet = options["quiet"] or options["silent"]
    _watch_message(quiet, "Starting dplint in watch mode...")
    while True:
        watched: list[str] = list(options["paths"]) or ["."]  # all there is to watch when the run fails early
        _run_once(**options, watched=watched)
        sys.stdout.flush()
        # Taken after the run, so that the files `--fix` has just written do not start another.
        state = _watched_state(watched)
        _watch_message(quiet, "Watching for file changes.")
        while _watched_state(watched) == state:
            time.sleep(WATCH_INTERVAL_SECONDS)
        click.clear()  # a no-op unless stdout is a terminal
        _watch_message(quiet, "File change detected...")


WATCH_INTERVAL_SECONDS = 0.5


def _watch_message(quiet: bool, message: str) -> None:
    if not quiet:
        click.echo(f"[{time.strftime('%H:%M:%S')}] {message}", err=True)


def _watched_state(paths: list[str]) -> list:
    """What a change is seen by: each path's modification time and size (None: gone). The
    checked files' folders are among the paths, so a file added to one of them counts."""
    state = []
    for path in paths:
        try:
            info = os.stat(path)
            state.append((info.st_mtime_ns, info.st_size))
        except OSError:
            state.append(None)
    return state


def _run_once(*, fix_mode: bool, paths, select, ignore, extend_ignore, extend_select, per_file_ignores, exclude,
              extend_exclude, output_format, output_file, fail_on, exit_zero, quiet, silent, show_files, show_settings,
              unsafe_fixes, diff, show_fixes, exit_non_zero_on_fix, rules, statistics, stdin_filename, force_exclude,
              jobs, no_cache, cache_dir, config, analysis_timeout, add_noqa: bool = False,
              watched: Optional[list] = None) -> int:
    """One run. `watched`, when given, receives the paths whose changes call for another run."""
    from dplint.config import SEVERITY_ORDER, ConfigError, is_excluded, load_settings, parse_per_file_ignores
    from dplint.registry import UnknownRuleError, codes_for
    from dplint.reports import FileReport, RunReport
    from dplint.runner import FixOptions, files_to_check, process_stdin, run

    quiet = quiet or silent
    if add_noqa and (fix_mode or diff or list(paths) == ["-"] or stdin_filename is not None):
        click.echo("dplint: error: --add-noqa cannot be combined with --fix, --diff or standard input", err=True)
        return EXIT_ERROR
    if _PROCESS_ENDS_WITH_COMMAND and watched is None:
        # The run switches the collector off while it works; turned back on, its first pass would
        # walk every node the run left behind, for memory the exit hands back anyway.
        gc.disable()

    def inform(message: str) -> None:  # what -q and -s silence: summaries and warnings on stderr
        if not quiet:
            click.echo(message, err=True)

    # As ruff: `-`, or a --stdin-filename, means the code comes on standard input.
    use_stdin = list(paths) == ["-"] or stdin_filename is not None
    if use_stdin and [path for path in paths if path != "-"]:
        inform("dplint: warning: reading standard input (--stdin-filename); the paths given are ignored")
    paths = list(paths) or ["."]
    try:
        config_file, config_settings = _config_files_and_settings(config)
        overrides = {
            "select": _split(select) or None,
            "ignore": _split(ignore + extend_ignore) or None,
            "per_file_ignores": parse_per_file_ignores(per_file_ignores) or None,
            "analysis_timeout": analysis_timeout,
            "extend_select": _split(extend_select) or None,
            "exclude": _split(exclude) or None,
            "extend_exclude": _split(extend_exclude) or None,
            "unsafe_fixes": unsafe_fixes,
            "output_format": output_format,
            "fail_on": fail_on,
            "config": config_settings,
        }
        if use_stdin:
            start = os.path.dirname(os.path.abspath(stdin_filename)) if stdin_filename else os.getcwd()
        else:
            start = paths[0]
        cache = None if no_cache or use_stdin else (cache_dir or os.path.join(os.getcwd(), ".dplint_cache"))
        if cache is not None:
            from dplint.cache import catalog_file
            from dplint.registry import keep_catalog_in

            keep_catalog_in(catalog_file(cache))  # the rules' codes and tokens, as the last run read them
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
    output = settings.output_format
    if output_format is None and "output-format" not in settings.configured and not output_file and sys.stdout.isatty():
        output = "full"  # as ruff: the code frames on a terminal, one line per finding in pipes and logs
    if statistics and output not in STATISTICS_FORMATS:
        click.echo(
            f"dplint: error: --statistics cannot be shown as {output} (use {', '.join(STATISTICS_FORMATS)})", err=True
        )
        return EXIT_ERROR

    if show_files or show_settings:
        try:
            files, _ = files_to_check(paths, settings, force_exclude)
        except ConfigError as error:
            click.echo(f"dplint: error: {error}", err=True)
            return EXIT_ERROR
        if show_settings:
            click.echo(_settings_text(files[0] if files else paths[0], settings), nl=False)
        elif files:
            click.echo("".join(f"{path}\n" for path in files), nl=False)
        if not files:
            inform(NO_FILES_WARNING)
        return EXIT_CLEAN

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
                if report_one.fixed_bytes is not None:  # in the input's encoding, its BOM kept
                    sys.stdout.buffer.write(report_one.fixed_bytes)
                    sys.stdout.buffer.flush()
                else:
                    sys.stdout.buffer.write(data)
                    sys.stdout.buffer.flush()
        else:
            progress = _Progress(output, quiet, to_file=bool(output_file))
            try:
                report = run(paths, settings, fix=fix, jobs=jobs, cache_dir=cache, force_exclude=force_exclude,
                             progress=progress)
            finally:
                progress.done()
            if watched is not None:
                checked = [file_report.path for file_report in report.files]
                config_files = [settings.config_file] if settings.config_file else []
                watched.extend(dict.fromkeys([*config_files, *checked, *map(_folder, checked)]))
            if not report.files:
                inform(NO_FILES_WARNING)
    except ConfigError as error:  # a nested configuration file met on the way
        click.echo(f"dplint: error: {error}", err=True)
        return EXIT_ERROR

    for error in report.errors:
        click.echo(f"dplint: error: {error}", err=True)

    if add_noqa:
        return _add_noqa(report, inform)

    changed = [r for r in report.files if r.diff]
    if diff:
        if not silent:
            sys.stdout.flush()
            for file_report in changed:  # bytes: a patch carries the file's characters as they are
                sys.stdout.buffer.write(file_report.diff.encode("utf-8", "surrogateescape"))
            sys.stdout.buffer.flush()
        count = sum(len(r.applied) for r in changed)
        inform(f"Would fix {_plural(count, 'problem')} in {_plural(len(changed), 'file')}.")
        if report.errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if changed else EXIT_CLEAN

    findings = report.findings
    if statistics:
        rendered = _statistics(findings, settings.unsafe_fixes, output, summary=not quiet)
    else:
        rendered = REPORTERS[output](
            findings,
            unsafe_fixes=settings.unsafe_fixes,
            files=[file_report.path for file_report in report.files],
            summary=not quiet,
        )
    if output_file:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(output_file)), exist_ok=True)
            with open(output_file, "w", encoding="utf-8") as handle:
                handle.write(rendered)
        except OSError as error:
            click.echo(f"dplint: error: cannot write {output_file}: {error.strerror or error}", err=True)
            return EXIT_ERROR
    elif silent:
        pass
    elif use_stdin and fix is not None:
        click.echo(rendered, nl=False, err=True)  # stdout carries the fixed code
    else:
        click.echo(rendered, nl=False)

    if fix is not None:
        applied = report.applied
        if applied:
            inform(f"Fixed {_plural(len(applied), 'problem')} in {_plural(len(changed), 'file')}.")
        if show_fixes and not quiet:
            for file_report in report.files:
                if file_report.applied:
                    click.echo(f"- {file_report.path}:", err=True)
                for finding in file_report.applied:
                    click.echo(f"    {finding.code} ({finding.name}) {finding.fix_message}", err=True)

    if report.errors:
        return EXIT_ERROR
    if fix is not None and exit_non_zero_on_fix and report.applied:
        return EXIT_FINDINGS
    threshold = SEVERITY_ORDER.index(settings.fail_on)
    if any(SEVERITY_ORDER.index(f.severity.value) >= threshold for f in findings) and not exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


NO_FILES_WARNING = "dplint: warning: No Python files found under the given path(s)"


def _folder(path: str) -> str:
    return os.path.dirname(path) or "."


# ---------------------------------------------------------------------------- progress
PROGRESS_MIN_FILES = 200  # a smaller run ends before a counter is worth reading
MACHINE_FORMATS = ("json", "json-lines", "sarif", "junit", "github")  # read by programs, not people


def shows_progress(files: int, output: str, quiet: bool, stdout_is_terminal: bool, stderr_is_terminal: bool,
                   to_file: bool = False) -> bool:
    """Whether a run shows `[123/3809] files` on stderr: only a long run, seen by a person on a
    terminal (stderr, and stdout unless the report goes to a file), with a report for people."""
    return (
        files >= PROGRESS_MIN_FILES
        and not quiet
        and output not in MACHINE_FORMATS
        and stderr_is_terminal
        and (stdout_is_terminal or to_file)
    )


class _Progress:
    """The runner's `progress` callback: a counter on stderr, redrawn in place (`\\r`), at most
    ten times a second, and erased when the run ends."""

    INTERVAL_SECONDS = 0.1
    _shown = 0  # the width of the line on screen (class-wide: Ctrl-C erases it from outside the run)

    def __init__(self, output: str, quiet: bool, to_file: bool) -> None:
        self.output, self.quiet, self.to_file = output, quiet, to_file
        self.wanted: Optional[bool] = None  # decided at the first call, when the number of files is known
        self.drawn_at = 0.0

    def __call__(self, done: int, total: int) -> None:
        if self.wanted is None:
            self.wanted = shows_progress(total, self.output, self.quiet, _isatty(sys.stdout), _isatty(sys.stderr), self.to_file)
        now = time.monotonic()
        if not self.wanted or (done < total and now - self.drawn_at < self.INTERVAL_SECONDS):
            return
        self.drawn_at = now
        line = f"[{done}/{total}] files"
        sys.stderr.write("\r" + line.ljust(_Progress._shown))
        sys.stderr.flush()
        _Progress._shown = len(line)

    def done(self) -> None:
        _Progress.clear_line()

    @staticmethod
    def clear_line() -> None:
        if _Progress._shown:
            sys.stderr.write("\r" + " " * _Progress._shown + "\r")
            sys.stderr.flush()
            _Progress._shown = 0


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced, or closed
        return False


# ---------------------------------------------------------------------------- --add-noqa
NOQA_SKIPPED_CODES = ("DPL000", "DPL100")  # a file that cannot be read or parsed; a suppression to remove, not to silence


def _add_noqa(report, inform) -> int:
    """`check --add-noqa`: a `# noqa: CODE` on each line with findings (as ruff's), written in place."""
    from dplint.source import SourceError, read_source, write_atomic
    from dplint.suppressions import add_noqa

    rows_by_file: dict[str, dict[int, set[str]]] = {}
    for finding in report.findings:
        if finding.code in NOQA_SKIPPED_CODES or finding.filename.endswith(".ipynb"):
            continue
        rows_by_file.setdefault(finding.filename, {}).setdefault(finding.location.row, set()).add(finding.code)
    added = not_added = 0
    failed = bool(report.errors)
    for path, rows in sorted(rows_by_file.items()):
        try:
            source = read_source(path)
            text, count, left = add_noqa(source.text, rows)
            if count:
                write_atomic(path, text.encode(source.encoding))
        except (SourceError, OSError, UnicodeEncodeError) as error:
            click.echo(f"dplint: error: {path}: cannot add noqa directives: {getattr(error, 'strerror', None) or error}", err=True)
            failed = True
            continue
        added += count
        not_added += left
    inform(f"Added {_plural(added, 'noqa directive')}.")
    if not_added:
        inform(
            f"dplint: warning: {_plural(not_added, 'line')} with findings cannot take a `# noqa` (the line ends inside "
            "a string or continues with a backslash); use `# dplint: ignore[...]` on the line above"
        )
    return EXIT_ERROR if failed else EXIT_CLEAN


def _settings_text(path: str, settings) -> str:
    """`--show-settings`: the settings that apply to `path`, one `key = value` line each."""
    import json

    resolved = settings.for_path(path)
    values = {
        "select": list(resolved.select) if resolved.select is not None else ["ALL"],
        "ignore": list(resolved.ignore),
        "extend-select": list(resolved.extend_select),
        "per-file-ignores": {pattern: list(selectors) for pattern, selectors in resolved.per_file_ignores},
        "exclude": list(resolved.exclude),
        "extend-exclude": list(resolved.extend_exclude),
        "unsafe-fixes": resolved.unsafe_fixes,
        "output-format": settings.output_format,
        "fail-on": settings.fail_on,
        "analysis-timeout": resolved.analysis_timeout,
        "enabled rules": sorted(resolved.enabled_codes(path)),
    }
    lines = [
        f"Resolved settings for: {path}",
        f"Settings path: {resolved.config_file or '(none: the defaults)'}",
        f"Globs relative to: {resolved.root}",
        *(f"{key} = {json.dumps(value)}" for key, value in values.items()),
    ]
    return "\n".join(lines) + "\n"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def _statistics(findings, unsafe_fixes: bool, output: str, summary: bool = True) -> str:
    """The number of findings per rule, most frequent first (instead of the findings)."""
    import json

    from dplint.reporters import fixable

    counts: dict[tuple[str, str], list[int]] = {}
    for finding in findings:
        entry = counts.setdefault((finding.code, finding.name), [0, 0])
        entry[0] += 1
        entry[1] += fixable(finding, unsafe_fixes)
    rows = sorted(counts.items(), key=lambda item: (-item[1][0], item[0]))
    objects = [{"code": code, "name": name, "count": count, "fixable": fixable} for (code, name), (count, fixable) in rows]
    if output == "json":
        return json.dumps(objects, indent=2) + "\n"
    if output == "json-lines":
        return "".join(json.dumps(entry) + "\n" for entry in objects)
    lines = [f"{count:5d}\t{code}\t{'[*] ' if fixable else ''}{name}" for (code, name), (count, fixable) in rows]
    if not summary or output == "concise":
        return "".join(line + "\n" for line in lines)
    if findings:
        lines.append(f"Found {_plural(len(findings), 'problem')}.")
    else:
        lines.append("All checks passed!")
    return "\n".join(lines) + "\n"


def _rule_fix(rule) -> str:
    if rule.fix_safety:
        return rule.fix_safety
    return rule.fix_applicability.value if rule.fix_applicability else "none"


def _rule_object(rule) -> dict:
    """A rule as `rules --output-format json` and `rule --output-format json` show it (ruff's keys)."""
    return {
        "code": rule.code,
        "name": rule.name,
        "linter": "dplint",
        "severity": rule.severity.value,
        "fix": _rule_fix(rule),
        "summary": rule.summary,
        "explanation": rule.documentation(),
    }


_RULE_FORMAT = click.option(
    "--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)


@main.command(name="rules")
@_RULE_FORMAT
def list_rules(output_format: str) -> None:
    """List every rule: code, slug, severity, fixable, summary."""
    import json

    from dplint.registry import all_rules

    if output_format == "json":
        click.echo(json.dumps([_rule_object(rule) for rule in all_rules()], indent=2))
        return
    for rule in all_rules():
        fixable = rule.fix_safety or (rule.fix_applicability.value if rule.fix_applicability else "no")
        click.echo(f"{rule.code}  {rule.name:<28} {rule.severity.value:<8} fix: {fixable:<8} {rule.summary}")


@main.command(name="rule")
@click.argument("rule", required=False)
@click.option("--all", "show_all", is_flag=True, help="Every rule's documentation.")
@_RULE_FORMAT
def explain(rule: Optional[str], show_all: bool, output_format: str) -> None:
    """Print a rule's full documentation (`explain` is the same command)."""
    import json

    from dplint.registry import UnknownRuleError, all_rules, find_rule

    if show_all == (rule is not None):
        click.echo("dplint: error: name one rule (a code or slug), or give --all", err=True)
        sys.exit(EXIT_ERROR)
    try:
        found = list(all_rules()) if show_all else [find_rule(rule)]
    except UnknownRuleError as error:
        click.echo(f"dplint: error: {error}", err=True)
        sys.exit(EXIT_ERROR)
    if output_format == "json":
        objects = [_rule_object(one) for one in found]
        click.echo(json.dumps(objects if show_all else objects[0], indent=2))
        return
    for index, one in enumerate(found):
        if index:
            click.echo()
        click.echo(f"# {one.name} ({one.code})\n\nSeverity: {one.severity.value}. Fix: {_rule_fix(one)}.\n")
        click.echo(one.documentation())


main.add_command(explain, name="explain")


@main.command()
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def version(output_format: str) -> None:
    """Print dplint's version."""
    import json

    if output_format == "json":
        click.echo(json.dumps({"version": __version__}))
    else:
        click.echo(f"dplint {__version__}")


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(file_okay=False))
def clean(paths: tuple[str, ...]) -> None:
    """Remove the result caches (`.dplint_cache`) in the given folders (default ".") and below."""
    import shutil

    from dplint.discovery import SKIPPED_FOLDERS

    for root in paths or (".",):
        for folder, subfolders, _ in os.walk(root):
            if ".dplint_cache" in subfolders:
                cache = os.path.join(folder, ".dplint_cache")
                click.echo(f"Removing cache at: {cache}", err=True)
                shutil.rmtree(cache, ignore_errors=True)
            subfolders[:] = [name for name in subfolders if name not in SKIPPED_FOLDERS]


# `dplint verify`: its click command lives with the runtime check (it needs torch only when run).
from dplint.runtime_check.command import verify  # noqa: E402

main.add_command(verify)

# `dplint migrate`: DataParallel / one-device script -> DDP (dplint/migrate.py; no torch).
from dplint.migrate import migrate  # noqa: E402

main.add_command(migrate)


@main.command()
def server() -> None:
    """Run the language server (LSP over stdio) for editors; needs the `lsp` extra (pygls)."""
    try:
        from dplint.server import main as serve
    except ImportError as error:
        # dplint is not on the package index: the extra comes from a clone or a wheel
        click.echo(f"dplint: error: the server needs the lsp extra (pygls): pip install '.[lsp]' in a clone of "
                   f"dplint, or pip install 'dplint-*.whl[lsp]' with the wheel ({error})", err=True)
        sys.exit(EXIT_ERROR)
    serve()
