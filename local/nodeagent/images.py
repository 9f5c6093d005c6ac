"""The local kubelet's image catalogue: which local program stands in for a container's image and command.

A real kubelet pulls the image and runs its entrypoint (or ``command``) with ``args``. Here an image is a
row of a small table: a reference pattern (registry and path; the tag and digest are not part of the
match, so a pinned tag runs the same stand-in) and the programs of that image, each a command prefix as
the manifest writes it mapped to the local argv prefix that replaces it. The arguments after the prefix
are passed on unchanged, so the local program receives the real command line and must accept or refuse it
as the real program would.

- image ``local``: any command, run as written (the tests' own pods);
- a MaxText image (``…/maxtext…``): ``python3 -m maxtext.trainers.pre_train.train …`` →
  ``python -m elastic_training.local.workloads.maxtext_train …``, or real MaxText from ``.venv-maxtext`` for a
  non-elastic run when it exists (`real_maxtext_train`); ``python3 -m maxtext.eval.runner.run …`` →
  ``python -m elastic_training.local.workloads.maxtext_eval …``; ``python3 -m maxtext_synthesize …`` (the project's
  program
  in the ``maxtext-synthesize`` image) → ``python -m elastic_training.local.workloads.maxtext_synthesize …``;
- ``…/pathways/server``: the image's entrypoint (``--node_type=resource_manager`` or worker flags) →
  ``python -m elastic_training.local.workloads.pathways server …``;
- ``…/pathways/proxy_server``: the image's entrypoint → ``python -m elastic_training.local.workloads.pathways proxy …``.

Upstream behaviour followed: the kubelet's image pull (kubernetes/kubernetes ``pkg/kubelet/images/
image_manager.go``): an image that cannot be pulled leaves the container waiting with reason
``ErrImagePull`` and then ``ImagePullBackOff`` (message ``Back-off pulling image "<image>"``), and the pod
Pending; it is never started. An image reference without ``command`` runs its entrypoint (``args`` only).
The Pathways images and their flags are the ones xpk renders (AI-Hypercomputer/xpk
``src/xpk/templates/pathways_workload_create.yaml.j2`` at 367c838) and google/pathways-job's controller
(``internal/controller/pathwaysjob_controller.go`` at c0cc759).

To add a program (e.g. MaxText's eval runner), append a `Program` to the image's ``programs``; to add an
image, append an `ImageEntry` to `CATALOGUE`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from elastic_training.local import maxtext_env

LOCAL_IMAGE: Final = "local"
# What the local catalogue runs its programs with: the cluster's interpreter (first on the container PATH).
LOCAL_PYTHON: Final = "python"

ERR_IMAGE_PULL: Final = "ErrImagePull"
IMAGE_PULL_BACKOFF: Final = "ImagePullBackOff"

# `[registry[:port]/]path[:tag][@digest]`: the tag is after the last '/', the digest after '@'.
_TAG = re.compile(r":[\w][\w.-]{0,127}\Z")


class ImagePullError(Exception):
    """The image is not in the catalogue: the kubelet reports ``ErrImagePull`` / ``ImagePullBackOff``."""

    def __init__(self, image: str) -> None:
        known = ", ".join(entry.example for entry in CATALOGUE)
        super().__init__(
            f'Failed to pull image "{image}": not found: the local image catalogue (local/nodeagent/images.py) '
            f"has no image matching it; known: {known}"
        )
        self.image = image


class ProgramNotFound(Exception):
    """The image is known but has no program for this command line (the container fails to start)."""


@dataclass(frozen=True)
class Program:
    """One program of an image: a command prefix as the manifest writes it → the local argv prefix.

    `command` empty means the image's entrypoint (a container without ``command``); `python3` in a
    command also matches `python` (both name the image's interpreter).
    """

    command: tuple[str, ...]
    local: tuple[str, ...]
    # The real program instead, for the arguments after `command`, when this machine can run it (else None).
    real: Callable[[Sequence[str]], list[str] | None] | None = None

    def matches(self, argv: Sequence[str], has_command: bool) -> bool:
        """Whether `argv` (command + args, expanded) runs this program."""
        if not self.command:
            return not has_command
        if len(argv) < len(self.command):
            return False
        head, *rest = self.command
        first = argv[0].rsplit("/", 1)[-1]
        interpreters = {"python", "python3"}
        same_head = first == head or (head in interpreters and first in interpreters)
        return same_head and list(argv[1 : len(self.command)]) == rest


@dataclass(frozen=True)
class ImageEntry:
    """An image of the catalogue: the repositories it matches and its programs."""

    name: str
    repository: re.Pattern[str]
    example: str
    programs: tuple[Program, ...] = ()
    # The `local` image: the command runs as written (tests' own pods, the idle placeholder).
    passthrough: bool = False

    def local_argv(self, argv: Sequence[str], has_command: bool) -> list[str]:
        """The local argv for the container's `argv`; `ProgramNotFound` when the image has no such program."""
        if self.passthrough:
            return list(argv)
        for program in self.programs:
            if program.matches(argv, has_command):
                skip = len(program.command)
                real = program.real(argv[skip:]) if program.real is not None else None
                return real if real is not None else [*program.local, *argv[skip:]]
        shown = " ".join(argv) if has_command else f"<entrypoint> {' '.join(argv)}".strip()
        known = "; ".join(" ".join(p.command) or "<entrypoint>" for p in self.programs)
        raise ProgramNotFound(
            f"the local stand-in of image {self.name} has no program for {shown!r} (local/nodeagent/images.py; "
            f"it runs: {known})"
        )


def repository_of(image: str) -> str:
    """`image` without its digest and tag: ``gcr.io/p/maxtext:1@sha256:…`` → ``gcr.io/p/maxtext``."""
    reference = image.split("@", 1)[0]
    slash = reference.rfind("/")
    match = _TAG.search(reference, slash + 1)
    return reference[: match.start()] if match else reference


def _module(name: str, *args: str) -> tuple[str, ...]:
    return (LOCAL_PYTHON, "-u", "-m", name, *args)


MAXTEXT_TRAIN_COMMAND: Final = ("python3", "-m", "maxtext.trainers.pre_train.train")
# MaxText's evaluation framework (maxtext e591f30: src/maxtext/eval/runner/run.py), in the eval image of
# deploy/images/maxtext-eval, and the project's synthesis program in deploy/images/maxtext-synthesize.
MAXTEXT_EVAL_COMMAND: Final = ("python3", "-m", "maxtext.eval.runner.run")
MAXTEXT_SYNTHESIZE_COMMAND: Final = ("python3", "-m", "maxtext_synthesize")

# Appended to real MaxText's arguments here: this machine's CPU in place of the TPU slice the image runs on.
REAL_MAXTEXT_CPU_ARGS: Final = ("hardware=cpu", "skip_jax_distributed_system=true")
_ELASTIC_ON = re.compile(r"elastic_enabled=(?i:true|1|yes)\Z")


def real_maxtext_train(args: Sequence[str]) -> list[str] | None:
    """Real MaxText's trainer for a non-elastic run when ``.venv-maxtext`` exists (local/maxtext_env.py).

    Its arguments are the manifest's; MaxText resolves the image's ``src/maxtext/configs/…`` path against its
    installed configs itself. JAX runs on CPU (`REAL_MAXTEXT_CPU_ARGS`, ``JAX_PLATFORMS=cpu``). An elastic run
    (``elastic_enabled=true``) needs the Pathways proxy, which only GKE has: None, the stand-in runs it.
    """
    python = maxtext_env.maxtext_python()
    if python is None or any(_ELASTIC_ON.match(arg) for arg in args):
        return None
    module = MAXTEXT_TRAIN_COMMAND[2]
    return ["env", "JAX_PLATFORMS=cpu", str(python), "-u", "-m", module, *args, *REAL_MAXTEXT_CPU_ARGS]


MAXTEXT = ImageEntry(
    name="maxtext",
    # Any registry path whose last segment starts with "maxtext" (maxtext, maxtext_jax_stable, maxtext-runner).
    repository=re.compile(r"(?:[^/]+/)*maxtext[a-z0-9._-]*"),
    example="<registry>/…/maxtext[_…]:<tag>",
    programs=(
        Program(
            MAXTEXT_TRAIN_COMMAND, _module("elastic_training.local.workloads.maxtext_train"), real=real_maxtext_train
        ),
        Program(MAXTEXT_EVAL_COMMAND, _module("elastic_training.local.workloads.maxtext_eval")),
        Program(MAXTEXT_SYNTHESIZE_COMMAND, _module("elastic_training.local.workloads.maxtext_synthesize")),
    ),
)

PATHWAYS_SERVER = ImageEntry(
    name="pathways-server",
    repository=re.compile(r"(?:[^/]+/)*pathways/server"),
    example="us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:<tag>",
    programs=(Program((), _module("elastic_training.local.workloads.pathways", "server")),),
)

PATHWAYS_PROXY = ImageEntry(
    name="pathways-proxy",
    repository=re.compile(r"(?:[^/]+/)*pathways/proxy_server"),
    example="us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:<tag>",
    programs=(Program((), _module("elastic_training.local.workloads.pathways", "proxy")),),
)

LOCAL = ImageEntry(
    name=LOCAL_IMAGE, repository=re.compile(re.escape(LOCAL_IMAGE)), example=LOCAL_IMAGE, passthrough=True
)

CATALOGUE: Final[list[ImageEntry]] = [LOCAL, MAXTEXT, PATHWAYS_SERVER, PATHWAYS_PROXY]


def find_image(image: str) -> ImageEntry:
    """The catalogue entry of `image` (the kubelet's "pull"); `ImagePullError` when there is none."""
    repository = repository_of(image)
    for entry in CATALOGUE:
        if entry.repository.fullmatch(repository):
            return entry
    raise ImagePullError(image)
