"""Collate functions that cut a loader's batch into training batches."""

from __future__ import annotations

import ast


def cuts_fixed_groups(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``function`` cuts the batch it is handed into a number of groups that does not depend on the batch:
    it returns a list it appends to only in ``for i in range(K)`` loops whose ``K`` reads nothing computed from the
    batch (``real_batchsize = len(batch) // expand``, then ``for i in range(expand): output.append(...)``). Each
    group then holds ``len(batch) // K`` samples, so dividing the loader's batch divides every group."""
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if not positional:
        return False
    derived = {positional[0]}
    assigns = [n for n in ast.walk(function) if isinstance(n, ast.Assign)]
    for _ in range(3):
        derived |= {
            t.id for node in assigns if any(isinstance(n, ast.Name) and n.id in derived for n in ast.walk(node.value))
            for t in node.targets if isinstance(t, ast.Name)
        }  # fmt: skip
    returned = [n.value for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None]
    if len(returned) != 1 or not isinstance(returned[0], ast.Name) or returned[0].id in derived:
        return False
    output = returned[0].id
    appends = [
        n for n in ast.walk(function)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append"
        and isinstance(n.func.value, ast.Name) and n.func.value.id == output
    ]  # fmt: skip
    if not appends:
        return False
    loops = [n for n in ast.walk(function) if isinstance(n, ast.For)]
    for append in appends:
        around = [loop for loop in loops if loop.lineno <= append.lineno <= (loop.end_lineno or loop.lineno) and loop is not append]
        if not around or not all(
            isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "range"
            and not any(isinstance(n, ast.Name) and n.id in derived for n in ast.walk(loop.iter))
            for loop in around
        ):  # fmt: skip
            return False
    return True
