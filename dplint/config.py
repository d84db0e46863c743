"""Settings: what the command line and the configuration files say, merged (the command line wins).

Configuration lives in `[tool.dplint]` of a `pyproject.toml`, or at the top level of a
`dplint.toml` (as ruff's `ruff.toml`). Each checked file uses the nearest one, found by walking
up from the file's folder: `dplint.toml` before `pyproject.toml` in one folder, and a
`pyproject.toml` without `[tool.dplint]` is passed over. Globs in a file are relative to its
folder. `--config FILE` uses that one file for every checked file.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Optional



def _tomllib():
    """The TOML parser, imported when a configuration file is read (most runs read none)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10 only
        import tomli as tomllib
    return tomllib

CONFIG_NAMES = ("dplint.toml", "pyproject.toml")  # looked for in this order in each folder
SELECTOR_LISTS = ("select", "ignore", "extend-select")
GLOB_LISTS = ("exclude", "extend-exclude", "extend-include")
KEYS = (*SELECTOR_LISTS, "per-file-ignores", *GLOB_LISTS, "unsafe-fixes", "output-format", "fail-on", "analysis-timeout")
# ruff's layout: the rule selection may also sit in a `lint` sub-table (`[tool.dplint.lint]`).
LINT_KEYS = (*SELECTOR_LISTS, "per-file-ignores")
DEFAULT_ANALYSIS_TIMEOUT = 10.0  # seconds one file's analysis may take (`analysis-timeout`)
SEVERITY_ORDER = ("info", "warning", "error")  # `fail-on = X`: findings of X or worse exit 1
# The `output-format` names, in the order messages list them: the names of the reporters
# (`dplint.reporters.REPORTERS`; tests/test_layering.py checks that the two agree), kept here so
# that reading a configuration imports no reporter.
OUTPUT_FORMATS = ("text", "concise", "json", "json-lines", "github", "sarif", "junit", "full", "grouped", "pylint", "gitlab")


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
    extend_include: tuple[str, ...] = ()  # more files for folder walks (`*.py`, `*.pyi`, `*.ipynb` always)
    unsafe_fixes: bool = False
    output_format: str = "text"
    fail_on: str = "info"  # the least severe finding that makes the exit code 1
    analysis_timeout: float = DEFAULT_ANALYSIS_TIMEOUT  # seconds; a file whose analysis takes longer is given up
    root: str = field(default_factory=os.getcwd)  # the folder globs are relative to
    config_file: Optional[str] = None  # the file these settings were read from, if any
    # The command line's values, laid over whichever configuration file a checked file uses.
    overrides: tuple[tuple[str, Any], ...] = ()
    discover: bool = False  # each checked file uses its own nearest configuration file
    configured: tuple[str, ...] = ()  # the keys a configuration file (or `--config "k = v"`) set

    def for_path(self, path: str) -> "Settings":
        """The settings that apply to `path`: those of its nearest configuration file."""
        if not self.discover:
            return self
        folder = (os.getcwd(), os.path.dirname(path))  # as spelled: the files of one folder share it
        found = _NEAREST.get(folder, _UNKNOWN)
        if found is _UNKNOWN:
            found = _NEAREST[folder] = find_config(os.path.dirname(os.path.abspath(path)))
        if found == self.config_file:
            return self
        return _file_settings(found, self.overrides)

    def enabled_codes(self, path: Optional[str] = None) -> frozenset[str]:
        from dplint.registry import selected_codes

        settings = self if path is None else self.for_path(path)
        ignore = list(settings.ignore)
        if path is not None and settings.per_file_ignores:
            relative = _relative(path, settings.root)
            for pattern, selectors in settings.per_file_ignores:
                if _glob_match(relative, pattern):
                    ignore.extend(selectors)
        return selected_codes(settings.select, ignore, settings.extend_select)

    def fingerprint(self) -> str:
        """What the cache key needs to know about the settings that change findings."""
        return repr((self.select, self.ignore, self.extend_select, self.per_file_ignores, self.config_file, self.overrides))

    def merged(self, **overrides) -> "Settings":
        return replace(self, **{key: value for key, value in overrides.items() if value is not None})


def _relative(path: str, root: str) -> str:
    return os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")


def _glob_match(relative_path: str, pattern: str) -> bool:
    pattern = pattern.rstrip("/")
    return fnmatch.fnmatch(relative_path, pattern) or fnmatch.fnmatch(os.path.basename(relative_path), pattern)


def is_excluded(path: str, settings: Settings) -> bool:
    settings = settings.for_path(path)
    if not settings.exclude and not settings.extend_exclude:
        return False
    relative = _relative(path, settings.root)
    parts = relative.split("/")
    for pattern in (*settings.exclude, *settings.extend_exclude):
        if _glob_match(relative, pattern) or any(fnmatch.fnmatch(part, pattern.rstrip("/")) for part in parts):
            return True
    return False


def load_settings(start: str, overrides: Optional[dict] = None, config_file: Optional[str] = None) -> Settings:
    """The run's settings: `config_file`'s, or those of the configuration nearest to `start`
    (a file or folder), with the command line's `overrides` on top. With no `config_file`,
    every checked file later uses its own nearest configuration (`Settings.for_path`)."""
    _FOUND.clear()
    _NEAREST.clear()
    _LOADED.clear()
    frozen_overrides = tuple(sorted((key, value) for key, value in (overrides or {}).items() if value is not None))
    if config_file is not None:
        if not os.path.isfile(config_file):
            raise ConfigError(f"{config_file}: no such configuration file")
        return _file_settings(os.path.abspath(config_file), frozen_overrides)
    start = os.path.abspath(start)
    folder = start if os.path.isdir(start) else os.path.dirname(start)
    return replace(_file_settings(find_config(folder), frozen_overrides), discover=True)


_FOUND: dict[str, Optional[str]] = {}  # folder -> its nearest configuration file
_NEAREST: dict[tuple[str, str], Optional[str]] = {}  # (cwd, a checked file's folder as spelled) -> the same
_UNKNOWN = object()
_LOADED: dict[tuple, Settings] = {}  # (configuration file, overrides) -> settings


def find_config(folder: str) -> Optional[str]:
    """The configuration file nearest to `folder` (an absolute path), walking up; None if none."""
    visited = []
    found: Optional[str] = None
    while True:
        if folder in _FOUND:
            found = _FOUND[folder]
            break
        visited.append(folder)
        candidates = (os.path.join(folder, name) for name in CONFIG_NAMES)
        found = next((path for path in candidates if _configures_dplint(path)), None)
        parent = os.path.dirname(folder)
        if found is not None or parent == folder:
            break
        folder = parent
    for seen in visited:
        _FOUND[seen] = found
    return found


def _configures_dplint(path: str) -> bool:
    if not os.path.isfile(path):
        return False
    if os.path.basename(path) != "pyproject.toml":
        return True
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError:
        return False
    if b"dplint" not in raw:  # not ours: never parse (or fail on) someone else's configuration
        return False
    return "dplint" in _parse(path, raw).get("tool", {})


def _parse(path: str, raw: bytes) -> dict:
    tomllib = _tomllib()
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None


def _file_settings(path: Optional[str], overrides: tuple[tuple[str, Any], ...]) -> Settings:
    key = (path, overrides)
    if key not in _LOADED:
        base = Settings() if path is None else _read_settings(path)
        _LOADED[key] = replace(_with_overrides(base, dict(overrides)), overrides=overrides)
    return _LOADED[key]


def _read_settings(path: str) -> Settings:
    try:
        with open(path, "rb") as handle:
            data = _parse(path, handle.read())
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    if os.path.basename(path) == "pyproject.toml":
        table, where = data.get("tool", {}).get("dplint", {}), "[tool.dplint]"
    else:
        table, where = data, "the top level"
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {where} must be a table")
    values: dict[str, Any] = {"root": os.path.dirname(path), "config_file": path}
    values.update(_checked_table(path, table, where))
    return Settings(**values)


def _checked_table(path: str, table: dict, where: str) -> dict[str, Any]:
    """The table's keys as Settings fields, checked; `configured` lists the keys found."""
    table = _with_lint_table(path, table, where)
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in KEYS:
            import difflib

            hint = ""
            close = difflib.get_close_matches(key.replace("_", "-"), KEYS, n=1)
            if key.replace("_", "-") in KEYS or close:
                hint = f" (did you mean `{close[0] if close else key.replace('_', '-')}`?)"
            elif key == "tool":
                hint = " (dplint.toml takes the keys at the top level, without [tool.dplint])"
            raise ConfigError(f"{path}: unknown key `{key}` in {where}{hint}; known keys: {', '.join((*KEYS, 'lint'))}")
        values[key.replace("-", "_")] = _checked_value(path, key, value)
    values["configured"] = tuple(table)
    return values


def _with_lint_table(path: str, table: dict, where: str) -> dict:
    """The table with the keys of its `lint` sub-table (ruff's `[tool.ruff.lint]` layout) moved
    up beside the others: they mean the same there. A key set in both places is an error."""
    if "lint" not in table:
        return table
    lint = table["lint"]
    lint_where = {"[tool.dplint]": "[tool.dplint.lint]", "the top level": "[lint]"}.get(where, where)
    if not isinstance(lint, dict):
        raise ConfigError(f"{path}: `lint` in {where} must be a table (of {', '.join(LINT_KEYS)}), not {lint!r}")
    for key in lint:
        if key in LINT_KEYS:
            if key in table:
                raise ConfigError(f"{path}: `{key}` is set both in {where} and in {lint_where}; keep one")
            continue
        import difflib

        if key in KEYS:
            hint = f" (`{key}` goes in {where}, beside `lint`)"
        else:
            close = difflib.get_close_matches(key.replace("_", "-"), LINT_KEYS, n=1)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
        raise ConfigError(f"{path}: unknown key `{key}` in {lint_where}{hint}; {lint_where} takes: {', '.join(LINT_KEYS)}")
    return {**{key: value for key, value in table.items() if key != "lint"}, **lint}


def parse_per_file_ignores(values: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`--per-file-ignores 'tests/*:DPL004,strip-module'` (repeatable) as `per_file_ignores` entries."""
    entries = []
    for value in values:
        pattern, colon, selectors = value.rpartition(":")
        listed = [selector.strip() for selector in selectors.split(",") if selector.strip()]
        if not colon or not pattern.strip() or not listed:
            raise ConfigError(f"--per-file-ignores {value!r}: expected GLOB:RULE[,RULE...], e.g. 'tests/*:DPL004'")
        _check_selectors("--per-file-ignores", repr(pattern.strip()), listed)
        entries.append((pattern.strip(), tuple(listed)))
    return tuple(entries)


def parse_config_override(text: str) -> tuple[tuple[str, Any], ...]:
    """`--config "key = value"` (TOML, as ruff's): the settings it sets, checked."""
    tomllib = _tomllib()
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(
            f"--config {text!r}: neither a configuration file nor a TOML `key = value` pair ({error})"
        ) from None
    values = _checked_table("--config", table, f"{text!r}")
    return tuple(sorted(values.items()))


def _checked_value(path: str, key: str, value: Any) -> Any:
    def fail(expected: str) -> ConfigError:
        return ConfigError(f"{path}: `{key}` must be {expected}, not {value!r}")

    if key in SELECTOR_LISTS or key in GLOB_LISTS:
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise fail("a list of strings")
        if key in SELECTOR_LISTS:
            _check_selectors(path, key, value)
        return tuple(value)
    if key == "per-file-ignores":
        if not isinstance(value, dict) or not all(
            isinstance(rules, list) and all(isinstance(rule, str) for rule in rules) for rules in value.values()
        ):
            raise fail('a table of glob = ["rule", ...]')
        for pattern, selectors in value.items():
            _check_selectors(path, f"{key}.{pattern!r}", selectors)
        return tuple((pattern, tuple(selectors)) for pattern, selectors in value.items())
    if key == "unsafe-fixes":
        if not isinstance(value, bool):
            raise fail("true or false")
        return value
    if key == "output-format":
        if value not in OUTPUT_FORMATS:
            raise fail(f"one of {', '.join(OUTPUT_FORMATS)}")
        return value
    if key == "fail-on":
        if value not in SEVERITY_ORDER:
            raise fail(f"one of {', '.join(reversed(SEVERITY_ORDER))}")
        return value
    if key == "analysis-timeout":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise fail("a number of seconds greater than 0")
        return float(value)
    raise AssertionError(key)


def _check_selectors(path: str, key: str, selectors: list[str]) -> None:
    from dplint.registry import UnknownRuleError, codes_for

    for selector in selectors:
        try:
            codes_for(selector)
        except UnknownRuleError as error:
            raise ConfigError(f"{path}: `{key}`: {error}") from None


def _with_overrides(base: Settings, overrides: dict[str, Any]) -> Settings:
    """The command line over a configuration file, as ruff layers them: `--select` replaces the
    file's whole rule selection; otherwise `--extend-select` re-enables rules the file ignores
    and `--ignore` adds to the file's ignores. Per-file ignores still apply on top."""
    from dplint.registry import codes_for

    config = dict(overrides.get("config") or ())  # `--config "key = value"`: as if in the file
    if config:
        configured = tuple(dict.fromkeys(base.configured + config.pop("configured")))
        base = replace(base, **config, configured=configured)
    changes: dict[str, Any] = {
        key: overrides[key]
        for key in ("unsafe_fixes", "output_format", "fail_on", "exclude", "analysis_timeout")
        if overrides.get(key) is not None
    }
    if overrides.get("extend_exclude"):
        changes["extend_exclude"] = base.extend_exclude + tuple(overrides["extend_exclude"])
    if overrides.get("per_file_ignores"):  # `--per-file-ignores`: on top of the file's
        changes["per_file_ignores"] = base.per_file_ignores + tuple(overrides["per_file_ignores"])
    select = overrides.get("select")
    ignore = tuple(overrides.get("ignore") or ())
    extend_select = tuple(overrides.get("extend_select") or ())
    if select is not None:
        changes.update(select=tuple(select), ignore=ignore, extend_select=extend_select)
    elif ignore or extend_select:
        re_enabled = set().union(*(codes_for(selector) for selector in extend_select))
        file_ignored = set().union(*(codes_for(selector) for selector in base.ignore))
        changes.update(
            ignore=tuple(sorted(file_ignored - re_enabled)) + ignore,
            extend_select=base.extend_select + extend_select,
        )
    return replace(base, **changes)
