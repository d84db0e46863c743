"""Configuration: `[tool.dplint]` in pyproject.toml and dplint.toml, found per checked file,
every key, the command line over the file, and errors that name the file and key (exit 2)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import ROOT
from dplint.config import ConfigError, Settings, find_config, is_excluded, load_settings

# DPL007 fires on line 4 (sampler-shuffle); DPL100 on line 5 (a suppression naming no rule).
SCRIPT = (
    "from torch.utils.data import DataLoader, DistributedSampler\n"
    "\n"
    "sampler = DistributedSampler(dataset)\n"
    "loader = DataLoader(dataset, batch_size=8, shuffle=True, sampler=sampler)\n"
    "steps = 10  # noqa: DPL999\n"
)
BOTH = ["DPL007", "DPL100"]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def codes(cli, *args, cwd) -> list[str]:
    """The codes `dplint check` reports (concise format), in order."""
    result = cli("check", "--no-cache", "--output-format", "concise", *args, cwd=cwd)
    assert result.returncode in (0, 1), result.stderr
    return re.findall(r": (DPL\d+) ", result.stdout.decode())


# ---------------------------------------------------------------------------- finding the file
def test_pyproject_is_found_by_walking_up_from_the_file(tmp_path):
    config = write(tmp_path / "pyproject.toml", '[tool.dplint]\nignore = ["DPL100"]\n')
    script = write(tmp_path / "src" / "pkg" / "train.py", SCRIPT)
    settings = load_settings(str(script))
    assert settings.config_file == str(config)
    assert settings.root == str(tmp_path)
    assert settings.enabled_codes(str(script)) >= {"DPL007"}
    assert "DPL100" not in settings.enabled_codes(str(script))


def test_dplint_toml_takes_its_keys_at_the_top_level_and_wins_over_pyproject(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.dplint]\nignore = ["DPL007"]\n')
    config = write(tmp_path / "dplint.toml", 'ignore = ["DPL100"]\n')
    settings = load_settings(str(tmp_path))
    assert settings.config_file == str(config)
    assert "DPL100" not in settings.enabled_codes() and "DPL007" in settings.enabled_codes()


def test_pyproject_without_a_dplint_table_is_passed_over(tmp_path):
    outer = write(tmp_path / "pyproject.toml", '[tool.dplint]\nignore = ["DPL100"]\n')
    write(tmp_path / "inner" / "pyproject.toml", '[project]\nname = "inner"\n[tool.ruff]\nline-length = 99\n')
    # Not TOML, and never read: it does not mention dplint.
    write(tmp_path / "inner" / "deeper" / "pyproject.toml", "this is [not toml\n")
    assert find_config(str(tmp_path / "inner" / "deeper")) == str(outer)


def test_no_configuration_means_every_rule_relative_to_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(str(tmp_path))
    assert settings.config_file is None and settings.root == str(tmp_path)
    assert {"DPL007", "DPL100"} <= settings.enabled_codes()


def test_each_file_uses_its_nearest_configuration(tmp_path, cli):
    write(tmp_path / "pyproject.toml", '[tool.dplint]\nignore = ["DPL100"]\n')
    write(tmp_path / "main.py", SCRIPT)
    write(tmp_path / "sub" / "dplint.toml", 'ignore = ["sampler-shuffle"]\n')
    write(tmp_path / "sub" / "train.py", SCRIPT)
    result = cli("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)
    assert result.stdout.decode().splitlines() == [
        "main.py:4:44: DPL007 error [*] DataLoader gets a sampler and a true `shuffle`: it raises "
        "`ValueError: sampler option is mutually exclusive with shuffle`; the DistributedSampler "
        "already shuffles, so drop `shuffle=`",
        "sub/train.py:5:13: DPL100 info [*] Unused suppression `# noqa: DPL999`: no rule named `DPL999`",
    ]
    assert result.returncode == 1


def test_config_option_uses_one_file_for_everything(tmp_path, cli):
    write(tmp_path / "sub" / "dplint.toml", 'ignore = ["sampler-shuffle"]\n')
    write(tmp_path / "sub" / "train.py", SCRIPT)
    write(tmp_path / "ci.toml", 'select = ["DPL007"]\n')
    assert codes(cli, "--config", "ci.toml", "sub/train.py", cwd=tmp_path) == ["DPL007"]
    result = cli("check", "--config", "missing.toml", "sub/train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert b"missing.toml: no such configuration file" in result.stderr


# ---------------------------------------------------------------------------- every key
def test_select(tmp_path, cli):
    write(tmp_path / "pyproject.toml", '[tool.dplint]\nselect = ["DPL100"]\n')
    write(tmp_path / "train.py", SCRIPT)
    assert codes(cli, "train.py", cwd=tmp_path) == ["DPL100"]


def test_select_by_prefix_and_slug(tmp_path, cli):
    write(tmp_path / "pyproject.toml", '[tool.dplint]\nselect = ["DPL0", "unused-suppression"]\n')
    write(tmp_path / "train.py", SCRIPT)
    assert codes(cli, "train.py", cwd=tmp_path) == BOTH


def test_ignore(tmp_path, cli):
    write(tmp_path / "pyproject.toml", '[tool.dplint]\nignore = ["sampler-shuffle"]\n')
    write(tmp_path / "train.py", SCRIPT)
    assert codes(cli, "train.py", cwd=tmp_path) == ["DPL100"]


def test_extend_select(tmp_path, cli):
    write(tmp_path / "pyproject.toml", '[tool.dplint]\nselect = ["DPL007"]\nextend-select = ["DPL100"]\n')
    write(tmp_path / "train.py", SCRIPT)
    assert codes(cli, "train.py", cwd=tmp_path) == BOTH


def test_per_file_ignores(tmp_path, cli):
    write(
        tmp_path / "pyproject.toml",
        '[tool.dplint.per-file-ignores]\n"tests/*" = ["DPL007"]\n"legacy_*.py" = ["DPL100", "sampler-shuffle"]\n',
    )
    write(tmp_path / "tests" / "unit" / "test_loader.py", SCRIPT)  # `*` crosses folders, as fnmatch's
    write(tmp_path / "scripts" / "legacy_train.py", SCRIPT)  # a pattern without a slash matches the name
    write(tmp_path / "train.py", SCRIPT)
    result = cli("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)
    found = [line.split(" [*]")[0] for line in result.stdout.decode().splitlines()]
    assert found == ["tests/unit/test_loader.py:5:13: DPL100 info", "train.py:4:44: DPL007 error", "train.py:5:13: DPL100 info"]


def test_exclude_and_extend_exclude(tmp_path, cli):
    write(tmp_path / "pyproject.toml", '[tool.dplint]\nexclude = ["build/"]\nextend-exclude = ["*_generated.py"]\n')
    write(tmp_path / "build" / "lib" / "train.py", SCRIPT)
    write(tmp_path / "model_generated.py", SCRIPT)
    write(tmp_path / "train.py", SCRIPT)
    result = cli("check", "--no-cache", "--output-format", "concise", "--select", "DPL007", ".", cwd=tmp_path)
    assert [line.split(":")[0] for line in result.stdout.decode().splitlines()] == ["train.py"]
    settings = load_settings(str(tmp_path))
    assert is_excluded(str(tmp_path / "build" / "lib" / "train.py"), settings)
    assert is_excluded(str(tmp_path / "model_generated.py"), settings)
    assert not is_excluded(str(tmp_path / "train.py"), settings)


def test_exclude_is_relative_to_the_configuration_file(tmp_path):
    write(tmp_path / "project" / "pyproject.toml", '[tool.dplint]\nexclude = ["gen/*"]\n')
    write(tmp_path / "project" / "gen" / "a.py", SCRIPT)
    write(tmp_path / "gen" / "b.py", SCRIPT)  # outside the project: its own (absent) configuration
    settings = load_settings(str(tmp_path))
    assert is_excluded(str(tmp_path / "project" / "gen" / "a.py"), settings)
    assert not is_excluded(str(tmp_path / "gen" / "b.py"), settings)


def test_unsafe_fixes(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.dplint]\nunsafe-fixes = true\n")
    assert load_settings(str(tmp_path)).unsafe_fixes is True
    assert load_settings(str(tmp_path), {"unsafe_fixes": False}).unsafe_fixes is False


def test_output_format(tmp_path, cli):
    write(tmp_path / "pyproject.toml", '[tool.dplint]\noutput-format = "json-lines"\n')
    write(tmp_path / "train.py", SCRIPT)
    result = cli("check", "--no-cache", "--select", "DPL007", "train.py", cwd=tmp_path)
    assert result.stdout.decode().startswith('{"code": "DPL007", "name": "sampler-shuffle"')
    result = cli("check", "--no-cache", "--select", "DPL007", "--output-format", "concise", "train.py", cwd=tmp_path)
    assert result.stdout.decode().startswith("train.py:4:44: DPL007 error [*] ")


# ---------------------------------------------------------------------------- the command line wins
@pytest.mark.parametrize(
    "file_keys, arguments, expected",
    [
        ('ignore = ["DPL007"]', ["--select", "DPL007"], ["DPL007"]),  # --select replaces the file's selection
        ('select = ["DPL007"]', ["--select", "DPL100"], ["DPL100"]),
        ('ignore = ["DPL0"]', ["--extend-select", "DPL007"], BOTH),  # re-enables a rule the file ignores
        ('select = ["DPL007"]', ["--extend-select", "DPL100"], BOTH),
        ('extend-select = ["DPL100"]', ["--ignore", "DPL100"], ["DPL007"]),  # adds to the ignores
        ('ignore = ["DPL100"]', ["--ignore", "DPL007"], []),
    ],
)
def test_command_line_selection_wins(tmp_path, cli, file_keys, arguments, expected):
    write(tmp_path / "pyproject.toml", f"[tool.dplint]\n{file_keys}\n")
    write(tmp_path / "train.py", SCRIPT)
    assert codes(cli, *arguments, "train.py", cwd=tmp_path) == expected


def test_per_file_ignores_still_apply_under_a_command_line_select(tmp_path, cli):
    write(tmp_path / "pyproject.toml", '[tool.dplint.per-file-ignores]\n"train.py" = ["DPL007"]\n')
    write(tmp_path / "train.py", SCRIPT)
    assert codes(cli, "--select", "DPL007,DPL100", "train.py", cwd=tmp_path) == ["DPL100"]


def test_environment_output_format_wins_over_the_file(tmp_path, cli, monkeypatch):
    write(tmp_path / "pyproject.toml", '[tool.dplint]\noutput-format = "json"\n')
    write(tmp_path / "train.py", SCRIPT)
    monkeypatch.setenv("DPLINT_OUTPUT_FORMAT", "concise")
    result = cli("check", "--no-cache", "--select", "DPL007", "train.py", cwd=tmp_path)
    assert result.stdout.decode().startswith("train.py:4:44: DPL007 error [*] ")


# ---------------------------------------------------------------------------- ruff's `lint` table
@pytest.mark.parametrize(
    "name, body",
    [
        ("pyproject.toml", '[tool.dplint.lint]\nselect = ["DPL0", "DPL100"]\nignore = ["DPL100"]\n'
                           '[tool.dplint.lint.per-file-ignores]\n"tests/*" = ["sampler-shuffle"]\n'),
        ("dplint.toml", 'fail-on = "info"\n[lint]\nselect = ["DPL0", "DPL100"]\nignore = ["DPL100"]\n'
                        '[lint.per-file-ignores]\n"tests/*" = ["sampler-shuffle"]\n'),
    ],
)
def test_the_lint_table_holds_the_rule_selection_as_ruffs_does(tmp_path, cli, name, body):
    write(tmp_path / name, body)
    write(tmp_path / "train.py", SCRIPT)
    write(tmp_path / "tests" / "test_train.py", SCRIPT)
    assert codes(cli, ".", cwd=tmp_path) == ["DPL007"]  # train.py's; DPL100 ignored, DPL007 not in tests/
    settings = load_settings(str(tmp_path))
    assert (settings.select, settings.ignore) == (("DPL0", "DPL100"), ("DPL100",))
    assert "select" in settings.configured and "lint" not in settings.configured


def test_the_lint_table_from_the_command_line(tmp_path, cli):
    write(tmp_path / "train.py", SCRIPT)
    assert codes(cli, "--config", "lint.ignore = ['DPL100']", "train.py", cwd=tmp_path) == ["DPL007"]


# ---------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "name, body, message",
    [
        ("pyproject.toml", '[tool.dplint]\nselekt = ["DPL007"]\n', "unknown key `selekt` in [tool.dplint]"),
        ("pyproject.toml", '[tool.dplint]\nextend_select = ["DPL007"]\n', "did you mean `extend-select`?"),
        ("dplint.toml", '[tool.dplint]\nselect = ["DPL007"]\n', "dplint.toml takes the keys at the top level"),
        ("pyproject.toml", '[tool.dplint]\nselect = "DPL007"\n', "`select` must be a list of strings, not 'DPL007'"),
        ("pyproject.toml", '[tool.dplint]\nignore = ["DPL999"]\n', "`ignore`: unknown rule selector 'DPL999'"),
        ("pyproject.toml", '[tool.dplint]\nextend-select = ["no-such-rule"]\n', "`extend-select`: unknown rule selector"),
        ("dplint.toml", 'per-file-ignores = {"tests/*" = "DPL007"}\n', "`per-file-ignores` must be a table"),
        ("dplint.toml", 'per-file-ignores = {"tests/*" = ["DPL99x"]}\n', "`per-file-ignores.'tests/*'`: unknown rule selector"),
        ("dplint.toml", "exclude = [1]\n", "`exclude` must be a list of strings, not [1]"),
        ("dplint.toml", 'extend-exclude = "build"\n', "`extend-exclude` must be a list of strings"),
        ("dplint.toml", 'unsafe-fixes = "yes"\n', "`unsafe-fixes` must be true or false, not 'yes'"),
        ("dplint.toml", 'output-format = "xml"\n', "`output-format` must be one of text, concise, json"),
        ("dplint.toml", "analysis-timeout = 0\n", "`analysis-timeout` must be a number of seconds greater than 0, not 0"),
        ("dplint.toml", "analysis-timeout = -1.5\n", "`analysis-timeout` must be a number of seconds greater than 0"),
        ("dplint.toml", 'analysis-timeout = "10"\n', "`analysis-timeout` must be a number of seconds greater than 0, not '10'"),
        ("dplint.toml", "analysis-timeout = true\n", "`analysis-timeout` must be a number of seconds greater than 0, not True"),
        ("pyproject.toml", '[tool.dplint.lint]\noutput-format = "json"\n',
         "unknown key `output-format` in [tool.dplint.lint] (`output-format` goes in [tool.dplint], beside `lint`)"),
        ("pyproject.toml", '[tool.dplint.lint]\nselct = ["DPL007"]\n',
         "unknown key `selct` in [tool.dplint.lint] (did you mean `select`?); [tool.dplint.lint] takes: select, ignore"),
        ("dplint.toml", '[lint]\ncolour = true\n', "unknown key `colour` in [lint]; [lint] takes: select, ignore"),
        ("pyproject.toml", '[tool.dplint]\nignore = ["DPL100"]\n[tool.dplint.lint]\nignore = ["DPL007"]\n',
         "`ignore` is set both in [tool.dplint] and in [tool.dplint.lint]; keep one"),
        ("dplint.toml", 'lint = ["DPL007"]\n', "`lint` in the top level must be a table"),
        ("dplint.toml", "select = [\n", "not valid TOML"),
        ("pyproject.toml", "[tool.dplint\n", "not valid TOML"),
    ],
)
def test_bad_configuration_is_a_usage_error_naming_file_and_key(tmp_path, cli, name, body, message):
    config = write(tmp_path / name, body)
    write(tmp_path / "train.py", SCRIPT)
    result = cli("check", "--no-cache", "train.py", cwd=tmp_path)
    assert result.returncode == 2
    stderr = result.stderr.decode()
    assert stderr.startswith(f"dplint: error: {config}: "), stderr
    assert message in stderr
    assert result.stdout == b""


def test_bad_nested_configuration_met_during_the_run_is_a_usage_error(tmp_path, cli):
    write(tmp_path / "train.py", SCRIPT)
    config = write(tmp_path / "sub" / "dplint.toml", "unsafe-fixes = 1\n")
    write(tmp_path / "sub" / "train.py", SCRIPT)
    result = cli("check", "--no-cache", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.decode().startswith(f"dplint: error: {config}: `unsafe-fixes` must be true or false")


def test_load_settings_raises_config_error(tmp_path):
    write(tmp_path / "dplint.toml", "colour = true\n")
    with pytest.raises(ConfigError, match=r"dplint\.toml: unknown key `colour` in the top level"):
        load_settings(str(tmp_path))


def test_settings_defaults():
    settings = Settings()
    assert settings.output_format == "text" and settings.unsafe_fixes is False
    assert settings.for_path("anything.py") is settings


# ---------------------------------------------------------------------------- the documented example
def test_documented_configuration_loads(tmp_path, monkeypatch):
    """The Configuration section's TOML is accepted key by key. Its rule names are the issue's
    rule table; rules not written yet are stood in for, so that this tests the keys and values."""
    import dplint.registry as registry
    from dplint.rule import Rule, Severity

    doc = next(d for d in (ROOT / "README.md", ROOT / "docs" / "ci.md") if d.exists() and "[tool.dplint]" in d.read_text())
    block = next(b for b in re.findall(r"```toml\n(.*?)```", doc.read_text(), re.S) if "[tool.dplint]" in b)
    planned = {"DPL001": "wrapper-train", "DPL004": "strip-module", "DPL005": "strict-false-load"}
    real = registry.all_rules()
    known = {rule.code for rule in real}
    stand_ins = tuple(
        type(f"StandIn{code}", (Rule,), {"code": code, "name": name, "severity": Severity.INFO, "summary": ""})
        for code, name in planned.items()
        if code not in known
    )
    monkeypatch.setattr(registry, "all_rules", lambda: tuple(sorted(real + stand_ins, key=lambda rule: rule.code)))
    write(tmp_path / "pyproject.toml", block)
    settings = load_settings(str(tmp_path))
    assert settings.select == ("DPL0",)
    assert settings.per_file_ignores == (("tests/*", ("DPL004", "strict-false-load")),)
    assert "DPL100" in settings.enabled_codes() and "DPL001" not in settings.enabled_codes()
    assert "DPL004" not in settings.enabled_codes(str(tmp_path / "tests" / "test_x.py"))
    assert is_excluded(str(tmp_path / "third_party" / "x.py"), settings)
    assert is_excluded(str(tmp_path / "notebooks" / "x.py"), settings)
