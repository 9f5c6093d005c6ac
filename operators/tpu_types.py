"""The TPU catalogue: each generation's GKE accelerator label, chips per VM, Pathways instance type and slice shapes.

Accelerator labels, chips per VM and topology shapes follow xpk's ``core/system_characteristics.py`` (GKE's
``cloud.google.com/gke-tpu-accelerator`` values, 4 chips per multi-host VM, 1 for a 1x1 slice). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from elastic_training.operators.shown import shown


@dataclass(frozen=True)
class TpuType:
    """One TPU generation as GKE and Pathways name it.

    `chips_per_vm` is the chips of one host of a multi-host slice; a 1x1 slice has a single chip
    (xpk `compute_chips_per_vm`). `topologies` lists the allowed shapes of a 2-D type; a 3-D type allows
    2x2x1, 2x2x2, 2x2x4, 2x4x4 and shapes whose dimensions are multiples of 4 (at most `max_cubes`
    4x4x4 cubes, nondecreasing when `nondecreasing`).
    """

    name: str
    gke_accelerator: str
    chips_per_vm: int
    topology_dims: int
    pathways_instance_type: str
    topologies: frozenset[str] = frozenset()
    max_cubes: int = 0
    nondecreasing: bool = False

    def topology_error(self, topology: str) -> str | None:
        """Why `topology` is not a slice shape of this type, or None when it is."""
        parts = topology.split("x")
        # ASCII digits, a few of them: `int()` also takes other scripts' digits and refuses > 4300 digits.
        if not all(p.isascii() and p.isdecimal() and len(p) <= 6 and p == str(int(p)) and int(p) >= 1 for p in parts):
            return f"{shown(topology)} is not a topology: expected {self.topology_dims} positive integers joined by 'x'"
        if len(parts) != self.topology_dims:
            return (
                f"{self.name} topologies have {self.topology_dims} dimensions (e.g. {self._example()}), "
                f"got {shown(topology)}"
            )
        dims = [int(p) for p in parts]
        if self.topology_dims == 2:
            if topology in self.topologies:
                return None
            known = ", ".join(_sorted_shapes(self.topologies))
            return f"{shown(topology)} is not a {self.name} slice shape; known: {known}"
        if topology in _SMALL_3D:
            return None
        if any(d % 4 for d in dims):
            return (
                f"{shown(topology)} is not a {self.name} slice shape: larger than 2x4x4, every dimension must be a "
                "multiple of 4 (e.g. 4x4x4, 4x4x8)"
            )
        if self.nondecreasing and dims != sorted(dims):
            return f"{shown(topology)} is not a {self.name} slice shape: write the dimensions in nondecreasing order"
        cubes = math.prod(d // 4 for d in dims)
        if cubes > self.max_cubes:
            return f"{shown(topology)} has {cubes} 4x4x4 cubes; a {self.name} slice has at most {self.max_cubes}"
        return None

    def chips(self, topology: str) -> int:
        """Chips in one slice of `topology`."""
        return math.prod(int(p) for p in topology.split("x"))

    def chips_per_vm_for(self, topology: str) -> int:
        """Chips attached to each VM of a slice of `topology` (the pod's `google.com/tpu` limit)."""
        return 1 if self.chips(topology) == 1 else self.chips_per_vm

    def vms_per_slice(self, topology: str) -> int:
        """VMs (and so worker pods) in one slice of `topology`."""
        return self.chips(topology) // self.chips_per_vm_for(topology)

    def _example(self) -> str:
        return "2x2" if self.topology_dims == 2 else "2x2x1"


_SMALL_3D: Final = frozenset({"2x2x1", "2x2x2", "2x2x4", "2x4x4"})
_2D_SHAPES: Final = frozenset({"1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"})


def _sorted_shapes(shapes: frozenset[str]) -> list[str]:
    return sorted(shapes, key=lambda s: tuple(int(p) for p in s.split("x")))


_V4 = TpuType("v4", "tpu-v4-podslice", 4, 3, "tpuv4", max_cubes=64)
_V5E = TpuType("v5e", "tpu-v5-lite-podslice", 4, 2, "tpuv5e", topologies=_2D_SHAPES)
_V5P = TpuType("v5p", "tpu-v5p-slice", 4, 3, "tpuv5", max_cubes=140, nondecreasing=True)
_V6E = TpuType("v6e", "tpu-v6e-slice", 4, 2, "tpuv6e", topologies=_2D_SHAPES)

TPU_TYPES: Final[Mapping[str, TpuType]] = {
    "v4": _V4,
    "v5e": _V5E,
    "v5litepod": _V5E,  # xpk's and Cloud TPU's name for v5e
    "v5p": _V5P,
    "v6e": _V6E,
}
