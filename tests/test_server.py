"""`dplint server`: a real LSP client (pygls') starts `python -m dplint server` and talks to it
over stdio: diagnostics on open/change/save, code actions (safe, unsafe, fix all), the
project's configuration, cross-file findings refreshed on save."""

from __future__ import annotations

import asyncio
import shutil
import sys

import pytest

from conftest import FIXTURES, MISUSE, MISUSE_FIXED, lint

pytest.importorskip("pygls")
from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402
from pygls.uris import from_fs_path  # noqa: E402

HAND_STRIP = (
    "import torch\n\n"
    'state_dict = torch.load("model.pt", map_location="cpu")\n'
    "state_dict = {k[7:]: v for k, v in state_dict.items()}\n"
    "model.load_state_dict(state_dict)\n"
)
TIMEOUT = 60


class Session:
    """One server process and a client that records the diagnostics it publishes."""

    def __init__(self, root):
        self.root = root
        self.client = LanguageClient("dplint-tests", "1")
        self.diagnostics: dict[str, list[types.Diagnostic]] = {}
        self.published = asyncio.Event()
        self.versions: dict[str, int] = {}

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(ls, params: types.PublishDiagnosticsParams) -> None:
            self.diagnostics[params.uri] = list(params.diagnostics)
            self.published.set()

    async def __aenter__(self):
        await self.client.start_io(sys.executable, "-m", "dplint", "server", cwd=str(self.root))
        await asyncio.wait_for(
            self.client.initialize_async(
                types.InitializeParams(
                    capabilities=types.ClientCapabilities(),
                    root_uri=from_fs_path(str(self.root)),
                    workspace_folders=[types.WorkspaceFolder(from_fs_path(str(self.root)), "project")],
                )
            ),
            TIMEOUT,
        )
        self.client.initialized(types.InitializedParams())
        return self

    async def __aexit__(self, *exc):
        await asyncio.wait_for(self.client.shutdown_async(None), TIMEOUT)
        self.client.exit(None)
        await self.client.stop()

    def uri(self, name: str) -> str:
        return from_fs_path(str(self.root / name))

    def open(self, name: str) -> str:
        uri = self.uri(name)
        self.versions[uri] = 1
        self.diagnostics.pop(uri, None)
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                types.TextDocumentItem(uri, "python", 1, (self.root / name).read_text(encoding="utf-8"))
            )
        )
        return uri

    def change(self, uri: str, text: str) -> None:
        self.versions[uri] += 1
        self.diagnostics.pop(uri, None)
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                types.VersionedTextDocumentIdentifier(self.versions[uri], uri),
                [types.TextDocumentContentChangeWholeDocument(text)],
            )
        )

    async def wait(self, uri: str, predicate=lambda diagnostics: True) -> list[types.Diagnostic]:
        async def until() -> list[types.Diagnostic]:
            while uri not in self.diagnostics or not predicate(self.diagnostics[uri]):
                self.published.clear()
                await self.published.wait()
            return self.diagnostics[uri]

        return await asyncio.wait_for(until(), TIMEOUT)

    async def actions(self, uri: str, diagnostic_range: types.Range, only=None) -> list[types.CodeAction]:
        result = await asyncio.wait_for(
            self.client.text_document_code_action_async(
                types.CodeActionParams(
                    types.TextDocumentIdentifier(uri), diagnostic_range, types.CodeActionContext([], only=only)
                )
            ),
            TIMEOUT,
        )
        return list(result or [])


def _apply(text: str, edits: list[types.TextEdit]) -> str:
    """Apply LSP edits (ASCII text: characters are UTF-16 units), last first."""
    lines = text.splitlines(keepends=True) + [""]
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position: types.Position) -> int:
        return starts[position.line] + position.character

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end):]
    return text


def test_diagnostics_and_code_actions(tmp_path):
    (tmp_path / "train.py").write_text(MISUSE)
    (tmp_path / "strip.py").write_text(HAND_STRIP)
    (tmp_path / "quiet").mkdir()
    (tmp_path / "quiet" / "dplint.toml").write_text('ignore = ["sampler-shuffle"]\n')
    (tmp_path / "quiet" / "train.py").write_text(MISUSE)

    async def scenario():
        async with Session(tmp_path) as session:
            uri = session.open("train.py")
            (diagnostic,) = await session.wait(uri)
            assert (diagnostic.code, diagnostic.source, diagnostic.severity) == ("DPL007", "dplint", types.DiagnosticSeverity.Error)
            assert diagnostic.message.endswith("[sampler-shuffle; see `dplint explain DPL007`]")
            assert (diagnostic.range.start.line, diagnostic.range.start.character) == (3, 43)

            actions = await session.actions(uri, diagnostic.range)
            quickfix, ignore, fix_all = actions
            assert [a.kind for a in actions] == [types.CodeActionKind.QuickFix] * 2 + ["source.fixAll.dplint"]
            assert ignore.title == "dplint: ignore DPL007 (sampler-shuffle) on this line"
            ignored = _apply(MISUSE, ignore.edit.changes[uri])
            assert ignored.splitlines()[3] == "# dplint: ignore[sampler-shuffle]"
            assert lint(ignored) == []  # the comment silences the finding
            assert _apply(MISUSE, fix_all.edit.changes[uri]) == MISUSE_FIXED
            assert quickfix.is_preferred and "DPL007 sampler-shuffle" in quickfix.title
            assert _apply(MISUSE, quickfix.edit.changes[uri]) == MISUSE_FIXED
            (fix_all,) = await session.actions(uri, diagnostic.range, only=["source.fixAll"])
            assert _apply(MISUSE, fix_all.edit.changes[uri]) == MISUSE_FIXED

            session.change(uri, MISUSE_FIXED)  # the editor applied it: the finding goes
            assert await session.wait(uri) == []

            strip = session.open("strip.py")
            (diagnostic,) = await session.wait(strip)
            assert diagnostic.code == "DPL013"
            unsafe, _ignore = await session.actions(strip, diagnostic.range)
            assert unsafe.kind == "quickfix.unsafe" and "unsafe" in unsafe.title and not unsafe.is_preferred
            assert "consume_prefix_in_state_dict_if_present" in _apply(HAND_STRIP, unsafe.edit.changes[strip])
            # no safe fix: no fix-all action
            assert await session.actions(strip, diagnostic.range, only=["source.fixAll"]) == []

            # columns in UTF-16 code units (the default encoding): the rocket counts twice
            wide_text = MISUSE.replace("batch_size=8", 'batch_size=8, name="\U0001F680"')
            (tmp_path / "wide.py").write_text(wide_text, encoding="utf-8")
            wide = session.open("wide.py")
            (diagnostic,) = await session.wait(wide)
            line = wide_text.splitlines()[3]
            assert diagnostic.range.start.character == line.index("shuffle") + 1

            quiet = session.open("quiet/train.py")  # its own dplint.toml ignores the rule
            assert await session.wait(quiet) == []
            # the configuration changes and a file is saved: open files are checked again
            (tmp_path / "quiet" / "dplint.toml").write_text("ignore = []\n")
            session.client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(strip)))
            assert [d.code for d in await session.wait(quiet, lambda diagnostics: diagnostics)] == ["DPL007"]

    asyncio.run(scenario())


def test_cross_file_findings_refresh_on_save(tmp_path):
    for path in (FIXTURES / "cross-file").iterdir():
        shutil.copy(path, tmp_path / path.name)

    async def scenario():
        async with Session(tmp_path) as session:
            evaluate = session.open("evaluate.py")
            found = await session.wait(evaluate, lambda diagnostics: any(d.code == "DPL004" for d in diagnostics))
            assert [(d.code, d.range.start.line) for d in found] == [("DPL004", 12)]
            assert "train.py:30 saves" in found[0].message
            # train.py now saves the inner model: after the save, the link is gone
            train = session.open("train.py")
            text = (tmp_path / "train.py").read_text()
            fixed = text.replace("torch.save(model.state_dict()", "torch.save(model.module.state_dict()")
            assert fixed != text
            (tmp_path / "train.py").write_text(fixed)
            session.change(train, fixed)
            session.diagnostics.pop(evaluate, None)
            session.client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(train)))
            assert await session.wait(evaluate, lambda diagnostics: not diagnostics) == []

    asyncio.run(scenario())
