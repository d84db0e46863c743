"""A warm run (an unchanged tree, the cache filled) reads and hashes each file once, and still
misses the cache when a file a result depends on changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst
import pytest

import dplint.cache
import dplint.runner
from conftest import FIXTURES
from dplint.config import Settings

PROJECT = FIXTURES / "attribute-through-wrapper" / "project_factory_always_wraps"  # probe.py reads nets.py


@pytest.fixture(autouse=True)
def pinned_code_fingerprint(monkeypatch):
    monkeypatch.setattr(dplint.cache, "code_fingerprint", lambda: "pinned")


@pytest.fixture
def project(tmp_path) -> Path:
    folder = tmp_path / "project"
    shutil.copytree(PROJECT, folder)
    (folder / "expected.txt").unlink()
    return folder


@pytest.fixture
def counted(monkeypatch) -> dict[str, list]:
    """The files hashed (as bytes) and the texts LibCST parses in this process (runs use jobs=1)."""
    calls: dict[str, list] = {"hashed": [], "parsed": []}
    real_hash, real_parse = dplint.cache.content_key, libcst.parse_module

    def hashing(raw):
        calls["hashed"].append(raw)
        return real_hash(raw)

    def parsing(source, *args, **kwargs):
        calls["parsed"].append(source)
        return real_parse(source, *args, **kwargs)

    monkeypatch.setattr(dplint.cache, "content_key", hashing)
    monkeypatch.setattr(dplint.runner, "content_key", hashing)
    monkeypatch.setattr(libcst, "parse_module", parsing)
    return calls


def check(folder: Path, cache: Path) -> list[str]:
    report = dplint.runner.run([str(folder)], Settings(root=str(folder)), jobs=1, cache_dir=str(cache))
    assert not report.errors, report.errors
    return [f"{Path(f.filename).name}:{f.location.row}: {f.code}" for f in report.findings]


def test_a_warm_run_hashes_each_file_once_and_parses_none(project, tmp_path, counted):
    cold = check(project, tmp_path / "cache")
    assert cold == ["probe.py:8: DPL015"]
    counted["hashed"].clear()
    counted["parsed"].clear()
    assert check(project, tmp_path / "cache") == cold
    assert counted["parsed"] == []
    files = sorted(path.read_bytes() for path in project.glob("*.py"))
    assert sorted(counted["hashed"]) == files  # nets.py once, though probe.py's result depends on it


def test_a_changed_dependency_misses_the_cache(project, tmp_path):
    assert check(project, tmp_path / "cache") == ["probe.py:8: DPL015"]
    nets = project / "nets.py"
    nets.write_text(nets.read_text().replace("    net = torch.nn.DataParallel(net)\n", ""))
    assert check(project, tmp_path / "cache") == []  # probe.py's finding came from nets.py's wrapping


def test_a_dependency_outside_the_run_is_checked_too(project, tmp_path):
    """A file checked alone may depend on files of its project the run does not check."""
    probe = project / "probe.py"
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\n")  # the project root above probe.py
    first = dplint.runner.run([str(probe)], Settings(root=str(project)), jobs=1, cache_dir=str(tmp_path / "cache"))
    assert [f.code for f in first.findings] == ["DPL015"]
    nets = project / "nets.py"
    nets.write_text(nets.read_text().replace("    net = torch.nn.DataParallel(net)\n", ""))
    again = dplint.runner.run([str(probe)], Settings(root=str(project)), jobs=1, cache_dir=str(tmp_path / "cache"))
    assert again.findings == []


# ------------------------------------------------------------------ the rule catalog
@pytest.fixture
def fresh_catalog(monkeypatch):
    """`rule_catalog` computed anew, with no stored catalog unless the test names one."""
    import dplint.registry

    monkeypatch.setattr(dplint.registry, "_CATALOG_FILE", None)
    dplint.registry.rule_catalog.cache_clear()
    yield dplint.registry
    dplint.registry.rule_catalog.cache_clear()


def test_the_catalog_is_stored_and_read_back_without_reading_the_rules(fresh_catalog, tmp_path, monkeypatch):
    registry = fresh_catalog
    read = registry.rule_catalog()
    path = str(tmp_path / "catalog.json")
    registry.store_catalog(path)
    registry.keep_catalog_in(path)
    registry.rule_catalog.cache_clear()
    monkeypatch.setattr(registry, "_literal_entries", lambda path: pytest.fail("read a rule module"))
    assert registry.rule_catalog() == read


@pytest.mark.parametrize("damage", ["", "{", '[["DPL001", 7, []]]', '[["DPL001"]]', "[]", '[["DPL001", "x", [3]]]'])
def test_a_damaged_catalog_is_read_again_from_the_rules(fresh_catalog, tmp_path, damage):
    registry = fresh_catalog
    read = registry.rule_catalog()
    path = tmp_path / "catalog.json"
    path.write_text(damage)
    registry.keep_catalog_in(str(path))
    registry.rule_catalog.cache_clear()
    assert registry.rule_catalog() == read


def test_a_run_with_a_cache_stores_the_catalog_for_this_code(project, tmp_path, fresh_catalog):
    check(project, tmp_path / "cache")
    stored = dplint.cache.catalog_file(str(tmp_path / "cache"))
    assert fresh_catalog._stored_catalog(stored) == fresh_catalog.rule_catalog()


# ------------------------------------------------------------------ packs
@pytest.fixture
def packed(monkeypatch):
    """Packs for runs of any size; counts the file entries read."""
    monkeypatch.setattr(dplint.cache, "PACK_MIN_FILES", 1)
    reads: list[str] = []
    real = dplint.cache.Cache._read

    def reading(self, absolute):
        reads.append(absolute)
        return real(self, absolute)

    monkeypatch.setattr(dplint.cache.Cache, "_read", reading)
    return reads


def run_with(folder: Path, cache: Path, **settings) -> list[str]:
    report = dplint.runner.run([str(folder)], Settings(root=str(folder), **settings), jobs=1, cache_dir=str(cache))
    assert not report.errors, report.errors
    return [f"{Path(f.filename).name}:{f.location.row}: {f.code}" for f in report.findings]


def test_a_warm_run_reads_its_pack_not_the_file_entries(project, tmp_path, packed, counted):
    cold = run_with(project, tmp_path / "cache")
    packed.clear()
    counted["parsed"].clear()
    assert run_with(project, tmp_path / "cache") == cold
    assert packed == [] and counted["parsed"] == []
    assert len(list((tmp_path / "cache").glob("*/runs/*.json"))) == 1


def test_a_pack_from_other_settings_falls_back_to_the_file_entries(project, tmp_path, packed, counted):
    cache = tmp_path / "cache"
    everything = run_with(project, cache)
    assert run_with(project, cache, ignore=("DPL015",)) == []  # its own pack replaces the first
    counted["parsed"].clear()
    assert run_with(project, cache) == everything  # from the file entries: both rule sets are there
    assert run_with(project, cache, ignore=("DPL015",)) == []
    assert counted["parsed"] == []


def test_an_edited_file_is_not_answered_by_the_pack(project, tmp_path, packed):
    cache = tmp_path / "cache"
    assert run_with(project, cache) == ["probe.py:8: DPL015"]
    probe = project / "probe.py"
    probe.write_text(probe.read_text().replace("inner.body", "inner.module.body"))
    assert run_with(project, cache) == []
    nets = project / "nets.py"  # and a dependency of a file the pack holds
    probe.write_text((PROJECT / "probe.py").read_text())
    assert run_with(project, cache) == ["probe.py:8: DPL015"]
    nets.write_text(nets.read_text().replace("    net = torch.nn.DataParallel(net)\n", ""))
    assert run_with(project, cache) == []


@pytest.mark.parametrize("damage", ["", "{", '{"entries": []}', '{"entries": {"x": 1}}', "[1]"])
def test_a_damaged_pack_is_ignored(project, tmp_path, packed, damage):
    cache = tmp_path / "cache"
    cold = run_with(project, cache)
    for pack in cache.glob("*/runs/*.json"):
        pack.write_text(damage)
    assert run_with(project, cache) == cold
    assert run_with(project, cache) == cold
