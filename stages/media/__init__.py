"""Media I/O: where a video's bytes are (`files`), ffmpeg (`ffmpeg`) and a metadata reader
(`pyav_probe`) as killable subprocesses. The bottom of `stages`: it imports nothing from the stages
above it."""


class VideoError(RuntimeError):
    """A video could not be read or processed; the message says why, in the user's terms."""
