"""Reading a branch test into a ``Condition`` (``Flow.condition``): its canonical spelling
(``len(ids) <= 1`` is ``not len(ids) > 1``; a parameter stored as ``self.x`` is the test on
``self.x``; an option the constructor copied spelled as its caller spells it), what a compound
test or a flag set under some tests implies, what holds in an ``except AttributeError`` after
``x.module`` (``handler_conditions``), and the branches a comparison with a number picks
through a name's literal values (``value_implied``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

import libcst as cst

from dplint.flow_common import (
    _SPACE,
    _blocks,
    _enclosing_function,
    _instance_parameter,
    _static,
    _type_test_text,
    class_method,
)
from dplint.flow_paths import Condition, Path, _count_test

if TYPE_CHECKING:  # pragma: no cover
    from dplint.semantic import Scope, SemanticModel


_NEGATED_COMPARISONS = {"<=": ">", ">=": "<", "!=": "==", "isnot": "is", "notin": "in"}

_INTEGER_TESTS = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, ">": lambda a, b: a > b,
    "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b,
}

_MIRRORED_COMPARISONS = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}


class ConditionsMixin:
    """Branch tests read into Conditions (part of ``dplint.flow.Flow``)."""

    # ------------------------------------------------------------------- conditions
    def condition(self, test: cst.BaseExpression, holds: bool = True) -> Condition:
        key = (id(test), holds)
        if key not in self._conditions:
            found = self._with_flag_origin(self._with_parts(self._condition(test, holds), test, holds), test)
            found = self._with_branch_flag(found, test)
            self._conditions[key] = (test, found)  # keeps `test` alive: ids stay unique
        return self._conditions[key][1]

    def _with_parts(self, condition: Condition, test: cst.BaseExpression, holds: bool) -> Condition:
        """The condition with what its compound test implies: where `a and b` holds, `a` and
        `b` hold (`if torch.cuda.device_count() > 1 and distributed:` ... `if not
        distributed:` cannot both hold); where `a or b` fails, both fail."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, holds = test.expression, not holds
        if not isinstance(test, cst.BooleanOperation):
            return condition
        both = isinstance(test.operator, cst.And)
        parts = (self.condition(test.left, both), self.condition(test.right, both))
        # `holds` is whether the compound test holds on this path, `condition.holds` how its text is stored
        this, other = (parts, ()) if holds == both else ((), parts)
        if_holds, if_fails = (this, other) if condition.holds else (other, this)
        return Condition(condition.test, condition.holds, condition.scope, if_holds, if_fails)

    def _with_flag_origin(self, condition: Condition, test: cst.BaseExpression) -> Condition:
        """A flag set False and then True under some tests (`multi = False` ... `if use_cuda:
        if torch.cuda.device_count() > 1: multi = True`) holds exactly where those tests held:
        the condition `multi` gets them as its parts, like the test `use_cuda and
        torch.cuda.device_count() > 1` (where it fails, they cannot all have held). Only a
        local bound those two times and nowhere else; unchanged otherwise."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test = test.expression
        if not isinstance(test, cst.Name) or condition.test != test.value or condition.if_holds or condition.if_fails:
            return condition
        bindings = self.model.bindings.get(test.value, ())
        if len(bindings) != 2 or test in self._flag_walks:
            return condition
        unset, set_ = sorted(bindings, key=lambda b: b.order)
        if unset.scope is not set_.scope or not all(isinstance(b.node, cst.Assign) and len(b.node.targets) == 1
                                                     and isinstance(b.value, cst.Name) for b in bindings) \
                or (_static(self.model, unset.value), _static(self.model, set_.value)) != (False, True):
            return condition
        self._flag_walks.add(test)
        try:
            if not any(binding is set_ for binding, _ in self.reaching(test.value, test)):
                return condition
            before, parts = self.branch_conditions(unset.node), self.branch_conditions(set_.node)
        finally:
            self._flag_walks.discard(test)
        if len(parts) <= len(before) or parts[:len(before)] != before:
            return condition
        return Condition(condition.test, condition.holds, condition.scope, parts[len(before):], ())

    def _with_branch_flag(self, condition: Condition, test: cst.BaseExpression) -> Condition:
        """A flag bound to opposite constants in the two arms of one `if` (`if rank is not
        None: wrapped = True; net = DDP(net)` / `else: wrapped = False`) holds exactly where
        that arm's tests held and fails where the other arm's did; one set to a constant and
        then to the other under some tests (`self.distributed = False` ... `if ws > 1:
        self.distributed = True`) holds or fails, as set the second time, where those tests
        held. A local of a function (or a global), or an attribute of the method's instance
        (`self.distributed`, read in any method of the class), bound those two times and
        nowhere else in the file, both in one function; unchanged otherwise."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test = test.expression
        if condition.if_holds or condition.if_fails or test in self._flag_walks:
            return condition
        bindings = self._flag_bindings(test)
        if bindings is None:
            return condition
        first, second = sorted(bindings, key=lambda b: b.order)
        values = (_static(self.model, first.value), _static(self.model, second.value))
        if values not in ((False, True), (True, False)):
            return condition
        if _enclosing_function(self.model, first.node) is not _enclosing_function(self.model, second.node):
            return condition
        self._flag_walks.add(test)
        try:
            if isinstance(test, cst.Name) and not any(b is first or b is second for b, _ in self.reaching(test.value, test)):
                return condition
            on_first, on_second = self.branch_conditions(first.node), self.branch_conditions(second.node)
        finally:
            self._flag_walks.discard(test)
        common = 0
        while common < min(len(on_first), len(on_second)) and on_first[common] == on_second[common]:
            common += 1
        first_parts, second_parts = on_first[common:], on_second[common:]
        if not first_parts and second_parts:
            # set, then set again under some tests: only the second binding says where it held
            first_parts = ()
        elif not (first_parts and second_parts and first_parts[0] == second_parts[0].negated()):
            return condition  # not the two arms of one `if`
        holds_parts, fails_parts = (second_parts, first_parts) if values[1] else (first_parts, second_parts)
        return Condition(condition.test, condition.holds, condition.scope, holds_parts, fails_parts)

    def _flag_bindings(self, test: cst.BaseExpression) -> Optional[list]:
        """The two plain assignments of the flag `test` (a name, or `self.x` in a method), or None."""
        scope = self.model.scope(test)
        if isinstance(test, cst.Name):
            owner = self.model.owner_scope(test.value, scope)
            if owner is None or owner.kind not in ("function", "module"):
                return None
            bindings = [b for b in self.model.bindings.get(test.value, ()) if b.scope is owner]
            if len(bindings) != len(self.model.bindings.get(test.value, ())):
                return None  # also a name of another function, or `global`: not one flag
        elif isinstance(test, cst.Attribute) and isinstance(test.value, cst.Name) \
                and scope.self_name == test.value.value and scope.class_scope is not None:
            bindings = [b for b in self.model.bindings.get("self." + test.attr.value, ())
                        if b.scope is scope.class_scope]
        else:
            return None
        if len(bindings) != 2 or not all(isinstance(b.node, cst.Assign) and len(b.node.targets) == 1
                                         and b.value is not None for b in bindings):
            return None
        return bindings

    def _condition(self, test: cst.BaseExpression, holds: bool = True, aliases: int = 3) -> Condition:
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, holds = test.expression, not holds
        aliased = self.boolean_alias(test) if aliases and isinstance(test, cst.Name) else None
        if aliased is not None:
            # `ddp = True if world_size else False` ... `if ddp:` is the test `world_size`, and
            # `wrapped = isinstance(m, DDP)` ... `if wrapped` is the isinstance test itself
            expression, negated = aliased
            return self._condition(expression, holds != negated, aliases - 1)
        flag = self._dictionary_flag(test) if isinstance(test, cst.Subscript) else None
        if flag is not None:
            # `config["distributed"]`, set True under `if torch.cuda.device_count() > 1:` and
            # False in its `else` (here or in the file that built the dict): that test
            return Condition(flag.test, flag.holds == holds, flag.scope, flag.if_holds, flag.if_fails)
        inlined = self._predicate_body(test) if isinstance(test, cst.Call) else None
        if inlined is not None:
            # `is_distributed(model)` with `def is_distributed(m): return isinstance(m, DDP)`
            # is the test `isinstance(model, DDP)` itself, wherever it is spelled either way
            return Condition(inlined, holds, 0)
        compared = _type_test_text(self.model, test) or _comparison_text(self.model, test)
        if compared is not None:
            # `len(ids) <= 1` is `not len(ids) > 1`; `1 < len(ids)` is `len(ids) > 1`
            text, negated = compared
            return Condition(self._as_instance_text(test, text), holds != negated, 0)
        text = _SPACE.sub("", self.model.code(test))
        parens = len(getattr(test, "lpar", ()))
        if parens and text.startswith("(" * parens) and text.endswith(")" * parens):
            text = text[parens:-parens]
        root = test
        while isinstance(root, (cst.Attribute, cst.Subscript, cst.Call)):
            root = root.value if not isinstance(root, cst.Call) else root.func
        scope = 0
        if isinstance(root, cst.Name):
            use_scope = self.model.scope(test)
            if use_scope.self_name == root.value and use_scope.class_scope is not None:
                # `self.distributed` is one test in every method of the class; one copied by the
                # constructor from its argument is the caller's test (`_caller_spelling`).
                attribute = test
                while isinstance(attribute, (cst.Attribute, cst.Subscript, cst.Call)):
                    inner = attribute.func if isinstance(attribute, cst.Call) else attribute.value
                    if inner is root:
                        break
                    attribute = inner
                spelled = self._caller_spelling(use_scope, attribute.attr.value) \
                    if isinstance(attribute, cst.Attribute) and attribute.value is root and text.startswith(root.value + ".") else None
                if spelled is not None:
                    rest = text[len(root.value) + 1 + len(attribute.attr.value):]
                    return Condition(spelled[0] + rest, holds, spelled[1])
                return Condition(text, holds, id(use_scope.class_scope.node))
            owner = self.model.owner_scope(root.value, use_scope)
            scope = id(owner.node) if owner is not None and owner.kind == "function" else 0
            stored_as = self._stored_on_instance(owner, root.value) if owner is not None else None
            if stored_as is not None and text.startswith(root.value):
                # `self.args = args` in this method: `args.distributed` is `self.args.distributed`.
                class_node, attribute = stored_as
                return Condition("self." + attribute + text[len(root.value):], holds, id(class_node))
            passed = self._caller_argument(owner, root.value) if owner is not None else None
            if passed is not None and text.startswith(root.value):
                # `def train(args): if args.distributed:` with the only call `train(args)` in
                # `main`: the same test as `main`'s own `if args.distributed:`.
                argument_name, caller_scope = passed
                return Condition(argument_name + text[len(root.value):], holds, caller_scope)
        return Condition(text, holds, scope)

    def _as_instance_text(self, test: cst.Comparison, text: str) -> str:
        """`_instance_text`, then an option the constructor copied from its argument spelled
        as that argument's caller spells it (`_caller_spelling`)."""
        text = self._instance_text(test, text)
        start = 4 if text.startswith("len(self.") else 0
        if not text[start:].startswith("self."):
            return text
        attribute = re.match(r"\w+", text[start + 5:])
        scope = self.model.scope(test)
        # one caller up, as the caller's own comparisons are spelled (not followed further)
        spelled = self._caller_spelling(scope, attribute.group(0), 1) if attribute and scope.self_name == "self" else None
        if spelled is None:
            return text
        return text[:start] + spelled[0] + text[start + 5 + len(attribute.group(0)):]

    def _caller_spelling(self, scope: "Scope", attribute: str, depth: int = 3) -> Optional[tuple[str, int]]:
        """(text, scope id) of what `self.attribute` holds, as the one caller of the class
        spells it, when the class's `__init__` binds it once, from its parameter (`self.procs =
        opts.procs`, `self.args = args`), and nothing else in the file binds it: with
        `Runner(net, opts)` the only construction (in `launch(rank, opts)`), `self.procs > 1`
        in any method is the test `opts.procs > 1` around the caller's wrap. None otherwise."""
        class_scope = scope.class_scope if scope is not None else None
        if class_scope is None or not isinstance(class_scope.node, cst.ClassDef):
            return None
        constructor = class_method(class_scope.node, "__init__")
        bindings = self.model.bindings.get("self." + attribute, ())
        if constructor is None or len(bindings) != 1 or bindings[0].scope is not class_scope \
                or not isinstance(bindings[0].node, cst.Assign) or len(bindings[0].node.targets) != 1 \
                or _enclosing_function(self.model, bindings[0].node) is not constructor:
            return None
        root = value = bindings[0].value
        while isinstance(root, cst.Attribute):
            root = root.value
        if not isinstance(root, cst.Name) or root.value == _instance_parameter(self.model, self.model.scope(constructor.body)):
            return None
        constructor_scope = self.model.scope(constructor.body)
        if len([b for b in self.model.bindings.get(root.value, ()) if b.scope is constructor_scope]) != 1:
            return None  # rebound in the constructor: not the argument any more
        passed = self._caller_argument(constructor_scope, root.value, depth)
        if passed is None:
            return None
        return passed[0] + _SPACE.sub("", self.model.code(value))[len(root.value):], passed[1]

    def _instance_text(self, test: cst.Comparison, text: str) -> str:
        """A comparison on a parameter the method stores on the instance, spelled as the
        attribute (`self.config = config` ... `config["gpuid"][0] >= 0` is the test
        `self.config["gpuid"][0] >= 0` of every method of the class)."""
        root = test.left
        if isinstance(root, cst.Call) and isinstance(root.func, cst.Name) and root.func.value == "len" and len(root.args) == 1:
            root = root.args[0].value
        copied = self._as_instance_copy(root, text)
        if copied is not None:
            return copied
        if isinstance(root, cst.Name) and text.startswith((root.value, "len(" + root.value)):
            # `n_gpu = args.n_gpu` ... `n_gpu > 1` is the test `args.n_gpu > 1`, as its callers spell it
            scope = self.model.scope(test)
            source = next((other for other in self._aliases_in(scope).get(root.value, ())
                           if "." in other), None) if scope.kind == "function" else None
            if source is not None:
                start = 4 if text.startswith("len(") else 0
                return text[:start] + source + text[start + len(root.value):]
        while isinstance(root, (cst.Attribute, cst.Subscript)):
            root = root.value
        if not isinstance(root, cst.Name) or not text.startswith((root.value, "len(" + root.value)):
            return text
        owner = self.model.owner_scope(root.value, self.model.scope(test))
        if owner is None or owner.kind != "function":
            return text
        stored_as = self._stored_on_instance(owner, root.value)
        if stored_as is None:
            return text
        start = 4 if text.startswith("len(") else 0
        return text[:start] + "self." + stored_as[1] + text[start + len(root.value):]

    def _as_instance_copy(self, subject: cst.BaseExpression, text: str) -> Optional[str]:
        """A comparison on an option the method copies onto the instance, spelled as the copy
        (`self.n_gpus = args.n_gpus` ... `args.n_gpus > 1` is the test `self.n_gpus > 1` of every
        method of the class), when the class binds that attribute only there; None otherwise."""
        method = next((a for a in self.model.ancestors(subject) if isinstance(a, cst.FunctionDef)), None)
        if method is None:
            return None
        copies = self._instance_copies()
        while isinstance(subject, (cst.Attribute, cst.Subscript)):
            if isinstance(subject, cst.Attribute):
                source = _SPACE.sub("", self.model.code(subject))
                attribute = copies.get((method, source))
                for start in (0, 4):  # `args.n_gpus > 1`, `len(args.gpu_ids) > 1`
                    if attribute is not None and text[start:].startswith(source) and (start == 0 or text.startswith("len(")):
                        return text[:start] + "self." + attribute + text[start + len(source):]
            subject = subject.value
        return None

    def _instance_copies(self) -> dict:
        """(method, `args.n_gpus`) -> `n_gpus` for each `self.n_gpus = args.n_gpus`: an
        attribute of the instance bound once in the file, to an attribute of a name."""
        if self._copies is None:
            self._copies = {}
            for key, bindings in self.model.bindings.items():
                if not key.startswith("self.") or len(bindings) != 1:
                    continue
                value = bindings[0].value
                if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Name) and value.value.value != "self":
                    method = next((a for a in self.model.ancestors(bindings[0].node) if isinstance(a, cst.FunctionDef)), None)
                    self._copies[(method, _SPACE.sub("", self.model.code(value)))] = key[5:]
        return self._copies

    def handler_conditions(self, statement: cst.CSTNode, handler: cst.ExceptHandler) -> Path:
        """What holds where an `except` that catches AttributeError (bare, `Exception`,
        `BaseException`, a tuple naming one) runs after a `try` whose body reads `.module` of
        one object: `try: sd = net.module.state_dict() except AttributeError: sd =
        net.state_dict()` runs the handler for a bare `net`, the test `hasattr(net, "module")`
        failed. Nothing for other handlers, or reads of `.module` from several objects."""
        if not catches_attribute_error(handler):
            return ()
        targets: dict = {}
        stack = list(_blocks(statement.body))
        while stack:
            node = stack.pop()
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            if isinstance(node, cst.Attribute) and node.attr.value == "module" \
                    and isinstance(node.value, (cst.Name, cst.Attribute)):
                targets.setdefault(_SPACE.sub("", self.model.code(node.value)), node.value)
            stack.extend(self.model.children(node))
        if len(targets) != 1:
            return ()
        (text,) = targets
        return (Condition(f'hasattr({text},"module")', False, 0),)

    def value_implied(self, test: cst.BaseExpression, holds: bool) -> Path:
        """The branch conditions a comparison of a name with a whole number implies through
        the values the name may hold: `if cuda_count > 1: world_size = dist.get_world_size()
        else: world_size = 1` ... where `world_size == 1` fails, the literal 1 cannot be
        what it holds, so the test `cuda_count > 1` held. Empty when no literal is ruled out."""
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, holds = test.expression, not holds
        if isinstance(test, cst.Call):
            return self._alias_checks(test, holds)
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return ()
        left, right = test.left, test.comparisons[0].comparator
        operator = _SPACE.sub("", self.model.code(test.comparisons[0].operator))
        if isinstance(left, cst.Integer) and operator in _MIRRORED_COMPARISONS:
            left, right, operator = right, left, _MIRRORED_COMPARISONS[operator]
        if not isinstance(left, cst.Name) or not isinstance(right, cst.Integer) or operator not in _INTEGER_TESTS:
            return ()
        number = int(right.value, 0)
        entries = self.reaching(left.value, test)
        kept = []
        for binding, path in entries:
            node, value = binding.node, binding.value
            if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(value, cst.Integer) \
                    and _INTEGER_TESTS[operator](int(value.value, 0), number) != holds:
                continue  # this literal makes the test come out the other way
            kept.append(path)
        if not kept or len(kept) == len(entries):
            return ()
        return tuple(c for c in kept[0] if all(c in path for path in kept[1:]))


def catches_attribute_error(handler: cst.ExceptHandler) -> bool:
    """`except:`, `except AttributeError`, `except Exception as e`, `except (KeyError,
    AttributeError)`: a handler that an AttributeError raised in the `try` reaches."""
    kinds = handler.type
    if kinds is None:
        return True
    names = kinds.elements if isinstance(kinds, cst.Tuple) else [kinds]
    for item in names:
        value = item.value if isinstance(item, cst.Element) else item
        if isinstance(value, cst.Attribute):
            value = value.attr
        if isinstance(value, cst.Name) and value.value in ("AttributeError", "Exception", "BaseException"):
            return True
    return False


def _comparison_text(model: "SemanticModel", test: cst.BaseExpression) -> Optional[tuple[str, bool]]:
    """(text, negated) of a one-operator comparison in one spelling: `a <= b` is `not a > b`,
    `1 < n` is `n > 1`, `x is not None` is `not x is None`; None for anything else."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or test.lpar:
        return None
    target = test.comparisons[0]
    left, right = test.left, target.comparator
    operator = _SPACE.sub("", model.code(target.operator))
    if isinstance(left, (cst.Integer, cst.Float, cst.SimpleString)) and not isinstance(right, (cst.Integer, cst.Float, cst.SimpleString)) \
            and operator in _MIRRORED_COMPARISONS:
        left, right, operator = right, left, _MIRRORED_COMPARISONS[operator]
    negated = operator in _NEGATED_COMPARISONS
    operator = _NEGATED_COMPARISONS.get(operator, operator)
    left_text, right_text = _SPACE.sub("", model.code(left)), _SPACE.sub("", model.code(right))
    if operator == "<" and isinstance(right, cst.Integer) and _count_test(left_text + "==1"):
        # a count is a whole number: `n_gpu >= 2` is `n_gpu > 1`, `n_gpu < 2` is `not n_gpu > 1`
        operator, negated, right_text = ">", not negated, str(int(right.value, 0) - 1)
    return left_text + operator + right_text, negated
