"""`vidprep answer method=... dataset=... [overrides]`: answer a dataset's questions from the store."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from vidprep.jobs.errors import finish, user_errors
from vidprep.jobs.serve_llm import ensure_local_llm
from vidprep.pipeline.answer import answer


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    with user_errors():
        ensure_local_llm(cfg.llm, Path(cfg.data_dir) / "llm-server.log")
        summary = answer(cfg)
    finish(summary.lines(), summary.failed)


if __name__ == "__main__":
    main()
