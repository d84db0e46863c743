"""A file named alone (as pre-commit names the staged files) gets the findings the folder run
gets for it: over every fixture project, the findings of all its files' single-file runs are
those of the folder run, except what only linking files can show (`check_project`: a
checkpoint saved in one file and loaded in another), which needs both files in the run."""

from __future__ import annotations

import os
import shutil

import pytest

from conftest import FIXTURES

PROJECTS = sorted(p for rule in FIXTURES.iterdir() if rule.is_dir() for p in rule.iterdir()
                  if p.is_dir() and p.name.startswith("project_"))


def _findings(paths, linked=True) -> set:
    from dplint import runner
    from dplint.config import Settings

    link = runner.add_project_findings
    if not linked:
        runner.add_project_findings = lambda *args, **kwargs: None
    try:
        return {(os.path.abspath(f.filename), f.location.row, f.location.column, f.code)
                for f in runner.run(paths, Settings(), jobs=1).findings}
    finally:
        runner.add_project_findings = link


def test_there_are_fixture_projects():
    assert len(PROJECTS) >= 50


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_single_file_runs_find_what_the_folder_run_finds(tmp_path, monkeypatch, project):
    copy = tmp_path / project.name
    shutil.copytree(project, copy)
    (copy / "pyproject.toml").write_text('[project]\nname = "x"\n')  # the root both runs use
    monkeypatch.chdir(copy)
    files = sorted(os.path.relpath(os.path.join(folder, name)) for folder, _, names in os.walk(".")
                   for name in names if name.endswith(".py"))
    alone = set().union(*(_findings([name]) for name in files))
    folder = _findings(["."])
    assert _findings(["."], linked=False) <= alone  # each file's own analysis, done alone
    assert alone <= folder  # nothing the folder run would not say
    missed_alone = folder - alone  # only a run holding both files can show these
    assert {code for *_, code in missed_alone} <= {"DPL004"}
