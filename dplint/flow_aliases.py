"""What else a branch test stands for: a name bound once to a truth test
(``boolean_alias``: ``ddp = world_size > 1``), a dict entry set True under one test and False
where it failed (``_dictionary_flag``), a call of a one-line predicate (its body,
``_predicate_body``), the same wrapper check spelled on another name of one object
(``_alias_checks``), and a parameter spelled as its one caller's argument (``_caller_argument``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

import libcst as cst

from dplint.flow_common import _SPACE, _inside, _static, _type_test_text
from dplint.flow_paths import Condition, Path

if TYPE_CHECKING:  # pragma: no cover
    from dplint.semantic import Scope, SemanticModel


# Dict-entry flags read inside another entry's branch tests, at most (see `_dictionary_flag`).
MAX_FLAG_DEPTH = 2

_OPEN_FLAGS = [0]

# Argument-free queries of torch's state, the same answer wherever asked in one run.
_STATE_QUERIES = {"torch.cuda.is_available", "torch.distributed.is_available", "torch.distributed.is_initialized"}


class AliasesMixin:
    """What a branch test stands for through aliases and flags (part of ``dplint.flow.Flow``)."""

    def _dictionary_flag(self, test: cst.Subscript) -> Optional[Condition]:
        """The branch test a dict entry stands for (as a holding Condition) when the dict that
        reaches `test` (through `self.x = x`, a parameter's only caller, other files: every
        plain name holding it on the way) gets that key by `d["key"] = True` statements under
        one test and `d["key"] = False` statements where it failed, and no other way the
        analysis sees. None otherwise."""
        from dplint.semantic import literal_value

        try:
            key = literal_value(test.slice[0].slice.value) if len(test.slice) == 1 \
                and isinstance(test.slice[0].slice, cst.Index) else None
        except ValueError:
            return None
        if not isinstance(key, str) or test in self._inlining or _OPEN_FLAGS[0] >= MAX_FLAG_DEPTH:
            return None
        # The stores' own branch tests may be entries again (`if cfg["amp"]: cfg["dist"] = ...`):
        # followed a little way only, and never back into a test still being read.
        self._inlining.add(test)
        _OPEN_FLAGS[0] += 1
        try:
            holders = self._dict_holders(test.value, test, 4)
            stores = [(owner, assign) for owner, scope_node, name in holders for assign in _entry_stores(owner, scope_node, name, key)]
            paths: dict = {True: [], False: []}
            for owner, assign in stores:
                flag = _static(owner, assign.value) if isinstance(assign.value, cst.Name) else None
                if flag is None:
                    return None  # set to something else than a literal True / False
                paths[flag].append(owner.flow.branch_conditions(assign))
        finally:
            self._inlining.discard(test)
            _OPEN_FLAGS[0] -= 1
        if not paths[True] or not paths[False]:
            return None
        for condition in reversed(paths[True][0]):
            if all(condition in path for path in paths[True]) and all(condition.negated() in path for path in paths[False]):
                return condition
        return None

    def _dict_holders(self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> list:
        """(model, scope node, name) of each plain name that holds the object `expr` holds at
        `at`, back to where it was made: `self.config` <- `__init__(self, config)` <- the
        only call `Trainer(model, config)` <- `main(config)`'s parameter..."""
        model = self.model
        key = model.binding_key(expr, at)
        entries = self.reaching(key, at) if key is not None and depth > 0 else []
        if len({id(binding) for binding, _ in entries}) != 1:
            return []
        binding = entries[0][0]
        holders = [(model, binding.scope.node, key)] if "." not in key else []
        node = binding.node
        if isinstance(node, cst.Param):
            function = model.parent(model.parent(node))
            sites = self.all_call_sites(function) if isinstance(function, cst.FunctionDef) else None
            if not sites or len(sites) != 1:
                return holders
            caller, call, bound = sites[0]
            argument = self.parameter_argument(call, function, node.name.value, bound)
            if argument is None or argument is node.default:
                return holders
            return holders + caller.flow._dict_holders(argument, call, depth - 1)
        if isinstance(node, cst.Assign) and isinstance(binding.value, (cst.Name, cst.Attribute)):
            return holders + self._dict_holders(binding.value, node, depth - 1)
        return holders

    def _alias_checks(self, test: cst.Call, holds: bool) -> Path:
        """The same wrapper check spelled on the other names of the tested object: `model =
        self.model` ... `model.module if hasattr(self.model, "module") else model` tests `model`
        too, when the function binds `model` once, to `self.model`, and never rebinds
        `self.model` (nor a plain name aliased so): both spellings hold one value throughout."""
        if not (isinstance(test.func, cst.Name) and test.func.value in ("hasattr", "isinstance") and test.args
                and test.args[0].keyword is None and not test.args[0].star):
            return ()
        scope = self.model.scope(test)
        if scope.kind != "function":
            return ()
        aliases = self._aliases_in(scope)
        if not aliases:
            return ()
        subject = _SPACE.sub("", self.model.code(test.args[0].value))
        text, head = _SPACE.sub("", self.model.code(test)), test.func.value + "("
        if subject not in aliases or not text.startswith(head + subject):
            return ()
        rest = text[len(head) + len(subject):]
        return tuple(Condition(head + other + rest, holds, 0) for other in aliases[subject])

    def _aliases_in(self, scope: "Scope") -> dict:
        """spelling -> the other spellings of its value in this function: a local bound once by
        a plain `alias = name` / `alias = self.attr` whose source the function never rebinds."""
        found = self._plain_aliases.get(id(scope.node))
        if found is not None:
            return found
        found = {}
        for name in scope.local_names:
            bindings = [b for b in self.model.bindings.get(name, ()) if b.scope is scope]
            if len(bindings) != 1 or not isinstance(bindings[0].node, cst.Assign):
                continue
            node, value = bindings[0].node, bindings[0].value
            if len(node.targets) != 1 or not isinstance(node.targets[0].target, (cst.Name, cst.Tuple)) \
                    or not self._never_rebound(scope, value):  # `model, config = self.model, self.config` too
                continue
            source = _SPACE.sub("", self.model.code(value))
            found.setdefault(source, []).append(name)
            found.setdefault(name, []).append(source)
        self._plain_aliases[id(scope.node)] = found
        return found

    def _never_rebound(self, scope: "Scope", value: Optional[cst.BaseExpression]) -> bool:
        """Whether `value`, a plain name or an attribute of the method's instance, keeps one
        value through the function: a name bound at most once in it, `self.x` never assigned in it."""
        if isinstance(value, cst.Name):
            if value.value not in scope.local_names:
                return value.value != scope.self_name and value.value in self.model.bindings
            return len([b for b in self.model.bindings.get(value.value, ()) if b.scope is scope]) <= 1
        if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) \
                and scope.self_name is not None and value.value.value == scope.self_name:
            key = scope.self_name + "." + value.attr.value
            return not any(_inside(self.model, b.node, scope.node) for b in self.model.bindings.get(key, ()))
        if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) and value.value.value != scope.self_name:
            # `n_gpu = args.n_gpu`: `args` bound once (a parameter), `args.n_gpu` never assigned here
            return self._never_rebound(scope, value.value) and \
                _SPACE.sub("", self.model.code(value)) not in self._assigned_attributes(scope.node)
        return False

    def _assigned_attributes(self, function: cst.CSTNode) -> set:
        """The attributes a function assigns (`args.n_gpu = 1`, `opt.x += 1`), as text without spaces."""
        from dplint.semantic import children_of

        found = self._assigned.get(id(function))
        if found is not None:
            return found
        found, stack = set(), list(children_of(function))
        while stack:
            node = stack.pop()
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            targets = []
            if isinstance(node, cst.Assign):
                targets = [t.target for t in node.targets]
            elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
                targets = [node.target]
            while targets:
                target = targets.pop()
                if isinstance(target, (cst.Tuple, cst.List)):
                    targets.extend(e.value for e in target.elements)
                elif isinstance(target, cst.Attribute):
                    found.add(_SPACE.sub("", self.model.code(target)))
            stack.extend(children_of(node))
        self._assigned[id(function)] = found
        return found

    def boolean_alias(self, name: cst.Name) -> Optional[tuple[cst.BaseExpression, bool]]:
        """(test, negated) when `name` is a local of a function bound once, by a plain
        assignment, to a truth test: `ddp = bool(ws)`, `ddp = True if ws else False`, `ddp = ws`,
        `wrapped = isinstance(m, DDP)`, `multi = len(ids) > 1`; a module's global too, bound
        once in the file (`distributed = torch.cuda.device_count() > 1` at the top of a
        script, no `global distributed` rebinding it). None otherwise."""
        owner = self.model.owner_scope(name.value, self.model.scope(name))
        if owner is None or owner.kind not in ("function", "module"):
            return None
        if owner.kind == "module" and len(self.model.bindings.get(name.value, ())) != 1:
            return None  # bound in a function too (a local of the same name, or `global`)
        bindings = [b for b in self.model.bindings.get(name.value, ()) if b.scope is owner]
        if len(bindings) != 1 or not isinstance(bindings[0].node, cst.Assign) or bindings[0].value is None:
            return None
        if len(bindings[0].node.targets) != 1 or not isinstance(bindings[0].node.targets[0].target, cst.Name):
            return None
        value, negated = bindings[0].value, False
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "bool" \
                and len(value.args) == 1 and not value.args[0].star:
            value = value.args[0].value
        elif isinstance(value, cst.IfExp) and _static(self.model, value.body) is not None \
                and _static(self.model, value.orelse) is not None:
            body, orelse = _static(self.model, value.body), _static(self.model, value.orelse)
            if body == orelse:
                return None
            value, negated = value.test, not body
        if isinstance(value, (cst.Name, cst.Attribute, cst.Comparison)):
            return value, negated
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in ("isinstance", "hasattr"):
            return value, negated
        if isinstance(value, cst.Call) and not value.args \
                and (self.model.qualified_name(value.func) or "") in _STATE_QUERIES:
            return value, negated  # `use_cuda = torch.cuda.is_available()`: the query itself
        if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Not):
            return value, negated
        return None

    def _predicate_body(self, call: cst.Call) -> Optional[str]:
        """The test a one-line predicate of the project runs, with its parameters replaced by
        the call's arguments (names and attributes only): `is_model_distributed(model)` ->
        `isinstance(model,DistributedDataParallel)`; None for anything else."""
        if not call.args or any(arg.keyword is not None or arg.star for arg in call.args):
            return None
        if not all(isinstance(arg.value, (cst.Name, cst.Attribute)) for arg in call.args):
            return None
        if call in self._inlining:
            return None  # a predicate whose resolution asks about itself
        self._inlining.add(call)
        try:
            callee = self.callee(call)
        finally:
            self._inlining.discard(call)
        if callee is None or callee.bound or not isinstance(callee.node, cst.FunctionDef):
            return None
        from dplint.semantic import is_docstring  # semantic imports this module

        function = callee.node
        body = list(function.body.body)
        if body and is_docstring(body[0]):
            body = body[1:]
        if not body or not all(isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 for line in body):
            return None
        returned = body[-1].body[0]
        params = function.params
        if not isinstance(returned, cst.Return) or returned.value is None or isinstance(params.star_arg, cst.Param) \
                or params.star_kwarg is not None or params.kwonly_params or len(params.params) != len(call.args):
            return None
        text = _SPACE.sub("", callee.model.code(returned.value))
        type_test = _type_test_text(callee.model, returned.value)
        if type_test is not None and not type_test[1]:
            text = type_test[0]  # `return type(m) in (DP, DDP)`: the isinstance test, as it is read anywhere
        # locals set before the return (`kinds = (DP, DDP)`; `return isinstance(m, kinds)`)
        for line in reversed(body[:-1]):
            assign = line.body[0]
            if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
                return None
            local = assign.targets[0].target.value
            text = re.sub(rf"\b{re.escape(local)}\b", lambda _: _SPACE.sub("", callee.model.code(assign.value)), text)
        for param, arg in zip(params.params, call.args):
            text = re.sub(rf"\b{re.escape(param.name.value)}\b", _SPACE.sub("", self.model.code(arg.value)), text)
        return text

    def _caller_argument(self, owner: "Scope", name: str, depth: int = 3) -> Optional[tuple]:
        """(name, scope id) of what the only call of function `owner` passes for its parameter
        `name`, when that is a plain name (followed through further single callers)."""
        function = owner.node
        if depth <= 0 or owner.kind != "function" or not isinstance(function, cst.FunctionDef):
            return None
        params = function.params
        if name not in {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}:
            return None
        sites = self.call_sites(function)
        if not sites or len(sites) != 1:
            return None
        call, bound = sites[0]
        passed = self.parameter_argument(call, function, name, bound)
        if not isinstance(passed, cst.Name):
            return None
        caller = self.model.owner_scope(passed.value, self.model.scope(call))
        if caller is None:
            return None
        further = self._caller_argument(caller, passed.value, depth - 1)
        if further is not None:
            return further
        return passed.value, id(caller.node) if caller.kind == "function" else 0


def _entry_stores(model: "SemanticModel", scope_node: cst.CSTNode, name: str, key: str) -> list:
    """The `name["key"] = ...` statements of a scope (not of the functions inside it)."""
    found = []
    stack = [scope_node.body] if isinstance(scope_node, (cst.FunctionDef, cst.ClassDef)) else [scope_node]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.Assign):
            for target in node.targets:
                store = target.target
                if isinstance(store, cst.Subscript) and isinstance(store.value, cst.Name) and store.value.value == name \
                        and len(store.slice) == 1 and isinstance(store.slice[0].slice, cst.Index) \
                        and isinstance(store.slice[0].slice.value, cst.SimpleString) \
                        and store.slice[0].slice.value.evaluated_value == key:
                    found.append(node)
            continue
        stack.extend(model.children(node))
    return found
