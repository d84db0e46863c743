"""Value flow through calls (`dplint.flow`): a followed call deciding its function's branch
tests, `**kwargs` lookups, methods only the constructor calls, and a subclass's override of a
method its base class's constructor calls for a value."""

from __future__ import annotations

import libcst as cst

from tests.test_flow import call_named, model_of, shown


def _values_of_use(model):
    use = call_named(model, "use")
    return shown(model, model.flow.values_at(use.args[0].value, use))


def test_a_call_leaving_a_list_parameter_at_its_empty_default_never_takes_the_branch():
    model = model_of(
        """
        def prepare(net, ids=[]):
            if len(ids) > 0:
                net = DataParallel(net, ids)
            return net

        def build(**options):
            ids = options.get("ids", [])
            return prepare(Net(), ids)

        use(prepare(Net()))
        use(build(width=3))
        """
    )
    for nth in (0, 1):
        use = call_named(model, "use", nth)
        assert [code for code, _ in shown(model, model.flow.values_at(use.args[0].value, use))] == ["Net()"]


def test_a_call_passing_the_list_or_an_unknown_one_keeps_the_branch():
    model = model_of(
        """
        def prepare(net, ids=[]):
            if len(ids) > 0:
                net = DataParallel(net, ids)
            return net

        def build(**options):
            return prepare(Net(), options.get("ids", []))

        use(prepare(Net(), [0, 1]))
        use(build(ids=args.ids))
        """
    )
    first = call_named(model, "use", 0)
    assert "DataParallel(net, ids)" in [c for c, _ in shown(model, model.flow.values_at(first.args[0].value, first))]
    second = call_named(model, "use", 1)
    assert [c for c, _ in shown(model, model.flow.values_at(second.args[0].value, second))] == ["DataParallel(net, ids)", "Net()"]


def test_a_list_filled_before_the_call_is_not_taken_for_empty():
    model = model_of(
        """
        def prepare(net, ids=[]):
            if len(ids) > 0:
                net = DataParallel(net, ids)
            return net

        ids = []
        ids.append(0)
        use(prepare(Net(), ids))
        """
    )
    assert "DataParallel(net, ids)" in [c for c, _ in _values_of_use(model)]


def test_a_method_only_the_constructor_calls_sees_what_reaches_its_call():
    model = model_of(
        """
        class Ranker:
            def __init__(self, path, parallel):
                self.model = Encoder()
                self.load(path)
                if parallel:
                    self.model = DataParallel(self.model)

            def load(self, path):
                use(self.model)

            def score(self, x):
                return self.model(x)
        """
    )
    assert [c for c, _ in _values_of_use(model)] == ["Encoder()"]


def test_a_method_also_called_after_the_constructor_sees_every_value():
    model = model_of(
        """
        class Ranker:
            def __init__(self, path, parallel):
                self.model = Encoder()
                self.load(path)
                if parallel:
                    self.model = DataParallel(self.model)

            def load(self, path):
                use(self.model)

            def reset(self, path):
                self.load(path)
        """
    )
    assert "DataParallel(self.model)" in [c for c, _ in _values_of_use(model)]


def test_a_base_constructor_storing_self_build_runs_the_subclass_override():
    model = model_of(
        """
        class Experiment:
            def __init__(self, args):
                self.args = args
                self.model = self.build().to(args.device)

            def build(self):
                raise NotImplementedError

        class Forecast(Experiment):
            def build(self):
                net = Net()
                if self.args.multi_gpu:
                    net = DataParallel(net)
                return net

            def fit(self):
                use(self.model)
        """
    )
    assert sorted(c for c, _ in _values_of_use(model)) == ["DataParallel(net)", "Net()"]


def test_a_constructor_only_method_after_a_builder_method_sees_the_builder_value():
    model = model_of(
        """
        class Ranker:
            def __init__(self, path, parallel):
                self.build()
                if path is not None:
                    self.load(path)
                self.model = self.model.to("cuda")
                if parallel:
                    self.model = DataParallel(self.model)

            def load(self, path):
                use(self.model)

            def build(self):
                self.model = Encoder()
        """
    )
    # the constructor's own walk may already exist (what it leaves): the helper's is separate
    model.flow._exit_state(model.scope(call_named(model, "use")).class_scope, "self.model",
                           next(n for n in model.nodes() if isinstance(n, cst.FunctionDef) and n.name.value == "__init__"))
    assert [c for c, _ in _values_of_use(model)] == ["Encoder()"]


def test_calling_an_instance_runs_its_class_s_own_call_method_and_nothing_else():
    model = model_of(
        """
        class Scaler:
            def __call__(self, loss, optimizer):
                loss.backward()

        class Base:
            def __call__(self, batch):
                return batch

        class Meter(Base):
            pass

        class Net(nn.Module):
            def forward(self, x):
                return x

        def step(scaler, meter, net, fresh, loss, optimizer, batch):
            scaler(loss, optimizer)
            meter(batch)
            net(batch)
            fresh = Scaler() if batch else Meter()
            fresh(batch)

        step(Scaler(), Meter(), Net(), None, 1, 2, 3)
        """
    )

    def callee_of(name):
        found = model.flow.callee(call_named(model, name))
        return None if found is None else (found.model.code(found.node).split(":")[0], found.bound)

    assert callee_of("scaler") == ("def __call__(self, loss, optimizer)", True)
    assert callee_of("meter") == ("def __call__(self, batch)", True)  # from its base class
    assert callee_of("net") is None  # torch's Module.__call__, not a method of the project
    assert callee_of("fresh") is None  # one of two classes: cannot tell which runs
