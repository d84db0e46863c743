"""`dplint server`: a Language Server (LSP over stdio) for editors, built on pygls.

- Diagnostics when a Python file is opened, changed and saved: the rule code, its slug,
  the severity, and `dplint explain CODE` for the full story.
- Code actions: one per fix (safe fixes as `quickfix`, unsafe ones as `quickfix.unsafe`, with
  "unsafe" in the title), "ignore on this line" (a `# dplint: ignore[slug]` comment above it),
  and "fix all safe" as `source.fixAll.dplint`.
- Settings: the same `pyproject.toml` / `dplint.toml` as the command line (nearest to the file).
- Cross-file findings (a checkpoint saved in one file and loaded in another): the project
  pass runs when the first file is opened (after that file's own diagnostics) and whenever a
  file is saved, and refreshes every open file's diagnostics. It reads the files from disk (as
  saved), and uses the same result cache as `dplint check`.
- The analyses run in a child process (`serve_analyses`), one at a time, fed by a thread: the
  message loop never waits for one, so `shutdown` and `exit` are answered at once even while
  LibCST parses a large file (its native parser holds the interpreter for seconds at a time,
  which a thread alone would not get around). A newer version of a document replaces its
  waiting lint (at most one per document), and a result for a version that is no longer the
  newest (or for a closed document) is never published. A document over MAX_FILE_BYTES is not
  linted: it gets one diagnostic saying so.

pygls is an optional dependency (the `lsp` extra: `pip install '.[lsp]'` in a clone, or
`pip install 'dplint-*.whl[lsp]'`); the base install never imports it.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import pickle
import subprocess
import sys
import threading
from typing import Callable, Optional

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from dplint import __version__
from dplint.project import MAX_FILE_BYTES
from dplint.rule import Applicability, Finding, Severity

FIX_ALL_KIND = "source.fixAll.dplint"
UNSAFE_QUICKFIX_KIND = "quickfix.unsafe"
SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}

log = logging.getLogger("dplint.server")
PROJECT_PASS = object()  # the key of the project pass among the waiting analyses (URIs are strings)


# ---------------------------------------------------------------------- the analyses' process
def _lint(text: str, path: str, settings):
    from dplint.runner import process_text_guarded

    # process_text_guarded holds the per-file time budget: the server sets none of its own.
    report = process_text_guarded(text, path, settings, None)
    return report.findings, report.errors


def _fix_all(text: str, path: str, settings):
    from dplint.runner import FixOptions, process_text_guarded

    report = process_text_guarded(text, path, settings, FixOptions(unsafe=settings.unsafe_fixes))
    return report.fixed_text, len(report.applied), report.errors


def _project_findings(root: str, settings) -> dict[str, list[Finding]]:
    from dplint.config import is_excluded
    from dplint.runner import project_findings, run

    report = run([root], settings, cache_dir=os.path.join(root, ".dplint_cache"))
    found: dict[str, list[Finding]] = {}
    for finding in project_findings(report.files):
        if finding.code in settings.enabled_codes(finding.filename) and not is_excluded(finding.filename, settings):
            found.setdefault(os.path.abspath(finding.filename), []).append(finding)
    return found


ANALYSES: dict[str, Callable] = {"lint": _lint, "fix-all": _fix_all, "project": _project_findings}
# The child's own `sys.path[0]` is its working folder (the user's project): taken off, as in
# `python -m dplint`, so that a `click.py` of the project is never imported in place of click.
CHILD = [sys.executable, "-c", "import sys; del sys.path[0]; from dplint.server import serve_analyses; serve_analyses()"]


def serve_analyses() -> None:
    """The child process: (name, args) pickles on stdin, (True, result) or (False, message)
    pickles on stdout, one at a time, until stdin closes."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever the analysis prints goes to the server's log, not into the answers
    requests = sys.stdin.buffer
    while True:
        try:
            name, args = pickle.load(requests)
        except EOFError:
            return
        try:
            answer = (True, ANALYSES[name](*args))
        except Exception as error:  # process_text_guarded catches a rule's bug; this is the rest
            answer = (False, f"{type(error).__name__}: {error}")
        pickle.dump(answer, answers)
        answers.flush()


class AnalysisFailed(Exception):
    """The analysis raised, or its process ended (killed, out of memory, closed)."""


class Analyses:
    """The child process that runs the analyses, started when first needed and again after it
    dies. `call` is for the one worker thread; `close` may come from any thread."""

    def __init__(self) -> None:
        self._process: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()
        self.closed = False

    def call(self, name: str, *args):
        try:
            request = pickle.dumps((name, args))  # before anything is written: a failure leaves no half request
        except Exception as error:
            raise AnalysisFailed(f"cannot send the analysis its input: {type(error).__name__}: {error}")
        with self._lock:
            if self.closed:
                raise AnalysisFailed("the server is shutting down")
            if self._process is None or self._process.poll() is not None:
                self._process = subprocess.Popen(CHILD, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            process = self._process
        try:
            process.stdin.write(request)
            process.stdin.flush()
            succeeded, value = pickle.load(process.stdout)
        except (EOFError, OSError, pickle.UnpicklingError) as error:
            with self._lock:
                if self._process is process:
                    self._process = None
            raise AnalysisFailed(f"the analysis process ended ({type(error).__name__}, exit code {_end(process)})")
        if not succeeded:
            raise AnalysisFailed(value)
        return value

    def close(self) -> None:
        """Kill the child, mid-analysis or not: nothing it could still send is wanted."""
        with self._lock:
            self.closed = True
            process, self._process = self._process, None
        if process is not None:
            _end(process)


def _end(process: subprocess.Popen) -> int:
    process.kill()
    for pipe in (process.stdin, process.stdout):
        try:
            pipe.close()
        except OSError:  # a write to the dead child was left unflushed
            pass
    return process.wait()


class Waiting:
    """The analyses waiting to run, one at a time, on a daemon thread (which never holds up
    the process' exit). At most one job per key: a newer one takes the older's place (and its
    turn)."""

    def __init__(self) -> None:
        self._jobs: dict[object, Callable[[], None]] = {}
        self._order: collections.deque = collections.deque()
        self._ready = threading.Condition()
        self._closed = False
        self._thread: Optional[threading.Thread] = None

    def submit(self, key: object, job: Callable[[], None]) -> None:
        with self._ready:
            if self._closed:
                return
            if key not in self._jobs:
                self._order.append(key)
            self._jobs[key] = job
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="dplint-analyses", daemon=True)
                self._thread.start()
            self._ready.notify()

    def drop(self, key: object) -> None:
        with self._ready:
            self._jobs.pop(key, None)

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._jobs.clear()
            self._ready.notify()

    def _serve(self) -> None:
        while True:
            with self._ready:
                while not self._order and not self._closed:
                    self._ready.wait()
                if self._closed:
                    return
                job = self._jobs.pop(self._order.popleft(), None)
            if job is not None:  # None: dropped (closed) or merged into a newer job
                try:
                    job()
                except Exception:  # one job's failure must not end the thread
                    log.exception("dplint: an analysis job failed")


class DplintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("dplint", __version__)
        self.findings: dict[str, list[Finding]] = {}  # uri -> the document's own findings, with fixes
        self.project: dict[str, list[Finding]] = {}  # absolute path -> cross-file findings (saved files)
        self.project_checked = False
        # Written on the message loop only (results come back to it with call_soon_threadsafe).
        self.versions: dict[str, Optional[int]] = {}  # uri of each open document -> its newest version
        self.linted: dict[str, Optional[int]] = {}  # uri -> the version its findings are for
        self.too_large: dict[str, int] = {}  # uri -> its size in bytes, when over MAX_FILE_BYTES
        self.analyses = Analyses()
        self.waiting = Waiting()
        self.fix_requests = itertools.count()
        self.loop: Optional[asyncio.AbstractEventLoop] = None

    def stop_analyses(self) -> None:
        self.waiting.close()
        self.analyses.close()

    def in_background(self, key: object, analysis: Callable[[], object], done: Callable[[object], None],
                      failed: Callable[[str], None]) -> None:
        """Run `analysis()` off the message loop, then `done(result)` (or `failed(message)`) on it."""
        self.loop = self.loop or asyncio.get_running_loop()
        loop = self.loop

        def job() -> None:
            try:
                then, value = done, analysis()
            except AnalysisFailed as error:
                if self.analyses.closed:
                    return  # shut down: nothing is wanted any more
                then, value = failed, str(error)
            try:
                loop.call_soon_threadsafe(then, value)
            except RuntimeError:  # the loop is closed: the server is ending
                pass

        self.waiting.submit(key, job)

    def log_warning(self, message: str) -> None:
        self.window_log_message(types.LogMessageParams(types.MessageType.Warning, message))

    # ------------------------------------------------------------------ settings and linting
    def settings_for(self, path: str):
        """The settings the command line would use for `path`; None (and a message) when the
        configuration is broken."""
        from dplint.config import ConfigError, load_settings

        try:
            settings = load_settings(path)
            settings.enabled_codes(path)
            return settings
        except Exception as error:  # ConfigError, an unknown rule: tell the user, lint nothing
            reason = str(error) if isinstance(error, ConfigError) else f"{type(error).__name__}: {error}"
            self.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"dplint: {reason}"))
            return None

    def lint(self, uri: str) -> None:
        """Lint the document's current text in the background; its diagnostics are published
        when the result comes, unless a newer version (or a close) came first."""
        document = self.workspace.get_text_document(uri)
        text, version = document.source, document.version
        self.versions[uri] = version
        path = to_fs_path(uri) or uri
        size = len(text.encode("utf-8", "surrogatepass"))
        settings = None
        if size <= MAX_FILE_BYTES and not path.endswith(".ipynb"):  # notebooks: `dplint check` (not served here)
            settings = self.settings_for(path)
        if settings is None:  # nothing to run: the answer is known now
            self.waiting.drop(uri)
            self.finish_lint(uri, version, ([], []), too_large=size if size > MAX_FILE_BYTES else None)
            return
        self.in_background(uri, lambda: self.analyses.call("lint", text, path, settings),
                           lambda result: self.finish_lint(uri, version, result),
                           lambda message: self.finish_lint(uri, version, ([], [f"dplint: {path}: {message}"])))

    def finish_lint(self, uri: str, version: Optional[int], result, too_large: Optional[int] = None) -> None:
        if self.versions.get(uri, object()) != version:
            return  # closed, or a newer version is on its way: that one is published
        findings, errors = result
        for error in errors:
            self.log_warning(error)
        self.findings[uri] = findings
        self.linted[uri] = version
        if too_large is None:
            self.too_large.pop(uri, None)
        else:
            self.too_large[uri] = too_large
        self.publish(uri)

    def forget(self, uri: str) -> None:
        """The document closed: nothing of it is published any more."""
        self.waiting.drop(uri)
        for state in (self.versions, self.linted, self.findings, self.too_large):
            state.pop(uri, None)

    def publish(self, uri: str) -> None:
        if uri not in self.linted or self.linted[uri] != self.versions.get(uri, object()):
            return  # not linted yet, or linted for an older version: its newest lint publishes it
        document = self.workspace.get_text_document(uri)
        if uri in self.too_large:
            diagnostics = [_too_large_diagnostic(self.too_large[uri])]
        else:
            path = os.path.abspath(to_fs_path(uri) or uri)
            own = self.findings.get(uri, [])
            # Cross-file findings come from the saved files; an edited buffer keeps showing them
            # until the next save refreshes them.
            shown = own + [f for f in self.project.get(path, []) if not any(_same(f, o) for o in own)]
            diagnostics = [_diagnostic(finding, document) for finding in shown]
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=self.linted[uri])
        )

    def project_root(self, path: Optional[str] = None) -> Optional[str]:
        root = self.workspace.root_path
        if root:
            return root
        if path:
            from dplint.config import find_config

            config = find_config(os.path.dirname(os.path.abspath(path)))
            return os.path.dirname(config) if config else os.path.dirname(os.path.abspath(path))
        return None

    def refresh_project(self, path: Optional[str] = None) -> None:
        """Run the project-wide checks over the saved files in the background, then republish
        every open file."""
        root = self.project_root(path)
        settings = self.settings_for(os.path.join(root, "x.py")) if root else None
        if settings is None:
            return

        def done(found: dict[str, list[Finding]]) -> None:
            self.project = found
            for uri in list(self.versions):
                self.publish(uri)

        # the project pass must never take the server down: a failure is logged
        self.in_background(PROJECT_PASS, lambda: self.analyses.call("project", root, settings), done,
                           lambda message: self.log_warning(f"dplint: project checks failed: {message}"))

    # ------------------------------------------------------------------ code actions
    async def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        document = self.workspace.get_text_document(uri)
        only = params.context.only
        wanted_quickfix = not only or any(kind.startswith("quickfix") or "quickfix".startswith(kind) for kind in only)
        wanted_fix_all = not only or any(FIX_ALL_KIND.startswith(kind) for kind in only)
        actions: list[types.CodeAction] = []
        # Findings of an older version would place their edits on the wrong text.
        current = uri in self.linted and self.linted[uri] == document.version
        findings = self.findings.get(uri, []) if current else []
        if wanted_quickfix:
            for finding in findings:
                if not finding.edits or finding.fix_applicability not in (Applicability.SAFE, Applicability.UNSAFE):
                    continue
                if not _overlaps(_range(finding.location, finding.end_location, document), params.range):
                    continue
                safe = finding.fix_applicability is Applicability.SAFE
                actions.append(
                    types.CodeAction(
                        title=f"dplint: {finding.fix_message} ({finding.code} {finding.name})"
                        + ("" if safe else " [unsafe fix: may change behaviour]"),
                        kind=types.CodeActionKind.QuickFix if safe else UNSAFE_QUICKFIX_KIND,
                        diagnostics=[_diagnostic(finding, document)],
                        is_preferred=safe,
                        edit=types.WorkspaceEdit(
                            changes={uri: [types.TextEdit(_range(e.location, e.end_location, document), e.content) for e in finding.edits]}
                        ),
                    )
                )
        if wanted_quickfix:
            for finding in findings:
                if _overlaps(_range(finding.location, finding.end_location, document), params.range):
                    action = _ignore_action(uri, document, finding)
                    if action is not None:
                        actions.append(action)
        if wanted_fix_all and any(f.fix_applicability is Applicability.SAFE and f.edits for f in findings):
            action = await self.fix_all(uri)
            if action is not None:
                actions.append(action)
        return actions

    async def fix_all(self, uri: str) -> Optional[types.CodeAction]:
        """Every safe fix at once (the unsafe ones too when the configuration says
        `unsafe-fixes = true`), as one edit replacing the document; None when the document
        changed meanwhile. Computed in the background, after what waits before it."""
        document = self.workspace.get_text_document(uri)
        text, version, line_count = document.source, document.version, len(document.lines)
        path = to_fs_path(uri) or uri
        settings = self.settings_for(path)
        if settings is None:
            return None
        answer: asyncio.Future = asyncio.get_running_loop().create_future()

        def settle(result) -> None:
            if not answer.done():  # done: the client cancelled the request
                answer.set_result(result)

        def fix() -> object:
            if answer.done():
                return None  # cancelled while waiting: not worth a fix run
            return self.analyses.call("fix-all", text, path, settings)

        # Each request its own key: a merged one would leave its caller waiting for ever.
        self.in_background(("fix-all", next(self.fix_requests)), fix, settle, lambda message: settle(None))
        result = await answer
        if result is None or self.versions.get(uri, object()) != version:
            return None
        fixed_text, applied, errors = result
        if fixed_text is None or errors:
            return None
        end = types.Position(line=line_count, character=0)
        return types.CodeAction(
            title=f"dplint: fix all ({applied} fixes)",
            kind=FIX_ALL_KIND,
            edit=types.WorkspaceEdit(
                changes={uri: [types.TextEdit(types.Range(types.Position(0, 0), end), fixed_text)]}
            ),
        )


def _ignore_action(uri: str, document, finding: Finding) -> Optional[types.CodeAction]:
    """"Ignore on this line": `# dplint: ignore[slug]` on a line of its own above the finding's
    first line (same indentation); none after a backslash continuation, where a line cannot go."""
    lines = document.lines
    row = finding.location.row - 1
    if row >= len(lines) or (row > 0 and lines[row - 1].rstrip("\r\n").endswith("\\")):
        return None
    line = lines[row]
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    newline = line[len(line.rstrip("\r\n")):] or "\n"
    at = types.Position(line=row, character=0)
    return types.CodeAction(
        title=f"dplint: ignore {finding.code} ({finding.name}) on this line",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[_diagnostic(finding, document)],
        edit=types.WorkspaceEdit(
            changes={uri: [types.TextEdit(types.Range(at, at), f"{indent}# dplint: ignore[{finding.name}]{newline}")]}
        ),
    )


def _same(a: Finding, b: Finding) -> bool:
    return (a.code, a.location, a.end_location) == (b.code, b.location, b.end_location)


def _position(row: int, column: int, document) -> types.Position:
    """dplint's 1-based row and column (in characters) -> an LSP position, in the code units
    agreed with the client (UTF-16 unless it offered another)."""
    position = types.Position(line=max(row - 1, 0), character=max(column - 1, 0))
    return document.position_codec.position_to_client_units(document.lines, position)


def _range(start, end, document) -> types.Range:
    return types.Range(_position(start.row, start.column, document), _position(end.row, end.column, document))


def _overlaps(a: types.Range, b: types.Range) -> bool:
    def key(position: types.Position) -> tuple[int, int]:
        return position.line, position.character

    return key(a.start) <= key(b.end) and key(b.start) <= key(a.end)


def _too_large_diagnostic(size: int) -> types.Diagnostic:
    return types.Diagnostic(
        range=types.Range(types.Position(0, 0), types.Position(0, 0)),
        message=(f"dplint: not checked: the file is {size / 1e6:.1f} MB, over the {MAX_FILE_BYTES / 1e6:g} MB "
                 "the editor checks; run `dplint check` on it in a terminal"),
        severity=types.DiagnosticSeverity.Warning,
        source="dplint",
    )


def _diagnostic(finding: Finding, document) -> types.Diagnostic:
    fix = finding.fix_applicability.value if finding.fix_applicability else None
    return types.Diagnostic(
        range=_range(finding.location, finding.end_location, document),
        message=f"{finding.message} [{finding.name}; see `dplint explain {finding.code}`]",
        severity=SEVERITY[finding.severity],
        code=finding.code,
        source="dplint",
        data={"code": finding.code, "name": finding.name, "fix": fix, "explain": f"dplint explain {finding.code}"},
    )


def create_server() -> DplintServer:
    server = DplintServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DplintServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.lint(params.text_document.uri)  # the file's own findings first: they come fast
        if not ls.project_checked:  # then, once, the project pass (later: on every save)
            ls.project_checked = True
            ls.refresh_project(to_fs_path(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: DplintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.lint(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: DplintServer, params: types.DidSaveTextDocumentParams) -> None:
        # Every open file again: the saved file may be a configuration file, or change what
        # the project pass links (the project pass republishes them all).
        for uri in list(ls.versions):
            if uri != params.text_document.uri:
                ls.lint(uri)
        ls.lint(params.text_document.uri)
        ls.refresh_project(to_fs_path(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: DplintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.forget(params.text_document.uri)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.QuickFix, UNSAFE_QUICKFIX_KIND, FIX_ALL_KIND], resolve_provider=False
        ),
    )
    async def code_action(ls: DplintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return await ls.code_actions(params)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: DplintServer, params: None) -> None:
        ls.stop_analyses()  # what runs is killed: after shutdown nothing is published

    return server


def main() -> None:
    server = create_server()
    try:
        server.start_io()
    finally:  # `exit`, or the client went away: the analyses' process must not outlive the server
        server.stop_analyses()


__all__ = ["create_server", "main", "from_fs_path"]
