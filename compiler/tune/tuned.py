"""`define(..., options="tuned")`: a kernel that runs each input size with its tuned Options.

    k = compiler.define(source, "mm", options="tuned")       # after compiler.autotune(...)
    C, = k(A, B)              # A, B of a tuned size: the cached winner; otherwise the default
    k.options_for(A, B)       # the Options that call uses

`define` cannot know the input sizes, and the tuned-options cache is keyed by them, so
the choice is made per call signature (the input shapes; dtypes are fixed by the def):
on the first call with a signature the cache (`compiler.tune.store`, the file next to
the compile cache that `cache=` names) is read once, and the kernel compiled with the
winner -- or this kernel itself, compiled with the model default at define time -- is
kept for every later call with that signature. Tune before the first call of a size:
an entry written later is not seen by a kernel that already ran that size.

`TunedKernel.grad` is a tuned kernel of the gradient def, so `vjp` and PyTorch layers
use what `autotune(..., grad=True)` found.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from compiler.kernel import Kernel
from compiler.tune.store import OptionsStore, tune_key


class TunedKernel(Kernel):
    """A Kernel that picks its Options per call signature from the tuned-options cache."""

    def __init__(
        self,
        source: str,
        name: str | None = None,
        *,
        constants: Mapping[str, object] | None = None,
        target: str = "llvm",
        backward: object = None,
        cache: object = True,
    ) -> None:
        super().__init__(
            source, name, constants=constants, target=target, backward=backward, cache=cache
        )
        directory = getattr(self.cache, "directory", None)  # define's cache= directory
        self._store = OptionsStore.resolve(True if directory is None else directory)
        self._by_signature: dict[tuple[tuple[int, ...], ...], Kernel] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<TunedKernel {self.name} target={self.target!r}>"

    def kernel_for(self, *arrays: Any) -> Kernel:
        """The kernel that runs these inputs: tuned for their shapes, else self."""
        signature = tuple(tuple(np.shape(a)) for a in arrays)
        found = self._by_signature.get(signature)
        if found is None:
            found = self._lookup(signature)
            with self._lock:
                self._by_signature[signature] = found
        return found

    def options_for(self, *arrays: Any) -> Any:
        """The Options a call with these inputs uses."""
        return self.kernel_for(*arrays).options

    def __call__(self, *arrays: Any, out: Any = None) -> tuple[np.ndarray, ...]:
        kernel = self.kernel_for(*arrays)
        if kernel is self:
            return super().__call__(*arrays, out=out)
        return kernel(*arrays, out=out)

    def _lookup(self, signature: tuple[tuple[int, ...], ...]) -> Kernel:
        from compiler.interp.expr import NP_DTYPE

        infos = self.ranged.checked.inputs
        if len(signature) != len(infos) or self.target == "interp":
            return self  # the call reports a wrong count; interp has no options
        dtypes = [str(np.dtype(NP_DTYPE[t.dtype])) for t in infos]
        key, _ = tune_key(self.text, self.name, signature, dtypes, self.target)
        options = self._store.get(key, type(self.options))
        if options is None or options == self.options:
            return self
        return Kernel(
            self.text,
            self.name,
            target=self.target,
            options=options,
            backward=self.backward,
            cache=self.cache,
        )

    @functools.cached_property
    def grad(self) -> Kernel:  # type: ignore[override]
        """The gradient def as a tuned kernel (its own cache entries, per signature)."""
        from compiler.backward import gradient_source

        if self.backward is not None:
            return TunedKernel(self.text, self.backward, target=self.target, cache=self.cache)
        return TunedKernel(gradient_source(self), target=self.target, cache=self.cache)


__all__ = ["TunedKernel"]
