"""The config's sections that build no object, as dataclasses: their types and ranges are checked like
any class's settings (`vidprep.jobs.config.check_settings`), and a key they do not have is an error. The
values, with what each means, are in the YAML that selects them (`/settings@SECTION: ...`)."""

from dataclasses import dataclass
from typing import Annotated, Any, Optional

from omegaconf import MISSING

from vidprep.conf.checks import Range


@dataclass
class RaySection:
    address: Optional[str] = MISSING
    num_cpus: Annotated[Optional[float], Range(0, above=True)] = MISSING
    verbose: bool = MISSING
    log_file: str = MISSING
    progress_bars: bool = MISSING
    log_to_driver: bool = MISSING
    group_seconds: Annotated[float, Range(0, unit="seconds")] = MISSING
    gpu_memory_gb: Annotated[float, Range(0.001, unit="GB")] = MISSING


@dataclass
class AnswerSection:
    tools: str = MISSING
    workers: Annotated[int, Range(1)] = MISSING
    num_cpus: Annotated[float, Range(0)] = MISSING
    per_type: Annotated[int, Range(0)] = MISSING
    limit: Annotated[int, Range(0)] = MISSING
    retry_refused: bool = MISSING


@dataclass
class PrecomputeSection:
    only_method_reads: bool = MISSING


@dataclass
class StoreSection:
    uri: str = MISSING
    storage_options: dict[str, Any] = MISSING
    ann_min_rows: Annotated[int, Range(1)] = MISSING
    compact_every_videos: Annotated[int, Range(0)] = MISSING
    compact_every_questions: Annotated[int, Range(0)] = MISSING


@dataclass
class LocalServerSection:
    model: str = MISSING
    host: str = MISSING
    port: Annotated[int, Range(1, 65535)] = MISSING
    n_ctx: Annotated[int, Range(256, unit="tokens")] = MISSING
    startup_timeout_s: Annotated[float, Range(0, above=True, unit="seconds")] = MISSING
