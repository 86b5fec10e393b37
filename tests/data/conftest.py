"""Fixtures for the data tests: generated MNIST files and loopback-only 'mirrors'."""

from __future__ import annotations

import functools
import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.data_helpers import write_mnist_idx


@pytest.fixture
def mnist_dir(tmp_path: Path):
    """(folder, file table) with 64 train / 32 test generated images as .gz files."""
    folder = tmp_path / "mnist"
    return folder, write_mnist_idx(folder, n_train=64, n_test=32)


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A loopback URL whose port is bound but not listening: connections are refused at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mnist/"
    finally:
        sock.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _servers(handler: type) -> Iterator:
    """``serve(folder) -> url``: HTTP servers on 127.0.0.1 with ``handler`` over ``folder``; stopped afterwards."""
    servers = []

    def serve(folder: Path) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def serve_dir() -> Iterator:
    """``serve_dir(folder) -> url``: a server serving ``folder``."""
    yield from _servers(_QuietHandler)


class _StallingHandler(_QuietHandler):
    """Sends the first half of a file, then nothing: a download that never ends."""

    def copyfile(self, source, outputfile) -> None:
        data = source.read()
        outputfile.write(data[:len(data) // 2])
        outputfile.flush()
        time.sleep(120)


@pytest.fixture
def stalling_url() -> Iterator:
    """``stalling_url(folder) -> url``: a server that stalls half-way through every file."""
    yield from _servers(_StallingHandler)
