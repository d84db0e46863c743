"""Branch conditions and paths, as plain data: what one branch test on a path is
(``Condition``: its text, whether it holds, the scope owning its root name, and what it implies:
the parts of ``a and b``, a count of GPUs against one), and whether paths can run together
(``consistent``, ``self_consistent``, ``with_implied``), what a path keeps when a value crosses
into another file (``_portable``), and joining two paths (``_join``).

Nothing here reads a file: ``dplint.flow_conditions`` turns a test expression into a Condition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence


@dataclass(frozen=True)
class Condition:
    test: str  # the test's source without whitespace; `not x` is stored as x
    holds: bool
    scope: int = 0  # id() of the function owning the test's root name (0: global/unknown)
    # Conditions known wherever the test holds / fails (not part of its identity): the parts
    # of `a and b` where it holds, of `a or b` where it fails.
    if_holds: tuple = field(default=(), compare=False)
    if_fails: tuple = field(default=(), compare=False)

    def negated(self) -> "Condition":
        return Condition(self.test, not self.holds, self.scope, self.if_holds, self.if_fails)

    def implied(self) -> tuple:
        """The conditions this one implies: the parts of a compound test, and for a count of
        GPUs or processes (`n_gpu`, `len(gpu_ids)`, `world_size`, a whole number, never
        negative): `n == 1` holding is `n > 1` failing and `n > 1` holding is `n == 1`
        failing. `n == 1` failing is read as `n > 1` holding: the zero count (no GPU at all)
        is a run the code does not say it supports, and nothing is reported for it.

        Several GPUs (a GPU count, not a process count, above one: `len(gpu_ids) > 1`,
        `torch.cuda.device_count() > 1`) imply `torch.cuda.is_available()`: `device_count()`
        is 0 without CUDA, and a run naming several GPU ids on a machine without CUDA is not
        one the code supports (`if torch.cuda.is_available() and len(ids) > 1: DataParallel`
        read back under `len(ids) > 1` alone is not reported); several ids in a list imply its
        first is a GPU id (`len(ids) > 1` holding is `ids[0] < 0` failing: `-1`, the usual
        "run on the CPU" id, comes alone). A process count (`world_size`) implies nothing
        about CUDA: several processes run on CPUs too (gloo)."""
        found = self.if_holds if self.holds else self.if_fails
        count = _count_test(self.test)
        if count is None:
            return found
        subject, operator = count.group(1), count.group(2)
        several = self.holds != (operator == "==")
        if several and _gpu_count(self.test):
            found = (*found, _CUDA_AVAILABLE)
            if subject.startswith("len(") and subject.endswith(")"):
                # `len(gpu_ids) > 1`: the first id is a GPU, not the CPU marker (`gpu_ids[0] < 0`)
                found = (*found, Condition(subject[4:-1] + "[0]<0", False, 0))
        if operator == "==":
            return (*found, Condition(subject + ">1", not self.holds, self.scope))
        return (*found, Condition(subject + "==1", False, self.scope)) if self.holds else found

    @property
    def tests_process_group(self) -> bool:
        """`dist.is_initialized()`, `torch.distributed.is_initialized()`: whether the process
        group is up, which a DistributedDataParallel needs (not `torch.cuda.is_initialized()`)."""
        return self.test.endswith("is_initialized()") and not self.test.endswith("cuda.is_initialized()")


Path = tuple  # tuple[Condition, ...]


def consistent(first: Sequence[Condition], second: Sequence[Condition]) -> bool:
    """No test holds on one path and fails on the other (with what each condition implies:
    `a and b` holding on one path, `not b` on the other)."""
    if any(_implies_more(c) for c in (*first, *second)):
        return self_consistent((*first, *second))
    seen = {(c.test, c.scope): c.holds for c in first}
    return all(seen.get((c.test, c.scope), c.holds) == c.holds for c in second)


def _implies_more(condition: Condition) -> bool:
    return bool(condition.if_holds or condition.if_fails or _count_test(condition.test))


def self_consistent(path: Sequence[Condition]) -> bool:
    """No test both holds and fails on the path with all it implies (`with_implied`), and no
    compound test fails while all its parts hold (`a and b` failing where `a` and `b` hold)."""
    path = with_implied(path) if any(_implies_more(c) for c in path) else tuple(path)
    seen: dict = {}
    for condition in path:
        if seen.setdefault((condition.test, condition.scope), condition.holds) != condition.holds:
            return False
    for condition in path:
        other = condition.if_fails if condition.holds else condition.if_holds
        if other and all(_known(seen, c, 3) for c in other):
            return False
    return True


def _known(seen: dict, condition: Condition, depth: int) -> bool:
    """Whether the path has the condition: itself, or all its parts (`a and b` holding where
    `a` and `b` hold; a flag set under `a` and `b` holding where they do, `_with_flag_origin`)."""
    if seen.get((condition.test, condition.scope)) == condition.holds:
        return True
    parts = condition.if_holds if condition.holds else condition.if_fails
    return bool(parts) and depth > 0 and all(_known(seen, c, depth - 1) for c in parts)


def with_implied(path: Sequence[Condition]) -> tuple:
    """The conditions of a path and all they imply (`Condition.implied`)."""
    out: list = []
    stack = list(reversed(path))
    while stack:
        condition = stack.pop()
        if any(condition == c and condition.holds == c.holds for c in out):
            continue
        out.append(condition)
        stack.extend(condition.implied())
    return tuple(out)


# A test of a count of GPUs or processes against one: `n_gpu==1`, `len(args.gpu_ids)>1`.
_COUNT_TEST = re.compile(r"^(len\(.*\)|.*(?:device_count\(\)|world_size|gpu|nproc|num_process)\w*)(==|>)1$", re.IGNORECASE)


# A count of GPUs (not of processes): what `Condition.implied` reads as needing CUDA.
_GPU_COUNT = re.compile(r"gpu|device|cuda", re.IGNORECASE)


_PROCESS_COUNT = re.compile(r"world_size|nproc|num_process|rank", re.IGNORECASE)


_CUDA_AVAILABLE = Condition("torch.cuda.is_available()", True, 0)


@lru_cache(maxsize=4096)
def _count_test(text: str):
    return _COUNT_TEST.match(text)


def _portable(conditions: Sequence[Condition]) -> Path:
    """The conditions kept when a value crosses into another file, whose names the others are
    not in: tests of torch's own state (`torch.cuda.is_available()`,
    `torch.distributed.is_initialized()`), and a count of the run's GPUs spelled the same way
    (`len(device_ids) > 1`, `n_gpu == 1`: one run has one number of GPUs, as
    `wrapped_on_some_machines` reads a factory's hardware test repeated by its caller). A
    bare model that stays bare because CUDA is missing or one GPU id was given, handed to a
    checkpoint helper of another file that tests the same count, keeps that path."""
    return tuple(c for c in conditions if c.scope == 0 and (
        c.test.startswith(("torch.cuda.", "torch.distributed.")) or _gpu_count(c.test)))


def _gpu_count(text: str) -> bool:
    """A test of a count of GPUs against one (`len(gpu_ids) > 1`), not of processes."""
    count = _count_test(text)
    return count is not None and bool(_GPU_COUNT.search(count.group(1))) and not _PROCESS_COUNT.search(count.group(1))


def _join(first: Sequence[Condition], second: Sequence[Condition]) -> Path:
    out = list(first)
    for condition in second:
        if condition not in out:
            out.append(condition)
    return tuple(out)
