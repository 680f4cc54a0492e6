"""Scale out: a run with the videos and the store on an S3-compatible server on 127.0.0.1 (moto), killed
on this machine's Ray and resumed on a multi-node Ray cluster on this machine (head + two workers with
their own custom resources), gives the local run's store, each model stage on the node its resources
name; answering then reads that store on S3."""

import json
import os
import subprocess
import sys

from vidprep.store.store import Store
from tests.test_resume import _run_until_killed, _snapshot

CLUSTER_RUN = """
import json, sys
import ray
from ray.cluster_utils import Cluster
from vidprep.jobs.config import load_config
from vidprep.pipeline.precompute import precompute

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
vision = cluster.add_node(num_cpus=3, resources={"vision_node": 1})
speech = cluster.add_node(num_cpus=1, resources={"speech_node": 1})
cluster.wait_for_nodes()
overrides = [*sys.argv[1:], f"ray.address={cluster.address}"]
for stage in ("frame_embeddings", "segment_captions", "frame_captions"):
    overrides.append(f"+resources.{stage}.custom={{vision_node: 0.3}}")
overrides.append("+resources.transcript.custom={speech_node: 1}")
summary = precompute(load_config(overrides))
print(json.dumps({"done": summary.done, "skipped": summary.skipped, "failed": summary.failed,
                  "nodes": {"vision": vision.node_id, "speech": speech.node_id,
                            "head": cluster.head_node.node_id}}))
ray.shutdown()
cluster.shutdown()
"""
# A cluster started on this machine, which names itself the machine's current one (as `ray start` does).
CLUSTER_HEAD = """
import sys
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
print(cluster.address, flush=True)
sys.stdin.read()
cluster.shutdown()
"""
JOIN_PROBE = """
import ray
from vidprep.jobs.config import load_config
from vidprep.pipeline.runner import init_ray

init_ray(load_config([]).ray)
print(ray.get_runtime_context().gcs_address)
ray.shutdown()
"""
PLACED = {"frame_embeddings": "vision", "segment_captions": "vision", "frame_captions": "vision",
          "transcript": "speech"}


def _without_file_names(snapshot: dict) -> dict:
    """Two files with the same bytes are one video; which file's name it keeps depends on which
    node identified it first, so names and paths are left out of the comparison."""
    snapshot["videos"] = {k: tuple(c for c in v if c[0] not in ("name", "source_path"))
                          for k, v in snapshot["videos"].items()}
    return snapshot


def test_a_run_on_s3_killed_here_and_resumed_on_a_three_node_cluster_holds_the_local_rows(
        tmp_path, sample_dir, precomputed, s3_server, monkeypatch):
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
    _run_until_killed([sys.executable, "-m", "vidprep.jobs.cli", "precompute", *common], uri, markers=3,
                      extra_delay=0.2, storage_options=options)
    # The cluster's nodes inherit the S3 settings from this environment, as a user's would from theirs.
    resumed = subprocess.run([sys.executable, "-c", CLUSTER_RUN, *common], capture_output=True, text=True,
                             timeout=900, check=False, env=dict(os.environ, RAY_ADDRESS=""))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = json.loads(resumed.stdout.strip().splitlines()[-1])
    # The sample's corrupt.mp4 fails; the other videos complete, the killed run's stage runs kept.
    assert (result["done"] + result["skipped"], result["failed"]) == (3, 1)
    store = Store(uri, options)
    assert _without_file_names(_snapshot(store)) == _without_file_names(_snapshot(reference))
    assert {v["source_path"] for v in store.scan("videos").to_pylist()} <= {
        f"s3://vidprep-test/videos/{name}.mp4" for name in ("scenes", "scenes_copy", "places", "short")}
    # Every model stage run on the cluster ran on the node its resources name (the killed run's ran here).
    on_cluster: dict[str, set] = {}
    for row in store.scan("stage_done").to_pylist():
        if row["node_id"] in result["nodes"].values():
            on_cluster.setdefault(row["stage"], set()).add(row["node_id"])
    assert {stage: on_cluster.get(stage) for stage in PLACED} == {
        stage: {result["nodes"][node]} for stage, node in PLACED.items()}

    # Answering finds every video complete on S3 (else it names the precompute command), as a rerun does.
    answered = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "answer", *common, "method=llovi",
                               "answer.limit=2"], capture_output=True, text=True, timeout=900, check=False)
    assert answered.returncode == 0, answered.stderr[-3000:]
    assert "2 questions, 2 answered now" in answered.stdout
    assert store.scan("predictions").num_rows == 2
    # Nothing of the credentials is in the store.
    assert "vidprep-test-secret" not in json.dumps(store.scan("runs").to_pylist(), default=str)


def test_a_job_without_a_ray_address_starts_its_own_ray_beside_a_cluster_started_here():
    """Ray's own default address joins the cluster last started on the machine, whose workers lack the job's
    environment: a job's own module was not found while the cluster test ran in the other pytest worker."""
    head = subprocess.Popen([sys.executable, "-c", CLUSTER_HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        address = head.stdout.readline().strip()
        probe = subprocess.run([sys.executable, "-c", JOIN_PROBE], capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, RAY_ADDRESS=""))
        assert probe.returncode == 0, probe.stderr[-3000:]
        own = probe.stdout.strip().splitlines()[-1]
        assert address and own and own != address, (address, own)
    finally:
        head.communicate(timeout=120)
