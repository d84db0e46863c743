"""Speed features must never change what is reported: the pre-filter, the cache, the process
pool; and a run that needs no parsing must not pay for LibCST."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import libcst
import pytest

import dplint.cache
import dplint.engine
import dplint.runner
from conftest import FIXTURES, ROOT
from dplint.config import Settings
from dplint.engine import lint_source, rules_for
from dplint.registry import all_rules, selected_codes
from dplint.rule import finding_to_dict
from dplint.flow import analysed

SCRIPTS = sorted(FIXTURES.rglob("*.py"))
EXAMPLES = [
    (rule.code, index, example)
    for rule in all_rules()
    for index, example in enumerate([*rule.VALID, *(example.code for example in rule.INVALID)])
]


def as_dicts(findings) -> list[dict]:
    return [finding_to_dict(finding) for finding in findings]


@pytest.fixture(autouse=True)
def pinned_code_fingerprint(monkeypatch):
    """dplint's source may be edited while the tests run (which rightly empties the cache)."""
    monkeypatch.setattr(dplint.cache, "code_fingerprint", lambda: "pinned")


@pytest.fixture
def parse_calls(monkeypatch) -> list[int]:
    """Counts LibCST parses (in this process: run with jobs=1)."""
    calls: list[int] = []
    real = libcst.parse_module

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(libcst, "parse_module", counting)
    return calls


@pytest.fixture
def project(tmp_path) -> Path:
    """The first flagged script of every rule's fixtures, and a clean one: enough files for the
    process pool, findings in most of them."""
    folder = tmp_path / "project"
    scripts = [sorted(d.glob("bad_*.py"))[0] for d in sorted(FIXTURES.iterdir()) if list(d.glob("bad_*.py"))]
    scripts += sorted((FIXTURES / "clean").glob("*.py"))[:1] + sorted((FIXTURES / "cross-file").glob("*.py"))
    for script in scripts:
        (folder / script.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(script, folder / script.parent.name / script.name)
    return folder


def run_report(paths, **options) -> list[dict]:
    settings = Settings(root=str(paths[0]))
    report = dplint.runner.run([str(p) for p in paths], settings, **options)
    assert not report.errors
    return as_dicts(report.findings)


# ------------------------------------------------------------------------------ pre-filter
def lint_all(text: str, path: str) -> list[dict]:
    return as_dicts(lint_source(text, path, rules_for(selected_codes())).findings)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_prefilter_keeps_every_fixture_finding(script: Path, monkeypatch):
    text = script.read_text()
    filtered = lint_all(text, str(script))
    monkeypatch.setattr(dplint.engine, "could_match", lambda *args: True)
    assert filtered == lint_all(text, str(script))


@pytest.mark.parametrize("code, index, example", EXAMPLES, ids=lambda v: str(v)[:20])
def test_prefilter_keeps_every_rule_example_finding(code: str, index: int, example: str, monkeypatch):
    filtered = lint_all(example, "example.py")
    monkeypatch.setattr(dplint.engine, "could_match", lambda *args: True)
    assert filtered == lint_all(example, "example.py")


def test_runner_prefilter_loses_no_finding(project, monkeypatch):
    filtered = run_report([project], jobs=1)
    assert filtered, "the fixtures have findings"
    monkeypatch.setattr(dplint.engine, "could_match", lambda *args: True)
    monkeypatch.setattr(dplint.runner, "may_match", lambda *args: True)
    assert run_report([project], jobs=1) == filtered


def test_a_file_without_tokens_is_never_parsed(tmp_path, parse_calls):
    script = tmp_path / "plain.py"
    script.write_text("import torch\n\nx = torch.zeros(3)\nprint(x.sum())\n")
    assert run_report([script], jobs=1) == []
    assert parse_calls == []


# ---------------------------------------------------------------------------------- cache
def test_warm_cache_parses_nothing_and_reports_the_same(project, tmp_path, parse_calls):
    cache = tmp_path / "cache"
    cold = run_report([project], jobs=1, cache_dir=str(cache))
    assert parse_calls, "the cold run parses"
    parse_calls.clear()
    warm = run_report([project], jobs=1, cache_dir=str(cache))
    assert parse_calls == []
    assert warm == cold == run_report([project], jobs=1)


def test_cache_is_invalidated_by_content(project, tmp_path, parse_calls):
    cache = tmp_path / "cache"
    first = run_report([project], jobs=1, cache_dir=str(cache))
    flagged = Path(first[0]["filename"])
    flagged.write_text(flagged.read_text() + "\n# edited\n")
    parse_calls.clear()
    cached = run_report([project], jobs=1, cache_dir=str(cache))
    assert len(parse_calls) == 1
    assert cached == run_report([project], jobs=1)
    flagged.write_text("")
    after = run_report([project], jobs=1, cache_dir=str(cache))
    assert after == [f for f in first if f["filename"] != str(flagged)]


def test_cache_keeps_each_rule_set_side_by_side(project, tmp_path, parse_calls):
    cache = tmp_path / "cache"
    first = run_report([project], jobs=1, cache_dir=str(cache))
    parse_calls.clear()
    report = dplint.runner.run([str(project)], Settings(root=str(project), ignore=("DPL007",)), jobs=1, cache_dir=str(cache))
    assert not [f for f in report.findings if f.code == "DPL007"]
    assert parse_calls  # other rules: linted again
    parse_calls.clear()
    assert run_report([project], jobs=1, cache_dir=str(cache)) == first  # the first settings again: still cached
    assert parse_calls == []
    again = dplint.runner.run([str(project)], Settings(root=str(project), ignore=("DPL007",)), jobs=1, cache_dir=str(cache))
    assert as_dicts(again.findings) == as_dicts(report.findings) and parse_calls == []


@pytest.mark.parametrize("change", ["version", "code"])
def test_cache_is_invalidated_by_dplint_version_and_code(project, tmp_path, parse_calls, monkeypatch, change):
    cache = tmp_path / "cache"
    run_report([project], jobs=1, cache_dir=str(cache))
    if change == "version":
        monkeypatch.setattr(dplint.cache, "__version__", "99.0")
    else:
        monkeypatch.setattr(dplint.cache, "code_fingerprint", lambda: "edited")
    parse_calls.clear()
    run_report([project], jobs=1, cache_dir=str(cache))
    assert parse_calls


def test_warm_cache_runs_no_project_check(project, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    settings = Settings(root=str(project))
    cold = dplint.runner.run([str(project)], settings, jobs=1, cache_dir=str(cache))
    assert any(report.facts for report in cold.files), "the cross-file fixtures report facts"
    calls = []
    real = dplint.runner.project_findings
    monkeypatch.setattr(dplint.runner, "project_findings", lambda reports: calls.append(1) or real(reports))
    warm = dplint.runner.run([str(project)], settings, jobs=1, cache_dir=str(cache))
    assert calls == []
    assert as_dicts(warm.findings) == as_dicts(cold.findings)
    train = next(project.rglob("cross-file/train.py"))
    train.write_text(train.read_text() + "\n# edited\n")  # same facts: still no project check
    dplint.runner.run([str(project)], settings, jobs=1, cache_dir=str(cache))
    assert calls == []
    train.write_text("")  # its facts are gone: checked again
    after = dplint.runner.run([str(project)], settings, jobs=1, cache_dir=str(cache))
    assert calls == [1]
    assert as_dicts(after.findings) == as_dicts(dplint.runner.run([str(project)], settings, jobs=1).findings)


def test_cached_findings_carry_the_path_as_named_in_this_run(project, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    absolute = run_report([project], jobs=1, cache_dir=str(cache))
    monkeypatch.chdir(project)
    relative = run_report([Path(".")], jobs=1, cache_dir=str(cache))
    assert [f["filename"] for f in relative] == [os.path.relpath(f["filename"], project) for f in absolute]


def test_a_damaged_cache_file_is_ignored(project, tmp_path):
    cache = tmp_path / "cache"
    expected = run_report([project], jobs=1, cache_dir=str(cache))
    # a run over this many files keeps its entries in its pack, not one file each
    assert len(list(project.rglob("*.py"))) >= dplint.cache.PACK_MIN_FILES
    assert not list(cache.glob("*/files/*/*.json"))
    (pack,) = cache.glob("*/runs/*.json")
    data = json.loads(pack.read_text())
    assert len(data["entries"]) == len(list(project.rglob("*.py")))
    for entry in data["entries"].values():
        for result in entry["results"].values():
            result["findings"] = [{"code": 1}]
    pack.write_text(json.dumps(data))
    assert run_report([project], jobs=1, cache_dir=str(cache)) == expected
    for entry in cache.glob("*/runs/*.json"):
        entry.write_text("{not json")
    for entry in cache.glob("*/project/*.json"):
        entry.write_text("[]")
    assert run_report([project], jobs=1, cache_dir=str(cache)) == expected


def test_a_damaged_file_entry_is_ignored(project, tmp_path):
    """Runs over a few files (a pre-commit hook's) keep one entry per file."""
    cache = tmp_path / "cache"
    files = sorted(project.rglob("*.py"))[:3]
    expected = run_report(files, jobs=1, cache_dir=str(cache))
    entries = list(cache.glob("*/files/*/*.json"))
    assert len(entries) == 3
    for entry in entries:
        data = json.loads(entry.read_text())
        for result in data["results"].values():
            result["findings"] = [{"code": 1}]
        entry.write_text(json.dumps(data))
    assert run_report(files, jobs=1, cache_dir=str(cache)) == expected
    for entry in entries:
        entry.write_text("{not json")
    assert run_report(files, jobs=1, cache_dir=str(cache)) == expected


def test_a_few_files_are_answered_from_the_pack_of_a_run_over_their_folder(project, tmp_path, monkeypatch):
    """`dplint check .`, then a pre-commit run over two of its files: nothing is linted again."""
    cache = tmp_path / "cache"
    run_report([project], jobs=1, cache_dir=str(cache))
    files = sorted(project.rglob("*.py"))[:2]
    expected = run_report(files, jobs=1)
    linted = []
    real = dplint.runner._lint_one
    monkeypatch.setattr(dplint.runner, "_lint_one", lambda item: linted.append(item[0]) or real(item))
    assert run_report(files, jobs=1, cache_dir=str(cache)) == expected
    assert linted == []


def test_cli_cache_dir_and_no_cache(cli, project, tmp_path):
    default = cli("check", str(project), cwd=tmp_path)
    assert default.returncode == 1
    assert list((tmp_path / ".dplint_cache").glob("*/runs/*.json"))
    chosen = tmp_path / "elsewhere"
    assert cli("check", "--cache-dir", str(chosen), str(project), cwd=project).stdout == default.stdout
    assert list(chosen.glob("*/runs/*.json"))
    assert not (project / ".dplint_cache").exists()
    shutil.rmtree(tmp_path / ".dplint_cache")
    assert cli("check", "--no-cache", str(project), cwd=tmp_path).stdout == default.stdout
    assert not (tmp_path / ".dplint_cache").exists()


# ---------------------------------------------------------------------------------- jobs
def test_jobs_give_identical_sorted_output(cli, project, tmp_path):
    assert len(list(project.rglob("*.py"))) >= dplint.runner.PARALLEL_THRESHOLD
    one = cli("check", "--no-cache", "-j", "1", str(project), cwd=tmp_path)
    two = cli("check", "--no-cache", "--jobs", "2", str(project), cwd=tmp_path)
    assert one.returncode == two.returncode == 1
    assert one.stdout == two.stdout
    lines = [line for line in one.stdout.decode().splitlines() if line.startswith(str(project))]
    keys = []
    for line in lines:
        path, row, column, _ = line.split(":", 3)
        keys.append((path, int(row), int(column)))
    assert len(keys) >= 3 and keys == sorted(keys)


def test_pool_reports_what_one_process_reports(project):
    assert run_report([project], jobs=2) == run_report([project], jobs=1)


# ---------------------------------------------------------------------------- lazy imports
def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running `code`."""
    script = code + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.splitlines()[-1]))


def cli_modules(*args: str) -> str:
    return (
        "import sys\n"
        "import dplint.cache\n"
        "from dplint.cli import main\n"  # not `python -m dplint`: its hard exit would not come back
        "dplint.cache.code_fingerprint = lambda: 'pinned'  # see pinned_code_fingerprint\n"
        f"sys.argv = ['dplint', *{list(args)!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
    )


def test_import_dplint_loads_no_libcst():
    loaded = modules_after("import dplint")
    assert "dplint" in loaded and "libcst" not in loaded


def test_version_loads_no_libcst():
    loaded = modules_after(cli_modules("--version"))
    assert "libcst" not in loaded and "dplint.cli" in loaded


def test_warm_run_and_prefiltered_run_never_reach_the_engine(project, tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("print('no torch here')\n")
    loaded = modules_after(cli_modules("check", "--no-cache", str(plain)))
    assert "dplint.runner" in loaded and "dplint.engine" not in loaded
    assert "concurrent.futures.process" not in loaded  # one file: no pool

    cache = str(tmp_path / "cache")
    assert "dplint.engine" in modules_after(cli_modules("check", "--cache-dir", cache, str(project)))
    warm = modules_after(cli_modules("check", "--cache-dir", cache, str(project)))
    assert "dplint.runner" in warm
    assert "dplint.engine" not in warm


def test_warm_run_loads_no_libcst(project, tmp_path):
    cache = str(tmp_path / "cache")
    modules_after(cli_modules("check", "--cache-dir", cache, str(project)))
    assert "libcst" not in modules_after(cli_modules("check", "--cache-dir", cache, str(project)))


def test_rule_catalog_matches_the_rule_classes():
    """The catalog read from the rules' source (without importing them) says what the classes say."""
    from dplint.registry import rule_catalog

    assert [(e.code, e.name, e.tokens) for e in rule_catalog()] == [
        (rule.code, rule.name, tuple(rule.tokens)) for rule in all_rules()
    ]


def test_warm_run_reads_notebooks_from_the_cache(tmp_path):
    """A notebook is analysed alone (no project): its bytes and the rules decide its findings,
    so a warm run reports the cached ones and loads no LibCST."""
    folder = tmp_path / "notebooks"
    shutil.copytree(FIXTURES / "notebooks", folder)
    cache = str(tmp_path / "cache")
    fresh = run_report([folder], jobs=1)
    assert any(f["filename"].endswith(".ipynb") for f in fresh), "the notebook fixtures have findings"
    assert run_report([folder], jobs=1, cache_dir=cache) == fresh
    assert run_report([folder], jobs=1, cache_dir=cache) == fresh
    assert "libcst" not in modules_after(cli_modules("check", "--cache-dir", cache, str(folder)))
    flagged = next(Path(f["filename"]) for f in fresh if f["filename"].endswith(".ipynb"))
    flagged.write_text(flagged.read_text(encoding="utf-8").replace("DistributedSampler", "RandomSampler"), encoding="utf-8")
    assert run_report([folder], jobs=1, cache_dir=cache) == run_report([folder], jobs=1)


@pytest.mark.parametrize("script", SCRIPTS[::7], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_semantic_children_are_libcst_children(script: Path):
    from dplint.semantic import TOKEN_NODES

    try:
        module = libcst.parse_module(script.read_text())
    except libcst.ParserSyntaxError:
        pytest.skip("not parsable by LibCST")
    model = analysed(module, str(script))
    for node in [module, *model.nodes()]:
        expected = [child for child in node.children if type(child) not in TOKEN_NODES]
        assert len(model.children(node)) == len(expected)
        assert all(a is b for a, b in zip(model.children(node), expected))


def test_anchor_tokens_are_read_from_the_file_itself():
    """A rule whose findings are spelled in the file (`k[7:]`) is not run on a file whose
    closure alone holds its words (a helper that strips `module.`)."""
    strip = next(rule for rule in all_rules() if rule.code == "DPL013")
    helper = 'sd = {k.replace("module.", ""): v for k, v in sd.items()}\n'
    caller = "from helpers import load\nmodel.load_state_dict(load(path))\n"
    assert dplint.engine.could_match(caller + helper, strip)  # the joined text alone
    assert not dplint.engine.could_match(caller + helper, strip, caller)
    assert dplint.engine.could_match(caller + helper, strip, caller + "k[7:]\n")
    assert not dplint.runner.may_match(caller + helper, frozenset({"DPL013"}), caller)
    assert dplint.runner.may_match(caller + helper, frozenset({"DPL013"}))


@pytest.mark.parametrize(
    ("code", "worth_parsing"),
    [
        ("import torch\naccelerator = Accelerator()\ntorch.save(sd, 'a.pt')\n", True),
        ("import torch as th\naccelerator = Accelerator()\nth.save(sd, 'a.pt')\n", True),
        ("from torch import (\n    nn,\n    save,\n)\naccelerator = Accelerator()\nsave(sd, 'a.pt')\n", True),
        # accelerate's own savers are not torch.save: no reason to parse for DPL011
        ("accelerator = Accelerator()\naccelerator.save_state('out')\nmodel.save_pretrained('out')\n", False),
        ("import torch\ntorch.save(sd, 'a.pt')\n", False),  # no sign of several processes
    ],
)
def test_unguarded_rank_save_parses_files_spelling_torchs_save(code: str, worth_parsing: bool):
    save = next(rule for rule in all_rules() if rule.code == "DPL011")
    assert dplint.engine.could_match(code, save) is worth_parsing


def test_the_catalog_knows_every_rules_anchor_tokens():
    from dplint.registry import rule_catalog

    entries = {entry.code: entry for entry in rule_catalog()}
    for rule in all_rules():
        assert entries[rule.code].anchor_tokens == tuple(rule.anchor_tokens), rule.code
    assert entries["DPL013"].anchor_tokens  # at least one rule has them


def test_a_run_leaves_the_garbage_collector_as_it_found_it(tmp_path):
    import gc

    script = tmp_path / "train.py"
    script.write_text("import torch.nn as nn\nmodel = nn.DataParallel(net)\nmodel.train()\n")
    assert gc.isenabled()
    run_report([script], jobs=1)
    assert gc.isenabled()
    gc.disable()
    try:
        run_report([script], jobs=1)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_command_called_in_process_leaves_the_collector_on(tmp_path):
    """Only the `dplint` process itself (`entry_point`, which ends with a hard exit) keeps the
    collector off after a check; `main` called in a process that goes on (a test, an editor
    integration) leaves it as it was."""
    import gc

    from click.testing import CliRunner

    from dplint.cli import main

    script = tmp_path / "train.py"
    script.write_text("import torch.nn as nn\nmodel = nn.DataParallel(net)\nmodel.train()\n")
    assert gc.isenabled()
    result = CliRunner().invoke(main, ["check", "--no-cache", str(script)])
    assert result.exit_code == 0, result.output  # the check ran to its end
    assert gc.isenabled()


def test_the_command_flushes_everything_before_its_hard_exit(tmp_path):
    """`dplint` leaves with `os._exit` (no interpreter teardown): what it printed must arrive
    whole, through a pipe, with the exit status of the check."""
    command = [sys.executable, "-m", "dplint", "check", "--no-cache", "--output-format", "json", str(FIXTURES / "strip-module")]
    done = subprocess.run(command, capture_output=True, timeout=120)
    findings = json.loads(done.stdout)
    assert done.returncode == 1
    assert len(findings) >= 10 and len(done.stdout) > 8192  # more than one pipe buffer's worth
    written = tmp_path / "report.json"
    done = subprocess.run([*command, "--output-file", str(written)], capture_output=True, timeout=120)
    assert done.returncode == 1 and json.loads(written.read_text()) == findings


def test_token_parts_of_the_pieces_answer_as_the_joined_text():
    """The pre-filter reads a file's import closure as the set of token parts its pieces hold
    (`tokens_in`, memoised per piece): every rule must get the answer the pieces joined by
    newlines give, also for pairs whose parts sit in different pieces."""
    from dplint.rule import token_parts, tokens_in, tokens_match

    rules = all_rules()
    parts = token_parts(rules)
    assert "DataParallel" in parts and "set_epoch" in parts  # a single token, and a pair's part
    texts = [script.read_text(encoding="utf-8", errors="replace") for script in SCRIPTS[::5]]
    groups = [texts[i : i + 3] for i in range(0, len(texts), 3)] + [["x = 'save'", "import deepspeed"], ["sa", "ve"], []]
    decided = set()
    for pieces in groups:
        joined = "\n".join(pieces)
        for rule in rules:
            expected = tokens_match(joined, rule.tokens)
            assert tokens_match(tokens_in(pieces, parts), rule.tokens) == expected, (rule.code, pieces)
            decided.add(expected)
    assert decided == {True, False}
    assert tokens_match(tokens_in(["x = 'save'", "import deepspeed"], parts), [("save", "deepspeed")])


@pytest.mark.parametrize("names", [("net",), ("net", "trainer"), ("a", "ab", "b"), ("x_1",)])
def test_whole_words_finds_what_the_boundary_pattern_finds(names):
    from dplint.project import WholeWords

    texts = [
        "net = Net()\ntrainer.fit(net)\nsubnet(net_2, net)\n_net.net\n",
        "ab a b aab abb a_b ba (a)(b)[ab]\nx_1 xx_1 x_10 x_1x\n",
        "net", "", "abnet netab trainernet net.trainer", "né net ñet net_ net\u00b2 \u00b2net",
    ]
    boundary = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b")
    for text in texts:
        expected = [m.span() for m in boundary.finditer(text)]
        assert WholeWords(names).spans(text) == expected
        assert WholeWords(names).search(text) == (expected[0] if expected else None)
