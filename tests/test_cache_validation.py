"""A cache file of the wrong shape (valid JSON, wrong structure) is a cache miss: the next run
gives the findings and exit code of a cold run, never a crash and never fewer findings.

Each test fills a cache with a real `dplint check` over fixture scripts, damages the files
that run wrote, and runs again (twice: the damaged run, and the one after it)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import dplint.cache
import dplint.cli
import dplint.registry
from conftest import FIXTURES


@pytest.fixture(autouse=True)
def pinned_code_fingerprint(monkeypatch):
    """One version folder for the whole test, though other files of dplint change meanwhile."""
    monkeypatch.setattr(dplint.cache, "code_fingerprint", lambda: "pinned")


@pytest.fixture(autouse=True)
def fresh_catalog(monkeypatch):
    """Each run reads the rule catalog anew, as a new process would."""
    monkeypatch.setattr(dplint.registry, "_CATALOG_FILE", None)
    dplint.registry.rule_catalog.cache_clear()
    dplint.registry._selected_codes.cache_clear()
    yield
    dplint.registry.rule_catalog.cache_clear()
    dplint.registry._selected_codes.cache_clear()


# A project whose checkpoint saved by one file is loaded by another (a project-wide DPL004),
# and single scripts with findings of several rules (some with fixes).
PROJECT = FIXTURES / "strip-module" / "project_saver_helper"
SCRIPTS = [
    FIXTURES / "attribute-through-wrapper" / "bad_trainer_attribute.py",
    FIXTURES / "sampler-shuffle" / "bad_ddp_shuffle_true.py",
    FIXTURES / "save-wrapped-state-dict" / "bad_dp_save_best.py",
]
MORE_SCRIPTS = sorted(FIXTURES.glob("strip-module/bad_*.py")) + sorted(FIXTURES.glob("wrapper-train/bad_*.py"))


def make_tree(folder: Path, scripts: list[Path]) -> Path:
    shutil.copytree(PROJECT, folder)
    (folder / "expected.txt").unlink()
    for index, script in enumerate(scripts):
        shutil.copyfile(script, folder / f"s{index}_{script.name}")
    return folder


def dplint_check(tree: Path, cache: Path) -> tuple[int, list[dict]]:
    dplint.registry.rule_catalog.cache_clear()
    dplint.registry._selected_codes.cache_clear()
    result = CliRunner().invoke(
        dplint.cli.main, ["check", str(tree), "--cache-dir", str(cache), "--output-format", "json", "--jobs", "1"]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


# ---------------------------------------------------------------------------- damage
def each_result(entry: dict):
    for result in entry["results"].values():
        yield result


def each_finding(entry: dict):
    for result in each_result(entry):
        yield from result["findings"]


def set_in_findings(key: str, value):
    def damage(entry):
        for finding in each_finding(entry):
            finding[key] = value
        return entry

    return damage


def set_in_results(key: str, value):
    def damage(entry):
        for result in each_result(entry):
            result[key] = value
        return entry

    return damage


def without_field(key: str):
    def damage(entry):
        for finding in each_finding(entry):
            finding.pop(key, None)
        return entry

    return damage


def row_as_text(entry):
    for finding in each_finding(entry):
        finding["location"]["row"] = str(finding["location"]["row"])
    return entry


def fix_without_edits(entry):
    for finding in each_finding(entry):
        if finding.get("fix"):
            del finding["fix"]["edits"]
    return entry


def set_entry(key: str, value):
    def damage(entry):
        entry[key] = value
        return entry

    return damage


ENTRY_DAMAGE = {
    "entry is a list": lambda entry: [entry],
    "results is a list": lambda entry: set_entry("results", list(entry["results"].values()))(entry),
    "a result is a list": lambda entry: set_entry("results", {key: [1] for key in entry["results"]})(entry),
    "hash is a number": set_entry("hash", 7),
    "findings cut": set_in_results("findings", []),
    "findings is a dict": set_in_results("findings", {"0": {}}),
    "findings is text": set_in_results("findings", "DPL004"),
    "facts is a list": set_in_results("facts", [1]),
    "facts is junk": set_in_results("facts", {"DPL004": {"saves": 3}}),
    "deps is a list": set_in_results("deps", ["x"]),
    "a finding lacks its message": without_field("message"),
    "a finding lacks its location": without_field("location"),
    "a row is text": row_as_text,
    "a message is a number": set_in_findings("message", 7),
    "a severity is unknown": set_in_findings("severity", "fatal"),
    "a filename is a list": set_in_findings("filename", ["x"]),
    "a fix is a list": set_in_findings("fix", [1]),
    "a fix lost its edits": fix_without_edits,
    "a finding elsewhere is a number": set_in_findings("elsewhere", 3),
}


def rewrite(path: Path, damage) -> None:
    path.write_text(json.dumps(damage(json.loads(path.read_text()))))


def damaged_run_matches_a_cold_one(tree: Path, cache: Path, damaged: list[Path], damage) -> None:
    cold = dplint_check(tree, cache)
    assert cold[0] == 1 and cold[1], cold  # findings, some of them project-wide
    assert damaged, "the run wrote no file of this kind"
    for path in damaged:
        rewrite(path, damage)
    assert dplint_check(tree, cache) == cold
    assert dplint_check(tree, cache) == cold  # and the run after it (the damage may have been kept)


@pytest.mark.parametrize("damage", ENTRY_DAMAGE.values(), ids=ENTRY_DAMAGE.keys())
def test_a_damaged_file_entry_is_a_cache_miss(tmp_path, damage):
    tree = make_tree(tmp_path / "tree", SCRIPTS)  # a small run: one entry file per checked file
    cache = tmp_path / "cache"
    dplint_check(tree, cache)
    entries = sorted(cache.glob("*/files/*/*.json"))
    assert len(entries) == len(list(tree.glob("*.py")))
    originals = {path: path.read_text() for path in entries}
    cold = dplint_check(tree, cache)
    assert {path: path.read_text() for path in entries} == originals  # warm: nothing rewritten
    for path in entries:
        rewrite(path, damage)
    assert dplint_check(tree, cache) == cold
    assert dplint_check(tree, cache) == cold


def damage_every_entry(damage):
    def in_pack(pack):
        pack["entries"] = {path: damage(copy.deepcopy(entry)) for path, entry in pack["entries"].items()}
        return pack

    return in_pack


PACK_DAMAGE = {name: damage_every_entry(damage) for name, damage in ENTRY_DAMAGE.items()} | {
    "entries is a list": lambda pack: set_entry("entries", list(pack["entries"].values()))(pack),
    "an entry under another path": lambda pack: set_entry(
        "entries", dict(zip(sorted(pack["entries"]), reversed([pack["entries"][p] for p in sorted(pack["entries"])])))
    )(pack),
    "pack is a list": lambda pack: [pack],
}


@pytest.mark.parametrize("damage", PACK_DAMAGE.values(), ids=PACK_DAMAGE.keys())
def test_a_damaged_pack_is_a_cache_miss(tmp_path, damage):
    tree = make_tree(tmp_path / "tree", SCRIPTS + MORE_SCRIPTS)  # a large run: its entries in one pack
    assert len(list(tree.glob("*.py"))) >= dplint.cache.PACK_MIN_FILES
    cache = tmp_path / "cache"
    dplint_check(tree, cache)
    assert not list(cache.glob("*/files/*/*.json"))
    damaged_run_matches_a_cold_one(tree, cache, sorted(cache.glob("*/runs/*.json")), damage)


PROJECT_DAMAGE = {
    "findings cut": set_entry("findings", []),
    "findings is a dict": set_entry("findings", {}),
    "a row is text": lambda entry: {"findings": [dict(f, location={"row": "1", "column": 1}) for f in entry["findings"]]},
    "a finding lacks its code": lambda entry: {"findings": [{k: v for k, v in f.items() if k != "code"} for f in entry["findings"]]},
    "entry is a list": lambda entry: [entry],
}


@pytest.mark.parametrize("damage", PROJECT_DAMAGE.values(), ids=PROJECT_DAMAGE.keys())
def test_a_damaged_project_entry_is_a_cache_miss(tmp_path, damage):
    tree = make_tree(tmp_path / "tree", SCRIPTS)
    cache = tmp_path / "cache"
    dplint_check(tree, cache)
    project = sorted(cache.glob("*/project/*.json"))
    assert [json.loads(path.read_text())["findings"] != [] for path in project] == [True]
    damaged_run_matches_a_cold_one(tree, cache, project, damage)


# ---------------------------------------------------------------------------- the rule catalog
CATALOG_DAMAGE = {
    "cut to one rule": lambda catalog: catalog[:1] if isinstance(catalog, list) else cut_to_one_module(catalog),
    "a list": lambda catalog: list(catalog.values())[:1] if isinstance(catalog, dict) else catalog[:1],
    "empty": lambda catalog: {},
}


def cut_to_one_module(catalog: dict) -> dict:
    modules = catalog["modules"]
    first = sorted(module for module in modules if modules[module])[0]
    return dict(catalog, modules={first: modules[first]})


@pytest.mark.parametrize("damage", CATALOG_DAMAGE.values(), ids=CATALOG_DAMAGE.keys())
def test_a_catalog_that_lacks_rules_is_rebuilt(tmp_path, damage):
    tree = make_tree(tmp_path / "tree", SCRIPTS)
    cache = tmp_path / "cache"
    cold = dplint_check(tree, cache)
    catalog = Path(dplint.cache.catalog_file(str(cache)))
    whole = json.loads(catalog.read_text())
    rewrite(catalog, damage)
    (tree / "s0_bad_trainer_attribute.py").write_text((tree / "s0_bad_trainer_attribute.py").read_text() + "\n")
    assert dplint_check(tree, cache) == cold  # every rule ran on the changed file, not the one left listed
    assert json.loads(catalog.read_text()) == whole  # written again whole for the next run
    dplint.registry.keep_catalog_in(str(catalog))
    dplint.registry.rule_catalog.cache_clear()
    assert {entry.code for entry in dplint.registry.rule_catalog()} == {rule.code for rule in dplint.registry.all_rules()}
