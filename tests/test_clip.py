"""The CLIP backend loads a real (tiny, randomly initialised) CLIP from a local folder."""

import shutil

import pytest

from vidprep.jobs.bench.gpu import make_random_clip
from vidprep.pipeline.plan import build_plan
from vidprep.pipeline.precompute import precompute
from vidprep.store.settings import StoreSettings
from vidprep.store.keys import content_id
from tests.conftest import config_for

PROJECTION = 24


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    return make_random_clip(tmp_path_factory.mktemp("tiny-clip"), base_size=False, projection=PROJECTION)


def test_clip_backend_writes_vectors_of_its_projection_size(tmp_path, sample_dir, tiny_clip, precomputed):
    # A copy of the shared store: only the embedding stage, keyed by its model, has anything to do.
    shutil.copytree(precomputed[0].store.uri, tmp_path / "db")
    manifest = tmp_path / "one.csv"
    manifest.write_text(f"path\n{sample_dir / 'places.mp4'}\n")
    cfg = config_for(tmp_path / "db", manifest, "model=clip", f"model.name_or_path={tiny_clip}")
    summary = precompute(cfg)
    assert (summary.done, summary.stage_runs, summary.rows["frame_embeddings"]) == (1, 1, 10)
    store = StoreSettings.from_config(cfg.store).open()
    plan = build_plan(cfg.stages)
    table = store.scan(f"frame_embeddings_{PROJECTION}")
    assert table.num_rows == 10 and set(table["model"].to_pylist()) == {str(tiny_clip)}
    assert len(table["vector"][0].as_py()) == PROJECTION
    embedder = plan.stages["frame_embeddings"].embedder
    hits = store.search(embedder.embed_texts(["a flower"])[0], plan.keys["frame_embeddings"],
                        content_id(sample_dir / "places.mp4"), k=3)
    assert len(hits) == 3 and all(-1.0 <= h.score <= 1.0 for h in hits)


def test_clip_loads_on_the_device_it_is_given(tiny_clip):
    from vidprep.conf.checks import ConfigError
    from vidprep.stages.models.embedders import ClipEmbedder

    assert ClipEmbedder(str(tiny_clip), device="auto")._model[0].device.type == "cpu"
    with pytest.raises(ConfigError, match="device 'cuda': torch sees 0 CUDA devices here"):
        ClipEmbedder(str(tiny_clip), device="cuda").embed_texts(["a flower"])
