"""Reading /metrics: a URL scraped on a schedule with a bounded timeout (urllib), saved scrape
files, or standard input. Every failure is one `BadInput` line (exit 2)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

from kvplan.diagnose.metrics import Scrape, has_engine_metrics, has_scheduler_gauges, parse
from kvplan.errors import BadInput

MAX_BYTES = 64 << 20
URL_HINT = "is the server up? vLLM serves /metrics on its API port; SGLang needs --enable-metrics"


def is_url(src: str) -> bool:
    return src[:8].lower().startswith(("http://", "https://"))  # schemes are caseless


def metrics_url(src: str) -> str:
    """`http://host:8000` -> `http://host:8000/metrics`; a URL with a path is kept."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(src)
    except ValueError as e:  # "Invalid IPv6 URL", a bad port
        raise BadInput(f"cannot read URL {src!r}: {e}",
                       hint="e.g. http://host:8000 or http://[::1]:8000") from None
    return src.rstrip("/") + "/metrics" if parts.path in ("", "/") else src


def fetch(url: str, timeout: float) -> str:
    """One GET of `url`; the whole answer must arrive within `timeout` seconds."""
    import http.client
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    req = urllib.request.Request(url, headers={
        "Accept": "text/plain;version=0.0.4;q=1, */*;q=0.1", "User-Agent": "kvplan-diagnose"})
    too_slow = BadInput(f"no answer from {url} within {timeout:g} s", hint=URL_HINT)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            chunks, size = [], 0
            while True:
                if time.monotonic() > deadline:
                    raise too_slow
                b = resp.read1(65536)
                if not b:
                    break
                size += len(b)
                if size > MAX_BYTES:
                    raise BadInput(f"{url} answered more than {MAX_BYTES >> 20} MiB",
                                   hint="is this a /metrics endpoint?")
                chunks.append(b)
            body = b"".join(chunks)
            if resp.headers.get("Content-Encoding", "") == "gzip":
                import gzip

                body = gzip.decompress(body)
            charset = resp.headers.get_content_charset() or "utf-8"
    except urllib.error.HTTPError as e:
        raise BadInput(f"HTTP {e.code} {e.reason} from {url}", hint=URL_HINT) from None
    except urllib.error.URLError as e:
        if isinstance(e.reason, TimeoutError):
            raise too_slow from None
        raise BadInput(f"cannot reach {url}: {_reason(e.reason)}", hint=URL_HINT) from None
    except TimeoutError:
        raise too_slow from None
    except (OSError, ValueError, http.client.HTTPException) as e:
        raise BadInput(f"cannot scrape {url}: {_reason(e)}", hint=URL_HINT) from None
    return body.decode(charset, errors="replace")


def _reason(e: object) -> str:
    text = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return " ".join(str(text).split())


def read_source(path: str) -> str:
    """A saved scrape, or standard input for `-`."""
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        hint = "URLs start with http://" if ":" in path else "check the path"
        raise BadInput(f"no such file {path}", hint=hint) from None
    except OSError as e:
        raise BadInput(f"cannot read {path}: {_reason(e)}") from None


def usable(scrapes: list[Scrape], source: str) -> list[Scrape]:
    """The scrapes, or BadInput when `source` holds no vLLM/SGLang metrics at all."""
    if any(has_scheduler_gauges(s) or s.declared for s in scrapes):
        return scrapes
    hint = "point at the server's /metrics (vLLM: the API port; SGLang: --enable-metrics)"
    if any(s.model_names or has_engine_metrics(s) for s in scrapes):  # none of the scheduler's
        raise BadInput(f"no vLLM scheduler metrics (requests running, KV cache usage) in "
                       f"{source}, only other vLLM samples: a V1 engine exports them from "
                       "start-up, so this is a partial scrape, a router or another process",
                       hint=hint)
    raise BadInput(f"no vLLM or SGLang metrics in {source}", hint=hint)


def from_files(paths: list[str], interval: float) -> tuple[list[Scrape], bool]:
    """Scrapes from files/stdin in the order given (a file may hold several, concatenated).

    Times are the samples' own timestamps when every scrape has them; otherwise scrapes are
    taken to be `interval` seconds apart. Returns (scrapes, timed).
    """
    out: list[Scrape] = []
    for path in paths:
        src = "<stdin>" if path == "-" else path
        out += usable(parse(read_source(path), src), src)
    timed = all(s.timestamp is not None for s in out)
    for i, s in enumerate(out):
        s.t = s.timestamp if timed else i * interval
        s.unix_time = s.timestamp
    if timed:
        out.sort(key=lambda s: s.t)
    return out, timed


def scrape_url(url: str, *, count: int | None, interval: float, timeout: float
               ) -> Iterator[Scrape]:
    """Scrape `url` `count` times (forever if None), `interval` seconds apart.

    A scrape's time is its samples' timestamp when they carry one (as Prometheus honours
    them), else the time the answer arrived.
    """
    start, wall0 = time.monotonic(), time.time()
    i = 0
    while count is None or i < count:
        if i:
            wait = start + i * interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        text = fetch(url, timeout)
        received = wall0 + (time.monotonic() - start)
        for s in usable(parse(text, url), url):
            s.t = s.timestamp if s.timestamp is not None else received
            s.unix_time = s.t
            yield s
        i += 1
