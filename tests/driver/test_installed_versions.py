"""The key's dependency versions, remembered in the cache directory (neuroncc/driver/installed_versions.py):
taken from the stamp while nothing they depend on changed; an upgrade, an uninstall, another sys.path or a
damaged stamp reads them again."""

from __future__ import annotations

import importlib.metadata
import shutil
import sys

import pytest

from neuroncc.driver import installed_versions as iv


def _install(site, version: str) -> None:
    for old in site.glob("fakedist-*.dist-info"):
        shutil.rmtree(old)
    info = site / f"fakedist-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fakedist\nVersion: {version}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh directory first on sys.path, holding the distribution ``fakedist``."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    _install(site, "1.0")
    return site


def _versions(root, settle_ns=0):
    root.mkdir(mode=0o700, exist_ok=True)  # as the cache makes it
    return iv.installed_versions(("fakedist", "torch", "no-such-dist"), root, settle_ns=settle_ns)


def test_the_stamp_answers_while_nothing_changed(site, tmp_path, monkeypatch):
    first = _versions(tmp_path / "cache")
    assert first == {"fakedist": "1.0", "torch": importlib.metadata.version("torch"), "no-such-dist": iv.NOT_INSTALLED}

    def unread(name):
        raise AssertionError(f"{name}'s metadata read again")

    monkeypatch.setattr(importlib.metadata, "distribution", unread)
    assert _versions(tmp_path / "cache") == first


@pytest.mark.parametrize("change", ["upgrade", "uninstall", "another sys.path"])
def test_a_changed_installation_is_read_again(site, tmp_path, monkeypatch, change):
    assert _versions(tmp_path / "cache")["fakedist"] == "1.0"
    if change == "upgrade":
        _install(site, "2.0")
    elif change == "uninstall":
        shutil.rmtree(site / "fakedist-1.0.dist-info")
    else:
        other = tmp_path / "other"
        other.mkdir()
        _install(other, "3.0")
        monkeypatch.syspath_prepend(str(other))
    expected = {"upgrade": "2.0", "uninstall": iv.NOT_INSTALLED, "another sys.path": "3.0"}[change]
    assert _versions(tmp_path / "cache")["fakedist"] == expected
    assert _versions(tmp_path / "cache")["fakedist"] == expected  # and the new stamp says so


def test_a_damaged_stamp_is_ignored_and_rewritten(site, tmp_path):
    first = _versions(tmp_path / "cache")
    (stamp,) = (tmp_path / "cache" / "source").glob("versions-*.json")
    stamp.write_text(stamp.read_text().replace('"1.0"', '"9.9"'))
    assert _versions(tmp_path / "cache") == first
    assert '"1.0"' in stamp.read_text()


def test_nothing_is_stamped_while_the_installation_is_fresh(site, tmp_path):
    _versions(tmp_path / "cache", settle_ns=10**12)
    assert not list((tmp_path / "cache").rglob("versions-*.json"))


def test_another_finder_of_distributions_reads_every_time(site, tmp_path, monkeypatch):
    class Finder:
        @staticmethod
        def find_spec(*args):
            return None

        @staticmethod
        def find_distributions(context=None):
            return iter(())

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder])
    _versions(tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("versions-*.json"))
