"""dplint against TorchFix and Fixit on the same corpora, cold and warm.

    python tests/benchmarks/bench.py                 # everything (peers take minutes)
    python tests/benchmarks/bench.py --no-peers      # dplint alone, in seconds
    python tests/benchmarks/bench.py --corpora a,d --runs 3
    python tests/benchmarks/bench.py --no-peers --corpora b,d --runs 3 \
        --against /path/to/release/.venv/bin/python --repo /path/to/a/checkout --one-file

Corpora: (a) a dense ~1,000-line training script generated from fixtures/ (deterministic),
(b) torch/nn + torch/utils/data and (c) the whole torch package, both copied from the
installed torch (found without importing it) into the work folder, because a checkout's
.gitignore hides a .venv from dplint's discovery, (d) fixtures/ itself.

dplint runs as `dplint check --output-format json`; "cold" starts each run from an empty
cache folder, "warm" reuses a filled one. TorchFix and Fixit have no cache: each runs in its
own virtualenv (TorchFix pins an older LibCST), created under --work-dir on first use with
pip, and only on (a), (b) and (d). Every cell is the median over the runs of the wall time,
and of the CPU time (user + system, all processes: steadier than wall time on a busy machine).
"same as unfiltered" compares dplint's findings with a run where every rule sees every file
(no pre-filter, no cache), so a speed-up that loses findings shows.

The speed budget (issue 11) compares with a release in the same run: `--against PY` runs
every dplint cell again with another interpreter (a release installed in its own virtualenv),
each run of one right after the same run of the other (a busy machine's speed drifts), and
adds the ratio of the CPU medians; `--repo PATH` adds a corpus (r) that checks a whole
repository the way a user does (`dplint check .` at its root); `--one-file` times one small
fixture checked in a fresh process, no cache (the import of LibCST included).

Not a test: pytest does not collect it (no test_ prefix) and nothing here asserts.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
DENSE_LINES = 1000
PEER_CORPORA = {"a", "b", "d"}  # (c) is too slow for the peers (TorchFix ~1 s of CPU per file)

# Runs dplint's CLI with the pre-filter switched off: every enabled rule sees every file.
UNFILTERED = (
    "import sys\n"
    "import dplint.engine, dplint.runner\n"
    "dplint.engine.could_match = lambda *args: True\n"
    "dplint.runner.may_match = lambda *args: True\n"
    "from dplint.cli import main\n"
    "sys.argv[0] = 'dplint'\n"
    "main()\n"
)


# dplint runs with its bytecode cached, as an installed package does: an editable checkout
# under PYTHONDONTWRITEBYTECODE=1 recompiles dplint's modules on every run (~0.1 s). The peers'
# virtualenvs hold the bytecode pip compiled.
RUN_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


@dataclass
class Corpus:
    key: str
    title: str
    paths: list[Path]
    files: int = 0
    lines: int = 0
    cwd: Path | None = None  # a whole repository is checked as `dplint check .` at its root


@dataclass
class Timing:
    cold: list[float] = field(default_factory=list)
    warm: list[float] = field(default_factory=list)
    cold_cpu: list[float] = field(default_factory=list)  # user + system seconds, all processes
    warm_cpu: list[float] = field(default_factory=list)
    findings: int | None = None
    note: str = ""


# ------------------------------------------------------------------------------- corpora
def dense_script(target: Path) -> Path:
    """Concatenates the fixture scripts (sorted, each once, then again) until DENSE_LINES lines.

    `from __future__` imports move to the top so that the result parses."""
    parts, future = [], set()
    for script in sorted(FIXTURES.rglob("*.py")):
        text = script.read_text(encoding="utf-8")
        try:
            ast.parse(text)
        except SyntaxError:
            continue  # a fixture about unparsable input
        body = []
        for line in text.splitlines():
            if line.startswith("from __future__ import"):
                future.add(line)
            else:
                body.append(line)
        parts.append(f"# --- {script.relative_to(FIXTURES)}\n" + "\n".join(body) + "\n\n\n")
    chunks, lines = [], 0
    while lines < DENSE_LINES:
        chunk = parts[len(chunks) % len(parts)]
        chunks.append(chunk)
        lines += chunk.count("\n")
    text = "".join(line + "\n" for line in sorted(future)) + "".join(chunks)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def torch_folder() -> Path:
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    if spec is None or spec.origin is None:
        sys.exit("bench: torch is not installed in this interpreter; run it with the project's .venv python")
    return Path(spec.origin).parent


def copy_python_files(source: Path, target: Path) -> None:
    if target.exists():
        return
    for path in sorted(source.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        destination = target / path.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)


def count(paths: list[Path]) -> tuple[int, int]:
    files = [p for path in paths for p in ([path] if path.is_file() else sorted(path.rglob("*.py")))]
    return len(files), sum(p.read_bytes().count(b"\n") for p in files)


def build_corpora(work: Path, wanted: set[str], repositories: list[str] = ()) -> list[Corpus]:
    corpora = []
    if "a" in wanted:
        script = dense_script(work / "dense" / "dense_train.py")
        corpora.append(Corpus("a", "dense training script", [script]))
    if wanted & {"b", "c"}:
        copy = work / "corpora" / torch_folder().name
        copy_python_files(torch_folder(), copy)
        if "b" in wanted:
            corpora.append(Corpus("b", "torch/nn + torch/utils/data", [copy / "nn", copy / "utils" / "data"]))
        if "c" in wanted:
            corpora.append(Corpus("c", "whole torch package", [copy]))
    if "d" in wanted:
        corpora.append(Corpus("d", "fixtures", [FIXTURES]))
    for repository in repositories:
        folder = Path(repository).resolve()
        corpora.append(Corpus("r", f"whole repository {folder.name}", [folder], cwd=folder))
    for corpus in corpora:
        corpus.files, corpus.lines = count(corpus.paths)
    return corpora


# ------------------------------------------------------------------------------- peers
def peer_venv(work: Path, package: str, executable: str) -> Path | None:
    venv = work / f"{package}-venv"
    program = venv / "bin" / executable
    if program.exists():
        return program
    print(f"bench: creating {venv} and installing {package} (once)", file=sys.stderr)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", package], check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        print(f"bench: cannot install {package}: {error}; skipping it", file=sys.stderr)
        return None
    return program


def peer_version(python_bin: Path, package: str) -> str:
    result = subprocess.run(
        [str(python_bin.parent / "python"), "-c", f"import importlib.metadata as m; print(m.version({package!r}), m.version('libcst'))"],
        capture_output=True, text=True,
    )
    version, _, libcst = result.stdout.strip().partition(" ")
    return f"{package} {version} (libcst {libcst})"


TORCHFIX_FINDING = re.compile(r"^.+:\d+:\d+: TOR\d+ ", re.M)
FIXIT_FINDING = re.compile(r"^.+@\d+:\d+ \w+: ", re.M)


# ------------------------------------------------------------------------------- running
def timed(command: list[str], cwd: Path, cpu: list[float] | None = None, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """Wall seconds of one run; its CPU seconds (all its processes) are appended to `cpu`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, result


def dplint_findings(result: subprocess.CompletedProcess) -> list[dict]:
    if result.returncode not in (0, 1):
        raise RuntimeError(f"dplint failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout)


def finding_keys(findings: list[dict]) -> list[tuple]:
    return sorted((f["filename"], f["location"]["row"], f["location"]["column"], f["code"]) for f in findings)


def bench_dplint(corpus: Corpus, args, work: Path, pythons: list[str]) -> list[tuple[Timing, str]]:
    """Time dplint with each interpreter (this checkout's first, then a release's). The runs
    alternate between the interpreters, run by run: this machine's speed drifts over a minute,
    and the ratio of two blocks timed one after the other measured the drift as much as dplint."""
    timings = [Timing() for _ in pythons]
    commands = []
    for python in pythons:
        base = [python, "-m", "dplint", "check", "--output-format", "json", "--exit-zero"]
        if args.jobs:
            base += ["--jobs", str(args.jobs)]
        commands.append(base)
    paths = ["."] if corpus.cwd is not None else [str(p) for p in corpus.paths]
    caches = [work / f"cache-{corpus.key}-{hashlib.sha256(python.encode()).hexdigest()[:8]}" for python in pythons]
    # A run at a repository's root; elsewhere the work folder (never this checkout: `python -m
    # dplint` would import the checkout's own dplint, whatever the interpreter).
    where = corpus.cwd or work
    keys: list = [None for _ in pythons]
    for _ in range(args.runs):
        for index, (timing, base, cache) in enumerate(zip(timings, commands, caches)):
            shutil.rmtree(cache, ignore_errors=True)
            seconds, result = timed([*base, "--cache-dir", str(cache), *paths], where, timing.cold_cpu, RUN_ENV)
            timing.cold.append(seconds)
            keys[index] = finding_keys(dplint_findings(result))
    filled = [{p: p.stat().st_mtime_ns for p in cache.glob("results-*.json")} for cache in caches]
    for _ in range(args.runs):
        for index, (timing, base, cache) in enumerate(zip(timings, commands, caches)):
            seconds, result = timed([*base, "--cache-dir", str(cache), *paths], where, timing.warm_cpu, RUN_ENV)
            timing.warm.append(seconds)
            if finding_keys(dplint_findings(result)) != keys[index]:
                timing.note = "warm findings DIFFER from cold"
    for timing, cache, before, found in zip(timings, caches, filled, keys):
        if {p: p.stat().st_mtime_ns for p in cache.glob("results-*.json")} != before:
            timing.note = "a warm run missed the cache (dplint's code edited during the bench?)"
        timing.findings = len(found)
    return [(timing, _same_as_unfiltered(corpus, args, work, python, paths, where, found) if index == 0 else "")
            for index, (timing, python, found) in enumerate(zip(timings, pythons, keys))]


def _same_as_unfiltered(corpus: Corpus, args, work: Path, python: str, paths: list[str], where: Path, keys) -> str:
    same = "not checked"
    if (corpus.key not in ("c", "r") or args.check_unfiltered_c) and python == args.python:
        command = [python, "-c", UNFILTERED, "check", "--output-format", "json", "--exit-zero", "--no-cache", *paths]
        unfiltered = finding_keys(dplint_findings(timed(command, where, env=RUN_ENV)[1]))
        same = "yes" if unfiltered == keys else f"NO ({len(unfiltered)} unfiltered vs {len(keys)})"
    return same


def one_file(python: str, runs: int, work: Path) -> list[float]:
    """CPU seconds of `dplint check --no-cache` on one small fixture, each in a fresh process."""
    script = sorted(FIXTURES.glob("*/bad_*.py"))[0]
    cpu: list[float] = []
    for _ in range(runs):
        timed([python, "-m", "dplint", "check", "--no-cache", "--exit-zero", str(script)], work, cpu, RUN_ENV)
    return cpu


def ratio(ours: list[float], theirs: list[float]) -> str:
    if not ours or not theirs or not statistics.median(theirs):
        return "-"
    return f"{statistics.median(ours) / statistics.median(theirs):.2f}x"


def bench_peer(name: str, program: Path, corpus: Corpus, args, work: Path) -> Timing:
    timing = Timing()
    paths = [str(p) for p in corpus.paths]
    command = [str(program), *paths] if name == "torchfix" else [str(program), "lint", *paths]
    pattern = TORCHFIX_FINDING if name == "torchfix" else FIXIT_FINDING
    for _ in range(args.peer_runs):
        seconds, result = timed(command, work, timing.cold_cpu)
        timing.cold.append(seconds)
        timing.findings = len(pattern.findall(result.stdout + result.stderr))
    return timing


# ------------------------------------------------------------------------------- report
def seconds(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpora", default="a,b,c,d", help="which corpora, of a,b,c,d (default: all)")
    parser.add_argument("--runs", type=int, default=5, help="dplint runs per cell (default 5)")
    parser.add_argument("--peer-runs", type=int, default=1, help="TorchFix/Fixit runs per cell (default 1: minutes each)")
    parser.add_argument("--no-peers", action="store_true", help="time dplint alone")
    parser.add_argument("--jobs", type=int, default=None, help="dplint --jobs (default: its own, the CPU count)")
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "dplint-bench"),
                        help="corpora copies, caches and the peers' virtualenvs (default: %(default)s)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter dplint is installed in")
    parser.add_argument("--against", default=None, metavar="PYTHON",
                        help="also time the dplint installed in this interpreter (a release) and print the CPU ratios")
    parser.add_argument("--repo", action="append", default=[], metavar="PATH",
                        help="a repository checked whole at its root, as corpus (r) (repeatable)")
    parser.add_argument("--one-file", action="store_true", help="time one small file checked in a fresh process")
    parser.add_argument("--check-unfiltered-c", action="store_true",
                        help="also compare findings without the pre-filter on (c) (slow: parses all of torch)")
    args = parser.parse_args()

    work = Path(args.work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    RUN_ENV["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # not into the checkout
    corpora = build_corpora(work, set(args.corpora.split(",")) - {""}, args.repo)
    peers: dict[str, Path] = {}
    if not args.no_peers and PEER_CORPORA & {c.key for c in corpora}:
        for name, package, executable in (("torchfix", "torchfix", "torchfix"), ("fixit", "fixit", "fixit")):
            program = peer_venv(work, package, executable)
            if program is not None:
                peers[name] = program

    dplint_version = subprocess.run([args.python, "-m", "dplint", "--version"], capture_output=True, text=True).stdout.strip()
    rules = subprocess.run([args.python, "-m", "dplint", "rules"], capture_output=True, text=True).stdout.count("\n")
    # Fill the bytecode cache before anything is timed.
    for python in filter(None, (args.python, args.against)):
        timed([python, "-m", "dplint", "check", "--no-cache", "--exit-zero", "--jobs", "1", str(FIXTURES)], work, env=RUN_ENV)
    print(f"# {dplint_version}, {rules} rules; {os.cpu_count()} CPUs; Python {sys.version.split()[0]}")
    for name, program in peers.items():
        print(f"# {peer_version(program, name)}")
    print(f"# median wall seconds: dplint over {args.runs} runs, peers over {args.peer_runs}")
    print()
    print("| corpus | files | lines | tool | cold s | cold CPU s | warm s | warm CPU s | findings | dplint cold / tool | same as unfiltered |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|")
    for corpus in corpora:
        timed_pairs = bench_dplint(corpus, args, work, [args.python, *filter(None, [args.against])])
        ours, same = timed_pairs[0]
        label = f"({corpus.key}) {corpus.title}"
        if corpus.key == "a":
            digest = hashlib.sha256(corpus.paths[0].read_bytes()).hexdigest()[:8]
            label += f" [{digest}]"
        print(f"| {label} | {corpus.files} | {corpus.lines} | dplint | {seconds(ours.cold)} | {seconds(ours.cold_cpu)} "
              f"| {seconds(ours.warm)} | {seconds(ours.warm_cpu)} | {ours.findings} | 1 "
              f"| {same}{'; ' + ours.note if ours.note else ''} |", flush=True)
        if args.against:
            theirs, _ = timed_pairs[1]
            print(f"| | | | release | {seconds(theirs.cold)} | {seconds(theirs.cold_cpu)} | {seconds(theirs.warm)} "
                  f"| {seconds(theirs.warm_cpu)} | {theirs.findings} | CPU cold {ratio(ours.cold_cpu, theirs.cold_cpu)}, "
                  f"warm {ratio(ours.warm_cpu, theirs.warm_cpu)} | {theirs.note} |", flush=True)
        if corpus.key not in PEER_CORPORA:
            continue
        for name, program in peers.items():
            theirs = bench_peer(name, program, corpus, args, work)
            speed = statistics.median(ours.cold) / statistics.median(theirs.cold)
            print(f"| | | | {name} | {seconds(theirs.cold)} | {seconds(theirs.cold_cpu)} | (no cache) | | {theirs.findings} "
                  f"| {speed:.3f} ({1 / speed:.1f}x faster) | |", flush=True)
    if args.one_file:
        print()
        ours, theirs = [], []
        for _ in range(args.runs):  # alternating, as the corpora
            ours += one_file(args.python, 1, work)
            if args.against:
                theirs += one_file(args.against, 1, work)
        line = f"one small file in a fresh process: dplint {seconds(ours)} CPU s (median of {args.runs})"
        if args.against:
            line += f", release {seconds(theirs)} CPU s ({ratio(ours, theirs)})"
        print(line)


if __name__ == "__main__":
    main()
