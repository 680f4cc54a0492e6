"""Shared fixtures: one sample set, one Ray session and one precomputed store per test session."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# This session's own local LLM server, apart from a user's (8765) and from other test sessions.
os.environ["VIDPREP_LLM_PORT"] = str(_free_port())

from vidprep.jobs.config import load_config  # noqa: E402
from vidprep.jobs.sample import make_sample  # noqa: E402
from vidprep.stages.models.profiles import ModelProfile  # noqa: E402

# A model behind the scripted endpoint that takes what the big hosted ones take.
SCRIPTED_PROFILE = ModelProfile("scripted", context_tokens=128000, max_output_tokens=16384, max_images=500)


def _shared_videos() -> Path:
    """The team's real odd videos (../shared/data/videos beside the checkout, or $VIDPREP_SHARED_DATA)."""
    candidates = [Path(os.environ["VIDPREP_SHARED_DATA"]) / "videos"] if "VIDPREP_SHARED_DATA" in os.environ else []
    candidates += [parent / "shared" / "data" / "videos" for parent in Path(__file__).resolve().parents]
    candidates.append(Path("/work/shared/data/videos"))
    return next((c for c in candidates if (c / "corrupted.mp4").exists()), candidates[-1])


SHARED_VIDEOS = _shared_videos()
needs_shared_videos = pytest.mark.skipif(
    not (SHARED_VIDEOS / "corrupted.mp4").exists(),
    reason="the team's real odd videos (../shared/data/videos) are not on this machine; set VIDPREP_SHARED_DATA",
)



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

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def local_llm(tmp_path_factory):
    """The real llama.cpp server with the shipped SmolLM2, once per test session."""
    from vidprep.jobs.serve_llm import ensure_local_llm

    cfg = config_for(tmp_path_factory.mktemp("unused"), ".")
    process = ensure_local_llm(cfg.llm, tmp_path_factory.mktemp("llm") / "server.log")
    yield cfg.llm
    if process is not None:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def precomputed(tmp_path_factory, sample_dir, ray_session, local_llm):
    """The sample set precomputed once with the default config: (config, store, summary)."""
    from vidprep.pipeline.precompute import precompute
    from vidprep.store.settings import StoreSettings

    cfg = config_for(tmp_path_factory.mktemp("store") / "db", sample_dir)
    summary = precompute(cfg)
    return cfg, StoreSettings.from_config(cfg.store).open(), summary


@pytest.fixture(scope="session")
def embedder():
    from vidprep.stages.models.embedders import LabelTextEmbedder

    return LabelTextEmbedder()


@pytest.fixture()
def s3_server(tmp_path):
    """moto's S3 server on loopback, with one bucket; yields the environment a user would set and a client."""
    port = _free_port()
    moto = Path(sys.executable).parent / "moto_server"
    server = subprocess.Popen([str(moto), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    env = {"AWS_ACCESS_KEY_ID": "vidprep-test", "AWS_SECRET_ACCESS_KEY": "vidprep-test-secret",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    try:
        import boto3

        client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                              aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
        for _ in range(100):
            try:
                client.create_bucket(Bucket="vidprep-test")
                break
            except Exception:  # noqa: BLE001 - the server is still starting
                time.sleep(0.1)
        yield env | {"client": client}
    finally:
        server.kill()
        server.wait()
