"""A branch that raises is not a path (issue 28, "Facts, once"): the flow model ends a path at
`raise`, `assert False`, `sys.exit()`, `exit()` / `quit()` and `os._exit()`, so "wrapped on
every path" counts only the ways the program goes on, for every rule that asks it."""

from __future__ import annotations

import textwrap

import pytest

from conftest import fix, lint


def _found(code: str):
    return sorted((f.location.row, f.code) for f in lint(textwrap.dedent(code)))


ENDINGS = [
    "raise NotImplementedError(mode)",
    "sys.exit(f'unknown mode {mode}')",
    "exit(1)",
    "os._exit(1)",
    "assert False, mode",
    "quit()",
]


@pytest.mark.parametrize("ending", ENDINGS)
def test_module_read_is_fine_where_every_unwrapped_branch_ends(ending):
    code = f"""\
        import os
        import sys

        import torch.nn as nn


        def build(net, mode):
            if mode == "dp":
                net = nn.DataParallel(net)
            else:
                {ending}
            return net.module
    """
    assert _found(code) == []
    # The same branch going on is a bare path: `.module` raises there.
    assert _found(code.replace(ending, "print(mode)")) == [(12, "DPL016")]


def test_an_elif_chain_ending_in_raise_wraps_on_every_path():
    """DPL006 said "wrapped only on some paths" and offered no fix; every path that reaches
    the save holds a wrapper, so the fix saves `.module`'s state dict."""
    code = textwrap.dedent("""\
        import torch
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP


        def build(net, mode, path):
            if mode == "dp":
                net = nn.DataParallel(net)
            elif mode == "ddp":
                net = DDP(net)
            else:
                raise NotImplementedError(f"parallel mode {mode}")
            torch.save(net.state_dict(), path)
    """)
    findings = [f for f in lint(code) if f.code == "DPL006"]  # (DPL011 asks about the ranks)
    assert [(f.location.row, f.code) for f in findings] == [(13, "DPL006")]
    assert "only on some paths" not in findings[0].message
    assert "torch.save(net.module.state_dict(), path)" in fix(code)


def test_exit_imported_from_sys_ends_the_path():
    code = """\
        from sys import exit

        import torch.nn as nn


        def build(net, mode):
            if mode == "dp":
                net = nn.DataParallel(net)
            else:
                exit(2)
            return net.module
    """
    assert _found(code) == []


def test_a_local_function_named_exit_does_not_end_the_path():
    code = """\
        import torch.nn as nn


        def exit(code):
            print("leaving", code)


        def build(net, mode):
            if mode == "dp":
                net = nn.DataParallel(net)
            else:
                exit(1)
            return net.module
    """
    assert _found(code) == [(13, "DPL016")]


def test_attribute_read_through_a_wrapper_made_on_every_going_path():
    """DPL015 with the other branch exiting: the read is on the wrapper on every path, so
    its safe fix is offered (it was a path-dependent report without one)."""
    code = textwrap.dedent("""\
        import sys

        import torch.nn as nn


        def features_of(net, gpus):
            if gpus:
                net = nn.DataParallel(net, device_ids=gpus)
            else:
                sys.exit("this script needs GPUs")
            return net.features
    """)
    assert "return net.module.features" in fix(code, unsafe=False)
