"""What an answer run is tracked by, so a number can be traced to what made it: the code and packages
it ran with, its full resolved config and the overrides it was given (recorded with the run in the
store), its metrics as JSON in its Hydra job folder and, with `tracker=mlflow`, an MLflow run holding
its settings, metrics, provenance and predictions."""

import json
import re
import subprocess
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from vidprep.conf.checks import require
from vidprep.stages.models.profiles import model_prices

# The distributions whose versions change what a run computes (the models' runtimes included).
PACKAGES = ("vidprep", "ray", "lancedb", "pyarrow", "hydra-core", "openai", "numpy", "torch", "transformers",
            "sentence-transformers", "onnxruntime", "faster-whisper", "llama-cpp-python", "av")


def _version(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def git_commit() -> dict | None:
    """The commit of vidprep's own files and whether they differ from it; None outside a git checkout
    (an installed wheel)."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "."],
                                 capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "uncommitted_changes": bool(changed)}


# The LLM client's settings that change answers (its cache, timeouts and retries do not).
LLM_SETTINGS = ("base_url", "model", "profile", "temperature", "max_tokens", "seed")


def run_settings(cfg: DictConfig) -> dict:
    """The resolved settings an answer run is made of (recorded with it; `evaluate` shows how they
    differ from the defaults). A model's price is left out: it changes no answer."""
    llm = OmegaConf.to_container(cfg.llm.client, resolve=True)
    return _unpriced({"method": OmegaConf.to_container(cfg.method, resolve=True),
                      "llm": {"client": {k: llm.get(k) for k in LLM_SETTINGS}},
                      "vision": OmegaConf.to_container(cfg.vision, resolve=True), "search": {"mode": cfg.search.mode},
                      "answer": {"tools": cfg.answer.tools}})


def _unpriced(settings):
    if isinstance(settings, dict):
        return {k: _unpriced(v) for k, v in settings.items() if not k.startswith("usd_per_million")}
    return [_unpriced(v) for v in settings] if isinstance(settings, list) else settings


def provenance(cfg: DictConfig) -> dict:
    """Packages, code commit, the full resolved config and the command line's overrides (None when the
    config was composed in code rather than by a Hydra job)."""
    return {"packages": {name: _version(name) for name in PACKAGES}, "git": git_commit(),
            "overrides": list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else None,
            "config": OmegaConf.to_container(cfg, resolve=True)}


def write_job_metrics(run_key: str, metrics: dict) -> Path | None:
    """The run's scores and costs as metrics.json in its Hydra job folder (each job of a sweep has one);
    None when not run as a Hydra job."""
    if not HydraConfig.initialized():
        return None
    path = Path(HydraConfig.get().runtime.output_dir) / "metrics.json"
    path.write_text(json.dumps({"run_key": run_key, **metrics}, indent=1) + "\n")
    return path


def flat_metrics(metrics: dict) -> dict[str, float]:
    """report()'s nested scores and costs as MLflow metric names: mcq.score, mcq.per_type.CW, costs...."""
    flat = {}
    for task, entry in metrics["tasks"].items():
        for name, value in entry.items():
            if name == "intervals":
                continue
            if isinstance(value, dict):
                flat |= {f"{task}.{name}.{group}": v for group, v in value.items()}
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                flat[f"{task}.{name}"] = value
        if entry["interval"]:
            flat[f"{task}.interval_low"], flat[f"{task}.interval_high"] = entry["interval"]
        for figure, found in entry["intervals"].items():
            for group, bounds in (found.items() if isinstance(found, dict) else [(None, found)]):
                if bounds:
                    name = f"{task}.{figure}" + (f".{group}" if group is not None else "")
                    flat[f"{name}.interval_low"], flat[f"{name}.interval_high"] = bounds
    flat |= {f"costs.{name}": v for name, v in metrics["costs"].items() if isinstance(v, (int, float))}
    # MLflow names take letters, digits and _ - . / : and spaces only ("R@0.5", LVBench's categories).
    return {re.sub(r"[^\w\-./: ]", "_", name): float(v) for name, v in flat.items() if v is not None}


def flatten(tree: dict, prefix: str = "") -> dict:
    """Nested settings as dotted names: {"method": {"max_steps": 1}} -> {"method.max_steps": 1}."""
    flat = {}
    for name, value in tree.items():
        if isinstance(value, dict) and value:
            flat |= flatten(value, f"{prefix}{name}.")
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def beyond_defaults(settings: dict, defaults: dict[str, dict]) -> str:
    """A run's settings as overrides of the method option they differ least from:
    "method=videoagent2 method.max_steps=1 llm.client.model=...", not only its key."""
    recorded = flatten(settings)
    changes = {option: {name: value for name, value in recorded.items() if default.get(name, ...) != value}
               for option, default in defaults.items()}
    option = min(changes, key=lambda o: len(changes[o]))
    changed = (f"{name}={json.dumps(value)}" for name, value in sorted(changes[option].items()))
    return " ".join([f"method={option}", *changed])


def flat_params(settings: dict) -> dict[str, str]:
    # MLflow keeps a parameter's value up to 6,000 characters.
    return {name: json.dumps(value)[:6000] for name, value in flatten(settings).items()}


class MLflowTracker:
    """Logs each answer run as an MLflow run named after its key: its settings as params, its scores and
    costs as metrics, its provenance and predictions (samples.jsonl) as artifacts. Any tracking URI
    MLflow takes; locally a SQLite file needs no server and no network."""

    def __init__(self, tracking_uri: str, experiment: str, artifact_location: str):
        require("mlflow", "mlflow", "sqlalchemy", "alembic", needed_by="tracker=mlflow")
        self.tracking_uri, self.experiment, self.artifact_location = tracking_uri, experiment, artifact_location
        if tracking_uri.startswith("sqlite:///"):
            Path(tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)

    def log(self, run_key: str, settings: dict, metrics: dict, provenance: dict, samples: list[dict]) -> str:
        """The MLflow run id."""
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.tracking_uri)
        experiment = client.get_experiment_by_name(self.experiment)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(
            self.experiment, artifact_location=Path(self.artifact_location).resolve().as_uri())
        run = client.create_run(experiment_id, run_name=run_key, tags={"vidprep.run_key": run_key})
        run_id = run.info.run_id
        client.log_batch(run_id, params=[Param(k, v) for k, v in flat_params(settings).items()],
                         metrics=[Metric(k, v, int(time.time() * 1000), 0) for k, v in flat_metrics(metrics).items()])
        with tempfile.TemporaryDirectory() as folder:
            files = {"provenance.json": json.dumps(provenance, indent=1),
                     "metrics.json": json.dumps(metrics, indent=1),
                     "samples.jsonl": "".join(json.dumps(line) + "\n" for line in samples)}
            for name, text in files.items():
                (Path(folder) / name).write_text(text)
                client.log_artifact(run_id, str(Path(folder) / name))
        client.set_terminated(run_id)
        return run_id


def track_answer_run(cfg: DictConfig, run_key: str, store) -> dict:
    """An answer run's scores and costs: written to its Hydra job folder (metrics.json) and, with a
    `tracker` set, logged there with its settings, provenance and per-question samples."""
    from hydra.utils import instantiate

    from vidprep.evaluation.benchmarks import benchmark_of
    from vidprep.evaluation.exports import sample_lines
    from vidprep.evaluation.scoring import report

    rows = store.predictions([run_key])
    metrics = report(rows, model_prices(cfg.prices), benchmark_of(cfg.dataset.questions._target_))
    write_job_metrics(run_key, metrics)
    if cfg.get("tracker"):
        instantiate(cfg.tracker).log(run_key, run_settings(cfg), metrics, provenance(cfg), sample_lines(rows))
    return metrics
