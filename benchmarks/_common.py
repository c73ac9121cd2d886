"""What every benchmark script does last: stamp the result, print it, and keep it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from nmtkit.io import atomic_write_text


def emit(result: dict, out: str | None) -> None:
    """Add the command and date, print the JSON, and write it atomically to ``out`` if given."""
    result = {**result, "command": " ".join([Path(sys.executable).name, *sys.argv]),
              "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        atomic_write_text(out, text + "\n")
