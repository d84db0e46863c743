"""Values: everything an expression may hold (``Flow.values_at``), through names (all
reaching bindings), conditional expressions, self-returning and same-file calls (their
returns, ``returned_values``), parameters (their callers' arguments, ``values_per_caller``),
tuple unpacking, and imported names (``resolve_import``); its truthiness on a path
(``Flow.truth``); and the wrapping each reaching value is (``wrappings_at``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

import libcst as cst

from dplint.flow_common import Callee, Value, _enclosing_function, _static, ends_path
from dplint.flow_paths import Path, _join, _portable, consistent
from dplint.wrapper_classes import wrapper_test_kinds, wrapping_built_by

if TYPE_CHECKING:  # pragma: no cover
    from dplint.semantic import Binding, SemanticModel, Wrapping


_MAX_DEPTH = 12
# Methods that change a dict's or a list's entries in place.
_MUTATORS = frozenset(("update", "setdefault", "pop", "popitem", "clear", "append", "insert", "extend", "remove",
                       "__setitem__", "sort", "reverse"))

_MAX_STEPS = 400  # values_at steps per question


class ValuesMixin:
    """What an expression may hold, and its truth (part of ``dplint.flow.Flow``)."""

    # ------------------------------------------------------------------------ values
    def values_at(self, expr: Optional[cst.BaseExpression], at: Optional[cst.CSTNode] = None,
                  path: Path = (), _context: tuple = (), _depth: int = _MAX_DEPTH) -> list[Value]:
        if self._active == 0:
            self._steps = 0
        self._active += 1
        try:
            self._steps += 1
            if self._steps > _MAX_STEPS:  # a question that fans out too far: cannot tell
                return [Value(self.model, None, path)]
            return self._values_at(expr, at, path, _context, _depth)
        finally:
            self._active -= 1

    def _values_at(self, expr, at, path: Path, _context: tuple, _depth: int) -> list[Value]:
        from dplint.semantic import peel_self_returning

        model = self.model
        at = expr if at is None else at
        if expr is None or _depth <= 0:
            return [Value(model, None, path)]
        expr = peel_self_returning(expr)
        if isinstance(expr, cst.IfExp):
            truth = _static(model, expr.test, at)
            if truth is None and _context and _enclosing_function(model, expr) is _context[0][0]:
                truth = self._truth_in_call(expr.test, _context)  # `m.module if wrapped else m`
            if truth is not None:
                return self.values_at(expr.body if truth else expr.orelse, at, path, _context, _depth - 1)
            condition = self.condition(expr.test)
            return [
                *self.values_at(expr.body, at, _join(path, (condition,)), _context, _depth - 1),
                *self.values_at(expr.orelse, at, _join(path, (condition.negated(),)), _context, _depth - 1),
            ]
        if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
            return [Value(model, expr, path)]
        key = model.binding_key(expr, at)
        if key is None:
            if isinstance(expr, cst.Call):
                return self._call_values(expr, path, _context, _depth)
            if isinstance(expr, cst.Subscript):
                held = self._entry_values(expr, at, path, _context, _depth)
                if held:
                    return held
            if isinstance(expr, cst.Attribute):
                stored = self.stored_attribute_values(expr, at, path, _context, _depth)
                if stored is not None:
                    return stored
            return [Value(model, expr, path)]
        entries = self._reaching(key, at)
        if not entries:
            if isinstance(expr, cst.Name) and expr.value not in model.bindings:
                return [Value(model, expr, path)]  # a builtin or a name from a star import
            return [Value(model, None, path)]
        values: list[Value] = []
        for binding, conditions in entries:
            if _context and not isinstance(binding.node, cst.Param) and self._dead_in_call(binding.node, _context):
                continue
            joined = _join(path, conditions)
            if id(binding) in self._inherited_of:
                values.extend(self._inherited_values(self._inherited_of[id(binding)], key, joined, _depth))
                continue
            owner = self._binding_model(binding)
            if owner is not model:  # a base class's method that `self.m()` ran bound it: read it there
                values.extend(owner.flow._binding_values(key, binding, joined, (), _depth) if owner is not None
                              else [Value(model, None, joined)])
                continue
            values.extend(self._binding_values(key, binding, joined, _context, _depth))
        return values

    def _entry_values(self, subscript: cst.Subscript, at, path: Path, _context: tuple, _depth: int) -> list[Value]:
        """`nets["G"]` / `nets[0]` where every value the container holds is a display that
        spells that entry (`nets = {"G": DDP(g), "D": DDP(d)}`, `nets = [DDP(g), DDP(d)]`):
        the entry's values. Empty when some value is not such a display, or the key is not a
        literal (then the subscript stands for itself)."""
        entry = _literal_key(subscript)
        if entry is None or self._entries_changed(subscript.value, at):
            return []
        found = []
        for container in self.values_at(subscript.value, at, path, _context, _depth - 1):
            element = _display_entry(container.expr, entry) if container.known else None
            if element is None:
                return []
            found.extend(container.model.flow.values_at(element, element, container.conditions, (), _depth - 1))
        return found

    def _entries_changed(self, container: cst.BaseExpression, at) -> bool:
        """Whether the file changes the entries of what the name holds: `nets["G"] = ...`,
        `del nets[k]`, `nets.update(...)`, `nets.append(...)`: the display no longer tells."""
        key = self.model.binding_key(container, at)
        if key is None:
            return True
        owner = self.model.owner_scope(key, self.model.scope(at))
        for node, scope, _ in self.model.references.get(key, ()):
            if self.model.owner_scope(key, scope) is not owner:
                continue  # another variable of the same name
            parent = self.model.parent(node)
            if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value in _MUTATORS:
                return True
            if isinstance(parent, cst.Subscript) and parent.value is node:
                holder = self.model.parent(parent)
                if isinstance(holder, (cst.AssignTarget, cst.AugAssign, cst.Del)) or \
                        isinstance(holder, cst.AnnAssign) and holder.target is parent:
                    return True
        return False

    def _binding_model(self, binding: "Binding") -> Optional["SemanticModel"]:
        """The model whose tree holds `binding`: this one, or, for a binding that a walk took
        from a method of another file (`self.resume()` of a project base class), that file's
        model (None when it is no longer loaded). Its values are read in its own file's flow."""
        if binding.node is None or self.model.contains(binding.node) or self.model.project is None:
            return self.model
        return self.model.project.model_owning(binding.node)

    def _binding_values(self, key: str, binding: "Binding", joined: Path, _context: tuple, _depth: int) -> list[Value]:
        """What one binding of `key` (of this file) gives, on the path `joined`."""
        model = self.model
        if binding.value is not None:
            found = self.values_at(binding.value, binding.node, joined, _context, _depth - 1)
        elif isinstance(binding.node, cst.Param):
            found = self._parameter_values(binding, joined, _context, _depth)
        elif isinstance(binding.node, (cst.Assign, cst.AnnAssign)) and binding.node.value is not None:
            # one target of `a, b = build(...)` or of `net_g, net_d = nets`
            found = self._unpacked_values(binding, joined, _context, _depth)
        elif isinstance(binding.node, cst.ImportFrom) and model.project is not None:
            found = self._imported_values(key, joined, _depth)
        else:
            found = [Value(model, None, joined)]
        for value in found:
            if value.binding is None:
                value.binding = binding
        return found

    def value_expressions(self, expr, at=None) -> list[cst.BaseExpression]:
        """The known expressions (of this file) `expr` may hold; [] when any is unknown."""
        values = self.values_at(expr, at)
        if any(not v.known or v.model is not self.model for v in values):
            return []
        return [v.expr for v in values]

    def _dead_in_call(self, node: cst.CSTNode, context: tuple) -> bool:
        """Whether the call being followed never reaches `node` (a binding, a `return`): it
        sits under an `if` of that function whose test this call's arguments decide against it
        (`if len(gpu_ids) > 0: net = DataParallel(net, gpu_ids)` in `init_net(net, gpu_ids=[])`
        called without `gpu_ids`), or after an `if` that returns or raises and that the
        arguments decide for (`if not distributed: return None`). Only tests on the function's
        own names whose every value is a literal."""
        function = context[0][0]
        if _enclosing_function(self.model, node) is not function:
            return False
        child = node
        for ancestor in self.model.ancestors(node):
            if ancestor is function:
                break
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                truth = self._truth_in_call(ancestor.test, context)
                if truth is not None and truth != (child is ancestor.body):
                    return True
            child = ancestor
        return any(self._truth_in_call(exit_.test, context) is True for exit_ in _earlier_exits(self.model, node, function))

    def _truth_in_call(self, test: cst.BaseExpression, context: tuple) -> Optional[bool]:
        """The truth of `x`, `not x`, `len(x) > 1`, `x >= 2` (`x` a name) when every value the
        followed call gives `x` is a literal (a list or tuple counts by its length); else None."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self._truth_in_call(test.expression, context)
            return None if inner is None else not inner
        if isinstance(test, cst.Name):
            aliased = self.boolean_alias(test)
            if aliased is not None and isinstance(aliased[0], cst.Call):
                inner = self._truth_in_call(aliased[0], context)  # `wrapped = isinstance(m, DDP)`
                return None if inner is None else inner != aliased[1]
            values = self._literals_in_call(test, context, sized=False)
            answers = {bool(v) for v in values} if values is not None else set()
            return answers.pop() if len(answers) == 1 else None
        if isinstance(test, cst.Call):
            return self._wrapper_test_in_call(test, context)
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return None
        target = test.comparisons[0]
        operators = {cst.GreaterThan: ">", cst.GreaterThanEqual: ">=", cst.LessThan: "<",
                     cst.LessThanEqual: "<=", cst.Equal: "==", cst.NotEqual: "!="}
        operator = operators.get(type(target.operator))
        if operator is None or not isinstance(target.comparator, cst.Integer):
            return None
        left = test.left
        if isinstance(left, cst.Call) and isinstance(left.func, cst.Name) and left.func.value == "len" \
                and len(left.args) == 1 and isinstance(left.args[0].value, cst.Name):
            values = self._literals_in_call(left.args[0].value, context, sized=True)
        elif isinstance(left, cst.Name):
            values = self._literals_in_call(left, context, sized=False)
            if values is not None and not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                return None
        else:
            return None
        if not values:
            return None
        bound = int(target.comparator.value.replace("_", ""), 0)
        compare = {">": lambda a: a > bound, ">=": lambda a: a >= bound, "<": lambda a: a < bound,
                   "<=": lambda a: a <= bound, "==": lambda a: a == bound, "!=": lambda a: a != bound}[operator]
        answers = {compare(v) for v in values}
        return answers.pop() if len(answers) == 1 else None

    def _wrapper_test_in_call(self, test: cst.Call, context: tuple) -> Optional[bool]:
        """`isinstance(m, DDP)` (or a tuple of wrapper classes) where every value the followed
        call gives the name `m` is a wrapper the code builds: whether its kind is among them.
        None where a value is anything else, or a class is no wrapper."""
        if not (isinstance(test.func, cst.Name) and test.func.value == "isinstance" and test.args
                and isinstance(test.args[0].value, cst.Name) and not any(arg.star for arg in test.args)):
            return None
        kinds = wrapper_test_kinds(self.model, test, test.args[0].value.value)
        if kinds is None:
            return None
        answers = set()
        for value in self.values_at(test.args[0].value, test, (), context, _MAX_DEPTH // 2):
            wrapping = wrapping_built_by(value.model, value.expr) if value.known else None
            if wrapping is None:
                return None
            answers.add(wrapping.kind in kinds)
        return answers.pop() if len(answers) == 1 else None

    def _literals_in_call(self, name: cst.Name, context: tuple, sized: bool) -> Optional[list]:
        """Every value `name` holds in the followed call as a Python literal (a list's or
        tuple's length when `sized`: only a default, `gpu_ids=[]` or `kwargs.get("gpu_ids",
        [])`, which nothing appends to before the call); None when any is not a literal."""
        from dplint.semantic import literal_value

        found = []
        for value in self.values_at(name, name, (), context, _MAX_DEPTH // 2):
            expr = value.expr
            if sized and isinstance(expr, (cst.List, cst.Tuple)) and not any(
                    isinstance(e, cst.StarredElement) for e in expr.elements) and _default_display(value.model, expr):
                found.append(len(expr.elements))
                continue
            if sized or expr is None:
                return None
            try:
                found.append(literal_value(expr))
            except ValueError:
                return None
        return found

    def _keyword_of_kwargs(self, call: cst.Call, path: Path, context: tuple, depth: int) -> Optional[list[Value]]:
        """`kwargs.get("gpu_ids", [])` on a function's `**kwargs`, in a followed call of that
        function: the keyword argument the call passes, else the default (None: cannot tell)."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "get" and isinstance(func.value, cst.Name)
                and call.args and isinstance(call.args[0].value, cst.SimpleString) and len(call.args) <= 2):
            return None
        entries = self._reaching(func.value.value, call)  # the parameter, once per path
        if not entries or any(b is not entries[0][0] for b, _ in entries) or not isinstance(entries[0][0].node, cst.Param):
            return None
        param = entries[0][0].node
        function = self.model.parent(self.model.parent(param))
        if not isinstance(function, cst.FunctionDef) or function.params.star_kwarg is not param:
            return None
        frame = next((f for f in context if f[0] is function), None)
        if frame is None:
            return None
        _, outer_call, caller, _bound = frame
        rest = context[context.index(frame) + 1:]
        if any(arg.star == "**" for arg in outer_call.args):
            return None
        keyword = call.args[0].value.evaluated_value
        for arg in outer_call.args:
            if arg.keyword is not None and arg.keyword.value == keyword:
                return caller.flow.values_at(arg.value, outer_call, path, rest, depth - 1)
        if len(call.args) == 2:
            return self.values_at(call.args[1].value, call, path, context, depth - 1)
        return None

    def _call_values(self, call: cst.Call, path: Path, context: tuple, depth: int) -> list[Value]:
        if context:
            from_kwargs = self._keyword_of_kwargs(call, path, context, depth)
            if from_kwargs is not None:
                return from_kwargs
        callee = self.callee(call)
        if callee is None or isinstance(callee.node, cst.ClassDef):
            return [Value(self.model, call, path)]
        # A value's conditions are in the terms of the file that asked for it: a callee of this
        # file hands back conditions of this file even for a value made in another (a caller's
        # wrapper, passed in and returned by `unwrap(m)`: `m.module if wrapped else m`).
        return [
            Value(v.model, v.expr, _join(path, v.conditions if v.model is self.model or callee.model is self.model
                                         else _portable(v.conditions)), v.binding)
            for v in callee.model.flow.returned_values(callee, call, self.model, context, depth - 1)
        ]

    def returned_values(self, callee: Callee, call: Optional[cst.Call], caller: Optional["SemanticModel"] = None,
                        context: tuple = (), depth: int = _MAX_DEPTH) -> list[Value]:
        """What a call of a function returns (its generator object for a generator)."""
        function = callee.function
        if not isinstance(callee.node, cst.FunctionDef) or function is None:
            return [Value(caller or self.model, call, ())]
        if self.is_generator(function):
            return [Value(caller or self.model, call, ())]
        returns = self.own_returns(function)
        if not returns:
            return [Value(self.model, None, ())]
        inner_context = ((function, call, caller or self.model, callee.bound), *context) if call is not None else context
        values: list[Value] = []
        for statement in returns:
            if call is not None and self._dead_in_call(statement, inner_context):
                continue  # this call's arguments decide the `if` around it against it
            values.extend(self.values_at(statement.value, statement, self._passed_early_exits(statement), inner_context, depth))
        return values or [Value(self.model, None, ())]

    def _passed_early_exits(self, statement: cst.CSTNode) -> Path:
        """The tests that failed for `statement` to run after an earlier `if <test>: return ...`
        (no `else`) of its function: `if self.kind == "light": return Light()` ... `return
        DataParallel(heavy)` returns the wrapper only where `self.kind == "light"` failed."""
        return tuple(self.condition(exit_.test).negated() for exit_ in _earlier_exits(self.model, statement)
                     if _static(self.model, exit_.test) is None)

    def _parameter_values(self, binding: "Binding", path: Path, context: tuple, depth: int) -> list[Value]:
        param = binding.node
        function = self.model.parent(self.model.parent(param))
        if not isinstance(function, cst.FunctionDef):
            return [Value(self.model, None, path)]
        for frame_function, call, caller, bound in context:
            if frame_function is function:
                rest = context[1:]
                argument = caller.flow.parameter_argument(call, function, param.name.value, bound)
                if argument is None:
                    return [Value(self.model, None, path)]
                argument_model = self.model if argument is param.default else caller
                return argument_model.flow.values_at(argument, call if argument_model is caller else param, path, rest, depth - 1)
        # Callers in other files are looked up only for a function this file never calls: a
        # parameter question is asked for every rule, and the lookup may parse other files.
        own = self.call_sites(function)
        sites = [(self.model, call, bound) for call, bound in own] if own else self.all_call_sites(function)
        if sites and len(sites) > 1:
            return self._values_of_alike_callers(param, function, sites, path, depth, same_file=bool(own))
        if not sites or len(sites) != 1:
            return [Value(self.model, None, path)]  # no caller, or callers that may differ: say nothing
        (caller, call, bound) = sites[0]
        argument = self.parameter_argument(call, function, param.name.value, bound)
        if argument is None:
            return [Value(self.model, None, path)]
        if argument is param.default or caller is self.model:
            where = param if argument is param.default else call
            return self.values_at(argument, where, path, context, depth - 1)
        # The only caller is in another file: its values, with its own conditions.
        return [
            Value(v.model, v.expr, _join(path, v.conditions if v.model is self.model else _portable(v.conditions)), v.binding)
            for v in caller.flow.values_at(argument, call, (), (), depth - 1)
        ]

    def _values_of_alike_callers(self, param: cst.Param, function: cst.FunctionDef, sites: list, path: Path,
                                 depth: int, same_file: bool = False) -> list[Value]:
        """Several callers (`evaluate(loader, model)` after each epoch and once for `--eval`;
        `Passer(net)` in each of a project's scripts): when every one hands in a wrapper of the
        same kinds on some path (or none of them does), the parameter holds their values, each
        with its caller's conditions (those of another file as far as they carry over). Callers
        that differ (one passes a wrapper, another only the bare model or an EMA copy) leave it
        unknown: which one runs is the user's choice of script, or of call. Calls of this file
        count only when every value they hand in is alike (all the same wrapper, or none a
        wrapper), and then without the callers' conditions: those are in the callers' own terms
        (`if args.distributed:` of the constructor's `args`), which the callee's tests (`if
        args.distributed:` of its parameter) cannot be matched with."""
        per_caller = self._passed_per_call(param, function, sites, depth - 1)
        if per_caller is None:
            return [Value(self.model, None, path)]
        kinds = {frozenset(w.kind for v in passed if v.known and (w := wrapping_built_by(v.model, v.expr)) is not None)
                 for passed in per_caller}
        if len(kinds) > 1:
            return [Value(self.model, None, path)]
        if same_file:
            values = [v for passed in per_caller for v in passed]
            if not all(v.known for v in values) or len({wrapping_built_by(v.model, v.expr) is not None for v in values}) > 1:
                return [Value(self.model, None, path)]
            return [Value(v.model, v.expr, path, v.binding) for v in values]
        return [Value(v.model, v.expr, _join(path, v.conditions if v.model is self.model else _portable(v.conditions)),
                      v.binding)
                for passed in per_caller for v in passed]

    def values_per_caller(self, param: "Binding") -> Optional[list[list[Value]]]:
        """For a parameter's binding: what each call of its function passes (the argument's
        values, or its default's), one list per call site in source order; None when the
        function escapes, has no caller, or a call's star-args hide the argument. Rules that
        need every caller to agree (all wrappers, all inner models) judge the lists."""
        node = param.node
        function = self.model.parent(self.model.parent(node)) if isinstance(node, cst.Param) else None
        if not isinstance(function, cst.FunctionDef):
            return None
        sites = self.all_call_sites(function)
        return self._passed_per_call(node, function, sites, _MAX_DEPTH) if sites else None

    def _passed_per_call(self, param: cst.Param, function: cst.FunctionDef, sites: list,
                         depth: int) -> Optional[list[list[Value]]]:
        """What each of `sites` passes for `param` (its default's values where a call leaves
        it), each with the conditions of its own file; None when a call's star-args hide it."""
        per_caller = []
        for caller, call, bound in sites:
            argument = self.parameter_argument(call, function, param.name.value, bound)
            if argument is None:
                return None
            if argument is param.default:  # `init_dist("pytorch")` leaves `backend="nccl"`
                per_caller.append(self.values_at(argument, param, (), (), depth))
            else:
                per_caller.append(caller.flow.values_at(argument, call, (), (), depth))
        return per_caller

    def _unpacked_values(self, binding: "Binding", path: Path, context: tuple, depth: int) -> list[Value]:
        """`train_dl, val_dl = make_loaders(...)`: the element of each returned tuple."""
        node = binding.node
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        index = _element_index(self.model, targets, binding.key)
        if index is None or not isinstance(node.value, cst.Call) and self._entries_changed(node.value, node):
            return [Value(self.model, None, path)]
        values = []
        for value in self.values_at(node.value, node, path, context, depth - 1):
            expr = value.expr
            if isinstance(expr, (cst.Tuple, cst.List)) and len(expr.elements) > index and not any(
                isinstance(e, cst.StarredElement) for e in expr.elements
            ):
                values.extend(value.model.flow.values_at(expr.elements[index].value, expr, value.conditions, (), depth - 1))
            else:
                values.append(Value(self.model, None, path))
        return values

    def _imported_values(self, key: str, path: Path, depth: int) -> list[Value]:
        resolved = self.resolve_import(key)
        if resolved is None:
            return [Value(self.model, None, path)]
        other, node = resolved
        if isinstance(node, (cst.Assign, cst.AnnAssign)):
            return other.flow.values_at(node.value, node, (), (), depth - 1)
        return [Value(other, None, path)]

    def resolve_import(self, name: str) -> Optional[tuple["SemanticModel", cst.CSTNode]]:
        """The other file's model and top-level node an imported name denotes (needs a
        project), imported by name or by a star import of a project module."""
        project = self.model.project
        if project is None:
            return None
        qualified = self.model.imports.get(name) or self._star_imported_name(name)
        if qualified is None:
            return None
        try:
            return project.resolve(qualified, self.model)
        except Exception:  # a project that cannot answer is the same as no project
            return None

    def _star_imported_name(self, name: str) -> Optional[str]:
        """`tools.keep` for a `keep` that this file binds nowhere, after `from tools import *`
        of a project module that exports it (`Project.star_imported`)."""
        project = self.model.project
        if project is None or not (self.model.star_imports or self.model.relative_star_imports):
            return None
        try:
            return project.star_imported(name, self.model)
        except Exception:  # a project that cannot answer is the same as no project
            return None

    def _star_imported_callee(self, name: str) -> Optional[Callee]:
        """The project function or class that a call of a star-imported name runs."""
        if self._star_imported_name(name) is None:
            return None
        resolved = self.resolve_import(name)
        if resolved is not None and isinstance(resolved[1], (cst.FunctionDef, cst.ClassDef)):
            return Callee(resolved[0], resolved[1], isinstance(resolved[1], cst.ClassDef))
        return None

    # ------------------------------------------------------------------- truthiness
    def truth(self, expr: Optional[cst.BaseExpression], at: Optional[cst.CSTNode] = None, path: Path = ()) -> Optional[bool]:
        """Whether `expr` is truthy on `path` (None: unknown)."""
        from dplint.semantic import literal_value

        if expr is None:
            return None
        at = expr if at is None else at
        condition = self.condition(expr)
        for known in path:
            if (known.test, known.scope) == (condition.test, condition.scope):
                return known.holds == condition.holds
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            inner = self.truth(expr.expression, at, path)
            return None if inner is None else not inner
        if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
            target = expr.comparisons[0]
            if isinstance(target.operator, (cst.Is, cst.IsNot)) and _is_none(target.comparator):
                answers = set()
                for value in self.values_at(expr.left, at):
                    if not consistent(value.conditions, path):
                        continue
                    answers.add(_none_ness(value.expr))
                if len(answers) != 1 or None in answers:
                    return None
                (is_none,) = answers
                return is_none if isinstance(target.operator, cst.Is) else not is_none
            return None
        if isinstance(expr, cst.BooleanOperation):
            left, right = self.truth(expr.left, at, path), self.truth(expr.right, at, path)
            if isinstance(expr.operator, cst.And):
                return False if False in (left, right) else (True if left is right is True else None)
            return True if True in (left, right) else (False if left is right is False else None)
        answers = set()
        for value in self.values_at(expr, at):
            if not consistent(value.conditions, path):
                continue
            if value.expr is None or value.model is not self.model and not isinstance(value.expr, cst.Name):
                return None
            if value.expr is expr:
                try:
                    answers.add(bool(literal_value(value.expr)))
                except ValueError:
                    return None
                continue
            # The value's own truth, on this path (another file's conditions are its own).
            on_path = _join(path, value.conditions) if value.model is self.model else value.conditions
            answers.add(value.model.flow.truth(value.expr, value.expr, on_path))
        if len(answers) != 1:
            return None
        return answers.pop()

    # --------------------------------------------------------------------- wrappers
    def wrappings_at(self, expr, at=None, _copies: int = 3) -> list[tuple[Optional["Wrapping"], Path]]:
        found = []
        for value in self.values_at(expr, at):
            original = (copied_object(value.model, value.expr) or compiled_module(value.model, value.expr)
                        if value.known and _copies else None)
            if original is not None:
                # A copy is an object of the copied one's class: `deepcopy(ddp_model)` is a DDP.
                # `torch.compile(ddp_model)` holds it and hands it every attribute read.
                for wrapping, path in value.model.flow.wrappings_at(original, value.expr, _copies - 1):
                    found.append((wrapping, _join(value.conditions, path if value.model is self.model else _portable(path))))
                continue
            # What a wrapper is has one answer (`dplint.wrapper_classes`): torch's, a package's,
            # a project subclass of one, in this file or another.
            wrapping = wrapping_built_by(value.model, value.expr) if value.known else None
            found.append((wrapping, value.conditions))
        return found

    def wrapped_on_some_path(self, expr, at=None) -> Optional["Wrapping"]:
        return next((w for w, _ in self.wrappings_at(expr, at) if w is not None), None)

    def wrapped_on_every_path(self, expr, at=None) -> bool:
        found = self.wrappings_at(expr, at)
        return bool(found) and all(w is not None for w, _ in found)


def _literal_key(subscript: cst.Subscript):
    """The key of `x["G"]` or `x[0]`: a string or a non-negative int; None otherwise."""
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    key = subscript.slice[0].slice.value
    if isinstance(key, cst.SimpleString):
        return key.evaluated_value
    if isinstance(key, cst.Integer):
        return int(key.value, 0) if key.value.isdigit() or key.value.lower().startswith(("0x", "0o", "0b")) else None
    return None


def _display_entry(display, key) -> Optional[cst.BaseExpression]:
    """The value a dict display gives `key` (none with a `**` splat), or a list or tuple
    display's element at index `key` (none with a `*` element)."""
    if isinstance(display, cst.Dict) and isinstance(key, str):
        found = None
        for element in display.elements:
            if not isinstance(element, cst.DictElement):
                return None  # `{**base, ...}`: the entry may come from the splat
            if isinstance(element.key, cst.SimpleString) and element.key.evaluated_value == key:
                found = element.value  # the last one spelled wins, as in Python
        return found
    if isinstance(display, (cst.List, cst.Tuple)) and isinstance(key, int):
        if any(isinstance(element, cst.StarredElement) for element in display.elements):
            return None
        return display.elements[key].value if key < len(display.elements) else None
    return None


def copied_object(model: "SemanticModel", expr) -> Optional[cst.BaseExpression]:
    """`x` of `copy.deepcopy(x)` / `copy.copy(x)`: a new object of `x`'s class (None otherwise)."""
    return _first_argument_to(model, expr, ("copy.deepcopy", "copy.copy"))


def compiled_module(model: "SemanticModel", expr) -> Optional[cst.BaseExpression]:
    """`m` of `torch.compile(m, ...)`: the OptimizedModule it returns keeps `m` as `_orig_mod`
    and forwards attribute reads to it (`compiled.module` is the DDP's inner model), so what
    `m` is as a wrapper, the result is too. None otherwise."""
    return _first_argument_to(model, expr, ("torch.compile",))


def _first_argument_to(model: "SemanticModel", expr, functions: tuple[str, ...]) -> Optional[cst.BaseExpression]:
    """The first positional argument of a call of one of `functions`; None otherwise."""
    if not isinstance(expr, cst.Call) or not expr.args or expr.args[0].keyword is not None or expr.args[0].star:
        return None
    return expr.args[0].value if model.qualified_name(expr.func) in functions else None


def _earlier_exits(model: "SemanticModel", node: cst.CSTNode, until: Optional[cst.CSTNode] = None) -> Iterator[cst.If]:
    """Each `if <test>: return ...` (or `raise`, no `else`) that runs before `node` in the
    blocks around it, up to `until` (by default its own def, lambda or class)."""
    child = node
    for ancestor in model.ancestors(node):
        if ancestor is until or until is None and isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            return
        if isinstance(ancestor, (cst.IndentedBlock, cst.Module)):
            for earlier in ancestor.body:
                if earlier is child:
                    break
                if isinstance(earlier, cst.If) and earlier.orelse is None and _ends_in_exit(earlier.body, model):
                    yield earlier
        child = ancestor


def _ends_in_exit(body: cst.BaseSuite, model: "SemanticModel") -> bool:
    """Whether a block's last statement is a `return`, or one that ends the path (`ends_path`)."""
    last = body.body[-1] if isinstance(body, cst.IndentedBlock) and body.body else None
    if isinstance(body, cst.SimpleStatementSuite):
        last = body
    if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and last.body:
        return type(last.body[-1]) is cst.Return or ends_path(model, last.body[-1])
    return False


def _default_display(model: "SemanticModel", expr: cst.BaseExpression) -> bool:
    """A list or tuple display that is a parameter's default or the default of a
    `mapping.get(key, default)` call: a fresh object no code of the file filled (a display
    bound to a name may be appended to: `ids = []; ids.append(0)`)."""
    parent = model.parent(expr)
    if isinstance(parent, cst.Param):
        return parent.default is expr
    call = model.parent(parent) if isinstance(parent, cst.Arg) else None
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "get" \
        and len(call.args) == 2 and call.args[1] is parent


def _is_none(expr) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "None"


def _none_ness(expr) -> Optional[bool]:
    """True for the literal None, False for a value that is never None, None when unknown."""
    if expr is None:
        return None
    if _is_none(expr):
        return True
    if isinstance(expr, (cst.Call, cst.List, cst.Dict, cst.Tuple, cst.Lambda, cst.Integer, cst.Float,
                         cst.SimpleString, cst.ConcatenatedString)):
        return False
    if isinstance(expr, cst.Name) and expr.value in ("True", "False"):
        return False
    return None


def _element_index(model: "SemanticModel", targets, key: str) -> Optional[int]:
    if len(targets) != 1 or not isinstance(targets[0], (cst.Tuple, cst.List)):
        return None
    elements = targets[0].elements
    if any(isinstance(e, cst.StarredElement) for e in elements):
        return None
    for index, element in enumerate(elements):
        if model.binding_key(element.value, element.value) == key:
            return index
    return None
