"""Cut a video's span into consecutive n-second segments."""

import dataclasses
import math
from collections.abc import Iterator
from typing import Annotated

from vidprep.conf.checks import Range

from vidprep.stages.base import Stage
from vidprep.store.artifacts import SEGMENTS


@dataclasses.dataclass
class CutSegments(Stage):
    """Segments [i*n, min((i+1)*n, duration)); a video shorter than n is one segment."""

    # 2: the videos' durations are probe v3's (the container's where it is longer).
    version = 2
    artifact = SEGMENTS

    seconds: Annotated[float, Range(0, above=True, unit="seconds")] = 10.0

    def run(self, video: dict) -> Iterator[list[dict]]:
        duration = video["duration"]
        count = max(1, math.ceil(duration / self.seconds - 1e-9))
        yield [
            {"segment_index": i, "start": i * self.seconds,
             "end": min((i + 1) * self.seconds, duration)}
            for i in range(count)
        ]
