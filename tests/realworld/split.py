"""The blind split of the real-world benchmark: which repositories are kept out of development.

A repository is blind when the first byte of sha256(``owner/name``) is below 64 (a quarter of
all names).  The rule depends on the name alone, so a repository never changes part when rows
are added or removed, and its checkouts at several commits all land in the same part.
``blind.txt`` freezes the outcome for the repositories of ``cases.jsonl``
(``tests/test_realworld_split.py`` checks that it equals the rule).

Policy (README.md, "Blind split"): no rule change is made by reading a blind row, its note or
its miss; blind figures are scored only to be reported next to the developed-on ones.

    python tests/realworld/split.py            # print the parts' sizes
    python tests/realworld/split.py --write    # rewrite blind.txt after new repositories
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLIND_FILE = HERE / "blind.txt"
CASES = HERE / "cases.jsonl"
BLIND_BELOW = 64  # first hash byte below this: blind (64/256, a quarter)
BLIND, DEVELOPED = "blind", "developed"


def is_blind(repo: str) -> bool:
    return hashlib.sha256(repo.encode("utf-8")).digest()[0] < BLIND_BELOW


def part_of(repo: str, frozen: frozenset[str] | None = None) -> str:
    """The part a repository is scored in: the frozen list's, and the rule's for any other name."""
    frozen = FROZEN if frozen is None else frozen
    return BLIND if repo in frozen or is_blind(repo) else DEVELOPED


def manifest_repos(path: Path = CASES) -> list[str]:
    return sorted({json.loads(text)["repo"] for text in path.read_text().splitlines() if text.strip()})


def frozen_blind(path: Path = BLIND_FILE) -> list[str]:
    """The committed list: one ``owner/name`` a line; '#' starts a comment."""
    names = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [name for name in names if name]


FROZEN = frozenset(frozen_blind()) if BLIND_FILE.exists() else frozenset()


def blind_text(repos) -> str:
    blind = sorted(repo for repo in set(repos) if is_blind(repo))
    header = ("# Blind repositories of cases.jsonl (tests/realworld/split.py: sha256(owner/name)[0] < 64).\n"
              "# Never read for development: no rule change comes from these rows or their misses.\n")
    return header + "".join(f"{repo}\n" for repo in blind)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite blind.txt from cases.jsonl")
    args = parser.parse_args(argv)
    repos = manifest_repos()
    if args.write:
        BLIND_FILE.write_text(blind_text(repos))
    blind = [repo for repo in repos if is_blind(repo)]
    print(f"repositories {len(repos)}: blind {len(blind)}, developed {len(repos) - len(blind)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
