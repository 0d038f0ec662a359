"""The webhook sink's media references: absolute URLs on a real mediaflow server that
the receiver can GET, and with locked reads, only through the link they carry."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from mediaflow import Context, FlowBuilder, FlowSession, Node
from mediaflow.config import StoreSettings
from mediaflow.server import ServerSettings
from tests.connector_helpers import FAST
from tests.http_support import serve
from tests.webhook_support import SECRET, receiving

TOKEN = "media-hook-token"
JPEG = b"\xff\xd8\xff\xe0" + b"not really a jpeg, only its bytes" * 8 + b"\xff\xd9"


class Snap(Node):
    """Saves one image (captured now) and emits it on ``image``."""

    outputs: ClassVar[Mapping[str, str]] = {"image": "image"}

    async def run(self, ctx: Context) -> None:
        meta = {"captured_at": time.time(), "source": ctx.node, "seq": 0}
        await ctx.emit("image", await ctx.save_artifact(JPEG, "image/jpeg", meta=meta))


@pytest.mark.parametrize("locked", [False, True], ids=["open", "locked"])
async def test_media_arrive_as_urls_the_receiver_can_get(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, locked: bool
) -> None:
    monkeypatch.setenv("MEDIAFLOW_WEBHOOK_SECRET", SECRET)
    settings = ServerSettings(token=TOKEN, lock_reads=locked)
    # The sink signs links with the session's token; without one its URLs are bare.
    engine = replace(FAST, store=StoreSettings(token=TOKEN)) if locked else FAST
    async with serve(tmp_path, settings) as served, receiving(lambda n: 200) as receiver:
        flow = (
            FlowBuilder("cams")
            .add("cam", Snap)
            .add("hook", "webhook", inputs={"image": "cam.image"}, url=receiver.url,
                 base_url=served.url)
        )  # fmt: skip
        async with FlowSession(flow.build(), tmp_path, settings=engine) as session:
            await receiver.wait_for(lambda: len(receiver.delivered()) == 1)
            (body,) = receiver.delivered()
            value: dict[str, Any] = body["value"]
            url = value["url"]
            async with served.client.get(url) as answer:
                status, data = answer.status, await answer.read()
            bare = url.partition("?")[0]
            async with served.client.get(bare) as answer:
                bare_status = answer.status
            # A link in the query opens an artifact, nothing else.
            flow_view = f"{served.url}/api/flows/cams?{url.partition('?')[2]}"
            async with served.client.get(flow_view) as answer:
                view_status = answer.status
            assert session.started
    assert body["kind"] == "image" and body["from"] == {"node": "cam", "port": "image"}
    assert body["captured_at"] == value["meta"]["captured_at"]
    assert bare == f"{served.url}/artifacts/{value['digest']}"
    assert value["media_type"] == "image/jpeg" and value["size"] == len(JPEG)
    assert (status, data) == (200, JPEG)
    if locked:
        assert url.startswith(bare + "?link=mfl1.")
        assert bare_status == 401  # without the link, locked reads stay locked
        assert view_status == 401
    else:
        assert url == bare and bare_status == 200
