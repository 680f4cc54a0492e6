"""`vidprep report [RUN_KEY ...] [--out DIR] [--serve] [overrides]`: a static HTML report of answer
runs (all in the store by default), one folder that opens from disk; --serve also serves it on
127.0.0.1."""

import argparse
import functools
import http.server
from pathlib import Path

from vidprep.jobs.config import load_config
from vidprep.jobs.errors import user_errors
from vidprep.pipeline.precompute import StoreSettings
from vidprep.pipeline.report import ReportWriter


def serve(folder: Path, port: int) -> None:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        print(f"serving {folder} on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C stops)", flush=True)
        server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(prog="vidprep report", description=__doc__)
    parser.add_argument("runs", nargs="*", help="answer run keys (default: every run in the store)")
    parser.add_argument("--out", help="report folder (default: DATA_DIR/report)")
    parser.add_argument("--serve", action="store_true", help="serve the report on 127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args, overrides = parser.parse_known_args()
    overrides += [r for r in args.runs if "=" in r]
    runs = [r for r in args.runs if "=" not in r]
    with user_errors():
        cfg = load_config(overrides)
        out = Path(args.out or Path(cfg.data_dir) / "report")
        index = ReportWriter(StoreSettings.from_config(cfg.store).open(), out).write(runs)
    print(f"report: {index}")
    if args.serve:
        serve(out, args.port)


if __name__ == "__main__":
    main()
