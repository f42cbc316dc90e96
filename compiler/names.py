"""One supply of fresh names per compilation (a leaf: imports nothing of ours).

    supply = NameSupply(global_names, local_names)   # what the def already uses
    supply.fresh("A_grad")        -> "A_grad", or "A_grad_1" when taken  (def-wide)
    supply.scope(stmt_names)      -> a NameSupply for one statement's index variables
    supply.numbered("i", 2)       -> ("i0", "i1"), each skipping taken names

A pass that invents a name asks the supply, which knows every name the def uses,
so an invented name never captures one of the user's (a def that names its index
`z0` keeps it; the gradient's own index variable becomes `z0_1`). Names are handed
out in the order they are asked for, from a counter per name, so the output is
deterministic and golden files stay stable.

Two kinds of names:
- *global* names (tensors, sizes, builtins, the def's own name, and every name that
  `fresh` hands out) must be avoided by every statement;
- *local* names (index variables and lets) belong to one statement: a statement
  scope avoids the global names and that statement's locals only, so two statements
  may both use `i0`. `fresh` on the def-wide supply avoids the locals of every
  statement too, so a new tensor or size name never equals an index variable.
"""

from __future__ import annotations

from collections.abc import Iterable


class NameSupply:
    """Fresh names that clash with nothing already used (see the module doc)."""

    __slots__ = ("_global", "_taken")

    def __init__(self, global_names: Iterable[str] = (), local_names: Iterable[str] = ()) -> None:
        self._global: set[str] = set(global_names)
        self._taken: set[str] = self._global | set(local_names)

    def __contains__(self, name: object) -> bool:
        return name in self._taken

    def reserve(self, *names: str) -> None:
        """Mark `names` as used by the whole def (they are global from now on)."""
        self._global.update(names)
        self._taken.update(names)

    def fresh(self, base: str) -> str:
        """`base` if unused, else the first unused `base_1`, `base_2`, ...; reserved."""
        name, k = base, 0
        while name in self._taken:
            k += 1
            name = f"{base}_{k}"
        self._take(name)
        return name

    def numbered(self, prefix: str, count: int) -> tuple[str, ...]:
        """`count` unused names `prefix0`, `prefix1`, ... (a taken one is skipped)."""
        out: list[str] = []
        k = 0
        while len(out) < count:
            name = f"{prefix}{k}"
            k += 1
            if name not in self._taken:
                self._take(name)
                out.append(name)
        return tuple(out)

    def first_free(self, candidates: Iterable[str], prefix: str) -> str:
        """The first unused candidate, else the first unused `prefix0`, `prefix1`, ..."""
        for name in candidates:
            if name not in self._taken:
                self._take(name)
                return name
        return self.numbered(prefix, 1)[0]

    def scope(self, local_names: Iterable[str] = ()) -> NameSupply:
        """A supply for one statement: it avoids the global names and `local_names`;
        what it hands out stays local to the statement (the def-wide supply never
        sees it)."""
        return NameSupply(self._global, local_names)

    def _take(self, name: str) -> None:
        self._taken.add(name)
        self._global.add(name)


__all__ = ["NameSupply"]
