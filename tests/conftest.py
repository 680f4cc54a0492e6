"""Shared fixtures: one sample set, one Ray session and one precomputed store per test session."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from jobs.config import load_config  # noqa: E402
from jobs.sample import make_sample  # noqa: E402

SHARED_VIDEOS = Path(__file__).resolve().parents[2] / "shared" / "data" / "videos"


def config_for(store: Path, manifest: Path | str, *overrides: str):
    return load_config([
        f"store.uri={store}", "dataset=folder", f"dataset.manifest={manifest}",
        "ray.progress_bars=false", *overrides,
    ])


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory) -> Path:
    return make_sample(tmp_path_factory.mktemp("sample"))


@pytest.fixture(scope="session")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def precomputed(tmp_path_factory, sample_dir, ray_session):
    """The sample set precomputed once with the default config: (config, store, summary)."""
    from pipeline.precompute import StoreSettings, precompute

    cfg = config_for(tmp_path_factory.mktemp("store") / "db", sample_dir)
    summary = precompute(cfg)
    return cfg, StoreSettings.from_config(cfg.store).open(), summary


@pytest.fixture(scope="session")
def embedder():
    from stages.embedders import LabelTextEmbedder

    return LabelTextEmbedder()
