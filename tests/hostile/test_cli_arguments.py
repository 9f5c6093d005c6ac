"""Hostile command lines for `elastic-training validate` and `elastic-training cluster`, run in-process through
`cli.main.main`: every one ends in an exit status (0 or 1 a verdict, 2 a usage error on one line), never a
traceback or a hang."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from elastic_training.cli.main import main
from tests.support.hostile_strategies import HOSTILE, nasty_text, words

tokens = st.one_of(
    nasty_text,
    words,
    st.sampled_from(["--step", "--deep", "--deep-budget", "--min-step", "--reference-step", "--items", "--json"]),
    st.sampled_from(["--no-commit-marker", "-h", "--", "-", "gs://", "gs:///x", "gs://a b/c", "/dev/null", "/"]),
    st.sampled_from(["1", "-1", "1G", "1.5T", "99999999999999999999999", "1e9", "nan", "items,../x", ","]),
)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of `elastic-training *argv` run in this process."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 2
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean(code: int, err: str) -> None:
    assert code in (0, 1, 2), code
    assert "Traceback" not in err
    if code == 2:
        last = err.strip().splitlines()[-1]
        assert "error:" in last and last.startswith("elastic-training"), err


@HOSTILE
@given(argv=st.lists(tokens, max_size=6))
def test_validate_any_arguments(argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # No argument may reach a real gs:// bucket (that needs the network): malformed gs:// URIs only.
    argv = [a for a in argv if not (a.startswith("gs://") and a[5:6].isalnum())]
    code, _out, err = run(["validate", *argv], capsys)
    assert_clean(code, err)


@HOSTILE
@given(path=nasty_text, extra=st.lists(tokens, max_size=3))
def test_validate_any_local_path(
    path: str, extra: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / path.replace("/", "_").replace("\x00", "_") if path else tmp_path
    with contextlib.suppress(OSError):
        target.mkdir(exist_ok=True)
    extra = [a for a in extra if not a.startswith("gs://")]
    code, _out, err = run(["validate", str(target), *extra], capsys)
    assert_clean(code, err)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


fault_argv = st.one_of(
    st.tuples(st.just("delete-pod"), nasty_text, nasty_text).map(list),
    st.tuples(st.just("signal-pod"), nasty_text, nasty_text, st.just("--signal"), nasty_text | words).map(list),
    st.lists(
        st.sampled_from(["fail-requests", "--code", "--count", "--probability", "--path", "--method"])
        | words
        | nasty_text,
        max_size=6,
    ),
    st.lists(st.sampled_from(["latency", "--seconds", "--path"]) | words | nasty_text, max_size=5),
    st.sampled_from([["expire-watches"], ["clear"], ["show"], ["expire-watches", "--compact"], []]),
)
kubeconfigs = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(str.encode),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "current-context",
                        "contexts",
                        "clusters",
                        "users",
                        "name",
                        "context",
                        "cluster",
                        "user",
                        "server",
                        "token",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=12,
    ).map(lambda doc: yaml.safe_dump(doc).encode()),
)


def _kubeconfig(server: str) -> dict[str, Any]:
    return {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }


@HOSTILE
@given(argv=fault_argv, content=kubeconfigs | st.sampled_from(["closed", "file", "ftp"]))
def test_cluster_fault_any_arguments_and_kubeconfig(
    argv: list[str], content: bytes | str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    if content == "closed":  # a kubeconfig that points nowhere: connection refused
        content = yaml.safe_dump(_kubeconfig(f"http://127.0.0.1:{_closed_port()}")).encode()
    elif content == "file":
        (tmp_path / "doc").write_text('{"looks": "like json"}')
        content = yaml.safe_dump(_kubeconfig(f"file://{tmp_path}/doc#")).encode()
    elif content == "ftp":
        content = yaml.safe_dump(_kubeconfig("ftp://127.0.0.1:1")).encode()
    assert isinstance(content, bytes)
    kubeconfig.write_bytes(content)
    code, _out, err = run(["cluster", "fault", "--kubeconfig", str(kubeconfig), *argv], capsys)
    assert_clean(code, err)
    assert code != 0  # nothing answers, so nothing can succeed


@pytest.mark.parametrize(
    "argv",
    [
        ["cluster", "up"],
        ["cluster", "up", "--kubeconfig", "k", "--port", "70000"],
        ["cluster", "up", "--kubeconfig", "k", "--port", "-1"],
        ["cluster", "up", "--kubeconfig", "k", "--watch-history", "5"],  # retired: kube-apiserver's own watch cache
        ["cluster", "up", "--kubeconfig", "k", "--watch-history"],
        ["cluster", "up", "--kubeconfig", "k", "--description", "no-such-description.yaml"],
        ["cluster", "up", "--kubeconfig", "/dev/null/k"],  # under a file: refused before anything starts
        ["cluster", "up", "--kubeconfig", "k", "--workdir", "/dev/null"],
        ["cluster", "up", "--kubeconfig", "k", "--workdir", "/proc/nope"],
        ["cluster", "fault", "--kubeconfig", "k", "kueue-configuration", "/nonexistent.yaml"],
        ["cluster", "fault"],
        ["cluster", "fault", "--kubeconfig", "k", "latency", "--seconds", "nan"],
        ["cluster", "fault", "--kubeconfig", "k", "latency", "--seconds", "1e309"],
        ["cluster", "fault", "--kubeconfig", "k", "fail-requests", "--code", "200"],
        ["cluster", "fault", "--kubeconfig", "k", "fail-requests", "--path", "("],
        ["cluster", "fault", "--kubeconfig", "k", "signal-pod", "ns", "p", "--signal", "SIGNOPE"],
        ["cluster"],
        [],
        ["nope"],
    ],
)
def test_cluster_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(argv, capsys)
    assert code == 2
    assert_clean(code, err)
