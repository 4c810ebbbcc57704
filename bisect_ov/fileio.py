"""Writing files so that a failure never leaves half a file nor destroys the one already there."""

from __future__ import annotations

import os
import pathlib
import tempfile

__all__ = ["write_text_atomic"]


def write_text_atomic(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Write `text` to a temporary file beside `path`, then rename it into place."""
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return path
