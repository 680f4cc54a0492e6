"""Media I/O: where a video's bytes are (`files`) and ffmpeg/ffprobe as killable subprocesses
(`ffmpeg`). The bottom of `stages`: it imports nothing from the stages above it."""


class VideoError(RuntimeError):
    """A video could not be read or processed; the message says why, in the user's terms."""
