"""Apply a migration `Plan` to the parsed script, keeping comments and layout.

One LibCST pass. Every decision was made on the original nodes (`analysis.plan`); the
transformer looks each original node up and builds its replacement from the updated one,
so edits nested in one another (a guarded print inside the accumulation block) compose.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

import libcst as cst

from dplint.migration.analysis import Plan
from dplint.semantic import SemanticModel, argument

RANK_ZERO = "dist.get_rank() == 0"
IMPORTS = {
    "torch": "import torch",
    "os": "import os",
    "contextlib": "import contextlib",
    "torch.distributed": "import torch.distributed as dist",
    "torch.nn.parallel.DistributedDataParallel": "from torch.nn.parallel import DistributedDataParallel as DDP",
    "torch.utils.data.distributed.DistributedSampler": "from torch.utils.data.distributed import DistributedSampler",
}
# The local name each import above must bind.
IMPORT_NAMES = {"torch": "torch", "os": "os", "contextlib": "contextlib", "torch.distributed": "dist",
                "torch.nn.parallel.DistributedDataParallel": "DDP",
                "torch.utils.data.distributed.DistributedSampler": "DistributedSampler"}
SAME_AS = {"torch.utils.data.distributed.DistributedSampler": {"torch.utils.data.DistributedSampler"},
           "torch.nn.parallel.DistributedDataParallel": {"torch.nn.parallel.distributed.DistributedDataParallel"}}


class NameTaken(Exception):
    pass


def rewrite(model: SemanticModel, plan: Plan) -> str:
    module = model.module
    code = module.code_for_node
    if "local_rank" in model.bindings:
        raise NameTaken("the name `local_rank` is already used in the script; the migration binds it to LOCAL_RANK")
    same_scope = model.scope(plan.wrap_statement).node is plan.setup_scope
    statements: dict[cst.CSTNode, Callable] = {}
    expressions: dict[cst.CSTNode, Callable] = {}
    blocks: dict[cst.CSTNode, Callable] = {}

    if plan.device_target is not None:
        device = code(plan.device_target)
        statements[plan.device_statement] = lambda updated: _setup(device, updated)
        local_rank = "local_rank" if same_scope else f"{device}.index"
        moved = "" if plan.model_is_moved else f".to({device})"
        device_ids = f"device_ids=[{local_rank}] if {device}.type == \"cuda\" else None"
    else:  # bare `.cuda()`: `set_device` makes it the rank's GPU; without CUDA the model stays on the CPU
        device = None
        statements[plan.device_statement] = _setup_before
        # always moved: a `.cuda()` that ran before `set_device` put it on GPU 0 on every rank
        moved = '.to("cuda" if torch.cuda.is_available() else "cpu")'
        device_ids = "device_ids=[local_rank] if torch.cuda.is_available() else None"
    if plan.wrap_call is not None:
        def to_ddp(updated: cst.Call) -> cst.BaseExpression:
            inner = code(updated.args[0].value) + moved
            return cst.parse_expression(f"DDP({inner}, {device_ids})")
        expressions[plan.wrap_call] = to_ddp
        if plan.outer_move is not None:
            expressions[plan.outer_move] = lambda updated: updated.func.value  # the move is inside DDP now
        if plan.unwrap_if is not None:
            if plan.unwrap_if is plan.device_statement:  # the process group starts just before the wrap
                statements[plan.unwrap_if] = lambda updated: _setup_before(_unwrapped(updated))
            else:
                statements[plan.unwrap_if] = _unwrapped
    else:
        target = code(plan.model_expr)
        wrap = cst.parse_statement(f"{target} = DDP({target}{moved}, {device_ids})")
        statements[plan.wrap_statement] = lambda updated: [wrap, updated]

    expressions[plan.train_loader] = lambda updated: _sharded_loader(updated, plan, divide=True)
    for evaluation in plan.eval_loops:
        expressions[evaluation.loader] = lambda updated: _sharded_loader(updated, plan, divide=False)
        statements[evaluation.loop] = (lambda names: lambda updated: [updated, *_all_reduce(names, model)])(evaluation.accumulators)
    for call in plan.batch_counts:
        expressions[call] = lambda updated: cst.parse_expression(f"({code(updated)} * dist.get_world_size())")
    for statement in plan.rank0_statements:
        statements[statement] = _guarded
    for sampler, shuffles in plan.sampler_swaps:
        expressions[sampler] = (lambda shuffles: lambda updated: cst.parse_expression(
            f"DistributedSampler({code(updated.args[0].value)}, shuffle={shuffles})"))(shuffles)
    for node in plan.class_references:
        expressions[node] = lambda updated: cst.Name("DDP", lpar=updated.lpar, rpar=updated.rpar)
    for node in plan.bare_uses:
        expressions[node] = lambda updated: cst.Attribute(updated, cst.Name("module"))
    for statement in plan.saves:
        if statement in plan.barrier_after:
            statements[statement] = lambda updated: [_guarded(updated), cst.parse_statement("dist.barrier()")]
        else:
            statements[statement] = _guarded
    for call in plan.loads:
        # the rank's own device where it is in scope; elsewhere the CPU (load_state_dict copies
        # onto the parameters' devices), never the saving rank's GPU
        where = device if device is not None and model.scope(call).node is plan.setup_scope else '"cpu"'
        expressions[call] = (lambda where: lambda updated: _with_keyword(updated, "map_location", where))(where)
    for statement in plan.prints:
        statements[statement] = _guarded
    for call in plan.progress_bars:
        expressions[call] = lambda updated: _with_keyword(updated, "disable", "dist.get_rank() != 0")
    if plan.accumulation is not None:
        block, first, last, test = plan.accumulation
        wrapper = code(plan.model_expr)
        context = f"contextlib.nullcontext() if {code(test)} else {wrapper}.no_sync()"
        blocks[block] = lambda originals, done: _no_sync(originals, done, first, last, context)
    if plan.epoch_loop is not None:
        loop, epoch, loader = plan.epoch_loop
        set_epoch = cst.parse_statement(f"{code(loader)}.sampler.set_epoch({code(epoch)})")
        _then(statements, loop.body.body[0], lambda updated: [set_epoch, *_flat(updated)])
    _then(statements, plan.destroy_after, _destroy_after)

    rewritten = module.visit(_Rewriter(statements, expressions, blocks))
    needed = ["torch", "os", "torch.distributed", "torch.nn.parallel.DistributedDataParallel",
              "torch.utils.data.distributed.DistributedSampler"]
    if plan.accumulation is not None:
        needed.insert(1, "contextlib")
    return _with_imports(rewritten, model, needed, plan.device_statement).code


def _then(statements: dict, node: cst.CSTNode, edit: Callable) -> None:
    """Add an edit of a statement, after the one it may already have."""
    previous = statements.get(node)
    statements[node] = (lambda updated: edit(_as_result(previous(updated)))) if previous else edit


def _as_result(replaced):
    return cst.FlattenSentinel(replaced) if isinstance(replaced, list) else replaced


class _Rewriter(cst.CSTTransformer):
    def __init__(self, statements: dict, expressions: dict, blocks: dict) -> None:
        super().__init__()
        self.statements, self.expressions, self.blocks = statements, expressions, blocks
        self.done: dict[cst.CSTNode, object] = {}

    def on_leave(self, original_node, updated_node):
        result = super().on_leave(original_node, updated_node)
        if original_node in self.blocks:
            originals = list(original_node.body)
            done = [self.done.get(child, child) for child in originals]
            result = result.with_changes(body=self.blocks[original_node](originals, done))
        if original_node in self.expressions:
            result = self.expressions[original_node](result)
        if original_node in self.statements:
            replaced = self.statements[original_node](result)
            result = cst.FlattenSentinel(replaced) if isinstance(replaced, list) else replaced
        if isinstance(original_node, cst.BaseStatement):
            self.done[original_node] = result
        if isinstance(result, (cst.IndentedBlock, cst.Module)):
            result = result.with_changes(body=_merged_guards(list(result.body)))
        return result


def _merged_guards(body: list) -> list:
    """Adjacent `if dist.get_rank() == 0:` blocks become one."""
    merged: list = []
    for statement in body:
        if merged and _is_guard(statement) and _is_guard(merged[-1]):
            inner = list(statement.body.body)
            inner[0] = inner[0].with_changes(leading_lines=statement.leading_lines)
            previous = merged[-1]
            merged[-1] = previous.with_changes(body=previous.body.with_changes(body=[*previous.body.body, *inner]))
        else:
            merged.append(statement)
    return merged


def _is_guard(statement) -> bool:
    return (isinstance(statement, cst.If) and statement.orelse is None
            and cst.Module([]).code_for_node(statement.test) == RANK_ZERO)


def _flat(result) -> list:
    return list(result) if isinstance(result, cst.FlattenSentinel) else [result]


def _setup(device: str, updated: cst.SimpleStatementLine) -> list:
    text = (
        'dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")\n'
        'local_rank = int(os.environ["LOCAL_RANK"])\n'
        "if torch.cuda.is_available():\n"
        "    torch.cuda.set_device(local_rank)\n"
        f'    {device} = torch.device("cuda", local_rank)\n'
        "else:\n"
        f'    {device} = torch.device("cpu")\n'
    )
    made = list(cst.parse_module(text).body)
    # the device line's own comments and blank lines stay with the block that replaces it
    made[0] = made[0].with_changes(leading_lines=updated.leading_lines)
    return made


def _unwrapped(updated: cst.If) -> list:
    """The body of `if device_count() > 1:`, in the place (and after the blank lines) of the `if`."""
    body = list(updated.body.body)
    body[0] = body[0].with_changes(leading_lines=[*updated.leading_lines, *body[0].leading_lines])
    return body


def _setup_before(updated) -> list:
    """The process group for a script with no device variable, before the statement that first
    needs it (or the first of the statements it became); that statement keeps its comments,
    after one blank line."""
    rest = []
    if isinstance(updated, list):
        updated, rest = updated[0], updated[1:]
    text = (
        'dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")\n'
        'local_rank = int(os.environ["LOCAL_RANK"])\n'
        "if torch.cuda.is_available():\n"
        "    torch.cuda.set_device(local_rank)\n"
    )
    made = list(cst.parse_module(text).body)
    lines = list(updated.leading_lines)
    blank = next((i for i, one in enumerate(lines) if one.comment is not None), len(lines))
    comment = cst.EmptyLine(comment=cst.Comment("# one process per GPU, started by torchrun; "
                                                "a bare `.cuda()` then means this rank's GPU"))
    made[0] = made[0].with_changes(leading_lines=[*lines[:blank], comment])
    return [*made, updated.with_changes(leading_lines=[cst.EmptyLine(), *lines[blank:]]), *rest]


def _guarded(updated: cst.CSTNode) -> cst.If:
    inner = updated.with_changes(leading_lines=())
    guard = cst.parse_statement(f"if {RANK_ZERO}:\n    pass\n")
    return guard.with_changes(body=guard.body.with_changes(body=[inner]), leading_lines=updated.leading_lines)


def _with_keyword(call: cst.Call, keyword: str, value: str) -> cst.Call:
    """The call with `keyword=value` after its last argument, in the layout of the others:
    one per line stays one per line, and a trailing comma stays trailing."""
    args = list(call.args)
    new = cst.Arg(cst.parse_expression(value), keyword=cst.Name(keyword),
                  equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
    if args:
        last = args[-1]
        separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if isinstance(last.comma, cst.Comma):
            between = args[-2].comma if len(args) > 1 and isinstance(args[-2].comma, cst.Comma) else separator
            new = new.with_changes(comma=last.comma)
            args[-1] = last.with_changes(comma=between)
        else:
            new = new.with_changes(whitespace_after_arg=last.whitespace_after_arg)
            args[-1] = last.with_changes(comma=separator, whitespace_after_arg=cst.SimpleWhitespace(""))
    args.append(new)
    return call.with_changes(args=args)


def _without_keyword(call: cst.Call, keyword: str) -> tuple[cst.Call, Optional[cst.BaseExpression]]:
    """The call without its `keyword=` argument, and that argument's value (None when absent)."""
    args = list(call.args)
    index = next((i for i, arg in enumerate(args) if arg.keyword is not None and arg.keyword.value == keyword), None)
    if index is None:
        return call, None
    removed = args.pop(index)
    if index == len(args) and args:  # it was the last: the one before takes its comma and layout
        args[-1] = args[-1].with_changes(comma=removed.comma, whitespace_after_arg=removed.whitespace_after_arg)
    elif index > 0:  # in the middle: the one before takes its comma, so a line break after it stays
        args[index - 1] = args[index - 1].with_changes(comma=removed.comma)
    return call.with_changes(args=args), removed.value


def _sharded_loader(updated: cst.Call, plan: Plan, divide: bool) -> cst.Call:
    """`DataLoader(ds, batch_size=B, shuffle=S)` -> `DataLoader(ds, batch_size=B // world, sampler=DistributedSampler(ds, shuffle=S))`."""
    code = cst.Module([]).code_for_node
    call, shuffle = _without_keyword(updated, "shuffle")
    if divide and plan.divide_batch:
        args = list(call.args)
        for index, arg in enumerate(args):
            if (arg.keyword is not None and arg.keyword.value == "batch_size") or (arg.keyword is None and index == 1):
                value = arg.value
                text = code(value)
                if not isinstance(value, (cst.Name, cst.Attribute, cst.Integer, cst.Call, cst.Subscript)):
                    text = f"({text})"
                args[index] = arg.with_changes(value=cst.parse_expression(f"{text} // dist.get_world_size()"))
        call = call.with_changes(args=args)
    if any(arg.keyword is not None and arg.keyword.value == "sampler" for arg in call.args):
        return call  # its RandomSampler / SequentialSampler became a DistributedSampler
    dataset = code(argument(updated, 0, "dataset"))
    shuffles = code(shuffle) if shuffle is not None else "False"  # DataLoader's default
    return _with_keyword(call, "sampler", f"DistributedSampler({dataset}, shuffle={shuffles})")


def _all_reduce(accumulators: list[tuple[str, bool]], model: SemanticModel) -> list:
    names = [name for name, _ in accumulators]
    holder = "sums"
    while holder in model.bindings:
        holder = "_" + holder
    values = ", ".join(f"float({name})" for name in names)
    back = ", ".join(f"{'int' if is_int else 'float'}({holder}[{i}].item())" for i, (_, is_int) in enumerate(accumulators))
    return [
        cst.parse_statement("# every rank evaluated its shard: add up the sums of all ranks\n"
                            f'{holder} = torch.tensor([{values}], dtype=torch.float64, '
                            'device="cuda" if torch.cuda.is_available() else "cpu")\n'),
        cst.parse_statement(f"dist.all_reduce({holder})\n"),
        cst.parse_statement(f"{', '.join(names)} = {back}\n"),
    ]


def _no_sync(originals: list, done: list, first, last, context: str) -> list:
    start, end = originals.index(first), originals.index(last)
    inner = [stmt for result in done[start:end + 1] for stmt in _flat(result)]
    comment = "# accumulate locally; DDP all-reduces the gradients on the step's batch only\n"
    wrapped = cst.parse_statement(f"{comment}with {context}:\n    pass\n")
    wrapped = wrapped.with_changes(body=wrapped.body.with_changes(body=inner))
    before = [stmt for result in done[:start] for stmt in _flat(result)]
    after = [stmt for result in done[end + 1:] for stmt in _flat(result)]
    return [*before, wrapped, *after]


def _destroy_after(result) -> list:
    statements = _flat(result)
    destroy = cst.parse_statement("dist.destroy_process_group()")
    last = statements[-1]
    if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
        return [*statements[:-1], destroy, last]
    return [*statements, destroy]


def _with_imports(module: cst.Module, model: SemanticModel, needed: list[str], setup: cst.CSTNode) -> cst.Module:
    present = set(model.imports.values())
    lines = []
    for name in needed:
        local = IMPORT_NAMES[name]
        if name in present or SAME_AS.get(name, set()) & present:
            bound = [key for key, value in model.imports.items() if value == name or value in SAME_AS.get(name, ())]
            if local in bound:
                continue
        if local in model.bindings or local in model.imports:
            raise NameTaken(f"the name `{local}` is already used in the script; the migration needs it for {IMPORTS[name]!r}")
        lines.append(IMPORTS[name])
    if not lines:
        return module
    body = list(module.body)
    standard = [text for text in lines if text in ("import os", "import contextlib")]
    torch_side = [cst.parse_statement(text + "\n") for text in lines if text not in standard]
    leading = _leading_imports(body)
    end = _after_torch_imports(model, setup)
    if end is None:
        end = leading[-1] + 1 if leading else 0
    body[end:end] = torch_side
    for text in standard:
        _insert_standard(body, text)
    return module.with_changes(body=body)


def _after_torch_imports(model: SemanticModel, setup: cst.CSTNode) -> Optional[int]:
    """The index just after the module's last top-level `import torch...` / `from torch...`
    that runs before anything is defined and before the process group starts (the new
    imports then sit with the torch imports, as isort groups them, and are bound before their
    first use); None when there is none."""
    last = None
    for index, statement in enumerate(model.module.body):
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or statement is setup or any(
                ancestor is statement for ancestor in model.ancestors(setup)):
            break
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if isinstance(small, (cst.Import, cst.ImportFrom)) and any(
                name.split(".")[0] == "torch" for name in _module_names(small)):
            last = index + 1
    return last


def _module_names(node) -> list[str]:
    code = cst.Module([]).code_for_node
    if isinstance(node, cst.Import):
        return [code(alias.name) for alias in node.names]
    return [] if node.relative or node.module is None else [code(node.module)]


def _leading_imports(body: list) -> list[int]:
    """Indexes of the run of imports that opens the module (after its docstring)."""
    leading = []
    for index, statement in enumerate(body):
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            leading.append(index)
        elif not (index == 0 and isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString)):
            break
    return leading


def _plain_import(statement) -> Optional[str]:
    small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
    if isinstance(small, cst.Import) and len(small.names) == 1:
        return cst.Module([]).code_for_node(small.names[0].name)
    return None


def _insert_standard(body: list, text: str) -> None:
    """`import os` in alphabetical place among the standard library's `import x` lines that
    open the imports, else before the first import with a blank line after it."""
    new = cst.parse_statement(text + "\n")
    name = text.split()[-1]
    leading = _leading_imports(body)
    group = []
    for i in leading:
        plain = _plain_import(body[i])
        if plain is None or plain.split(".")[0] not in sys.stdlib_module_names or (group and body[i].leading_lines):
            if group:
                break
            continue
        group.append(i)
    if not group:
        at = leading[0] if leading else 0
        if at < len(body):
            body[at:at + 1] = [new.with_changes(leading_lines=body[at].leading_lines),
                               body[at].with_changes(leading_lines=[cst.EmptyLine()])]
        else:
            body.append(new)
        return
    at = next((i for i in group if _plain_import(body[i]) > name), None)
    if at is None:
        body.insert(group[-1] + 1, new)
    else:
        # the new line takes over the blank lines and comments above the one it goes before
        body[at:at + 1] = [new.with_changes(leading_lines=body[at].leading_lines), body[at].with_changes(leading_lines=())]
