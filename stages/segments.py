"""Cut a video's span into consecutive n-second segments."""

import dataclasses
import math
from collections.abc import Iterator

from vidprep.conf.checks import check_range

from vidprep.stages.base import Stage
from vidprep.store.artifacts import SEGMENTS


@dataclasses.dataclass
class CutSegments(Stage):
    """Segments [i*n, min((i+1)*n, duration)); a video shorter than n is one segment."""

    version = 1
    artifact = SEGMENTS

    seconds: float = 10.0

    def __post_init__(self):
        check_range("stages.segments.seconds", self.seconds, 0, above=True)

    def run(self, video: dict) -> Iterator[list[dict]]:
        duration = video["duration"]
        count = max(1, math.ceil(duration / self.seconds - 1e-9))
        yield [
            {"segment_index": i, "start": i * self.seconds,
             "end": min((i + 1) * self.seconds, duration)}
            for i in range(count)
        ]
