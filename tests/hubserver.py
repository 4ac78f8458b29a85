"""A real local HTTP server that answers the Hugging Face Hub endpoints huggingface_hub uses
to fetch files (`/{repo}/resolve/{revision}/{path}`, HEAD and ranged GET), with the Hub's
error headers (`X-Error-Code`), gated repos, unknown revisions, slow answers and redirects.
Tests point `HF_ENDPOINT` at it."""

from __future__ import annotations

import hashlib
import json
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from metricsserver import quiet_disconnects


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    branches: tuple[str, ...] = ("main",)
    gated_token: str | None = None  # repo is gated; only this bearer token gets in
    delay: float = 0.0  # seconds to wait before answering (slow hub)
    requests: list[str] = field(default_factory=list)


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]], *, lie: int = 0) -> bytes:
    """A real safetensors file: 8-byte header length, JSON header, zeroed tensor data.
    `lie` adds to the declared header length (a header that lies about its size)."""
    size = {"BF16": 2, "F16": 2, "F32": 4, "I8": 1, "U8": 1, "F8_E4M3": 1, "I32": 4}
    header, off = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = size[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw) + lie) + raw + b"\0" * off


def tensor_total(tensors: dict[str, tuple[str, list[int]]]) -> int:
    size = {"BF16": 2, "F16": 2, "F32": 4, "I8": 1, "U8": 1, "F8_E4M3": 1, "I32": 4}
    total = 0
    for dtype, shape in tensors.values():
        n = size[dtype]
        for d in shape:
            n *= d
        total += n
    return total


class FakeHub:
    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.handle_error = quiet_disconnects(self.server.handle_error)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeHub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _error(self, status: int, code: str, message: str) -> None:
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", message)
                body = json.dumps({"error": message}).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _serve(self) -> None:
                m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", self.path.split("?")[0])
                if not m:
                    return self._error(404, "RepoNotFound", "Repository not found")
                repo_id, revision, path = m.groups()
                repo = hub.repos.get(repo_id)
                if repo is None:
                    return self._error(404, "RepoNotFound", "Repository not found")
                rng_hdr = self.headers.get("Range") or self.headers.get("range") or ""
                repo.requests.append(f"{self.command} {path} {rng_hdr}".strip())
                if repo.delay:
                    time.sleep(repo.delay)
                if repo.gated_token is not None:
                    auth = self.headers.get("Authorization", "")
                    if auth != f"Bearer {repo.gated_token}":
                        return self._error(401 if not auth else 403, "GatedRepo",
                                           "Access to this model is restricted")
                if revision not in repo.branches and revision != repo.commit:
                    return self._error(404, "RevisionNotFound", "Invalid rev id")
                data = repo.files.get(path)
                if data is None:
                    return self._error(404, "EntryNotFound", "Entry not found")
                status, body = 200, data
                rng = self.headers.get("Range") or self.headers.get("range")
                if rng and self.command == "GET":
                    a, b = re.match(r"bytes=(\d+)-(\d*)", rng).groups()
                    a, b = int(a), int(b) if b else len(data) - 1
                    body = data[a:b + 1]
                    status = 206
                self.send_response(status)
                self.send_header("X-Repo-Commit", repo.commit)
                self.send_header("ETag", '"' + hashlib.sha1(data).hexdigest() + '"')
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(body)

            do_GET = _serve
            do_HEAD = _serve

        return Handler
