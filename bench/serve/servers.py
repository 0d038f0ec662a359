"""The servers ``bench.serve`` measures, each in its own process on 127.0.0.1:
mediaflow (``mediaflow serve``, as a user starts it), nginx, and two aiohttp peers
(the stock ``FileResponse`` and a "ceiling" answering from memory).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

from bench._lib.common import REPO_ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1.0):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s")


def start_mediaflow(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MEDIAFLOW_SENDFILE": "1"}
    env.pop("MEDIAFLOW_TOKEN", None)
    env.pop("MEDIAFLOW_LOCK_READS", None)
    cmd = [sys.executable, "-m", "mediaflow", "serve", "--data", str(data_dir), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/healthz", proc)
    return proc


def start_nginx(workdir: Path, root: Path, port: int) -> subprocess.Popen[bytes]:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    conf = workdir / "nginx.conf"
    conf.write_text(
        textwrap.dedent(
            f"""
            worker_processes 1;
            pid {workdir}/nginx.pid;
            error_log {workdir}/nginx-error.log;
            events {{ worker_connections 1024; }}
            http {{
                access_log off;
                sendfile on;
                tcp_nopush off;
                client_body_temp_path {workdir}/body;
                proxy_temp_path {workdir}/proxy;
                fastcgi_temp_path {workdir}/fastcgi;
                uwsgi_temp_path {workdir}/uwsgi;
                scgi_temp_path {workdir}/scgi;
                default_type application/octet-stream;
                server {{
                    listen 127.0.0.1:{port};
                    root {root};
                    location /healthz {{ return 200 "ok"; }}
                }}
            }}
            """
        )
    )
    proc = subprocess.Popen(
        [nginx, "-c", str(conf), "-g", "daemon off;"], stderr=subprocess.DEVNULL
    )
    wait_ready(f"http://127.0.0.1:{port}/healthz", proc)
    return proc


# Both peer scripts: the imports, then their own artifact handler, then this.
# The peers pick their loop as the commands do (MEDIAFLOW_LOOP, uvloop by default:
# bench._lib.loop), by themselves, since they run outside the repository.
_PEER_IMPORTS = """
import os
import sys
from aiohttp import web
def loop_factory():
    choice = os.environ.get("MEDIAFLOW_LOOP", "").strip().lower() or "auto"
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise
        return None
    return uvloop.new_event_loop
"""
_PEER_MAIN = """
async def health(request):
    return web.Response(text="ok")
app = web.Application()
app.router.add_get("/artifacts/{digest}", artifact)
app.router.add_get("/healthz", health)
factory = loop_factory()  # the loop mediaflow runs on (MEDIAFLOW_LOOP)
web.run_app(
    app,
    host="127.0.0.1",
    port=int(sys.argv[2]),
    access_log=None,
    print=None,
    loop=factory() if factory else None,
)
"""

STOCK_SERVER = (
    _PEER_IMPORTS
    + """
root = sys.argv[1]
async def artifact(request):
    return web.FileResponse(root + "/artifacts/" + request.match_info["digest"])
"""
    + _PEER_MAIN
)


# No file at all: the 4 KiB or 64 KiB body is a constant in memory. What a handler
# going through aiohttp's response path can reach on this machine (whole files: not measured).
CEILING_SERVER = (
    _PEER_IMPORTS
    + """
small = bytes(4096)
block = bytes(65536)
async def artifact(request):
    if request.headers.get("Range"):
        headers = {"Content-Range": "bytes 0-65535/67108864"}
        return web.Response(body=block, status=206, headers=headers)
    return web.Response(body=small, content_type="application/octet-stream")
"""
    + _PEER_MAIN
)


def start_stock(
    workdir: Path, root: Path, port: int, source: str = STOCK_SERVER, name: str = "stock"
) -> subprocess.Popen[bytes]:
    script = workdir / f"{name}.py"
    script.write_text(source)
    cmd = [sys.executable, str(script), str(root), str(port)]
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    wait_ready(f"http://127.0.0.1:{port}/healthz", proc)
    return proc


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
