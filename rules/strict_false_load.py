"""DPL005 strict-false-load: `load_state_dict(..., strict=False)` whose returned keys are ignored."""

from __future__ import annotations

import os
import weakref
from typing import Iterator

import libcst as cst

from dplint.checkpoints import StateDictLoad, called_function, checkpoint_facts, literal_key, name_is_read
from dplint.flow import class_method
from dplint.rule import Applicability, Example, Fix, Rule, Severity, Violation
from dplint.semantic import SemanticModel, argument, literal_value, method_call, own_returns


class StrictFalseLoad(Rule):
    """
    ## What it does
    Flags `model.load_state_dict(state_dict, strict=False)` whose result (the missing and
    unexpected keys) is thrown away: the call is a statement of its own, or its result is
    assigned to names that are never read.

    Also flags a call that passes a literal False (by keyword or position) to a parameter that
    a function of this file or the project hands on as `strict` to such a load whose result it
    ignores, directly or through up to two more such functions (`self.load_network(net, path,
    strict=False)` with `def load_network(self, net, path, strict=True):
    net.load_state_dict(torch.load(path), strict=strict)`): reported at that call, where the
    choice is made, with the helper's load named in the message. The helper is found the way
    calls are resolved (this file, imports, base classes, instances), or, for a method called
    on an object the flow cannot follow (built by a registry of factories), as the one class of
    this file or imported by name from the project that defines a method of that name. Silent
    when the helper returns or reads the result, rebinds the parameter, matches the keys to the
    model as below, or cannot be read (a library's `load_checkpoint(model, path,
    strict=False)`), for a load whose target the call leaves None (`load_weights(None, None,
    state, strict=False)`: that load does not run), and when no caller passes False.

    A parameter handed on as `strict` whose default is False counts as a passed False at each
    call that leaves it out (`def restore(net, path, exact=False): net.load_state_dict(sd,
    strict=exact)` called as `restore(net, path)`, in this file or the project): reported at the
    load, once however many calls take the default, with the first such call named (the load
    is where its result goes unchecked, and the default is set on its function). Silent when
    every call passes the parameter, when no call is seen (a library's API), and, as above,
    for a call in a pretrained factory branch or one leaving the load's target None.

    Silent when the code already matches the keys to the model: the state dict is the model's
    own (`own = model.state_dict(); own.update(pretrained)`), is filtered by it (`{k: v for k, v
    in sd.items() if k in own}`), or a statement before the load, in the same function, uses
    both the state dict and the model's `state_dict()` in a set operation on the keys (`missing
    = set(model.state_dict()) - set(sd)`, a log of `set(own) & set(sd)`,
    `set(sd).difference(own)`) or a membership test (a log of the keys not in the model), or a
    loop that fills the state dict looks the model's keys up (`meta = model.state_dict()` ...
    `for name, t in full.items(): sd[name] = shard(t, meta.get(name))`, or `{k: v for k, v in
    ckpt.items() if model.state_dict()[k].shape == v.shape}`, where a key the model lacks raises
    KeyError). Counting is no comparison (`len(model.state_dict()) - len(sd)`), nor is listing
    only the checkpoint's keys. Silent too when a helper named for keys gets the model and the
    dict first (`check_keys(model, sd)`), or a function of this file or the project, given the
    dict, compares it with the model's own keys (`self.check_keys(sd)` whose body takes
    `set(self.net.state_dict()) - set(sd)`), or a helper gets the dict and the model's own state
    dict (`sd = intersect_dicts(sd, model.state_dict())`, `sd = inflate(ckpt, own)`), where the
    model's own state dict and the target may be bound through a conditional unwrap (`own =
    m.module.state_dict() if wrapped else m.state_dict()`, target `m.module if wrapped else m`).
    The comparison may also come right after the load, in a statement that runs whenever the
    load did, with the dict not bound again (`model.load_state_dict(sd, strict=False)`, then
    `ckpt_keys = set(sd.keys())`, `missing = set(model.state_dict()) - ckpt_keys` and a log of
    it; not under `if verbose:`). A check of a few listed keys (`for k in ["head.weight"]:
    ...`) is not a comparison.

    Silent when a strict load of the same dict into the same target reports the mismatch (its
    RuntimeError names every missing and unexpected key): the non-strict load is the retry in
    an `except RuntimeError as e:` handler that reads `e` after a strict load in the `try`, or
    a strict load of the same dict, in a `try` whose handlers read the error, follows on every
    path of the same function. A handler that drops the error (`except Exception:
    print("retrying")`) or a retry with another dict reports nothing.

    Silent when the dict holds the target's own tensors: its live `state_dict()`,
    `named_buffers()` or `named_parameters()`, or a copy
    (`teacher.load_state_dict(deepcopy(student.state_dict()), strict=False)`), or what a
    function of this file or the project returns when given the target itself, if every value it
    returns is built only from that parameter's tensors (`states = get_norm_states(module)`,
    whose body fills a new dict inside `for name, child in module.named_modules(): for k, v in
    child.state_dict().items():`), even after the dict passed through another call (`states =
    all_reduce(states)`), or a dict built in the load's function only from live modules: bound
    there only to an empty dict, filled only by item stores inside loops over a module's
    `state_dict()` / `named_parameters()` (a smaller sibling model filled in memory), and
    handed to no other call (`new.update(torch.load(f))` adds a file's keys).

    Silent for published weights downloaded (`load_state_dict_from_url`, `load_url`,
    `torch.hub.load_state_dict_from_url`) from a fixed URL, also through names and items (`ck =
    load_state_dict_from_url("https://...")`, then `ck["model"]`): a literal URL, a literal key
    into a table (`model_urls["resnet50"]`), or any key into a table bound only at the file's
    top level to dict literals whose values are all literal `http(s)://` addresses
    (`url_map[name]`; the table may be imported from a project file, or be torchvision's
    `model_urls`), or an address built on a literal `http(s)://` base (`HOST + name`, an
    f-string, `.format`, `join("http://host", data, name)`, or a function of this file or the
    project whose every return is one, `load_url(get_model_url(data, name, hash))`); their keys
    are known. A URL the user passes is not fixed, nor a table built
    in the function.

    Silent in a model factory's pretrained branch (under an `if pretrained:` test, or in a
    function with a `pretrained` parameter, unless the load sits under a test of another
    parameter that the function hands to `torch.load`: `if resume_path:` is the caller's
    checkpoint, or the test looks for the target's own class name in the file's name, `if
    "Tracker" in cfg.pretrain_file:` before `Tracker(...).load_state_dict(...)`, a checkpoint of
    this very model), or the `pretrained`-named value tested for presence (`if
    args.pretrained_pose:`, `if pretrained is None: ... else:`) or the `pretrained` parameter is
    itself the path the dict is loaded from (`torch.load(args.pretrained_pose)`: the user's own
    checkpoint file): loading published weights without their head is what `strict=False` is for
    there. Silent too when `strict` is not literally False, and in a file that imports another
    array framework with a `load_state_dict` of its own (megengine, paddle, oneflow, jittor,
    mindspore, tensorflow, jax, flax) and nothing of torch.

    ## Why is this bad?
    With `strict=False`, `load_state_dict` raises nothing when keys do not match; it returns
    `_IncompatibleKeys(missing_keys=[...], unexpected_keys=[...])` and loads only the keys that
    match. A checkpoint saved from a `DataParallel` / `DDP` wrapper (every key prefixed with
    `module.`) loaded into a bare model matches no key at all (torch 2.13):

        _IncompatibleKeys(missing_keys=['fc.weight', 'fc.bias'],
                          unexpected_keys=['module.fc.weight', 'module.fc.bias'])

    so the model silently keeps its random initialisation, and training or evaluation goes on
    with it. Checking the returned keys is the only signal.

    ## Example
    ```python
    model.load_state_dict(torch.load("pretrained.pt"), strict=False)
    ```

    Use instead:
    ```python
    result = model.load_state_dict(torch.load("pretrained.pt"), strict=False)
    assert not result.unexpected_keys, result.unexpected_keys  # and inspect result.missing_keys
    ```

    ## Fix safety
    No automatic fix: only the author knows which keys may legitimately be missing (a new
    head) or unexpected. The suggestion is displayed only.
    """

    code = "DPL005"
    name = "strict-false-load"
    severity = Severity.WARNING
    summary = "`load_state_dict(..., strict=False)` with the returned missing/unexpected keys ignored"
    fix_applicability = Applicability.DISPLAY
    tokens = (("load_state_dict", "False"),)  # strict=False, by keyword or position
    # Every finding is a `load_state_dict(...)` of this file or a call of it passing `False`.
    anchor_tokens = ("load_state_dict", "False")

    VALID = (
        "missing, unexpected = model.load_state_dict(sd, strict=False)\n"
        "assert not unexpected, unexpected\n",
        "result = model.load_state_dict(sd, strict=False)\n"
        'print("missing keys:", result.missing_keys)\n',
        "model.load_state_dict(sd)\n"
        "model.load_state_dict(sd, strict=True)\n",
        # The keys are compared with the model's before the load.
        "own = model.state_dict()\n"
        "print('not in the model:', [k for k in sd if k not in own])\n"
        "model.load_state_dict(sd, strict=False)\n",
        # The dict is built from the model itself.
        "own = model.state_dict()\n"
        "own.update({k: v for k, v in pretrained.items() if k in own})\n"
        "model.load_state_dict(own, strict=False)\n",
        # Published weights from a table of fixed web addresses, picked by name.
        "from torch.hub import load_state_dict_from_url\n"
        "URLS = {'b0': 'https://example.org/b0.pth', 'b1': 'https://example.org/b1.pth'}\n"
        "def load(net, name):\n"
        "    net.load_state_dict(load_state_dict_from_url(URLS[name]), strict=False)\n",
        # strict is not known to be False here.
        "def load(model, sd, strict):\n"
        "    model.load_state_dict(sd, strict=strict)\n",
        # The helper hands the keys back to the caller.
        "def load(model, sd, strict=True):\n"
        "    return model.load_state_dict(sd, strict=strict)\n"
        "print(load(net, sd, strict=False))\n",
    )
    INVALID = (
        Example("backbone.load_state_dict(torch.load('resnet.pt'), strict=False)\n"),
        Example(
            "def restore(self, state):\n"
            "    _ = self.model.load_state_dict(state, False)\n"
            "    incompatible = self.ema.load_state_dict(\n"
            "        state,\n"
            "        strict=False,  # new head\n"
            "    )\n",
            count=2,
        ),
        Example(
            "def load(model, path, strict=True):\n"
            "    model.load_state_dict(torch.load(path), strict=strict)\n"
            "load(net, 'last.pt', strict=False)\n"
        ),
        # The default (False) is taken by a call that leaves `strict` out.
        Example(
            "def load(model, path, strict=False):\n"
            "    model.load_state_dict(torch.load(path), strict=strict)\n"
            "load(net, 'last.pt')\n"
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Violation]:
        if _other_framework_only(model):
            return
        for load in checkpoint_facts(model).loads:
            if not load.strict_false or not _unchecked_load(model, load):
                continue
            yield Violation(
                node=load.call,
                message=(
                    "`load_state_dict(..., strict=False)` returns the missing and unexpected keys, and they are "
                    "ignored here: a checkpoint whose keys do not match (such as `module.`-prefixed keys from "
                    "DataParallel/DDP) loads nothing and nobody notices"
                ),
                fix=Fix(
                    Applicability.DISPLAY,
                    "Check the result: `result = model.load_state_dict(..., strict=False)`, then inspect "
                    "`result.missing_keys` and `result.unexpected_keys`",
                ),
            )
        for load, parameter, caller_model, call in _strict_false_by_default(model):
            where = _location(model, caller_model, call)
            yield Violation(
                node=load.call,
                message=(
                    f"`strict={parameter}` is False here: `{parameter}` defaults to False and "
                    f"`{caller_model.code(call.func)}(...)` ({where}) leaves it out, and the returned missing and "
                    "unexpected keys are ignored: a checkpoint whose keys do not match (such as `module.`-prefixed "
                    "keys from DataParallel/DDP) loads nothing and nobody notices"
                ),
                fix=Fix(
                    Applicability.DISPLAY,
                    "Check the result: `result = model.load_state_dict(..., strict=...)`, then inspect "
                    "`result.missing_keys` and `result.unexpected_keys` (or default the parameter to True)",
                ),
            )
        for call, other, load in _strict_false_through_helper(model):
            where = _location(model, other, load.call)
            yield Violation(
                node=call,
                message=(
                    f"`strict=False` passed here reaches `{other.code(load.target)}.load_state_dict(..., strict=...)` "
                    f"({where}), whose returned missing and unexpected keys are ignored: a checkpoint whose keys do "
                    "not match (such as `module.`-prefixed keys from DataParallel/DDP) loads nothing and nobody notices"
                ),
                fix=Fix(
                    Applicability.DISPLAY,
                    "Have the helper return (or check) what `load_state_dict(..., strict=False)` returns, and "
                    "inspect `missing_keys` and `unexpected_keys` here",
                ),
            )


def _unchecked_load(model: SemanticModel, load: StateDictLoad, call: cst.Call | None = None) -> bool:
    """The load's result is thrown away and nothing else matches the keys to the model; not a
    pretrained factory branch (at the load, or at the caller's `call` that decides strict)."""
    if not _result_ignored(model, load.call) or _keys_matched_to_model(model, load):
        return False
    if _keys_reported_otherwise(model, load):
        return False
    return not _pretrained_initialisation(model, load.call, load.bare_class)


def _strict_false_through_helper(model: SemanticModel) -> Iterator[tuple[cst.Call, SemanticModel, StateDictLoad]]:
    """(call, the helper's model, the helper's load) for each call of this file that passes a
    literal False (by keyword or position) to a parameter that a function of this file or the
    project hands on as `strict` to a `load_state_dict` whose result it ignores, directly or
    through further such functions (`load_network(net, path, strict=False)` with `def
    load_network(net, path, strict=True): net.load_state_dict(torch.load(path), strict=strict)`)."""
    for site in model.calls:
        call = site.node
        if not any(_is_false(arg.value) for arg in call.args) or _is_load_state_dict(call):
            continue  # a `load_state_dict` call of its own is judged where it stands
        if (site.qualified_name or "").split(".")[0] in _LIBRARIES:
            continue  # `nn.Conv2d(..., bias=False)`: no project helper
        for other, load in _forwarded_loads(model, call, depth=3):
            if not _pretrained_initialisation(model, call, None):
                yield call, other, load
                break


def _strict_false_by_default(model: SemanticModel) -> Iterator[tuple[StateDictLoad, str, SemanticModel, cst.Call]]:
    """(load, parameter, caller's model, call) for each unchecked load of this file whose
    `strict` is a parameter of its function (never rebound) that defaults to False, with the
    first call of that function (in this file or the project) that leaves it out: that call
    loads with strict=False as surely as one passing the literal. Reported at the load, where
    the result goes unchecked, once however many callers take the default."""
    for load in checkpoint_facts(model).loads:
        strict = argument(load.call, 1, "strict")
        function = _innermost_function(model, load.call)
        if not isinstance(strict, cst.Name) or not isinstance(function, cst.FunctionDef):
            continue
        params = function.params
        default = next(
            (p.default for p in (*params.posonly_params, *params.params, *params.kwonly_params) if p.name.value == strict.value),
            None,
        )
        if default is None or not _is_false(default) or not _only_a_parameter(model, function, strict.value):
            continue
        if not _unchecked_load(model, load):
            continue
        for caller_model, call, bound in model.flow.all_call_sites(function) or ():
            passed = caller_model.flow.parameter_argument(call, function, strict.value, bound)
            if passed is default and not _pretrained_initialisation(caller_model, call, None) \
                    and not _target_passed_none(caller_model, call, model, function, bound, load):
                yield load, strict.value, caller_model, call
                break


# Packages whose functions are no project helper (`nn.Linear(4, 2, bias=False)`).
_LIBRARIES = {"torch", "torchvision", "numpy", "timm", "transformers", "builtins", "os", "argparse", "logging"}


def _is_load_state_dict(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "load_state_dict"


def _is_false(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"


def _forwarded_loads(model: SemanticModel, call: cst.Call, depth: int) -> list[tuple[SemanticModel, StateDictLoad]]:
    """The unchecked loads whose `strict` is the literal False that `call` passes explicitly."""
    found = called_function(model, call) or _only_imported_method(model, call)
    if found is None:
        return []
    other, function, bound = found
    if _other_framework_only(other):
        return []
    explicit = {id(arg.value) for arg in call.args if _is_false(arg.value)}
    loads = []
    for name, inner in _strict_parameters(other, function, depth).items():
        passed = model.flow.parameter_argument(call, function, name, bound)
        if passed is not None and id(passed) in explicit:
            loads.extend((owner, load) for owner, load in inner if not _target_passed_none(model, call, other, function, bound, load))
    return loads


def _target_passed_none(model, call, other, function, bound, load) -> bool:
    """The load's target is a parameter of `function` that `call` leaves None (`load_weights(None,
    None, state, strict=False)`, `G_ema=None` by default): that load does not run (or raises)."""
    target = load.target
    if not isinstance(target, cst.Name) or _innermost_function(other, load.call) is not function:
        return False
    if not _only_a_parameter(other, function, target.value):
        return False
    passed = model.flow.parameter_argument(call, function, target.value, bound)
    return isinstance(passed, cst.Name) and passed.value == "None"


def _only_imported_method(model: SemanticModel, call: cst.Call):
    """(model, method, True) for `encoder.load_state(sd, strict=False)` whose receiver the flow
    cannot follow (built by a registry of factories), when exactly one class of this file or
    imported by name from the project (`from models.biencoder import BiEncoder`) defines a
    method of that name: the object the file works with is that class's."""
    project = model.project
    if project is None or not isinstance(call.func, cst.Attribute) or not isinstance(call.func.value, cst.Name):
        return None
    method = call.func.attr.value
    spelled = f"def {method}("
    closure = project.import_closure(model.path, model.text)
    if not any(spelled in text for text in closure.values()) and spelled not in model.text:
        return None
    classes = [(model, node) for node in model.module.body if isinstance(node, cst.ClassDef)]
    for qualified in set(model.imports.values()):
        if qualified.split(".")[0] == "torch":
            continue
        try:
            resolved = project.resolve(qualified, model)
        except Exception:
            resolved = None
        if resolved is not None and isinstance(resolved[1], cst.ClassDef):
            classes.append(resolved)
    found = [(owner, class_method(node, method), True) for owner, node in classes if class_method(node, method) is not None]
    return found[0] if len(found) == 1 else None


_STRICT_PARAMETERS: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()


def _strict_parameters(model: SemanticModel, function: cst.FunctionDef, depth: int) -> dict[str, list]:
    """{parameter: [(model, load)]}: the parameters of `function` (never rebound in it) that
    reach an unchecked load's `strict` in its own body, or a call in it whose result is
    ignored and which hands them on to such a parameter of another function (up to `depth`)."""
    memo = _STRICT_PARAMETERS.setdefault(model, {})
    key = (function, depth)
    if key in memo:
        return memo[key]
    memo[key] = {}  # re-entrant (recursive helpers): nothing yet
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)}
    result: dict[str, list] = {}
    if not params:
        memo[key] = result
        return result
    if "load_state_dict" in model.code(function.body):
        for load in checkpoint_facts(model).loads:
            strict = argument(load.call, 1, "strict")
            if isinstance(strict, cst.Name) and strict.value in params and _innermost_function(model, load.call) is function:
                if _only_a_parameter(model, function, strict.value) and _unchecked_load(model, load):
                    result.setdefault(strict.value, []).append((model, load))
    if depth > 1:
        for inner in _own_calls(function):
            forwarded = {arg.value.value for arg in inner.args if isinstance(arg.value, cst.Name) and arg.value.value in params}
            if not forwarded or _is_load_state_dict(inner) or not _result_ignored(model, inner):
                continue
            found = called_function(model, inner)
            if found is None:
                continue
            callee_model, callee, bound = found
            for name, loads in _strict_parameters(callee_model, callee, depth - 1).items():
                passed = model.flow.parameter_argument(inner, callee, name, bound)
                if isinstance(passed, cst.Name) and passed.value in forwarded and _only_a_parameter(model, function, passed.value):
                    result.setdefault(passed.value, []).extend(loads)
    memo[key] = result
    return result


def _own_calls(function: cst.FunctionDef) -> Iterator[cst.Call]:
    """The calls in a function's body, not in functions, lambdas or classes nested in it."""
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            continue
        if isinstance(current, cst.Call):
            yield current
        stack.extend(current.children)


def _innermost_function(model: SemanticModel, node: cst.CSTNode):
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
            return ancestor
    return None


def _only_a_parameter(model: SemanticModel, function: cst.FunctionDef, name: str) -> bool:
    """`name` is bound in `function` only as its parameter (`strict = strict and x` rebinds it)."""
    bindings = [b for b in model.bindings.get(name, ()) if b.scope.node is function]
    return bool(bindings) and all(isinstance(b.node, cst.Param) for b in bindings)


def _location(model: SemanticModel, other: SemanticModel, node: cst.CSTNode) -> str:
    """`line 7` in the same file, else `base_model.py:122` relative to this file's folder."""
    line = other.position(node)[0].line
    if other is model:
        return f"line {line}"
    relative = os.path.relpath(other.path, os.path.dirname(os.path.abspath(model.path)) or ".")
    return f"{relative}:{line}"


# Array frameworks with a torch-like `load_state_dict(..., strict=False)` of their own.
_OTHER_FRAMEWORKS = {"megengine", "paddle", "oneflow", "jittor", "mindspore", "tensorflow", "jax", "flax"}


def _other_framework_only(model: SemanticModel) -> bool:
    """The file imports another array framework (`import megengine as mge`) and nothing of
    torch: its `load_state_dict` is that framework's, not torch's."""
    tops = {name.split(".")[0] for name in (*model.imports.values(), *model.star_imports)}
    return bool(tops & _OTHER_FRAMEWORKS) and not any(top.startswith("torch") for top in tops)


def _pretrained_initialisation(model: SemanticModel, call: cst.Call, bare_class: str | None) -> bool:
    """A model factory loading published pretrained weights on purpose: the load sits under an
    `if pretrained:` test, or in a function with a `pretrained` parameter (`resnet50(pretrained=
    True)` style). Non-strict there is deliberate (the classifier head differs), and the weights
    are a fixed file, not a checkpoint a DataParallel/DDP run wrote. A test that the pretrained
    file is named for the target's own class (`if "Tracker" in cfg.PRETRAIN_FILE:` before
    `Tracker(...).load_state_dict(...)`) picks a checkpoint of this very model, not weights
    without a head."""
    for ancestor in model.ancestors(call):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and "pretrain" in model.code(ancestor.test).lower():
            if _user_path_tested(model, call, _presence_tested(ancestor.test)):
                return False
            return not _names_own_class(ancestor.test, bare_class)
        if isinstance(ancestor, cst.FunctionDef):
            params = ancestor.params
            names = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
            if _user_path_tested(model, call, [cst.Name(name) for name in names]):
                return False
            return any("pretrain" in name.lower() for name in names) and not _resume_branch(model, call, ancestor, names)
    return False


def _names_own_class(test: cst.BaseExpression, class_name: str | None) -> bool:
    """`"Tracker" in cfg.PRETRAIN_FILE` when the target is a `Tracker`: the test looks for the
    target's own class name in a string (a literal on the left of `in`)."""
    if not class_name:
        return False
    stack: list[cst.CSTNode] = [test]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Comparison) and isinstance(current.left, cst.SimpleString):
            if any(isinstance(t.operator, cst.In) for t in current.comparisons):
                if current.left.evaluated_value.lower() == class_name.lower():
                    return True
        stack.extend(current.children)
    return False


def _resume_branch(model: SemanticModel, call: cst.Call, function: cst.FunctionDef, names: list[str]) -> bool:
    """The load sits under a test of another parameter that the function hands to `torch.load`
    (`if resume_path: checkpoint = torch.load(resume_path)`): a checkpoint the caller chooses,
    not the factory's published weights."""
    others = {name for name in names if "pretrain" not in name.lower()}
    tested = set()
    child: cst.CSTNode = call
    for ancestor in model.ancestors(call):
        if ancestor is function:
            break
        if isinstance(ancestor, cst.If) and child is not ancestor.test:
            tested |= {node.value for node in _names_in(ancestor.test) if node.value in others}
        child = ancestor
    if not tested:
        return False
    for site in model.calls:
        if site.qualified_name != "torch.load" or function not in model.ancestors(site.node):
            continue
        path = argument(site.node, 0, "f")
        if isinstance(path, cst.Name) and path.value in tested:
            return True
    return False


def _names_in(node: cst.CSTNode) -> list[cst.Name]:
    found, stack = [], [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            found.append(current)
        stack.extend(current.children)
    return found


def _keys_matched_to_model(model: SemanticModel, load: StateDictLoad) -> bool:
    """Whether the code already compares the state dict with the model's own keys: the dict is
    built from the model (`own = model.state_dict(); own.update(...)`, or filtered with
    `if k in own`), or a statement before the load uses both (`missing = set(own) - set(sd)`,
    `print([k for k in sd if k not in model.state_dict()])`)."""
    if load.argument is None:
        return False
    own_names = _own_state_dict_names(model, load)
    if _mentions_own_state_dict(model, load.argument, load.target, own_names):
        return True
    if _from_fixed_published_weights(model, load.argument, load.call) or _live_state_dict(model, load.argument, load.call):
        return True
    roots = _root_names(model, load.argument, load.call)
    if not roots:
        return False
    scope = model.scope(load.call)
    position = model.order(load.call)
    target = model.code(load.target)
    for root in roots:
        if root in own_names:
            return True  # `own = model.state_dict(); own.update(pretrained); model.load_state_dict(own, ...)`
        for node, node_scope, order in model.references.get(root, ()):
            if order >= position or node_scope is not scope:
                continue
            # The statement, or a loop around it (`for name, t in full.items(): own_meta =
            # meta_sd.get(name); sd[name] = ...`), compares the keys with the model's.
            for checked in (model.statement_of(node), *_loops_around(model, node, load.call)):
                if _compares_keys(model, checked, load.target, own_names):
                    return True
            call = model.parent(model.parent(node))
            if isinstance(call, cst.Call) and _is_key_check(model, call, target):
                return True  # `check_keys(model, pretrained)` right before the load
            if isinstance(call, cst.Call) and _helper_compares_keys(model, call, load.target):
                return True  # `self.check_keys(pretrained)` whose body compares with `self.net.state_dict()`
            if isinstance(call, cst.Call) and any(_is_own_state_dict(model, arg.value, load.target) for arg in call.args):
                return True  # `sd = intersect_dicts(sd, model.state_dict())`: filtered by the model's keys
    return False


# Downloads of published weights: a fixed URL has fixed, known keys (`load_url(model_urls["resnet50"])`).
WEIGHT_DOWNLOADS = {"torch.hub.load_state_dict_from_url", "torch.utils.model_zoo.load_url"}
_DOWNLOAD_NAMES = ("load_url", "load_state_dict_from_url")


def _from_fixed_published_weights(model: SemanticModel, expr, at) -> bool:
    """The dict comes from a download of a fixed URL, through names and items (`ck =
    load_state_dict_from_url("https://...")`, `sd = ck["model"]`): a literal URL, a literal
    key into a table (`model_urls["resnet50"]`), or any key into a table of literal web
    addresses (`url_map[name]`, see `_url_table`)."""
    value = _through_names_and_items(model, expr, at)
    if not isinstance(value, cst.Call):
        return False
    name = model.qualified_name(value.func) or ""
    local = value.func.value if isinstance(value.func, cst.Name) else ""
    if name not in WEIGHT_DOWNLOADS and name.rsplit(".", 1)[-1] not in _DOWNLOAD_NAMES and local not in _DOWNLOAD_NAMES:
        return False
    url = argument(value, 0, "url")
    if isinstance(url, cst.Name):
        url = model.value_at(url, value)  # `url = model_urls[arch]` first
    if isinstance(url, (cst.SimpleString, cst.ConcatenatedString)) or _web_address(model, url, value):
        return True
    if not isinstance(url, cst.Subscript) or not isinstance(url.value, cst.Name):
        return False
    # `model_urls["resnet50"]`: a literal key into a table of the file
    return literal_key(url) is not None or _url_table(model, url.value.value)


_JOINS = {"join", "urljoin"}


def _web_address(model: SemanticModel, expr, at, depth: int = 3) -> bool:
    """An address built on a literal `http(s)://` base: `"https://host/" + name`,
    `f"https://host/{name}.pth"`, `"https://host/{}.pth".format(name)`, `join("http://host",
    data, name)`, through names, or what a function of this file or the project returns when
    all its returns are such (`get_model_url(data, name, hash)`): weights a server publishes."""
    if expr is None or depth <= 0:
        return False
    if isinstance(expr, cst.Name):
        value = model.value_at(expr, at)
        return value is not None and value is not expr and _web_address(model, value, at, depth - 1)
    literal = _literal_or_none(expr)
    if isinstance(literal, str):
        return literal.startswith(("http://", "https://"))
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        return _web_address(model, expr.left, at, depth)
    if isinstance(expr, cst.FormattedString):
        first = expr.parts[0] if expr.parts else None
        return isinstance(first, cst.FormattedStringText) and first.value.startswith(("http://", "https://"))
    if not isinstance(expr, cst.Call):
        return False
    method = method_call(expr)
    if method is not None and method[1] == "format":
        return _web_address(model, method[0], at, depth)
    func = expr.func
    name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
    if name in _JOINS and expr.args:
        return _web_address(model, expr.args[0].value, at, depth)
    found = called_function(model, expr)
    if found is None:
        return False
    other, function, _ = found
    returns = other.flow.own_returns(function)
    return bool(returns) and all(_web_address(other, ret.value, ret, depth - 1) for ret in returns)


def _through_names_and_items(model: SemanticModel, expr, at):
    """The expression a name or an item of one was taken from: `sd` after `ck = download(...)`
    and `sd = ck["model"]` is the `download(...)` call."""
    for _ in range(8):
        while isinstance(expr, cst.Subscript):
            expr = expr.value
        if not isinstance(expr, cst.Name):
            return expr
        binding = model.binding_at(expr.value, at)
        if binding is None or binding.value is None:
            return None
        expr, at = binding.value, binding.node
    return None


def _url_table(model: SemanticModel, name: str, depth: int = 3) -> bool:
    """`name` is bound at the file's top level, only ever to dict literals whose values are
    all literal web addresses (`url_map = {"b0": "https://.../b0.pth", ...}`), here or in the
    project file it is imported from; or it is torchvision's own table (`from
    torchvision.models.resnet import model_urls`)."""
    imported = model.imports.get(name)
    if imported is not None:
        if imported.startswith("torchvision.") and imported.endswith("model_urls"):
            return True
        found = model.project.resolve(imported, model) if model.project is not None and depth > 0 else None
        return found is not None and _url_table(found[0], imported.rsplit(".", 1)[-1], depth - 1)
    bindings = [b for b in model.bindings.get(name, ()) if b.scope.kind == "module"]
    if not bindings or len(bindings) != len(model.bindings.get(name, ())):
        return False
    for binding in bindings:
        table = binding.value
        if not isinstance(table, cst.Dict) or not table.elements:
            return False
        for element in table.elements:
            if not isinstance(element, cst.DictElement):
                return False
            url = _literal_or_none(element.value)
            if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                return False
    return True


def _literal_or_none(expr):
    try:
        return literal_value(expr)
    except ValueError:
        return None


def _live_state_dict(model: SemanticModel, expr, at) -> bool:
    """`teacher.load_state_dict(student.module.state_dict(), strict=False)`: a module's own
    state dict in this process, not a checkpoint."""
    value = model.value_at(expr, at)
    while isinstance(value, cst.Call) and value.args and _copies(model, value):
        value = value.args[0].value  # `deepcopy(student.state_dict())`: a copy is as live
    method = method_call(value) if isinstance(value, cst.Call) else None
    return method is not None and method[1] in ("state_dict", "named_buffers", "named_parameters")


def _copies(model: SemanticModel, call: cst.Call) -> bool:
    """`copy.deepcopy(x)`, `deepcopy(x)`, `copy.copy(x)`, `dict(x)`, `OrderedDict(x)`."""
    name = model.qualified_name(call.func) or (call.func.value if isinstance(call.func, cst.Name) else "")
    return name.rsplit(".", 1)[-1] in ("deepcopy", "copy", "dict", "OrderedDict")


# Set operations that compare two key sets (`own & set(sd)`, `set(sd).difference(own)`).
_KEY_SET_OPERATORS = (cst.Subtract, cst.BitAnd, cst.BitXor)
_KEY_SET_METHODS = {"difference", "intersection", "symmetric_difference", "issubset", "issuperset", "isdisjoint"}


def _compares_keys(model: SemanticModel, node: cst.CSTNode, target: cst.BaseExpression, own_names: set[str]) -> bool:
    """A key comparison with the model's state dict: a set operation on the keys (`set(own) -
    set(sd)`, `set(own) & set(sd)`, `set(sd).intersection(own)`), a comprehension or loop
    over one testing `in`/`not in` the other, or a loop over a dict looking each key up in the
    model's (`meta.get(name)`, `own[k].shape == v.shape`: a key the model lacks raises
    KeyError). A loop over a literal list of a few keys is not one, nor a difference of counts
    (`len(own) - len(sd)`)."""
    if not _mentions_own_state_dict(model, node, target, own_names):
        return False
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.BinaryOperation) and isinstance(current.operator, _KEY_SET_OPERATORS):
            if not _is_count(current.left) and not _is_count(current.right):
                return True
        if isinstance(current, cst.Call) and _is_key_set_method(model, current, target, own_names):
            return True
        if isinstance(current, (cst.For, cst.CompFor)) and not isinstance(current.iter, (cst.List, cst.Tuple, cst.Set)):
            if _has_membership_or_lookup(current, model, target, own_names):
                return True
        stack.extend(current.children)
    return False


def _has_membership_or_lookup(loop, model, target, own_names) -> bool:
    owner = model.parent(loop) if isinstance(loop, cst.CompFor) else loop
    stack = [owner]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Comparison) and any(isinstance(t.operator, (cst.In, cst.NotIn)) for t in current.comparisons):
            return True
        if isinstance(current, cst.Call):
            method = method_call(current)
            if method is not None and method[1] == "get" and _mentions_own_state_dict(model, method[0], target, own_names):
                return True
        if isinstance(current, cst.Subscript) and literal_key(current) is None:
            if _mentions_own_state_dict(model, current.value, target, own_names):
                return True  # `own[k]` per key: a key the model lacks raises KeyError
        if isinstance(current, (cst.AssignTarget, cst.Del)):
            continue  # `own[k] = v` stores, it looks nothing up
        stack.extend(current.children)
    return False


def _is_count(expr: cst.BaseExpression) -> bool:
    """`len(x)`, a number: a count, not a set of keys."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "len"


def _is_key_set_method(model: SemanticModel, call: cst.Call, target, own_names) -> bool:
    """`set(sd).intersection(own)`, `own_keys.difference(sd)`: a set method that involves the
    model's own keys (on either side)."""
    method = method_call(call)
    if method is None or method[1] not in _KEY_SET_METHODS:
        return False
    return _mentions_own_state_dict(model, call, target, own_names)


def _is_key_check(model: SemanticModel, call: cst.Call, target: str) -> bool:
    """`check_keys(model, state_dict)`: a helper named for keys, given the model too."""
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
    return "key" in str(name).lower() and any(model.code(arg.value) == target for arg in call.args)


def _helper_compares_keys(model: SemanticModel, call: cst.Call, target: cst.BaseExpression) -> bool:
    """A function of this file or the project, given the state dict, that compares its keys
    with the load target's own (`def check_keys(self, sd): model_keys = set(self.net
    .state_dict().keys()); missing = model_keys - set(sd.keys())`): the target is `self.x` of
    the same instance, or a parameter the call fills with the target."""
    found = called_function(model, call)
    if found is None:
        return False
    other, function, bound = found
    wanted = model.code(target)
    targets = []
    if bound and wanted.startswith("self.") and isinstance(call.func, cst.Attribute) and model.code(call.func.value) == "self":
        targets.append(wanted)
    params = [p.name.value for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)]
    for name in params:
        passed = model.flow.parameter_argument(call, function, name, bound)
        if passed is not None and model.code(passed) == wanted:
            targets.append(name)
    for own in targets:
        receiver = cst.parse_expression(own)
        if _compares_keys(other, function.body, receiver, set()):
            return True
    return False


def _loops_around(model: SemanticModel, node: cst.CSTNode, load: cst.Call) -> list[cst.CSTNode]:
    """The loops around `node` that do not also hold the load."""
    around_load = set(model.ancestors(load))
    loops = []
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)) or ancestor in around_load:
            break
        if isinstance(ancestor, (cst.For, cst.While)):
            loops.append(ancestor)
    return loops


def _own_state_dict_names(model: SemanticModel, load: StateDictLoad) -> set[str]:
    """Names of the load's scope bound to the target's own `state_dict()` (or its keys)."""
    names = set()
    scope = model.scope(load.call)
    for key, bindings in model.bindings.items():
        for binding in bindings:
            if binding.scope is scope and binding.value is not None and _is_own_state_dict(model, binding.value, load.target):
                names.add(key)
    return names


def _is_own_state_dict(model: SemanticModel, expr: cst.CSTNode, target: cst.BaseExpression) -> bool:
    """`target.state_dict()` (also `.keys()` / `dict(...)` / `copy` of it), for the target or
    its wrapper/inner module; both branches of a conditional unwrap (`m.module.state_dict() if
    wrapped else m.state_dict()`, for a target bound as `m.module if wrapped else m`)."""
    if isinstance(expr, cst.IfExp):
        return _is_own_state_dict(model, expr.body, target) and _is_own_state_dict(model, expr.orelse, target)
    while isinstance(expr, cst.Call):
        method = method_call(expr)
        if method is not None and method[1] == "state_dict":
            return _same_module(model, method[0], target)
        if method is not None and method[1] in ("keys", "copy"):
            expr = method[0]
        elif isinstance(expr.func, cst.Name) and expr.func.value in ("dict", "set", "list", "OrderedDict") and expr.args:
            expr = expr.args[0].value
        else:
            return _helper_returns_own_state(model, expr, target)
    return False


# What a module's own tensors are read with, and what walks its submodules.
_OWN_STATE_METHODS = {"state_dict", "named_buffers", "named_parameters", "buffers", "parameters"}
_SUBMODULE_METHODS = {"named_modules", "modules", "named_children", "children"}


def _helper_returns_own_state(model: SemanticModel, call: cst.Call, target: cst.BaseExpression) -> bool:
    """`get_norm_states(module)` for the target `module`: a function of this file or the project
    that returns entries of its parameter's own tensors (`for name, child in m.named_modules():
    for k, v in child.state_dict().items(): states[name + "." + k] = v`, `return
    dict(m.named_buffers())`), called with the target itself."""
    wanted = model.code(target)
    if not any(model.code(arg.value) == wanted for arg in call.args):
        return False  # cheap test first: the target is not even passed
    found = called_function(model, call)
    if found is None:
        return False
    other, function, bound = found
    returns = own_returns(function)
    if not returns:
        return False
    params = [p.name.value for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)]
    for name in params:
        passed = model.flow.parameter_argument(call, function, name, bound)
        if passed is None or model.code(passed) != wanted:
            continue
        if all(_built_from_own_state(other, function, ret.value, name) for ret in returns):
            return True
    return False


def _built_from_own_state(model: SemanticModel, function: cst.FunctionDef, value: cst.BaseExpression, param: str) -> bool:
    """The returned value holds only the module `param`'s own tensors: it reads them itself
    (`dict(m.named_buffers())`), or it is a name bound only to that or to an empty dict, and
    filled only by item stores inside loops over them."""
    sources = _module_names(function, param)
    if _reads_own_state(value, sources):
        return True
    if not isinstance(value, cst.Name):
        return False
    name = value.value
    bindings = [b for b in model.bindings.get(name, ()) if b.scope.node is function]
    if not bindings:
        return False
    stores = _item_stores(function, name)
    for binding in bindings:
        if binding.value is None:
            return False
        if not (_reads_own_state(binding.value, sources) or (_empty_dict(binding.value) and stores)):
            return False
    return all(
        any(isinstance(loop, (cst.For, cst.CompFor)) and _reads_own_state(loop.iter, sources)
            for loop in model.ancestors(store))
        for store in stores
    )


def _module_names(function: cst.FunctionDef, param: str) -> set[str]:
    """`param` and the loop names bound to its submodules (`for name, child in m.named_modules()`)."""
    names = {param}
    for node in _walk(function.body):
        if isinstance(node, (cst.For, cst.CompFor)) and isinstance(node.iter, cst.Call):
            method = method_call(node.iter)
            if method is not None and method[1] in _SUBMODULE_METHODS and _root(method[0]) == param:
                names |= {n.value for n in _names_in(node.target)}
    return names


def _reads_own_state(node: cst.CSTNode, sources: set[str]) -> bool:
    """`m.state_dict()`, `child.named_buffers()`... on one of `sources` somewhere in `node`."""
    for current in _walk(node):
        if isinstance(current, cst.Call):
            method = method_call(current)
            if method is not None and method[1] in _OWN_STATE_METHODS and _root(method[0]) in sources:
                return True
    return False


def _item_stores(function: cst.FunctionDef, name: str) -> list[cst.CSTNode]:
    """The `name[...] = value` statements of the function."""
    stores = []
    for node in _walk(function.body):
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Subscript):
            if isinstance(node.target.value, cst.Name) and node.target.value.value == name:
                stores.append(node)
    return stores


def _empty_dict(expr: cst.BaseExpression) -> bool:
    """`{}`, `dict()`, `OrderedDict()`, `collections.OrderedDict()`."""
    if isinstance(expr, cst.Dict):
        return not expr.elements
    if isinstance(expr, cst.Call) and not expr.args:
        func = expr.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
        return name in ("dict", "OrderedDict")
    return False


def _root(expr: cst.BaseExpression) -> str | None:
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current.children)


def _mentions_own_state_dict(model: SemanticModel, node: cst.CSTNode, target: cst.BaseExpression, own_names: set[str]) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name) and current.value in own_names:
            return True
        if isinstance(current, cst.Call) and _is_own_state_dict(model, current, target):
            return True
        stack.extend(current.children)
    return False


def _root_names(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> list[str]:
    """`sd` for `sd`, `sd["model"]`, `ckpt["model"]` (and what `sd = ckpt["model"]` was taken from)."""
    names = []
    for _ in range(4):
        while isinstance(expr, (cst.Subscript, cst.Attribute)):
            expr = expr.value
        if not isinstance(expr, cst.Name):
            break
        names.append(expr.value)
        binding = model.binding_at(expr.value, at)
        if binding is None or binding.value is None:
            break
        expr, at = binding.value, binding.node
    return names


def _result_ignored(model: SemanticModel, call: cst.Call) -> bool:
    """The call is a statement of its own, or assigned only to names that are never read."""
    parent = model.parent(call)
    if isinstance(parent, cst.Expr):
        return True
    if not isinstance(parent, cst.Assign) or parent.value is not call:
        return False
    names: list[cst.Name] = []
    for target in parent.targets:
        if isinstance(target.target, (cst.Tuple, cst.List)):
            values = [element.value for element in target.target.elements]
        else:
            values = [target.target]
        for value in values:
            if not isinstance(value, cst.Name):
                return False
            names.append(value)
    return all(name.value == "_" or not name_is_read(model, name) for name in names)


def _presence_tested(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The expressions `test` checks for presence only: `x`, `not x`, `x is None`, `x is not
    None`, joined by `and`/`or` (`"imagenet" in x` or `x == "imagenet"` checks what it is)."""
    if isinstance(test, cst.BooleanOperation):
        return _presence_tested(test.left) + _presence_tested(test.right)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _presence_tested(test.expression)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        only = test.comparisons[0]
        if isinstance(only.operator, (cst.Is, cst.IsNot)) and isinstance(only.comparator, cst.Name) and only.comparator.value == "None":
            return _presence_tested(test.left)
        return []
    return [test] if isinstance(test, (cst.Name, cst.Attribute)) else []


def _user_path_tested(model: SemanticModel, call: cst.Call, tested: list[cst.BaseExpression]) -> bool:
    """A `pretrained`-named value among `tested` is itself the path the loaded dict was read
    from (`if args.pretrained_pose: w = torch.load(args.pretrained_pose)`, `def build(pretrained=
    None): ... torch.load(pretrained)`): the user's own checkpoint file, not a factory's flag
    for published weights."""
    names = {model.code(expr) for expr in tested if "pretrain" in model.code(expr).lower()}
    if not names or not _is_load_state_dict(call):
        return False
    source = _through_names_and_items(model, argument(call, 0, "state_dict"), call)
    if not isinstance(source, cst.Call):
        return False
    func = source.func
    called = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
    if "load" not in str(called).lower():
        return False
    return any(model.code(arg.value) in names for arg in source.args)


def _same_module(model: SemanticModel, receiver: cst.BaseExpression, target: cst.BaseExpression) -> bool:
    """`receiver` is the load target, its wrapper or its inner `.module`; a target name bound in
    its scope to a conditional unwrap (`inner = m.module if wrapped else m`) is either branch,
    one bound to another name or attribute (`inner = m`) is that too."""
    code = model.code(receiver)
    wanted = [model.code(target)]
    if isinstance(target, cst.Name):
        scope = model.scope(target)
        for binding in model.bindings.get(target.value, ()):
            value = binding.value
            if binding.scope is not scope or value is None:
                continue
            if isinstance(value, cst.IfExp):
                wanted += [model.code(value.body), model.code(value.orelse)]
            elif isinstance(value, (cst.Name, cst.Attribute)):
                wanted.append(model.code(value))  # `ms = model` beside `ms = model.module if wrapped else model`
    return any(code in (each, each + ".module") or each == code + ".module" for each in wanted)


def _keys_reported_otherwise(model: SemanticModel, load: StateDictLoad) -> bool:
    """The mismatch is reported without the returned keys: a strict load of the same dict into
    the same target reports it (see `_strict_load_reports`), the key sets are compared with the
    model's by hand right after the load (`missing = own_keys - set(sd)`, see
    `_keys_compared_after`), or the dict is what a helper returns when given the model's own
    state dict (`sd = inflate(ckpt, own)`; `own` may be bound through a conditional unwrap)."""
    if load.argument is None:
        return False
    if _strict_load_reports(model, load) or _filled_from_live_state(model, load):
        return True
    own_names = _own_state_dict_names(model, load)
    value = model.value_at(load.argument, load.call)
    if isinstance(value, cst.Call) and not _is_load_state_dict(value) and value is not load.argument:
        for arg in value.args:
            if isinstance(arg.value, cst.Name) and arg.value.value in own_names:
                return True
            if _is_own_state_dict(model, arg.value, load.target):
                return True
    return _keys_compared_after(model, load, own_names)


def _strict_load_reports(model: SemanticModel, load: StateDictLoad) -> bool:
    """A strict load of the same dict into the same target whose RuntimeError (it names every
    missing and unexpected key) reaches the user: the non-strict load is the retry in an
    `except ... as error:` handler that reads the error, after a strict load in the `try`
    (`try: net.load_state_dict(sd) except RuntimeError as e: log.warning(e);
    net.load_state_dict(sd, strict=False)`), or a tried strict load of the same dict follows on
    every path in the same function and its error is read (`except Exception as e: print(e)`;
    not `except Exception: pass`)."""
    target, argument = model.code(load.target), model.code(load.argument)
    function = _innermost_function(model, load.call)
    handler = None
    for ancestor in model.ancestors(load.call):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(ancestor, cst.ExceptHandler):
            handler = ancestor
            break
    same = [
        other for other in checkpoint_facts(model).loads
        if other is not load and _strict_literally(other.call) and other.argument is not None
        and model.code(other.target) == target and model.code(other.argument) == argument
        and _innermost_function(model, other.call) is function
    ]
    if handler is not None and _reads_error(model, handler):
        trial = model.parent(handler)
        if isinstance(trial, cst.Try) and any(_inside(model, other.call, trial.body) for other in same):
            return True
    position = model.order(load.call)
    return any(
        model.order(other.call) > position and _runs_whenever(model, other.call, load.call) and _error_reported(model, other.call)
        for other in same
    )


def _strict_literally(call: cst.Call) -> bool:
    """`load_state_dict(sd)` or `load_state_dict(sd, strict=True)`: raises on any key mismatch."""
    strict = argument(call, 1, "strict")
    return strict is None or (isinstance(strict, cst.Name) and strict.value == "True")


def _inside(model: SemanticModel, node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return any(ancestor is container for ancestor in model.ancestors(node))


def _reads_error(model: SemanticModel, handler: cst.ExceptHandler) -> bool:
    """`except RuntimeError as error:` whose body reads `error` (logs or prints it), or a
    handler that re-raises."""
    bound = handler.name.name.value if handler.name is not None and isinstance(handler.name.name, cst.Name) else None
    for node in _walk(handler.body):
        if isinstance(node, cst.Raise):
            return True
        if bound is not None and isinstance(node, cst.Name) and node.value == bound:
            return True
    return False


def _error_reported(model: SemanticModel, call: cst.Call) -> bool:
    """`call` is tried (`try: net.load_state_dict(sd) except Exception as e: print(e)`) in its
    function, and every handler of each `try` around it reads the error or re-raises: the
    shape of a deliberate second, strict load that shows the mismatch. (A bare strict load
    later on would raise too, but then the non-strict one is the one left unexplained.)"""
    child: cst.CSTNode = call
    tried = False
    for ancestor in model.ancestors(call):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(ancestor, cst.Try) and child is ancestor.body:
            if not all(_reads_error(model, handler) for handler in ancestor.handlers):
                return False
            tried = True
        child = ancestor
    return tried


def _runs_whenever(model: SemanticModel, node: cst.CSTNode, anchor: cst.CSTNode) -> bool:
    """`node` runs whenever `anchor` did, as far as the branches tell: every branch, loop body
    or handler holding `node` also holds `anchor` (a branch's test always runs), and both are in
    the same function."""
    around_anchor = set(model.ancestors(anchor))
    child: cst.CSTNode = node
    for ancestor in model.ancestors(node):
        if ancestor in around_anchor:
            return True
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return False
        if isinstance(ancestor, (cst.If, cst.While, cst.IfExp)) and child is not ancestor.test:
            return False
        if isinstance(ancestor, cst.For) and child is not ancestor.iter:
            return False
        if isinstance(ancestor, (cst.ExceptHandler, cst.Else, cst.Match)):
            return False
        if isinstance(ancestor, cst.BooleanOperation) and child is not ancestor.left:
            return False
        child = ancestor
    return False


def _keys_compared_after(model: SemanticModel, load: StateDictLoad, own_names: set[str]) -> bool:
    """The dict's keys, or names bound to them (`file_keys = set(sd.keys())`), are compared
    with the model's own in a statement after the load that runs whenever the load did
    (`missing = own_keys - file_keys`, `if set(sd) ^ set(model.state_dict()): ...`), with the
    dict still the one loaded; or names bound to its keys are compared before the load."""
    roots = _root_names(model, load.argument, load.call)
    if not roots:
        return False
    root = roots[0]
    loaded = model.binding_at(root, load.call)
    if loaded is None:
        return False
    scope, position = model.scope(load.call), model.order(load.call)
    names = {root} | _key_set_names(model, root, loaded, scope)
    for name in names:
        for node, node_scope, order in model.references.get(name, ()):
            if node_scope is not scope or (name == root and order <= position):
                continue
            if order > position:
                if model.binding_at(root, node) is not loaded or not _runs_whenever(model, node, load.call):
                    continue
            if _compares_keys(model, model.statement_of(node), load.target, own_names):
                return True
    return False


def _key_set_names(model: SemanticModel, root: str, loaded, scope) -> set[str]:
    """Names of `scope` bound to the keys of `root`'s dict as it was loaded (`file_keys =
    set(sd.keys())`, `names = list(sd)`, `keys = sd.keys()`)."""
    names = set()
    for key, bindings in model.bindings.items():
        for binding in bindings:
            if binding.scope is not scope or binding.value is None:
                continue
            expr = binding.value
            while isinstance(expr, cst.Call):
                method = method_call(expr)
                if method is not None and method[1] == "keys" and not expr.args:
                    expr = method[0]
                elif isinstance(expr.func, cst.Name) and expr.func.value in ("set", "list", "sorted", "tuple") and len(expr.args) == 1:
                    expr = expr.args[0].value
                else:
                    break
            if expr is not binding.value and isinstance(expr, cst.Name) and expr.value == root:
                if model.binding_at(root, binding.node) is loaded:
                    names.add(key)
    return names


def _filled_from_live_state(model: SemanticModel, load: StateDictLoad) -> bool:
    """The dict is built in the load's function from live modules only: a name bound there only
    to an empty dict, filled only by item stores inside loops over a module's live
    `state_dict()` / `named_parameters()` / `named_buffers()` (`state = model.state_dict();
    new = {}; for name, p in state.items(): new[name] = p[:k]`; then
    `sibling.load_state_dict(new, strict=False)`), and handed to nothing else: tensors of
    this process, as with a live state dict passed directly, not a checkpoint file."""
    arg = load.argument
    function = _innermost_function(model, load.call)
    if not isinstance(arg, cst.Name) or function is None:
        return False
    bindings = [b for b in model.bindings.get(arg.value, ()) if b.scope.node is function]
    if not bindings or not all(b.value is not None and _empty_dict(b.value) for b in bindings):
        return False
    stores = _item_stores(function, arg.value)
    if not stores:
        return False
    for node in _walk(function.body):
        if isinstance(node, cst.Call) and node is not load.call:
            if any(isinstance(a.value, cst.Name) and a.value.value == arg.value for a in node.args):
                return False  # handed to a helper that may add a checkpoint's entries
            method = method_call(node)
            if method is not None and isinstance(method[0], cst.Name) and method[0].value == arg.value:
                if method[1] not in ("items", "keys", "values", "get", "pop"):
                    return False  # `new.update(checkpoint)`
    return all(
        any(isinstance(loop, (cst.For, cst.CompFor)) and _iterates_live_state(model, loop.iter, loop)
            for loop in model.ancestors(store))
        for store in stores
    )


def _iterates_live_state(model: SemanticModel, expr: cst.BaseExpression, at: cst.CSTNode) -> bool:
    """`own.items()` after `own = net.state_dict()`, `net.named_parameters()`, `net.state_dict().items()`."""
    if isinstance(expr, cst.Call):
        method = method_call(expr)
        if method is not None and method[1] in ("items", "keys", "values") and not expr.args:
            expr = method[0]
    return _live_state_dict(model, expr, at)
