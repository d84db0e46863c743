"""`python -m dplint.runtime_check SCRIPT [-- ARGS...]`: the same as `dplint verify`."""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):  # as in `dplint/__main__.py`: not the checked tree's modules
    sys.path.pop(0)

from dplint.runtime_check.command import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog_name="python -m dplint.runtime_check"))
