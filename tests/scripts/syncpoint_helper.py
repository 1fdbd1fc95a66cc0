"""Calls that would synchronize on CUDA, each on a line the tests find by its marker comment."""

import torch


def call_item(t: torch.Tensor) -> float:
    """``.item()`` on a known line."""
    return t.item()  # MARK:item


def print_tensor(t: torch.Tensor) -> str:
    """Formatting a tensor (``print`` would call the same ``__repr__``)."""
    return repr(t)  # MARK:repr


def branch_on(t: torch.Tensor) -> bool:
    """``if tensor:`` calls ``__bool__``."""
    return bool(t)  # MARK:bool


def moves(t: torch.Tensor) -> None:
    """``.to(dtype)`` stays on the device (not a sync point); ``.to("cpu")`` is one."""
    t.to(torch.float64)  # MARK:to-dtype
    t.to("cpu")  # MARK:to-cpu


def masks(t: torch.Tensor) -> None:
    """Indexing with a boolean mask needs the number of True values (nonzero): a sync point, read or
    write; indexing with integers or slices is not one."""
    v = torch.arange(4.0) * t
    v[v > 1]  # MARK:mask-read
    v[v > 2] = 0.0  # MARK:mask-write
    v[1:3]  # MARK:slice
    v[torch.tensor([0, 2])]  # MARK:int-index
    v[0, ...] if v.dim() > 1 else v[..., v > 0]  # MARK:mask-in-tuple


def library_bookkeeping() -> list[int]:
    """A sampler's own ``randperm().tolist()`` runs inside torch: not charged to this line."""
    return list(torch.utils.data.RandomSampler(range(8)))  # MARK:sampler


def line_of(marker: str) -> int:
    """The line number of ``# MARK:marker`` in this file."""
    with open(__file__) as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# MARK:{marker}"):
                return number
    raise LookupError(marker)
