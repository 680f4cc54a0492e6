"""The CLIP backend loads a real (tiny, randomly initialised) CLIP from a local folder."""

import json
import string

import pytest

from vidprep.pipeline.plan import build_plan
from vidprep.pipeline.precompute import precompute
from vidprep.store.settings import StoreSettings
from vidprep.store.keys import content_id
from tests.conftest import config_for

PROJECTION = 24


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    from transformers import (
        CLIPConfig,
        CLIPImageProcessor,
        CLIPModel,
        CLIPProcessor,
        CLIPTokenizer,
    )

    folder = tmp_path_factory.mktemp("tiny-clip")
    symbols = list(string.ascii_lowercase + string.digits + ".,'")
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for symbol in symbols + [s + "</w>" for s in symbols]:
        vocab[symbol] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    config = CLIPConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, max_position_embeddings=64),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=8),
        projection_dim=PROJECTION,
    )
    CLIPModel(config).save_pretrained(folder)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def test_clip_backend_writes_vectors_of_its_projection_size(tmp_path, sample_dir, tiny_clip, ray_session, local_llm):
    manifest = tmp_path / "one.csv"
    manifest.write_text(f"path\n{sample_dir / 'places.mp4'}\n")
    cfg = config_for(tmp_path / "db", manifest, "model=clip", f"model.name_or_path={tiny_clip}")
    summary = precompute(cfg)
    assert summary.done == 1 and summary.rows["frame_embeddings"] == 10
    store = StoreSettings.from_config(cfg.store).open()
    plan = build_plan(cfg.stages)
    table = store.scan(f"frame_embeddings_{PROJECTION}")
    assert table.num_rows == 10 and set(table["model"].to_pylist()) == {str(tiny_clip)}
    assert len(table["vector"][0].as_py()) == PROJECTION
    embedder = plan.stages["frame_embeddings"].embedder
    hits = store.search(embedder.embed_texts(["a flower"])[0], plan.keys["frame_embeddings"],
                        content_id(sample_dir / "places.mp4"), k=3)
    assert len(hits) == 3 and all(-1.0 <= h.score <= 1.0 for h in hits)
