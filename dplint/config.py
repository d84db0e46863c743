"""Settings: what the command line and `[tool.dplint]` say, merged (the command line wins)."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field, replace
from typing import Optional


class ConfigError(ValueError):
    """A bad configuration file, key or value; the message names the file and key."""


@dataclass(frozen=True)
class Settings:
    select: Optional[tuple[str, ...]] = None  # None: every rule
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (glob, selectors)
    exclude: tuple[str, ...] = ()
    extend_exclude: tuple[str, ...] = ()
    unsafe_fixes: bool = False
    output_format: str = "text"
    root: str = field(default_factory=os.getcwd)  # the folder globs are relative to

    def enabled_codes(self, path: Optional[str] = None) -> frozenset[str]:
        from dplint.registry import selected_codes

        ignore = list(self.ignore)
        if path is not None:
            relative = os.path.relpath(os.path.abspath(path), self.root)
            for pattern, selectors in self.per_file_ignores:
                if _glob_match(relative, pattern):
                    ignore.extend(selectors)
        return selected_codes(self.select, ignore, self.extend_select)

    def fingerprint(self) -> str:
        """What the cache key needs to know about the settings that change findings."""
        return repr((self.select, self.ignore, self.extend_select, self.per_file_ignores))

    def merged(self, **overrides) -> "Settings":
        return replace(self, **{key: value for key, value in overrides.items() if value is not None})


def _glob_match(relative_path: str, pattern: str) -> bool:
    relative_path = relative_path.replace(os.sep, "/")
    return fnmatch.fnmatch(relative_path, pattern) or fnmatch.fnmatch(os.path.basename(relative_path), pattern)


def is_excluded(path: str, settings: Settings) -> bool:
    relative = os.path.relpath(os.path.abspath(path), settings.root).replace(os.sep, "/")
    parts = relative.split("/")
    for pattern in (*settings.exclude, *settings.extend_exclude):
        if _glob_match(relative, pattern) or any(fnmatch.fnmatch(part, pattern) for part in parts):
            return True
    return False


def load_settings(start: str, overrides: Optional[dict] = None, config_file: Optional[str] = None) -> Settings:
    """Settings for files under `start`. (Configuration files are read by the config issue.)"""
    return Settings().merged(**(overrides or {}))
