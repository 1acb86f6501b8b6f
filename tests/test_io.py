"""Atomic files and folders: the target appears complete, or not at all."""

import os
import stat

import pytest

from dnmopd.io import atomic_directory, atomic_write


def siblings(path):
    return sorted(p.name for p in path.parent.iterdir())


def test_a_folder_appears_complete_and_replaces_the_old_one(tmp_path):
    target = tmp_path / "release"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with atomic_directory(target) as building:
        (building / "a.txt").write_text("a")
        (building / "sub").mkdir()
        assert building.parent == tmp_path and building != target and (target / "old.txt").is_file()
    assert sorted(p.name for p in target.iterdir()) == ["a.txt", "sub"]
    assert siblings(target) == ["release"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o777 & ~umask  # not mkdtemp's 0700
    assert stat.S_IMODE((target / "a.txt").stat().st_mode) == 0o666 & ~umask


def test_a_failed_folder_leaves_the_old_one_and_no_temporary(tmp_path):
    target = tmp_path / "release"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError, match="half way"), atomic_directory(target) as building:
        (building / "partial.txt").write_text("partial")
        raise RuntimeError("half way")
    assert [p.name for p in target.iterdir()] == ["old.txt"] and siblings(target) == ["release"]
    with pytest.raises(KeyboardInterrupt), atomic_directory(tmp_path / "new"):
        raise KeyboardInterrupt
    assert siblings(target) == ["release"]


def test_a_failed_file_write_leaves_nothing(tmp_path):
    with pytest.raises(ValueError), atomic_write(tmp_path / "x.json") as handle:
        handle.write("{")
        raise ValueError
    assert list(tmp_path.iterdir()) == []
