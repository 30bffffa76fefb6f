"""Argo CD's view of a PDDeployment: deploy/argocd/health.lua run by Lua 5.1 (lupa's
``lua51``, the language version of gopher-lua, which Argo CD embeds) on the object as
Argo CD hands it over (its JSON as a Lua table, ``obj``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from lupa.lua51 import LuaRuntime

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "argocd" / "health.lua"


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """(status, message) of the health script for ``obj``: ``("Healthy", "Serving: ...")``."""
    lua = LuaRuntime(unpack_returned_tuples=False)
    check = cast(Callable[[object], Any], lua.eval(f"function(obj)\n{SCRIPT.read_text()}\nend"))
    hs = check(lua.table_from(obj, recursive=True))
    return str(hs["status"]), str(hs["message"])
