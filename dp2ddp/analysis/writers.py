"""Writes whose place or whose safety depends on code convert cannot rewrite: one fact, two uses.

``convert`` reports these and leaves them as they are (DDP422, DDP423), so the
converted script still holds them; ``check`` reports the same calls in any DDP
script. Each user adds its own test of whether a call already runs on the main
process only: convert reads the DataParallel script, check the DDP one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m
from libcst.metadata import QualifiedNameSource

from . import names
from .effects import opens_for_writing
from .syntax import call_to, code_of

if TYPE_CHECKING:
    from .module import Analysis

# Names of functions that write somewhere: `progress_bar`, `save_checkpoint`, `log_metrics`, `plot_curve`;
# TensorBoard-style `add_*` writers of another file's logger: `logger.add_imgs(...)`, `board.add_scalars(...)`.
WRITER_NAME = re.compile(
    r"progress|print|log|save|write|dump|plot|draw|visuali[sz]e|show"
    r"|^add_(scalars?|images?|imgs|figure|histogram|text|graph|audio|video|embedding|pr_curve)$",
    re.IGNORECASE,
)
# `save_on_master`, `log_if_main`, `print_rank_0`: the name says the function picks the process itself.
GUARDS_ITSELF = re.compile(r"master|main|rank_?0|rank_zero|primary", re.IGNORECASE)


@dataclass(frozen=True)
class PerProcessPath:
    """``assign`` binds a value each process draws for itself (``draw``), which later names ``path``'s target."""

    assign: cst.Assign
    draw: cst.Call
    path: str


def per_process_paths(analysis: Analysis, counts: Callable[[cst.Call], bool] = lambda call: True) -> list[PerProcessPath]:
    """``run_id = random.randint(...)`` or a timestamp that then names a file, a directory or a writer.

    ``counts`` says which of the calls that write at a path matter: check
    counts only those every process runs.
    """
    found = []
    for assign in analysis.nodes(cst.Assign):
        if m.matches(assign.value, m.Call(func=m.Name(names.MAIN_VALUE_HELPER))):
            continue  # the main process's value, handed to every process
        draws = [c for c in analysis.within(assign.value, cst.Call) if analysis.matches(c, call_to(names.PER_PROCESS_VALUES))]
        if not draws:
            continue
        bound = {code_of(t.target) for t in assign.targets if isinstance(t.target, (cst.Name, cst.Attribute))}
        path = _names_a_path(analysis, bound, counts)
        if path is not None:
            found.append(PerProcessPath(assign, draws[0], path))
    return found


def _names_a_path(analysis: Analysis, values: set[str], counts: Callable[[cst.Call], bool]) -> str | None:
    """The first path, directory or writer built from ``values``, through assignments."""
    flows = analysis.flows_from(values)
    for call in analysis.nodes(cst.Call):
        writes = analysis.matches(call, call_to(names.PATH_USERS | names.WRITER_CONSTRUCTORS)) or opens_for_writing(analysis, call)
        if writes and any(analysis.reads(a.value) & flows for a in call.args) and counts(call):
            return code_of(call).split("(")[0]
    return None


def imported_writer_calls(analysis: Analysis) -> list[cst.Call]:
    """Calls, as statements, of another file's function whose name says it writes: no one here can see inside.

    The project's own functions (converted or judged where they are
    defined), torch's and the builtins are known; so are the script's side
    effects and collectives, and a name that says it picks its process.
    """
    effects = analysis.effects
    found = []
    for statement in analysis.nodes(cst.Expr):
        call = statement.value
        if not isinstance(call, cst.Call) or not isinstance(call.func, (cst.Name, cst.Attribute)):
            continue
        name = code_of(call.func)
        last = name.rsplit(".", 1)[-1]
        if not WRITER_NAME.search(last) or GUARDS_ITSELF.search(last) or name in effects.functions:
            continue
        imported = [q.name for q in analysis.qualified_names(call.func) if q.source is QualifiedNameSource.IMPORT]
        part = False
        if not imported and isinstance(call.func, cst.Attribute):
            # `checkpoint_io.save(...)` on an object built from another file's class, or `logger.train_writer.write(...)`
            # on a part of one, whose class convert did not follow from there.
            root, part = call.func.value, False
            while isinstance(root, cst.Attribute):
                root, part = root.value, True
            if isinstance(root, cst.Name):
                imported = built_from_import(analysis, root)
        if not part and any(q in analysis.role.project_calls for q in imported):
            continue  # The project's own code: converted there, guarded there or here, or it does not write.
        if not imported or any(q.startswith(("torch.", "builtins.")) for q in imported):
            continue
        if any(q.startswith("traceback.") for q in imported):
            continue  # `traceback.print_exc()` shows this process's own error: each process that fails says so
        if effects.is_side_effect(call) or effects.is_collective(call):
            continue
        found.append(call)
    return found


def built_from_import(analysis: Analysis, receiver: cst.Name) -> list[str]:
    """The imported callables ``receiver`` is built by, when every binding of it calls one."""
    bindings = analysis.bindings(receiver) or []
    built: list[str] = []
    for assign in bindings:
        if assign is None or not isinstance(assign.value, cst.Call):
            return []
        found = [q.name for q in analysis.qualified_names(assign.value.func) if q.source is QualifiedNameSource.IMPORT]
        if not found:
            return []
        built += found
    return built


def attribute_read(analysis: Analysis, use: cst.CSTNode) -> cst.Attribute | None:
    """``log_file.name`` or ``writer.log_dir`` where ``use`` is the writer: an attribute read that is no call.

    A file opened on ``os.devnull`` off the main process is safe to write to, flush or pass to a
    function that writes; only what is read from it (its name, its directory) differs between
    processes. Convert warns about such a read (DDP418) and check finds it (DDP538).
    """
    parent = analysis.parents.get(use)
    if not isinstance(parent, cst.Attribute) or parent.value is not use:
        return None
    called = analysis.parents.get(parent)
    return None if isinstance(called, cst.Call) and called.func is parent else parent
