"""What a script's command-line options default to, where its own argparse calls say so."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from .syntax import argument

if TYPE_CHECKING:
    from .module import Analysis

_ADD_ARGUMENT = m.Call(func=m.Attribute(attr=m.Name("add_argument")))


def option_destination(call: cst.Call) -> str | None:
    """The attribute ``parser.add_argument(...)`` stores its value in, as argparse names it.

    ``dest=`` where given; else the first long option (``--batch-size`` -> ``batch_size``),
    else the first short one, else a positional argument's own name.
    """
    dest = argument(call, 99, "dest")
    if dest is not None:
        return dest.evaluated_value if isinstance(dest, cst.SimpleString) else None  # type: ignore[return-value]
    flags = [a.value.evaluated_value for a in call.args if a.keyword is None and isinstance(a.value, cst.SimpleString)]
    if not flags or not all(isinstance(f, str) for f in flags):
        return None
    chosen = next((f for f in flags if f.startswith("--")), flags[0])
    return chosen.lstrip("-").replace("-", "_") or None


def integer_option_default(analysis: Analysis, value: cst.BaseExpression) -> int | None:
    """The integer ``args.batch_size`` defaults to, where the file declares that option with ``default=<int>``.

    Every ``add_argument`` of the file that stores into the same attribute must give an
    integer literal (a script may declare the option in two parsers); the smallest is
    returned. None where the value is not an option's attribute, or any declaration's
    default is not an integer literal, or the file declares no such option.
    """
    if not m.matches(value, m.Attribute(value=m.Name())):
        return None
    attribute = value.attr.value  # type: ignore[attr-defined]
    defaults: list[int] = []
    for call in analysis.findall(_ADD_ARGUMENT):
        assert isinstance(call, cst.Call)
        if option_destination(call) != attribute:
            continue
        default = argument(call, 99, "default")
        if not isinstance(default, cst.Integer):
            return None
        defaults.append(int(default.evaluated_value))
    if not defaults:
        # Declared in another module of the project (an options/ package), where the project read it.
        return analysis.role.option_default(attribute)
    return min(defaults)
