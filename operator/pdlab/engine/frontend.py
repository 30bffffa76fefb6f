"""A stand-in for NVIDIA Dynamo's frontend in the lab: its ``/metrics`` page.

Owns: serving each Ready frontend pod (labelled ``pdscaler.io/role=frontend`` and
``pdscaler.io/name=<PDDeployment>``, the labels docs/operator.md asks a Dynamo frontend
to carry so the ``dynamo`` preset's deployment-scoped queries select it; listed by
``pods.FrontendLister``) at its pod IP and port (the container port named
``http``, else the first, else 8000): ``GET /metrics`` with the
``dynamo_frontend_*`` series of its PDDeployment (``pdlab.engine.expo``, dialect
``dynamo-frontend``), ``GET /health``. Must not: change anything in the cluster, route
requests (a real frontend pairs prefill and decode; here the synthetic load needs no
routing), or compute the series (``sim.DeploymentSim.frontend_stats`` does).

A pod ``dynamo-chat-frontend-x`` (IP 127.64.0.12, port ``http`` 8000) of
PDDeployment ``serving/dynamo-chat`` becomes
``FrontendInfo("serving", "dynamo-chat-frontend-x", "dynamo-chat", "127.64.0.12", 8000)``
and its page shows ``dynamo_frontend_requests_total{...} 812`` once 812 requests of the
PDDeployment's synthetic load are answered.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from aiohttp import web

from pdlab.engine.loop_thread import LoopThread
from pdlab.engine.pods import FrontendInfo

#: (namespace, PDDeployment) -> the frontend's exposition page ("" before any series).
Page = Callable[[str, str], str]


class FrontendServers:
    """An HTTP server per Ready frontend, in one asyncio loop on a background thread;
    ``sync(frontends)`` serves exactly those, ``page`` renders each one's series."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.runners: dict[tuple[str, str], tuple[FrontendInfo, web.AppRunner]] = {}
        self._loop = LoopThread("frontends")

    def sync(self, frontends: Sequence[FrontendInfo], timeout: float = 10.0) -> list[str]:
        """Serve exactly ``frontends``; lines saying what changed."""
        return self._loop.run(self._sync(list(frontends)), timeout)

    async def _sync(self, frontends: list[FrontendInfo]) -> list[str]:
        said: list[str] = []
        want = {(f.namespace, f.name): f for f in frontends}
        for key in [k for k, (info, _) in self.runners.items() if want.get(k) != info]:
            info, runner = self.runners.pop(key)
            await runner.cleanup()
            said.append(f"frontend pod {key[1]} stopped ({info.address})")
        for key, info in want.items():
            if key in self.runners:
                continue
            runner = web.AppRunner(self._app(info), access_log=None, handle_signals=False)
            await runner.setup()
            try:
                await web.TCPSite(runner, info.ip, info.port, reuse_address=True).start()
            except OSError as err:
                await runner.cleanup()
                said.append(f"cannot serve frontend {key[1]} at {info.address}: {err}")
                continue
            self.runners[key] = (info, runner)
            said.append(f"frontend pod {key[1]} serving at http://{info.address}/metrics")
        return said

    def _app(self, info: FrontendInfo) -> web.Application:
        async def metrics(_req: web.Request) -> web.Response:
            text = self.page(info.namespace, info.deployment)
            return web.Response(text=text, content_type="text/plain")

        async def health(_req: web.Request) -> web.Response:
            return web.Response(text="")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/health", health)
        return app

    def close(self) -> None:
        """Stop every server and the loop."""
        with contextlib.suppress(Exception):
            self.sync([])
        self._loop.stop()
