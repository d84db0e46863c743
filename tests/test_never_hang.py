"""dplint must return on every input, within a bound: the single-file loop of issue 27 (a word
search for the empty name of `/__init__.py`, reached when a rule asked for a function's
callers on a run naming one file), the per-file analysis budget (DPL099), and the text
searches of the project layer. Every run here has a deadline, so that a hang fails fast
instead of stalling the suite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from conftest import FIXTURES, ROOT

DEADLINE = 60  # seconds for one run of a small project; a healthy one takes well under one

# A training script whose epoch loop is in a function with parameters: DPL008 asks for that
# function's callers, which on a single-file run searched every project file for its importers.
TRAIN = '''\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
from torch.nn.parallel import DistributedDataParallel as DDP


def train(model, loader, sampler, epochs):
    for epoch in range(epochs):
        for x, y in loader:
            loss = model(x).sum()
            loss.backward()


def main():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(2, 2))
    ds = torch.utils.data.TensorDataset(torch.zeros(4, 2), torch.zeros(4))
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, sampler=sampler)
    train(model, loader, sampler, 3)


if __name__ == "__main__":
    main()
'''
TRAIN_FINDING = "train.py:18:15: DPL008"

# How the project's other files may start: the loop needed one starting with a word character.
OTHER_FILE_STARTS = {
    "import": "import torch\nfrom torch import nn\nm = nn.Linear(2, 2)\n",
    "docstring": '"""Helpers."""\nimport torch\n',
    "comment": "# helpers\nimport torch\n",
    "bom": "\ufeffimport torch\n",
    "empty": "",
}
MARKERS = {"pyproject": ("pyproject.toml", '[project]\nname = "x"\n'), "git": (".git", None), "none": (None, None)}


def run_dplint(args: list[str], cwd: Path, timeout: float = DEADLINE) -> subprocess.CompletedProcess:
    """The real command; a run past `timeout` fails the test (TimeoutExpired) instead of hanging.
    The per-file budget is far off, so that a hang shows as one and not as DPL099."""
    return subprocess.run([sys.executable, "-m", "dplint", *args, "--config", "analysis-timeout = 1000"],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout)


def make_project(root: Path, start: str, marker: str, nested: bool) -> Path:
    """A project with a helper file starting as `start` and the training script, at the root
    or in a sub-folder; returns the script's path."""
    root.mkdir(parents=True, exist_ok=True)
    name, content = MARKERS[marker]
    if name == ".git":
        (root / ".git").mkdir()
    elif name is not None:
        (root / name).write_text(content)
    (root / "util.py").write_text(OTHER_FILE_STARTS[start], encoding="utf-8")
    folder = root / "scripts" if nested else root
    folder.mkdir(exist_ok=True)
    (folder / "helpers.py").write_text(OTHER_FILE_STARTS[start], encoding="utf-8")
    (folder / "train.py").write_text(TRAIN)
    return folder / "train.py"


@pytest.mark.parametrize("marker", sorted(MARKERS))
@pytest.mark.parametrize("nested", [False, True], ids=["root", "subfolder"])
@pytest.mark.parametrize("start", sorted(OTHER_FILE_STARTS))
def test_a_single_file_of_a_project_is_checked_in_seconds(tmp_path, start, marker, nested):
    script = make_project(tmp_path / "p", start, marker, nested)
    for cwd, named in ((tmp_path / "p", os.path.relpath(script, tmp_path / "p")), (script.parent, "train.py")):
        result = run_dplint(["check", "-n", "--output-format", "concise", named], cwd)
        assert result.returncode == 1, result.stdout + result.stderr
        assert TRAIN_FINDING in result.stdout.replace(os.sep, "/"), result.stdout


def test_a_single_file_run_finds_what_the_folder_run_finds(tmp_path):
    """Over every rule's first bad fixture, each named alone in a project whose other files
    start with `import` (the loop's shape): the findings of that file are the folder run's."""
    project = tmp_path / "p"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (project / "util.py").write_text(OTHER_FILE_STARTS["import"])
    names = []
    for folder in sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name != "clean"):
        bad = sorted(folder.glob("bad_*.py"))
        if bad:
            name = f"{folder.name.replace('-', '_')}__{bad[0].name}"
            (project / name).write_text(bad[0].read_text(encoding="utf-8"), encoding="utf-8")
            names.append(name)
    assert len(names) >= 15
    folder_run = run_dplint(["check", "-n", "--output-format", "concise", "."], project, timeout=300)
    by_file: dict[str, list[str]] = {}
    for line in folder_run.stdout.splitlines():
        match = re.match(r"(?:\./)?([^:]+\.py):\d+:\d+: ", line)
        if match:
            by_file.setdefault(match.group(1), []).append(line.removeprefix("./"))
    assert sum(map(len, by_file.values())) >= 15, folder_run.stdout + folder_run.stderr
    for name in names:
        alone = run_dplint(["check", "-n", "--output-format", "concise", name], project)
        lines = [line for line in alone.stdout.splitlines() if re.match(r"[^:]+\.py:\d+:\d+: ", line)]
        assert "DPL099" not in alone.stdout
        assert lines == by_file.get(name, []), (name, alone.stdout, alone.stderr)


# ------------------------------------------------------------------ the per-file budget
LOOPING_RULE_RUN = '''
import sys, time
from dplint import runner
from dplint.config import Settings
from dplint.registry import all_rules

rule = next(r for r in all_rules() if r.code == "DPL008")
def check(self, model):
    while True:
        pass
    yield
rule.check = check
settings = Settings(analysis_timeout=1.0)
started = time.monotonic()
report = runner.run(sys.argv[1:], settings, jobs=1)
print(f"{time.monotonic() - started:.1f}")
for finding in report.findings:
    print(f"{finding.filename}:{finding.location.row}:{finding.location.column}: {finding.code} {finding.message}")
print("errors", report.errors)
'''


def test_an_analysis_past_its_budget_reports_dpl099_naming_the_rule_and_the_run_goes_on(tmp_path):
    (tmp_path / "a_loops.py").write_text(TRAIN)
    (tmp_path / "b_strips.py").write_text((ROOT / "fixtures" / "strip-module" / "bad_eval_after_dataparallel.py").read_text())
    result = subprocess.run([sys.executable, "-c", LOOPING_RULE_RUN, str(tmp_path / "a_loops.py"), str(tmp_path / "b_strips.py")],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    elapsed, *lines = result.stdout.splitlines()
    assert float(elapsed) < 10, result.stdout  # one budget (1 s) per file at most, plus the grace
    timeouts = [line for line in lines if " DPL099 " in line]
    assert [line.split(":")[0] for line in timeouts] == [str(tmp_path / "a_loops.py")], lines
    assert "analysis stopped after 1 s in DPL008 (missing-set-epoch)" in timeouts[0]
    assert any("b_strips.py:44:" in line and " DPL004 " in line for line in lines), lines  # the other file was checked
    assert lines[-1] == "errors []"


def test_a_timed_out_file_is_not_cached(tmp_path):
    from dplint.reports import TIMEOUT_CODE, FileReport, cacheable
    from dplint.rule import Finding, Position, Severity

    location = Position(1, 1)
    stopped = FileReport("a.py", [Finding(TIMEOUT_CODE, "analysis-timeout", "m", Severity.ERROR, "a.py", location, location)])
    assert not cacheable(stopped)
    assert cacheable(FileReport("a.py"))


def test_the_budget_stops_python_code_and_the_thread_is_not_reused():
    from dplint.source import AnalysisTimeout, call_with_deep_stack

    def spin():
        while True:
            pass

    with pytest.raises(AnalysisTimeout):
        call_with_deep_stack(spin, timeout=0.2)
    assert call_with_deep_stack(lambda: 42, timeout=5) == 42  # a fresh thread serves the next call
    assert call_with_deep_stack(lambda: 7) == 7


def test_the_analysis_timeout_setting_is_read_from_the_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.dplint]\nanalysis-timeout = 2.5\n")
    from dplint.config import load_settings
    from dplint.runner import analysis_timeout

    assert analysis_timeout(load_settings(str(tmp_path))) == 2.5


# ------------------------------------------------------------------ what Python refuses
@pytest.mark.parametrize("depth", [250, 1000, 10000])
def test_nesting_python_refuses_is_dpl000_with_pythons_message_in_a_moment(tmp_path, depth):
    (tmp_path / "deep.py").write_text("import torch\nfrom torch.nn import DataParallel\nmodel = DataParallel(m)\nx = "
                                      + "f(" * depth + "model" + ")" * depth + "\n")
    result = run_dplint(["check", "-n", "--output-format", "concise", "deep.py"], tmp_path, timeout=30)
    assert result.returncode == 1
    assert "deep.py:4:" in result.stdout and "DPL000" in result.stdout, result.stdout
    assert "too many nested parentheses" in result.stdout


DEEP = 10_000
DEEP_SHAPES = {
    "and": " and ".join(["model"] * DEEP), "plus": " + ".join(["model"] * DEEP), "bitor": " | ".join(["model"] * DEEP),
    "power": " ** ".join(["model"] * DEEP), "compare": " < ".join(["model"] * DEEP), "unary": "-~" * (DEEP // 2) + "model",
    "not": "not " * DEEP + "model", "lambda": "lambda: " * DEEP + "model", "ifexp": "model if c else " * DEEP + "model",
    "attribute": "model" + ".module" * DEEP, "calls": "model" + ".f()" * DEEP, "strings": " ".join(['"a"'] * DEEP),
    "tuple": ", ".join(["model"] * DEEP), "dict": "{" + ", ".join(f"'k{i}': model" for i in range(DEEP)) + "}",
    "walrus": "(y := " * 150 + "model" + ")" * 150, "subscript": "model" + "[0]" * DEEP,
}


def test_ten_thousand_levels_of_any_shape_return_in_seconds(tmp_path):
    """Python refuses most of these (its parser's or its compiler's limits): DPL000, at once;
    the rest LibCST parses in a second or two. Before, 12 of the 16 ran past a minute."""
    head = "import torch\nfrom torch.nn import DataParallel\nmodel = DataParallel(torch.nn.Linear(2, 2))\n"
    for name, expression in DEEP_SHAPES.items():
        (tmp_path / f"{name}.py").write_text(f"{head}ok = {expression}\n")
    result = run_dplint(["check", "-n", "--output-format", "concise", "-j", "1", "."], tmp_path, timeout=120)
    assert "internal error" not in result.stdout + result.stderr
    refused = {line.split(".py")[0] for line in result.stdout.splitlines() if " DPL000 " in line}
    assert {"plus", "bitor", "attribute", "calls", "unary", "not", "lambda", "subscript"} <= refused, result.stdout


def test_a_string_escape_python_rejects_is_dpl000_not_an_internal_error(tmp_path):
    (tmp_path / "bad_escape.py").write_text(
        "import torch\nstate = torch.load('c.pt')\nstate = {k.replace(\"module.\\u\", ''): v for k, v in state.items()}\n")
    result = run_dplint(["check", "-n", "--output-format", "concise", "bad_escape.py"], tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "bad_escape.py:3:" in result.stdout and "DPL000 error cannot parse: (unicode error)" in result.stdout
    assert "internal error" not in result.stdout + result.stderr
    assert "All checks passed" not in result.stdout


def test_newer_syntax_that_libcst_knows_is_still_linted():
    """`type X = int` (3.12) is not refused for the Python running dplint being older."""
    from dplint.source import refused_by_every_python

    assert refused_by_every_python("type X = int\n") is None
    assert refused_by_every_python("x = 'a\\u'\n") is not None
    assert refused_by_every_python("x = " + "(" * 300 + "1" + ")" * 300 + "\n") is not None


# ------------------------------------------------------------------ text searches
def _within(seconds: float, function, *args):
    """`function(*args)`, failing the test when it has not returned after `seconds`."""
    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(function(*args)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"{function.__name__}{args!r} did not return within {seconds} s"
    return outcome[0]


def test_a_word_search_refuses_the_empty_name_and_non_identifiers():
    from dplint.project import WholeWords, _whole_word_spans

    text = "import torch\nepoch): a.b 1x my-script  \n"
    for name in ("", "a.b", "1x", "my-script", " ", "epoch):"):
        words = WholeWords((name,))
        assert words.names == ()
        assert _within(2, words.spans, text) == [] and _within(2, words.search, text) is None
    assert WholeWords(("", "torch")).spans(text) == [(7, 12)]
    assert _within(2, lambda: list(_whole_word_spans(text, ""))) == []


identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,3}", fullmatch=True)
texts = st.text(alphabet="ab_x1 .(\n\té", max_size=60)


@hypothesis_settings(max_examples=300, deadline=None)
@given(texts, st.lists(identifiers, min_size=1, max_size=3))
def test_whole_words_finds_what_the_word_bounded_pattern_finds(text, names):
    from dplint.project import WholeWords

    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(set(names), key=len, reverse=True))) + r")\b")
    words = WholeWords(names)
    expected = [match.span() for match in pattern.finditer(text)]
    spans = _within(2, words.spans, text)
    # A longer name and a shorter one can each be whole words at one place only if equal.
    assert sorted(set(spans)) == expected
    assert _within(2, words.search, text) == (expected[0] if expected else None)


@hypothesis_settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(min_size=1, max_size=2))
def test_whole_word_spans_always_advances(text, name):
    from dplint.project import _whole_word_spans

    spans = _within(2, lambda: list(_whole_word_spans(text, name)))
    assert all(start < end for start, end in spans)
    assert [start for start, _ in spans] == sorted({start for start, _ in spans})


# ------------------------------------------------------------------ pre-commit, end to end
def test_git_commit_through_the_local_hook_returns_on_such_a_project(tmp_path):
    from test_precommit import DOCS, GIT_ENV, git

    doc = next(doc for doc in DOCS if doc.exists())
    snippet = next(b for b in re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S) if "repo: local" in b)
    env = {**GIT_ENV, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    project = tmp_path / "project"
    make_project(project, "import", "pyproject", nested=False)
    (project / ".pre-commit-config.yaml").write_text(snippet)
    assert git("init", "-q", cwd=project).returncode == 0
    installed = subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=project, env=env,
                               capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    git("add", "-A", cwd=project)
    blocked = subprocess.run(["git", "commit", "-m", "train"], cwd=project, env=env, capture_output=True, text=True,
                             timeout=DEADLINE)
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert TRAIN_FINDING in blocked.stdout + blocked.stderr


LOOPING_PROJECT_RUN = '''
import sys, time
from dplint import runner
from dplint.config import Settings
from dplint.project import Project

def importer_pieces(self, path):
    while True:
        pass
Project.importer_pieces = importer_pieces
started = time.monotonic()
report = runner.run(sys.argv[1:], Settings(analysis_timeout=1.0), jobs=1)
print(f"{time.monotonic() - started:.1f}")
print(sorted(f.code for f in report.findings))
'''


def test_the_pre_filters_reading_of_the_project_is_within_the_budget_too(tmp_path):
    """A file the pre-filter cannot clear by its own text has its imports' text read first, in
    the runner: a loop there is stopped as one in the analysis is."""
    (tmp_path / "helpers.py").write_text("def go():\n    return 1\n")
    (tmp_path / "main.py").write_text("import helpers\n\nhelpers.go()\n")
    result = subprocess.run([sys.executable, "-c", LOOPING_PROJECT_RUN, str(tmp_path / "main.py")],
                            capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    elapsed, codes = result.stdout.splitlines()
    assert float(elapsed) < 15 and codes == "['DPL099']", result.stdout
