"""The tuned-options cache (round trip, corruption, staleness) and options="tuned"."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import compiler
from compiler.options import Options
from compiler.tune import store as S
from compiler.tune.store import OptionsStore, TuneCacheWarning, tune_key
from tests.tune.kit import MM, mm_inputs

WINNER = Options(threads=1, innermost="n", unroll=2, block=1, tile=(4, 1, 8))


def _key(shapes: list[tuple[int, ...]], text: str = MM) -> tuple[str, dict]:
    return tune_key(text, "mm", shapes, ["float32", "float32"], "llvm")


def test_round_trip(tmp_path: Path) -> None:
    store = OptionsStore.resolve(tmp_path)
    assert store.path == tmp_path / S.FILENAME
    key, comp = _key([(7, 5), (5, 11)])
    assert store.get(key, Options) is None
    store.put(key, comp, WINNER, time_ms=1.5, default_ms=3.0)
    assert store.get(key, Options) == WINNER
    entry = json.loads(store.path.read_text())["entries"][key]
    assert entry["time_ms"] == 1.5 and entry["components"]["shapes"] == [[7, 5], [5, 11]]
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was moved in place


def test_key_components() -> None:
    base, comp = _key([(7, 5), (5, 11)])
    assert comp["def"].startswith("def mm(") and comp["cpu"] and comp["tcc"]
    reformatted = MM.replace("    C(m, n)", "  C( m,n )") + "\n# a comment\n"
    assert _key([(7, 5), (5, 11)], reformatted)[0] == base  # canonical text
    assert _key([(7, 5), (5, 12)])[0] != base
    assert tune_key(MM, "mm", [(7, 5), (5, 11)], ["float32"] * 2, "cuda")[0] != base


@pytest.mark.parametrize("damage", [b"{not json", b'{"schema": 99, "entries": {}}', b"\xff\xfe"])
def test_a_damaged_file_is_ignored_with_one_warning_and_rebuilt(
    tmp_path: Path, damage: bytes
) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(damage)
    store = OptionsStore.resolve(path)
    key, comp = _key([(3, 3), (3, 3)])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert store.get(key, Options) is None
        assert store.get(key, Options) is None
        store.put(key, comp, WINNER)
    assert [w.category for w in seen] == [TuneCacheWarning]
    assert "ignoring the tuned-options cache" in str(seen[0].message)
    assert json.loads(path.read_text())["schema"] == S.SCHEMA  # rebuilt
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert OptionsStore(path).get(key, Options) == WINNER


def test_a_stale_entry_is_a_miss(tmp_path: Path) -> None:
    store = OptionsStore.resolve(tmp_path)
    key, comp = _key([(2, 2), (2, 2)])
    store.put(key, comp, WINNER)
    data = json.loads(store.path.read_text())
    data["entries"][key]["options"]["warp_size"] = 32  # a field Options does not have
    store.path.write_text(json.dumps(data))
    assert store.get(key, Options) is None
    data["entries"][key]["options"] = {"unroll": 99}  # out of range now
    store.path.write_text(json.dumps(data))
    assert store.get(key, Options) is None


def test_options_tuned_picks_the_entry_of_each_shape(tmp_path: Path) -> None:
    store = OptionsStore.resolve(tmp_path)
    other = Options(threads=2, innermost=None, unroll=1, block=1, tile=())
    store.put(*_key([(7, 5), (5, 11)]), WINNER)
    store.put(*_key([(4, 5), (5, 3)]), other)
    k = compiler.define(MM, "mm", options="tuned", cache=tmp_path)
    small, wide, untuned = mm_inputs(4, 5, 3), mm_inputs(7, 5, 11), mm_inputs(6, 6, 6)
    assert k.options_for(*wide) == WINNER
    assert k.options_for(*small) == other
    assert k.options_for(*untuned) == Options()
    ref = compiler.define(MM, "mm", target="interp")
    for arrays in (small, wide, untuned, wide):
        np.testing.assert_allclose(k(*arrays)[0], ref(*arrays)[0], rtol=1e-5, atol=1e-5)
    # a kernel whose cache has no file uses the default everywhere
    plain = compiler.define(MM, "mm", options="tuned", cache=tmp_path / "elsewhere")
    assert plain.options_for(*wide) == Options()


def test_options_tuned_in_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    import compiler.torch as ct

    OptionsStore.resolve(True).put(*_key([(7, 5), (5, 11)]), WINNER)  # the default file
    layer = ct.define(MM, "mm", options="tuned")
    a, b = mm_inputs(7, 5, 11)
    assert layer.kernel.options_for(a, b) == WINNER
    (c,) = layer(torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5, atol=1e-5)
