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

pygls is an optional dependency (`pip install 'dplint[lsp]'`); the base install never imports it.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from dplint import __version__
from dplint.rule import Applicability, Finding, Severity

FIX_ALL_KIND = "source.fixAll.dplint"
UNSAFE_QUICKFIX_KIND = "quickfix.unsafe"
SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}

log = logging.getLogger("dplint.server")


class DplintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("dplint", __version__)
        self.findings: dict[str, list[Finding]] = {}  # uri -> the document's own findings, with fixes
        self.project: dict[str, list[Finding]] = {}  # absolute path -> cross-file findings (saved files)
        self.project_checked = False

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
        """Lint the document's current text and publish its diagnostics."""
        self.findings[uri] = self.lint_findings(uri)
        self.publish(uri)

    def lint_findings(self, uri: str) -> list[Finding]:
        from dplint.runner import process_text_guarded

        document = self.workspace.get_text_document(uri)
        path = to_fs_path(uri) or uri
        if path.endswith(".ipynb"):
            return []  # notebooks: `dplint check` (notebook documents are not served here)
        settings = self.settings_for(path)
        if settings is None:
            return []
        report = process_text_guarded(document.source, path, settings, None)
        for error in report.errors:
            self.window_log_message(types.LogMessageParams(types.MessageType.Warning, error))
        return report.findings

    def publish(self, uri: str) -> None:
        document = self.workspace.get_text_document(uri)
        path = os.path.abspath(to_fs_path(uri) or uri)
        own = self.findings.get(uri, [])
        # Cross-file findings come from the saved files; an edited buffer keeps showing them
        # until the next save refreshes them.
        shown = own + [f for f in self.project.get(path, []) if not any(_same(f, o) for o in own)]
        diagnostics = [_diagnostic(finding, document) for finding in shown]
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=document.version)
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
        """Run the project-wide checks over the saved files, then republish every open file."""
        from dplint.config import is_excluded
        from dplint.runner import project_findings, run

        root = self.project_root(path)
        settings = self.settings_for(os.path.join(root, "x.py")) if root else None
        if settings is None:
            return
        try:
            cache_dir = os.path.join(root, ".dplint_cache")
            report = run([root], settings, cache_dir=cache_dir)
            found: dict[str, list[Finding]] = {}
            for finding in project_findings(report.files):
                if finding.code in settings.enabled_codes(finding.filename) and not is_excluded(finding.filename, settings):
                    found.setdefault(os.path.abspath(finding.filename), []).append(finding)
            self.project = found
        except Exception as error:  # the project pass must never take the server down
            self.window_log_message(types.LogMessageParams(types.MessageType.Warning, f"dplint: project checks failed: {error}"))
            return
        for uri in list(self.workspace.text_documents):
            self.publish(uri)

    # ------------------------------------------------------------------ code actions
    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        document = self.workspace.get_text_document(uri)
        only = params.context.only
        wanted_quickfix = not only or any(kind.startswith("quickfix") or "quickfix".startswith(kind) for kind in only)
        wanted_fix_all = not only or any(FIX_ALL_KIND.startswith(kind) for kind in only)
        actions: list[types.CodeAction] = []
        findings = self.findings.get(uri, [])
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
            action = self.fix_all(uri)
            if action is not None:
                actions.append(action)
        return actions

    def fix_all(self, uri: str) -> Optional[types.CodeAction]:
        """Every safe fix at once (the unsafe ones too when the configuration says
        `unsafe-fixes = true`), as one edit replacing the document."""
        from dplint.runner import FixOptions, process_text_guarded

        document = self.workspace.get_text_document(uri)
        path = to_fs_path(uri) or uri
        settings = self.settings_for(path)
        if settings is None:
            return None
        report = process_text_guarded(document.source, path, settings, FixOptions(unsafe=settings.unsafe_fixes))
        if report.fixed_text is None or report.errors:
            return None
        lines = document.lines
        end = types.Position(line=len(lines), character=0)
        return types.CodeAction(
            title=f"dplint: fix all ({len(report.applied)} fixes)",
            kind=FIX_ALL_KIND,
            edit=types.WorkspaceEdit(
                changes={uri: [types.TextEdit(types.Range(types.Position(0, 0), end), report.fixed_text)]}
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
        for uri in list(ls.workspace.text_documents):
            if uri != params.text_document.uri:
                ls.findings[uri] = ls.lint_findings(uri)
        ls.lint(params.text_document.uri)
        ls.refresh_project(to_fs_path(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: DplintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.findings.pop(params.text_document.uri, None)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.QuickFix, UNSAFE_QUICKFIX_KIND, FIX_ALL_KIND], resolve_provider=False
        ),
    )
    def code_action(ls: DplintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return ls.code_actions(params)

    return server


def main() -> None:
    create_server().start_io()


__all__ = ["create_server", "main", "from_fs_path"]
