"""Scale out: a multi-node Ray cluster on this machine (head + two workers with their own custom
resources) and the videos and the store on an S3-compatible server on 127.0.0.1 (moto), each giving the same
store contents as the local run."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vidprep.store.store import Store
from tests.test_resume import _run_until_killed, _snapshot

CLUSTER_RUN = """
import json, sys
import ray
from ray.cluster_utils import Cluster
from vidprep.jobs.config import load_config
from vidprep.pipeline.precompute import precompute

store, manifest = sys.argv[1], sys.argv[2]
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
vision = cluster.add_node(num_cpus=3, resources={"vision_node": 1})
speech = cluster.add_node(num_cpus=1, resources={"speech_node": 1})
cluster.wait_for_nodes()
overrides = [f"store.uri={store}", "dataset=folder", f"dataset.manifest={manifest}", "ray.progress_bars=false",
             f"ray.address={cluster.address}"]
for stage in ("frame_embeddings", "segment_captions", "frame_captions"):
    overrides.append(f"+resources.{stage}.custom={{vision_node: 0.3}}")
overrides.append("+resources.transcript.custom={speech_node: 1}")
summary = precompute(load_config(overrides))
print(json.dumps({"done": summary.done, "failed": summary.failed,
                  "nodes": {"vision": vision.node_id, "speech": speech.node_id,
                            "head": cluster.head_node.node_id}}))
ray.shutdown()
cluster.shutdown()
"""


def test_precompute_on_a_three_node_cluster_places_model_stages_by_their_resources(tmp_path, sample_dir,
                                                                                    precomputed):
    _, reference, _ = precomputed
    done = subprocess.run([sys.executable, "-c", CLUSTER_RUN, str(tmp_path / "db"), str(sample_dir)],
                          capture_output=True, text=True, timeout=900, check=False,
                          env=dict(os.environ, RAY_ADDRESS=""))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["done"], result["failed"]) == (3, 1)
    store = Store(str(tmp_path / "db"))
    nodes = {}
    for row in store.scan("stage_done").to_pylist():
        nodes.setdefault(row["stage"], set()).add(row["node_id"])
    for stage in ("frame_embeddings", "segment_captions", "frame_captions"):
        assert nodes[stage] == {result["nodes"]["vision"]}, stage
    assert nodes["transcript"] == {result["nodes"]["speech"]}
    assert _without_file_names(_snapshot(store)) == _without_file_names(_snapshot(reference))


def _without_file_names(snapshot: dict) -> dict:
    """Two files with the same bytes are one video; which file's name it keeps depends on which
    node identified it first, so names and paths are left out of the comparison."""
    snapshot["videos"] = {k: tuple(c for c in v if c[0] not in ("name", "source_path"))
                          for k, v in snapshot["videos"].items()}
    return snapshot


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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


def test_precompute_and_answer_with_videos_and_store_on_s3_and_resume_after_a_kill(tmp_path, sample_dir, precomputed,
                                                                                    s3_server, monkeypatch):
    _, reference, _ = precomputed
    client = s3_server.pop("client")
    for name, value in s3_server.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("VIDPREP_MEDIA_CACHE", str(tmp_path / "media"))
    for video in sorted(sample_dir.glob("*.mp4")):
        client.upload_file(str(video), "vidprep-test", f"videos/{video.name}")
    uri = "s3://vidprep-test/store"
    options = {"endpoint": s3_server["AWS_ENDPOINT_URL"], "region": "us-east-1", "allow_http": "true"}
    common = [f"store.uri={uri}", "store=s3", "dataset=folder", "dataset.manifest=s3://vidprep-test/videos",
              f"dataset.questions.path={sample_dir}/questions.jsonl", "+dataset.questions.video_dir=s3://vidprep-test/videos",
              "ray.progress_bars=false"]
    precompute = [sys.executable, "-m", "vidprep.jobs.cli", "precompute", *common]
    _run_until_killed(precompute, uri, markers=3, extra_delay=0.2, storage_options=options)
    resumed = subprocess.run(precompute, capture_output=True, text=True, timeout=900, check=False)
    # Exit 3: the sample's corrupt.mp4 fails; everything else completes.
    assert resumed.returncode == 3, resumed.stderr[-3000:]
    store = Store(uri, options)
    assert _without_file_names(_snapshot(store)) == _without_file_names(_snapshot(reference))
    assert {v["source_path"] for v in store.scan("videos").to_pylist()} <= {
        f"s3://vidprep-test/videos/{name}.mp4" for name in ("scenes", "scenes_copy", "places", "short")}
    # Answering finds every video complete on S3 (else it names the precompute command), as a rerun does.
    answered = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "answer", *common, "method=llovi",
                               "answer.limit=2"], capture_output=True, text=True, timeout=900, check=False)
    assert answered.returncode == 0, answered.stderr[-3000:]
    assert "2 questions, 2 answered now" in answered.stdout
    assert store.scan("predictions").num_rows == 2
    # Nothing of the credentials is in the store.
    assert "vidprep-test-secret" not in json.dumps(store.scan("runs").to_pylist(), default=str)
