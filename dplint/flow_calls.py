"""Calls: the function or class a call runs (``Flow.callee``, ``callees``: ``f()``,
``Cls()``, ``self.m()``, ``obj.m()``, imported and aliased names), the call sites of a
function in this file (``call_sites``, None when it escapes) and in the project
(``all_call_sites``, with subclasses' ``super().__init__(...)`` calls of a base constructor),
the argument a call gives a parameter (``parameter_argument``), and a function's own returns.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

import libcst as cst

from dplint.flow_common import Callee, _instance_parameter, _is_static, class_method
from dplint.semantic import NO_GRAD_CONTEXTS, import_from_names

if TYPE_CHECKING:  # pragma: no cover
    from dplint.semantic import SemanticModel


class CallsMixin:
    """Callees and call sites (part of ``dplint.flow.Flow``)."""

    # ------------------------------------------------------------------- functions
    def callee(self, call: cst.Call, local: bool = False) -> Optional[Callee]:
        """The function or class of this file (or, unless `local`, of the project) that
        `call` runs (memoised: rules ask about the same calls again and again)."""
        key = (id(call), local)
        if key not in self._callees:
            self._callees[key] = self._callee(call, local)
        found = self._callees[key]
        current_of = getattr(self.model.project, "current", None)  # (a stand-in project may lack it)
        if found is not None and found.model is not self.model and current_of is not None:
            # the file it is in may have been linted since as a fresh model of the same tree
            current = current_of(found.model)
            if current is not found.model:
                found = self._callees[key] = Callee(current, found.node, found.bound)
        return found

    def _callee(self, call: cst.Call, local: bool = False) -> Optional[Callee]:
        model = self.model
        func = call.func
        if isinstance(func, cst.Name):
            name = func.value
            if name not in model.functions and name not in model.classes and (local or name not in model.imports):
                aliased = self._aliased_callees(name, call, local)
                if aliased:
                    return aliased[0] if len(aliased) == 1 else None  # several: `callees` lists them
                if name in model.bindings:
                    instance = self._called_instance(call, local)
                    if instance is not None:
                        return instance
                return None if local else self._star_imported_callee(name)
            return self._named_callee(name, call, local)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            scope = model.scope(call)
            if _instance_parameter(model, scope) == func.value.value:
                found = self._method_of_class(model, scope.class_scope.node, func.attr.value, local)
                if found is not None and not _is_static(found[1]):
                    return Callee(found[0], found[1], True)
                return self._called_instance(call, local)  # `self.loss_scaler(loss, opt)`
        if isinstance(func, cst.Attribute) and not local and model.project is not None:
            # `data_utils.build_loader(...)` after `from . import data_utils` / `import data_utils`.
            from dplint.semantic import dotted_name

            dotted = dotted_name(func)
            head = dotted.partition(".")[0] if dotted else None
            if head in model.imports and head not in model.functions and head not in model.classes:
                qualified = model.imports[head] + dotted[len(head):]
                if not qualified.startswith("torch."):
                    try:
                        resolved = model.project.resolve(qualified, model)
                    except Exception:
                        resolved = None
                    if resolved is not None and isinstance(resolved[1], (cst.FunctionDef, cst.ClassDef)):
                        return Callee(resolved[0], resolved[1], isinstance(resolved[1], cst.ClassDef))
        if isinstance(func, cst.Attribute) and (
            func.attr.value in self._method_names() or not local and self._made_from_import(func.value)
        ):
            # `trainer.fit()` where `trainer = Trainer(...)`, a class of this file (or, unless
            # `local`, of another project file: `from trainer import Trainer`); the method may
            # be the class's own or one it inherits from a project base class.
            values = self.values_at(func.value, call)
            if len(values) == 1 and isinstance(values[0].expr, cst.Call) and values[0].model is model:
                made = self.callee(values[0].expr, local=local)
                if made is not None and isinstance(made.node, cst.ClassDef):
                    found = self._method_of_class(made.model, made.node, func.attr.value, local)
                    if found is not None and not _is_static(found[1]):
                        return Callee(found[0], found[1], True)
        return None

    def _called_instance(self, call: cst.Call, local: bool) -> Optional[Callee]:
        """`loss_scaler(loss, optimizer)` where the name (or `self.x`) holds, on every path,
        an instance of a project class that defines `__call__` (itself or a project base
        class; `local`: a class of this file made in this file): calling the instance runs
        that method. Modules called for their `forward` are not meant here: torch's
        `Module.__call__` is not the project's."""
        classes = []
        for value in self.values_at(call.func, call):
            if not isinstance(value.expr, cst.Call) or local and value.model is not self.model:
                return None
            made = value.model.flow.callee(value.expr, local=local)
            if made is None or not isinstance(made.node, cst.ClassDef):
                return None
            if not any(made.node is other.node for other in classes):
                classes.append(made)
        if len(classes) != 1:
            return None
        found = self._method_of_class(classes[0].model, classes[0].node, "__call__", local)
        if found is None or _is_static(found[1]):
            return None
        return Callee(found[0], found[1], True)

    def _named_callee(self, name: str, at: cst.CSTNode, local: bool) -> Optional[Callee]:
        """The function or class of this file (or, unless `local`, imported from the project)
        that `name` denotes at `at`: one definition only."""
        model = self.model
        reaching = self.reaching(name, at)
        if len({id(binding) for binding, _ in reaching}) != 1:
            if not local:
                return self._one_imported_callee(name, [binding for binding, _ in reaching])
            return None  # defined twice (`if fast: def step()... else: def step()...`)
        for binding, _ in reaching[:1]:
            if isinstance(binding.node, cst.FunctionDef):
                return Callee(model, binding.node, _is_method(model, binding.node))
            if isinstance(binding.node, cst.ClassDef):
                return Callee(model, binding.node, True)
            if isinstance(binding.node, cst.ImportFrom) and not local:
                resolved = self.resolve_import(name)
                if resolved is not None and isinstance(resolved[1], (cst.FunctionDef, cst.ClassDef)):
                    return Callee(resolved[0], resolved[1], isinstance(resolved[1], cst.ClassDef))
            return None
        return None

    def _one_imported_callee(self, name: str, bindings: list) -> Optional[Callee]:
        """`try: from modules import build` / `except ImportError: from .modules import build`:
        several imports of a name that all resolve to one project definition denote it."""
        project = self.model.project
        if project is None or not bindings or not all(isinstance(b.node, cst.ImportFrom) for b in bindings):
            return None
        found = set()
        for binding in bindings:
            qualified = dict(import_from_names(binding.node)).get(name)
            try:
                resolved = project.resolve(qualified, self.model) if qualified else None
            except Exception:  # a project that cannot answer: unknown
                resolved = None
            if resolved is None or not isinstance(resolved[1], (cst.FunctionDef, cst.ClassDef)):
                return None
            found.add((id(resolved[1]), resolved))
        if len({key for key, _ in found}) != 1:
            return None
        (_, (owner, node)), = found
        return Callee(owner, node, isinstance(node, cst.ClassDef))

    def callees(self, call: cst.Call, local: bool = False) -> list[Callee]:
        """Every function or class `call` may run: `callee`'s one, or each class a local alias
        may hold (`Exp = LongTerm` / `Exp = Anomaly` down an if/elif chain, then `Exp(args)`),
        for a rule that follows each the way it follows each of several values."""
        one = self.callee(call, local)
        if one is not None:
            return [one]
        if isinstance(call.func, cst.Name):
            return self._aliased_callees(call.func.value, call, local) or []
        return []

    def _aliased_callees(self, name: str, at: cst.CSTNode, local: bool, depth: int = 3) -> Optional[list[Callee]]:
        """The definitions a local alias may hold where it is called (`Exp = Experiment`, one
        per branch of an if/elif chain, `make = models.build`): None unless every binding
        that reaches `at` names a function or class of the project (or, with `local`, of
        this file)."""
        model = self.model
        if depth <= 0 or not any(isinstance(b.value, (cst.Name, cst.Attribute)) for b in model.bindings.get(name, ())):
            return None  # a cheap test first: most called local names hold no definition
        reaching = self.reaching(name, at)
        if not reaching:
            return None
        found: list[Callee] = []
        for binding, _ in reaching:
            value = binding.value
            if not isinstance(binding.node, (cst.Assign, cst.AnnAssign)) or not isinstance(value, (cst.Name, cst.Attribute)):
                return None
            if isinstance(value, cst.Name):
                other = value.value
                if other in model.functions or other in model.classes or (not local and other in model.imports):
                    denoted = [self._named_callee(other, value, local)]
                else:
                    denoted = self._aliased_callees(other, value, local, depth - 1) or [None]
            else:
                denoted = [None if local else self._module_attribute_callee(value)]
            for callee in denoted:
                if callee is None:
                    return None
                if not any(c.node is callee.node for c in found):
                    found.append(callee)
        return found

    def _module_attribute_callee(self, expr: cst.Attribute) -> Optional[Callee]:
        """`models.Experiment` after `import models` / `from . import models`: that project
        module's function or class."""
        from dplint.semantic import dotted_name

        model = self.model
        dotted = dotted_name(expr)
        head = dotted.partition(".")[0] if dotted else None
        if model.project is None or head not in model.imports or head in model.functions or head in model.classes:
            return None
        qualified = model.imports[head] + dotted[len(head):]
        if qualified.startswith("torch."):
            return None
        try:
            resolved = model.project.resolve(qualified, model)
        except Exception:
            return None
        if resolved is not None and isinstance(resolved[1], (cst.FunctionDef, cst.ClassDef)):
            return Callee(resolved[0], resolved[1], isinstance(resolved[1], cst.ClassDef))
        return None

    def _method_of_class(self, model: "SemanticModel", class_node: cst.ClassDef, name: str, local: bool,
                         depth: int = 3) -> Optional[tuple["SemanticModel", cst.FunctionDef]]:
        """(model, method) that `self.name(...)` runs in `class_node`: its own, else the first
        base class of the project that defines it (`self.save_network(...)` in a subclass of
        `BaseModel`)."""
        method = class_method(class_node, name)
        if method is not None:
            return model, method
        if depth <= 0:
            return None
        for base in class_node.bases:
            found = model.flow._class_named(base.value, local)
            if found is not None and found[1] is not class_node:
                inherited = self._method_of_class(found[0], found[1], name, local, depth - 1)
                if inherited is not None:
                    return inherited
        return None

    def _made_from_import(self, expr: cst.BaseExpression) -> bool:
        """A cheap test before following values: a name this file binds to a call of an
        imported name (`trainer = Trainer(...)` after `from trainer import Trainer`)."""
        from dplint.semantic import dotted_name

        if not isinstance(expr, cst.Name) or self.model.project is None:
            return False
        for binding in self.model.bindings.get(expr.value, ()):
            if isinstance(binding.value, cst.Call):
                dotted = dotted_name(binding.value.func)
                head = dotted.partition(".")[0] if dotted else None
                if head in self.model.imports and not self.model.imports[head].startswith("torch"):
                    return True
        return False

    def _method_names(self) -> set:
        if self._methods is None:
            self._methods = {
                statement.name.value
                for node in self.model.classes.values()
                for statement in (node.body.body if isinstance(node.body, cst.IndentedBlock) else ())
                if isinstance(statement, cst.FunctionDef)
            }
        return self._methods

    def call_sites(self, function: cst.CSTNode) -> Optional[list[tuple[cst.Call, bool]]]:
        """(call, bound) for every call of a same-file function or class (its constructor);
        None when it may be called from where we can't see."""
        if self._call_sites is None:
            self._call_sites = {}  # a question asked while collecting sees no call sites, not a second collection
            self._call_sites = self._collect_call_sites()
        return self._call_sites.get(function)

    def all_call_sites(self, function: cst.FunctionDef) -> Optional[list[tuple["SemanticModel", cst.Call, bool]]]:
        """(model, call, bound) for every call of a function (or of a class's constructor,
        `function` being its `__init__`) of this file that the project shows: this file's and,
        when the file is checked as part of a project, other files' (`from engine import
        train_one_epoch`, `Trainer(model, loader)` made in `main.py`); see
        `Project.callers`. None when some caller may be unseen, or there is none."""
        if self._call_sites is None:
            self._call_sites = {}  # as in call_sites: no re-entrant collection
            self._call_sites = self._collect_call_sites()
        if function in self._escaping:
            return None
        if function not in self._call_sites:  # no call here: is it passed around here?
            owner_class = self.model.parent(self.model.parent(function)) if _is_method(self.model, function) else None
            if _escapes(self.model, function, function.name.value, owner_class, set()):
                return None
        sites, others = self._shown_call_sites(function)
        if self.model.project is not None:
            if others is None:
                # a base class's constructor, which `Project.callers` does not follow through
                # the subclasses (`class Trainer(BaseTrainer)` is a use it cannot call): their
                # `super().__init__(...)` calls, when every subclass makes one
                others = self._subclass_constructor_calls(function)
            if others is None:
                return None
            sites.extend(others)
        return sites or None

    def _shown_call_sites(self, function: cst.FunctionDef) -> tuple[list, Optional[list]]:
        """(model, call, bound) of this file's calls of a function, and of the other files'
        (`Project.callers`; None when the project cannot tell them all, [] without a project)."""
        sites = [(self.model, call, bound) for call, bound in (self._call_sites or {}).get(function, ())]
        project = self.model.project
        if project is None:
            return sites, []
        try:
            return sites, project.callers(self.model, function)
        except Exception:  # a project that cannot answer: callers unknown
            return sites, None

    def known_call_sites(self, function: cst.FunctionDef) -> list[tuple["SemanticModel", cst.Call, bool]]:
        """The calls of a function that the project shows, even where others may be unseen
        (a method whose name is also read as another object's attribute, `self.model.train()`
        beside `Trainer.train`): for questions one call answers, as "does some call run in a
        loop". `all_call_sites` is for questions about every call."""
        complete = self.all_call_sites(function)
        if complete is not None:
            return complete
        sites, others = self._shown_call_sites(function)
        return sites + (others or [])

    def _subclass_constructor_calls(self, function: cst.FunctionDef) -> Optional[list]:
        """(model, call, bound) of each `super().__init__(...)` / `Base.__init__(self, ...)`
        that the project's subclasses (other files, named by their base's plain name) make of
        the class whose `__init__` is `function`; None when there is none, when a subclass
        has no `__init__` of its own (its callers run this one: not followed), or when its
        `__init__` does not call this one exactly once."""
        if function in self._subclass_calls:
            return self._subclass_calls[function]
        self._subclass_calls[function] = None  # a subclass's `__init__` that leads back here: unknown
        self._subclass_calls[function] = found = self._find_subclass_constructor_calls(function)
        return found

    def _find_subclass_constructor_calls(self, function: cst.FunctionDef) -> Optional[list]:
        import os

        class_node = self.model.parent(self.model.parent(function))
        project = self.model.project
        if not isinstance(class_node, cst.ClassDef) or self.model.classes.get(class_node.name.value) is not class_node \
                or function.name.value != "__init__" or not hasattr(project, "project_files"):
            return None
        subclassing = re.compile(r"^[ \t]*class[ \t]+\w+[ \t]*\([^)]*\b" + re.escape(class_node.name.value) + r"\b", re.M)
        own = os.path.abspath(self.model.path)
        found: list = []
        for path in project.project_files(own):
            if os.path.abspath(path) == own:
                continue
            text = project.file_text(path)
            if not text or class_node.name.value not in text or not subclassing.search(text):
                continue
            other = project.model_for(path)
            if other is None:
                continue
            for subclass in list(other.classes.values()):
                if not any((other.flow._class_named(base.value) or (None, None))[1] is class_node for base in subclass.bases):
                    continue
                constructor = class_method(subclass, "__init__")
                if constructor is None:
                    return None
                calls = [call for call in other.flow._own_calls(constructor) if _calls_base_constructor(call, class_node)]
                if len(calls) != 1:
                    return None
                bound = not (isinstance(calls[0].func, cst.Attribute) and isinstance(calls[0].func.value, cst.Name))
                found.append((other, calls[0], bound))
        return found or None

    def _collect_call_sites(self) -> dict:
        model = self.model
        sites: dict = {}
        for site in model.calls:
            callee = self.callee(site.node, local=True)
            if callee is None or callee.model is not model:
                continue
            target = callee.node
            if isinstance(target, cst.ClassDef):
                target = callee.function
                if target is None:
                    continue
            sites.setdefault(target, []).append((site.node, callee.bound))
        # Escapes: a name used other than as the callee of a call (a callback, an export).
        result = {}
        for target, calls in sites.items():
            name = target.name.value
            owner_class = model.parent(model.parent(target)) if _is_method(model, target) else None
            if _escapes(model, target, name, owner_class, {c for c, _ in calls}):
                self._escaping.add(target)
                continue
            result[target] = calls
        return result

    def parameter_argument(self, call: cst.Call, function: cst.FunctionDef, name: str, bound: bool) -> Optional[cst.BaseExpression]:
        """The expression a call passes for parameter `name` (or its default); None if unclear.
        Positional arguments before the first `*spread` fill the first parameters, and a
        keyword names its own: `f(backend, **kwargs)` passes `backend` first whatever kwargs
        holds (giving it twice is a TypeError). A parameter no explicit argument fills may be
        filled by a `*args` or `**kwargs` spread: unclear."""
        params = function.params
        positional = [*params.posonly_params, *params.params]
        if bound and positional:
            positional = positional[1:]
        index, spread = 0, False
        for arg in call.args:
            if arg.star:
                spread = True
            elif arg.keyword is None:
                if not spread and index < len(positional) and positional[index].name.value == name:
                    return arg.value
                index += 1
            elif arg.keyword.value == name:
                return arg.value
        if spread:
            return None
        for param in (*positional, *params.kwonly_params):
            if param.name.value == name:
                return param.default
        return None

    def is_generator(self, function: cst.FunctionDef) -> bool:
        return function in self.model.generators

    def own_returns(self, function: cst.FunctionDef) -> list[cst.Return]:
        """The function's own return statements; empty when one returns nothing (None)."""
        found = self.model.returns.get(function, [])
        return found if all(statement.value is not None for statement in found) else []


def _calls_base_constructor(call: cst.Call, base: cst.ClassDef) -> bool:
    """`super().__init__(...)`, `super(Sub, self).__init__(...)` or `Base.__init__(self, ...)`."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "__init__":
        return False
    if isinstance(func.value, cst.Call):
        return isinstance(func.value.func, cst.Name) and func.value.func.value == "super"
    return isinstance(func.value, cst.Name) and func.value.value == base.name.value


def _is_method(model: "SemanticModel", function: cst.FunctionDef) -> bool:
    block = model.parent(function)
    return isinstance(model.parent(block), cst.ClassDef) and not _is_static(function)


def _escapes(model: "SemanticModel", target: cst.FunctionDef, name: str, owner_class, calls: set) -> bool:
    """A function whose callers we may not all see: decorated, or referenced other than as
    a callee (a callback, `mp.spawn(main_worker, ...)`). Callers in other files are not
    counted: the file's own calls are what its code shows."""
    if not all(_passes_the_call_through(model, d.decorator) for d in target.decorators):
        return True
    callee_nodes = {c.func for c in calls}
    callee_attrs = {c.func.attr for c in calls if isinstance(c.func, cst.Attribute)}
    if name == "__init__" and isinstance(owner_class, cst.ClassDef):
        # A constructor escapes with its class: subclassed, passed around, made elsewhere.
        for node, _, _ in model.references.get(owner_class.name.value, ()):
            if node is not owner_class.name and node not in callee_nodes and not _super_argument(model, node):
                return True
        return False
    defined_in = next((a for a in model.ancestors(target) if isinstance(a, (cst.FunctionDef, cst.ClassDef, cst.Module))), None)
    for node, scope, _ in model.references.get(name, ()):
        parent = model.parent(node)
        if node in callee_nodes or node in callee_attrs:
            continue
        if scope.kind == "function" and name in scope.local_names and scope.node is not defined_in:
            continue  # a local of another function (`def train(evaluate=False)`), not this function
        if node is target.name:
            continue
        if isinstance(parent, cst.Attribute) and parent.attr is node and owner_class is None:
            continue  # `obj.name`: another object's attribute
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            continue  # `MNIST(root, train=True)`: a keyword argument's name, not the function
        if isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias, cst.AsName)) and node is not target.name:
            continue  # a parameter or another definition of the same spelling elsewhere
        return True
    return False


# Decorators whose result is called with the caller's arguments and hands them to the function
# unchanged: its callers are still the calls of its name.
_CALL_THROUGH_DECORATORS = frozenset((
    *NO_GRAD_CONTEXTS, "torch.enable_grad", "torch.set_grad_enabled",
    "torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.compile",
    "functools.lru_cache", "functools.cache",
))


def _passes_the_call_through(model: "SemanticModel", decorator: cst.BaseExpression) -> bool:
    """`@staticmethod`, `@torch.no_grad()`, `@torch.inference_mode()`, `@functools.lru_cache`."""
    func = decorator.func if isinstance(decorator, cst.Call) else decorator
    if isinstance(func, cst.Name) and func.value == "staticmethod":
        return True
    return model.qualified_name(func) in _CALL_THROUGH_DECORATORS


def _super_argument(model: "SemanticModel", node: cst.CSTNode) -> bool:
    """`Trainer` in `super(Trainer, self).__init__(...)`: naming the class to find its bases."""
    arg = model.parent(node)
    call = model.parent(arg) if isinstance(arg, cst.Arg) else None
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "super"
