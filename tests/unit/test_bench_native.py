"""The benchmark's compiled simulator (bench/native.py): a build is named by its
sources, is used only when it replays exactly as the pure modules do, and a failed
build leaves the benchmark on the pure modules. (The compile itself runs in
``make bench``: ~35 s, too long for this suite.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import native

#: The first minute of each trace: enough for a changed engine constant to show.
SECONDS = 60.0


def copy_package(tmp: Path) -> Path:
    into = tmp / "build"
    native.copy_package(into)
    return into


def test_the_key_changes_with_any_source_byte(tmp_path: Path) -> None:
    build = copy_package(tmp_path)
    before = native.key(build / "pdscaler")
    assert before == native.key(native.PACKAGE)
    engine = build / "pdscaler" / "sim" / "engine.py"
    engine.write_text(engine.read_text() + "\n", encoding="utf-8")
    assert native.key(build / "pdscaler") != before


def test_a_copy_that_replays_identically_passes(tmp_path: Path) -> None:
    native.same_replay(copy_package(tmp_path), seconds=SECONDS)


def test_a_build_whose_replay_differs_is_refused(tmp_path: Path) -> None:
    build = copy_package(tmp_path)
    engine = build / "pdscaler" / "sim" / "engine.py"
    text = engine.read_text()
    assert "kv_handoff_base_s: float = 0.005" in text
    engine.write_text(
        text.replace("kv_handoff_base_s: float = 0.005", "kv_handoff_base_s: float = 0.006")
    )
    with pytest.raises(RuntimeError, match="differs"):
        native.same_replay(build, seconds=SECONDS)


def test_an_uncompiled_build_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no compiled engine"):
        native.check(copy_package(tmp_path))


def test_a_failed_compile_falls_back_to_the_pure_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(native, "COMPILED", ("sim/no_such_module.py",))
    said: list[str] = []
    assert native.ensure(said.append) is None
    assert "pure-Python" in said[-1]
    assert "mypyc exited" in said[-1]
    assert not any((tmp_path / "cache").glob("*/check-ok"))
