"""The API reference's docstrings of compiler.torch: complete, and their examples run."""

from __future__ import annotations

import doctest

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

import compiler.torch as tct  # noqa: E402
import compiler.torch.module  # noqa: E402


@pytest.mark.parametrize(
    ("function", "sections"),
    [
        (tct.define, ("Args:", "Returns:", "Raises:", "Example:", "training (bool | None)")),
        (tct.Layer.__init__, ("Args:", "Raises:", "params (", "training (bool | None)")),
        (tct.Layer, ("Attributes:", "Example:")),
        (tct.TCLayer.__call__, ("Args:", "Returns:", "Raises:")),
    ],
)
def test_public_docstrings_have_their_sections(function: object, sections: tuple) -> None:
    doc = function.__doc__ or ""
    for section in sections:
        assert section in doc, (function, section)


def test_help_of_layer_init_is_ours() -> None:
    assert "Compile the def and create its parameters" in (tct.Layer.__init__.__doc__ or "")


@pytest.mark.parametrize("module", [tct, compiler.torch.module])
def test_docstring_examples_run(module: object) -> None:
    torch.manual_seed(0)
    failed, attempted = doctest.testmod(module, verbose=False)  # type: ignore[arg-type]
    assert attempted > 0 and failed == 0
