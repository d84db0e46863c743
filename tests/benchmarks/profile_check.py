"""Profile `dplint check` in one process, the per-file work included.

    python tests/benchmarks/profile_check.py OUT.prof [dplint check arguments...]

The runner lints each file on a thread with a deep stack (`call_with_deep_stack`), which
cProfile does not follow; here that call runs inline (with a raised recursion limit) and
the pool is off (`--jobs 1`), so the profile holds everything. Read it with
`python -m pstats OUT.prof`. Not a test.
"""

import cProfile
import sys

import dplint.runner


def inline(function, *args):
    return function(*args)


def main() -> None:
    out, arguments = sys.argv[1], sys.argv[2:]
    sys.setrecursionlimit(20000)
    dplint.runner.call_with_deep_stack = inline
    from dplint.cli import main as cli

    sys.argv = ["dplint", "check", "--jobs", "1", "--no-cache", "--exit-zero", *arguments]
    profiler = cProfile.Profile()
    try:
        profiler.runcall(cli)
    except SystemExit:
        pass
    finally:
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()
