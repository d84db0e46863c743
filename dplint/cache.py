"""The result cache: re-running on an unchanged file parses nothing (and imports no LibCST).

An entry is found by the file's absolute path and used only when the hash of the file's
bytes still matches. All entries live in one JSON file per cache folder, and that file is
used only when it was written by the same dplint code and settings.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Optional

from dplint import __version__
from dplint.config import Settings
from dplint.rule import Finding, finding_from_dict, finding_to_dict

if TYPE_CHECKING:
    from dplint.runner import FileReport


def content_key(raw: bytes) -> str:
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def dependencies_unchanged(dependencies) -> bool:
    """Whether every project file a cached result read still has the content it had then."""
    if not dependencies:
        return True
    if not isinstance(dependencies, dict):
        return False
    for path, digest in dependencies.items():
        try:
            with open(path, "rb") as handle:
                if content_key(handle.read()) != digest:
                    return False
        except OSError:
            return False
    return True


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


def run_key(settings: Settings) -> str:
    """Everything besides a file's bytes that its findings depend on."""
    parts = [__version__, code_fingerprint(), settings.fingerprint()]
    if settings.per_file_ignores:  # their globs are relative to the root
        parts.append(os.path.abspath(settings.root))
    return "|".join(parts)


class Cache:
    def __init__(self, folder: str, settings: Settings) -> None:
        self.folder = folder
        self.file = os.path.join(folder, f"results-{__version__}.json")
        self.run_key = run_key(settings)
        self.entries: dict[str, dict] = {}
        self.project: Optional[dict] = None  # the project-wide findings of the last run
        self.changed = False
        try:
            with open(self.file, encoding="utf-8") as handle:
                data = json.load(handle)
            if data.get("key") == self.run_key and isinstance(data.get("files"), dict):
                self.entries = data["files"]
                self.project = data.get("project")
        except (OSError, ValueError, AttributeError):
            pass  # no cache, or an unreadable one: start empty

    def get(self, path: str, key: str) -> Optional["FileReport"]:
        """The cached report of `path` if its content hash is still `key`, else None."""
        from dplint.runner import FileReport

        entry = self.entries.get(os.path.abspath(path))
        if not isinstance(entry, dict) or entry.get("hash") != key:
            return None
        if not dependencies_unchanged(entry.get("deps")):
            return None  # a file it imports from changed: its findings may have too
        try:
            findings = [finding_from_dict(f) for f in entry["findings"]]
        except (KeyError, TypeError, ValueError):
            return None  # an entry from a damaged cache file: lint again
        for finding in findings:
            finding.filename = path  # as named in this run (`.` vs an absolute path)
        return FileReport(path, findings, facts=entry.get("facts", {}), dependencies=entry.get("deps") or {})

    def put(self, path: str, key: str, report: "FileReport") -> None:
        self.entries[os.path.abspath(path)] = {
            "hash": key,
            "findings": [finding_to_dict(f) for f in report.findings],
            "facts": report.facts,
            "deps": report.dependencies,
        }
        self.changed = True

    def get_project(self, facts_key: str) -> Optional[list[Finding]]:
        """The project-wide findings last computed from these facts (every file's, hashed)."""
        entry = self.project
        if not isinstance(entry, dict) or entry.get("facts") != facts_key:
            return None
        try:
            return [finding_from_dict(f) for f in entry["findings"]]
        except (KeyError, TypeError, ValueError):
            return None

    def put_project(self, facts_key: str, findings: list[Finding]) -> None:
        self.project = {"facts": facts_key, "findings": [finding_to_dict(f) for f in findings]}
        self.changed = True

    def save(self) -> None:
        if not self.changed:
            return
        temp = f"{self.file}.{os.getpid()}.tmp"
        try:
            os.makedirs(self.folder, exist_ok=True)
            ignore = os.path.join(self.folder, ".gitignore")
            if not os.path.exists(ignore):
                with open(ignore, "w", encoding="utf-8") as handle:
                    handle.write("*\n")
            with open(temp, "w", encoding="utf-8") as handle:
                json.dump({"key": self.run_key, "files": self.entries, "project": self.project}, handle)
            os.replace(temp, self.file)  # concurrent runs: the last complete file wins
        except OSError:
            try:
                os.unlink(temp)
            except OSError:
                pass  # a cache that cannot be written only costs time
