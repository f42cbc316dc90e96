"""The compile cache: keys, memory and disk hits, damaged entries, atomic writes, the CLI.

Every cached kernel's results are compared with the reference evaluator; disk hits
are checked to skip lowering (a lowering that raises must not be reached).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import compiler
import compiler.runtime.native as native
from compiler import pipeline
from compiler.cpu import cache as C
from compiler.diagnostics import OptionsError, ShapeError
from compiler.loops import DType
from compiler.options import Options

ROOT = Path(__file__).resolve().parents[2]
MATMUL = "def matmul(float(M, K) A, float(K, N) B) -> (C) {\n    C(m, n) +=! A(m, k) * B(k, n)\n}\n"
# The same def, laid out differently and commented: the same entry.
MATMUL_REFORMATTED = (
    "# a comment\ndef matmul(float(M,K) A, float(K,N) B) -> (C)\n{  C(m,n) +=! A(m,k)*B(k,n)  }\n"
)
GATHER = "def gather(float(N) A, int32(M) idx) -> (O) {\n    O(i) = A(idx(i))\n}\n"
TWO_STMTS = "def f(float(N) A) -> (B, C) {\n    B(i) = A(i) * 2.0\n    C(i) = B(i) + A(i)\n}\n"


def _arrays(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((7, 3)).astype(np.float32)
    return a, b


def _check_matmul(k: compiler.kernel.Kernel) -> None:
    a, b = _arrays(np.random.default_rng(0))
    (got,) = k(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def _define_and_run(src: str, cache: object) -> compiler.kernel.Kernel:
    """A kernel run once: a def whose sizes decide some of its code compiles, and
    writes its entry, at its first call (`runtime.native`)."""
    k = compiler.define(src, target="llvm", cache=cache)
    if src == GATHER:
        k(np.arange(4, dtype=np.float32), np.array([3, 0], np.int32))
    elif src == TWO_STMTS:
        k(np.arange(6, dtype=np.float32))
    else:
        k(*_arrays(np.random.default_rng(0)))
    return k


def _no_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("lowered although the entry was on disk")

    for name in ("lower_native", "lower_kernel"):
        if hasattr(native, name):
            monkeypatch.setattr(native, name, fail)
    monkeypatch.setattr(pipeline, "lower", fail)


def _entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.tcc"))


def _decode(path: Path) -> C.StoredEntry:
    """The entry at `path`, authenticated with its directory's secret."""
    return C.decode_entry(path.read_bytes(), path.stem, (path.parent / ".secret").read_bytes())


# ----------------------------------------------------------------------- keys


def _ranged(src: str, name: str | None = None) -> compiler.kernel.RangedDef:
    return compiler.define(src, name).ranged


def test_layout_and_comments_do_not_change_the_key() -> None:
    a = native.program_key(_ranged(MATMUL), Options())
    b = native.program_key(_ranged(MATMUL_REFORMATTED), Options())
    assert a == b and C.cache_key(a) == C.cache_key(b)


def test_each_key_component_changes_the_entry() -> None:
    base = native.program_key(_ranged(MATMUL), Options())
    expected = {
        "source", "entry", "dtypes", "output_bounds", "target", "options", "tcc",
        "compiler", "islpy", "llvmlite", "llvm", "triple", "cpu", "cpu_features",
    }  # fmt: skip
    assert expected <= set(base)
    keys = {C.cache_key(base)}
    for component in base:
        changed = dict(base, **{component: base[component] + "x"})
        keys.add(C.cache_key(changed))
    assert len(keys) == len(base) + 1


@pytest.mark.parametrize(
    ("other", "name", "options", "component"),
    [
        (MATMUL.replace("A(m, k) * B", "A(m, k) + B"), None, Options(), "source"),
        (MATMUL + MATMUL.replace("matmul", "mm"), "mm", Options(), "entry"),
        (MATMUL.replace("float(K, N) B", "double(K, N) B"), None, Options(), "dtypes"),
        (MATMUL, None, Options(block=16), "options"),
        (MATMUL, None, Options(innermost=None), "options"),
    ],
)
def test_a_real_change_changes_its_component(
    other: str, name: str | None, options: Options, component: str
) -> None:
    base = native.program_key(_ranged(MATMUL), Options())
    key = native.program_key(_ranged(other, name), options)
    assert key[component] != base[component]
    assert C.cache_key(key) != C.cache_key(base)


def test_environment_key_names_versions_and_host() -> None:
    env = C.environment_key()
    assert env["llvm"].count(".") == 2 and env["cpu"] and len(env["compiler"]) == 64
    env["cpu"] = "changed"  # a copy: the process's key is not changed
    assert C.environment_key()["cpu"] != "changed"


def test_default_directory_follows_the_environment() -> None:
    assert C.default_cache_dir({"XDG_CACHE_HOME": "/x/y"}) == Path("/x/y/tcc")
    assert C.default_cache_dir({}) == Path.home() / ".cache" / "tcc"
    assert C.default_cache_dir({"XDG_CACHE_HOME": "relative"}) == Path.home() / ".cache" / "tcc"


# ------------------------------------------------------------------ hits


def test_memory_hit_reuses_the_compiled_code(tmp_path: Path) -> None:
    k1 = compiler.define(MATMUL, target="llvm", cache=tmp_path)
    k2 = compiler.define(MATMUL_REFORMATTED, target="llvm", cache=tmp_path)
    assert k2._native.compiled is k1._native.compiled
    assert len(_entries(tmp_path)) == 1
    _check_matmul(k2)


def test_disk_hit_skips_lowering(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _define_and_run(MATMUL, C.CompileCache(tmp_path))
    _no_lowering(monkeypatch)
    fresh = C.CompileCache(tmp_path)  # a new process sees only the disk
    k = compiler.define(MATMUL_REFORMATTED, target="llvm", cache=fresh)
    _check_matmul(k)
    assert "define" in k._native.compiled.ir() and "matmul" in k._native.compiled.ir()


def test_disk_hit_of_a_phased_def(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _define_and_run(TWO_STMTS, C.CompileCache(tmp_path))
    _no_lowering(monkeypatch)
    k = compiler.define(TWO_STMTS, target="llvm", cache=C.CompileCache(tmp_path))
    assert k._native.function == first._native.function
    assert k._native.lowered.function == first._native.lowered.function
    a = np.arange(6, dtype=np.float32)
    for got, want in zip(k(a), compiler.define(TWO_STMTS, target="interp")(a), strict=True):
        np.testing.assert_array_equal(got, want)


def test_run_time_checks_point_into_the_current_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _define_and_run(GATHER, C.CompileCache(tmp_path))
    _no_lowering(monkeypatch)
    moved = "\n\n# moved down two lines\n" + GATHER.replace("= A(idx(i))", "=   A( idx(i) )")
    k = compiler.define(moved, target="llvm", cache=C.CompileCache(tmp_path))
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(k(a, np.array([3, 0], np.int32))[0], [3.0, 0.0])
    with pytest.raises(ShapeError) as err:
        k(a, np.array([1, 9], np.int32))
    span = err.value.diagnostics[0].span
    assert "index 9" in str(err.value) and span.line == 5
    assert span.text.startswith("A(")


def test_gradient_kernel_uses_the_cache_of_its_kernel(tmp_path: Path) -> None:
    src = "def f(float(N) A, float(N) B) -> (C) {\n    C(i) = A(i) * B(i)\n}\n"
    k = compiler.define(src, target="llvm", cache=tmp_path)
    assert k.grad.cache is k.cache and len(_entries(tmp_path)) == 2
    a, b, dc = (np.arange(1, 4, dtype=np.float32) * s for s in (1, 2, 3))
    da, db = k.vjp(a, b, grad_outputs=(dc,))
    np.testing.assert_allclose(da, dc * b)
    np.testing.assert_allclose(db, dc * a)


def test_cache_false_and_none_write_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    k = compiler.define(MATMUL, target="llvm", cache=False)
    assert k.cache is None
    _check_matmul(k)
    k = compiler.define(MATMUL, target="llvm", cache=None)
    assert k.cache is not None and k.cache.directory is None and not k.cache.on_disk
    _check_matmul(k)
    assert list(tmp_path.iterdir()) == []


def test_a_bad_cache_argument_is_an_options_error() -> None:
    with pytest.raises(OptionsError, match="cache="):
        compiler.define(MATMUL, target="llvm", cache=3)


# ------------------------------------------------------------ damaged entries


def _damage_cases(data: bytes) -> dict[str, bytes]:
    header_end = data.index(b"\n", len(C.MAGIC)) + 1
    flipped = bytearray(data)
    flipped[header_end + 10] ^= 0xFF
    other_key = data.replace(b'"key": "', b'"key": "0', 1)
    return {
        "truncated": data[: len(data) // 2],
        "empty": b"",
        "flipped byte": bytes(flipped),
        "garbage": os.urandom(len(data)),
        "other schema": data.replace(C.MAGIC, b"TCC-CACHE 999\n", 1),
        "other key": other_key,
        "bad header": C.MAGIC + b"{not json\n" + data[header_end:],
    }


@pytest.mark.parametrize(
    "case",
    ["truncated", "empty", "flipped byte", "garbage", "other schema", "other key", "bad header"],
)
def test_a_damaged_entry_is_rebuilt(tmp_path: Path, case: str) -> None:
    _define_and_run(MATMUL, C.CompileCache(tmp_path))
    (path,) = _entries(tmp_path)
    good = path.read_bytes()
    path.write_bytes(_damage_cases(good)[case])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k = compiler.define(MATMUL, target="llvm", cache=C.CompileCache(tmp_path))
    _check_matmul(k)
    assert _decode(path).object_code  # rewritten, valid again


def test_metadata_that_is_not_loop_ir_is_a_miss(tmp_path: Path) -> None:
    cache = C.CompileCache(tmp_path)
    _define_and_run(MATMUL, cache)
    (path,) = _entries(tmp_path)
    entry = _decode(path)
    bad = C.StoredEntry({"function": {"@": "os.system", "x": 1}, "checks": []}, b"", "")
    path.write_bytes(C.encode_entry(bad, path.stem, (tmp_path / ".secret").read_bytes()))
    k = compiler.define(MATMUL, target="llvm", cache=C.CompileCache(tmp_path))
    _check_matmul(k)
    assert _decode(path).metadata == entry.metadata


def test_an_unwritable_directory_warns_once_and_caches_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory should be")
    cache = C.CompileCache(blocker / "tcc")
    with pytest.warns(C.CacheWarning, match="memory only") as record:
        k1 = _define_and_run(MATMUL, cache)
        _define_and_run(MATMUL.replace("+=!", "max=!"), cache)
    assert len(record) == 1 and not cache.on_disk
    k2 = compiler.define(MATMUL, target="llvm", cache=cache)
    assert k2._native.compiled is k1._native.compiled
    _check_matmul(k2)


def test_loop_ir_round_trips_through_json(tmp_path: Path) -> None:
    for path in sorted((ROOT / "examples").glob("*.tc")):
        k = compiler.define(path.read_text(), target="llvm", cache=False)
        f = k._native.function
        data = json.loads(json.dumps(C.function_to_json(f)))
        assert C.function_from_json(data) == f
    assert len(json.dumps(data)) < 40_000  # each buffer once (register-tiled conv: ~21 KB)
    bad_rows = {
        "unknown class": [["Popen", "x"]],
        "bad enum": [["Const", 1, "int65"]],
        "bad reference": [["VarRef", "i", "int64"], ["Unary", "-", 7]],
        "too few fields": [["Const", 1]],
        "not a Function": [["Const", 1, "int64"]],
    }
    for rows in bad_rows.values():
        with pytest.raises(C.CacheFormatError):
            C.function_from_json({"nodes": rows, "root": len(rows) - 1})
    assert C.function_from_json(C.function_to_json(f)).buffers[0].dtype is DType.FLOAT32


def test_equal_constants_of_different_python_types_stay_apart() -> None:
    from compiler.loops import Bin, BinOp, Block, Buffer, Const, Function, Role, Store

    out = Buffer("O", DType.FLOAT64, (Const(2, DType.INT64),), Role.OUT)
    one_int, one_float = Const(1, DType.FLOAT64), Const(1.0, DType.FLOAT64)
    body = Block(
        (
            Store(out, (Const(0, DType.INT64),), Bin(BinOp.ADD, one_int, one_int)),
            Store(out, (Const(1, DType.INT64),), Bin(BinOp.ADD, one_float, one_float)),
        )
    )
    f = Function("f", (out,), (), body)
    assert repr(C.function_from_json(C.function_to_json(f))) == repr(f)


# --------------------------------------------------------------- atomic writes

_WRITER = """
import sys
from pathlib import Path
from compiler.cpu.cache import StoredEntry, _write_atomically, encode_entry
path, fill = Path(sys.argv[1]), sys.argv[2]
for n in range(40):
    entry = StoredEntry({"n": n, "fill": fill}, fill.encode() * 300_000, fill * 1000)
    _write_atomically(path, encode_entry(entry, "k", b"s" * 32))
"""


def test_concurrent_writers_never_leave_a_partial_entry(tmp_path: Path) -> None:
    path = tmp_path / "k.tcc"
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), fill], cwd=ROOT)
        for fill in ("a", "b")
    ]
    seen = 0
    while any(p.poll() is None for p in procs):
        if path.exists():
            entry = C.decode_entry(path.read_bytes(), "k", b"s" * 32)  # raises if partial
            fill = entry.metadata["fill"]
            assert entry.object_code == fill.encode() * 300_000
            seen += 1
    assert [p.wait() for p in procs] == [0, 0]
    assert seen > 0 and C.decode_entry(path.read_bytes(), "k", b"s" * 32).metadata["n"] == 39
    assert [p.name for p in tmp_path.iterdir()] == ["k.tcc"]  # no temporaries left


# ---------------------------------------------------------------- info, clear, CLI


def test_info_and_clear(tmp_path: Path) -> None:
    cache = C.CompileCache(tmp_path / "c")
    assert cache.info() == C.CacheInfo(tmp_path / "c", 0, 0)
    _define_and_run(MATMUL, cache)
    _define_and_run(GATHER, cache)
    info = cache.info()
    assert info.entries == 2 and info.size_bytes == sum(
        p.stat().st_size for p in _entries(info.directory)
    )
    assert cache.clear() == 2 and cache.info().entries == 0


def _tcc(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, XDG_CACHE_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "compiler", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_cli_cache_info_and_clear(tmp_path: Path) -> None:
    tc = tmp_path / "mm.tc"
    tc.write_text(MATMUL)
    empty = _tcc("cache", "info", home=tmp_path)
    assert empty.returncode == 0, empty.stderr
    assert str(tmp_path / "tcc") in empty.stdout and "entries: 0" in empty.stdout
    script = (  # a define and its first call, which compiles and writes the entry
        "import compiler, sys, numpy as np; "
        "k = compiler.define(open(sys.argv[1]).read(), target='llvm'); "
        "k(np.ones((2, 3), np.float32), np.ones((3, 4), np.float32))"
    )
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    subprocess.run([sys.executable, "-c", script, str(tc)], cwd=ROOT, env=env, check=True)
    full = _tcc("cache", "info", home=tmp_path)
    assert full.returncode == 0 and "entries: 1" in full.stdout
    size = int(full.stdout.split("size: ")[1].split()[0])
    assert size == sum(p.stat().st_size for p in (tmp_path / "tcc").glob("*.tcc"))
    cleared = _tcc("cache", "clear", home=tmp_path)
    assert cleared.returncode == 0 and "removed 1" in cleared.stdout
    assert "entries: 0" in _tcc("cache", "info", home=tmp_path).stdout
    bad = _tcc("cache", "frobnicate", home=tmp_path)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_kernels_that_differ_in_threads_alone_share_their_code() -> None:
    """The thread count is an argument of the compiled code, not part of it: a kernel
    for 2 threads reuses the code of one for 1 thread, and each runs on its own."""
    cache = C.CompileCache(None)
    one = compiler.define(MATMUL, options=Options(threads=1), cache=cache)
    two = compiler.define(MATMUL, options=Options(threads=2), cache=cache)
    assert native.program_key(one.ranged, one.options) == native.program_key(
        two.ranged, two.options
    )
    assert one._native.code is two._native.code
    assert (one.info()["threads"], two.info()["threads"]) == (1, 2)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((67, 33), np.float32), rng.standard_normal((33, 41), np.float32)
    for k in (one, two):
        np.testing.assert_allclose(k(a, b)[0], a @ b, rtol=1e-5, atol=1e-5)
