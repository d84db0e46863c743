"""`dplint server` stays responsive: it lints off its message loop (a huge or slow document
never holds up `shutdown`/`exit`), publishes only the newest version of a document, and answers
a document over the size limit with one diagnostic instead of a lint.

The client here is raw JSON-RPC over the server's stdin/stdout (no LSP library), so that the
timing of every answer is the server's own."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time

import pytest

from conftest import MISUSE

pytest.importorskip("pygls")
from dplint.project import MAX_FILE_BYTES  # noqa: E402

PROMPT_SECONDS = 8.0  # "at once" on a loaded two-core machine; today's code took minutes
STARTUP_SECONDS = 60.0
# MISUSE pads to any size with lines that the analysis must parse (the pre-filter lets the
# file through: it names DataLoader and DistributedSampler).
FILLER = "value_{} = [item * 2 for item in range(10) if item % 3]\n"


def _padded(text: str, size: int) -> str:
    lines, index = [text], 0
    total = len(text)
    while total < size:
        line = FILLER.format(index)
        lines.append(line)
        total += len(line)
        index += 1
    return "".join(lines)


def _uri(path) -> str:
    from pygls.uris import from_fs_path

    return from_fs_path(str(path))


def _children(pid: int) -> set[int]:
    """The processes `pid` started (Linux' /proc; empty elsewhere)."""
    found: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as listing:
                found.update(int(child) for child in listing.read().split())
    except OSError:
        pass
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class RawServer:
    """`python -m dplint server` in a subprocess; what it sends is collected by a thread."""

    def __init__(self, root) -> None:
        self.root = root
        self.stderr = open(root / "server.log", "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dplint", "server"], cwd=str(root),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
        )
        self.received: "queue.Queue[dict]" = queue.Queue()
        self.messages: list[dict] = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                header = stream.readline()
                if not header:
                    return
                if header.lower().startswith(b"content-length:"):
                    length = int(header.split(b":")[1])
                elif header in (b"\r\n", b"\n") and length is not None:
                    break
            self.received.put(json.loads(stream.read(length)))

    def send(self, *messages: dict) -> None:
        """One write for all: the server sees them back to back."""
        data = b""
        for message in messages:
            body = json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8")
            data += b"Content-Length: %d\r\n\r\n" % len(body) + body
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def request(self, method: str, params) -> int:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    def wait(self, predicate, seconds: float) -> dict:
        """The first message (from now or already collected) for which `predicate` holds."""
        for message in self.messages:
            if predicate(message):
                return message
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"nothing matched in {seconds:g} s; got {[m.get('method', m.get('id')) for m in self.messages]}")
            try:
                message = self.received.get(timeout=left)
            except queue.Empty:
                continue
            self.messages.append(message)
            if predicate(message):
                return message

    def answer(self, request_id: int, seconds: float) -> dict:
        return self.wait(lambda m: m.get("id") == request_id and "method" not in m, seconds)

    def initialize(self) -> None:
        asked = self.request("initialize", {"processId": None, "rootUri": _uri(self.root), "capabilities": {}})
        self.answer(asked, STARTUP_SECONDS)
        self.send({"method": "initialized", "params": {}})

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.send({"method": "textDocument/didOpen",
                   "params": {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}}})

    @staticmethod
    def change(uri: str, version: int, text: str) -> dict:
        return {"method": "textDocument/didChange",
                "params": {"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}}

    def published(self, uri: str) -> list[dict]:
        """Every publishDiagnostics for `uri` received so far (drains what has arrived)."""
        while True:
            try:
                self.messages.append(self.received.get_nowait())
            except queue.Empty:
                break
        return [m["params"] for m in self.messages
                if m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri]

    def wait_published(self, uri: str, predicate, seconds: float) -> dict:
        return self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                         and m["params"]["uri"] == uri and predicate(m["params"]), seconds)["params"]

    def shutdown_and_exit(self, seconds: float) -> float:
        """Seconds from `shutdown` to the process' end; both must come within `seconds`."""
        started = time.monotonic()
        self.answer(self.request("shutdown", None), seconds)
        self.send({"method": "exit"})
        self.process.wait(timeout=max(seconds - (time.monotonic() - started), 0.1))
        return time.monotonic() - started

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.stderr.close()


@pytest.fixture
def server(tmp_path):
    started = RawServer(tmp_path)
    try:
        started.initialize()
        yield started
    finally:
        started.close()


def test_a_huge_document_does_not_hold_up_shutdown_and_exit(server, tmp_path):
    # 5 MB, in the buffer only: the server must not sit on it before answering
    server.open(_uri(tmp_path / "huge.py"), _padded(MISUSE, 5_000_000))
    took = server.shutdown_and_exit(PROMPT_SECONDS)
    assert server.process.returncode == 0
    assert took < PROMPT_SECONDS


def test_shutdown_and_exit_are_answered_while_a_lint_runs(server, tmp_path):
    """Just under the size limit, the lint takes many seconds (LibCST's parser alone holds
    the interpreter for most of them): the server answers meanwhile, and the lint's process
    does not outlive it."""
    uri = _uri(tmp_path / "slow.py")
    server.open(uri, _padded(MISUSE, MAX_FILE_BYTES - 10_000))
    # the server answers requests while it lints (here one about another document)
    other = _uri(tmp_path / "other.py")
    server.open(other, MISUSE)
    asked = server.request("textDocument/codeAction", {
        "textDocument": {"uri": other},
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
        "context": {"diagnostics": []},
    })
    server.answer(asked, PROMPT_SECONDS)
    time.sleep(1.0)  # the lint of slow.py is under way by now
    helpers = _children(server.process.pid)
    if os.path.exists(f"/proc/{server.process.pid}/task/{server.process.pid}/children"):
        assert helpers  # the lint runs in a process of its own, which must end with the server
    took = server.shutdown_and_exit(PROMPT_SECONDS)
    assert server.process.returncode == 0 and took < PROMPT_SECONDS
    deadline = time.monotonic() + PROMPT_SECONDS
    while any(_alive(pid) for pid in helpers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in helpers if _alive(pid)] == []
    assert server.published(uri) == []  # it never finished: nothing published for it


def test_only_the_newest_version_is_published(server, tmp_path):
    uri = _uri(tmp_path / "train.py")
    server.open(uri, MISUSE)
    first = server.wait_published(uri, lambda p: p["diagnostics"], STARTUP_SECONDS)
    assert [d["code"] for d in first["diagnostics"]] == ["DPL007"] and first["version"] == 1
    # version 2 (fixed, and slow enough to lint that version 3 arrives meanwhile), then at
    # once version 3 (the misuse again, one line lower)
    fixed = _padded(MISUSE.replace("shuffle=True, ", ""), 200_000)
    server.send(server.change(uri, 2, fixed), server.change(uri, 3, "\n" + MISUSE))
    newest = server.wait_published(uri, lambda p: p["version"] == 3, STARTUP_SECONDS)
    assert [(d["code"], d["range"]["start"]["line"]) for d in newest["diagnostics"]] == [("DPL007", 4)]
    time.sleep(1.0)  # anything late for version 2 would be here by now
    versions = [p["version"] for p in server.published(uri)]
    assert 2 not in versions, versions
    assert versions[-1] == 3


def test_a_closed_document_gets_nothing_after_its_close(server, tmp_path):
    uri = _uri(tmp_path / "train.py")
    server.open(uri, _padded(MISUSE, 200_000))  # slow enough to lint that the close comes first
    server.send({"method": "textDocument/didClose", "params": {"textDocument": {"uri": uri}}})
    # lints run in turn: once a later document's diagnostics are out, the closed one's is over
    later = _uri(tmp_path / "later.py")
    server.open(later, MISUSE)
    server.wait_published(later, lambda p: p["diagnostics"], STARTUP_SECONDS)
    time.sleep(0.5)
    assert [p["diagnostics"] for p in server.published(uri)] == [[]]  # the close's own clearing
    server.shutdown_and_exit(PROMPT_SECONDS)


def test_a_document_over_the_size_limit_gets_one_diagnostic(server, tmp_path):
    uri = _uri(tmp_path / "generated.py")
    server.open(uri, _padded(MISUSE, MAX_FILE_BYTES + 1))
    (diagnostic,) = server.wait_published(uri, lambda p: True, PROMPT_SECONDS)["diagnostics"]
    assert diagnostic["source"] == "dplint"
    assert diagnostic["range"]["start"] == {"line": 0, "character": 0}
    assert "not checked" in diagnostic["message"] and "2 MB" in diagnostic["message"]
    assert "dplint check" in diagnostic["message"]
    # back under the limit: linted as usual
    server.send(server.change(uri, 2, MISUSE))
    linted = server.wait_published(uri, lambda p: p["version"] == 2, STARTUP_SECONDS)
    assert [d["code"] for d in linted["diagnostics"]] == ["DPL007"]
    server.shutdown_and_exit(PROMPT_SECONDS)


def test_missing_pygls_message_says_how_to_install_the_extra():
    """dplint is not on the package index: `pip install 'dplint[lsp]'` would fail."""
    code = (
        "import sys\n"
        "sys.modules['pygls'] = None  # as if not installed\n"
        "from dplint.cli import main\n"
        "main(['server'])\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert "pip install '.[lsp]'" in completed.stderr
    assert "pip install 'dplint-" in completed.stderr and ".whl[lsp]'" in completed.stderr
    assert "pip install 'dplint[lsp]'" not in completed.stderr


def test_waiting_analyses_keep_only_the_newest_job_per_document():
    from dplint.server import Waiting

    waiting, ran, release = Waiting(), [], threading.Event()
    waiting.submit("busy", lambda: (release.wait(STARTUP_SECONDS), ran.append("busy")))
    time.sleep(0.2)  # the thread is now inside the first job
    for version in (1, 2, 3):  # queued while it runs: only version 3 is left to run
        waiting.submit("a.py", lambda version=version: ran.append(("a.py", version)))
    waiting.submit("b.py", lambda: ran.append("b.py"))
    waiting.submit("c.py", lambda: ran.append("c.py"))
    waiting.drop("c.py")  # closed before its turn
    finished = threading.Event()
    waiting.submit("end", finished.set)
    release.set()
    assert finished.wait(STARTUP_SECONDS)
    assert ran == ["busy", ("a.py", 3), "b.py"]  # a.py kept its place in the queue
    waiting.close()


def test_the_analyses_process_comes_back_after_it_dies():
    from dplint.config import load_settings
    from dplint.server import Analyses

    settings = load_settings("train.py")
    analyses = Analyses()
    try:
        findings, errors = analyses.call("lint", MISUSE, "train.py", settings)
        assert [f.code for f in findings] == ["DPL007"] and errors == []
        analyses._process.kill()  # killed (out of memory, say) between two lints
        analyses._process.wait()
        findings, errors = analyses.call("lint", MISUSE, "train.py", settings)
        assert [f.code for f in findings] == ["DPL007"]
    finally:
        analyses.close()
    assert analyses._process is None
