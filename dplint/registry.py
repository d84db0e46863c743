"""Finds the rules: every `Rule` subclass defined in a module of the `dplint.rules` package.

Adding a rule means adding a module to `rules/`; nothing here lists them by hand.
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import os
import pkgutil
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from dplint.rule import Rule


class UnknownRuleError(ValueError):
    pass


@functools.lru_cache(maxsize=None)
def all_rules() -> tuple[type[Rule], ...]:
    import dplint.rules as package

    found: list[type[Rule]] = []
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Rule) and value.__module__ == module.__name__:
                found.append(value)
    codes = [rule.code for rule in found]
    duplicates = {code for code in codes if codes.count(code) > 1}
    if duplicates:
        raise RuntimeError(f"rule codes used twice: {sorted(duplicates)}")
    return tuple(sorted(found, key=lambda rule: rule.code))


@dataclass(frozen=True)
class RuleEntry:
    """What selecting rules and the pre-filter need to know of a rule, without importing it."""

    code: str
    name: str
    tokens: tuple[str, ...]
    anchor_tokens: tuple[str, ...] = ()


_CATALOG_FILE: str | None = None  # where a catalog read earlier by this same code is kept


def keep_catalog_in(path: str | None) -> None:
    """Read the catalog from `path`, a file in the result cache's folder for this very code
    (`dplint.cache.version_folder`), when it is there: reading the rule modules' source costs
    every process ~0.01 s, a warm run several percent. `store_catalog` writes it."""
    global _CATALOG_FILE
    _CATALOG_FILE = path


@functools.lru_cache(maxsize=None)
def rule_catalog() -> tuple[RuleEntry, ...]:
    """Code, slug and tokens of every rule, read from the rule modules' source with `ast`.

    Importing the rules imports LibCST (~0.3 s); a run whose files all come from the cache
    needs only this. A module whose rule attributes are not plain literals is imported.
    """
    stored = _stored_catalog(_CATALOG_FILE) if _CATALOG_FILE is not None else None
    if stored is not None:
        return stored
    return _sorted(entry for entries in _catalog_by_module().values() for entry in entries)


def _sorted(entries: Iterable[RuleEntry]) -> tuple[RuleEntry, ...]:
    return tuple(sorted(entries, key=lambda entry: entry.code))


def _rule_modules() -> list:
    """The modules of the rules package (a look at its folder: no module is read)."""
    import dplint.rules as package

    return list(pkgutil.iter_modules(package.__path__))


def _catalog_by_module() -> dict[str, list[RuleEntry]]:
    """{module name: the entries of the rules it defines} for every module of the rules package."""
    import dplint.rules as package

    catalog: dict[str, list[RuleEntry]] = {}
    for info in _rule_modules():
        path = os.path.join(getattr(info.module_finder, "path", ""), info.name + ".py")
        found = _literal_entries(path)
        if found is None:
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            found = [RuleEntry(rule.code, rule.name, tuple(rule.tokens), tuple(rule.anchor_tokens))
                     for rule in all_rules() if rule.__module__ == module.__name__]
        catalog[info.name] = found
    return catalog


def _stored_catalog(path: str) -> tuple[RuleEntry, ...] | None:
    """The catalog `store_catalog` wrote, or None when there is none or it is in any doubt: a
    catalog that lacks a rule module's entries (cut short, edited) would disable those rules.

    Stored as {"modules": {module name: [[code, name, tokens, anchor tokens], ...]}}; it must
    name every module of the rules package, which a look at the folder tells."""
    try:
        with open(path, encoding="utf-8") as handle:
            stored = json.load(handle)
        modules = stored["modules"]
        if sorted(modules) != sorted(info.name for info in _rule_modules()):
            return None
        entries = _sorted(
            RuleEntry(code, name, _token_tuple(tokens), _token_tuple(anchor_tokens))
            for rows in modules.values()
            for code, name, tokens, anchor_tokens in rows
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # none yet, or damaged: read the rules
    ok = all(
        isinstance(entry.code, str) and isinstance(entry.name, str)
        and all(isinstance(token, str) or all(isinstance(part, str) for part in token)
                for token in (*entry.tokens, *entry.anchor_tokens))
        for entry in entries
    )
    codes = [entry.code for entry in entries]
    return entries if ok and entries and len(set(codes)) == len(codes) else None


def _token_tuple(tokens) -> tuple:
    if isinstance(tokens, (str, dict)):
        raise TypeError("tokens are a list")
    return tuple(token if isinstance(token, str) else tuple(token) for token in tokens)


def store_catalog(path: str) -> None:
    """Write the catalog where `keep_catalog_in` finds it (whole or not at all), unless a
    whole one is there already (a damaged one is written again)."""
    if _stored_catalog(path) is not None:
        return
    modules = {
        module: [[entry.code, entry.name, list(entry.tokens), list(entry.anchor_tokens)] for entry in entries]
        for module, entries in _catalog_by_module().items()
    }
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temp, "w", encoding="utf-8") as handle:
            json.dump({"modules": modules}, handle)
        os.replace(temp, path)
    except OSError:
        try:
            os.unlink(temp)
        except OSError:
            pass  # only costs the next run the reading of the rules


_CLASS_LINE = re.compile(r"^class \w+\((?P<bases>[^)]*)\):", re.MULTILINE)
_CLASS_BODY_END = re.compile(r"^(?:    (?:def |@)|\S)", re.MULTILINE)


def _literal_entries(path: str) -> list[RuleEntry] | None:
    """The rules a module defines, if their `code`, `name` and `tokens` are literals in the class body.

    Only each class's opening (its lines up to the first method or decorator) is parsed:
    parsing whole rule modules cost a warm run 0.04 s.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, ValueError):
        return None
    entries = []
    for header in _CLASS_LINE.finditer(text):
        body_start = text.find("\n", header.end()) + 1
        body_end = _CLASS_BODY_END.search(text, body_start)
        opening = text[header.start() : body_end.start() if body_end else len(text)]
        try:
            tree = ast.parse(opening + "\n    pass\n")
        except SyntaxError:
            return None
        found = _rule_entry(tree.body[0])
        if found is None:
            return None
        if found is not _NOT_A_RULE:
            entries.append(found)
    return entries


_NOT_A_RULE = RuleEntry("", "", ())


def _rule_entry(node: ast.ClassDef) -> RuleEntry | None:
    """The class's entry; `_NOT_A_RULE` for a helper class; None when only importing can tell."""
    values = {}
    for statement in node.body:
        if isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id in ("code", "name", "tokens", "anchor_tokens"):
                    try:
                        values[target.id] = ast.literal_eval(statement.value)
                    except (ValueError, TypeError, SyntaxError):
                        return None
    if "code" not in values:
        return _NOT_A_RULE
    if not node.bases or not {"code", "name", "tokens"} <= set(values):
        return None  # inherited attributes: only importing can tell
    return RuleEntry(values["code"], values["name"], tuple(values["tokens"]), tuple(values.get("anchor_tokens", ())))


def codes_for(selector: str) -> set[str]:
    """The rule codes a selector names: a code, a slug, a code prefix such as "DPL00", or "ALL"."""
    wanted = selector.strip()
    rules = rule_catalog()
    if wanted.upper() == "ALL":
        return {rule.code for rule in rules}
    exact = {rule.code for rule in rules if rule.code == wanted.upper() or rule.name == wanted.lower()}
    if exact:
        return exact
    prefixed = {rule.code for rule in rules if rule.code.startswith(wanted.upper())} if wanted[:3].upper() == "DPL" else set()
    if prefixed:
        return prefixed
    raise UnknownRuleError(f"unknown rule selector {selector!r}{_did_you_mean(wanted, rules)}")


def _did_you_mean(wanted: str, rules: Sequence[RuleEntry]) -> str:
    """` (did you mean 'strip-module'?)` for a near miss, else how selectors are spelled."""
    import difflib

    names = {rule.name: rule.name for rule in rules} | {rule.code.lower(): rule.code for rule in rules}
    spelled = wanted.lower().replace("_", "-").replace(" ", "-")
    close = difflib.get_close_matches(spelled, names, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {names[close[0]]!r}?)"
    return " (use a code such as DPL004, a slug such as strip-module, or a prefix such as DPL00)"


def find_rule(selector: str) -> type[Rule]:
    codes = codes_for(selector)
    if len(codes) != 1:
        raise UnknownRuleError(f"{selector!r} names {len(codes)} rules, not one")
    (code,) = codes
    return next(rule for rule in all_rules() if rule.code == code)


def selected_codes(
    select: Iterable[str] | None = None,
    ignore: Iterable[str] = (),
    extend_select: Iterable[str] = (),
) -> frozenset[str]:
    """Resolve select / extend-select / ignore into the set of enabled codes (ignore wins)."""
    return _selected_codes(tuple(select or ()), tuple(ignore), tuple(extend_select))


@functools.lru_cache(maxsize=256)  # asked once per checked file, mostly with the same selectors
def _selected_codes(select: tuple[str, ...], ignore: tuple[str, ...], extend_select: tuple[str, ...]) -> frozenset[str]:
    if not select:
        enabled = {rule.code for rule in rule_catalog()}
    else:
        enabled = set().union(*(codes_for(s) for s in select))
    for selector in extend_select:
        enabled |= codes_for(selector)
    for selector in ignore:
        enabled -= codes_for(selector)
    return frozenset(enabled)
