"""Fuzz dplint: mutated real training files and generated programs, each linted and fixed
(unsafe fixes too) with the per-file budget. Counts crashes (internal errors), hangs (DPL099 or
a file past the budget), fixes whose output does not parse, and fixes that a second run changes.
A measurement, not a test.

    python tests/benchmarks/fuzz.py SOURCES_DIR [SOURCES_DIR ...] [--programs 1000] [--seed 0]

SOURCES_DIR: folders of real .py files (the fixtures, real-world checkouts). Generated programs
come from hypothesmith when it is installed (the `test` extra)."""

from __future__ import annotations

import argparse
import os
import random
import time
import warnings


def mutants(text: str, rng: random.Random):
    """Small edits of the kinds real edits make: lines dropped, doubled, swapped, re-indented,
    cut short, tokens inserted."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return
    pick = lambda: rng.randrange(len(lines))  # noqa: E731
    edits = [
        lambda ls: ls[:pick()] + ls[pick():],
        lambda ls: (lambda i: ls[:i] + [ls[i]] + ls[i:])(pick()),
        lambda ls: (lambda i, j: [ls[j] if k == i else ls[i] if k == j else line for k, line in enumerate(ls)])(pick(), pick()),
        lambda ls: (lambda i: ls[:i] + ["    " + ls[i]] + ls[i + 1:])(pick()),
        lambda ls: ls[:pick()],
        lambda ls: (lambda i: ls[:i] + [rng.choice(["model = nn.DataParallel(model)\n", "sampler.set_epoch(epoch)\n",
                                                   "torch.save(model.state_dict(), 'x.pt')\n", "if rank == 0:\n",
                                                   "dist.barrier()\n", "(((\n", "'''\n", "\\\n"])] + ls[i:])(pick()),
    ]
    for _ in range(3):
        yield "".join(rng.choice(edits)(list(lines)))


def generated(count: int, seed: int):
    try:
        import hypothesmith
        from hypothesis import HealthCheck, given, settings
    except ImportError:
        return []
    found: list[str] = []

    @settings(max_examples=count, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(hypothesmith.from_grammar())
    def collect(source):
        found.append(source)

    collect()
    return found


def parses(text: str) -> bool:
    import libcst

    try:
        libcst.parse_module(text)
        return True
    except Exception:
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("sources", nargs="+")
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--generated", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    warnings.simplefilter("ignore")
    from dplint.config import Settings
    from dplint.runner import FixOptions, process_text_guarded

    rng = random.Random(options.seed)
    files = sorted(os.path.join(folder, name) for source in options.sources
                   for folder, _, names in os.walk(source) for name in names if name.endswith(".py"))
    # Files that could hold a finding first: those naming what the rules look for.
    texts = []
    for path in files:
        try:
            text = open(path, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        if any(word in text for word in ("DataParallel", "DistributedSampler", "torch.save", "load_state_dict", "barrier")):
            texts.append((path, text))
    rng.shuffle(texts)
    programs = []
    for path, text in texts:
        for mutant in mutants(text, rng):
            programs.append((path, mutant))
        if len(programs) >= options.programs:
            break
    programs += [("<generated>", source) for source in generated(options.generated, options.seed)]
    settings = Settings(analysis_timeout=10.0)
    counts = {"programs": 0, "crashes": 0, "timeouts": 0, "unparsable fixes": 0, "not idempotent": 0, "fixed": 0}
    slowest = (0.0, "")
    started = time.perf_counter()
    for origin, text in programs:
        counts["programs"] += 1
        begun = time.perf_counter()
        report = process_text_guarded(text, "fuzzed.py", settings, FixOptions(unsafe=True, write=False))
        took = time.perf_counter() - begun
        slowest = max(slowest, (took, origin))
        if report.errors:
            counts["crashes"] += 1
            print(f"crash: {origin}: {report.errors[0]}"[:300])
        if any(f.code == "DPL099" for f in report.findings) or took > 12:
            counts["timeouts"] += 1
            print(f"past the budget: {origin} ({took:.1f} s)")
        if report.fixed_text is None:
            continue
        counts["fixed"] += 1
        if not parses(report.fixed_text) and parses(text):
            counts["unparsable fixes"] += 1
            print(f"unparsable fix: {origin}")
            continue
        again = process_text_guarded(report.fixed_text, "fuzzed.py", settings, FixOptions(unsafe=True, write=False))
        if again.fixed_text is not None and again.fixed_text != report.fixed_text:
            counts["not idempotent"] += 1
            print(f"not idempotent: {origin}")
    elapsed = time.perf_counter() - started
    print(", ".join(f"{key}: {value}" for key, value in counts.items()))
    print(f"{elapsed:.0f} s in all; slowest program {slowest[0]:.2f} s ({slowest[1]})")


if __name__ == "__main__":
    main()
