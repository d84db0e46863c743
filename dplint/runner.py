"""One run over many files: discover, read, lint or fix each (in parallel when it pays), cache,
then the project-wide checks that link files (a checkpoint saved in one, loaded in another).

Nothing here imports LibCST or the engine at module level: a file that comes from the cache,
or that the pre-filter skips, is never parsed, and a run made only of such files never
imports the engine.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from dplint.config import Settings, is_excluded
from dplint.discovery import discover
from dplint.reports import FileReport, RunReport, cacheable, problem_finding, timeout_finding
from dplint.rule import Finding
from dplint.source import (AnalysisTimeout, SourceError, call_with_deep_stack, content_key, decode, read_bytes, read_source,
                           scanned_text, write_atomic)

PARALLEL_THRESHOLD = 8  # below this many files a process pool costs more than it saves
# A run keeps every parsed file's tree (the project's models), millions of objects that
# Python's cyclic collector would walk again and again although they hold almost no cycles:
# automatic collection is off during a run (13% of a whole-repository run's CPU time). A full
# collection runs between two files once COLLECT_AFTER more objects were allocated than freed
# since the last one, so memory stays bounded on a huge repository (a collection then costs
# ~0.4 s, so never on an ordinary run).
COLLECT_AFTER = 5_000_000


@dataclass(frozen=True)
class FixOptions:
    unsafe: bool = False
    only_codes: Optional[frozenset[str]] = None  # --rule
    write: bool = True  # False with --diff


def analysis_timeout(settings: Settings, path: Optional[str] = None) -> Optional[float]:
    """The per-file budget in seconds (None: unbounded), as the file's configuration sets it."""
    seconds = (settings if path is None else settings.for_path(path)).analysis_timeout
    return seconds if seconds and seconds > 0 else None


_PROJECTS: dict = {}  # roots -> Project, one per process (a pool's workers each build their own)


def project_for(roots: tuple[str, ...]):
    """The project (imports resolved across files) shared by every file of a run in this process."""
    from dplint.project import Project

    if roots not in _PROJECTS:
        _PROJECTS.clear()
        _PROJECTS[roots] = Project(roots)
    return _PROJECTS[roots]


def process_text(text: str, path: str, settings: Settings, fix: Optional[FixOptions],
                 roots: Optional[tuple[str, ...]] = None) -> FileReport:
    """Lint or fix one file's text; with `roots`, values are followed into the project files
    it imports (found from its folder up to the project root)."""
    from dplint.diffs import unified_diff
    from dplint.engine import fix_source, lint_source, rules_for

    rules = rules_for(settings.enabled_codes(path))
    project = project_for(roots) if roots is not None else None
    report = FileReport(path)
    if fix is None:
        result = lint_source(text, path, rules, project)
        report.findings, report.errors, report.facts = result.findings, result.errors, result.facts
        report.dependencies = result.dependencies
        return report
    fixed = fix_source(text, path, rules, unsafe=fix.unsafe, only_codes=fix.only_codes, project=project)
    report.findings, report.errors, report.facts = fixed.remaining.findings, fixed.remaining.errors, fixed.remaining.facts
    report.dependencies = fixed.remaining.dependencies
    report.applied = fixed.applied
    if fixed.text != text:
        report.fixed_text = fixed.text
        report.diff = unified_diff(text, fixed.text, path)
    return report


def process_text_guarded(text: str, path: str, settings: Settings, fix: Optional[FixOptions],
                         roots: Optional[tuple[str, ...]] = None) -> FileReport:
    """`process_text`, where a dplint bug costs this one file, never the run, and an analysis
    that runs past the budget (`analysis_timeout`) costs this file's findings, never a hang."""
    try:
        # A deep stack: LibCST's native parser segfaults on deeply nested (valid) code.
        return call_with_deep_stack(process_text, text, path, settings, fix, roots, timeout=analysis_timeout(settings, path))
    except AnalysisTimeout as timeout:
        _PROJECTS.clear()  # what the stopped analysis memoised may be half made: start afresh
        return FileReport(path, [timeout_finding(path, timeout)])
    except Exception as error:
        reason = "nested too deeply to analyse" if isinstance(error, RecursionError) else f"{type(error).__name__}: {error}"
        return FileReport(path, errors=[f"{path}: internal error: {' '.join(reason.split())}; the file is unchanged"])


def process_file(path: str, settings: Settings, fix: Optional[FixOptions],
                 roots: Optional[tuple[str, ...]] = None) -> FileReport:
    if path.endswith(".ipynb"):  # notebooks: code cells joined into one module (dplint/notebook.py)
        return process_notebook_file(path, settings, fix)
    try:
        source = read_source(path)
    except SourceError as error:
        return FileReport(path, [problem_finding(path, str(error))])
    report = process_text_guarded(source.text, path, settings, fix, roots)
    _with_bom(report, source.text, source.encoding)
    if fix is not None and fix.write and report.fixed_text is not None:
        problem = None
        try:
            data = report.fixed_text.encode(source.encoding)
            if read_source(path).raw != source.raw:  # edited (or fixed by another run) meanwhile
                problem = "changed while being fixed; the fix was not written"
            else:
                write_atomic(path, data)
        except UnicodeEncodeError as error:
            problem = f"cannot write the fix: {error.object[error.start]!r} cannot be encoded as {source.encoding}; the file is unchanged"
        except SourceError as error:
            problem = f"changed while being fixed ({error}); the fix was not written"
        except OSError as error:
            problem = f"cannot write the fix: {error.strerror or error}; the file is unchanged"
        if problem is not None:
            report.errors.append(f"{path}: {problem}")
            report.applied = []
    return report


def process_notebook_text(raw: str, path: str, settings: Settings, fix: Optional[FixOptions],
                          bom: bool = False) -> FileReport:
    """Lint (or fix) a notebook's JSON text; a fix puts the new JSON in `fixed_text` and its
    patch in `diff` (`bom`: the file starts with a UTF-8 BOM, which `raw` does not carry)."""
    from dplint.diffs import unified_diff
    from dplint.notebook import NotebookError, loads, relocate

    try:
        notebook = loads(raw)
    except NotebookError as error:
        return FileReport(path, [problem_finding(path, str(error))])
    if not notebook.cells:
        return FileReport(path)
    report = process_text_guarded(notebook.text, path, settings, fix)
    report.diff = ""
    fixed = notebook  # the findings left after a fix are positions in the fixed cells
    if report.fixed_text is not None:
        sources = notebook.split(report.fixed_text)
        fixed = notebook.laid_out_as(report.fixed_text)
        report.fixed_text = None
        if sources is None:
            report.errors.append(f"{path}: internal error: a fix crossed a cell boundary; the notebook is unchanged")
            report.applied = []
        else:
            report.fixed_text = notebook.dumps(sources)
            report.diff = unified_diff(raw, report.fixed_text, path, bom=bom, encoding="utf-8")
    report.findings = [relocate(finding, fixed) for finding in report.findings]
    report.applied = [relocate(finding, notebook) for finding in report.applied]
    return report


def process_notebook_file(path: str, settings: Settings, fix: Optional[FixOptions]) -> FileReport:
    """`process_file` for a notebook: read, lint or fix, write back in place."""
    try:
        source = read_source(path)
        raw = source.raw.decode("utf-8-sig")
    except SourceError as error:
        return FileReport(path, [problem_finding(path, str(error))])
    except UnicodeDecodeError as error:
        return FileReport(path, [problem_finding(path, f"cannot read notebook: not UTF-8 (byte {error.start})")])
    has_bom = source.raw.startswith(b"\xef\xbb\xbf")
    report = process_notebook_text(raw, path, settings, fix, bom=has_bom)
    if fix is not None and fix.write and report.fixed_text is not None:
        bom = "\ufeff" if has_bom else ""
        try:
            if read_source(path).raw != source.raw:
                report.errors.append(f"{path}: changed while being fixed; the fix was not written")
                report.applied = []
            else:
                write_atomic(path, (bom + report.fixed_text).encode("utf-8"))
        except (SourceError, OSError) as error:
            report.errors.append(f"{path}: cannot write the fix: {getattr(error, 'strerror', None) or error}; the file is unchanged")
            report.applied = []
    return report


def _fix_one(args) -> FileReport:
    _collect_if_grown()
    return process_file(*args)


def _lint_one(args) -> FileReport:
    _collect_if_grown()
    path, text, settings, roots = args
    return process_text_guarded(text, path, settings, None, roots)


def _collect_if_grown() -> None:
    """The collection a run makes itself (see COLLECT_AFTER), in each process."""
    if not gc.isenabled() and gc.get_count()[0] > COLLECT_AFTER:
        gc.collect()


def may_match(text: str, codes: frozenset[str], own: Optional[str] = None) -> bool:
    """The runner's pre-filter, the engine's (`could_match`) over all enabled rules at once:
    can any of them fire on this text (`own`: see `could_match`)? A file that fails it is
    clean without being parsed."""
    from dplint.registry import rule_catalog
    from dplint.rule import rule_may_match

    return any(rule.code in codes and rule_may_match(text, rule, own) for rule in rule_catalog())


def files_to_check(paths: list[str], settings: Settings, force_exclude: bool = False) -> tuple[list[str], list]:
    """The files a run checks (excludes applied) and the paths that could not be read."""
    include = settings.extend_include  # `extend-include`: more files for folder walks
    files, problems = discover(paths, include) if include else discover(paths)
    explicit = {os.path.normpath(p) for p in paths}
    files = [
        f for f in files
        if not is_excluded(f, settings) or (f in explicit and not force_exclude)
    ]
    return files, problems


def run(
    paths: list[str],
    settings: Settings,
    fix: Optional[FixOptions] = None,
    jobs: Optional[int] = None,
    cache_dir: Optional[str] = None,
    force_exclude: bool = False,
    progress: Optional[Callable[[int, int], None]] = None,
) -> RunReport:
    """`progress(done, total)`, if given, is called each time a file's analysis ends (files
    the cache or the pre-filter answers count as done from the start)."""
    collecting = gc.isenabled()
    gc.disable()  # see COLLECT_AFTER; the pool's workers are forked with it off too
    try:
        return _run(paths, settings, fix, jobs, cache_dir, force_exclude, progress)
    finally:
        if collecting:
            gc.enable()


def _run(paths: list[str], settings: Settings, fix: Optional[FixOptions], jobs: Optional[int],
         cache_dir: Optional[str], force_exclude: bool,
         progress: Optional[Callable[[int, int], None]] = None) -> RunReport:
    files, problems = files_to_check(paths, settings, force_exclude)
    _PROJECTS.clear()  # files are read as they are now: nothing parsed by an earlier run in this process
    reports: dict[str, FileReport] = {p.path: FileReport(p.path, [problem_finding(p.path, p.message)]) for p in problems}
    jobs = jobs or available_cpus()
    # Imports resolve up to the folders the run was started on (or a project root above a file).
    roots = tuple(sorted({os.path.abspath(p) for p in paths if os.path.isdir(p)}))

    cache = None
    if cache_dir is not None:
        from dplint.cache import Cache

        cache = Cache(cache_dir)
        cache.use_pack(paths, len(files))
    todo: list[tuple] = []
    keys: dict[str, tuple[str, str]] = {}  # path -> (content hash, rule set) for the cache
    sizes: dict[str, int] = {}

    from dplint.registry import rule_catalog
    from dplint.rule import token_parts, tokens_in

    catalog_parts = token_parts(rule_catalog())

    def plan(path: str, source, codes: frozenset[str]) -> None:
        """A file the cache cannot answer for: clean unread when the pre-filter says so, else to do."""
        closure: dict[str, str] = {}
        scanned = scanned_text(source.text)
        matches = may_match(scanned, codes)
        if not matches:
            # A file may still need parsing for what the project files it imports hold. Read
            # within the file's budget too: past it, the file is analysed (and budgeted) anyway.
            try:
                closure = call_with_deep_stack(project_for(roots).import_closure, path, scanned,
                                               timeout=analysis_timeout(settings, path))
            except AnalysisTimeout:
                _PROJECTS.clear()
                closure, matches = {}, True
            else:
                matches = bool(closure) and may_match(tokens_in((scanned, *closure.values()), catalog_parts), codes, scanned)
        if not matches:
            reports[path] = FileReport(path, dependencies=project_for(roots).hashes(closure))
            if cache is not None:
                cache.put(path, *keys[path], reports[path])
            return
        sizes[path] = len(source.text)
        # Fixing writes files: each worker reads and writes its own.
        todo.append((path, settings, fix, roots) if fix is not None else (path, source.text, settings, roots))

    # With a cache, every file is hashed before any cached result is looked up: a result is
    # valid while the files it depends on (those it imports, those importing it) hash as they
    # did, and most of those are files of this run, so their hashes are then known.
    hashed: dict[str, str] = {}  # absolute path -> content hash, as read in this run
    unanswered: list[tuple[str, frozenset[str]]] = []
    for path in files:
        if path.endswith(".ipynb"):  # notebooks (dplint/notebook.py): linted here, alone (no project)
            reports[path] = _notebook_report(path, settings, fix, cache)
            continue
        try:
            # Undecoded with a cache: a file it answers for is never decoded.
            source = read_source(path) if cache is None else read_bytes(path)
        except SourceError as error:
            reports[path] = FileReport(path, [problem_finding(path, str(error))])
            continue
        codes = settings.enabled_codes(path)
        if cache is None:
            plan(path, source, codes)
            continue
        from dplint.cache import rule_set_key

        # The rules in force are part of the key: a nested configuration file can change them.
        keys[path] = (content_key(source), rule_set_key(codes))
        hashed[os.path.abspath(path)] = keys[path][0]
        unanswered.append((path, codes))
    for path, codes in unanswered:
        cached = cache.get(path, *keys[path], hashed)
        # `fix` too: a cached result without a fix to apply means there is nothing to do.
        if cached is not None and (fix is None or not any(wants_fix(f, fix) for f in cached.findings)):
            reports[path] = cached
            continue
        try:
            source = read_source(path)  # again: texts are not kept for the files the cache answers
        except SourceError as error:
            reports[path] = FileReport(path, [problem_finding(path, str(error))])
            continue
        keys[path] = (content_key(source.raw), keys[path][1])  # edited since it was hashed: as read now
        plan(path, source, codes)
    # Largest first, so that no worker is left with a big file at the end.
    todo.sort(key=lambda item: -sizes[item[0]])
    total = len(set(files).union(problem.path for problem in problems))

    def record(report: FileReport) -> None:
        reports[report.path] = report
        if cache is not None and cacheable(report):
            _cache_result(cache, report, keys[report.path], fix)
        if progress is not None:
            progress(len(reports), total)

    if fix is None and _pooled(todo, jobs):
        for item in _lint_before_forking(project_for(roots), todo, jobs, analysis_timeout(settings)):
            record(_lint_one(item))
        todo = [item for item in todo if item[0] not in reports]
    for report in _map(_lint_one if fix is None else _fix_one, todo, jobs):
        record(report)

    _move_findings_to_their_files(reports)
    ordered = [reports[path] for path in sorted(reports)]
    add_project_findings(ordered, settings, cache)
    if cache is not None:
        cache.save()
    return RunReport(ordered, len(files))


def _notebook_report(path: str, settings: Settings, fix: Optional[FixOptions], cache) -> FileReport:
    """A notebook's report, from the cache when its bytes and rules are those of a cached run.

    A notebook is analysed without the project, so nothing but its bytes and the rules decide
    its findings. Only lint runs use the cache; the result is stored only when the notebook's
    bytes after linting are those read before (not edited meanwhile)."""
    if cache is None or fix is not None:
        return process_file(path, settings, fix)
    from dplint.cache import rule_set_key

    try:
        raw = read_source(path).raw
    except SourceError:
        return process_file(path, settings, fix)
    key = (content_key(raw), rule_set_key(settings.enabled_codes(path)))
    cached = cache.get(path, *key)
    if cached is not None:
        return cached
    report = process_file(path, settings, fix)
    try:
        unchanged = read_source(path).raw == raw
    except SourceError:
        unchanged = False
    if unchanged and cacheable(report):
        cache.put(path, *key, report)
    return report


def wants_fix(finding: Finding, fix: FixOptions) -> bool:
    """Whether `fix` would apply this finding's fix (the engine's `fix_is_wanted`, without LibCST)."""
    from dplint.rule import Applicability

    if not finding.edits or finding.fix_applicability not in (Applicability.SAFE, Applicability.UNSAFE):
        return False
    if finding.fix_applicability is Applicability.UNSAFE and not fix.unsafe:
        return False
    return fix.only_codes is None or finding.code in fix.only_codes


def _cache_result(cache, report: FileReport, key: tuple[str, str], fix: Optional[FixOptions]) -> None:
    """Cache what a run found in a file: the remaining findings are those of the file as it now is."""
    content, rules = key
    if fix is not None and report.fixed_text is not None:
        if not fix.write or not report.applied:
            return  # --diff: the findings are those of a text that is not on disk
        try:
            content = content_key(read_source(report.path).raw)  # as written
        except SourceError:
            return
    cache.put(report.path, content, rules, report)


def _move_findings_to_their_files(reports: dict[str, FileReport]) -> None:
    """A finding the analysis of one file placed in a file it imports from belongs to that
    file's report (once, however many files led to it); outside the run it stays where found."""
    by_absolute = {os.path.abspath(path): path for path in reports}
    seen: set = set()
    for report in list(reports.values()):
        kept = []
        for finding in report.findings:
            target = by_absolute.get(os.path.abspath(finding.filename))
            if target is None or target == report.path:
                kept.append(finding)
                continue
            key = (target, finding.code, finding.location, finding.message)
            if key not in seen:
                seen.add(key)
                finding.filename = target
                reports[target].findings.append(finding)
        report.findings = kept
    for report in reports.values():
        unique = {}
        for finding in report.findings:
            unique.setdefault((finding.code, finding.location, finding.end_location, finding.message), finding)
        report.findings = sorted(unique.values(), key=lambda f: f.sort_key)


def available_cpus() -> int:
    """The CPUs this process may run on (a container or `taskset` may allow fewer than exist)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _pooled(items: list, jobs: int) -> bool:
    """Whether `_map` runs the items in a process pool."""
    return jobs > 1 and len(items) >= PARALLEL_THRESHOLD


def _lint_before_forking(project, todo: list[tuple], jobs: int, timeout: Optional[float] = None) -> list[tuple]:
    """The items of `todo` to lint in this process before the pool forks: the files that
    others import (`Project.parse_shared_imports`, which parses them all now), the most
    imported first, up to a `jobs`-th of the text to lint.

    The files of a repository's package are imported by files of every worker, and each
    worker would analyse their functions again for its own files (what `prepare` returns,
    which parameter a helper saves): a fifth more CPU time than one process on a repository
    such as accelerate. Linted here first, those analyses are made once, and the forked
    workers inherit them. The bound keeps the part that runs before the pool (alone) from
    costing more time than the pool saves."""
    try:
        shared = call_with_deep_stack(project.parse_shared_imports, [(item[0], item[1]) for item in todo],
                                      timeout=timeout and timeout * PARALLEL_THRESHOLD)
    except AnalysisTimeout:
        _PROJECTS.clear()
        return []  # the workers lint these files, each within its own budget
    except Exception:
        return []  # a failure here only costs time: the workers lint these files
    by_path = {os.path.abspath(item[0]): item for item in todo}
    budget = sum(len(item[1]) for item in todo) / jobs
    first = []
    for path in shared:
        item = by_path.get(path)
        if item is None or len(item[1]) > budget:
            continue
        budget -= len(item[1])
        first.append(item)
    return first


def _map(function, items: list, jobs: int) -> Iterator[FileReport]:
    """`function` over `items`, in a process pool when there are enough of them to pay for it;
    each report as soon as it is made (a progress counter moves file by file)."""
    if not _pooled(items, jobs):
        yield from map(function, items)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import dplint.engine  # noqa: F401  (imported once here, so forked workers inherit LibCST and the rules)

    # fork: workers start in milliseconds with everything imported; elsewhere the platform default.
    context = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
    with ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=context) as pool:
        yield from pool.map(function, items)


def add_project_findings(reports: list[FileReport], settings: Settings, cache=None) -> None:
    """Run the rules' project-wide checks over the facts every file reported.

    With a cache, the same facts as last time give the same findings without importing a rule."""
    if not any(report.facts for report in reports):
        return
    facts_key = found = None
    if cache is not None:
        facts_key = content_key(json.dumps([[r.path, r.facts] for r in reports if r.facts], sort_keys=True).encode())
        found = cache.get_project(facts_key)
    if found is None:
        found = list(project_findings(reports))
        if cache is not None:
            cache.put_project(facts_key, found)
    if any(finding.filename.endswith(".ipynb") for finding in found):  # into notebook cells
        from dplint.notebook import relocate_project_findings

        found = relocate_project_findings(found)
    by_path = {report.path: report for report in reports}
    for finding in found:
        report = by_path.get(finding.filename)
        if report is not None and finding.code in settings.enabled_codes(finding.filename):
            report.findings.append(finding)
            report.findings.sort(key=lambda f: f.sort_key)


def project_findings(reports: list[FileReport]) -> Iterator[Finding]:
    from dplint.registry import all_rules

    codes_with_facts = {code for report in reports for code in report.facts}
    for rule in all_rules():
        if rule.code in codes_with_facts:
            yield from rule.check_project({r.path: r.facts[rule.code] for r in reports if rule.code in r.facts})


def process_stdin(data: bytes, display_path: str, settings: Settings, fix: Optional[FixOptions]) -> FileReport:
    if display_path.endswith(".ipynb"):  # a notebook's JSON on stdin (dplint/notebook.py)
        try:
            return process_notebook_text(data.decode("utf-8-sig"), display_path, settings, fix)
        except UnicodeDecodeError as error:
            return FileReport(display_path, [problem_finding(display_path, f"cannot read notebook: not UTF-8 (byte {error.start})")])
    try:
        text, encoding = decode(data)
    except SourceError as error:
        return FileReport(display_path, [problem_finding(display_path, str(error))])
    report = process_text_guarded(text, display_path, settings, fix)
    _with_bom(report, text, encoding)
    if report.fixed_text is not None:
        try:  # written back as the file would be: in its coding cookie's encoding, with its BOM
            report.fixed_bytes = report.fixed_text.encode(encoding)
        except UnicodeEncodeError as error:
            report.errors.append(f"{display_path}: cannot write the fix: {error.object[error.start]!r} cannot be "
                                 f"encoded as {encoding}; the code is unchanged")
            report.fixed_text, report.applied, report.diff = None, [], ""
    return report


def _with_bom(report: FileReport, text: str, encoding: str) -> None:
    """A file's BOM is not in its decoded text but is in its first line's bytes: the patch's
    context must carry it, or `git apply` and `patch` do not find the line."""
    if report.diff and report.fixed_text is not None and encoding == "utf-8-sig":
        from dplint.diffs import unified_diff

        report.diff = unified_diff(text, report.fixed_text, report.path, bom=True)
