"""`--cpu-remap`: run a script hard-wired to CUDA on a machine without it (harness side).

What is remapped, each time recorded with the script line that asked for it (the report
lists them):

* the `nccl` backend -> `gloo` (`init_process_group`, also `"cpu:gloo,cuda:nccl"`);
* CUDA devices -> the CPU: `.cuda()` / `.cuda(rank)` of tensors and modules, `.to("cuda")`,
  `.to(rank)` with an int, `device="cuda:1"` / `device=rank` of factories, `torch.device(rank)`
  and `torch.device("cuda", r)`, `torch.load(map_location="cuda:0")`;
* `torch.cuda.set_device`, `synchronize`, `empty_cache` and `torch.cuda.device(...)` do nothing;
  `current_device()` is 0 and `device_count()` is the number of ranks verify runs (so
  `mp.spawn(nprocs=torch.cuda.device_count())` starts them);
* DDP's `device_ids` / `output_device` are dropped (a CPU module takes none).

Only used when the user asks: the report then says the run was remapped, and the CUDA-only
findings (loss-on-cpu, late-cuda-visible-devices) still need a GPU.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Optional

from dplint.runtime_check.record import Recorder


def install(recorder: Recorder, ranks: int = 1) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.overrides import TorchFunctionMode

    if torch.backends.cuda.is_built() and torch.cuda.is_available():
        return  # a real GPU: nothing to remap
    recorder.emit("remap", what="cuda->cpu, nccl->gloo")
    said: set = set()
    here = __file__

    def caller() -> Optional[int]:
        """The script line that called into the remap, or None when torch itself did."""
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename == here:
            frame = frame.f_back
        if frame is not None and frame.f_code.co_filename == recorder.script:
            return frame.f_lineno
        return None

    def note(what: str) -> None:
        line = caller()
        key = (recorder.path, line, what)  # once per variant (each records to its own file)
        if line is not None and key not in said:
            said.add(key)
            recorder.emit("remapped", line=line, what=what)

    cpu = torch.device("cpu")
    real_device = torch.device

    def to_cpu(value, what: str, ints: bool = True):
        if isinstance(value, real_device) and value.type == "cuda":
            note(what)
            return cpu
        if isinstance(value, str) and value.startswith("cuda"):
            note(what)
            return "cpu"
        if ints and isinstance(value, int) and not isinstance(value, bool):
            note(what)
            return cpu
        return value

    # ------------------------------------------------------------------ process groups
    original_init_process_group = dist.init_process_group

    def init_process_group(*args, **kwargs):
        backend = kwargs.get("backend", args[0] if args else None)
        if isinstance(backend, str) and "nccl" in backend:
            note("nccl -> gloo")
            if "backend" in kwargs:
                kwargs["backend"] = "gloo"
            else:
                args = ("gloo", *args[1:])
        return original_init_process_group(*args, **kwargs)

    dist.init_process_group = init_process_group
    torch.distributed.distributed_c10d.init_process_group = init_process_group

    # ------------------------------------------------------------------------ torch.cuda
    def quiet(name: str, result=None):
        def call(*args, **kwargs):
            note(f"torch.cuda.{name}() ignored")
            return result

        return call

    torch.cuda.set_device = quiet("set_device")
    torch.cuda.synchronize = quiet("synchronize")
    torch.cuda.empty_cache = quiet("empty_cache")

    original_current_device, original_device_count = torch.cuda.current_device, torch.cuda.device_count

    # Only the script's own calls are answered as if there were GPUs: torch asking itself
    # (DDP, process groups) must keep seeing none.
    def current_device():
        if caller() is None:
            return original_current_device()
        note("torch.cuda.current_device() -> 0")
        return 0

    def device_count():
        if caller() is None:
            return original_device_count()
        note(f"torch.cuda.device_count() -> {ranks}")
        return ranks

    torch.cuda.current_device = current_device
    torch.cuda.device_count = device_count

    class device_context(contextlib.nullcontext):
        def __init__(self, *args, **kwargs):
            note("torch.cuda.device(...) ignored")
            super().__init__()

    torch.cuda.device = device_context

    # --------------------------------------------------------------------- torch.device
    class DeviceType(type):
        def __instancecheck__(cls, instance):
            return isinstance(instance, real_device)

        def __subclasscheck__(cls, subclass):
            return issubclass(subclass, real_device)

        def __call__(cls, *args, **kwargs):
            if args and (isinstance(args[0], int) and not isinstance(args[0], bool) or
                         isinstance(args[0], str) and args[0].startswith("cuda")):
                note("torch.device -> cpu")
                return cpu
            if "type" in kwargs and str(kwargs["type"]).startswith("cuda"):
                note("torch.device -> cpu")
                return cpu
            return real_device(*args, **kwargs)

    class device(metaclass=DeviceType):
        """torch.device, with CUDA and int devices mapped to the CPU (isinstance still works)."""

    torch.device = device

    # ------------------------------------------------------------------ modules and DDP
    original_module_to = nn.Module.to

    def module_to(self, *args, **kwargs):
        args = tuple(to_cpu(arg, ".to(device) -> cpu") if index == 0 else arg for index, arg in enumerate(args))
        if "device" in kwargs:
            kwargs["device"] = to_cpu(kwargs["device"], ".to(device) -> cpu")
        return original_module_to(self, *args, **kwargs)

    def module_cuda(self, *args, **kwargs):
        note(".cuda() -> cpu")
        return self

    nn.Module.to, nn.Module.cuda = module_to, module_cuda

    original_ddp_init = DistributedDataParallel.__init__

    def ddp_init(self, module, *args, **kwargs):
        if kwargs.pop("device_ids", None) is not None or kwargs.pop("output_device", None) is not None or any(
            arg is not None for arg in args[:2]
        ):
            note("DDP device_ids dropped")
        # device_ids and output_device are its first two positional parameters
        args = tuple(None if index < 2 else arg for index, arg in enumerate(args))
        return original_ddp_init(self, module, *args, **kwargs)

    DistributedDataParallel.__init__ = ddp_init

    original_load = torch.load

    def load(*args, **kwargs):
        location = kwargs.get("map_location")
        if location is not None and not callable(location) and not isinstance(location, dict):
            kwargs["map_location"] = to_cpu(location, "torch.load(map_location) -> cpu")
        elif location is None or callable(location) or isinstance(location, dict):
            if callable(location):
                note("torch.load(map_location) -> cpu")
            kwargs["map_location"] = cpu  # a CUDA tensor saved elsewhere loads here too
        return original_load(*args, **kwargs)

    torch.load = load

    # ------------------------------------------------------------------ tensors, factories
    class CpuMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                note(".cuda() -> cpu")
                return args[0]
            if "device" in kwargs:
                kwargs["device"] = to_cpu(kwargs["device"], "device= -> cpu")
            if func is torch.Tensor.to:
                args = tuple(to_cpu(arg, ".to(device) -> cpu") if i == 1 else arg for i, arg in enumerate(args))
            return func(*args, **kwargs)

    CpuMode().__enter__()  # stays on for the whole run
