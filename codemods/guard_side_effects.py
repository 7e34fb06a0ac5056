"""Run prints, logs, TensorBoard/wandb writes, saves and file writes on the main process only.

Consecutive side effects share one ``if is_main_process():``; a lone
``if cond: print(...)`` becomes ``if cond and is_main_process():``. Writer
objects (``SummaryWriter``, ``open(path, "w")``, ``wandb.init``) are created on
the main process and are ``None`` elsewhere, tqdm bars are disabled off
the main process, and the `progress` package's bars draw into os.devnull there. Code the script already guards by rank is left alone.

A guard never holds a collective. A print of ``evaluate(model)`` is split:
the evaluation runs on every process and only the print is guarded. What
cannot be split that way is reported and left on every process.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import ParentNodeProvider, ScopeProvider

from dp2ddp.analysis import names
from dp2ddp.analysis.module import Analysis
from ._base import Dp2ddpCodemod, add_helper, import_torch_distributed, keyword_arg, with_argument
from dp2ddp.analysis.syntax import MAIN_GUARD, argument, call_to, code_of, parameter_for
from dp2ddp.analysis.script import entry_point
from dp2ddp.analysis.effects import is_rank_guard, opens_for_writing, under_rank_guard
from dp2ddp.analysis.writers import attribute_read, imported_writer_calls, per_process_paths

MAIN_PROCESS_HELPER_SOURCE = f'''
def {names.MAIN_PROCESS_HELPER}() -> bool:
    """Whether this process prints, logs and saves for the whole run (rank 0)."""
    if dist.is_initialized():
        return dist.get_rank() == 0
    # Before setup_distributed() (code run at import): the rank the launcher gave, torchrun's or srun's.
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) == 0
'''

MAIN_VALUE_HELPER_SOURCE = f'''
def {names.MAIN_VALUE_HELPER}(value):
    """The main process's value of something each process draws for itself (a timestamp, a run id), on every process."""
    if not dist.is_initialized():
        return value
    shared = [value]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]
'''

EFFECT, NEUTRAL, OTHER = "effect", "neutral", "other"
# Calls that compute a value and change nothing, so an assignment of theirs may move under a guard with the
# print that reads it. Any other call may change what every process needs (a learning rate, a generator).
READ_ONLY_CALLS = frozenset(
    {f"builtins.{name}" for name in (
        "len", "str", "int", "float", "bool", "round", "abs", "min", "max", "sum", "sorted", "list", "tuple", "dict",
        "set", "format", "repr", "isinstance", "hasattr", "getattr", "type", "divmod", "pow", "any", "all", "zip",
        "enumerate", "range", "reversed", "id",
    )}
    | {"time.time", "time.perf_counter", "time.monotonic", "time.strftime", "time.localtime", "datetime.datetime.now",
       "torch.cuda.max_memory_allocated", "torch.cuda.memory_allocated", "torch.cuda.max_memory_reserved"}
)  # fmt: skip
READ_ONLY_METHODS = frozenset({
    "item", "format", "join", "tolist", "mean", "sum", "cpu", "detach", "numpy", "get", "keys", "values", "items", "size",
    "dim", "numel", "float", "double", "int", "long", "max", "min", "argmax", "argmin", "std", "var", "norm", "strip",
    "split", "replace", "lower", "upper", "startswith", "endswith", "clone", "view", "reshape", "squeeze", "unsqueeze",
    "eq", "ne", "lt", "gt", "le", "ge", "sqrt", "exp", "log", "abs", "round", "count", "index", "get_last_lr",
    "get_lr", "state_dict", "strftime", "total_seconds", "isoformat", "__len__", "rjust", "ljust", "center", "zfill",
})
COMPOUND = (cst.If, cst.For, cst.While, cst.With, cst.Try)
CONTROL_FLOW = m.Return() | m.Break() | m.Continue() | m.Raise() | m.Yield() | m.Global() | m.Nonlocal()


def _guard_call() -> cst.Call:
    return cst.Call(func=cst.Name(names.MAIN_PROCESS_HELPER))


class GuardSideEffectsCommand(Dp2ddpCodemod):
    DESCRIPTION = "Run prints, logs, saves and file writes on the main process only; never guard a collective."
    GUARDS_HELPERS = True
    def __init__(self, context: CodemodContext) -> None:
        super().__init__(context)
        self.uses_helper = False
        self._kinds: dict[int, str] = {}
        # Functions of this file, by name, that assign into what they are given.
        self._setters: dict[str, bool] = {}
        # Names this codemod bound in each scope, so two hoists never share one.
        self._hoisted_names: dict[int, set[str]] = {}
        # Assignments of a value each process draws for itself that take the main process's value instead.
        self.shared_values: set[cst.Assign] = set()
        # Tests of whether a directory exists that every process runs before making it: the main process's answer.
        self.shared_tests: set[cst.Call] = set()

    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        self.effects = analysis.effects
        role = analysis.role
        # In a project, a module converted only for its writers: only those functions change.
        self.only_functions = (
            {function for function, _, _ in role.guarded_functions} | set(role.directory_functions) if role.guard_only else None
        )
        for function, writes, callers in role.guarded_functions:
            definition = next(s for s in analysis.module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef)) and s.name.value == function)
            shown = ", ".join(str(c) for c in callers[:3]) + (", ..." if len(callers) > 3 else "")
            self.report(definition.name, "DDP105", function=function, site=writes, callers=shown)
        for call in analysis.nodes(cst.Call):
            written = next((role.writer_site(q.name) for q in analysis.qualified_names(call.func) if role.writer_site(q.name)), None)
            if written is not None and not under_rank_guard(self, call):
                self.report(call, "DDP106", call=code_of(call.func), site=written)
            unguarded = next(
                (role.unguarded_writer_site(q.name) for q in analysis.qualified_names(call.func) if role.unguarded_writer_site(q.name)), None
            )
            if unguarded is not None and not under_rank_guard(self, call):
                used = not isinstance(analysis.parents.get(call), cst.Expr)
                why = "its value is used here" if used else "it does more than write (it changes state every process needs)"
                self.report(call, "DDP108", call=code_of(call.func), site=unguarded, why=why)
        if self.only_functions is not None:
            self._report_shares_printed_in_forward(analysis)
        if self.only_functions is None:
            self._report_unknown_writers(analysis)
            self._report_per_process_paths(analysis)
            self._share_racing_tests(analysis)
            self._report_shell_commands(analysis)

    def _report_shares_printed_in_forward(self, analysis: Analysis) -> None:
        """``print(loss.item())`` in the ``forward`` of a criterion or model of a module converted for its writes:
        what it is handed is this process's share of the batch, so the main process prints its own share's value
        where DataParallel printed the whole batch's (DDP427)."""
        for cls in analysis.nodes(cst.ClassDef):
            if cls.name.value not in (self.only_functions or ()):
                continue
            for forward in analysis.within(cls.body, cst.FunctionDef):
                if forward.name.value != "forward":
                    continue
                shares = {p.name.value for p in forward.params.params[1:]}
                for assign in analysis.within(forward.body, cst.Assign):
                    if analysis.reads(assign.value) & shares:
                        shares |= {n.value for t in assign.targets for n in analysis.within(t.target, cst.Name)}
                for call in analysis.within(forward.body, cst.Call):
                    shown = sorted(analysis.reads(call) & shares)
                    if shown and self.effects.is_side_effect(call) and isinstance(analysis.parents.get(call), cst.Expr):
                        self.report(call, "DDP427", value=shown[0])

    def _report_shell_commands(self, analysis: Analysis) -> None:
        """``os.system("rm -rf tmp")`` and its subprocess kin, run for their effect on every process (DDP428)."""
        for statement in analysis.nodes(cst.Expr):
            call = statement.value
            if not isinstance(call, cst.Call) or not analysis.matches(call, call_to(names.SHELL_COMMANDS)):
                continue
            if under_rank_guard(self, call) or not self._runs_in_program(call):
                continue
            self.report(call, "DDP428", call=code_of(call.func))

    def _runs_in_program(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` is in code the program runs: not in one of convert's helpers, nor in a function no
        module of the program names."""
        skipped = names.HELPERS | self.analysis.role.unreferenced_functions
        return not any(isinstance(a, cst.FunctionDef) and a.name.value in skipped for a in self.analysis.ancestors(node))

    def _report_per_process_paths(self, analysis: Analysis) -> None:
        """``run_id = random.randint(...)`` or a timestamp that then names a directory: one per process. Where every
        process runs the line, it takes the main process's value instead; elsewhere it is reported."""
        for found in per_process_paths(analysis):
            if under_rank_guard(self, found.assign):
                continue
            if self._run_by_every_process(found.assign):
                self.shared_values.add(found.assign)
                self.report(found.assign, "DDP426", value=code_of(found.draw.func), path=found.path)
            else:
                self.report(found.assign, "DDP423", value=code_of(found.draw.func), path=found.path)

    def _share_racing_tests(self, analysis: Analysis) -> None:
        """``if os.path.exists(save_dir): raise ...``, then ``os.makedirs(save_dir)``, which every process now runs: a
        process that tests late finds the directory another process just made. Where every process runs the test
        together, it takes the main process's answer, which the broadcast fixes before any process goes on to make
        the directory (DDP429); elsewhere it is reported (DDP430)."""
        made: dict[tuple[cst.CSTNode | None, str], list[cst.Call]] = {}
        for call in analysis.nodes(cst.Call):
            if under_rank_guard(self, call):
                continue
            if self.effects.makes_directory_everywhere(call) and call.args and call.args[0].keyword is None:
                path = code_of(call.args[0].value)
            elif self._pathlib_mkdir(call):
                path = code_of(call.func.value)  # type: ignore[attr-defined]
            else:
                continue
            made.setdefault((_function_of(analysis, call), path), []).append(call)
        if not made:
            return
        for statement in analysis.nodes(cst.If):
            function = _function_of(analysis, statement)
            if self._only_makes_directories(statement):
                continue  # `if not exists(d): makedirs(d)`: with `exist_ok=True` a late process does the same
            for test in analysis.within(statement.test, cst.Call):
                path = _tested_path(analysis, test)
                later = [c for c in made.get((function, path), []) if analysis.index[c] > analysis.last[statement]] if path else []
                if not later or under_rank_guard(self, statement):
                    continue
                if self._run_by_every_process(statement):
                    self.shared_tests.add(test)
                    self.report(test, "DDP429", test=code_of(test), call=code_of(later[0].func))
                else:
                    self.report(test, "DDP430", test=code_of(test), call=code_of(later[0].func))

    def _only_makes_directories(self, statement: cst.If) -> bool:
        """Whether every statement ``statement`` runs in either branch makes a directory, which every process may do."""
        branches: list[cst.BaseSuite] = [statement.body]
        orelse = statement.orelse
        while orelse is not None:
            branches.append(orelse.body)
            orelse = orelse.orelse if isinstance(orelse, cst.If) else None
        lines = [line for branch in branches for line in (branch.body if isinstance(branch, cst.IndentedBlock) else [branch])]
        return all(
            isinstance(line, cst.SimpleStatementLine)
            and all(
                isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
                and (self.effects.makes_directory_everywhere(small.value) or self._pathlib_mkdir(small.value))
                for small in line.body
            )
            for line in lines
        )  # fmt: skip

    def _run_by_every_process(self, assign: cst.Assign | cst.If) -> bool:
        """Whether every process runs ``assign`` together, once per call, so that a broadcast there pairs up: it is in
        a function, outside loops; no call of the function in this file is under a rank condition; and the function
        writes nothing itself (a writer may be guarded where another module calls it) unless this file's own entry
        block calls it."""
        function = None
        for ancestor in self.analysis.ancestors(assign):
            if isinstance(ancestor, (cst.For, cst.While, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
                return False
            if isinstance(ancestor, cst.FunctionDef):
                function = ancestor
                break
        if function is None:
            return False  # module level runs at import, before the process group exists
        name = function.name.value
        owner = next((a for a in self.analysis.ancestors(function) if isinstance(a, cst.ClassDef)), None)
        called = m.Name(name) | m.Attribute(attr=m.Name(name))
        if name == "__init__" and owner is not None:
            called = m.Name(owner.name.value) | m.Attribute(attr=m.Name(owner.name.value))
        calls = [c for c in self.analysis.nodes(cst.Call) if m.matches(c.func, called)]
        if any(under_rank_guard(self, c) for c in calls):
            return False
        writes = any(self._is_effect_line(line) for line in self.analysis.findall_in(function, m.SimpleStatementLine()))
        return not writes or any(any(m.matches(a, MAIN_GUARD) for a in self.analysis.ancestors(c)) for c in calls)

    def _report_unknown_writers(self, analysis: Analysis) -> None:
        """A call to another file's function whose name says it writes: convert cannot see whether it is safe to guard."""
        for call in imported_writer_calls(analysis):
            if under_rank_guard(self, call):
                continue
            if any(isinstance(a, COMPOUND) and self._kind(a) == EFFECT for a in analysis.ancestors(call)):
                continue  # `with open(log, "a") as f: csv.writer(f).writerow(...)` is guarded whole
            self.report(call, "DDP422", call=code_of(call.func))

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if self.only_functions is not None and isinstance(self.analysis.parents.get(node), cst.Module):
            return node.name.value in self.only_functions
        return node.name.value not in names.HELPERS

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        if self.only_functions is not None and isinstance(self.analysis.parents.get(node), cst.Module):
            return node.name.value in self.only_functions
        return node.name.value not in names.HELPERS

    def visit_If(self, node: cst.If) -> bool:
        if not is_rank_guard(self.analysis, node.test):
            return True
        for collective in self.effects.collectives_in(node.body):
            self.report(collective, "DDP402", call=code_of(collective.func))
        return False  # The script decided who runs this already.

    # -- classifying statements, on the original tree --------------------------------

    def _is_effect_line(self, statement: cst.CSTNode) -> bool:
        """A line of calls that only have side effects: ``print(...)``, ``torch.save(...)``; so too the body of a
        compound statement written on its line (``if os.path.exists(path): os.remove(path)``)."""
        if not isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return False
        return all(
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and self.effects.is_side_effect(small.value)
            for small in statement.body
        )

    def _assigned_names(self, statement: cst.CSTNode) -> list[str] | None:
        """Names a plain assignment line binds, or None for any other statement.

        Its value must change nothing as it is computed, or the line would do on the main process
        alone what every process must do: ``lr = adjust_learning_rate(optimizer, epoch)`` before a
        print of ``lr`` sets the learning rate, and a draw from a generator moves its state.
        """
        if not isinstance(statement, cst.SimpleStatementLine):
            return None
        bound: list[str] = []
        for small in statement.body:
            if isinstance(small, cst.Assign) and all(isinstance(t.target, cst.Name) for t in small.targets):
                bound += [t.target.value for t in small.targets]  # type: ignore[attr-defined]
            elif isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.value:
                bound.append(small.target.value)
            else:
                return None
            if not all(self._reads_only(call) for call in m.findall(small.value, m.Call())):  # type: ignore[arg-type]
                return None
        return bound

    def _reads_only(self, call: cst.Call) -> bool:
        """A call known to compute a value and change nothing: a builtin such as ``len`` or ``round``, a method
        such as ``.item()`` or ``.format()``, ``time.time()``, ``os.path.join``, NumPy's and math's functions."""
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in READ_ONLY_METHODS:
            return True
        qualified = {q.name for q in self.analysis.qualified_names(call.func)}
        return any(
            q in READ_ONLY_CALLS or (q.startswith(("math.", "numpy.", "os.path.")) and not q.startswith(("numpy.random.", "numpy.save")))
            for q in qualified
        )

    def _used_only_within(self, statement: cst.CSTNode, bound: list[str], region: list[cst.CSTNode]) -> bool:
        """Whether every use of ``bound`` is inside ``region``, so the names can move under a guard."""
        inside = {id(n) for node in region for n in m.findall(node, m.Name())}
        scope = self.get_metadata(ScopeProvider, statement, None)
        if scope is None:
            return False
        for name in bound:
            assignments = scope.assignments[name]
            if not assignments:
                return False  # Declared `global` or `nonlocal`: read elsewhere.
            for assignment in assignments:
                if id(assignment.node) not in inside:
                    return False
                if any(id(access.node) not in inside for access in assignment.references):
                    return False
        return True

    def _kind(self, statement: cst.CSTNode) -> str:
        if id(statement) not in self._kinds:
            self._kinds[id(statement)] = self._classify(statement)
        return self._kinds[id(statement)]

    def _classify(self, statement: cst.CSTNode) -> str:
        if self.effects.collectives_in(statement) or self._state_changes(statement, []):
            return OTHER
        index, last = self.analysis.index, self.analysis.last
        if any(index[statement] <= index[shared] <= last[statement] for shared in self.shared_values):
            return OTHER  # it becomes a broadcast every process joins
        if self._is_effect_line(statement):
            return EFFECT
        if self._assigned_names(statement) is not None:
            return NEUTRAL
        if isinstance(statement, COMPOUND) and self._is_effect_block(statement):
            return EFFECT
        return OTHER

    def _is_effect_block(self, statement: cst.CSTNode) -> bool:
        """A compound statement that only has side effects: guard it whole."""
        if isinstance(statement, cst.If) and is_rank_guard(self.analysis, statement.test):
            return False
        if isinstance(statement, cst.With) and any(opens_for_writing(self, item.item) for item in statement.items):
            return not m.findall(statement, CONTROL_FLOW)
        if m.findall(statement, CONTROL_FLOW):
            return False
        lines = m.findall(statement, m.SimpleStatementLine() | m.SimpleStatementSuite())
        effects = [line for line in lines if self._is_effect_line(line)]
        if not effects:
            return False
        for line in lines:
            if line in effects or all(isinstance(small, cst.Pass) for small in line.body):
                continue  # `try: os.remove(path)` / `except OSError: pass`: the handler does nothing
            bound = self._assigned_names(line)
            if bound is None or not self._used_only_within(line, bound, [statement]):
                return False
        return True

    # -- rewriting --------------------------------------------------------------------

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        owner = self.get_metadata(ParentNodeProvider, original_node)
        while isinstance(owner, (cst.Else, cst.ExceptHandler, cst.Finally)) or (
            isinstance(owner, cst.If) and isinstance(parent := self.get_metadata(ParentNodeProvider, owner), cst.If) and parent.orelse is owner
        ):
            # An `elif` is no statement of a block: the `if` it continues is the one guarded whole, or not.
            owner = self.get_metadata(ParentNodeProvider, owner)
        if isinstance(owner, COMPOUND) and self._kind(owner) == EFFECT:
            return updated_node  # The whole statement goes under one guard, one level up.
        return updated_node.with_changes(body=self._guarded(original_node.body, updated_node.body))

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.BaseSuite:
        """``else: print(...)`` beside a branch that must run everywhere: the print alone goes under the guard."""
        owner = self.get_metadata(ParentNodeProvider, original_node)
        while isinstance(owner, (cst.Else, cst.ExceptHandler, cst.Finally)) or (
            isinstance(owner, cst.If) and isinstance(parent := self.get_metadata(ParentNodeProvider, owner), cst.If) and parent.orelse is owner
        ):
            owner = self.get_metadata(ParentNodeProvider, owner)
        if (isinstance(owner, COMPOUND) and self._kind(owner) == EFFECT) or self._kind(original_node) != EFFECT:
            return updated_node  # guarded whole one level up, or no write of its own
        if under_rank_guard(self, original_node) or not self._runs_in_program(original_node):
            return updated_node
        self.uses_helper = True
        line = cst.SimpleStatementLine(body=[s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for s in updated_node.body])
        return cst.IndentedBlock(body=[cst.If(test=_guard_call(), body=cst.IndentedBlock(body=[line]))])

    def _guarded(
        self, originals: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement]
    ) -> list[cst.BaseStatement]:
        body: list[cst.BaseStatement] = []
        run: list[tuple[cst.BaseStatement, cst.BaseStatement, str]] = []
        for original, statement in zip(originals, updated):
            writer = self._writer_assignment(original)
            kind = OTHER if writer else self._kind(original)
            read_back = self._reads_back(run, original) if run and kind != EFFECT else None
            if read_back is not None and self._is_discarded_call(original):
                # `run_coco_eval(labels, output_name)` on the file the guard writes: only the main process
                # has it, and no other process needs what the call does with it.
                self.report(original, "DDP405", call=code_of(original.body[0].value.func), path=read_back)  # type: ignore[attr-defined]
                run.append((original, statement, EFFECT))
                continue
            if read_back is not None and self._every_process_reaches(original):
                # Every process reads what the main process has just written: the others wait for it.
                body += self._close(run)
                run = []
                self.report(original, "DDP406", path=read_back)
                body += [cst.parse_statement(f"{self.facts.distributed_alias}.barrier()"), statement]
                import_torch_distributed(self.context, self.facts.distributed_alias)
                continue
            if kind in (EFFECT, NEUTRAL) and (run or kind == EFFECT):
                run.append((original, statement, kind))
                continue
            body += self._close(run)
            run = []
            if writer is not None and (escape := self._escaping_use(writer)) is not None:
                body.append(self._create_everywhere(writer, statement, escape))
            elif writer is not None:
                body.append(self._create_on_main_process(statement))
            elif isinstance(original, cst.SimpleStatementLine) and (collectives := self._split_or_report(original)):
                hoisted, remainder = self._hoist(original, statement, collectives)
                body += hoisted
                run = [(original, remainder, EFFECT)]
            else:
                body.append(statement)
        return body + self._close(run)

    def _reads_back(self, run: list[tuple[cst.BaseStatement, cst.BaseStatement, str]], statement: cst.BaseStatement) -> str | None:
        """The path a statement about to be guarded in ``run`` writes and ``statement`` then reads, by its spelling.

        A path is a name, attribute or string (``output_name``, ``args.out``, ``"last.pth"``) handed to ``open(path, "w")`` or
        ``torch.save(obj, path)``; ``statement`` reads it back when it hands the same spelling to a call.
        """
        written: set[str] = set()
        for original, _, kind in run:
            if kind != EFFECT:
                continue
            for call in self.analysis.within(original, cst.Call):
                if opens_for_writing(self, call):
                    path = argument(call, 0, "file")
                elif self.analysis.matches(call, call_to({"torch.save"})):
                    path = argument(call, 1, "f")
                else:
                    continue
                if path is not None and m.matches(path, m.Name() | m.Attribute() | m.SimpleString()):
                    written.add(code_of(path))
        if not written or self.effects.collectives_in(statement):
            return None
        handed = {
            code_of(arg.value) for call in self.analysis.within(statement, cst.Call)
            if not self.analysis.matches(call, call_to({"torch.load"}))  # secure_checkpoints waits before a load
            for arg in call.args
        }  # fmt: skip
        return next(iter(sorted(written & handed)), None)

    def _every_process_reaches(self, statement: cst.BaseStatement) -> bool:
        """Whether no caller in this file runs ``statement``'s function under a rank condition: a barrier there
        would wait for processes that never come. A module converted only for its writers has its callers elsewhere."""
        if self.only_functions is not None:
            return False
        function = next((a for a in self.analysis.ancestors(statement) if isinstance(a, cst.FunctionDef)), None)
        return function is None or not any(under_rank_guard(self, call) for call in self.analysis.callers(function))

    def _is_discarded_call(self, statement: cst.BaseStatement) -> bool:
        """One call on its line whose value is thrown away."""
        return (
            isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.Call)
        )  # fmt: skip

    def _split_or_report(self, statement: cst.SimpleStatementLine) -> list[cst.Call] | None:
        """The collectives, and the calls that change what every process needs, to move out of a side-effect
        line; a line where they cannot move is reported."""
        collectives = self.effects.collectives_in(statement)
        if not self._is_effect_line(statement):
            return None
        collectives = sorted(collectives + self._state_changes(statement, collectives), key=lambda c: self.analysis.index[c])
        if not collectives:
            return None
        single_call = len(statement.body) == 1
        if not single_call or any(self.effects.is_conditionally_evaluated(c, statement) for c in collectives):
            self.report(statement, "DDP401", call=code_of(collectives[0].func))
            return None
        return collectives

    def _state_changes(self, statement: cst.CSTNode, collectives: list[cst.Call]) -> list[cst.Call]:
        """Calls in a printed line that change state every process needs, outermost first: ``next(batches)``,
        ``scheduler.step()``, or a function of this file that sets what it is given (``adjust_learning_rate(
        optimizer, epoch)`` sets each group's ``lr``). On the main process alone they would desynchronise the rest."""
        found: list[cst.Call] = []
        taken = [*collectives]
        for call in self.analysis.within(statement, cst.Call):
            if any(self.analysis.index[outer] <= self.analysis.index[call] <= self.analysis.last[outer] for outer in taken):
                continue
            if m.matches(call.func, m.Name("next") | m.Attribute(attr=m.Name("step"))) or self._sets_state(call):
                found.append(call)
                taken.append(call)
        return found

    def _sets_state(self, call: cst.Call) -> bool:
        """A call of a function of this file that assigns into what it is given: a subscript or an attribute of
        one of its parameters, or of what it reads from them (``for group in optimizer.param_groups: group["lr"] =``)."""
        if not isinstance(call.func, cst.Name):
            return False
        if call.func.value not in self._setters:
            self._setters[call.func.value] = self._assigns_into_parameters(call.func.value)
        return self._setters[call.func.value]

    def _assigns_into_parameters(self, name: str) -> bool:
        definitions = [f for f in self.analysis.nodes(cst.FunctionDef) if f.name.value == name]
        if len(definitions) != 1:
            return False
        function = definitions[0]
        own = {p.name.value for p in function.params.params}
        for loop in self.analysis.within(function, cst.For):
            if own & {n.value for n in self.analysis.within(loop.iter, cst.Name)}:
                own |= {n.value for n in self.analysis.within(loop.target, cst.Name)}
        for target in self.analysis.within(function, cst.AssignTarget):
            root = target.target
            while isinstance(root, cst.Subscript | cst.Attribute):
                root = root.value
            if root is not target.target and isinstance(root, cst.Name) and root.value in own:
                return True
        return False

    def _close(self, run: list[tuple[cst.BaseStatement, cst.BaseStatement, str]]) -> list[cst.BaseStatement]:
        """Guard a run of side effects, keeping assignments that code after the run reads outside it."""
        out: list[cst.BaseStatement] = []
        region = [original for original, _, _ in run]
        segment: list[tuple[cst.BaseStatement, cst.BaseStatement, str]] = []
        for original, statement, kind in run:
            if kind == NEUTRAL and not self._used_only_within(original, self._assigned_names(original) or [], region):
                out += self._guard_segment(segment)
                segment = []
                out.append(statement)
            else:
                segment.append((original, statement, kind))
        return out + self._guard_segment(segment)

    def _guard_segment(self, segment: list[tuple[cst.BaseStatement, cst.BaseStatement, str]]) -> list[cst.BaseStatement]:
        # Assignments at either end of a segment need no guard.
        start = next((i for i, (_, _, kind) in enumerate(segment) if kind == EFFECT), len(segment))
        end = max((i + 1 for i, (_, _, kind) in enumerate(segment) if kind == EFFECT), default=start)
        before = [s for _, s, _ in segment[:start]]
        after = [s for _, s, _ in segment[end:]]
        guarded = [s for _, s, _ in segment[start:end]]
        if not guarded:
            return before + after
        self.uses_helper = True
        first = guarded[0]
        if len(guarded) == 1 and isinstance(first, cst.If) and first.orelse is None:
            test = first.test
            if isinstance(test, (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)) and not test.lpar:
                test = test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            merged = cst.BooleanOperation(left=test, operator=cst.And(), right=_guard_call())
            return [*before, first.with_changes(test=merged), *after]
        guard = cst.If(
            test=_guard_call(),
            body=cst.IndentedBlock(body=[first.with_changes(leading_lines=[]), *guarded[1:]]),
            leading_lines=first.leading_lines,
        )
        return [*before, guard, *after]

    def _writer_assignment(self, statement: cst.BaseStatement) -> cst.Assign | None:
        """``writer = SummaryWriter(...)`` or ``log_file = open(path, "w")``."""
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1 or not isinstance(statement.body[0], cst.Assign):
            return None
        assign = statement.body[0]
        creates_writer = self.matches(assign.value, call_to(names.WRITER_CONSTRUCTORS)) or opens_for_writing(
            self, assign.value
        )
        return assign if creates_writer and not self.effects.collectives_in(assign.value) else None

    def _escaping_use(self, assign: cst.Assign) -> cst.CSTNode | None:
        """A use of the writer that would meet ``None`` on the other processes, if there is one.

        Safe uses are its own writes on lines that get guarded, tests such as
        ``if writer is not None:``, and passing it to a function of the script
        whose parameter is only used the same ways.
        """
        target = assign.targets[0].target
        if isinstance(target, cst.Name):
            uses = self.analysis.references(target)
        else:
            spelled = code_of(target)
            uses = [n for n in self.analysis.nodes(cst.Attribute) if n is not target and code_of(n) == spelled]
        return self._first_escape(uses, depth=3)

    def _first_escape(self, uses: list[cst.CSTNode], depth: int) -> cst.CSTNode | None:
        functions = self.effects.functions
        for use in uses:
            parent = self.analysis.parents[use]
            statement = next(a for a in self.analysis.ancestors(use) if isinstance(a, (cst.SimpleStatementLine, cst.BaseCompoundStatement)))
            if under_rank_guard(self, use) or self._guarded_after_split(use, statement):
                continue  # Runs on the main process only: a write, or a print that reads it.
            if isinstance(parent, (cst.Comparison, cst.If, cst.UnaryOperation, cst.BooleanOperation)):
                continue  # `if writer is not None:`, `if writer:`
            if isinstance(parent, cst.AssignTarget):
                continue  # `self.writer = None`, rebinding it: nothing is read
            caller = self.analysis.parents[parent] if isinstance(parent, cst.Arg) else None
            function = functions.get(code_of(caller.func)) if isinstance(caller, cst.Call) else None
            parameter = parameter_for(function, caller, parent) if function is not None else None  # type: ignore[arg-type]
            if depth == 0 or parameter is None:
                return use
            bound = next((p.name for p in function.params.params if p.name.value == parameter), None)  # type: ignore[union-attr]
            escape = self._first_escape(self.analysis.references(bound), depth - 1) if bound is not None else use
            if escape is not None:
                return escape
        return None

    def _guarded_after_split(self, use: cst.CSTNode, statement: cst.CSTNode) -> bool:
        """Whether ``use`` ends up under the main-process guard: on a side-effect line, outside its collectives.

        ``writer.add_scalar("loss", all_reduce_mean(loss.item()), step)`` is
        split: the reduction moves to a line of its own, before the guarded
        write. Judging the line as it will be written keeps this plan the same
        when the converted script is converted again.
        """
        if not isinstance(statement, cst.SimpleStatementLine) or not self._is_effect_line(statement):
            return False
        collectives = self.effects.collectives_in(statement)
        if not collectives:
            return True
        if len(statement.body) != 1 or any(self.effects.is_conditionally_evaluated(c, statement) for c in collectives):
            return False  # not split: DDP401 leaves the line on every process
        return not any(self.analysis.index[c] <= self.analysis.index[use] <= self.analysis.last[c] for c in collectives)

    def _create_everywhere(self, original: cst.Assign, statement: cst.BaseStatement, escape: cst.CSTNode) -> cst.BaseStatement:
        """A writer that code outside its writes reads exists on every process; its writes stay guarded.

        A file opened for writing is opened on ``os.devnull`` by the other
        processes, so none truncates the main process's file.
        """
        assert isinstance(statement, cst.SimpleStatementLine)
        assign = statement.body[0]
        assert isinstance(assign, cst.Assign)
        name = code_of(assign.targets[0].target)
        if not opens_for_writing(self, original.value):
            self.report(escape, "DDP418", writer=name, how="each process creates its own")
            return statement
        if attribute_read(self.analysis, escape) is not None:
            # Writes, flushes and a function that writes into it are safe on os.devnull; what is read is not.
            self.report(escape, "DDP418", writer=name, how="the others open os.devnull")
        call = assign.value
        assert isinstance(call, cst.Call)
        path = call.args[0]
        if names.MAIN_PROCESS_HELPER in code_of(path.value):
            return statement  # Converted already.
        self.uses_helper = True
        AddImportsVisitor.add_needed_import(self.context, "os")
        on_main = cst.IfExp(test=_guard_call(), body=path.value, orelse=cst.parse_expression("os.devnull"))
        value = call.with_changes(args=[path.with_changes(value=on_main), *call.args[1:]])
        return statement.with_changes(body=[assign.with_changes(value=value)])

    def _create_on_main_process(self, statement: cst.BaseStatement) -> cst.BaseStatement:
        """``writer = SummaryWriter(...) if is_main_process() else None``: other processes write nothing."""
        assert isinstance(statement, cst.SimpleStatementLine)
        assign = statement.body[0]
        assert isinstance(assign, cst.Assign)
        self.uses_helper = True
        value = cst.IfExp(test=_guard_call(), body=assign.value, orelse=cst.Name("None"))
        return statement.with_changes(body=[assign.with_changes(value=value)])

    def _hoist(
        self, original: cst.SimpleStatementLine, statement: cst.BaseStatement, collectives: list[cst.Call]
    ) -> tuple[list[cst.BaseStatement], cst.BaseStatement]:
        """Bind each collective to a name before the statement, which then only reads the names."""
        scope = self.get_metadata(ScopeProvider, original, None)
        taken = {assignment.name for assignment in scope.assignments} if scope is not None else set()
        taken |= self._hoisted_names.setdefault(id(scope), set())
        hoisted: list[cst.BaseStatement] = []
        replacements: dict[str, str] = {}
        for collective in collectives:
            code = code_of(collective)
            if code in replacements:
                continue
            name = stem = _result_name(collective)
            suffix = 1
            while name in taken or name in replacements.values():
                suffix += 1
                name = f"{stem}_{suffix}"
            replacements[code] = name
            self._hoisted_names[id(scope)].add(name)
        remainder = m.replace(
            statement,
            m.MatchIfTrue(lambda node: isinstance(node, cst.Call) and code_of(node) in replacements),
            lambda node, _: cst.Name(replacements[code_of(node)]),
        )
        for code, name in replacements.items():
            line = cst.parse_statement(f"{name} = {code}")
            hoisted.append(line)
        if hoisted:
            hoisted[0] = hoisted[0].with_changes(leading_lines=statement.leading_lines)
            assert isinstance(remainder, cst.SimpleStatementLine)
            remainder = remainder.with_changes(leading_lines=[])
        return hoisted, remainder  # type: ignore[return-value]

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if original_node in self.shared_tests:
            return cst.Call(func=cst.Name(names.MAIN_VALUE_HELPER), args=[cst.Arg(updated_node)])
        if self.effects.makes_directory_everywhere(original_node):
            return self._make_directory_everywhere(original_node, updated_node)
        if self._pathlib_mkdir(original_node):
            # `output_dir.mkdir()` after `if not output_dir.exists():`: two processes can both find it missing.
            if not self._checked_first(original_node, receiver=True):
                self.report(original_node, "DDP417", call=code_of(original_node.func))
            return with_argument(updated_node, keyword_arg("exist_ok", cst.Name("True")))
        if self._progress_bar(original_node):
            return self._bar_off_main(updated_node)
        if not self.matches(original_node, call_to(names.TQDM)):
            return updated_node
        disable = next((a for a in updated_node.args if a.keyword and a.keyword.value == "disable"), None)
        if disable is not None and names.MAIN_PROCESS_HELPER in code_of(disable.value):
            return updated_node
        self.uses_helper = True
        off_main = cst.UnaryOperation(operator=cst.Not(), expression=_guard_call())
        if disable is None:
            return with_argument(updated_node, keyword_arg("disable", off_main))
        value = disable.value
        if isinstance(value, (cst.BooleanOperation, cst.IfExp)) and not value.lpar:
            value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        either = cst.BooleanOperation(left=value, operator=cst.Or(), right=off_main)
        return updated_node.with_changes(
            args=[a.with_changes(value=either) if a is disable else a for a in updated_node.args]
        )

    def _progress_bar(self, call: cst.Call) -> bool:
        """A bar of the `progress` package, or of a copy of it in the project: `Bar("Processing", max=len(loader))`."""
        qualified = {q.name for q in self.analysis.qualified_names(call.func)}
        bars = [q for q in qualified if q.rpartition(".")[2] in names.PROGRESS_BARS]
        sized = any(a.keyword is not None and a.keyword.value == "max" for a in call.args)
        return any(q.startswith("progress.") for q in bars) or (bool(bars) and sized)

    def _bar_off_main(self, updated_node: cst.Call) -> cst.Call:
        """Off the main process the bar draws into os.devnull, which is no terminal: it draws nothing there."""
        if any(a.keyword is not None and a.keyword.value == "file" for a in updated_node.args):
            return updated_node
        self.uses_helper = True
        AddImportsVisitor.add_needed_import(self.context, "os")
        AddImportsVisitor.add_needed_import(self.context, "sys")
        value = cst.parse_expression(f'sys.stderr if {names.MAIN_PROCESS_HELPER}() else open(os.devnull, "w")')
        return with_argument(updated_node, keyword_arg("file", value))

    def _make_directory_everywhere(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        """``os.makedirs(d)`` -> ``os.makedirs(d, exist_ok=True)``, left on every process.

        Made on the main process only, the directory might not exist yet when
        another process writes a log file into it. With ``exist_ok`` every
        process makes it, in any order. ``os.mkdir`` becomes ``os.makedirs``.
        """
        exist_ok = next((a for a in updated_node.args if a.keyword and a.keyword.value == "exist_ok"), None)
        if exist_ok is not None and not m.matches(exist_ok.value, m.Name("False")):
            return updated_node
        func = updated_node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "mkdir":
            func = func.with_changes(attr=cst.Name("makedirs"))
        if not self._checked_first(original_node):
            self.report(original_node, "DDP417", call=code_of(original_node.func))
        args = [a for a in updated_node.args if a is not exist_ok]
        return with_argument(updated_node.with_changes(func=func, args=args), keyword_arg("exist_ok", cst.Name("True")))

    def _pathlib_mkdir(self, call: cst.Call) -> bool:
        """``path.mkdir()`` or ``path.mkdir(parents=True)`` on a pathlib path, without ``exist_ok``."""
        if not m.matches(call.func, m.Attribute(attr=m.Name("mkdir"))) or self.matches(call, call_to(names.MAKE_DIRECTORY)):
            return False
        if self.only_functions is not None and not any(
            isinstance(a, cst.FunctionDef) and a.name.value in self.only_functions for a in self.analysis.ancestors(call)
        ):
            return False
        return all(a.keyword is not None and a.keyword.value in ("parents", "mode") for a in call.args)

    def _checked_first(self, call: cst.Call, receiver: bool = False) -> bool:
        """Whether the call runs only when a test on its own path found no directory there."""
        path = code_of(call.func.value) if receiver else code_of(call.args[0].value) if call.args else None  # type: ignore[attr-defined]
        for ancestor in self.analysis.ancestors(call):
            if isinstance(ancestor, cst.If):
                test = code_of(ancestor.test)
                return path is not None and path in test and any(word in test for word in ("exist", "isdir", "is_dir"))
        return False

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.only_functions is not None:
            module = updated_node  # Only the writers that converted code calls change here.
        elif entry_point(self.analysis) == "main":
            # Module-level code runs at import, before setup_distributed() in the entry
            # block: no process group exists yet, so a guard would be true everywhere.
            for statement in original_node.body:
                if m.matches(statement, MAIN_GUARD):
                    continue  # a module's `__main__` self-test, which runs as a program of its own, not at import
                if self._writer_assignment(statement) is not None or self._kind(statement) == EFFECT:
                    self.report(statement, "DDP216")
            module = updated_node
        else:
            module = updated_node.with_changes(body=self._guarded(original_node.body, updated_node.body))
        if self.shared_values or self.shared_tests:
            import_torch_distributed(self.context, self.facts.distributed_alias)
            module = add_helper(module, self.facts, names.MAIN_VALUE_HELPER, MAIN_VALUE_HELPER_SOURCE)
        if not self.uses_helper:
            return module
        import_torch_distributed(self.context, self.facts.distributed_alias)
        AddImportsVisitor.add_needed_import(self.context, "os")
        return add_helper(module, self.facts, names.MAIN_PROCESS_HELPER, MAIN_PROCESS_HELPER_SOURCE)

    def leave_With(self, original_node: cst.With, updated_node: cst.With) -> cst.With:
        """``with open(log, "w") as f:`` around code that cannot go under a guard whole (a training loop):
        the other processes open ``os.devnull``, so only the main process writes the file and none truncates it."""
        if self._kind(original_node) == EFFECT or under_rank_guard(self, original_node):
            return updated_node
        items = []
        for original, item in zip(original_node.items, updated_node.items):
            call = item.item
            if opens_for_writing(self, original.item) and isinstance(call, cst.Call) and call.args and not call.args[0].keyword:
                path = call.args[0]
                if names.MAIN_PROCESS_HELPER not in code_of(path.value):
                    self.uses_helper = True
                    AddImportsVisitor.add_needed_import(self.context, "os")
                    on_main = cst.IfExp(test=_guard_call(), body=path.value, orelse=cst.parse_expression("os.devnull"))
                    item = item.with_changes(item=call.with_changes(args=[path.with_changes(value=on_main), *call.args[1:]]))
                    if isinstance(original.asname, cst.AsName) and isinstance(original.asname.name, cst.Name):
                        for read in self.analysis.references(original.asname.name):
                            if attribute_read(self.analysis, read) is not None:
                                self.report(read, "DDP418", writer=original.asname.name.value, how="the others open os.devnull")
                                break
            items.append(item)
        return updated_node.with_changes(items=items)

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        if original_node not in self.shared_values:
            return updated_node
        shared = cst.Call(func=cst.Name(names.MAIN_VALUE_HELPER), args=[cst.Arg(updated_node.value)])
        return updated_node.with_changes(value=shared)


# Tests of whether a path exists, by its first argument (os.path) or their receiver (pathlib).
_PATH_TESTS = frozenset({"os.path.exists", "os.path.isdir", "os.path.isfile", "os.path.lexists"})


def _tested_path(analysis: Analysis, call: cst.Call) -> str | None:
    """The path ``call`` tests the existence of, as written: ``save_dir`` in ``os.path.exists(save_dir)`` or ``save_dir.exists()``."""
    if analysis.matches(call, call_to(_PATH_TESTS)) and call.args and call.args[0].keyword is None:
        return code_of(call.args[0].value)
    if m.matches(call, m.Call(func=m.Attribute(attr=m.Name("exists") | m.Name("is_dir")), args=[])):
        return code_of(call.func.value)  # type: ignore[attr-defined]
    return None


def _function_of(analysis: Analysis, node: cst.CSTNode) -> cst.CSTNode | None:
    return next((a for a in analysis.ancestors(node) if isinstance(a, cst.FunctionDef)), None)


# Functions whose value is named after what they are handed: `np.mean(losses)` is the losses' mean.
_OF_ITS_ARGUMENT = frozenset({
    "sum", "float", "np.mean", "np.average", "np.sum", "numpy.mean", "numpy.average", "numpy.sum", "statistics.mean",
    "statistics.fmean", "torch.mean",
})  # fmt: skip


def _result_name(collective: cst.Call) -> str:
    """A name for a collective's value: ``global_loss`` for ``all_reduce_mean(loss.item())``, ``test_result`` for ``test(...)``."""
    func = code_of(collective.func).rsplit(".", 1)[-1]
    if func in names.COLLECTIVE_HELPERS and collective.args:
        value = collective.args[0].value
        while isinstance(value, (cst.Call, cst.Subscript)) or m.matches(value, m.Attribute(attr=m.Name("data"))):
            # loss.item() -> loss, loss.data[0] -> loss, np.mean(losses) -> losses
            if isinstance(value, cst.Call) and value.args and not value.args[0].keyword and code_of(value.func) in _OF_ITS_ARGUMENT:
                value = value.args[0].value
            elif isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
                value = value.func.value
            elif isinstance(value, cst.Call):
                break
            else:
                value = value.value  # type: ignore[attr-defined]
        stem = value.attr.value if isinstance(value, cst.Attribute) else code_of(value)
        if stem.isidentifier():
            return f"global_{stem}"
    return f"{func}_result"
