"""Turning the user's mistakes (bad config, bad manifest) into one clear line instead of a traceback,
the exit statuses every command shares, and the clock a command's summary measures its time by."""

import os
import sys
import time
from pathlib import Path
from contextlib import contextmanager

from hydra.errors import (
    ConfigCompositionException,
    InstantiationException,
    OverrideParseException,
)
from omegaconf.errors import MissingMandatoryValue, ValidationError

from vidprep.conf.checks import ArtifactMissing, ConfigError, EndpointUnreachable, ManifestError, ModelRefused

# A bad config, manifest, missing artifact or unreachable endpoint: nothing was done.
EXIT_USER_ERROR = 2
# The run finished, but some videos or questions failed (each named in the summary).
EXIT_FAILURES = 3

USER_ERRORS = (ConfigError, ManifestError, ArtifactMissing, EndpointUnreachable, ModelRefused, MissingMandatoryValue,
               OverrideParseException, ConfigCompositionException)


@contextmanager
def user_errors():
    try:
        yield
    except USER_ERRORS as error:
        _exit(error)
    except InstantiationException as error:
        # Hydra wraps what a constructor raised; a ConfigError inside is still the user's mistake.
        if isinstance(error.__cause__, USER_ERRORS):
            _exit(error.__cause__)
        raise


def _exit(error: Exception) -> None:
    if isinstance(error, MissingMandatoryValue):
        message = f"{error.full_key} is not set: give it on the command line ({error.full_key}=...)"
    elif isinstance(error.__cause__, ValidationError):
        # A value its class's structured config refuses (conf/: `/schema@...`): the setting, then why.
        message = f"{error.__cause__.full_key}: {str(error.__cause__).splitlines()[0]}"
    else:
        # One line: Hydra's messages list the options of a group on lines of their own.
        first, *rest = [line.strip() for line in str(error).splitlines() if line.strip()] or [repr(error)]
        message = first + (f" ({' '.join(rest)})" if rest else "")
    print(f"error: {message}", file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)


def _process_started() -> float:
    """When this process started, on the monotonic clock: a summary's wall time is what the user waited
    for (the interpreter's start and every import included), not only the pipeline's. Linux says it in
    /proc (both clocks count from boot); elsewhere, when this module was imported."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            # The fields after the command name (which may hold spaces): starttime is the 20th of them.
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            age = float(uptime.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK")
        return time.monotonic() - max(age, 0.0)
    except (OSError, ValueError, IndexError):
        return time.monotonic()


_command_started: float | None = _process_started()


def job_started() -> float:
    """When the calling job started: the command's start for its first job, now for each later job of a sweep."""
    global _command_started
    started, _command_started = _command_started, None
    return time.monotonic() if started is None else started


def single_run() -> bool:
    """Whether this job is the process's only one (not one job of a `--multirun` sweep, whose later jobs
    reuse its Ray)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return not (HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN)


# Jobs of this process's sweep that had failures: the sweep runs every job, then exits with EXIT_FAILURES.
jobs_with_failures = 0


def finish(lines: list[str], failed: int) -> None:
    """Print a run's summary (and keep it in a Hydra job's log); exit with EXIT_FAILURES when anything in it failed (a sweep's job lets the
    sweep go on, and `vidprep` exits so once it is over)."""
    global jobs_with_failures
    from hydra.core.hydra_config import HydraConfig

    print("\n".join(lines))
    if HydraConfig.initialized():
        # The job's log in its Hydra folder (each job of a sweep has one) keeps what it printed.
        job = HydraConfig.get()
        with open(Path(job.runtime.output_dir) / f"{job.job.name}.log", "a") as log:
            log.write("\n".join(lines) + "\n")
    if not failed:
        return
    print(f"{failed} failed (see above)", file=sys.stderr)
    if single_run():
        sys.exit(EXIT_FAILURES)
    jobs_with_failures += 1
