"""`heedful serve` in a process that has other logging handlers (a notebook, a test run)."""

from __future__ import annotations

import io
import logging
import shutil
from pathlib import Path

from click.testing import CliRunner

from heedful.cli import main

MODEL = Path(__file__).resolve().parent.parent / "golden" / "models" / "transformer"


class ClosesItsStream(logging.StreamHandler):
    """As absl's handler does: shut down, it closes a stream that is not sys.stderr."""

    def close(self) -> None:
        self.stream.close()
        super().close()


def test_serve_leaves_the_other_handlers_of_the_process_alone(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(MODEL, model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # uvicorn starts, then the load fails
    stream = io.StringIO()
    handler = ClosesItsStream(stream)
    logging.getLogger("elsewhere").addHandler(handler)
    try:
        result = CliRunner().invoke(main, ["serve", str(model), "--port", "0"])
        assert result.exit_code == 1, result.output
        assert "Started server process" in result.output  # uvicorn's own lines, as before
        assert not stream.closed  # logging.config.dictConfig would have shut it down
    finally:
        logging.getLogger("elsewhere").removeHandler(handler)
