"""`--cpu-remap`: run a script hard-wired to CUDA on a machine without it (harness side).

Maps the `nccl` backend to `gloo`, every CUDA device argument (`.cuda()`, `.to("cuda")`,
`device="cuda:1"`, `torch.device("cuda", r)`) to the CPU, makes `torch.cuda.set_device` and
`synchronize` no-ops, and drops DDP's `device_ids`/`output_device` for CPU modules. Only
used when the user asks: the report then says the run was remapped, and the CUDA-only
findings (loss-on-cpu, late-cuda-visible-devices) still need a GPU.
"""

from __future__ import annotations

from dplint.runtime_check.record import Recorder


def install(recorder: Recorder) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.overrides import TorchFunctionMode

    if torch.backends.cuda.is_built() and torch.cuda.is_available():
        return  # a real GPU: nothing to remap
    recorder.emit("remap", what="cuda->cpu, nccl->gloo")

    original_init_process_group = dist.init_process_group

    def init_process_group(*args, **kwargs):
        backend = kwargs.get("backend", args[0] if args else None)
        if isinstance(backend, str) and "nccl" in backend:
            if "backend" in kwargs:
                kwargs["backend"] = "gloo"
            else:
                args = ("gloo", *args[1:])
        return original_init_process_group(*args, **kwargs)

    dist.init_process_group = init_process_group
    torch.distributed.distributed_c10d.init_process_group = init_process_group
    torch.cuda.set_device = lambda *args, **kwargs: None
    torch.cuda.synchronize = lambda *args, **kwargs: None

    original_ddp_init = DistributedDataParallel.__init__

    def ddp_init(self, module, *args, **kwargs):
        kwargs.pop("device_ids", None)
        kwargs.pop("output_device", None)
        # device_ids and output_device are its first two positional parameters
        args = tuple(None if index < 2 else arg for index, arg in enumerate(args))
        return original_ddp_init(self, module, *args, **kwargs)

    DistributedDataParallel.__init__ = ddp_init

    cpu = torch.device("cpu")

    def to_cpu(value):
        if isinstance(value, torch.device) and value.type == "cuda":
            return cpu
        if isinstance(value, str) and value.startswith("cuda"):
            return "cpu"
        return value

    class CpuMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.Tensor.cuda:
                return args[0]
            if "device" in kwargs:
                kwargs["device"] = to_cpu(kwargs["device"])
            if func is torch.Tensor.to:
                args = tuple(to_cpu(arg) if i > 0 else arg for i, arg in enumerate(args))
            return func(*args, **kwargs)

    CpuMode().__enter__()  # stays on for the whole run
