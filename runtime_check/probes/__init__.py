"""One probe per rule, in a module named like the rule, keyed by the rule's code.

A probe module defines:

* ``CODE`` (``"DPL007"``) and ``NAME`` (the rule's slug);
* ``install(context)``: runs in the harness, under torch, before the script; patches torch to
  record observations (``context.recorder.emit(kind, ...)``). Observers several probes need
  live in ``shared.py`` and are installed once (``context.once``). One process runs several
  variants of the script in turn: keep per-run bookkeeping in ``context.state`` and look it up
  when called (it is emptied between variants), not in a closure;
* ``judge(case)``: runs in the runner (never imports torch); reads the observations of the
  original and the fixed run and returns a ``Judgement`` (see ``runtime_check/verdicts.py``).

A rule without a probe module gets "not-reproduced" with evidence saying that no probe exists.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from types import ModuleType

from dplint.runtime_check.record import Recorder


class ProbeContext:
    """What `install` gets: the recorder, and a registry so shared observers install once."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.installed: set[str] = set()
        self.state: dict = {}  # observers keep their per-run bookkeeping here (read it at call time)

    def reset(self) -> None:
        """A new variant starts in this process: per-run bookkeeping starts empty."""
        self.state.clear()

    def once(self, name: str) -> bool:
        """True the first time a name is asked for: install it now."""
        if name in self.installed:
            return False
        self.installed.add(name)
        return True


@functools.lru_cache(maxsize=None)
def probe_modules() -> dict[str, ModuleType]:
    """Rule code -> its probe module."""
    found: dict[str, ModuleType] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "shared":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        code = getattr(module, "CODE", None)
        if code is not None:
            found[code] = module
    return found


def install_all(context: ProbeContext) -> None:
    for code in sorted(probe_modules()):
        probe_modules()[code].install(context)
