"""Runtime checks: `dplint verify` runs a script and its fixed copy with probes and says, per
finding, whether it is real (installed as `dplint.runtime_check`; needs the `dplint[runtime]`
extra, i.e. torch, in the runs, never in the static checker).

Modules: `cli` (options, report), `runner` (lint, fix, launch, judge; no torch), `harness`
(runs inside each process: probes, budget, runpy), `probes/` (one module per rule, keyed by
its code), `verdicts`, `record`, `lines`, `remap` (`--cpu-remap`).
"""
