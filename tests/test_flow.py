"""The value-flow model (`dplint.flow`): reaching definitions with branch conditions, values
across functions and classes, and the cross-file hook through `model.project`."""

from __future__ import annotations

import textwrap
from typing import Optional

import libcst as cst

from dplint.data import sampler_with_true_shuffle
from dplint.flow import Condition, consistent
from dplint.rules.missing_set_epoch import MissingSetEpoch
from dplint.semantic import SemanticModel
from dplint.flow import analysed


def model_of(code: str, path: str = "<string>") -> SemanticModel:
    return analysed(cst.parse_module(textwrap.dedent(code)), path)


def call_named(model: SemanticModel, name: str, nth: int = 0) -> cst.Call:
    return [s.node for s in model.calls if model.code(s.node.func) == name][nth]


def keyword(call: cst.Call, name: str) -> cst.BaseExpression:
    return next(a.value for a in call.args if a.keyword is not None and a.keyword.value == name)


def shown(model: SemanticModel, values) -> list[tuple[Optional[str], tuple]]:
    return [
        (v.model.code(v.expr) if v.expr is not None else None, tuple((c.test, c.holds) for c in v.conditions))
        for v in values
    ]


def test_all_reaching_bindings_with_their_branch_conditions():
    model = model_of(
        """
        def build(ds, distributed):
            sampler = None
            if distributed:
                sampler = DistributedSampler(ds)
            use(sampler)
        """
    )
    use = call_named(model, "use")
    assert shown(model, model.flow.values_at(use.args[0].value, use)) == [
        ("DistributedSampler(ds)", (("distributed", True),)),
        ("None", (("distributed", False),)),
    ]


def test_if_else_elif_and_conditional_expression():
    model = model_of(
        """
        if a:
            x = 1
        elif not b:
            x = 2
        else:
            x = 3
        y = P() if c else None
        use(x, y)
        """
    )
    use = call_named(model, "use")
    assert shown(model, model.flow.values_at(use.args[0].value, use)) == [
        ("1", (("a", True),)),
        ("2", (("a", False), ("b", False))),
        ("3", (("a", False), ("b", True))),
    ]
    assert shown(model, model.flow.values_at(use.args[1].value, use)) == [("P()", (("c", True),)), ("None", (("c", False),))]


def test_static_branches_close_and_code_after_return_is_not_reached():
    model = model_of(
        """
        def f():
            x = 1
            if False:
                x = 2
            if True:
                pass
            else:
                x = 3
            use(x)
            return x
            x = 4
        """
    )
    use = call_named(model, "use")
    assert shown(model, model.flow.values_at(use.args[0].value, use)) == [("1", ())]


def test_a_binding_in_both_branches_is_unconditional_again():
    model = model_of(
        """
        x = 1
        if c:
            y = 2
        else:
            y = 3
        use(x)
        try:
            z = A()
        except ValueError:
            z = None
        use(z)
        """
    )
    first, second = [s.node for s in model.calls if model.code(s.node.func) == "use"]
    assert shown(model, model.flow.values_at(first.args[0].value, first)) == [("1", ())]
    assert {text for text, _ in shown(model, model.flow.values_at(second.args[0].value, second))} == {"A()", "None"}


def test_conditions_are_judged_together_for_sampler_and_shuffle():
    model = model_of(
        """
        from torch.utils.data import DataLoader, DistributedSampler
        def bad(ds, distributed):
            sampler = DistributedSampler(ds) if distributed else None
            return DataLoader(ds, shuffle=True, sampler=sampler)
        def by_flag(ds, distributed):
            if distributed:
                sampler, shuffle = DistributedSampler(ds), False
            else:
                sampler, shuffle = None, True
            return DataLoader(ds, shuffle=shuffle, sampler=sampler)
        def by_sampler(ds, distributed):
            sampler = DistributedSampler(ds) if distributed else None
            return DataLoader(ds, shuffle=sampler is None, sampler=sampler)
        def negated(ds, distributed):
            return DataLoader(ds, shuffle=not distributed, sampler=DistributedSampler(ds) if distributed else None)
        """
    )
    loaders = [s.node for s in model.calls if model.code(s.node.func) == "DataLoader"]
    flagged = [sampler_with_true_shuffle(model, loader) is not None for loader in loaders]
    assert flagged == [True, False, False, False]


def test_truth_on_a_path():
    model = model_of("x = True if c else False\nuse(x)\n")
    use = call_named(model, "use")
    arg = use.args[0].value
    on_c = (model.flow.condition(cst.parse_expression("c")),)
    assert model.flow.truth(arg, use) is None
    assert model.flow.truth(arg, use, on_c) is True
    assert model.flow.truth(arg, use, (on_c[0].negated(),)) is False
    assert consistent(on_c, on_c) and not consistent(on_c, (on_c[0].negated(),))
    assert Condition("c", True).negated() == Condition("c", False)


def test_return_values_tuples_and_pass_through_helpers():
    model = model_of(
        """
        import torch
        import torch.nn as nn
        def make(ds):
            s = DistributedSampler(ds)
            return DataLoader(ds, sampler=s), DataLoader(ds)
        def on_gpu(module):
            return module.cuda() if torch.cuda.is_available() else module
        train_dl, val_dl = make(ds)
        model = on_gpu(nn.DataParallel(net))
        use(train_dl, model)
        """
    )
    use = call_named(model, "use")
    assert shown(model, model.flow.values_at(use.args[0].value, use)) == [("DataLoader(ds, sampler=s)", ())]
    assert model.wrapping_bound_to(use.args[1].value, use) is model.wrappings[0]
    assert model.flow.wrapped_on_every_path(use.args[1].value, use)


def test_parameters_follow_the_only_caller_and_constructor_arguments_reach_self():
    model = model_of(
        """
        class Runner:
            def __init__(self, net, loader):
                self.net = net
                self.loader = loader
            def fit(self):
                use(self.loader, self.net)
        def helper(x, y=3):
            use(x, y)
        Runner(Net(), loader=DataLoader(ds))
        helper(1)
        """
    )
    in_fit, in_helper = [s.node for s in model.calls if model.code(s.node.func) == "use"]
    assert shown(model, model.flow.values_at(in_fit.args[0].value, in_fit)) == [("DataLoader(ds)", ())]
    assert shown(model, model.flow.values_at(in_fit.args[1].value, in_fit)) == [("Net()", ())]
    assert shown(model, model.flow.values_at(in_helper.args[0].value, in_helper)) == [("1", ())]
    assert shown(model, model.flow.values_at(in_helper.args[1].value, in_helper)) == [("3", ())]


def test_callers_that_agree_give_every_value():
    model = model_of(
        """
        def step(m):
            use(m)
        step(a)
        step(b)
        """
    )
    (in_step,) = [s.node for s in model.calls if model.code(s.node.func) == "use"]
    assert shown(model, model.flow.values_at(in_step.args[0].value, in_step)) == [("a", ()), ("b", ())]


def test_callers_that_differ_or_escapes_say_nothing():
    model = model_of(
        """
        import torch.nn as nn
        def step(m):
            use(m)
        step(nn.DataParallel(a))
        step(b)
        def worker(rank):
            use(rank)
        spawn(worker, nprocs=2)
        worker(0)
        """
    )
    in_step, in_worker = [s.node for s in model.calls if model.code(s.node.func) == "use"]
    assert shown(model, model.flow.values_at(in_step.args[0].value, in_step)) == [(None, ())]
    assert shown(model, model.flow.values_at(in_worker.args[0].value, in_worker)) == [(None, ())]
    (m_param,) = [b for b in model.bindings["m"] if isinstance(b.node, cst.Param)]
    assert [shown(model, values) for values in model.flow.values_per_caller(m_param)] == [[("nn.DataParallel(a)", ())], [("b", ())]]
    (rank_param,) = [b for b in model.bindings["rank"] if isinstance(b.node, cst.Param)]
    assert model.flow.values_per_caller(rank_param) is None  # `worker` escapes into spawn()


def test_a_parameter_named_like_a_function_is_not_that_function_escaping():
    model = model_of(
        """
        def evaluate(loader):
            use(loader)
        def train(args, evaluate=False):
            if evaluate:
                return
        evaluate(val_loader)
        """
    )
    (in_evaluate,) = [s.node for s in model.calls if model.code(s.node.func) == "use"]
    # `evaluate` read in train() is train's parameter: the function's one caller is still known
    assert shown(model, model.flow.values_at(in_evaluate.args[0].value, in_evaluate)) == [("val_loader", ())]


def test_tuple_target_is_a_store():
    model = model_of(
        """
        from torch.utils.data import DataLoader, DistributedSampler
        train_sampler, val_sampler = None, None
        if distributed:
            train_sampler = DistributedSampler(train_ds)
        loader = DataLoader(train_ds, sampler=train_sampler)
        for epoch in range(3):
            for x in loader:
                model(x).sum().backward()
        """
    )
    (finding,) = MissingSetEpoch().check(model)
    assert model.position(finding.node)[0].line == 5 and finding.fix is None


def test_relative_and_star_imports():
    model = model_of(
        """
        from .data import build_loader
        from . import utils
        from ..common.io import save as store
        from project_common import *
        from torch.nn import *
        a = build_loader()
        b = torch.utils.data.DistributedSampler(ds)
        c = DataParallel(net)
        """
    )
    assert model.imports["build_loader"] == ".data.build_loader"
    assert model.imports["utils"] == ".utils"
    assert model.imports["store"] == "..common.io.save"
    assert [site.qualified_name for site in model.calls] == [
        ".data.build_loader",
        "torch.utils.data.DistributedSampler",
        "torch.nn.DataParallel",
    ]


class FakeProject:
    """What the project runner provides: qualified name -> (model, top-level node)."""

    def __init__(self, **files: str) -> None:
        self.models = {name: model_of(code, f"{name}.py") for name, code in files.items()}
        for model in self.models.values():
            model.project = self

    def resolve(self, qualified_name: str, importer: SemanticModel):
        module, _, name = qualified_name.lstrip(".").rpartition(".")
        model = self.models.get(module)
        if model is None:
            return None
        for statement in model.module.body:
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and statement.name.value == name:
                return model, statement
        return None


SAMPLERS = """
    from torch.utils.data import DistributedSampler, RandomSampler


    def pick_sampler(ds, distributed):
        if distributed:
            return DistributedSampler(ds, shuffle=True)
        return RandomSampler(ds)
"""
TRAIN = """
    from torch.utils.data import DataLoader

    from samplers import pick_sampler


    def main(model, opt, ds, distributed, epochs):
        loader = DataLoader(ds, batch_size=32, sampler=pick_sampler(ds, distributed))
        for epoch in range(epochs):
            for x, y in loader:
                opt.zero_grad()
                model(x, y).backward()
                opt.step()
"""


def test_cross_file_values_carry_their_model():
    project = FakeProject(samplers=SAMPLERS, train=TRAIN)
    train = project.models["train"]
    loader = call_named(train, "DataLoader")
    values = train.flow.values_at(keyword(loader, "sampler"), loader)
    assert [(v.model.path, v.model.code(v.expr)) for v in values] == [
        ("samplers.py", "DistributedSampler(ds, shuffle=True)"),
        ("samplers.py", "RandomSampler(ds)"),
    ]
    assert [v.model.qualified_name(v.expr.func) for v in values] == [
        "torch.utils.data.DistributedSampler",
        "torch.utils.data.RandomSampler",
    ]


def test_sampler_factory_in_another_file_g6():
    project = FakeProject(samplers=SAMPLERS, train=TRAIN)
    train = project.models["train"]
    (finding,) = MissingSetEpoch().check(train)
    assert train.position(finding.node)[0].line == 8 and finding.fix is None  # (a blank first line)
    guarded = TRAIN.replace(
        "            for x, y in loader:",
        "            if distributed:\n                loader.sampler.set_epoch(epoch)\n            for x, y in loader:",
    )
    project = FakeProject(samplers=SAMPLERS, train=guarded)
    assert list(MissingSetEpoch().check(project.models["train"])) == []
    alone = model_of(TRAIN)  # without a project the factory is unknown code: silent
    assert list(MissingSetEpoch().check(alone)) == []


def test_module_attribute_calls_resolve_through_the_project():
    project = FakeProject(
        samplers=SAMPLERS,
        train=TRAIN.replace("from samplers import pick_sampler", "import samplers").replace(
            "sampler=pick_sampler(", "sampler=samplers.pick_sampler("
        ),
    )
    train = project.models["train"]
    loader = call_named(train, "DataLoader")
    callee = train.flow.callee(keyword(loader, "sampler"))
    assert callee is not None and callee.model is project.models["samplers"] and callee.node.name.value == "pick_sampler"


def test_loop_iteration_and_backward_in_different_functions():
    model = model_of(
        """
        from torch.utils.data import DataLoader, DistributedSampler
        class Trainer:
            def __init__(self, ds):
                self.loader = DataLoader(ds, sampler=DistributedSampler(ds))
            def _step(self, batch):
                self.model(batch).sum().backward()
            def _epoch(self):
                for batch in self.loader:
                    self._step(batch)
            def fit(self, n):
                for epoch in range(n):
                    self._epoch()
        """
    )
    (finding,) = MissingSetEpoch().check(model)
    assert finding.fix is None


def test_the_flow_model_is_attached_once_by_whoever_builds_the_model():
    model = model_of("x = 1\n")
    assert model.flow is not None and model.flow.model is model
    assert model.flow is model.flow
    assert SemanticModel(cst.parse_module("x = 1\n")).flow is None  # the semantic floor alone has none


def test_a_branch_condition_that_looks_up_callers_does_not_lose_later_bindings():
    # `if fast:` asks who calls `build` (to name the test after the caller's argument): that
    # starts another walk in the middle of this one, which must not disturb it.
    model = model_of(
        """
        from torch.utils.data import DataLoader, DistributedSampler
        def build(ds, fast, many):
            if fast:
                workers = 0
            else:
                workers = 4
            if many:
                sampler = DistributedSampler(ds)
            else:
                sampler = None
            return DataLoader(ds, sampler=sampler, shuffle=True, num_workers=workers)
        build(data, True, world_size > 1)
        """
    )
    loader = call_named(model, "DataLoader")
    assert [text for text, _ in shown(model, model.flow.values_at(keyword(loader, "sampler"), loader))] == [
        "DistributedSampler(ds)",
        "None",
    ]
    assert sampler_with_true_shuffle(model, loader) is not None


def test_a_one_line_predicate_is_the_test_it_returns():
    model = model_of(
        """
        from torch.nn.parallel import DistributedDataParallel as DDP
        def is_wrapped(net):
            \"\"\"Whether DDP wraps it.\"\"\"
            return isinstance(net, DDP)
        def unwrap(model):
            if is_wrapped(model):
                return model.module
            if isinstance(model, DDP):
                return model.module
            return model
        """
    )
    first, second = [node for node in model.nodes() if isinstance(node, cst.If)]
    inlined, spelled = model.flow.condition(first.test), model.flow.condition(second.test)
    assert inlined.test == "isinstance(model,DDP)"
    assert (inlined.test, inlined.holds) == (spelled.test, spelled.holds)


def _if_tests(model: SemanticModel) -> list[cst.BaseExpression]:
    found = []

    class Collect(cst.CSTVisitor):
        def visit_If(self, node: cst.If) -> None:
            found.append(node.test)

    model.module.visit(Collect())
    return found


BASE_RUNNER = """
    class Runner:
        def setup(self, on_gpu=True):
            self.on_gpu = on_gpu


    class Lazy:
        def setup(self, on_gpu=True):
            if on_gpu:
                self.on_gpu = on_gpu
"""


def test_a_parameter_a_base_class_method_stores_on_self_is_that_self_attribute():
    # `Runner.setup(self, on_gpu=on_gpu)` / `super().setup(on_gpu)` store the parameter as
    # `self.on_gpu`: `if on_gpu:` in the subclass's method and `if self.on_gpu:` in another
    # of its methods are one test.
    project = FakeProject(
        base=BASE_RUNNER,
        scorer="""
        from base import Runner, Lazy


        class Explicit(Runner):
            def setup(self, on_gpu=True):
                Runner.setup(self, on_gpu=on_gpu)
                if on_gpu:
                    pass

            def save(self):
                if self.on_gpu:
                    pass


        class ThroughSuper(Runner):
            def setup(self, on_gpu=True, many=False):
                super().setup(on_gpu)
                if on_gpu:
                    pass
                if many:
                    pass

            def save(self):
                if self.on_gpu:
                    pass


        class StoredUnderABranch(Lazy):
            def setup(self, on_gpu=True):
                super().setup(on_gpu)
                if on_gpu:
                    pass

            def save(self):
                if self.on_gpu:
                    pass
        """,
    )
    model = project.models["scorer"]
    tests = [model.flow.condition(test) for test in _if_tests(model)]
    explicit_local, explicit_self, super_local, super_many, super_self, lazy_local, lazy_self = tests
    assert explicit_local == explicit_self
    assert super_local == super_self
    assert super_many != super_self
    assert explicit_self != super_self  # one test per class
    assert lazy_local != lazy_self  # the base stores it only on some paths: not the same test


# ------------------------------------------------------------- attributes of base classes
BASE_TRAINER = """
    import torch.nn as nn


    class BaseTrainer:
        def __init__(self, net, settings):
            self.settings = settings
            self.net = net.cuda()
            if settings.distributed:
                self.net = nn.parallel.DistributedDataParallel(self.net)
"""


def _read_in(model: SemanticModel, method: str) -> cst.Attribute:
    """The first `self.net` read inside `method` of the file."""
    function = next(n for n in model.nodes() if isinstance(n, cst.FunctionDef) and n.name.value == method)
    return next(n for n in model.nodes() if isinstance(n, cst.Attribute) and model.code(n) == "self.net"
                and any(a is function for a in model.ancestors(n)))


def test_attribute_set_by_an_imported_base_class_with_its_constructor_arguments_mapped():
    project = FakeProject(base=BASE_TRAINER, trainer="""
        from base import BaseTrainer


        class Trainer(BaseTrainer):
            def __init__(self, net, settings):
                super().__init__(net, settings)

            def step(self, x):
                return self.net.head(x)
    """)
    trainer = project.models["trainer"]
    read = _read_in(trainer, "step")
    values = trainer.flow.values_at(read, read)
    assert [(v.model.path, v.model.code(v.expr) if v.known else None, [(c.test, c.holds) for c in v.conditions])
            for v in values] == [
        ("base.py", "nn.parallel.DistributedDataParallel(self.net)", [("self.settings.distributed", True)]),
        ("trainer.py", None, [("self.settings.distributed", False)]),  # `net`: the subclass's caller is unseen
    ]
    # The base's test on `self.settings` is the subclass's own test: the same instance.
    test = trainer.flow.values_at(read, read)[0].conditions[0]
    assert test.scope == id(trainer.classes["Trainer"])
    assert trainer.flow.reaching("self.net", read) == []  # the stand-in never leaks to rules


def test_subclass_constructor_replacing_the_attribute_hides_the_base_value():
    project = FakeProject(base=BASE_TRAINER, trainer="""
        from base import BaseTrainer


        class Probe(BaseTrainer):
            def __init__(self, net, settings):
                super().__init__(net, settings)
                self.net = net

            def step(self, x):
                return self.net.head(x)
    """)
    trainer = project.models["trainer"]
    read = _read_in(trainer, "step")
    assert [v.model.path for v in trainer.flow.values_at(read, read)] == ["trainer.py"]


def test_same_file_base_class_and_a_binding_before_super_init():
    model = model_of("""
        import torch.nn as nn


        class Base:
            def __init__(self):
                self.net = nn.DataParallel(self.net)


        class Child(Base):
            def __init__(self, net):
                self.net = net
                super().__init__()

            def step(self, x):
                return self.net.head(x)
    """)
    read = _read_in(model, "step")
    assert [model.code(v.expr) for v in model.flow.values_at(read, read) if v.known] == ["nn.DataParallel(self.net)"]


def test_an_attribute_stored_on_a_local_object_holds_the_store_until_the_object_is_handed_on():
    model = model_of(
        """
        def init(args, cpu_only):
            use(args.backend)
            args.backend = "nccl"
            if cpu_only:
                args.backend = "gloo"
            first(args.backend)
            configure(args)
            second(args.backend)
            args.backend = "mpi"
            args = reload()
            third(args.backend)
        """
    )

    def values_given_to(name):
        call = call_named(model, name)
        return shown(model, model.flow.values_at(call.args[0].value, call))

    assert values_given_to("use") == [("args.backend", ())]  # no store before it: the read itself
    assert values_given_to("first") == [('"gloo"', (("cpu_only", True),)), ('"nccl"', (("cpu_only", False),))]
    assert values_given_to("second") == [("args.backend", ())]  # a call given `args` may set it
    assert values_given_to("third") == [("args.backend", ())]  # another object since `args = reload()`


def test_attribute_stores_of_two_functions_are_each_their_own():
    model = model_of(
        """
        def first(args):
            args.backend = "nccl"
            use(args.backend)

        def second(args):
            args.backend = "gloo"
            use(args.backend)
        """
    )
    for nth, expected in ((0, '"nccl"'), (1, '"gloo"')):
        call = call_named(model, "use", nth)
        assert shown(model, model.flow.values_at(call.args[0].value, call)) == [(expected, ())]


def test_record_fields_are_the_constructor_parameters_python_writes():
    from dplint.flow_common import record_fields

    model = model_of("""
        import dataclasses
        from dataclasses import dataclass
        from typing import ClassVar, NamedTuple

        @dataclass
        class Info:
            loader: object
            kind: ClassVar[str] = "train"
            sampler: object = None

        @dataclasses.dataclass(frozen=True)
        class Frozen:
            loader: object

        class Pair(NamedTuple):
            loader: object
            sampler: object

        @dataclass
        class OwnInit:
            loader: object
            def __init__(self, sampler):
                self.loader = sampler

        @dataclass
        class Derived(Info):
            extra: int = 0

        class Plain:
            loader: object
    """)
    classes = {c.name.value: c for c in model.nodes_of(cst.ClassDef)}
    assert record_fields(model, classes["Info"]) == ["loader", "sampler"]
    assert record_fields(model, classes["Frozen"]) == ["loader"]
    assert record_fields(model, classes["Pair"]) == ["loader", "sampler"]
    for other in ("OwnInit", "Derived", "Plain"):
        assert record_fields(model, classes[other]) is None, other
