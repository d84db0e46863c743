"""`python -m dplint.runtime_check SCRIPT [-- ARGS...]`: the same as `dplint verify`."""

import sys


def run() -> int:
    try:
        from dplint.runtime_check.cli import main
    except ImportError as error:
        print(f"dplint: error: verify needs the runtime extra: pip install 'dplint[runtime]' ({error})", file=sys.stderr)
        return 2
    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(run())
