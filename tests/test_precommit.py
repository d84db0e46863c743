"""The pre-commit hooks, for real: the `pre-commit` package installs dplint from this checkout
into its own environment (pip, from the package index) and runs it on `git commit`.

The hook repository is this checkout at HEAD when its working tree is clean (CI's fresh clone);
otherwise a snapshot commit of the working tree, so that a developer tests what is on disk.
The `.pre-commit-config.yaml` is the snippet the documentation shows, with `repo` and `rev`
pointed at that repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

DOCS = (ROOT / "README.md", ROOT / "docs" / "ci.md")  # where the snippet lives (README after a merge)

# Environment for git and pre-commit: no user or system git configuration (hooksPath, signing),
# a private PRE_COMMIT_HOME (set per test session below).
GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "dplint tests",
    "GIT_AUTHOR_EMAIL": "tests@dplint.invalid",
    "GIT_COMMITTER_NAME": "dplint tests",
    "GIT_COMMITTER_EMAIL": "tests@dplint.invalid",
}

MISUSE = (
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "\n"
    "sampler = DistributedSampler(dataset)\n"
    "loader = DataLoader(dataset, batch_size=8, shuffle=True, sampler=sampler)\n"
)
MISUSE_FIXED = (
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "\n"
    "sampler = DistributedSampler(dataset)\n"
    "loader = DataLoader(dataset, batch_size=8, sampler=sampler)\n"
)


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, timeout=120)


def documented_config() -> str:
    """The `.pre-commit-config.yaml` snippet of the documentation."""
    for doc in DOCS:
        if doc.exists():
            for block in re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S):
                if "id: dplint" in block and "repos:" in block:
                    return block
    raise AssertionError(f"no pre-commit snippet in {', '.join(str(doc) for doc in DOCS)}")


def hook_repository(scratch: Path) -> tuple[str, str]:
    """(repo, rev) for the pre-commit configuration."""
    status = git("status", "--porcelain", cwd=ROOT)
    assert status.returncode == 0, status.stderr
    if not status.stdout.strip():
        return str(ROOT), git("rev-parse", "HEAD", cwd=ROOT).stdout.strip()
    snapshot = scratch / "dplint-snapshot"
    listed = git("ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=ROOT).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, snapshot / name)
    for args in (("init", "-q"), ("add", "-A"), ("commit", "-q", "-m", "snapshot of the working tree")):
        result = git(*args, cwd=snapshot)
        assert result.returncode == 0, result.stderr
    return str(snapshot), git("rev-parse", "HEAD", cwd=snapshot).stdout.strip()


@pytest.fixture(scope="module")
def hooks(tmp_path_factory):
    """A function making a fresh git project with the documented hook configuration (the given
    hook id instead of `dplint` when asked), the hooks installed; pre-commit's environment is
    built once for the module."""
    scratch = tmp_path_factory.mktemp("precommit")
    repo, rev = hook_repository(scratch)
    env = {**GIT_ENV, "PRE_COMMIT_HOME": str(scratch / "pre-commit-home")}
    snippet = documented_config()
    parsed = yaml.safe_load(snippet)
    assert [hook["id"] for hook in parsed["repos"][0]["hooks"]] == ["dplint"]
    counter = iter(range(100))

    def make_project(hook_id: str = "dplint") -> tuple[Path, dict]:
        project = scratch / f"project{next(counter)}"
        project.mkdir()
        config = re.sub(r"(?m)^(\s*- repo:).*$", rf"\1 {repo}", snippet)
        config = re.sub(r"(?m)^(\s*rev:).*$", rf"\1 {rev}", config)
        config = re.sub(r"(?m)^(\s*- id:) dplint$", rf"\1 {hook_id}", config)
        assert yaml.safe_load(config)["repos"][0] == {"repo": repo, "rev": rev, "hooks": [{"id": hook_id}]}
        (project / ".pre-commit-config.yaml").write_text(config)
        assert git("init", "-q", cwd=project).returncode == 0
        installed = subprocess.run(
            [sys.executable, "-m", "pre_commit", "install"], cwd=project, env=env, capture_output=True, text=True, timeout=120
        )
        assert installed.returncode == 0, installed.stdout + installed.stderr
        return project, env

    return make_project


def commit(project: Path, env: dict, message: str) -> subprocess.CompletedProcess:
    git("add", "-A", cwd=project)
    return subprocess.run(["git", "commit", "-m", message], cwd=project, env=env, capture_output=True, text=True, timeout=900)


def commit_count(project: Path) -> int:
    result = git("rev-list", "--count", "HEAD", cwd=project)
    return int(result.stdout) if result.returncode == 0 else 0


@pytest.mark.slow  # pre-commit pip-installs dplint into its own environment (once per module)
def test_check_hook_blocks_a_misusing_commit_and_lets_a_clean_one_through(hooks):
    project, env = hooks()
    (project / "train.py").write_text(MISUSE)
    blocked = commit(project, env, "misuse")
    output = blocked.stdout + blocked.stderr
    assert blocked.returncode == 1, output
    assert "train.py:4:44: DPL007 error [*] DataLoader gets a sampler and a true `shuffle`" in output
    assert commit_count(project) == 0
    assert (project / "train.py").read_text() == MISUSE  # the check hook changes nothing

    (project / "train.py").write_text((ROOT / "fixtures" / "clean" / "ddp_train.py").read_text())
    passed = commit(project, env, "clean")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert commit_count(project) == 1

    # `exclude` in [tool.dplint] holds for the files pre-commit names (--force-exclude).
    (project / "pyproject.toml").write_text('[tool.dplint]\nexclude = ["legacy/*"]\n')
    (project / "legacy").mkdir()
    (project / "legacy" / "old_train.py").write_text(MISUSE)
    passed = commit(project, env, "legacy code, excluded")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert commit_count(project) == 2


@pytest.mark.slow  # pre-commit pip-installs dplint into its own environment (once per module)
def test_fix_hook_fixes_the_file_and_stops_the_commit(hooks):
    project, env = hooks("dplint-fix")
    (project / "train.py").write_text(MISUSE)
    blocked = commit(project, env, "misuse")
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert "files were modified by this hook" in blocked.stdout + blocked.stderr
    assert (project / "train.py").read_text() == MISUSE_FIXED
    assert commit_count(project) == 0
    passed = commit(project, env, "fixed")  # the fixed file, staged again
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert commit_count(project) == 1


def test_local_hook_snippet_works_as_written_and_fail_on_lets_info_through(tmp_path):
    """The `repo: local` snippet, copied as it is, with dplint installed where `git commit` runs;
    `args: [--fail-on, error]` (as the README says) lets a commit with an info finding through."""
    doc = next(doc for doc in DOCS if doc.exists())
    snippet = next(b for b in re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S) if "repo: local" in b)
    env = {
        **GIT_ENV,
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    }
    project = tmp_path / "project"
    project.mkdir()
    (project / ".pre-commit-config.yaml").write_text(snippet)
    assert git("init", "-q", cwd=project).returncode == 0
    installed = subprocess.run(
        [sys.executable, "-m", "pre_commit", "install"], cwd=project, env=env, capture_output=True, text=True, timeout=120
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    (project / "train.py").write_text(MISUSE)
    blocked = commit(project, env, "misuse")
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert "train.py:4:44: DPL007 error [*] " in blocked.stdout + blocked.stderr
    (project / "train.py").write_text(MISUSE_FIXED + "steps = 10  # noqa: DPL999\n")  # an info finding only
    assert commit(project, env, "info").returncode == 1  # default: any finding blocks
    (project / ".pre-commit-config.yaml").write_text(
        re.sub(r"(?m)^(\s*)- id: dplint$", r"\1- id: dplint\n\1  args: [--fail-on, error]", snippet)
    )
    passed = commit(project, env, "info, failing on errors only")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert commit_count(project) == 1
