"""/docs, Swagger UI offline: its script and style are files of the fastapi-offline package
(Swagger UI 5, which reads OpenAPI 3.1) served from here, where FastAPI's own page loads them
from a CDN and is blank without a network.

FastAPI's other page, /redoc, is off: ReDoc fetches its logo from cdn.redoc.ly whatever the
page says, and one page of the API is enough."""

from __future__ import annotations

from importlib import resources

ASSETS = "/docs-assets"  # where the package's files are served

# URLs relative to /docs and /redoc, so that they hold behind a proxy that adds a path prefix.
_OPENAPI, _FILES = "openapi.json", ASSETS.lstrip("/")
_NO_ICON = "data:,"  # FastAPI's default icon is fetched from fastapi.tiangolo.com


def assets_dir() -> str:
    """The folder of fastapi-offline's swagger-ui-bundle.js and swagger-ui.css."""
    return str(resources.files("fastapi_offline") / "static")


def swagger_page(title: str) -> str:
    from fastapi.openapi.docs import get_swagger_ui_html

    page = get_swagger_ui_html(
        openapi_url=_OPENAPI,
        title=f"{title} · API",
        swagger_js_url=f"{_FILES}/swagger-ui-bundle.js",
        swagger_css_url=f"{_FILES}/swagger-ui.css",
        swagger_favicon_url=_NO_ICON,
    )
    return page.body.decode("utf-8")
