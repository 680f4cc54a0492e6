"""Where models run: the `device` setting of every model stage and the Ray GPU share it asks for,
checked on this CPU-only machine against the real runtimes (torch, onnxruntime, CTranslate2)."""

import numpy as np
import pytest

from vidprep.conf.checks import ConfigError
from vidprep.pipeline.plan import build_plan
from vidprep.pipeline.runner import declared_resources, ray_args, stage_resources
from vidprep.stages.models.devices import check_device, ctranslate2_device, onnx_providers, torch_device, wants_cuda
from vidprep.stages.models.embedders import LabelTextEmbedder
from vidprep.stages.models.vision import ImageNetClassifier
from vidprep.stages.transcribe import TranscribeSpeech
from tests.conftest import config_for

MODEL_STAGES = {"frame_embeddings", "segment_captions", "frame_captions", "transcript"}
ALL_ON_CPU = ("model.device=cpu", "describer.device=cpu", "stages.transcript.device=cpu")


def test_device_settings_are_checked_by_form():
    for good in ("auto", "cpu", "cuda", "cuda:1"):
        assert check_device("model.device", good) == good
    for bad in ("gpu", "cuda:x", "cpu:0", "cuda:"):
        with pytest.raises(ConfigError, match=rf"model.device must be auto, cpu, cuda or cuda:N, got '{bad}'"):
            check_device("model.device", bad)
    with pytest.raises(ConfigError, match="stages.transcript.device"):
        TranscribeSpeech(device="metal")


def test_auto_takes_cuda_only_where_the_runtime_sees_a_device():
    assert wants_cuda("auto", 1, "torch") and not wants_cuda("auto", 0, "torch")
    assert not wants_cuda("cpu", 4, "torch") and wants_cuda("cuda:1", 2, "torch")
    with pytest.raises(ConfigError, match="device 'cuda:2': torch sees 2 CUDA devices here"):
        wants_cuda("cuda:2", 2, "torch")


def test_every_runtime_here_resolves_auto_to_the_cpu_and_refuses_cuda():
    # This machine has no GPU (and the CPU wheels of torch and onnxruntime): `auto` must run, `cuda` must
    # fail with a one-line reason instead of quietly running on the CPU.
    assert torch_device("auto") == "cpu"
    assert onnx_providers("auto") == ["CPUExecutionProvider"]
    assert ctranslate2_device("auto") == ("cpu", 0)
    with pytest.raises(ConfigError, match="torch sees 0 CUDA devices"):
        torch_device("cuda")
    with pytest.raises(ConfigError, match="no CUDA provider"):
        onnx_providers("cuda")
    with pytest.raises(ConfigError, match="CTranslate2 sees 0 CUDA devices"):
        ctranslate2_device("cuda:0")


def test_models_load_on_the_device_they_are_given():
    embedder = LabelTextEmbedder(device="auto")
    assert embedder._text_encoder.device.type == "cpu"
    assert embedder.classifier._session.get_providers() == ["CPUExecutionProvider"]
    jpeg = _photo_jpeg()
    vectors, _ = embedder.embed_images([jpeg])
    assert vectors.shape == (1, 384) and np.isclose(np.linalg.norm(vectors[0]), 1.0)
    with pytest.raises(ConfigError, match="no CUDA provider"):
        ImageNetClassifier(device="cuda").probabilities(jpeg)


def _photo_jpeg() -> bytes:
    import io

    from PIL import Image
    from skimage import data

    out = io.BytesIO()
    Image.fromarray(data.astronaut()).save(out, format="JPEG")
    return out.getvalue()


def test_model_stages_ask_for_a_gpu_share_only_where_their_model_runs_on_cuda(tmp_path):
    plan = build_plan(config_for(tmp_path, tmp_path).stages)
    assert not any(r.gpu_share(24) for r in declared_resources(plan, gpus=0, cluster=False).values())
    on_a_gpu_node = declared_resources(plan, gpus=1, cluster=False)
    assert {n for n, r in on_a_gpu_node.items() if r.gpu_share(24)} == MODEL_STAGES
    assert sum(r.gpu_share(24) for r in on_a_gpu_node.values()) <= 1
    # A bigger GPU holds more of the same models.
    assert sum(ray_args(r, 80).get("num_gpus", 0) for r in on_a_gpu_node.values()) < 0.5
    on_cpu = build_plan(config_for(tmp_path, tmp_path, *ALL_ON_CPU).stages)
    assert not any(r.gpu_share(24) for r in declared_resources(on_cpu, gpus=1, cluster=False).values())


def test_cuda_asked_of_a_local_ray_without_gpus_fails_before_the_run(tmp_path, ray_session):
    cfg = config_for(tmp_path, tmp_path, "stages.transcript.device=cuda")
    plan = build_plan(cfg.stages)
    with pytest.raises(ConfigError, match="stages.transcript: its model's device is 'cuda' but this Ray has no GPU"):
        stage_resources(cfg, plan)
    # A cluster may add GPU nodes when asked: there the share is requested.
    assert ray_args(declared_resources(plan, gpus=0, cluster=True)["transcript"], 24)["num_gpus"] == 0.25
    # The user's own request wins over the declared one; a setting that is no resource is named.
    cpu_cfg = config_for(tmp_path, tmp_path, *ALL_ON_CPU, "ray.address=auto", "+resources.transcript.gpus=0.5")
    assert stage_resources(cpu_cfg, build_plan(cpu_cfg.stages))["transcript"].gpus == 0.5
    bad = config_for(tmp_path, tmp_path, "+resources.transcript.num_gpus=0.5")
    with pytest.raises(ConfigError, match="resources.transcript.num_gpus: Resources has no setting 'num_gpus' "
                                          r"\(its settings: cpus, gpus, gpu_memory_gb, pool_size, custom\)"):
        stage_resources(bad, build_plan(bad.stages))
