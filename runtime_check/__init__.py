"""Runtime checks: run a script and its fixed version with probes (installed as `dplint.runtime_check`)."""
