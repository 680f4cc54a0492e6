"""Nothing a command started outlives it, however the command ends (kill -9 included).

A killed driver leaves Ray's processes running: the raylet's agents are reparented to init and stay.
So a watchdog outside the command notes, while the command runs, every process descended from it in its
session, and once the command has ended kills those still running. A process meant to outlive the
command (the shared local LLM server) starts a session of its own and is left alone. Linux only
(/proc): elsewhere nothing is watched.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# How often the command's descendants are listed while it runs.
POLL_S = 0.5
# After the command ended: processes started in its last moment may appear after the first sweep.
SWEEPS, SWEEP_INTERVAL_S = 10, 0.3


def watch_this_command() -> None:
    """Start the watchdog of this process."""
    if sys.platform.startswith("linux"):
        # In a session of its own: it is not the command's, and a signal to the command's group misses it.
        subprocess.Popen([sys.executable, "-m", __name__, str(os.getpid())], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _processes() -> dict[int, tuple[int, int, int, str]]:
    """Every running process: pid -> (parent pid, session id, start time, state)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):  # gone meanwhile
                continue
            found[int(entry.name)] = (int(fields[1]), int(fields[3]), int(fields[19]), fields[0])
    return found


def _descendants(root: int, session: int, processes: dict) -> dict[int, int]:
    """pid -> start time of each process below `root` in `session`."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, stack = {}, [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if processes[child][1] == session:
                found[child] = processes[child][2]
                stack.append(child)
    return found


def main(command: int) -> None:
    processes = _processes()
    if command not in processes:
        return
    session, started, known = processes[command][1], processes[command][2], {}
    # Until the command is gone or a zombie (a start time that differs: its pid was taken by another).
    while (state := processes.get(command)) and state[2] == started and state[3] != "Z":
        known.update(_descendants(command, session, processes))
        time.sleep(POLL_S)
        processes = _processes()
    for _ in range(SWEEPS):
        processes = _processes()
        for pid in list(known):
            known.update(_descendants(pid, session, processes))
        for pid, start in known.items():
            # Still the process noted (a pid is reused only by a process started later), and running.
            if pid in processes and processes[pid][2] == start and processes[pid][3] != "Z":
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(SWEEP_INTERVAL_S)


if __name__ == "__main__":
    main(int(sys.argv[1]))
