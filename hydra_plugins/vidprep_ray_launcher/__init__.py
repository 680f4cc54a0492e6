"""vidprep's Hydra launcher: every job of a sweep runs as a Ray task, on the cluster named by
`ray.address` (a local Ray when null), all against the same store:

    vidprep answer -m hydra/launcher=ray_jobs method=videoagent2,traveler,caviar

Hydra takes launchers only from the `hydra_plugins` namespace, so this is the one module installed
outside `vidprep`. Config: `conf/hydra/launcher/ray_jobs.yaml`.
"""

from collections.abc import Sequence
from pathlib import Path

import ray
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict


def sweep_job(hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig,
              hydra_state: dict) -> tuple[JobReturn, int]:
    """One job in a Ray worker; also says whether its run had failures (the sweep exits 3 when any had)."""
    from vidprep.jobs import errors

    setup_globals()
    Singleton.set_state(hydra_state)
    # A worker process runs job after job: count this job's failures only.
    errors.jobs_with_failures = 0
    result = run_job(hydra_context=hydra_context, task_function=task_function, config=config,
                     job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    return result, errors.jobs_with_failures


class RayJobsLauncher(Launcher):
    def __init__(self, init: DictConfig, remote: DictConfig) -> None:
        # `ray.init` and `ray.remote` options; a null one keeps Ray's default, except the address: a null
        # one starts a local Ray, as `ray.address` says (Ray's None joins a cluster `ray start` began here).
        options = {k: v for k, v in OmegaConf.to_container(init, resolve=True).items() if v is not None}
        self.init = options | {"address": options.get("address") or "local"}
        self.remote = OmegaConf.to_container(remote, resolve=True)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from vidprep.jobs import errors

        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(self.config.hydra.sweep.dir).mkdir(parents=True, exist_ok=True)
        if not ray.is_initialized():
            ray.init(**self.init)
        job = ray.remote(sweep_job).options(**self.remote)
        runs = []
        for num, overrides in enumerate(job_overrides, start=initial_job_idx):
            print(f"#{num}: {' '.join(filter_overrides(overrides))}")
            config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(config):
                config.hydra.job.id = f"{config.hydra.job.name}_{num}"
                config.hydra.job.num = num
            runs.append(job.remote(self.hydra_context, self.task_function, config, Singleton.get_state()))
        results = ray.get(runs)
        errors.jobs_with_failures += sum(failures for _, failures in results)
        return [result for result, _ in results]
