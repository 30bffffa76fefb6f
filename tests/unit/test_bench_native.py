"""The benchmark's compiled simulator (bench/native.py): a build is named by its
sources, is used only when it replays exactly as the pure modules do, and a failed
build leaves the benchmark on the pure modules. (The compile itself runs in
``make bench``: ~35 s, too long for this suite.)"""

from __future__ import annotations

import fcntl
import os
import threading
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


def _fake_build(path: Path) -> None:
    (path / "pdscaler" / "sim").mkdir(parents=True)


def test_a_run_of_the_same_sources_waits_for_the_build_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `make bench` at once: the second must neither remove nor redo the build the
    first is making (it used to delete the half-made build and start its own)."""
    monkeypatch.setattr(native, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(native, "key", lambda: "k1")
    builds: list[Path] = []
    monkeypatch.setattr(native, "compile_build", lambda p: builds.append(p))
    monkeypatch.setattr(native, "check", lambda p: None)
    _fake_build(native.CACHE / "k1")  # the first run, building under its lock
    first = os.open(native.CACHE / "k1.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(first, fcntl.LOCK_EX)
    got: list[Path | None] = []
    second = threading.Thread(target=lambda: got.append(native.ensure(lambda _: None)))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # waits, touches nothing
    assert not builds
    assert (native.CACHE / "k1" / "pdscaler").is_dir()
    (native.CACHE / "k1" / native.OK).write_text("ok\n")
    os.close(first)  # the first run's build is done and checked
    second.join(5)
    assert got == [native.CACHE / "k1"]
    assert not builds


def test_unused_builds_of_other_sources_are_pruned_and_one_in_use_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "CACHE", tmp_path / "cache")
    for age, name in enumerate(["new", "mid", "old", "oldest", "current"]):
        _fake_build(native.CACHE / name)
        t = 1_000_000 - 1000 * age if name != "current" else 2_000_000
        os.utime(native.CACHE / name, (t, t))
    in_use = native._lock("oldest", exclusive=False)  # a run still on it
    assert native.prune("current", keep=2) == ["old"]
    left = sorted(p.name for p in native.CACHE.iterdir() if p.is_dir())
    assert left == ["current", "mid", "new", "oldest"]
    assert in_use is not None
    os.close(in_use)
    assert native.prune("current", keep=2) == ["oldest"]


def test_ensure_holds_its_build_for_the_run_it_re_executes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(native, "key", lambda: "k2")
    monkeypatch.setattr(native, "compile_build", _fake_build)
    monkeypatch.setattr(native, "check", lambda p: None)
    assert native.ensure(lambda _: None) == native.CACHE / "k2"
    assert (native.CACHE / "k2" / native.OK).exists()
    # another process may share it but not take it away
    assert native._lock("k2", exclusive=True, wait=False) is None
    shared = native._lock("k2", exclusive=False, wait=False)
    assert shared is not None
    os.close(shared)


def test_a_cache_that_cannot_be_written_leaves_the_bench_on_the_pure_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("not a directory\n")
    monkeypatch.setattr(native, "CACHE", tmp_path / "file" / "native")
    said: list[str] = []
    assert native.ensure(said.append) is None
    assert "pure-Python" in said[-1]
