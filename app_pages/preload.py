"""Load Plotly's code while the app waits for its server, not after.

Why: every page of the app draws Plotly charts, and Streamlit's frontend imports its Plotly
component (one 4.7 MB module) only when the first chart's element arrives over the websocket.
A Chromium trace of a first load on the 2-core development machine showed the page then
spending 0.7-0.95 s of main-thread time evaluating that module before drawing anything, at
about 2.0 s into the load, while the main thread had been mostly idle from about 1.0 s,
waiting for the server's first script run. So the page's head gets:

- `<link rel="modulepreload">` for that module: fetched and compiled as the page loads;
- a module script importing it once the page has loaded (the `load` event: after the app's
  own code has run), so that it is evaluated in that idle time. The app's own import of it
  later finds it evaluated (one module map per document).

Measured in Chromium against `streamlit run app.py`, six first loads each, alternated with a
launcher without this: median 3.37 s against 3.68 s to the last chart drawn.

The module's file name carries a content hash that changes with each Streamlit release, so it
is looked up in the installed Streamlit's static folder; where it is not found (another
layout, another release), the page is served as it is. Only the HTML of the page itself is
touched; every other response passes through unread.
"""

from __future__ import annotations

from pathlib import Path

import streamlit

STATIC_JS = Path(streamlit.__file__).parent / "static" / "static" / "js"
MODULES = ("PlotlyChart",)  # the chunks whose names start so


def preload_tags() -> bytes:
    """The `<link rel="modulepreload">` tags for MODULES, as index.html writes its own."""
    tags = []
    for name in MODULES:
        found = sorted(STATIC_JS.glob(f"{name}.*.js"))
        if len(found) == 1:  # one build's chunk; several or none: leave the page alone
            src = f"./static/js/{found[0].name}"
            tags.append(f'<link rel="modulepreload" crossorigin href="{src}">')
            tags.append(
                '<script type="module">addEventListener("load", () => '
                f'setTimeout(() => import("{src}").catch(() => {{}}), 0));</script>'
            )
    return "".join(tags).encode()


class PreloadMiddleware:
    """ASGI middleware: the HTML page (not gzipped; it is a few KB) gets the preload tags
    just before `</head>`, and its Content-Length follows."""

    def __init__(self, app, tags: bytes | None = None):
        self.app = app
        self.tags = preload_tags() if tags is None else tags

    async def __call__(self, scope, receive, send):
        if (
            scope["type"] != "http"
            or scope["method"] != "GET"
            or not self.tags
            or scope["path"].startswith(("/static/", "/_stcore/", "/media/", "/component/"))
        ):
            await self.app(scope, receive, send)
            return
        held: dict = {}  # this response's start, while its HTML body is gathered
        body = bytearray()

        async def patched(message):
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                html = headers.get(b"content-type", b"").startswith(b"text/html")
                if html and b"content-encoding" not in headers:
                    held["start"] = message
                    return
                await send(message)
                return
            start = held.get("start")
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            body.extend(message.get("body", b""))
            if message.get("more_body"):
                return
            page = bytes(body).replace(b"</head>", self.tags + b"</head>", 1)
            headers = [(k, v) for k, v in start["headers"] if k != b"content-length"]
            headers.append((b"content-length", str(len(page)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, patched)
