"""Download datasets on the main process first, then let the other processes load them.

``datasets.MNIST(root, download=True)`` on every process at once makes each
one download and unpack the same files into the same folder: they overwrite
each other's half-written archives. The statement that builds the dataset
goes into ``with main_process_first():``, which runs it on the main process
while the others wait at a barrier, then on the others, which find the files
there and download nothing.

The same goes for a class or function of the script that writes files its
own code then reads: a dataset that "downloads" on first use into a
temporary file, renames it, and raises "Dataset not found" when the file is
missing. guard_side_effects puts its writes on the main process; without an
order, another process looks for the file before the main process wrote it.
Its construction (or call) runs on the main process first, and the
others wait at a barrier that every process reaches, outside any rank guard.
Such a statement is left as it was when what it runs reaches a collective
(the barrier would meet it and hang) or when it sits in a loop.

Only statements every process runs after ``setup_distributed()`` are changed:
a module-level one in a script whose setup is in the entry block runs before
any process group exists, and is left as it was.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.metadata import QualifiedNameSource
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from dp2ddp.analysis import names
from dp2ddp.analysis.module import Analysis
from ._base import Dp2ddpCodemod, add_helper, import_torch_distributed
from dp2ddp.analysis.syntax import call_to, code_of
from dp2ddp.analysis.script import entry_point
from dp2ddp.analysis.effects import opens_for_writing, under_rank_guard
from dp2ddp.analysis.writers import built_from_import
from .guard_side_effects import MAIN_PROCESS_HELPER_SOURCE

MAIN_PROCESS_FIRST_HELPER_SOURCE = f'''
@contextlib.contextmanager
def {names.MAIN_PROCESS_FIRST_HELPER}():
    """Run the block on the main process first (a download, say), then on every other process."""
    if not {names.MAIN_PROCESS_HELPER}():
        dist.barrier()
    yield
    if {names.MAIN_PROCESS_HELPER}():
        dist.barrier()
'''
_DOWNLOADS = m.Arg(keyword=m.Name("download"), value=m.Name("True"))
_MAIN_PROCESS_FIRST = m.With(items=[m.WithItem(m.Call(func=m.Name(names.MAIN_PROCESS_FIRST_HELPER)))])


class DownloadOnceCommand(Dp2ddpCodemod):
    DESCRIPTION = "Download datasets, and write files the script reads back, on the main process first."

    def __init__(self, context: CodemodContext) -> None:
        super().__init__(context)
        self.statements: set[cst.SimpleStatementLine] = set()

    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        before_setup = entry_point(analysis) == "main"
        # The script's own code that writes files and reads files, by the call that runs it.
        self._runs: dict[cst.Call, list[cst.FunctionDef]] = {}
        self._classes: dict[str, list[cst.ClassDef]] = {}
        self._io: dict[tuple[cst.FunctionDef, str], list[cst.Call]] = {}
        for definition in analysis.nodes(cst.ClassDef):
            self._classes.setdefault(definition.name.value, []).append(definition)
        # Each call to order, with the file it writes and the one it reads (None for a torchvision download).
        candidates: dict[cst.Call, tuple[str, str] | None] = {}
        for call in analysis.nodes(cst.Call):
            if self._downloads_torchvision(call):
                candidates[call] = None
            elif (written_then_read := self._writes_then_reads(call)) is not None:
                candidates[call] = written_then_read
        # A call inside code another one runs (`self.download()` in the `__init__` a construction
        # runs) is ordered by that one; barriers nested in it would pair up with the outer ones.
        covered = {function for call in candidates for function in self._runs.get(call, ())}
        for call, written_then_read in candidates.items():
            if any(a in covered for a in analysis.ancestors(call) if isinstance(a, cst.FunctionDef)):
                continue
            statement = next(a for a in analysis.ancestors(call) if isinstance(a, (cst.SimpleStatementLine, cst.Module)))
            if not isinstance(statement, cst.SimpleStatementLine) or under_rank_guard(analysis, statement):
                continue
            if before_setup and isinstance(analysis.parents.get(statement), cst.Module):
                continue  # runs at import, before any process group exists
            if any(analysis.matches(a, _MAIN_PROCESS_FIRST) for a in analysis.ancestors(statement)):
                continue  # converted already
            if written_then_read is not None:
                if self._in_loop(statement) or analysis.effects.collectives_in(statement) or self._after_file_test(statement):
                    # Barriers in a loop, around a collective, or where only the processes that
                    # found no file yet arrive, are not convert's to place.
                    continue
                write, read = written_then_read
                self.report(call, "DDP425", call=code_of(call.func), write=write, read=read)
            self.statements.add(statement)

    def _downloads_torchvision(self, call: cst.Call) -> bool:
        """``datasets.MNIST(root, download=True)``, or a dataset class of the project's own told to download the same
        way (``IMBALANCECIFAR10(root, download=True)``, a subclass of torchvision's CIFAR10)."""
        if not m.matches(call, m.Call(args=[m.ZeroOrMore(), _DOWNLOADS, m.ZeroOrMore()])):
            return False
        qualified = {q.name for q in self.analysis.qualified_names(call.func)}
        if any(q.startswith("torchvision.datasets.") for q in qualified) or qualified & self.analysis.role.downloading_classes:
            return True
        # A class of this file whose base is a torchvision dataset.
        classes = [c for c in self.analysis.nodes(cst.ClassDef) if isinstance(call.func, cst.Name) and c.name.value == call.func.value]
        return any(
            q.name.startswith("torchvision.datasets.") for c in classes for base in c.bases for q in self.analysis.qualified_names(base.value)
        )

    def _writes_then_reads(self, call: cst.Call) -> tuple[str, str] | None:
        """The first file write and file read of the script's own code ``call`` runs, when it runs both.

        Nothing is returned when that code reaches a collective: the main
        process would meet it alone while the others wait at the barrier.
        """
        if not isinstance(call.func, cst.Name):
            # `self.download()` is ordered where the object is built, which every process runs;
            # a method's own call sits under conditions (`if not self._check_exists():`) of its class.
            return None
        run = self._code_run_by(call)
        if not run:
            return None
        writes = [c for function in run for c in self._file_calls(function, "writes")]
        if not writes:
            return None
        reads = [c for function in run for c in self._file_calls(function, "reads")]
        if not reads or any(
            self._file_calls(function, "collectives") or self._runs_training_code(function) or self._runs_unseen_code(function)
            for function in run
        ):
            return None
        self._runs[call] = run
        return code_of(writes[0].func), code_of(reads[0].func)

    def _file_calls(self, function: cst.FunctionDef, kind: str) -> list[cst.Call]:
        """The file ``writes``, file ``reads`` or ``collectives`` called in ``function``'s body; found once."""
        found = self._io.get((function, kind))
        if found is None:
            calls = self.analysis.within(function.body, cst.Call)
            if kind == "writes":
                found = [c for c in calls if self.matches(c, call_to(names.FILE_WRITES)) or opens_for_writing(self, c)]
            elif kind == "reads":
                found = [c for c in calls if self._reads_file(c)]
            else:
                found = [c for c in calls if self._is_collective(c)]
            self._io[(function, kind)] = found
        return found

    def _is_collective(self, call: cst.Call) -> bool:
        """A collective, or building DDP, which broadcasts the main process's weights to the others."""
        if self.analysis.effects.is_collective(call):
            return True
        return m.matches(call.func, m.Name(names.WRAP_HELPER) | m.Name(names.SETUP_HELPER)) or self.matches(
            call, call_to(names.DISTRIBUTED_DATA_PARALLEL | names.DATA_PARALLEL | names.INIT_PROCESS_GROUP)
        )

    def _runs_training_code(self, function: cst.FunctionDef) -> bool:
        """Whether ``function`` calls code of another project module that wraps a model or trains, directly
        or through an object it built (``model = EdgeConnect(config)``, then ``model.train()``).

        That code may reach a collective, and a barrier around it would hang: such a call is not
        ordered as a whole; the calls inside it that write and then read are ordered instead.
        """
        training = self.analysis.role.training_calls
        for call in self.analysis.within(function.body, cst.Call):
            imported = [q.name for q in self.analysis.qualified_names(call.func) if q.source is QualifiedNameSource.IMPORT]
            receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
            if not imported and isinstance(receiver, cst.Name):
                imported = built_from_import(self.analysis, receiver)
            if any(q in training for q in imported):
                return True
        return False

    def _runs_unseen_code(self, function: cst.FunctionDef) -> bool:
        """Whether ``function`` calls code convert cannot name: a function handed in (``train_func(batch, config)``),
        one picked from a container or returned by a call (``config["func"](...)``, ``getattr(m, name)()``), or a
        module imported by name at run time (``importlib.import_module("task.pose")``).

        That code may train, and a barrier around it would hang: the main process would meet DDP's
        collectives alone while the others wait at the barrier.
        """
        parameters = {p.name.value for p in (*function.params.posonly_params, *function.params.params, *function.params.kwonly_params)}
        for call in self.analysis.within(function.body, cst.Call):
            func = call.func
            if isinstance(func, (cst.Subscript, cst.Call)) or (isinstance(func, cst.Name) and func.value in parameters):
                return True
            if self.matches(call, call_to({"importlib.import_module", "builtins.__import__"})):
                return True
        return False

    def _reads_file(self, call: cst.Call) -> bool:
        opens = call_to({"builtins.open"})
        return self.matches(call, call_to(names.FILE_READS)) or (self.matches(call, opens) and not opens_for_writing(self, call))

    def _after_file_test(self, statement: cst.CSTNode) -> bool:
        """Under an ``if``/``while`` whose test looks at files (``if not os.path.exists(cache):``), directly or through the script's code."""
        for ancestor in self.analysis.ancestors(statement):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            if not isinstance(ancestor, (cst.If, cst.While)):
                continue
            for call in self.analysis.within(ancestor.test, cst.Call):
                run = self._code_run_by(call, depth=2)
                inner = [c for function in run for c in self.analysis.within(function.body, cst.Call)]
                if self._reads_file(call) or any(self._reads_file(c) for c in inner):
                    return True
        return False

    def _code_run_by(self, call: cst.Call, depth: int = 3) -> list[cst.FunctionDef]:
        """The functions of this file ``call`` runs: a class's ``__init__`` or a function, and what they call in turn.

        Methods are followed through ``self.method()``, functions by name, ``depth`` calls deep.
        """
        spelled = _spelled(call.func)
        if spelled is None:
            return []
        classes = self._classes.get(spelled, [])
        functions = self.analysis.effects.functions
        if len(classes) == 1:
            owner: cst.ClassDef | None = classes[0]
            start = self._methods(owner).get("__init__")
        elif len(classes) > 1:
            return []
        else:
            start = functions.get(spelled)
            owner = next((a for a in self.analysis.ancestors(start) if isinstance(a, cst.ClassDef)), None) if start else None
        if start is None:
            return []
        methods = self._methods(owner) if owner is not None else {}
        reached = [start]
        frontier = [start]
        for _ in range(depth):
            found = []
            for function in frontier:
                for inner in self.analysis.within(function.body, cst.Call):
                    name = _spelled(inner.func)
                    if name is None:
                        continue
                    target = methods.get(name[len("self."):]) if name.startswith("self.") else functions.get(name)
                    if target is not None and target not in reached:
                        reached.append(target)
                        found.append(target)
            frontier = found
        return reached

    @staticmethod
    def _methods(owner: cst.ClassDef) -> dict[str, cst.FunctionDef]:
        return {s.name.value: s for s in owner.body.body if isinstance(s, cst.FunctionDef)}

    def _in_loop(self, statement: cst.CSTNode) -> bool:
        for ancestor in self.analysis.ancestors(statement):
            if isinstance(ancestor, (cst.For, cst.While)):
                return True
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
        return False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.BaseStatement:
        if original_node not in self.statements:
            return updated_node
        first = cst.WithItem(cst.Call(func=cst.Name(names.MAIN_PROCESS_FIRST_HELPER)))
        body = cst.IndentedBlock(body=[updated_node.with_changes(leading_lines=[])])
        return cst.With(items=[first], body=body, leading_lines=updated_node.leading_lines)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not self.statements:
            return updated_node
        AddImportsVisitor.add_needed_import(self.context, "contextlib")
        import_torch_distributed(self.context, self.facts.distributed_alias)
        AddImportsVisitor.add_needed_import(self.context, "os")
        module = add_helper(updated_node, self.facts, names.MAIN_PROCESS_HELPER, MAIN_PROCESS_HELPER_SOURCE)
        return add_helper(module, self.facts, names.MAIN_PROCESS_FIRST_HELPER, MAIN_PROCESS_FIRST_HELPER_SOURCE)


def _spelled(func: cst.BaseExpression) -> str | None:
    """``f`` or ``self.f``: how a call names a function or method of the script; None for anything else."""
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        return f"self.{func.attr.value}"
    return None
