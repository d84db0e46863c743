"""`verify` on every runtime fixture (2 gloo ranks for the distributed ones): verdicts and evidence.

A rule that is registered must flag the fixture's misuse line, and its finding gets the
verdict below. Each entry: (fixture, code, text on the flagged line, verdict, substrings
of the original run's evidence, substrings of the fixed run's evidence).
"""

from __future__ import annotations

import pytest

from .support import RUNTIME_FIXTURES, needs_torch, uses
from dplint.registry import all_rules
from dplint.rule import Finding, Position, Severity

pytestmark = [pytest.mark.runtime, needs_torch]

LINE_43_ERROR = "line 43: DataLoader raised ValueError: sampler option is mutually exclusive with shuffle"
STRIP_48 = (
    'line 48: Net.load_state_dict raised RuntimeError: Missing key(s) "encoder.weight", "encoder.bias", ...; '
    'Unexpected key(s) "module.encoder.weight", "module.encoder.bias", ... (verify skipped the load and went on)'
)
OPTIMIZER_37 = (
    "DataParallel wrapped a SGD (line 37); wrapper.zero_grad() cleared nothing (4 gradients stayed non-zero "
    "and accumulate); wrapper.step raised AttributeError: 'DataParallel' object has no attribute 'step' "
    "(verify used the optimizer's own)"
)

EXPECTED = [
    ("wrapper_train", "DPL001", "        model.train()", "no-runtime-effect",
     ["at 3 of 6 training forwards (line 49) the wrapper's .training was False while the inner module was True "
      "with 4/4 submodules training: the forward used the inner module's flags"],
     ["agreed (.training=True) at all 6 training forwards", "no behavioural difference, only the wrapper's flag differed"]),
    ("wrapper_bypass", "DPL002", "outputs = model(inputs)", "confirmed",
     ["6 of 6 training forwards called the inner model directly (line 57): DDP's reducer never ran; "
      "after step 6 the parameters differ across ranks"],
     ["all 6 training forwards went through DDP; after step 6 the parameters are identical on all 2 ranks"]),
    ("loss_on_cpu", "DPL003", "criterion(outputs.cpu()", "needs-gpu",
     ["loss on cpu (backward() at line 44), parameters on cpu, 0 device copies in its graph", "without CUDA `.cpu()` copies nothing"],
     ["the same losses: results are identical, the cost exists only on a GPU"]),
    ("strip_module", "DPL004", "eval_model.load_state_dict", "confirmed", [STRIP_48], ["Net.load_state_dict loaded all 4 keys"]),
    ("strict_false_load", "DPL005", "strict=False)", "confirmed",
     ['line 60: Net.load_state_dict(strict=False) loaded 0 of 4 keys and raised nothing: missing "encoder.weight"',
      'unexpected "module.encoder.weight"', "nothing was loaded"], []),
    ("save_wrapped_state_dict", "DPL006", "torch.save(", "confirmed",
     ['line 47: torch.save wrote 4 state-dict keys, all starting with "module." ("module.encoder.weight", "module.encoder.bias")'],
     ['torch.save wrote 4 state-dict keys, none starting with "module." ("encoder.weight", "encoder.bias")']),
    ("sampler_shuffle", "DPL007", "batch_size=8, shuffle=True", "confirmed", [LINE_43_ERROR],
     ["DataLoader built with a DistributedSampler, no error"]),
    ("missing_set_epoch", "DPL008", "DistributedSampler(dataset", "confirmed",
     ["on every rank epochs 1 and 2 started alike (rank 0 [", "; rank 1 [",
      "sampler.epoch stayed 0, loop at line 52): every epoch repeats one order"],
     ["on every rank epoch 2 started in a new order", "sampler.epoch 0 then 1"]),
    ("late_cuda_visible_devices", "DPL009", 'os.environ["CUDA_VISIBLE_DEVICES"]', "needs-gpu",
     ["torch.cuda.is_available() (line 30) ran before CUDA_VISIBLE_DEVICES='0' was written (line 32); "
      "without CUDA there is nothing to hide"], []),
    ("optimizer_in_dataparallel", "DPL010", "nn.DataParallel(optimizer)", "confirmed", [OPTIMIZER_37],
     ["the optimizer is used directly: 6 optimizer steps ran"]),
    ("unguarded_rank_save", "DPL011", "torch.save(", "confirmed",
     ["ranks 0 and 1 both wrote last.pt (line 59) at the same time"], []),
    ("scalar_gather", "DPL012", "loss = model(", "needs-gpu",
     ["the forward returned a 0-d loss through DataParallel (line 53) on one device: nothing shows with 0 GPU(s); this needs 2"],
     []),
    ("hand_rolled_strip", "DPL013", 'state = {k.lstrip("module.")', "confirmed",
     ['line 50: Net.load_state_dict raised RuntimeError: Missing key(s) "encoder.weight", "encoder.bias", ...; '
      'Unexpected key(s) "ncoder.weight", "ncoder.bias", ...'],
     ["Net.load_state_dict loaded all 4 keys"]),
    # Every misuse in one DDP script: one run shows them all (verify goes past the errors).
    ("all_misuses", "DPL009", 'os.environ["CUDA_VISIBLE_DEVICES"]', "needs-gpu",
     ["torch.cuda.is_available() (line 49) ran before CUDA_VISIBLE_DEVICES='0' was written (line 51)"], []),
    ("all_misuses", "DPL008", "DistributedSampler(train_set", "confirmed", ["every epoch repeats one order"],
     ["epoch 2 started in a new order"]),
    ("all_misuses", "DPL007", "shuffle=True, sampler", "confirmed",
     ["line 65: DataLoader raised ValueError: sampler option is mutually exclusive with shuffle"], ["no error"]),
    ("all_misuses", "DPL010", "nn.DataParallel(optimizer)", "confirmed",
     ["DataParallel wrapped a SGD (line 71); wrapper.zero_grad() cleared nothing", "'DataParallel' object has no attribute 'step'"],
     []),
    ("all_misuses", "DPL001", "model.train()", "no-runtime-effect",
     ["at 3 of 6 training forwards (line 79) the wrapper's .training was False while the inner module was True"],
     ["no behavioural difference, only the wrapper's flag differed"]),
    ("all_misuses", "DPL002", "outputs = model(inputs)", "confirmed",
     ["6 of 6 training forwards called the inner model directly (line 79): DDP's reducer never ran",
      "parameters differ across ranks"], ["parameters are identical on all 2 ranks"]),
    ("all_misuses", "DPL003", "criterion(outputs.cpu()", "needs-gpu", ["without CUDA `.cpu()` copies nothing"], []),
    ("all_misuses", "DPL011", '"last.pt")', "confirmed", ["ranks 0 and 1 both wrote last.pt (line 86) at the same time"], []),
    ("all_misuses", "DPL006", '"checkpoint.pt")', "confirmed",
     ['line 89: torch.save wrote 9 state-dict keys, all starting with "module."'], ['none starting with "module."']),
    ("all_misuses", "DPL004", "plain.load_state_dict", "confirmed",
     ['line 94: Net.load_state_dict raised RuntimeError: Missing key(s) "encoder.weight"'], ["loaded all 9 keys"]),
    ("all_misuses", "DPL004", "finetune.load_state_dict", "confirmed",
     ["line 96: Net.load_state_dict(strict=False) loaded 0 of 9 keys and raised nothing"], ["loaded all 9 keys"]),
    ("all_misuses", "DPL005", "finetune.load_state_dict", "confirmed", ["nothing was loaded"], []),
    ("all_misuses", "DPL013", 'k.lstrip("module.")', "confirmed",
     ['line 99: Net.load_state_dict raised RuntimeError: Missing key(s) "encoder.weight", "encoder.bias", ...; '
      'Unexpected key(s) "ncoder.weight"'], ["loaded all 9 keys"]),
    ("all_misuses", "DPL012", "out = loss_model(", "needs-gpu", ["returned a 0-d loss through DataParallel (line 105)"], []),
]


# DPL014-DPL017 crash a run, hang it or need two GPUs, so each has a script of its own, run by
# default (all_misuses could not go on past them). (fixture, code, snippet, verdict, original, fixed)
ONE_RUN_EACH = [
    ("missing_set_device", "DPL014", 'dist.init_process_group("nccl")', "needs-gpu",
     ["with 0 CUDA device(s) every rank shares one GPU anyway: the finding needs two GPUs or more"], []),
    ("attribute_through_wrapper", "DPL015", "features = model.embed(", "confirmed",
     ["raised AttributeError: 'DistributedDataParallel' object has no attribute 'embed' at line 38"],
     ["the same code ran without an error (finished"]),
    ("module_on_bare_model", "DPL016", "model.module.state_dict()", "confirmed",
     ["rank 0 raised AttributeError: 'Sequential' object has no attribute 'module' at line 26"],
     ["the same code ran without an error (finished)"]),
    ("collective_under_rank_guard", "DPL017", "dist.all_reduce(total)", "confirmed",
     # gloo: rank 0 waits until the timeout, or fails inside the collective once rank 1 has left
     ["only rank(s) 0 entered the collective at line 25; rank(s) 1 never did"],
     ["no automatic fix for this finding"]),
]


def registered(code: str) -> bool:
    return any(rule.code == code for rule in all_rules())


def locate(fixture: str, snippet: str) -> tuple[int, int]:
    lines = (RUNTIME_FIXTURES / f"{fixture}.py").read_text().splitlines()
    rows = [row for row, line in enumerate(lines, 1) if snippet in line]
    assert len(rows) == 1, f"{snippet!r} is on {len(rows)} lines of {fixture}.py"
    return rows[0], lines[rows[0] - 1].index(snippet) + 1


def result_for(report, fixture: str, code: str, snippet: str):
    """The verdict on the finding at the snippet's line. Until the rule is registered, a
    finding placed there by hand is judged (with no fix: the fixed copy keeps the code)."""
    row, column = locate(fixture, snippet)
    if registered(code):
        found = [r for r in report.results if r.finding.code == code and r.finding.location.row == row]
        assert found, f"{code} does not flag line {row} of {fixture}.py: {[(r.finding.code, r.finding.location.row) for r in report.results]}"
        return found[0]
    from dplint.runtime_check.runner import judge_all

    text = (RUNTIME_FIXTURES / f"{fixture}.py").read_text()
    finding = Finding(code, code, "placed by the test", Severity.ERROR, report.script,
                      Position(row, column), Position(row, column + len(snippet)))
    return judge_all(text, report.fixed_text, [finding], [finding], report)[0]


def slow_unless_all_misuses(entry):
    """all_misuses shows every probe of DPL001-DPL013 in one launch; the one-misuse fixtures of those
    rules, and DPL014's needs-gpu run on a CPU machine, are the slow remainder."""
    fixture, code, snippet = entry[:3]
    shown_on_cpu = fixture == "all_misuses" or (entry in ONE_RUN_EACH and entry[3] != "needs-gpu")
    marks = () if shown_on_cpu else (pytest.mark.slow,)
    return pytest.param(*entry, marks=marks, id=f"{fixture}-{code}-{snippet[:20]}")


@pytest.mark.parametrize("fixture, code, snippet, verdict, original, fixed",
                         [slow_unless_all_misuses(e) for e in EXPECTED + ONE_RUN_EACH])
def test_verdict_and_evidence(verified, fixture, code, snippet, verdict, original, fixed):
    result = result_for(verified(fixture), fixture, code, snippet)
    assert (result.verdict.value, result.finding.code) == (verdict, code), (result.original, result.fixed)
    for text in original:
        assert text in result.original
    for text in fixed:
        assert text in result.fixed


# The misuse a fixture shows may need another one as its cause, which the rules rightly flag too:
# strict=False silently loads nothing because the checkpoint was saved from the wrapper.
CAUSES = {"strict_false_load": {"DPL006"}}
SINGLE = sorted({fixture for fixture, *_ in EXPECTED} - {"all_misuses"})


@pytest.mark.slow
@pytest.mark.parametrize("fixture", SINGLE)
def test_one_misuse_per_fixture(verified, fixture):
    """Besides its own rule's findings, no registered rule flags a single-misuse fixture."""
    report = verified(fixture)
    (own,) = {code for name, code, *_ in EXPECTED if name == fixture}
    assert {r.finding.code for r in report.results} <= {own} | CAUSES.get(fixture, set())
    assert not report.errors
    assert report.runs["original"].stop_reason().startswith("finished")


def test_every_code_has_an_expectation():
    expected = {code for fixture, code, *_ in EXPECTED if fixture == "all_misuses"}
    assert expected == {f"DPL{n:03d}" for n in range(1, 14)}
    assert {code for fixture, code, *_ in EXPECTED if fixture != "all_misuses"} == expected
    assert [code for _, code, *_ in ONE_RUN_EACH] == ["DPL014", "DPL015", "DPL016", "DPL017"]
    assert {rule.code for rule in all_rules() if rule.code != "DPL100"} == expected | {"DPL014", "DPL015", "DPL016", "DPL017"}


@uses("all_misuses")
def test_all_misuses_runs_every_rank_to_the_end(verified):
    report = verified("all_misuses")
    for label in ("original", "fixed"):
        run = report.runs[label]
        assert run.ranks == [0, 1]
        assert [end["status"] for end in run.ends] == ["finished", "finished"]
        assert run.all("process-group")[0]["backend"] == "gloo"
    recovered = {(e["line"], e["error"].split(":")[0]) for e in report.runs["original"].recoveries()}
    assert recovered == {(65, "ValueError"), (82, "AttributeError"), (94, "RuntimeError"), (99, "RuntimeError")}
    assert report.exit_code == 0
