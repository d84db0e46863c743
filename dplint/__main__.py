"""`python -m dplint`: the `dplint` command."""

import os
import sys

# Python puts the current folder first on `sys.path` for `-m`: a checked tree's own `click.py`
# or `json.py` would then be imported in place of the library, and dplint would run the code it
# checks. Taken off before anything else is imported, as pip's `__main__` does.
if sys.path and sys.path[0] in ("", os.getcwd()):
    sys.path.pop(0)

from dplint.cli import entry_point  # noqa: E402

if __name__ == "__main__":
    entry_point()
