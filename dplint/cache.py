"""The result cache: re-running on an unchanged file parses nothing.

A file's entry is keyed by the hash of its bytes, the dplint version and the settings that
change findings; one JSON file per cache folder holds every entry.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Optional

from dplint import __version__
from dplint.config import Settings
from dplint.rule import finding_from_dict, finding_to_dict


def _code_fingerprint() -> str:
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


class Cache:
    def __init__(self, folder: str, settings: Settings) -> None:
        self.folder = folder
        self.file = os.path.join(folder, f"results-{__version__}.json")
        self.settings_key = settings.fingerprint() + _code_fingerprint()
        self.entries: dict[str, dict] = {}
        self.changed = False
        try:
            with open(self.file, encoding="utf-8") as handle:
                data = json.load(handle)
            if data.get("settings") == self.settings_key:
                self.entries = data.get("files", {})
        except (OSError, ValueError, AttributeError):
            pass

    @staticmethod
    def _key(path: str) -> Optional[str]:
        try:
            with open(path, "rb") as handle:
                return hashlib.blake2b(handle.read(), digest_size=16).hexdigest()
        except OSError:
            return None

    def get(self, path: str):
        from dplint.runner import FileReport

        entry = self.entries.get(os.path.abspath(path))
        if entry is None or entry.get("hash") != self._key(path):
            return None
        return FileReport(path, [finding_from_dict(f) for f in entry["findings"]], facts=entry.get("facts", {}))

    def put(self, path: str, report) -> None:
        key = self._key(path)
        if key is None:
            return
        self.entries[os.path.abspath(path)] = {
            "hash": key,
            "findings": [finding_to_dict(f) for f in report.findings],
            "facts": report.facts,
        }
        self.changed = True

    def save(self) -> None:
        if not self.changed:
            return
        try:
            os.makedirs(self.folder, exist_ok=True)
            ignore = os.path.join(self.folder, ".gitignore")
            if not os.path.exists(ignore):
                with open(ignore, "w", encoding="utf-8") as handle:
                    handle.write("*\n")
            temp = self.file + f".{os.getpid()}.tmp"
            with open(temp, "w", encoding="utf-8") as handle:
                json.dump({"settings": self.settings_key, "files": self.entries}, handle)
            os.replace(temp, self.file)
        except OSError:
            pass  # a cache that cannot be written only costs time
