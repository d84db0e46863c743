"""Runtime checks: `dplint verify` runs a script's findings one at a time with probes and says,
per finding, whether it is real (installed as `dplint.runtime_check`; needs the
`dplint[runtime]` extra, i.e. torch, in the runs, never in the static checker).

Modules: `command` (the click command, no torch), `cli` (signals, report), `runner` (lint,
variants per finding, launch, judge; no torch), `supervise` (nothing outlives verify: tokens,
parent-death signals, the reaper), `overlay` (the scratch overlay of the user's folder),
`harness` (runs inside each process: probes, budget, variants in turn), `budget` (loops
truncated, not the script), `probes/` (one module per rule, keyed by its code), `verdicts`,
`record`, `lines`, `remap` (`--cpu-remap`).
"""
