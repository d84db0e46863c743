"""`python -m dplint.runtime_check SCRIPT [-- ARGS...]`: the same as `dplint verify`."""

import sys

from dplint.runtime_check.command import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog_name="python -m dplint.runtime_check"))
