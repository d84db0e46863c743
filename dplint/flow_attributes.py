"""Attributes of the instance across classes: what a project base class's methods left
in ``self.x`` (``bases_binding``, ``project_bases``, the stand-in binding
``_inherited_binding``, ``_inherited_values``), which calls hand over to the base
(``super().__init__(...)``, ``Base.m(self, ...)``: ``_base_calls``), whether the class's own
constructor replaces it, a base method a subclass overrides, and a method's local or
parameter stored on the instance (``self.args = args``: ``_stored_on_instance``), and what an
attribute of a local object holds after its own scope stored it (``stored_attribute_values``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from dplint.flow_common import (
    _PASSED,
    Callee,
    Value,
    _enclosing_function,
    _inside,
    _instance_parameter,
    _is_static,
    _owns,
    class_method,
)
from dplint.flow_paths import Condition, Path, _join, _portable

if TYPE_CHECKING:  # pragma: no cover
    from dplint.semantic import Binding, Scope, SemanticModel


class AttributesMixin:
    """``self.x`` across a class and its project bases (part of ``dplint.flow.Flow``)."""

    # ------------------------------------------------------ attributes of base classes
    def _inherited_binding(self, owner: "Scope", key: str) -> Optional["Binding"]:
        """A stand-in Binding for "what a project base class's methods left in `self.key`", or
        None when no base class (of this file or imported, up to three levels) binds it."""
        if owner is None or owner.kind != "class" or not isinstance(owner.node, cst.ClassDef):
            return None
        cache_key = (id(owner.node), key)
        if cache_key not in self._inherited:
            self._inherited[cache_key] = None  # a class hierarchy that loops answers "none"
            if self.bases_binding(owner.node, key):
                from dplint.semantic import Binding

                stand_in = Binding(key, None, owner.node, owner, -1)
                self._inherited_of[id(stand_in)] = owner
                self._inherited[cache_key] = stand_in
        return self._inherited[cache_key]

    def bases_binding(self, class_node: cst.ClassDef, key: str, depth: int = 3) -> list[tuple]:
        """(model, ClassDef, class Scope) of the nearest project base classes of `class_node`
        (a class of this file) whose methods bind `self.key` (`self.model = DDP(model)` in
        `BaseTrainer.__init__`), first bases first."""
        cache_key = (id(class_node), key)
        if cache_key in self._bases_binding:
            return self._bases_binding[cache_key]
        self._bases_binding[cache_key] = []
        found: list = []
        for base in class_node.bases:
            named = self._class_named(base.value)
            if named is None or named[1] is class_node:
                continue
            base_model, base_class = named
            binding = next((b for b in base_model.bindings.get(key, ()) if b.scope.node is base_class), None)
            if binding is not None:
                found.append((base_model, base_class, binding.scope))
            elif depth > 1:
                found.extend(base_model.flow.bases_binding(base_class, key, depth - 1))
        self._bases_binding[cache_key] = found
        return found

    def project_bases(self, class_node: cst.ClassDef, depth: int = 3) -> list[tuple]:
        """(model, ClassDef) of every project base class of `class_node` (a class of this
        file), of this file or imported, nearest first, up to `depth` levels."""
        found: list = []
        for base in class_node.bases:
            named = self._class_named(base.value)
            if named is None or named[1] is class_node or any(named[1] is c for _, c in found):
                continue
            found.append(named)
            if depth > 1:
                found.extend(b for b in named[0].flow.project_bases(named[1], depth - 1) if not any(b[1] is c for _, c in found))
        return found

    def _base_calls(self, owner: "Scope", key: str, method: Optional[cst.CSTNode]) -> list[tuple]:
        """(call, base model, base method, bound) for each call in `method` of a base class's
        constructor or of a base method that binds `self.key` (`super().__init__(model, cfg)`,
        `Base.__init__(self, model)`): where the base's value of `self.key` takes over."""
        if not isinstance(method, cst.FunctionDef) or not isinstance(owner.node, cst.ClassDef):
            return []
        cache_key = (id(owner.node), key, id(method))
        if cache_key in self._base_call_cache:
            return self._base_call_cache[cache_key]
        scope = self.model.scope(method.body)
        self_name = _instance_parameter(self.model, scope) if scope.node is method else None
        base_names = {base.value.value for base in owner.node.bases if isinstance(base.value, cst.Name)}
        found = []
        for call in self._own_calls(method):
            func = call.func
            if not isinstance(func, cst.Attribute) or not (
                isinstance(func.value, cst.Call) and isinstance(func.value.func, cst.Name) and func.value.func.value == "super"
                or isinstance(func.value, cst.Name) and func.value.value in base_names
            ):
                continue  # cheap test first: only `super().m(...)` and `Base.m(self, ...)` qualify
            base = self._base_method(owner.node, call, self_name)
            if base is None:
                continue
            base_model, base_method, bound = base
            if base_method.name.value == "__init__" or any(
                _inside(base_model, b.node, base_method) for b in base_model.bindings.get(key, ())
            ):
                found.append((call, base_model, base_method, bound))
        self._base_call_cache[cache_key] = found
        return found

    def _own_calls(self, function: cst.FunctionDef) -> list[cst.Call]:
        """The calls a function's own body makes (its scope's, not nested functions')."""
        if self._calls_by_function is None:
            self._calls_by_function = {}
            for site in self.model.calls:
                self._calls_by_function.setdefault(site.scope.node, []).append(site.node)
        return self._calls_by_function.get(function, [])

    def _constructor_replaces(self, owner: "Scope", key: str, method: cst.CSTNode) -> bool:
        """Whether the class's own `__init__` (not `method`) surely replaces what its base
        classes left in `self.key`: a binding after its `super().__init__(...)`, or a binding
        of its body's top level when it never calls the base's constructor."""
        constructor = class_method(owner.node, "__init__") if isinstance(owner.node, cst.ClassDef) else None
        if constructor is None or constructor is method:
            return False
        inherited = self._inherited_binding(owner, key)
        if self._base_calls(owner, key, constructor):
            left = self._exit_state(owner, key, constructor)
            return left is not None and not any(b is inherited for b, _ in left)
        for binding in self.model.bindings.get(key, ()):
            if binding.scope is owner and _enclosing_function(self.model, binding.node) is constructor:
                statement = self.model.statement_of(binding.node)
                if self.model.parent(self.model.parent(statement)) is constructor:
                    return True
        return False

    def _inherited_values(self, owner: "Scope", key: str, path: Path, depth: int,
                          derived: Optional[tuple] = None) -> list[Value]:
        """What `self.key` may hold as the base classes of `owner` (a class of this file) left
        it: each base's own values, its constructor's parameters mapped to what this class's
        `super().__init__(...)` passes, and its branch tests on `self.x` read as this class's.
        The base's `self.m()` calls run the methods of `derived` (default: `owner`'s class), the
        class of the instance: a subclass's override of `cuda()` called by the base `__init__`."""
        derived = derived or (self.model, owner.node)
        values: list[Value] = []
        constructor = class_method(owner.node, "__init__")
        calls = self._base_calls(owner, key, constructor) if constructor is not None else []
        for base_model, base_class, base_scope in self.bases_binding(owner.node, key):
            flow = base_model.flow
            base_init = class_method(base_class, "__init__")
            to_base = [c for c in calls if c[2] is base_init and base_init is not None]
            context = ((base_init, to_base[0][0], self.model, to_base[0][3]),) if len(to_base) == 1 else ()
            for binding, conditions in flow._left_by_others(base_scope, key, None, derived):
                if binding is _PASSED:
                    continue
                override = self._overriding_method(owner, base_model, binding)
                if id(binding) in flow._inherited_of:
                    found = flow._inherited_values(base_scope, key, conditions, depth - 1, derived)
                elif not _owns(base_model, binding):
                    # bound by a method of the instance's own class (`derived`), which `self.m()`
                    # in the base ran: that class's values, the path read as that class's
                    other = derived[0] if _owns(derived[0], binding) else None
                    found = [Value(self.model, None, ())] if other is None else other.flow._binding_values(
                        key, binding, _as_subclass_conditions(conditions, base_class, derived[1]), (), depth - 1)
                elif override is not None:
                    live = _as_subclass_conditions(conditions, base_class, owner.node)
                    found = [Value(v.model, v.expr, _join(live, v.conditions), v.binding) for v in
                             self.returned_values(Callee(self.model, override, True), binding.value, base_model, (), depth - 1)]
                else:
                    found = flow._binding_values(key, binding, conditions, context, depth - 1)
                for value in found:
                    if value.model is base_model or value.model is self.model:
                        mapped = _as_subclass_conditions(value.conditions, base_class, owner.node) \
                            if value.model is base_model else value.conditions
                        values.append(Value(value.model, value.expr, _join(path, mapped), value.binding))
                    else:
                        values.append(Value(value.model, value.expr, _join(path, _portable(value.conditions)), value.binding))
        return values or [Value(self.model, None, path)]

    def _overriding_method(self, owner: "Scope", base_model: "SemanticModel", binding: "Binding") -> Optional[cst.FunctionDef]:
        """`self.model = self._build_model().to(device)` in a base class's method, where the
        subclass `owner` (of this file) defines `_build_model` itself: on its instances the
        subclass's method runs, so its returns are what the attribute holds."""
        from dplint.semantic import peel_self_returning

        value = peel_self_returning(binding.value)
        if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute) \
                or not isinstance(value.func.value, cst.Name) or not isinstance(owner.node, cst.ClassDef):
            return None
        method = _enclosing_function(base_model, binding.node)
        if method is None or _instance_parameter(base_model, base_model.scope(method.body)) != value.func.value.value:
            return None
        return class_method(owner.node, value.func.attr.value)

    def stored_from_outside(self, owner: "Scope", key: str) -> list["Binding"]:
        """Stores into `self.key` made by code outside the class, on an instance it built:
        `trainer = Trainer(...)` then `trainer.model = DDP(trainer.model)`, in this file or
        another file of the project that constructs the class. Each is a binding of the
        store's file (`_binding_model` reads it there): a value the attribute may hold in any
        method that runs after it. None known when the class's constructor calls can't all be
        seen (it escapes) or it has no `__init__` (its calls are not collected)."""
        if owner is None or owner.kind != "class" or not isinstance(owner.node, cst.ClassDef):
            return []
        cache_key = (id(owner.node), key)
        if cache_key not in self._outside_stores:
            self._outside_stores[cache_key] = []  # a store whose value leads back here: none
            self._outside_stores[cache_key] = self._find_outside_stores(owner.node, key[len("self."):])
        return self._outside_stores[cache_key]

    def _find_outside_stores(self, class_node: cst.ClassDef, attribute: str) -> list["Binding"]:
        from dplint.semantic import Binding

        found = []
        for model, name, instance in self._built_instances(class_node):
            for store in model.flow.attribute_stores(instance.scope, name, attribute):
                if model.binding_at(name, store) is instance:
                    found.append(Binding("self." + attribute, store.value, store, model.scope(store), model.order(store)))
        return found

    def read_from_outside(self, owner: "Scope", key: str) -> list[tuple["SemanticModel", cst.Attribute]]:
        """Reads of `self.key` made by code outside the class, on an instance it built:
        `data = Data(ds)` then `for x in data.loader:`, in this file or another file of the
        project that constructs the class (the reading file's model, the `data.loader` node)."""
        if owner is None or owner.kind != "class" or not isinstance(owner.node, cst.ClassDef):
            return []
        attribute = key[len("self."):]
        found = []
        for model, name, instance in self._built_instances(owner.node):
            for read in model.flow.attribute_reads(instance.scope, name, attribute):
                if model.binding_at(name, read) is instance:
                    found.append((model, read))
        return found

    def _built_instances(self, class_node: cst.ClassDef) -> list[tuple["SemanticModel", str, "Binding"]]:
        """(file's model, name, binding) for each `name = Class(...)` of the project; none
        known when the class has no `__init__` (its calls are not collected)."""
        constructor = class_method(class_node, "__init__")
        sites = self.all_call_sites(constructor) if constructor is not None else None
        found = []
        for model, call, _ in sites or ():
            statement = model.parent(call)
            if not (isinstance(statement, cst.Assign) and statement.value is call and len(statement.targets) == 1
                    and isinstance(statement.targets[0].target, cst.Name)):
                continue  # not `name = Class(...)`: the instance is not followed
            name = statement.targets[0].target.value
            instance = next((b for b in model.bindings_by_node.get(statement, ()) if b.key == name), None)
            if instance is not None:
                found.append((model, name, instance))
        return found

    def attribute_stores(self, scope: "Scope", name: str, attribute: str) -> list[cst.Assign]:
        """The statements `name.attribute = value` of this file in `scope` (one target)."""
        if self._attribute_stores is None:  # from the index of assignments, once per file
            self._attribute_stores = {}
            for node in self.model.nodes_of(cst.Assign):
                target = node.targets[0].target if len(node.targets) == 1 else None
                if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
                    where = (self.model.scope(node), target.value.value, target.attr.value)
                    self._attribute_stores.setdefault(where, []).append(node)
        return self._attribute_stores.get((scope, name, attribute), [])

    def attribute_reads(self, scope: "Scope", name: str, attribute: str) -> list[cst.Attribute]:
        """The reads `name.attribute` of this file in `scope` (not stores, not `name.attribute.x = v`'s head)."""
        if self._attribute_reads is None:  # from the index of attributes, once per file
            model = self.model
            stored = {id(t.target) for node in model.nodes_of(cst.Assign) for t in node.targets}
            stored.update(id(node.target) for node in model.nodes_of(cst.AugAssign, cst.AnnAssign))
            self._attribute_reads = {}
            for node in model.nodes_of(cst.Attribute):
                if isinstance(node.value, cst.Name) and id(node) not in stored:
                    where = (model.scope(node), node.value.value, node.attr.value)
                    self._attribute_reads.setdefault(where, []).append(node)
        return self._attribute_reads.get((scope, name, attribute), [])

    def stored_attribute_values(self, expr: cst.Attribute, at: cst.CSTNode, path: Path, context: tuple,
                                depth: int) -> Optional[list[Value]]:
        """What `name.attribute` holds where its own scope stored it before the read
        (`args.dist_backend = "nccl"` then `init_process_group(backend=args.dist_backend)`):
        the stored values on the paths a store reaches, the read as it stands on the others.
        Binding `name` again, or handing it to a call (which may set the attribute), ends what
        a store said. None when no store reaches the read (the read stands for itself)."""
        if not isinstance(expr.value, cst.Name):
            return None
        model = self.model
        scope = model.scope(at)
        name, attribute = expr.value.value, expr.attr.value
        if not self.attribute_stores(scope, name, attribute):
            return None
        key = f"@{id(scope)}:{name}.{attribute}"  # one per scope; no name or `self.x` key has this form
        if key not in model.bindings:
            model.bindings[key] = self._attribute_bindings(scope, name, attribute, key)
        entry = model.bindings[key][0]  # what the read stands for where no store reaches
        entries = self._reaching_in(scope, key, at, scope.node, [(entry, ())], tag="attribute stores")
        if all(binding.value is None for binding, _ in entries):
            return None
        values: list[Value] = []
        for binding, conditions in entries:
            joined = _join(path, conditions)
            if binding.value is None:
                values.append(Value(model, expr, joined))
            else:
                values.extend(self.values_at(binding.value, binding.node, joined, context, depth - 1))
        return values

    def _attribute_bindings(self, scope: "Scope", name: str, attribute: str, key: str) -> list["Binding"]:
        """Stand-in bindings of `key` for `stored_attribute_values`' walk: first the scope's
        entry, then in order the statements that end what a store said (a binding of
        `name`, a call given `name`) and the stores themselves, each a Binding whose value
        is the stored expression (None: the read stands for itself from there on)."""
        from dplint.semantic import Binding

        model = self.model
        order = model._order
        # the entry is no statement of the scope (no scope: the walk does not index it)
        found = [(-1, 0, Binding(key, None, scope.node, None, -1))]
        for binding in model.bindings.get(name, ()):
            if binding.scope is scope:
                found.append((binding.order, 0, Binding(key, None, binding.node, scope, binding.order)))
        for site in model.calls:
            if site.scope is scope and any(
                    isinstance(arg.value, cst.Name) and arg.value.value == name for arg in site.node.args):
                statement = model.statement_of(site.node)
                found.append((order.get(statement, 0), 0, Binding(key, None, statement, scope, order.get(statement, 0))))
        for store in self.attribute_stores(scope, name, attribute):
            found.append((order.get(store, 0), 1, Binding(key, store.value, store, scope, order.get(store, 0))))
        found.sort(key=lambda item: item[:2])
        return [binding for *_, binding in found]

    def _stored_on_instance(self, owner: "Scope", name: str) -> Optional[tuple]:
        """(class, attribute) when method `owner` stores its local `name` as `self.attribute`."""
        if owner.kind != "function" or owner.class_scope is None:
            return None
        if self._instance_aliases is None:
            self._instance_aliases = {}
            for key, bindings in self.model.bindings.items():
                if not key.startswith("self."):
                    continue
                for binding in bindings:
                    if isinstance(binding.value, cst.Name):
                        method = next((a for a in self.model.ancestors(binding.node) if isinstance(a, cst.FunctionDef)), None)
                        self._instance_aliases.setdefault((method, binding.value.value), (binding.scope.node, key[5:]))
        found = self._instance_aliases.get((owner.node, name))
        if found is None and isinstance(owner.node, cst.FunctionDef):
            key = (id(owner.node), name)
            if key not in self._base_stores:
                self._base_stores[key] = self._stored_by_base_method(owner, name)
            found = self._base_stores[key]
        return found

    def _stored_by_base_method(self, owner: "Scope", name: str) -> Optional[tuple]:
        """(class, attribute) when method `owner` hands its local `name` to a base class's method
        (`super().setup(use_gpu)`, `Base.setup(self, use_gpu=use_gpu)`) whose body stores that
        parameter as `self.attribute` outright: the subclass's `self.attribute` is then `name`."""
        class_node = owner.class_scope.node
        self_name = _instance_parameter(self.model, owner)
        for call in (site.node for site in self.model.calls_in(owner.node)):
            if not any(isinstance(arg.value, cst.Name) and arg.value.value == name for arg in call.args):
                continue
            found = self._base_method(class_node, call, self_name)
            if found is None:
                continue
            base_model, method, bound = found
            for param in (*method.params.posonly_params, *method.params.params, *method.params.kwonly_params):
                passed = self.parameter_argument(call, method, param.name.value, bound)
                if isinstance(passed, cst.Name) and passed.value == name:
                    attribute = _stores_parameter(method, param.name.value)
                    if attribute is not None:
                        return class_node, attribute
        return None

    def _base_method(self, class_node: cst.ClassDef, call: cst.Call, self_name: Optional[str]) -> Optional[tuple]:
        """(model, method, bound) of the base class method `call` runs: `super().m(...)`,
        `super(Cls, self).m(...)` (bound) or `Base.m(self, ...)` (self passed explicitly)."""
        func = call.func
        if not isinstance(func, cst.Attribute) or self_name is None:
            return None
        if isinstance(func.value, cst.Call) and isinstance(func.value.func, cst.Name) and func.value.func.value == "super":
            bases, bound = class_node.bases, True
        elif isinstance(func.value, cst.Name) and call.args and isinstance(call.args[0].value, cst.Name) \
                and call.args[0].value.value == self_name and call.args[0].keyword is None:
            bases = [base for base in class_node.bases if isinstance(base.value, cst.Name) and base.value.value == func.value.value]
            bound = False
        else:
            return None
        for base in bases:
            found = self._class_named(base.value)
            if found is not None:
                method = class_method(found[1], func.attr.value)
                if method is not None and not _is_static(method):
                    return found[0], method, bound
        return None

    def _class_named(self, expr: cst.BaseExpression, local: bool = False) -> Optional[tuple]:
        """(model, ClassDef) of a base class named in this file or (unless `local`) imported
        from the project."""
        if not isinstance(expr, cst.Name):
            return None
        if expr.value in self.model.classes:
            return self.model, self.model.classes[expr.value]
        if local:
            return None
        resolved = self.resolve_import(expr.value)
        if resolved is not None and isinstance(resolved[1], cst.ClassDef):
            return resolved
        return None


def _as_subclass_conditions(conditions: Path, base_class: cst.ClassDef, subclass: cst.ClassDef) -> Path:
    """A base class's tests on `self.x` (one test in all its methods) are the same tests in a
    subclass's methods: the same instance."""
    return tuple(Condition(c.test, c.holds, id(subclass)) if c.scope == id(base_class) else c for c in conditions)


def _stores_parameter(method: cst.FunctionDef, param: str) -> Optional[str]:
    """The attribute a method stores its parameter in outright (`self.x = param`, a statement
    of its body, not under a branch); None when it does not."""
    positional = [*method.params.posonly_params, *method.params.params]
    if not positional or not isinstance(method.body, cst.IndentedBlock):
        return None
    self_name = positional[0].name.value
    for statement in method.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not isinstance(small, cst.Assign) or not isinstance(small.value, cst.Name) or small.value.value != param:
                continue
            for target in small.targets:
                t = target.target
                if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == self_name:
                    return t.attr.value
    return None
