"""The app's page preloads Plotly's module: the tags go into the HTML page's head (its length
follows), and nothing else the server sends is touched."""

import asyncio
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)  # app_pages imports from the repository
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from app_pages.preload import STATIC_JS, PreloadMiddleware, preload_tags  # noqa: E402

PAGE = b"<html><head><title>x</title></head><body></body></html>"


def serve(body: bytes, content_type: bytes, method="GET", path="/", encoding=None):
    async def app(scope, receive, send):
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        if encoding:
            headers.append((b"content-encoding", encoding))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        half = len(body) // 2  # in two parts, as a streamed file may come
        await send({"type": "http.response.body", "body": body[:half], "more_body": True})
        await send({"type": "http.response.body", "body": body[half:]})

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path}
    asyncio.run(PreloadMiddleware(app, b"<link TAG>")(scope, None, send))
    headers = dict(sent[0]["headers"])
    return b"".join(m.get("body", b"") for m in sent[1:]), headers


def test_the_page_gets_the_tags_before_its_head_ends_and_its_length_follows():
    body, headers = serve(PAGE, b"text/html; charset=utf-8")
    assert body == PAGE.replace(b"</head>", b"<link TAG></head>")
    assert int(headers[b"content-length"]) == len(body)


def test_everything_else_passes_through_unread():
    for args in [
        (PAGE, b"application/javascript"),
        (PAGE, b"text/html", "HEAD"),
        (PAGE, b"text/html", "GET", "/static/js/x.js"),
        (PAGE, b"text/html", "GET", "/", b"gzip"),
    ]:
        body, headers = serve(*args)
        assert body == PAGE and int(headers[b"content-length"]) == len(PAGE), args


def test_the_tags_name_the_installed_streamlit_s_plotly_module():
    found = list(STATIC_JS.glob("PlotlyChart.*.js"))
    tags = preload_tags().decode()
    if len(found) != 1:  # another Streamlit layout: the page is left alone
        assert tags == ""
        return
    assert f'href="./static/js/{found[0].name}"' in tags
    assert f'import("./static/js/{found[0].name}")' in tags
