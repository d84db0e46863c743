"""The cache per file and per rule set: several settings side by side, `fix` served from it,
bounded in size, safe when runs share it at once."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import libcst
import pytest

import dplint.cache
import dplint.runner
from conftest import FIXTURES, MISUSE
from dplint.cache import Cache, rule_set_key
from dplint.config import Settings
from dplint.reports import FileReport
from dplint.rule import finding_to_dict
from dplint.runner import FixOptions


@pytest.fixture(autouse=True)
def pinned_code_fingerprint(monkeypatch):
    monkeypatch.setattr(dplint.cache, "code_fingerprint", lambda: "pinned")


@pytest.fixture
def parsed(monkeypatch) -> list[str]:
    """The files LibCST parses in this process (runs use jobs=1), by their first line."""
    calls: list[str] = []
    real = libcst.parse_module

    def counting(source, *args, **kwargs):
        calls.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(libcst, "parse_module", counting)
    return calls


@pytest.fixture
def tree(tmp_path) -> Path:
    """Realistic scripts: some with a safe fix, some with findings but no safe fix, clean ones."""
    folder = tmp_path / "tree"
    for script in sorted(FIXTURES.glob("*/bad_*.py"))[:12] + sorted((FIXTURES / "clean").glob("*.py")):
        target = folder / script.parent.name / script.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(script, target)
    (folder / "misuse.py").write_text(MISUSE)
    return folder


def run(tree: Path, cache: Path, fix=None, **settings):
    report = dplint.runner.run([str(tree)], Settings(root=str(tree), **settings), fix=fix, jobs=1, cache_dir=str(cache))
    assert not report.errors, report.errors
    return report


def as_dicts(findings) -> list[dict]:
    return [finding_to_dict(f) for f in findings]


def snapshot(tree: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in sorted(tree.rglob("*.py"))}


# ---------------------------------------------------------------------------- fix uses the cache
def test_fix_after_check_parses_only_the_files_it_fixes(tree, tmp_path, parsed):
    cache = tmp_path / "cache"
    checked = run(tree, cache)
    safe = FixOptions()
    fixable = {f.filename for f in checked.findings if dplint.runner.wants_fix(f, safe)}
    assert fixable and len(fixable) < len(checked.files)
    parsed.clear()
    fixed = run(tree, cache, fix=safe)
    assert {r.path for r in fixed.files if r.applied} == fixable
    assert len(parsed) >= len(fixable)
    unfixable = [r.path for r in fixed.files if r.path not in fixable]
    assert not any(Path(path).read_text() in parsed for path in unfixable)  # never parsed
    parsed.clear()
    again = run(tree, cache, fix=safe)  # the fixed files were cached as written
    assert parsed == [] and not again.applied
    parsed.clear()
    assert as_dicts(run(tree, cache).findings) == as_dicts(again.findings)
    assert parsed == []
    uncached = dplint.runner.run([str(tree)], Settings(root=str(tree)), jobs=1)
    assert as_dicts(uncached.findings) == as_dicts(again.findings)


def test_fix_diff_after_check_is_served_from_the_cache_and_writes_nothing(tree, tmp_path, parsed):
    cache = tmp_path / "cache"
    before = snapshot(tree)
    run(tree, cache)
    expected = dplint.runner.run([str(tree)], Settings(root=str(tree)), fix=FixOptions(write=False), jobs=1)
    parsed.clear()
    diff = run(tree, cache, fix=FixOptions(write=False))
    assert [r.diff for r in diff.files] == [r.diff for r in expected.files]
    assert snapshot(tree) == before
    changed = [r for r in diff.files if r.diff]
    assert changed and len(changed) < len(diff.files)
    parsed.clear()
    run(tree, cache)  # --diff cached nothing of the fixed texts: the check is still warm
    assert parsed == []


def test_unsafe_and_rule_limited_fixes_look_at_the_cached_applicability(tree, tmp_path, parsed):
    cache = tmp_path / "cache"
    run(tree, cache)
    parsed.clear()
    run(tree, cache, fix=FixOptions(write=False, only_codes=frozenset({"DPL100"})))  # no DPL100 in the tree
    assert parsed == []


# ---------------------------------------------------------------------------- keys and bounds
def test_dependency_fingerprint_is_part_of_the_rule_set(tmp_path):
    cache = Cache(str(tmp_path / "cache"))
    path = str(tmp_path / "a.py")
    plain, with_deps = rule_set_key({"DPL004", "DPL001"}), rule_set_key({"DPL001", "DPL004"}, "deps-1")
    assert plain == "DPL001,DPL004" and with_deps == "DPL001,DPL004|deps-1"
    cache.put(path, "content", with_deps, FileReport(path))
    assert cache.get(path, "content", with_deps) is not None
    assert cache.get(path, "content", plain) is None
    assert cache.get(path, "content", rule_set_key({"DPL001", "DPL004"}, "deps-2")) is None
    assert Cache(str(tmp_path / "cache")).get(path, "content", with_deps) is not None  # on disk


def test_rule_sets_per_file_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(dplint.cache, "MAX_RULE_SETS", 2)
    path = str(tmp_path / "a.py")
    cache = Cache(str(tmp_path / "cache"))
    for rules in ("A", "B", "C"):
        cache.put(path, "content", rules, FileReport(path))
    fresh = Cache(str(tmp_path / "cache"))
    assert [fresh.get(path, "content", rules) is not None for rules in ("A", "B", "C")] == [False, True, True]
    fresh.put(path, "edited", "C", FileReport(path))  # new content: the old results go
    assert Cache(str(tmp_path / "cache")).get(path, "content", "B") is None


def test_entries_and_versions_are_bounded(tree, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(dplint.cache, "MAX_ENTRIES", 5)
    run(tree, cache)
    assert len(list(cache.glob("*/files/*/*.json"))) <= 5
    for version in range(5):
        monkeypatch.setattr(dplint.cache, "code_fingerprint", lambda version=version: f"v{version}")
        run(tree, cache)
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == ["0.1.0-v2", "0.1.0-v3", "0.1.0-v4"][-dplint.cache.KEEP_VERSIONS:]
    assert (cache / ".gitignore").read_text() == "*\n"


def test_concurrent_runs_with_other_settings_share_the_cache(tree, tmp_path):
    """Several processes check the tree at once, each with its own rules, twice; every run
    reports what a run without the cache reports, and nothing is left half-written."""
    cache = tmp_path / "cache"
    selections = ["ALL", "DPL00", "DPL004,DPL006", "DPL007,DPL100", "DPL01"]

    def command(select: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "dplint", "check", "-j", "1", "--output-format", "concise", "--select", select, *extra, str(tree)]

    expected = {s: subprocess.run(command(s, "--no-cache"), capture_output=True, timeout=300).stdout for s in selections}
    for _ in range(2):
        processes = {s: subprocess.Popen(command(s, "--cache-dir", str(cache)), stdout=subprocess.PIPE) for s in selections}
        for select, process in processes.items():
            output, _ = process.communicate(timeout=300)
            assert output == expected[select], select
    assert not list(cache.rglob("*.tmp"))


@pytest.mark.parametrize("project", ["unguarded-rank-save/project_helper_in_another_file",
                                     "strip-module/project_reload_through_helper"])
def test_a_finding_placed_in_another_file_stays_there_when_served_from_the_cache(tmp_path, project):
    """The analysis of one file may report in a file it imports from; the cached result of the
    first file must name the second, as the cold run did."""
    folder = tmp_path / "project"
    shutil.copytree(FIXTURES / project, folder)
    (folder / "expected.txt").unlink()
    cold = run(folder, tmp_path / "cache")
    warm = run(folder, tmp_path / "cache")
    placed = lambda report: sorted((f.filename, f.code, f.location.row) for f in report.findings)
    assert placed(cold) and placed(warm) == placed(cold)
