"""`dplint verify --migration ORIGINAL MIGRATED`: show that a migrated DDP script trains the
same model as the single-process script it came from.

The original runs in one process, the migrated one as 2 ranks on the CPU (gloo), both
started here with a probe (a `sitecustomize` on PYTHONPATH) and no GPU (CUDA_VISIBLE_DEVICES
empty). The ranks get torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT) from us; each run has a scratch working directory of its own.

What makes the two comparable: the probe replaces the original's shuffled order (its
RandomSampler) by the order the two ranks' DistributedSamplers draw together, so step k of
the original sees exactly the samples that step k of the ranks see between them. Then, for a
loss that is a mean over the batch, the mean of the two ranks' losses is the original's loss,
and DDP's averaged gradient is the original's gradient: the curves and the weights agree up to
floating-point rounding (summation order), not within a statistical tolerance. Dropout and
BatchNorm break this on purpose-free grounds (per-rank random masks, per-rank batch
statistics): with them the numbers differ and the report says so.
"""

from __future__ import annotations

import html
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional

WORLD = 2
LOSS_ATOL, LOSS_RTOL = 1e-5, 1e-4  # rounding of a mean over a different summation order
PARAM_ATOL = 1e-4  # after a few steps of the same updates

PROBE = r'''
import atexit, copy, json, os, sys

_OUT = os.environ.get("DPLINT_MIGRATION_OUT")
if _OUT:
    import torch
    import torch.utils.data as _data
    from torch.utils.data.distributed import DistributedSampler as _DS

    _RANK = int(os.environ.get("RANK", "0"))
    _ORDER_WORLD = int(os.environ.get("DPLINT_MIGRATION_ORDER_WORLD", "0"))
    _record = {"rank": _RANK, "losses": [], "samplers": [], "saves": [], "checkpoints": [], "finished": False}
    _state = {"optimizer": None, "bare": None, "samplers": 0, "in_backward": False}

    _STUB = json.loads(os.environ.get("DPLINT_MIGRATION_DATA_STUB") or "null")
    if _STUB is not None:
        # --data-stub: every Dataset class defined after start-up (the script's, torchvision's:
        # not torch's own TensorDataset, Subset, ...) reads no file; instance k of them holds
        # `size` items drawn from a generator seeded with k, so both runs see the same data.
        _stub_made = [0]

        def _stub_init(self, *args, **kwargs):
            generator = torch.Generator()
            generator.manual_seed(1000 + _stub_made[0])
            _stub_made[0] += 1
            size, columns = _STUB["size"], []
            for field in _STUB["fields"]:
                if field["kind"] == "int":
                    columns.append(torch.randint(0, field["high"], (size, *field["shape"]), generator=generator))
                else:
                    columns.append(torch.randn((size, *field["shape"]), generator=generator))
            self._dplint_columns = columns

        def _stub_getitem(self, index):
            values = tuple(column[index] for column in self._dplint_columns)
            return values[0] if len(values) == 1 else values

        def _stub_len(self):
            return _STUB["size"]

        def _stub_subclass(cls, **kwargs):
            super(_data.Dataset, cls).__init_subclass__(**kwargs)
            if not issubclass(cls, _data.IterableDataset) and not cls.__module__.startswith("torch."):
                cls.__init__, cls.__getitem__, cls.__len__ = _stub_init, _stub_getitem, _stub_len

        _data.Dataset.__init_subclass__ = classmethod(_stub_subclass)

    if os.environ.get("DPLINT_MIGRATION_NO_DROPOUT"):
        # --no-dropout: every dropout keeps every unit, in both runs (a mask is a random draw
        # per process, so the one process and the ranks cannot draw the same ones)
        import torch.nn.functional as _F

        def _kept(function):
            def dropout(input, p=0.5, *args, **kwargs):
                return function(input, 0.0, *args, **kwargs)
            return dropout

        for _name in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
            if hasattr(_F, _name):
                setattr(_F, _name, _kept(getattr(_F, _name)))

    if os.environ.get("DPLINT_MIGRATION_REMAP"):
        # the scripts call `.cuda()`: on this CPU-only run both are mapped to the CPU alike
        from dplint.runtime_check import remap as _remap
        from dplint.runtime_check.record import Recorder as _Recorder
        _remap.install(_Recorder(_OUT, _RANK, os.environ["DPLINT_MIGRATION_SCRIPT"]),
                       int(os.environ.get("WORLD_SIZE", "1")))

    _backward = torch.Tensor.backward

    def _recording_backward(self, *args, **kwargs):
        # once per call: under a TorchFunctionMode (the CPU remap) backward() runs through
        # `Tensor.backward` again, which is this function
        if _state["in_backward"]:
            return _backward(self, *args, **kwargs)
        if self.dim() == 0:
            _record["losses"].append(float(self.detach().float()))
        _state["in_backward"] = True
        try:
            return _backward(self, *args, **kwargs)
        finally:
            _state["in_backward"] = False

    torch.Tensor.backward = _recording_backward

    _optimizer_init = torch.optim.Optimizer.__init__

    def _recording_optimizer(self, *args, **kwargs):
        _optimizer_init(self, *args, **kwargs)
        if _state["optimizer"] is None:
            _state["optimizer"] = self

    torch.optim.Optimizer.__init__ = _recording_optimizer

    for _wrapper in (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel):
        def _patch(cls, init=_wrapper.__init__):
            def __init__(self, module, *args, **kwargs):
                _state["bare"] = module
                init(self, module, *args, **kwargs)
            cls.__init__ = __init__
        _patch(_wrapper)

    _loader_init = _data.DataLoader.__init__

    def _recording_loader(self, *args, **kwargs):
        if _STUB is not None:  # the stub is in memory: worker processes would only add start-up time
            if len(args) > 5:  # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, ...)
                args = (*args[:5], 0, *args[6:])
            else:
                kwargs["num_workers"] = 0
            kwargs.pop("persistent_workers", None)
            kwargs.pop("prefetch_factor", None)
        _loader_init(self, *args, **kwargs)
        if self.batch_size:
            self.sampler._dplint_batch = self.batch_size

    _data.DataLoader.__init__ = _recording_loader

    def _sampler_index(sampler):
        if not hasattr(sampler, "_dplint_index"):
            sampler._dplint_index = _state["samplers"]
            sampler._dplint_epochs = 0
            _state["samplers"] += 1
        return sampler._dplint_index

    def _note(sampler, kind, indices, shuffles, epoch, passes=None):
        _record["samplers"].append({"sampler": _sampler_index(sampler), "kind": kind, "size": len(sampler.data_source
            if hasattr(sampler, "data_source") else sampler.dataset), "epoch": epoch, "shuffle": shuffles,
            "pass": epoch if passes is None else passes, "indices": [int(i) for i in indices]})

    _ds_iter = _DS.__iter__

    def _distributed_iter(self):
        _sampler_index(self)
        passes = self._dplint_epochs
        self._dplint_epochs += 1
        indices = list(_ds_iter(self))
        _note(self, "distributed", indices, bool(self.shuffle), int(self.epoch), passes)
        return iter(indices)

    _DS.__iter__ = _distributed_iter

    def _shard_order(size, batch, epoch, world):
        """The samples of each global step, as `world` DistributedSamplers (seed 0) draw them."""
        generator = torch.Generator()
        generator.manual_seed(epoch)
        order = torch.randperm(size, generator=generator).tolist()
        total = -(-size // world) * world
        order += order[: total - size]
        shards = [order[rank:total:world] for rank in range(world)]
        per_rank = max(1, batch // world)
        steps = []
        for start in range(0, len(shards[0]), per_rank):
            for shard in shards:
                steps += shard[start:start + per_rank]
        return steps

    _random_iter = _data.RandomSampler.__iter__

    def _random_order(self):
        _sampler_index(self)
        epoch = self._dplint_epochs
        self._dplint_epochs += 1
        if _ORDER_WORLD and getattr(self, "_dplint_batch", None) and not self.replacement and self._num_samples is None:
            indices = _shard_order(len(self.data_source), self._dplint_batch, epoch, _ORDER_WORLD)
        else:
            indices = list(_random_iter(self))
        _note(self, "random", indices, True, epoch)
        return iter(indices)

    _data.RandomSampler.__iter__ = _random_order

    _sequential_iter = _data.SequentialSampler.__iter__

    def _sequential_order(self):
        _sampler_index(self)
        epoch = self._dplint_epochs
        self._dplint_epochs += 1
        indices = list(_sequential_iter(self))
        _note(self, "sequential", indices, False, epoch)
        return iter(indices)

    _data.SequentialSampler.__iter__ = _sequential_order

    _save = torch.save

    def _recording_save(obj, f, *args, **kwargs):
        result = _save(obj, f, *args, **kwargs)
        if isinstance(f, (str, os.PathLike)):
            path = os.path.abspath(os.fspath(f))
            if path not in _record["saves"]:
                _record["saves"].append(path)
        return result

    torch.save = _recording_save

    def _state_dicts(loaded):
        def tensors_only(value):
            return isinstance(value, dict) and value and all(isinstance(v, torch.Tensor) for v in value.values())
        if tensors_only(loaded):
            return [(None, loaded)]
        if isinstance(loaded, dict):
            return [(key, value) for key, value in loaded.items() if tensors_only(value)]
        return []

    def _check_checkpoints():
        bare = _state["bare"]
        for path in _record["saves"]:
            entry = {"file": os.path.basename(path), "key": None, "loaded": False, "error": None, "keys": 0,
                     "model": type(bare).__name__ if bare is not None else None}
            if not os.path.exists(path):  # the script removed it (it keeps the last checkpoint only)
                entry["removed"] = True
                _record["checkpoints"].append(entry)
                continue
            try:
                loaded = torch.load(path, map_location="cpu", weights_only=False)
                found = _state_dicts(loaded)
                if bare is None or not found:
                    entry["error"] = "no state dict in it" if bare is not None else "no bare model known"
                else:
                    wanted = set(bare.state_dict())
                    key, state = next(((k, v) for k, v in found if set(v) == wanted), found[0])
                    entry["key"], entry["keys"] = key, len(state)
                    copy.deepcopy(bare).load_state_dict(state)  # strict
                    entry["loaded"] = True
            except Exception as error:
                entry["error"] = " ".join(f"{type(error).__name__}: {error}".split())[:400]
            _record["checkpoints"].append(entry)

    _excepthook = sys.excepthook

    def _failed(kind, value, traceback):
        _record["error"] = f"{kind.__name__}: {value}"
        _excepthook(kind, value, traceback)

    sys.excepthook = _failed

    @atexit.register
    def _finish():
        optimizer = _state["optimizer"]
        values = []
        if optimizer is not None:
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    values += parameter.detach().float().cpu().flatten().tolist()
        _record["parameters"] = values
        _record["tensors"] = sum(len(group["params"]) for group in optimizer.param_groups) if optimizer else 0
        if _RANK == 0:
            _check_checkpoints()
        _record["finished"] = "error" not in _record
        with open(os.path.join(_OUT, f"rank{_RANK}.json"), "w") as out:
            json.dump(_record, out)
'''


@dataclass
class Check:
    name: str
    ok: Optional[bool]  # None: nothing to check (no checkpoint saved)
    lines: list[str] = field(default_factory=list)


@dataclass
class Proof:
    original: str
    migrated: str
    checks: list[Check] = field(default_factory=list)
    original_losses: list[float] = field(default_factory=list)
    rank_losses: list[list[float]] = field(default_factory=list)
    coverage: list[dict] = field(default_factory=list)  # per sampler and epoch: rank of each sample
    conditions: list[str] = field(default_factory=list)  # what both runs had changed alike (stub data, remap)
    notes: list[str] = field(default_factory=list)  # what happened outside the training (a crash at exit)

    @property
    def ok(self) -> bool:
        return all(check.ok is not False for check in self.checks)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _environment(probe_dir: str, out: str, extra: dict) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                          "GROUP_RANK", "TORCHELASTIC_RUN_ID")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [probe_dir, env.get("PYTHONPATH")]))
    env.update({"DPLINT_MIGRATION_OUT": out, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1",
                "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}, **extra)
    return env


class DataStubError(ValueError):
    pass


def parse_data_stub(spec: str) -> dict:
    """`--data-stub "3x32x32,int:10@64"`: the fields of one item, then (after `@`) how many
    items (64 by default). A field is a float tensor's shape (`3x32x32`, also `float:3x32x32`),
    or `int:K` (an int64 label in [0, K)), or `int:K:AxB` (an int64 tensor of that shape)."""
    fields_text, _, size_text = spec.partition("@")
    try:
        size = int(size_text) if size_text else 64
    except ValueError:
        raise DataStubError(f"--data-stub: the number of items after `@` is not an integer: {size_text!r}") from None
    if size < 1:
        raise DataStubError("--data-stub: the number of items must be at least 1")
    fields = []
    for text in fields_text.split(","):
        parts = text.strip().split(":")
        kind = parts[0] if parts[0] in ("int", "float") else "float"
        rest = parts[1:] if parts[0] in ("int", "float") else parts
        try:
            if kind == "int":
                if len(rest) not in (1, 2):
                    raise ValueError
                high, shape = int(rest[0]), _shape(rest[1]) if len(rest) == 2 else []
                if high < 1:
                    raise ValueError
                fields.append({"kind": "int", "high": high, "shape": shape})
            else:
                if len(rest) != 1:
                    raise ValueError
                fields.append({"kind": "float", "shape": _shape(rest[0])})
        except ValueError:
            raise DataStubError(f"--data-stub: cannot read the field {text.strip()!r}: give a shape (3x32x32), "
                                "int:K, or int:K:AxB") from None
    return {"fields": fields, "size": size}


def _shape(text: str) -> list[int]:
    dims = [int(part) for part in text.lower().split("x")]
    if not dims or any(dim < 1 for dim in dims):
        raise ValueError(text)
    return dims


def _calls_cuda(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            return ".cuda(" in source.read()
    except OSError:
        return False


def run_runs(original: str, migrated: str, script_args: list[str], workdir: str, timeout: float,
             data_stub: Optional[dict] = None, remap: bool = False, no_dropout: bool = False) -> dict:
    """Start the original (1 process) and the migrated script (WORLD ranks) together; returns
    {"original": [record], "migrated": [record per rank], "failures": [...]}."""
    probe_dir = os.path.join(workdir, "probe")
    os.makedirs(probe_dir)
    with open(os.path.join(probe_dir, "sitecustomize.py"), "w") as out:
        out.write(PROBE)
    port = _free_port()
    shared = {}
    if data_stub is not None:
        shared["DPLINT_MIGRATION_DATA_STUB"] = json.dumps(data_stub)
    if remap:
        shared["DPLINT_MIGRATION_REMAP"] = "1"
    if no_dropout:
        shared["DPLINT_MIGRATION_NO_DROPOUT"] = "1"
    launches = [("original", 0, original, {"DPLINT_MIGRATION_ORDER_WORLD": str(WORLD)})]
    for rank in range(WORLD):
        launches.append(("migrated", rank, migrated, {
            "RANK": str(rank), "WORLD_SIZE": str(WORLD), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(WORLD),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}))
    running = []
    for which, rank, script, extra in launches:
        out = os.path.join(workdir, which, "records")
        cwd = os.path.join(workdir, which, "cwd")
        os.makedirs(out, exist_ok=True)
        os.makedirs(cwd, exist_ok=True)
        log = open(os.path.join(workdir, which, f"rank{rank}.log"), "w+")
        extra = {**shared, **extra, "DPLINT_MIGRATION_SCRIPT": os.path.abspath(script)}
        process = subprocess.Popen([sys.executable, os.path.abspath(script), *script_args], cwd=cwd, stdout=log,
                                   stderr=subprocess.STDOUT, env=_environment(probe_dir, out, extra),
                                   start_new_session=True)
        running.append((which, rank, process, log, out))
    deadline = time.monotonic() + timeout
    result: dict = {"original": [], "migrated": [], "failures": [], "exit_crashes": []}
    stopped = False
    for which, rank, process, log, out in running:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stopped = True
            for _, _, other, _, _ in running:
                if other.poll() is None:
                    os.killpg(other.pid, 9)
                    other.wait()
            result["failures"].append(f"{which} rank {rank}: still running after {timeout:g} s (stopped)")
        log.seek(0)
        tail = log.read()[-1500:]
        log.close()
        record_path = os.path.join(out, f"rank{rank}.json")
        record = json.load(open(record_path)) if os.path.exists(record_path) else None
        label = "the original" if which == "original" else f"the migrated script, rank {rank}"
        finished = record is not None and record.get("finished")
        if finished and process.returncode < 0 and not stopped:
            # The record is written by the last exit hook: the script had returned. A signal after
            # it comes from the interpreter's teardown (gloo's threads can abort there, on a loaded
            # machine, even after destroy_process_group), not from the training being compared.
            result["exit_crashes"].append(f"{label} was stopped by {_signal_name(-process.returncode)} after the "
                                          "script had returned and its record was written (at interpreter exit)")
        elif process.returncode != 0 or not finished:
            result["failures"].append(f"{label} exited with status {process.returncode}:\n{tail}")
        result[which].append(record or {})
    return result


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= LOSS_ATOL + LOSS_RTOL * abs(a)


def judge(original: str, migrated: str, runs: dict) -> Proof:
    proof = Proof(original, migrated)
    proof.notes += runs.get("exit_crashes", [])
    if runs["failures"]:
        proof.checks.append(Check("runs", False, runs["failures"]))
        return proof
    base = runs["original"][0]
    ranks = runs["migrated"]
    proof.original_losses = base["losses"]
    proof.rank_losses = [rank["losses"] for rank in ranks]
    proof.checks.append(_loss_check(proof))
    proof.checks.append(_parameter_check(base, ranks))
    proof.checks.append(_coverage_check(proof, ranks))
    proof.checks.append(_checkpoint_check(ranks[0]))
    return proof


def _loss_check(proof: Proof) -> Check:
    steps = len(proof.original_losses)
    counts = {len(losses) for losses in proof.rank_losses}
    if counts != {steps}:
        return Check("loss per step", False, [f"the original ran {steps} backward steps, the ranks "
                                              f"{', '.join(str(len(l)) for l in proof.rank_losses)}"])
    means = [sum(values) / len(values) for values in zip(*proof.rank_losses)]
    worst = max((abs(a - b) for a, b in zip(proof.original_losses, means)), default=0.0)
    ok = steps > 0 and all(_close(a, b) for a, b in zip(proof.original_losses, means))
    lines = [f"{steps} steps; max |original - mean of ranks| = {worst:.2e} "
             f"(tolerance {LOSS_ATOL:g} + {LOSS_RTOL:g} x |loss|: floating-point rounding only)"]
    lines.append("step  original    migrated (mean)  " + "  ".join(f"rank {r}" for r in range(len(proof.rank_losses))))
    for step, (a, b) in enumerate(zip(proof.original_losses, means)):
        per_rank = "  ".join(f"{losses[step]:.6f}" for losses in proof.rank_losses)
        lines.append(f"{step:>4}  {a:.6f}    {b:.6f}         {per_rank}{'' if _close(a, b) else '   <- differs'}")
    if steps == 0:
        lines.append("no backward() ran: nothing was trained")
    return Check("loss per step", ok, lines)


def _parameter_check(base: dict, ranks: list[dict]) -> Check:
    original, first = base.get("parameters", []), ranks[0].get("parameters", [])
    if not original or len(original) != len(first):
        return Check("parameters at the end", False, [f"{len(original)} values in the original, {len(first)} on rank 0"])
    worst = max(abs(a - b) for a, b in zip(original, first))
    spread = max(abs(a - b) for rank in ranks[1:] for a, b in zip(first, rank.get("parameters", [])))
    ok = worst <= PARAM_ATOL and spread == 0.0
    return Check("parameters at the end", ok, [
        f"{base.get('tensors')} tensors, {len(original)} values; max |original - rank 0| = {worst:.2e} (tolerance {PARAM_ATOL:g})",
        f"ranks identical: {'yes' if spread == 0.0 else f'no (max difference {spread:.2e})'}"])


def _coverage_check(proof: Proof, ranks: list[dict]) -> Check:
    groups: dict = {}
    for rank, record in enumerate(ranks):
        for entry in record.get("samplers", []):
            if entry["kind"] != "distributed":
                continue
            # one pass over the sampler is one epoch of it (an evaluation sampler's set_epoch stays 0)
            group = groups.setdefault((entry["sampler"], entry.get("pass", entry["epoch"])),
                                      {"size": entry["size"], "shuffle": entry["shuffle"], "ranks": {}})
            group["ranks"].setdefault(rank, []).extend(entry["indices"])
    if not groups:
        return Check("samples per epoch", False, ["no DistributedSampler was iterated"])
    lines, ok = [], True
    for (sampler, epoch), group in sorted(groups.items()):
        owner = [[] for _ in range(group["size"])]
        for rank, indices in group["ranks"].items():
            for index in indices:
                owner[index].append(rank)
        missing = sum(1 for o in owner if not o)
        twice = sum(1 for o in owner if len(o) > 1)
        counts = ", ".join(f"rank {r}: {len(i)}" for r, i in sorted(group["ranks"].items()))
        label = f"sampler {sampler} ({'shuffled' if group['shuffle'] else 'in order'}, {group['size']} samples) epoch {epoch}"
        if missing or twice:
            ok = False
            lines.append(f"{label}: {missing} never seen, {twice} seen more than once ({counts})")
        else:
            lines.append(f"{label}: every sample once across the ranks ({counts})")
        proof.coverage.append({"label": label, "owner": owner})
    return Check("samples per epoch", ok, lines)


def _checkpoint_check(rank0: dict) -> Check:
    entries = rank0.get("checkpoints", [])
    if not entries:
        return Check("checkpoint", None, ["no checkpoint was saved"])
    lines = []
    for entry in entries:
        where = entry["file"] + (f"[{entry['key']!r}]" if entry["key"] is not None else "")
        if entry.get("removed"):
            lines.append(f"{where}: saved, then removed by the script")
        elif entry["loaded"]:
            lines.append(f"{where}: loads strictly into the bare {entry['model']} ({entry['keys']} keys)")
        else:
            lines.append(f"{where}: does not load into the bare model: {entry['error']}")
    kept = [entry for entry in entries if not entry.get("removed")]
    if not kept:
        return Check("checkpoint", None, lines)
    return Check("checkpoint", all(entry["loaded"] for entry in kept), lines)


def render_text(proof: Proof) -> str:
    out = [f"verify --migration: {proof.original} (1 process) vs {proof.migrated} ({WORLD} ranks, gloo, CPU)"]
    out += [f"both runs: {condition}" for condition in proof.conditions]
    out += [f"note: {note}" for note in proof.notes]
    for check in proof.checks:
        verdict = {True: "ok", False: "FAILED", None: "nothing to check"}[check.ok]
        out.append(f"{check.name}: {verdict}")
        out += [f"  {line}" for one in check.lines for line in one.splitlines()]
    out.append("result: " + ("the migrated script trains the same model" if proof.ok else "the migration is NOT shown to be equivalent"))
    return "\n".join(out) + "\n"


COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]


def render_html(proof: Proof) -> str:
    """A page with nothing to fetch: the loss curves and the per-rank coverage as inline SVG."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>dplint verify --migration</title>"
             "<style>body{font-family:sans-serif;margin:2em;max-width:60em}pre{background:#f6f6f6;padding:.5em}"
             ".ok{color:#287a28}.failed{color:#b22}</style></head><body>",
             f"<h1>Migration proof</h1><p>{html.escape(proof.original)} (1 process) vs {html.escape(proof.migrated)} "
             f"({WORLD} ranks, gloo, CPU)</p>",
             f"<p class='{'ok' if proof.ok else 'failed'}'><b>{'Same model' if proof.ok else 'Not shown equivalent'}</b></p>",
             "<h2>Loss per step</h2>", _loss_svg(proof), "<h2>Samples per epoch, by rank</h2>", _coverage_svg(proof),
             "<h2>Checks</h2><pre>", html.escape(render_text(proof)), "</pre></body></html>"]
    return "".join(parts)


def _loss_svg(proof: Proof) -> str:
    series = [("original (1 process)", proof.original_losses, COLOURS[0], "")]
    if proof.rank_losses and all(proof.rank_losses):
        means = [sum(v) / len(v) for v in zip(*proof.rank_losses)]
        series.append(("migrated, mean of the ranks", means, COLOURS[1], "6,4"))
    values = [v for _, s, _, _ in series for v in s]
    if not values:
        return "<p>no losses recorded</p>"
    width, height, pad = 640, 260, 40
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    steps = max(len(s) for _, s, _, _ in series)

    def point(i, v):
        x = pad + (width - 2 * pad) * (i / max(1, steps - 1))
        return f"{x:.1f},{height - pad - (height - 2 * pad) * (v - low) / span:.1f}"

    svg = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img'>",
           f"<rect width='{width}' height='{height}' fill='white' stroke='#ccc'/>",
           f"<text x='{pad}' y='20' font-size='12'>loss {low:.4f} .. {high:.4f} over {steps} steps</text>"]
    for index, (label, losses, colour, dash) in enumerate(series):
        svg.append(f"<polyline fill='none' stroke='{colour}' stroke-width='2' stroke-dasharray='{dash}' "
                   f"points='{' '.join(point(i, v) for i, v in enumerate(losses))}'/>")
        svg.append(f"<text x='{width - 250}' y='{20 + 16 * index}' font-size='12' fill='{colour}'>{html.escape(label)}</text>")
    svg.append("</svg>")
    return "".join(svg)


def _coverage_svg(proof: Proof) -> str:
    if not proof.coverage:
        return "<p>no DistributedSampler was iterated</p>"
    cell, left = 8, 330
    size = max(len(row["owner"]) for row in proof.coverage)
    width, height = left + cell * size + 10, 30 + 14 * len(proof.coverage)
    svg = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img'>"]
    legend = " ".join(f"<tspan fill='{COLOURS[r]}'>rank {r}</tspan>" for r in range(WORLD))
    svg.append(f"<text x='0' y='12' font-size='12'>one cell per sample: {legend} "
               "<tspan fill='#b22'>more than once</tspan> <tspan fill='#999'>never</tspan></text>")
    for row, entry in enumerate(proof.coverage):
        y = 22 + 14 * row
        svg.append(f"<text x='0' y='{y + 9}' font-size='11'>{html.escape(entry['label'])}</text>")
        for index, owners in enumerate(entry["owner"]):
            colour = "#999" if not owners else "#b22" if len(owners) > 1 else COLOURS[owners[0] % len(COLOURS)]
            svg.append(f"<rect x='{left + cell * index}' y='{y}' width='{cell - 1}' height='10' fill='{colour}'/>")
    svg.append("</svg>")
    return "".join(svg)


def run_migration(original: str, migrated: str, script_args: list[str], report: Optional[str] = None,
                  timeout: float = 120.0, quiet: bool = False, data_stub: Optional[str] = None,
                  no_dropout: bool = False) -> int:
    """The command: 0 the migrated script trains the same model, 1 it does not (or a run failed), 2 usage.

    `data_stub` (`--data-stub "3x32x32,int:10@64"`): both runs get synthetic data sets of that
    item structure in place of every data set class the script (or a library) defines, for
    scripts whose data is not on this machine; see `parse_data_stub`. `no_dropout`
    (`--no-dropout`): every dropout keeps every unit in both runs, so a model with dropout
    can be compared step by step."""
    for path in (original, migrated):
        if not os.path.isfile(path):
            print(f"dplint: error: no such script: {path}", file=sys.stderr)
            return 2
    try:
        stub = parse_data_stub(data_stub) if data_stub is not None else None
    except DataStubError as error:
        print(f"dplint: error: {error}", file=sys.stderr)
        return 2
    # without CUDA here, a script that calls `.cuda()` runs with it mapped to the CPU (both runs alike)
    remap = _calls_cuda(original) or _calls_cuda(migrated)
    with tempfile.TemporaryDirectory(prefix="dplint-migration-") as workdir:
        if not quiet:
            print(f"running {original} (1 process) and {migrated} ({WORLD} ranks, gloo) ...", file=sys.stderr)
        runs = run_runs(original, migrated, list(script_args), workdir, timeout, stub, remap, no_dropout)
    proof = judge(original, migrated, runs)
    if stub is not None:
        proof.conditions.append(f"every data set class defined by the script or a library replaced by "
                                f"{stub['size']} synthetic items of ({data_stub.partition('@')[0]}), the same in both "
                                "(--data-stub); DataLoader workers off")
    if no_dropout:
        proof.conditions.append("dropout off: every unit kept (--no-dropout)")
    if remap:
        proof.conditions.append("`.cuda()` and CUDA devices mapped to the CPU (no GPU in these runs)")
    sys.stdout.write(render_text(proof))
    if report:
        with open(report, "w", encoding="utf-8") as out:
            out.write(render_html(proof))
    return 0 if proof.ok else 1
