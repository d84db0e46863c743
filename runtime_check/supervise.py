"""Nothing outlives `verify`: parent-death signals, the reaper, and killing tagged processes.

No torch here. Three layers, because each alone has a hole:

* every run, and every process it starts, carries `DPLINT_VERIFY_TOKEN=<session>-<run>` in
  its environment; `kill_tagged` kills whatever still carries it (Linux `/proc`);
* the launcher and each rank ask the kernel for SIGKILL when their parent dies
  (`PR_SET_PDEATHSIG`, Linux), so a killed `verify` takes its runs with it at once;
* the reaper: a small process in a session of its own, started first, holding the read end of
  a pipe whose write end only `verify` has. When `verify` ends in any way (even SIGKILL, even
  a kill of its whole process group), the pipe closes and the reaper kills every process
  carrying the session's token (also the ones that left for a session of their own, which no
  parent-death signal reaches) and removes the session's temporary folder.

    python reaper.py SESSION_TOKEN FOLDER     (stdin: the pipe)
    python supervise.py PARENT_PID -- COMMAND...  (exec COMMAND, dying with PARENT_PID)
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

TOKEN_VARIABLE = "DPLINT_VERIFY_TOKEN"
PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: int | None = None) -> None:
    """SIGKILL this process when its parent dies (Linux; elsewhere the reaper covers it)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)  # the parent died before the request: it would never fire


def tagged_processes(prefix: str) -> list[int]:
    """Live processes (not this one) whose environment holds `DPLINT_VERIFY_TOKEN=<prefix>...`."""
    marker = f"{TOKEN_VARIABLE}={prefix}".encode()
    found = []
    if not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if any(item.startswith(marker) for item in handle.read().split(b"\0")):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_tagged(prefix: str, rounds: int = 100) -> None:
    """SIGKILL every process tagged with the prefix, until none is left (a few rounds: a dying
    parent may fork once more)."""
    for _ in range(rounds):
        pids = tagged_processes(prefix)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def reap(token: str, folder: str) -> None:
    """Wait for the pipe on stdin to close, then kill the session's processes and remove its folder."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)  # only the pipe ends the reaper
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    kill_tagged(token)
    if folder:  # none with --keep
        shutil.rmtree(folder, ignore_errors=True)


def start_reaper(token: str, folder: str):
    """The reaper process (see the module docstring); keep the returned Popen's stdin open."""
    import subprocess

    env = {key: value for key, value in os.environ.items() if key != TOKEN_VARIABLE}
    return subprocess.Popen(
        [sys.executable, "-S", os.path.abspath(__file__), "reap", token, folder],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, env=env,
    )


def guarded(command: list[str]) -> list[str]:
    """`command`, run so that it dies with the process that starts it (this one)."""
    return [sys.executable, "-S", os.path.abspath(__file__), "exec", str(os.getpid()), "--", *command]


if __name__ == "__main__":
    if sys.argv[1] == "reap":
        reap(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "exec":
        die_with_parent(int(sys.argv[2]))
        command = sys.argv[4:]
        os.execv(command[0], command)
