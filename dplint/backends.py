"""Which backend a process group uses: the `backend=` of `init_process_group`, followed
through names, conditional expressions and command-line defaults, and torch's default when
there is none."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from dplint.semantic import SemanticModel, argument, literal_value

DEFAULT_BACKEND = "default"  # no backend given: torch picks NCCL for CUDA tensors, gloo for CPU ones


def group_backend(model: SemanticModel, call: cst.Call) -> Optional[str]:
    """The backend of an `init_process_group` call: `DEFAULT_BACKEND` for none at all (or
    `None`), with which torch uses NCCL for CUDA tensors (and gloo for CPU ones); "nccl" when
    it is NCCL on at least one path the code shows and every other path names another backend
    (`"nccl"`, `backend = "nccl" if use_gpu else "gloo"`: the GPU path is the one that places
    work on `cuda`; `args.backend` whose command-line option defaults to `"nccl"`); "other"
    when every path names another one; None otherwise: a backend read from a config file is
    unknown, not absent."""
    backend = argument(call, 0, "backend")
    if backend is None or _names_none(backend):
        return DEFAULT_BACKEND
    # Collect the file's call sites first, outside this question's step budget: collecting
    # them asks about parameters again, which would use up the budget and answer "unknown".
    model.flow.call_sites(call)
    values = model.flow.values_at(backend, call)
    names = []
    for value in values:
        if not value.known:
            return None
        text = _backend_name(value.model, value.expr)
        if text is None:
            return None
        names.append(text)
    return "nccl" if any("nccl" in name for name in names) else "other"


def _names_none(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def _backend_name(model: SemanticModel, expr: cst.BaseExpression) -> Optional[str]:
    """The backend a literal names, or the default of the command-line option an
    `args.<name>` reads (`parser.add_argument("--dist-backend", default="nccl")` in this file)."""
    try:
        text = literal_value(expr)
    except ValueError:
        text = option_default(model, expr)
    return text.lower() if isinstance(text, str) else None


def option_default(model: SemanticModel, expr: cst.BaseExpression) -> Optional[str]:
    """The string default of the command-line option `args.<name>` reads, where this file
    declares it (`parser.add_argument("--dist-backend", default="nccl")`); None otherwise."""
    call = option_declaration(model, expr)
    default = argument(call, None, "default") if call is not None else None
    try:
        value = literal_value(default) if default is not None else None
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def option_declaration(model: SemanticModel, expr: cst.BaseExpression) -> Optional[cst.Call]:
    """The `add_argument(...)` call that declares the option `args.<name>` reads: in this
    file, else in the file whose parser made `args` (`args = get_parser().parse_args()` with
    `get_parser` in `opts.py`, or `args = opts.parse()` returning `parser.parse_args()`)."""
    if not isinstance(expr, cst.Attribute):
        return None
    found = _declared_in(model, expr.attr.value)
    if found is not None or model.project is None or not isinstance(expr.value, cst.Name):
        return found
    for parser_model in _parser_files(model, expr.value, expr):
        found = _declared_in(parser_model, expr.attr.value)
        if found is not None:
            return found
    return None


def _parser_files(model: SemanticModel, args: cst.Name, at: cst.CSTNode) -> list[SemanticModel]:
    """The other files whose parser's `parse_args()` the name holds, on every path."""
    files = []
    for value in model.flow.values_at(args, at):
        call = value.expr
        if not (value.known and isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "parse_args"):
            return []
        parsers = value.model.flow.values_at(call.func.value, call)
        if not parsers or any(not parser.known for parser in parsers):
            return []
        files.extend(parser.model for parser in parsers if parser.model is not model and parser.model not in files)
    return files


def _declared_in(model: SemanticModel, wanted: str) -> Optional[cst.Call]:
    """The `add_argument(...)` call of this file that declares the option `wanted`."""
    for site in model.calls:
        call = site.node
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
            continue
        dest = argument(call, None, "dest")
        try:
            names = [literal_value(dest)] if dest is not None else [
                literal_value(arg.value) for arg in call.args if arg.keyword is None]
        except ValueError:
            continue
        options = {str(name).lstrip("-").replace("-", "_") for name in names}
        if wanted not in options or (dest is None and not any(str(n).startswith("--") or not str(n).startswith("-") for n in names)):
            continue
        return call
    return None
