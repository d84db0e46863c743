"""Reaching definitions: which bindings of ``x`` / ``self.x`` can reach a node, each with
the branch conditions it is live under (``Flow.reaching``, ``Flow.branch_conditions``).

One walk of the owning scope per (scope, name), memoised: statements in order, branches
merged, loops twice, ``try`` handlers after any part of the body, code after ``return`` /
``raise`` / a process exit unreached. ``self.x`` read in a method starts from what the
class's other methods leave (``_left_by_others``), what a base class's constructor left
(taken up at ``super().__init__(...)``), and what a ``self.m()`` call's method leaves
(``method_summary``, its exit state).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

import libcst as cst

from dplint.flow_common import (
    _PASSED,
    _blocks,
    _enclosing_function,
    _inside,
    _instance_parameter,
    _owns,
    _static,
    class_method,
    ends_path,
)
from dplint.flow_paths import Path, _join

if TYPE_CHECKING:  # pragma: no cover
    from dplint.semantic import Binding, Scope, SemanticModel


_EXIT = object()  # records key: the state when a walked body falls off its end

_MAX_PATHS = 6  # paths kept per binding; beyond it only the conditions they all share


class ReachingMixin:
    """Reaching definitions and the walks behind them (part of ``dplint.flow.Flow``)."""

    # ------------------------------------------------------------- reaching definitions
    def reaching(self, key: str, at: cst.CSTNode) -> list[tuple["Binding", Path]]:
        return [entry for entry in self._reaching(key, at) if id(entry[0]) not in self._inherited_of]

    def _reaching(self, key: str, at: cst.CSTNode) -> list[tuple["Binding", Path]]:
        model = self.model
        use_scope = model.scope(at)
        owner = model.owner_scope(key, use_scope)
        if owner is None:
            return []
        if key.startswith("self."):
            return self._reaching_attribute(key, at, owner, use_scope)
        if owner.kind == "module" and use_scope is not owner and use_scope.kind == "function":
            # A function's body runs when it is called, after the module body defined what it
            # reads (`def main(): train()` above `def train(): ...`): the module's final bindings.
            records = self._records.get((owner, key, owner.node))
            if records is None:
                self._reaching_in(owner, key, owner.node, owner.node, initial=None)
                records = self._records.get((owner, key, owner.node), {})
            final = records.get(_EXIT)
            if final:
                return list(final)
        return self._reaching_in(owner, key, at, owner.node, initial=None)

    def _reaching_in(self, owner: "Scope", key: str, at: cst.CSTNode, body_owner: cst.CSTNode,
                     initial: Optional[list], tag: str = "") -> list:
        record_key = (owner, key, body_owner, tag) if tag else (owner, key, body_owner)
        records = self._records.get(record_key)
        if records is None:
            records = self._records[record_key] = {}
            self._walk_scope(owner, key, body_owner, records, initial)
        for node in (at, *self.model.ancestors(at)):
            state = records.get(node)
            if state is not None:
                return list(state)
            if node is body_owner:
                break
        live = self.model.binding_at(key, at)  # not reached by the walk: source order decides
        return [(live, ())] if live is not None else []

    def _reaching_attribute(self, key: str, at: cst.CSTNode, owner: "Scope", use_scope: "Scope") -> list:
        method = use_scope.node if use_scope.class_scope is owner else None
        if method is None:
            inherited = self._inherited_binding(owner, key)
            return [(b, ()) for b in self.model.bindings.get(key, ()) if b.scope is owner] + (
                [(inherited, ())] if inherited is not None else [])
        before = self._constructor_only_callee(owner, key, method)
        if before is not None:  # a walk of its own: the method's usual walk starts elsewhere
            return self._reaching_in(owner, key, at, method, before, tag="constructor calls")
        return self._reaching_in(owner, key, at, method, self._left_by_others(owner, key, method))

    def _constructor_only_callee(self, owner: "Scope", key: str, method: cst.CSTNode) -> Optional[list]:
        """For a method called only by its class's `__init__` (`self.load(path)` before
        `self.model = DataParallel(self.model)`) that does not bind `self.key` itself: what
        reaches its calls there; None for any other method (what other methods leave)."""
        if not isinstance(method, cst.FunctionDef) or method.name.value.startswith("__") \
                or not isinstance(owner.node, cst.ClassDef):
            return None
        constructor = class_method(owner.node, "__init__")
        if constructor is None or any(
                b.scope is owner and _inside(self.model, b.node, method) for b in self.model.bindings.get(key, ())):
            return None
        sites = self.call_sites(method)
        if not sites or any(_enclosing_function(self.model, call) is not constructor for call, _ in sites):
            return None
        guard = (id(method), key)
        if guard in self._before_constructor_calls:
            return None
        self._before_constructor_calls.add(guard)
        try:
            found: list = []
            for call, _ in sites:
                # Nothing of the constructor's own before the call (its walk may have started
                # empty, for what it leaves): what the other methods leave (`self.build()`).
                entries = self._reaching_attribute(key, call, owner, self.model.scope(call)) \
                    or self._left_by_others(owner, key, constructor)
                found.extend(e for e in entries if e not in found)
            return found
        finally:
            self._before_constructor_calls.discard(guard)

    def _left_by_others(self, owner: "Scope", key: str, method: Optional[cst.CSTNode],
                        derived: Optional[tuple] = None) -> list:
        """`_attribute_left`, and what the base classes left (`super().__init__(model)` wrapped
        it): live in every method, unless the class's own constructor replaces it or `method`
        itself calls the base's method (then the walk takes it up at that call). `derived`:
        the (model, ClassDef) of the most-derived class whose instance is followed, for the
        methods that `self.m()` runs."""
        initial = self._attribute_left(owner, key, method, derived)
        for entry in self._state_at_own_calls(owner, key, method):
            if entry not in initial:
                initial.append(entry)
        inherited = self._inherited_binding(owner, key)
        if inherited is not None and not any(b is inherited for b, _ in initial) \
                and not self._base_calls(owner, key, method) and not self._constructor_replaces(owner, key, method):
            initial.extend(e for e in self._inherited_left(owner, key, method, inherited, derived) if e not in initial)
        initial.extend((binding, ()) for binding in self.stored_from_outside(owner, key))
        return initial

    def _inherited_left(self, owner: "Scope", key: str, method: Optional[cst.CSTNode], inherited: "Binding",
                        derived: Optional[tuple]) -> list:
        """What the base classes left in `self.key`, with the paths on which the class's own
        constructor keeps it: `super().__init__(...)` then `self.setup()`, whose `if rank is not
        None: self.task = DDP(self.task)` keeps the base's value only where the test failed.
        Any path when the constructor does not call the base's (or is `method` itself)."""
        constructor = class_method(owner.node, "__init__") if isinstance(owner.node, cst.ClassDef) else None
        if constructor is None or constructor is method or not self._base_calls(owner, key, constructor):
            return [(inherited, ())]
        left = self._exit_state(owner, key, constructor, derived)
        kept = [entry for entry in left or () if entry[0] is inherited]
        return kept or [(inherited, ())]

    def _state_at_own_calls(self, owner: "Scope", key: str, method: Optional[cst.CSTNode]) -> list:
        """What `self.key` holds where another method of the class calls `method` on the
        instance (`self.to_gpu()` in `__init__`): what `method` finds on entry there, which
        `_attribute_left` leaves out (it drops what `method` itself binds)."""
        if not isinstance(method, cst.FunctionDef) or not isinstance(owner.node, cst.ClassDef) \
                or (id(method), key) in self._before_constructor_calls:
            return []
        found: list = []
        self._before_constructor_calls.add((id(method), key))
        try:
            for call, _ in self.call_sites(method) or ():
                caller = _enclosing_function(self.model, call)
                if caller is None or caller is method or self.model.scope(caller.body).class_scope is not owner:
                    continue
                for entry in self._reaching_attribute(key, call, owner, self.model.scope(call)):
                    if entry not in found:
                        found.append(entry)
        finally:
            self._before_constructor_calls.discard((id(method), key))
        return found

    def _attribute_left(self, owner: "Scope", key: str, method: Optional[cst.CSTNode],
                        derived: Optional[tuple] = None) -> list:
        """What the class's methods other than `method` leave in `self.key`: what is live when
        each ends, with the branch conditions it took (`self.net = build(); if ddp: self.net =
        DDP(self.net)`), constructor first."""
        bindings = [b for b in self.model.bindings.get(key, ()) if b.scope is owner]
        elsewhere = [b for b in bindings if method is None or not _inside(self.model, b.node, method)]
        elsewhere.sort(key=lambda b: _method_rank(self.model, b.node))
        initial: list = []
        for other in dict.fromkeys(_enclosing_function(self.model, b.node) for b in elsewhere):
            if other is None:
                continue
            if derived is not None and derived[1] is not owner.node and other.name.value != "__init__" and \
                    (_method_on_instance(derived, other.name.value) or (None, None, other))[2] is not other:
                continue  # overridden by the instance's class: this one never runs on it
            left = self._exit_state(owner, key, other, derived)
            if left is None:  # it always returns: what is live at its returns (`return self`)
                left = self._returned_state(owner, key, other, derived) or [
                    (b, self.branch_conditions(b.node)) for b in elsewhere if _enclosing_function(self.model, b.node) is other]
            # not what `method` itself binds (through a call of it there): what it finds on entry
            initial.extend(entry for entry in left if entry not in initial and not (
                method is not None and entry[0] is not _PASSED and entry[0].node is not None
                and _owns(self.model, entry[0]) and _inside(self.model, entry[0].node, method)))
        return initial

    def branch_conditions(self, node: cst.CSTNode) -> Path:
        """The `if` tests around a node inside its own function (outermost first)."""
        found = []
        child = node
        for ancestor in self.model.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                break
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                found.append(self.condition(ancestor.test, holds=child is ancestor.body))
            child = ancestor
        return tuple(reversed(found))

    def _walk_scope(self, owner: "Scope", key: str, body_owner: cst.CSTNode, records: dict,
                    initial: Optional[list], derived: Optional[tuple] = None) -> None:
        # A walk may ask questions that start another walk (a branch test's condition looks
        # up the callers of its function): the state of this one is restored afterwards.
        saved = getattr(self, "_index", None), getattr(self, "_records_now", None), self._derived_now
        self._derived_now = derived
        try:
            self._walk_scope_now(owner, key, body_owner, records, initial)
        finally:
            self._index, self._records_now, self._derived_now = saved

    def _walk_scope_now(self, owner: "Scope", key: str, body_owner: cst.CSTNode, records: dict,
                        initial: Optional[list]) -> None:
        bindings = [b for b in self.model.bindings.get(key, ()) if b.scope is owner]
        if body_owner is not owner.node:
            bindings = [b for b in bindings if _inside(self.model, b.node, body_owner)]
        index = {}
        state = list(initial or ())
        for binding in bindings:
            if isinstance(binding.node, cst.Param):
                state = [(binding, ())]
                continue
            index.setdefault(self._anchor(binding.node), []).append(binding)
        inherited = self._inherited_binding(owner, key) if key.startswith("self.") else None
        if inherited is not None:
            # `super().__init__(model)`: from here on, what the base class left (a binding in
            # the same statement, `self.net = super().build()`, comes after it)
            for call, *_ in self._base_calls(owner, key, body_owner):
                index.setdefault(self._anchor(call), []).insert(0, inherited)
        if key.startswith("self.") and isinstance(body_owner, cst.FunctionDef) and isinstance(owner.node, cst.ClassDef):
            # `self.cuda()` whose method (the most-derived class's) binds `self.key`: from
            # there on, what that method leaves (a binding in the same statement comes after)
            for call, effect in self._self_method_calls(owner, key, body_owner):
                index.setdefault(self._anchor(call), []).insert(0, effect)
        self._index = index
        self._records_now = records
        node = body_owner
        if isinstance(node, cst.Module):
            records[_EXIT] = self._walk_block(node.body, state, ())
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            records[_EXIT] = self._walk_block(_blocks(node.body), state, ())

    def _exit_state(self, owner: "Scope", key: str, method: cst.FunctionDef,
                    derived: Optional[tuple] = None) -> Optional[list]:
        """The bindings of `key` live when `method` falls off its end (None: it never does)."""
        record_key = self._exit_key(owner, key, method, derived)
        records = self._records.get(record_key)
        if records is None:
            records = self._records[record_key] = {}
            self._walk_scope(owner, key, method, records, None, derived)
        return records.get(_EXIT)

    @staticmethod
    def _exit_key(owner: "Scope", key: str, method: cst.FunctionDef, derived: Optional[tuple]) -> tuple:
        """The records key of a method's walk for what it leaves: started empty (its own
        bindings only), apart from the walks that answer reads inside it (started with what
        the other methods leave), so neither answers for the other whichever runs first."""
        if derived is None or derived[1] is owner.node:
            return owner, key, method, ("exit",)
        return owner, key, method, ("exit", id(derived[1]))

    def _returned_state(self, owner: "Scope", key: str, method: cst.FunctionDef, derived: Optional[tuple]) -> list:
        """The bindings of `key` live at the `return` statements of `method` (its exit walk's)."""
        records = self._records.get(self._exit_key(owner, key, method, derived)) or {}
        left: list = []
        for statement in self.own_returns(method):
            state = records.get(statement) or records.get(self.model.statement_of(statement)) or ()
            left.extend(entry for entry in state if entry not in left)
        return left

    def _anchor(self, node: cst.CSTNode) -> cst.CSTNode:
        if isinstance(node, (cst.For, cst.With, cst.ExceptHandler, cst.FunctionDef, cst.ClassDef)):
            return node
        statement = self.model.statement_of(node)
        if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) and len(statement.body) > 1:
            # `a = f(); b = g(a)` on one line: each small statement binds in turn.
            for small in statement.body:
                if small is node or _inside(self.model, node, small):
                    return small
        return statement

    def _walk_block(self, statements: Sequence[cst.CSTNode], state: Optional[list], ctx: Path) -> Optional[list]:
        for statement in statements:
            if state is None:
                return None  # unreachable: after return / raise
            state = self._walk_statement(statement, state, ctx)
        return state

    def _bind_here(self, node: cst.CSTNode, state: list, ctx: Path) -> list:
        found = self._index.get(node)
        if not found:
            return state
        if isinstance(found[-1], _MethodCall):
            return found[-1].apply(state, ctx)
        return [(found[-1], ctx)]

    # -------------------------------------------------- methods called on the instance
    def _self_method_calls(self, owner: "Scope", key: str, function: cst.FunctionDef) -> list:
        """(call, _MethodCall) for each `self.m(...)` of `function` whose method binds
        `self.key`, `m` looked up as Python does on the instance being analysed: the
        most-derived class (`_derived_now`, else `owner`'s class) first, then its project
        bases (a base `__init__` calling `self.cuda()` runs the subclass's `cuda`)."""
        self_name = _instance_parameter(self.model, self.model.scope(function.body))
        if self_name is None:
            return []
        derived = self._derived_now or (self.model, owner.node)
        found = []
        for call in self._own_calls(function):
            func = call.func
            if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == self_name):
                continue
            resolved = _method_on_instance(derived, func.attr.value)
            if resolved is None:
                continue
            method_model, class_node, method = resolved
            class_scope = next((b.scope for b in method_model.bindings.get(key, ())
                                if b.scope.node is class_node and _inside(method_model, b.node, method)), None)
            if class_scope is not None and method is not function:
                found.append((call, _MethodCall(method_model, class_scope, method, key, derived)))
        return found

    def method_summary(self, owner: "Scope", key: str, method: cst.FunctionDef, derived: tuple) -> Optional[list]:
        """What `self.key` holds when `method` (of this file's class `owner`) returns, on an
        instance of the most-derived class `derived`: (binding, path) entries, `_PASSED`
        standing for what the caller had in it; None while the method is being walked
        (a method that calls itself)."""
        record_key = (owner, key, method, ("summary", id(derived[1])))
        records = self._records.get(record_key)
        if records is None:
            if record_key in self._summaries_running:
                return None
            self._summaries_running.add(record_key)
            try:
                records = {}
                self._walk_scope(owner, key, method, records, [(_PASSED, ())], derived)
                self._records[record_key] = records
            finally:
                self._summaries_running.discard(record_key)
        left = list(records.get(_EXIT) or ())
        for statement in self.own_returns(method):
            state = records.get(statement) or records.get(self.model.statement_of(statement)) or ()
            left.extend(entry for entry in state if entry not in left)
        return left

    def _walk_statement(self, statement: cst.CSTNode, state: list, ctx: Path) -> Optional[list]:
        self._records_now[statement] = state
        model = self.model
        kind = type(statement)  # exact types: cheaper than `isinstance`
        if kind is cst.SimpleStatementLine or kind is cst.SimpleStatementSuite:
            state = self._bind_here(statement, state, ctx)
            for small in statement.body if len(statement.body) > 1 else ():
                self._records_now[small] = state
                state = self._bind_here(small, state, ctx)
            if any(type(small) is cst.Return or ends_path(model, small) for small in statement.body):
                return None
            return state
        if kind is cst.If:
            state = self._bind_here(statement, state, ctx)  # a walrus in the test
            return self._walk_if(statement, state, ctx)
        if kind is cst.For or kind is cst.While:
            before = state
            if kind is cst.For:
                entry = self._bind_here(statement, state, ctx)
            else:
                entry = state
                if _static(model, statement.test) is False:
                    return self._walk_else(statement.orelse, state, ctx)
            first = self._walk_block(_blocks(statement.body), entry, ctx)
            looped = _merge(entry, first) if first is not None else entry
            end = self._walk_block(_blocks(statement.body), looped, ctx)
            after = _merge(before, end) if end is not None else before
            if kind is cst.For and end is not None:
                after = _merge(after, end)
            return self._walk_else(statement.orelse, after, ctx)
        if kind is cst.Try or kind.__name__ == "TryStar":
            body = self._walk_block(_blocks(statement.body), state, ctx)
            handler_in = _merge(state, body) if body is not None else state
            ends = []
            for handler in statement.handlers:
                guard = self.handler_conditions(statement, handler)
                entry = self._bind_here(handler, _extend(handler_in, guard), _join(ctx, guard))
                self._records_now[handler] = entry
                ends.append(self._walk_block(_blocks(handler.body), entry, ctx))
            if statement.orelse is not None and body is not None:
                body = self._walk_block(_blocks(statement.orelse.body), body, ctx)
            after = _merge_all([body, *ends])
            if statement.finalbody is not None:
                final_in = after if after is not None else handler_in
                final = self._walk_block(_blocks(statement.finalbody.body), final_in, ctx)
                return None if after is None else final
            return after
        if kind is cst.With:
            state = self._bind_here(statement, state, ctx)
            return self._walk_block(_blocks(statement.body), state, ctx)
        if kind is cst.FunctionDef or kind is cst.ClassDef:
            return self._bind_here(statement, state, ctx)
        if kind is cst.Match:
            ends = [state]
            for case in statement.cases:
                self._records_now[case] = state
                ends.append(self._walk_block(_blocks(case.body), state, ctx))
            return _merge_all(ends)
        return state

    def _walk_else(self, orelse, state: Optional[list], ctx: Path) -> Optional[list]:
        if orelse is None or state is None:
            return state
        return self._walk_block(_blocks(orelse.body), state, ctx)

    def _walk_if(self, statement: cst.If, state: list, ctx: Path) -> Optional[list]:
        truth = _static(self.model, statement.test)
        if truth is True:
            return self._walk_block(_blocks(statement.body), state, ctx)
        if truth is False:
            return self._walk_orelse(statement.orelse, state, ctx)
        condition = self.condition(statement.test)
        positive, negative = (condition,), (condition.negated(),)
        body = self._walk_block(_blocks(statement.body), _extend(state, positive), _join(ctx, positive))
        rest = self._walk_orelse(statement.orelse, _extend(state, negative), _join(ctx, negative))
        return _merge_all([body, rest])

    def _walk_orelse(self, orelse, state: list, ctx: Path) -> Optional[list]:
        if orelse is None:
            return state
        if isinstance(orelse, cst.If):
            return self._walk_statement(orelse, state, ctx)
        return self._walk_block(_blocks(orelse.body), state, ctx)


@dataclass(eq=False)
class _MethodCall:
    """An index entry of a walk: `self.m(...)` here runs `method` (of `model`'s class scope
    `owner`), which binds `key`: its summary replaces the state."""
    model: "SemanticModel"
    owner: "Scope"
    method: cst.FunctionDef
    key: str
    derived: tuple

    def apply(self, state: list, ctx: Path) -> list:
        summary = self.model.flow.method_summary(self.owner, self.key, self.method, self.derived)
        if summary is None:
            return state
        out: list = []
        for binding, conditions in summary:
            entries = [(b, _join(c, conditions)) for b, c in state] if binding is _PASSED \
                else [(binding, _join(ctx, conditions))]
            out.extend(e for e in entries if e not in out)
        return out


def _method_on_instance(derived: tuple, name: str) -> Optional[tuple]:
    """(model, ClassDef, FunctionDef) of the method `name` that an instance of the class
    `derived` (model, ClassDef) runs: its own, else its nearest project base's."""
    model, class_node = derived
    method = class_method(class_node, name)
    if method is not None:
        return model, class_node, method
    for base_model, base_class in model.flow.project_bases(class_node):
        method = class_method(base_class, name)
        if method is not None:
            return base_model, base_class, method
    return None


def _extend(state: list, conditions: Path) -> list:
    return [(binding, _join(path, conditions)) for binding, path in state]


def _merge(first: list, second: list) -> list:
    out = list(first)
    for entry in second:
        if not any(b is entry[0] and p == entry[1] for b, p in out):
            out.append(entry)
    return _collapse(out)


def _merge_all(states: list) -> Optional[list]:
    live = [s for s in states if s is not None]
    if not live:
        return None
    out = live[0]
    for state in live[1:]:
        out = _merge(out, state)
    return out


def _collapse(state: list) -> list:
    """(b, c+x) and (b, c+not x) -> (b, c): the binding is live whichever way x went.

    Paths are merged per binding; a binding reached on more than `_MAX_PATHS` paths keeps only
    the conditions common to all of them (weaker, so still true), which bounds the cost on long
    chains of unrelated `if`s."""
    groups: dict[int, tuple] = {}
    for binding, path in state:
        group = groups.setdefault(id(binding), (binding, []))
        if path not in group[1]:
            group[1].append(path)
    out = []
    for binding, paths in groups.values():
        if len(paths) > _MAX_PATHS:
            shared = [c for c in paths[0] if all(c in other for other in paths[1:])]
            paths = [tuple(shared)]
        changed = True
        while changed and len(paths) > 1:
            changed = False
            for i, path in enumerate(paths):
                for j in range(i + 1, len(paths)):
                    other_path = paths[j]
                    if len(other_path) != len(path):
                        continue
                    differ = [k for k, (a, b) in enumerate(zip(path, other_path)) if a != b]
                    if len(differ) == 1 and path[differ[0]].negated() == other_path[differ[0]]:
                        merged = path[: differ[0]] + path[differ[0] + 1:]
                        paths = [q for k, q in enumerate(paths) if k not in (i, j)]
                        if merged not in paths:
                            paths.append(merged)
                        changed = True
                        break
                if changed:
                    break
        out.extend((binding, path) for path in paths)
    return out


def _method_rank(model: "SemanticModel", node: cst.CSTNode) -> tuple:
    for ancestor in model.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            return (0 if ancestor.name.value in ("__init__", "setup", "__post_init__") else 1, model.order(node))
    return (2, model.order(node))
