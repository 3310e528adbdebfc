"""The static files (``app/web/static.py``): gzip where the client takes it, a year of caching
for versioned URLs and revalidation for the rest, ETags answered with 304, nothing outside
``static/``, and the service's security headers on every answer."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import app
from app.service.operations import CSP
from app.web.assets import STATIC
from app.web.static import IMMUTABLE, REVALIDATE, StaticAssets, accepts_gzip, matches, static_url

client = TestClient(app)
PLOTLY = "vendor/plotly/plotly.min.js"


def test_versioned_urls_carry_the_content_hash() -> None:
    for name in ("site.css", "charts.js", "forms.js", PLOTLY):
        digest = hashlib.sha256((STATIC / name).read_bytes()).hexdigest()
        assert static_url(name) == f"/static/{name}?v={digest[:12]}"
    with pytest.raises(LookupError, match=r"nope\.js"):
        static_url("nope.js")


def test_a_new_release_gets_a_new_url(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    for root, text in ((before, "a { color: red }"), (after, "a { color: blue }")):
        root.mkdir()
        (root / "site.css").write_text(text)
    assert StaticAssets(before).url("site.css") != StaticAssets(after).url("site.css")


def test_plotly_is_gzipped_and_cached_for_good_under_its_versioned_url() -> None:
    url = static_url(PLOTLY)
    r = client.get(url, headers={"Accept-Encoding": "gzip, deflate, br"})
    assert r.status_code == 200
    assert r.headers["content-encoding"] == "gzip" and r.headers["vary"] == "Accept-Encoding"
    assert r.headers["cache-control"] == IMMUTABLE == "public, max-age=31536000, immutable"
    assert r.headers["content-type"].startswith("text/javascript")
    sent = int(r.headers["content-length"])
    raw = (STATIC / PLOTLY).read_bytes()
    assert sent < len(raw) / 3  # 1.5 MB -> 0.5 MB (the cartesian bundle)
    assert r.content == raw  # httpx undid the gzip: the same script
    # the same file without a version (or an old one) is revalidated every time
    for other in (f"/static/{PLOTLY}", f"/static/{PLOTLY}?v=000000000000"):
        assert client.get(other).headers["cache-control"] == REVALIDATE


def test_identity_when_gzip_is_not_taken() -> None:
    raw = (STATIC / "site.css").read_bytes()
    for accept in ("identity", "gzip;q=0, identity", "br", "*;q=0"):
        r = client.get(static_url("site.css"), headers={"Accept-Encoding": accept})
        assert "content-encoding" not in r.headers, accept
        assert r.content == raw and r.headers["content-length"] == str(len(raw))
        assert r.headers["vary"] == "Accept-Encoding"


def test_accept_encoding_and_if_none_match_rules() -> None:
    assert accepts_gzip("gzip") and accepts_gzip("deflate, GZIP;q=0.5") and accepts_gzip("*")
    assert accepts_gzip("x-gzip") and accepts_gzip("br, *;q=0.1")
    assert not accepts_gzip("") and not accepts_gzip("gzip;q=0") and not accepts_gzip("br")
    assert not accepts_gzip("*, gzip;q=0.000")
    assert matches('"a", "b"', '"b"') and matches('W/"b"', '"b"') and matches("*", '"b"')
    assert not matches("", '"b"') and not matches('"bb"', '"b"')


def test_etags_are_answered_with_304() -> None:
    url = static_url("charts.js")
    for accept in ("gzip", "identity"):
        first = client.get(url, headers={"Accept-Encoding": accept})
        etag = first.headers["etag"]
        again = client.get(url, headers={"Accept-Encoding": accept, "If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == etag and again.headers["cache-control"] == IMMUTABLE
        changed = client.get(url, headers={"Accept-Encoding": accept, "If-None-Match": '"x"'})
        assert changed.status_code == 200
    gz = client.get(url, headers={"Accept-Encoding": "gzip"}).headers["etag"]
    plain = client.get(url, headers={"Accept-Encoding": "identity"}).headers["etag"]
    assert gz != plain  # two representations, two strong tags


def test_head_and_other_methods() -> None:
    got = client.get(static_url("site.css"), headers={"Accept-Encoding": "gzip"})
    r = client.head(static_url("site.css"), headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200 and r.content == b""
    assert r.headers["content-length"] == got.headers["content-length"]
    assert r.headers["etag"] == got.headers["etag"] and r.headers["content-encoding"] == "gzip"
    r = client.post(static_url("site.css"))
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"


def test_images_are_not_recompressed() -> None:
    r = client.get(static_url("vendor/swagger-ui/favicon-32x32.png"))
    assert r.status_code == 200 and "content-encoding" not in r.headers
    assert "vary" not in r.headers and r.headers["content-type"] == "image/png"


@pytest.mark.parametrize(
    "name", ["../app/main.py", "vendor/../../app/main.py", ".gitkeep", "vendor", "", "a\\b.js"]
)
def test_nothing_outside_static_is_served(name: str) -> None:
    assert StaticAssets(STATIC).asset(name) is None
    assert client.get("/static/" + name.replace("..", "%2e%2e")).status_code == 404


def test_security_headers_on_every_static_answer() -> None:
    for r in (
        client.get(static_url("site.css")),
        client.get(static_url("site.css"), headers={"If-None-Match": "*"}),
        client.get("/static/nope.css"),
    ):
        assert r.headers["content-security-policy"] == CSP
        assert r.headers["x-content-type-options"] == "nosniff"


def test_warm_reads_every_file_once() -> None:
    assets = StaticAssets(STATIC)
    assets.warm_in_background().join(timeout=60)
    names = {
        p.relative_to(STATIC).as_posix()
        for p in STATIC.rglob("*")
        if p.is_file() and not re.search(r"(^|/)\.", p.relative_to(STATIC).as_posix())
    }
    assert assets.loaded == names and PLOTLY in names
