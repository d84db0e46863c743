"""The result cache: re-running on an unchanged file parses nothing (and imports no LibCST).

Layout: `<cache folder>/<dplint version>-<code fingerprint>/`, one JSON entry per checked file
(`files/<2 hex>/<hash of the absolute path>.json`) and one per project-wide result
(`project/<facts hash>.json`). A file's entry holds the hash of its bytes and, side by side,
its results under each rule set it was checked with (`rule_set_key`: the enabled codes, and
whatever else a file's findings depend on), so a run with other settings, or a `fix`, leaves
the others' results in place. A run over many files keeps the entries it used or made in one
pack instead (`runs/<hash of the paths it was started on>.json`), which the next run over the
same paths reads whole: creating one file per checked file cost a cold run over a folder a
tenth of its time. A file without an entry of its own is looked up in the newest packs (a
pre-commit run after `dplint check .`). The rule catalog (`catalog.json`) is kept beside them.
Every file opens with a digest of its text: one of any other shape is a miss, never a crash.

Safe under concurrent runs: every entry is written to a temporary file and renamed over the
old one, so a reader sees a whole entry or none; two runs writing one entry at once lose at
most one of their results, which costs a re-lint, never a wrong answer. Bounded: an entry
keeps at most `MAX_RULE_SETS` rule sets, the folder at most `MAX_ENTRIES` entries (the least
recently used go first), and only the newest `KEEP_VERSIONS` code versions are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Iterable, Optional

from dplint import __version__
from dplint.reports import FileReport
from dplint.rule import Finding, finding_from_dict, finding_to_dict
from dplint.source import SourceError, content_key, read_bytes

MAX_RULE_SETS = 8  # results kept per file: the settings a project is commonly checked with
MAX_ENTRIES = 50_000  # files per cache folder; past it the least recently used 20% go
MAX_PROJECT_ENTRIES = 16  # project-wide results kept
MAX_PACKS = 16  # packs kept: one per set of paths a run was started on (`Cache.use_pack`)
PACK_MIN_FILES = 16  # runs over fewer files read and write each file's entry
PACKS_LOOKED_UP = 2  # a file without an entry of its own is looked for in this many newest packs
KEEP_VERSIONS = 3  # code versions kept side by side (an editable install changes often)
TOUCH_AFTER_S = 24 * 3600  # a used entry's mtime is refreshed at most once a day (for eviction)


def rule_set_key(codes: Iterable[str], dependencies: str = "") -> str:
    """What besides a file's bytes its findings depend on: the rules in force for it, and a
    `dependencies` fingerprint (e.g. the hashes of the project files it imports) when given."""
    key = ",".join(sorted(codes))
    return f"{key}|{dependencies}" if dependencies else key


def dependencies_unchanged(dependencies, hashes: Optional["FileHashes"] = None, known: Optional[dict] = None) -> bool:
    """Whether every project file a cached result read still has the content it had then.

    `known`: {absolute path: content hash} of files the caller has just read (a run's own
    files); the others are hashed through `hashes`, each once while it stays unchanged."""
    if not dependencies:
        return True
    if not isinstance(dependencies, dict):
        return False
    hashes = hashes if hashes is not None else FileHashes()
    known = known or {}
    for path, digest in dependencies.items():
        current = known.get(path)
        if (current if current is not None else hashes.of(path)) != digest:
            return False
    return True


def _stat_key(path: str) -> Optional[tuple]:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size, stat.st_ino)


class FileHashes:
    """The content hashes of files, each read and hashed once while it stays as it was (same
    size, times and inode): many cached results depend on the same few files (a package's
    helpers), and each dependant checking them again cost a warm run most of its time."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[tuple, str]] = {}  # path -> (stat key, content hash)

    def of(self, path: str) -> Optional[str]:
        """The hash of the file's bytes now, or None when it cannot be read."""
        stat = _stat_key(path)
        if stat is None:
            return None
        known = self._known.get(path)
        if known is not None and known[0] == stat:
            return known[1]
        try:
            digest = content_key(read_bytes(path))  # never blocks on a FIFO put in a file's place
        except SourceError:
            return None
        self._known[path] = (stat, digest)  # stat taken before reading: an edit meanwhile shows next time
        return digest


def code_fingerprint() -> str:
    """Changes whenever dplint's own code changes (also in an editable install without a new version)."""
    import dplint
    import dplint.rules

    parts = []
    for package in (dplint, dplint.rules):
        for folder in package.__path__:
            for name in sorted(os.listdir(folder)):
                if name.endswith(".py"):
                    stat = os.stat(os.path.join(folder, name))
                    parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.blake2b("|".join(parts).encode(), digest_size=8).hexdigest()


def version_folder(root: str) -> str:
    """The folder under the cache folder `root` for this dplint version and code."""
    return os.path.join(root, f"{__version__}-{code_fingerprint()}")


def catalog_file(root: str) -> str:
    """Where the rule catalog (`dplint.registry.keep_catalog_in`) is kept under `root`."""
    return os.path.join(version_folder(root), "catalog.json")


def _load_in_use(path: str) -> object:
    """The JSON value in `path` (None when there is none or it is damaged); a file read a day
    after it was written is touched: still in use, not the first to go."""
    try:
        with open(path, "rb") as handle:
            value = _unsealed(handle.read())
            if time.time() - os.fstat(handle.fileno()).st_mtime > TOUCH_AFTER_S:
                os.utime(path)
    except (OSError, ValueError):
        return None
    return value


# Every file the cache writes opens with a digest of the rest: `{"check":"<hex>",...}`.
_SEAL_START = b'{"check":"'
_SEAL_END = len(_SEAL_START) + 32


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).hexdigest().encode()


def _sealed(data: dict) -> bytes:
    """`data` as JSON with a digest of its text first (still JSON: the first key)."""
    body = json.dumps(data, separators=(",", ":")).encode()  # dumps encodes in C; dump in Python
    return _SEAL_START + _digest(body) + b'"' + (b"," if body != b"{}" else b"") + body[1:]


def _unsealed(raw: bytes) -> object:
    """The value `_sealed` wrote, or None when the text no longer matches its digest: a file of
    the wrong shape (a finding dropped or cut short, a field of another type, a list for a
    dict) would otherwise crash every later run, or lose findings run after run. Hashing the
    text costs a warm run far less than checking each value it holds."""
    if not raw.startswith(_SEAL_START) or raw[_SEAL_END : _SEAL_END + 1] != b'"':
        return None
    rest = raw[_SEAL_END + 1 :]
    body = b"{" + (rest[1:] if rest.startswith(b",") else rest)
    if _digest(body) != raw[len(_SEAL_START) : _SEAL_END]:
        return None
    return json.loads(body)


def _read_pack(path: str) -> dict:
    """{absolute path: entry} of a pack; empty when there is none or it is damaged."""
    pack = _load_in_use(path)
    entries = pack.get("entries") if isinstance(pack, dict) else None
    return entries if isinstance(entries, dict) else {}


def _valid_entry(entry, absolute: str) -> bool:
    return isinstance(entry, dict) and entry.get("path") == absolute and isinstance(entry.get("results"), dict)


def _write_json(path: str, data: dict) -> None:
    """Write whole or not at all: a temp file in the same folder, renamed over the entry."""
    temp = f"{path}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    try:
        with open(temp, "wb") as handle:
            handle.write(_sealed(data))
        os.replace(temp, path)
    except OSError:
        try:
            os.unlink(temp)
        except OSError:
            pass  # a cache that cannot be written only costs time


class Cache:
    def __init__(self, folder: str, settings: object = None) -> None:
        """`settings` is accepted for older callers; results are keyed per file and rule set."""
        self.root = folder
        self.folder = version_folder(folder)
        self.changed = False
        self._entries: dict[str, Optional[dict]] = {}  # absolute path -> entry as read (None: none)
        self._pack_key: Optional[str] = None  # the run's pack (`use_pack`), if it uses one
        self._pack: Optional[dict] = None  # absolute path -> entry, as the pack was read
        self._pack_next: dict[str, dict] = {}  # the entries this run used or wrote: the next pack
        self._pack_stale = False
        self._newest_packs: Optional[list[dict]] = None  # the entries of the newest packs, when a file has none of its own
        self.hashes = FileHashes()  # of the files cached results depend on that a run did not hash itself

    # ------------------------------------------------------------------ files
    def _entry_path(self, absolute: str) -> str:
        name = hashlib.blake2b(os.fsencode(absolute), digest_size=16).hexdigest()
        return os.path.join(self.folder, "files", name[:2], name + ".json")

    def _read(self, absolute: str) -> Optional[dict]:
        if absolute not in self._entries:
            entry = _load_in_use(self._entry_path(absolute))  # none, or damaged: lint again
            if not _valid_entry(entry, absolute):
                entry = self._from_newest_packs(absolute)
            self._entries[absolute] = entry
        return self._entries[absolute]

    def _from_newest_packs(self, absolute: str) -> Optional[dict]:
        """The entry of `absolute` in one of the newest packs (runs over many files write
        their entries only there), read once per run."""
        if self._newest_packs is None:
            self._newest_packs = []
            try:
                found = sorted(os.scandir(os.path.join(self.folder, "runs")), key=lambda e: e.stat().st_mtime, reverse=True)
            except OSError:
                found = []
            for pack in found[:PACKS_LOOKED_UP]:
                if self._pack_key is not None and pack.path == self._pack_path():
                    continue  # the run's own pack: asked already
                entries = _read_pack(pack.path)
                if entries:
                    self._newest_packs.append(entries)
        for entries in self._newest_packs:
            entry = entries.get(absolute)
            if _valid_entry(entry, absolute):
                return entry
        return None

    def get(self, path: str, content: str, rules: str, known: Optional[dict] = None) -> Optional[FileReport]:
        """The cached report of `path` if its bytes still hash to `content`, it was checked
        with the rule set `rules` (`rule_set_key`) and the files it depends on are unchanged
        (`known`: the hashes of files just read, by absolute path), else None.

        Asked first of the run's pack (`use_pack`), then of the file's own entry."""
        absolute = os.path.abspath(path)
        packed = self._packed(absolute)
        report = self._report(path, packed, content, rules, known) if packed is not None else None
        if report is None:
            entry = self._read(absolute)
            if entry is not None and entry is not packed:
                report = self._report(path, entry, content, rules, known)
            if self._pack_key is not None:
                self._pack_stale = True  # the pack did not answer: the next run's must
            packed = entry
        if self._pack_key is not None and packed is not None and packed.get("hash") == content:
            self._pack_next[absolute] = packed
        return report

    def _report(self, path: str, entry: dict, content: str, rules: str, known: Optional[dict]) -> Optional[FileReport]:
        if entry.get("hash") != content:
            return None
        result = entry["results"].get(rules)
        if not isinstance(result, dict):
            return None
        if not dependencies_unchanged(result.get("deps"), self.hashes, known):
            return None  # a project file it read (an imported helper) changed: its findings may have too
        try:
            findings = [finding_from_dict(f) for f in result["findings"]]
            elsewhere = [f.get("elsewhere") for f in result["findings"]]
            facts = result.get("facts") or {}
        except (KeyError, TypeError, ValueError, AttributeError):
            return None  # an entry from a damaged cache file: lint again
        for finding, other in zip(findings, elsewhere):
            # as named in this run (`.` vs an absolute path); a finding this file's analysis
            # placed in a file it imports from keeps that file
            if isinstance(other, str):
                finding.filename = other if os.path.isabs(path) else os.path.relpath(other)
            else:
                finding.filename = path
        return FileReport(path, findings, facts=facts, dependencies=result.get("deps") or {})

    # ------------------------------------------------------------------ packs
    def use_pack(self, paths: Iterable[str], files: int) -> None:
        """Read the entries of a run over `paths` (checking `files` files) from one pack
        written by the last such run, instead of one entry file per checked file: opening
        and parsing hundreds of small files cost a warm run a tenth of its time.

        A pack holds copies of file entries; an entry is valid wherever it is read from (its
        file's hash, rule set and dependencies are checked on use), so a stale pack costs
        only a look at the file entry. Small runs (a pre-commit hook's few files) use none."""
        if files < PACK_MIN_FILES:
            return
        named = "\0".join(sorted(os.path.abspath(path) for path in paths))
        self._pack_key = hashlib.blake2b(os.fsencode(named), digest_size=16).hexdigest()

    def _pack_path(self) -> str:
        return os.path.join(self.folder, "runs", f"{self._pack_key}.json")

    def _packed(self, absolute: str) -> Optional[dict]:
        if self._pack_key is None:
            return None
        if self._pack is None:
            self._pack = _read_pack(self._pack_path())
        entry = self._pack.get(absolute)
        return entry if _valid_entry(entry, absolute) else None

    def put(self, path: str, content: str, rules: str, report: FileReport) -> None:
        absolute = os.path.abspath(path)
        entry = self._packed(absolute) or self._read(absolute)
        results = dict(entry["results"]) if entry is not None and entry.get("hash") == content else {}
        results.pop(rules, None)
        results[rules] = {"findings": [_stored(f, absolute) for f in report.findings], "facts": report.facts,
                          "deps": report.dependencies}
        while len(results) > MAX_RULE_SETS:  # the oldest rule set goes (dicts keep insertion order)
            del results[next(iter(results))]
        entry = {"path": absolute, "hash": content, "results": results}
        self._entries[absolute] = entry
        if self._pack_key is not None:  # kept in the pack alone (see the module docstring)
            self._pack_next[absolute] = entry
            self._pack_stale = True
            return
        target = self._entry_path(absolute)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
        except OSError:
            return
        _write_json(target, entry)
        self.changed = True

    # ------------------------------------------------------------------ project-wide results
    def _project_path(self, facts_key: str) -> str:
        return os.path.join(self.folder, "project", f"{facts_key}.json")

    def get_project(self, facts_key: str) -> Optional[list[Finding]]:
        """The project-wide findings last computed from these facts (every file's, hashed)."""
        entry = _load_in_use(self._project_path(facts_key))
        try:
            return [finding_from_dict(f) for f in entry["findings"]]
        except (KeyError, TypeError, ValueError, AttributeError):
            return None  # none, or damaged: compute them again

    def put_project(self, facts_key: str, findings: list[Finding]) -> None:
        target = self._project_path(facts_key)
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
        except OSError:
            return
        _write_json(target, {"findings": [finding_to_dict(f) for f in findings]})
        self.changed = True

    # ------------------------------------------------------------------ bounds
    def save(self) -> None:
        """Entries are written as they come; this writes the run's pack (when the one read did
        not answer for every file) and keeps the folder within its bounds."""
        if self._pack_stale:
            try:
                os.makedirs(os.path.dirname(self._pack_path()), exist_ok=True)
                _write_json(self._pack_path(), {"entries": self._pack_next})
                self.changed = True
            except OSError:
                pass
        if not self.changed:
            return
        try:
            ignore = os.path.join(self.root, ".gitignore")
            if not os.path.exists(ignore):
                with open(ignore, "w", encoding="utf-8") as handle:
                    handle.write("*\n")
            from dplint.registry import store_catalog

            store_catalog(os.path.join(self.folder, "catalog.json"))  # for the next run's `keep_catalog_in`
            self._prune()
        except OSError:
            pass  # bounds are kept by the next run that can

    def _prune(self) -> None:
        versions = sorted(
            (entry for entry in os.scandir(self.root) if entry.is_dir() and entry.path != self.folder),
            key=lambda entry: entry.stat().st_mtime,
            reverse=True,
        )
        os.utime(self.folder)
        if len(versions) >= KEEP_VERSIONS:
            import shutil  # seldom needed: not imported by every run

        for old in versions[KEEP_VERSIONS - 1 :]:
            shutil.rmtree(old.path, ignore_errors=True)
        _keep_newest(os.path.join(self.folder, "project"), MAX_PROJECT_ENTRIES, MAX_PROJECT_ENTRIES)
        _keep_newest(os.path.join(self.folder, "runs"), MAX_PACKS, MAX_PACKS)
        files = os.path.join(self.folder, "files")
        entries = [entry for shard in os.scandir(files) if shard.is_dir() for entry in os.scandir(shard.path)]
        if len(entries) > MAX_ENTRIES:
            _remove_oldest(entries, len(entries) - MAX_ENTRIES * 8 // 10)


def _keep_newest(folder: str, limit: int, keep: int) -> None:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    if len(entries) > limit:
        _remove_oldest(entries, len(entries) - keep)


def _remove_oldest(entries: list, count: int) -> None:
    def mtime(entry) -> float:
        try:
            return entry.stat().st_mtime
        except OSError:
            return 0.0

    for entry in sorted(entries, key=mtime)[:count]:
        try:
            os.unlink(entry.path)
        except OSError:
            pass


def _stored(finding, linted: str) -> dict:
    """A finding as the cache keeps it: with the absolute path of the file it is in when that
    is not the linted file (the analysis of one file may report in a file it imports from)."""
    data = finding_to_dict(finding)
    other = os.path.abspath(finding.filename)
    if other != linted:
        data["elsewhere"] = other
    return data
