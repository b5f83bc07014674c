"""torch.distributed in a few lines: which process this is, and the collectives training needs.

Under `torchrun` (RANK and WORLD_SIZE set) training runs DistributedDataParallel, NCCL on
GPUs and gloo on CPUs; otherwise `World()` is a single process and every call is a no-op.
"""

from __future__ import annotations

import ctypes
import os
import pickle
from dataclasses import dataclass

import torch
from torch import Tensor

from ..errors import InputError, SettingError


def resolve_device(name: str) -> torch.device:
    """The device a name asks for, refused in a line when it is not one torch can use here (a typo, a GPU past the
    count, a kind of device this tool does not run on)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise SettingError("device", f"{name}: expected auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise SettingError("device", f"{name}: grammar-induce runs on cpu or cuda, not {device.type}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SettingError("device", f"{name}: torch sees no CUDA device")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SettingError("device", f"{name}: torch sees {torch.cuda.device_count()} CUDA device(s), "
                               f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return device


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> World:
        if "RANK" not in os.environ or int(os.environ.get("WORLD_SIZE", "1")) < 2:
            return cls()
        return cls(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0")))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device_for(self, device: torch.device) -> torch.device:
        """Pick this process's GPU and join the process group (the first call does)."""
        if self.size == 1:
            return device
        if device.type == "cuda":
            device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(device)
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return device

    def split_rows(self, rows: Tensor) -> Tensor:
        """This process's share of the batch columns (T, B) -> (T, B / size); the global batch is B.
        A view: the columns of a memory-mapped corpus stay mapped."""
        batch = rows.shape[1]
        if batch % self.size:
            raise InputError(f"train.batch_size {batch} is not divisible by the {self.size} processes")
        share = batch // self.size
        return rows[:, self.rank * share : (self.rank + 1) * share]

    def gather_columns(self, part: Tensor) -> Tensor:
        """The inverse of split_rows for a state (B / size, H) -> (B, H), on every process."""
        if self.size == 1:
            return part
        parts = [torch.empty_like(part) for _ in range(self.size)]
        torch.distributed.all_gather(parts, part.contiguous())
        return torch.cat(parts)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [model.device] if model.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids)

    def _collective(self, value: float, op) -> float:
        if self.size == 1:
            return value
        device = "cuda" if torch.distributed.get_backend() == "nccl" else "cpu"
        t = torch.tensor([value], dtype=torch.float64, device=device)
        op(t)
        return t.item()

    def mean(self, value: float) -> float:
        return self._collective(value, lambda t: torch.distributed.all_reduce(t)) / self.size

    def broadcast(self, value: float) -> float:
        """Rank 0's value on every rank, so all take the same decisions."""
        return self._collective(value, lambda t: torch.distributed.broadcast(t, src=0))

    def any(self, flag: bool) -> bool:
        """True on every process if it is true on one (a stop request reaches all of them)."""
        return bool(self._collective(float(flag), lambda t: torch.distributed.all_reduce(
            t, op=torch.distributed.ReduceOp.MAX)))

    def gather_objects(self, obj: object) -> list[object]:
        """Every process's `obj` (pickled; the processes of one launch trust each other), in rank order, on
        every process. Written out because torch's all_gather_object needs numpy, which we do not."""
        if self.size == 1:
            return [obj]
        device = "cuda" if torch.distributed.get_backend() == "nccl" else "cpu"
        data = pickle.dumps(obj)
        sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(self.size)]
        torch.distributed.all_gather(sizes, torch.tensor([len(data)], device=device))
        padded = torch.zeros(max(int(size) for size in sizes), dtype=torch.uint8, device=device)
        padded[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        parts = [torch.empty_like(padded) for _ in range(self.size)]
        torch.distributed.all_gather(parts, padded)
        gathered = []
        for part, size in zip(parts, sizes):
            part = part.cpu()
            gathered.append(pickle.loads(ctypes.string_at(part.data_ptr(), int(size))))
        return gathered

    def barrier(self) -> None:
        if self.size > 1:
            torch.distributed.barrier()

    def close(self) -> None:
        """Tear the process group down on every rank together (rank 0 may still be testing).

        Drop every DistributedDataParallel wrapper first: one still alive keeps the group's
        worker threads until interpreter exit, where gloo can abort the process.
        """
        if self.size > 1 and torch.distributed.is_initialized():
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()
