"""`vidprep evaluate [run=RUN_KEY] [overrides]`: scores of answer runs in the store (all by default)."""

import sys

from vidprep.jobs.config import load_config
from vidprep.pipeline.precompute import StoreSettings
from vidprep.pipeline.scoring import format_report, report


def main() -> None:
    wanted = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("run=")]
    cfg = load_config([a for a in sys.argv[1:] if not a.startswith("run=")])
    store = StoreSettings.from_config(cfg.store).open()
    rows = store.scan("predictions", columns=[
        "run_key", "method", "task", "qtype", "question_json", "prediction_json", "valid", "llm_calls",
        "prompt_tokens", "completion_tokens", "seconds"]).to_pylist()
    runs = sorted({(r["method"], r["run_key"]) for r in rows if not wanted or r["run_key"] in wanted})
    if not runs:
        raise SystemExit(f"error: no answer runs{' ' + ', '.join(wanted) if wanted else ''} in {store.uri}; "
                         "run `vidprep answer` first")
    for method, key in runs:
        print("\n".join(format_report(method, key, report([r for r in rows if r["run_key"] == key]))))


if __name__ == "__main__":
    main()
