"""Files replaced in one step: a reader sees the old file or the new one, never half of either."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable


@contextmanager
def atomic_file(path: Path, mode: str = "w", before_replace: Callable[[], None] | None = None):
    """A handle on `.NAME.tmp` beside `path` that replaces `path` in one step when the block ends (after
    fsync, and after `before_replace`, e.g. keeping the old file); on any failure the old file stays and
    no .tmp is left."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, mode, **({} if "b" in mode else {"newline": ""})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step (see atomic_file)."""
    with atomic_file(path) as handle:
        handle.write(text)
