"""TC's string templates: `{name}` placeholders filled from `constants=` before parsing.

    substitute("def f(float(N) A) -> (B) {{ B(i) = A(i) * {scale} }}", {"scale": 2.0})

Python's `str.format` rules as TC used them: `{{` and `}}` are literal braces, a
placeholder may carry a format spec (`{eps:.1e}`); every placeholder needs a value and
every constant a placeholder, otherwise a TCError points at the template text.
"""

from __future__ import annotations

from collections.abc import Mapping

from compiler.diagnostics import TCError, did_you_mean
from compiler.frontend.source import Source, Span


def substitute(text: str, constants: Mapping[str, object]) -> str:
    """Fill `{name}` placeholders as Python's `str.format` did in TC (`{{` and `}}`
    are literal braces). Every placeholder needs a value and every constant a
    placeholder; otherwise a TCError names it."""
    source = Source("<string>", text)
    out: list[str] = []
    used: set[str] = set()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "{}" and text.startswith(ch * 2, i):
            out.append(ch)
            i += 2
        elif ch == "}":
            raise TCError(
                "single '}' in a template; write '}}' for a literal brace",
                Span(source, i, i + 1),
                hint="with constants=, the def's braces must be doubled: `{{ ... }}`",
            )
        elif ch == "{":
            end = text.find("}", i)
            if end < 0:
                raise TCError(
                    "unclosed '{' in a template; write '{{' for a literal brace",
                    Span(source, i, i + 1),
                    hint="with constants=, the def's braces must be doubled: `{{ ... }}`",
                )
            out.append(_placeholder(text[i + 1 : end], constants, Span(source, i, end + 1)))
            used.add(text[i + 1 : end].partition(":")[0].strip())
            i = end + 1
        else:
            out.append(ch)
            i += 1
    unused = sorted(set(constants) - used)
    if unused:
        raise TCError(
            f"constant '{unused[0]}' has no placeholder {{{unused[0]}}} in the source",
            hint=did_you_mean(unused[0], used) or "remove it from constants=",
        )
    return "".join(out)


def _placeholder(field: str, constants: Mapping[str, object], span: Span) -> str:
    key, _, spec = field.partition(":")
    key = key.strip()
    if not key.isidentifier():
        raise TCError(
            f"placeholder '{{{field}}}' is not a name",
            span,
            hint="placeholders are `{name}` with name a key of constants=; "
            "write '{{' and '}}' for literal braces",
        )
    if key not in constants:
        raise TCError(
            f"no value for placeholder '{{{key}}}' in constants=",
            span,
            hint=did_you_mean(key, constants) or f"pass constants={{'{key}': ...}}",
        )
    try:
        return format(constants[key], spec)
    except (TypeError, ValueError) as err:
        raise TCError(f"cannot format constant '{key}' with spec '{spec}': {err}", span) from None


__all__ = ["substitute"]
