"""`heedful serve`: models over HTTP, LibreTranslate's API (heedful.server)."""

from __future__ import annotations

import click

from heedful.cli.errors import require_extra
from heedful.cli.options import DIRECTORY, Deferred, limit_options, runtime_options


@click.command(
    cls=Deferred,
    later=lambda: [*runtime_options(), *limit_options()],
    short_help="Serve models over HTTP (LibreTranslate's API).",
)
@click.argument("model_dirs", metavar="MODEL_DIR...", nargs=-1, required=True, type=DIRECTORY)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, help="Port to listen on.")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    help="Least severe log message printed (heedful's and uvicorn's).",
)
@click.option("--access-log/--no-access-log", default=False, help="Log every request.")
def serve(model_dirs, host, port, log_level, access_log, engine, quantize, **limits) -> None:
    """Serve MODEL_DIR over HTTP: LibreTranslate's POST /translate, /languages, a web page at /.

    Several MODEL_DIRs (or one multilingual model) serve every language pair they have, each
    request going to the model of its source and target; two models of one pair are an error.
    Needs the serve extra: pip install 'heedful[serve]'.
    """
    # the serve extra's libraries, before a model is loaded: the one line names the extra
    require_extra("serve", "fastapi", "uvicorn", "fastapi_offline")
    from heedful.server import ServerLimits
    from heedful.server import serve as run_server

    dirs = model_dirs[0] if len(model_dirs) == 1 else list(model_dirs)
    run_server(dirs, host, port, ServerLimits(**limits), log_level, access_log, engine, quantize)
