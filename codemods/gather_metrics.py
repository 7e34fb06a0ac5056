"""All-reduce the metrics a script reports, where it reports them, so rank 0 logs whole-data numbers.

Under DDP each process sees only its shard, so a running loss, a
``correct``/``total`` counter or an ``AverageMeter`` holds one process's
share. This codemod finds those accumulators in loops over a DataLoader and
reduces them once, after the loop, before anything reads them:

- sums and counts (``correct += pred.eq(y).sum().item()``, ``total += y.size(0)``,
  losses with ``reduction="sum"``) become exact sums over processes;
- per-batch means summed over steps (``running_loss += loss.item()``) become the
  mean over processes, which equals the whole-batch mean while every process
  averages equally many samples, as in training with DistributedSampler;
- meters with ``.sum``/``.count``/``.avg`` get both fields summed and ``avg`` recomputed.

A print or log inside a training loop reads the reduced value there, on
every process, with the print itself guarded by guard_side_effects: the
loss (``loss.item()`` or the tensor), accumulators, and a reduced copy of a
meter. A batch's size it prints (``batch_idx * len(data)``) is multiplied by
the world size, which needs no collective. The last step's loss printed
right after a training loop is averaged over processes there. A print
the script already runs on some processes only (``if step % 100 == 0 and
gpu == 0:``) reads a value reduced just before that ``if``, since a
collective inside it would hang. Progress inside an evaluation loop is left
per process, since shards may differ in length there and a collective would
hang; that is reported.

Decisions such as ``if acc > best_acc:`` then see the same numbers on every
process and take the same branch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from dp2ddp.analysis import names
from dp2ddp.analysis.module import Analysis
from dp2ddp.analysis.syntax import REDUCTION, call_to, code_of
from ._base import Dp2ddpCodemod, add_helper, import_torch_distributed
from dp2ddp.analysis.effects import is_rank_guard, under_rank_guard
from dp2ddp.analysis.lifecycle import per_process_names
from dp2ddp.analysis.decisions import (
    is_training_loop, loader_names, per_process_stops, plateau_steps, schedule_counters, split_loader_names,
)
from dp2ddp.analysis.results import summed_loss, batch_names, batch_sizes, in_inner_data_loop, is_bound_here, loop_results, owner_of

SUM_HELPER_SOURCE = f'''
def {names.SUM_HELPER}(*values, divide_by=1):
    """Sum values over all processes (divided by ``divide_by``): one value in, one out; several in, a tuple out.

    A value is a number, a tensor, a NumPy array or scalar, or a list, tuple or dict of
    them; each comes back with its type, shape and device. Anything else cannot be summed:
    the values come back as they were, with a warning, and the run goes on.
    """
    leaves = []

    def flatten(value):
        if isinstance(value, dict):
            return all([flatten(item) for item in value.values()])
        if isinstance(value, (list, tuple)):
            return all([flatten(item) for item in value])
        if isinstance(value, (int, float, torch.Tensor)) or hasattr(value, "__array__"):
            leaves.append(torch.as_tensor(value).detach().reshape(-1))
            return True
        return False

    # Every process holds values of one structure, so every process takes the same branch here.
    if not flatten(values):
        import warnings
        warnings.warn("a value to sum over processes is not a number, tensor or container of them; each process reports its own")
        return values[0] if len(values) == 1 else values
    # float64 keeps counts such as correct and total exact up to 2**53.
    # Without a process group (code of the project that an unconverted script calls) this process is the whole.
    grouped = dist.is_initialized()
    device = torch.device("cuda", torch.cuda.current_device()) if grouped and dist.get_backend() == "nccl" else torch.device("cpu")
    sums = torch.cat([leaf.to(device=device, dtype=torch.float64) for leaf in leaves]) if leaves else torch.zeros(0, dtype=torch.float64, device=device)
    if grouped:
        dist.all_reduce(sums)
    sums = sums / divide_by
    position = 0

    def rebuild(value):
        nonlocal position
        if isinstance(value, dict):
            return type(value)((key, rebuild(item)) for key, item in value.items())
        if isinstance(value, (list, tuple)):
            items = [rebuild(item) for item in value]
            if isinstance(value, list):
                return items
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        size = torch.as_tensor(value).numel()
        total = sums[position : position + size]
        position += size
        if isinstance(value, torch.Tensor):
            exact = value.dtype.is_floating_point or value.dtype.is_complex or divide_by == 1
            return total.reshape(value.shape).to(dtype=value.dtype if exact else torch.float64, device=value.device)
        if isinstance(value, (int, float)):
            number = total.item()
            return type(value)(number) if isinstance(value, float) or divide_by == 1 else number
        array = total.cpu().reshape(torch.as_tensor(value).shape).numpy()
        return array.astype(value.dtype if divide_by == 1 else "float64")[()]

    results = [rebuild(value) for value in values]
    return results[0] if len(results) == 1 else tuple(results)
'''
MEAN_HELPER_SOURCE = f'''
def {names.MEAN_HELPER}(value):
    """The mean over processes of a per-process mean, such as per-batch losses summed over steps."""
    # It equals the whole-data mean when every process averaged equally many samples, as
    # DistributedSampler gives each process in training; with uneven shards, as in exact
    # evaluation, each process counts equally whatever its share, so sum and count instead.
    return {names.SUM_HELPER}(value, divide_by=dist.get_world_size() if dist.is_initialized() else 1)
'''
METER_HELPER_SOURCE = f'''
def {names.METER_HELPER}(*meters):
    """Make AverageMeter-style meters (sum, count or cnt, avg) cover the samples of every process."""

    def average(total, count):
        # A meter may sum lists or dicts of values (one per class, per loss term): average each.
        if isinstance(total, dict):
            return type(total)((key, average(item, count)) for key, item in total.items())
        if isinstance(total, (list, tuple)):
            return type(total)(average(item, count) for item in total)
        return total / count

    for meter in meters:
        # The samples counted: `count`, or `cnt` in DARTS-style meters.
        field = "count" if hasattr(meter, "count") else "cnt"
        meter.sum, counted = {names.SUM_HELPER}(meter.sum, getattr(meter, field))
        setattr(meter, field, counted)
        meter.avg = average(meter.sum, max(counted, 1))
'''
METER_COPY_HELPER_SOURCE = f'''
def {names.METER_COPY_HELPER}(meter):
    """A copy of an AverageMeter-style meter that covers every process's samples so far, for a progress line."""
    # The meter itself goes on counting this process's samples: reduced in place, the other
    # processes' shares would be added into it again at every report.
    import copy

    reduced = copy.copy(meter)
    {names.METER_HELPER}(reduced)
    if hasattr(meter, "val"):
        # The last batch's value: in training every process's share of it is equally large,
        # so the mean over processes is the whole batch's.
        reduced.val = {names.MEAN_HELPER}(meter.val)
    return reduced
'''

# Helpers that call other helpers, which must then be added too.
HELPER_NEEDS = {
    names.MEAN_HELPER: {names.SUM_HELPER},
    names.METER_HELPER: {names.SUM_HELPER},
    names.METER_COPY_HELPER: {names.METER_HELPER, names.MEAN_HELPER, names.SUM_HELPER},
}

# What a tqdm bar shows beside its count: `pbar.set_postfix(loss=...)`, `pbar.set_description(f"loss {loss:.3f}")`.
_BAR_TEXT = frozenset({"set_postfix", "set_postfix_str", "set_description", "set_description_str"})


@dataclass
class _LoopPlan:
    sums: list[str] = field(default_factory=list)
    means: list[str] = field(default_factory=list)
    meters: list[str] = field(default_factory=list)

    def statements(self) -> list[cst.BaseStatement]:
        lines = []
        if self.sums:
            lines.append(f"{', '.join(self.sums)} = {names.SUM_HELPER}({', '.join(self.sums)})")
        lines += [f"{name} = {names.MEAN_HELPER}({name})" for name in self.means]
        if self.meters:
            lines.append(f"{names.METER_HELPER}({', '.join(self.meters)})")
        return [cst.parse_statement(line) for line in lines]


# Statistics of a list of per-step losses that are linear in the steps: the mean over processes of each process's
# equals the statistic of the whole batches' losses.
_STEP_STATISTICS = frozenset({"numpy.mean", "numpy.average", "numpy.sum", "statistics.mean", "statistics.fmean", "builtins.sum"})


class GatherMetricsCommand(Dp2ddpCodemod):
    DESCRIPTION = "All-reduce reported metrics (loss sums, correct/total, AverageMeters) where they are reported."
    def __init__(self, context: CodemodContext) -> None:
        super().__init__(context)
        self.after_loop: dict[cst.For, _LoopPlan] = {}
        # Report statements inside training loops: expressions to reduce there, by code.
        self.in_loop: dict[cst.SimpleStatementLine, dict[str, str]] = {}
        # Rank-guarded ifs in training loops: what to reduce before each (code -> name, helper),
        # and the report lines under them, which read the names instead.
        self.before_guard: dict[cst.If, dict[str, tuple[str, str]]] = {}
        self.read_reduced: dict[cst.SimpleStatementLine, dict[str, str]] = {}
        self.helpers_used: set[str] = set()
        # `scheduler.step(val_loss)` of a ReduceLROnPlateau: the value to average over processes there.
        self.plateau_values: set[cst.BaseExpression] = set()
        # A batch's size read in a training report (`batch_idx * len(data)`), to be multiplied by the world size:
        # the size itself, or the product whose right-hand factor it is; and torch.distributed's spelling there.
        self.scaled_sizes: dict[cst.BaseExpression, str] = {}
        self.scaled_products: dict[cst.BinaryOperation, str] = {}
        # Progress lines reported as this process's own (DDP403).
        self.progress_reported: set[cst.SimpleStatementLine] = set()
        # Functions that return their share's numbers, and whether a name holds them at a line (DDP427).
        self._returning: set[str] = set()
        # Names of an enclosing scope that a function fills with its share's numbers (`state["train_loss"] =
        # loss_avg` in a nested `train()`), each with the functions whose calls do (DDP427).
        self._filled_by: dict[str, set[str]] = {}
        # The entries they fill so (`train_loss`), or None where some are not known.
        self._filled_keys: dict[str, set[str] | None] = {}
        self._from_training: dict[tuple[str, int], bool] = {}

    # -- detection, on the original tree --------------------------------------------

    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        self.effects = analysis.effects
        self.training_loaders = split_loader_names(analysis)
        self.plateau_args = {step.value for step in plateau_steps(analysis)}
        for loop in analysis.nodes(cst.For):
            if loop in analysis.whole_loops:
                continue  # every process counts the whole set already
            loaders = self._loader_names(loop)
            if (loaders or loop in analysis.gathered_loops) and not under_rank_guard(self, loop):
                self._plan_loop(loop)
        for loop in analysis.nodes(cst.While):
            if self._trains(loop) and not under_rank_guard(self, loop):
                # `while True: x, y = next(it)`: its losses are one process's, and are printed as in a for loop.
                self._plan_reports(loop, True, {}, [])
        self._plan_plateau_steps(analysis)
        self._report_per_process_prints(analysis)
        for test, value in per_process_stops(analysis, self.training_loaders):
            self.report(test, "DDP424", value=value)
        for aug, counter in schedule_counters(analysis):
            self.report(aug, "DDP421", counter=counter)

    def _report_per_process_prints(self, analysis: Analysis) -> None:
        """Every number a training loop's loss reaches a print or log through is reduced above, or reported here.

        From each training loop's losses, values flow on through assignments
        (``epoch_loss = loss.data.item()``), into what collects them
        (``losses.append(...)``, ``meter.add(loss)``), and out of the function
        that trains through its ``return`` into what its callers bind
        (``train_loss = train_epoch(...)``). A side effect that reads one of
        them, and that the plans above neither reduce nor report, prints this
        process's own number as if it were the whole data's (DDP427). The
        accumulators reduced after their loop are whole-data values again.
        """
        # Names reduced after their loop, by the scope they are reduced in: `loss_avg` summed after test()'s loop is
        # not train()'s `loss_avg`.
        reduced: dict[cst.CSTNode, set[str]] = {}
        for loop, plan in self.after_loop.items():
            reduced.setdefault(_scope(analysis, loop), set()).update((*plan.sums, *plan.means, *plan.meters))
        # Reduced in place by an earlier conversion: `all_reduce_meter(losses)`, `total = all_reduce_mean(total)`.
        for call in analysis.findall(REDUCTION):
            if isinstance(analysis.parents.get(call), cst.Expr) or isinstance(analysis.parents.get(call), cst.Assign):
                reduced.setdefault(_scope(analysis, call), set()).update(
                    code_of(a.value) for a in call.args if isinstance(a.value, cst.Name)  # type: ignore[attr-defined]
                )
        # Rebound whole to their reduction in place: `train_loss = np.mean(train_loss)` becomes its mean over processes.
        for statement, values in self.in_loop.items():
            for assign in statement.body:
                if isinstance(assign, cst.Assign) and code_of(assign.value) in values:
                    bound = {n.value for t in assign.targets for n in analysis.within(t.target, cst.Name)}
                    reduced.setdefault(_scope(analysis, statement), set()).update(bound)
        seeds: dict[cst.CSTNode, set[str]] = {}
        loops = [
            loop for loop in analysis.nodes(cst.For)
            # A loop that also evaluates a loader kept whole (`iterate("val", ...)` beside `iterate("train", ...)`)
            # still trains on its share: what it prints is reported, since no one reduction is right for both.
            if self._trains(loop) or (self._is_training_loop(loop) and loop not in analysis.whole_loops)  # type: ignore[arg-type]
        ]  # fmt: skip
        loops += [loop for loop in analysis.nodes(cst.While) if self._trains(loop)]
        for loop in loops:
            if under_rank_guard(self, loop):
                continue
            losses: set[str] = set()
            for call in m.findall(loop.body, m.Call(func=m.Attribute(attr=m.Name("backward")))):
                receiver = call.func.value  # type: ignore[attr-defined]
                while isinstance(receiver, cst.BinaryOperation):  # `(loss * dist.get_world_size()).backward()`
                    receiver = receiver.left
                if isinstance(receiver, cst.Name):
                    losses.add(receiver.value)
            # The terms the loss is summed from in the step (`loss = w1 * loss_1 + w2 * loss_2`): each is this
            # process's too (`writer.add_scalar("photometric", loss_1.item(), n)`).
            for assign in analysis.within(loop.body, cst.Assign):
                if any(m.matches(t.target, m.Name(m.MatchIfTrue(lambda n: n in losses))) for t in assign.targets):
                    terms = {n.value for n in analysis.within(assign.value, cst.Name)}
                    bound = {n.value for a in analysis.within(loop.body, cst.AssignTarget) for n in analysis.within(a.target, cst.Name)}
                    losses |= terms & bound
            # What the wrapped model returns for this process's share (`output = model(x)`): a training accuracy
            # counted from it (`correct = output.argmax(1).eq(y).sum()`) is this process's own too.
            models = analysis.lifecycle.model_names | self.effects.models
            for assign in analysis.within(loop.body, cst.Assign):
                if any(code_of(c.func).removeprefix("self.") in models for c in analysis.within(assign.value, cst.Call)):
                    losses |= {n.value for t in assign.targets for n in analysis.within(t.target, cst.Name)}
            seeds.setdefault(_scope(analysis, loop), set()).update(losses - reduced.get(_scope(analysis, loop), set()))
        functions = {f.name.value: f for f in analysis.nodes(cst.FunctionDef)}
        tainted: dict[cst.CSTNode, set[str]] = {}
        for _ in range(3):  # a value returned by a function whose caller returns it in turn
            for scope, names_ in seeds.items():
                tainted[scope] = _flow(
                    analysis, scope, names_ | tainted.get(scope, set()), reduced.get(scope, set()), self._unreduced_reads,
                    self.effects.is_side_effect,
                )
            returning = {
                f.name.value for f in functions.values()
                if any(r.value is not None and self._unreduced_reads(r.value) & tainted.get(f, set()) for r in analysis.within(f, cst.Return))
            }  # fmt: skip
            self._returning = returning
            grown = self._fill_enclosing(analysis, tainted, seeds, reduced)
            for assign in analysis.nodes(cst.Assign):
                call = assign.value
                if not isinstance(call, cst.Call) or not m.matches(call.func, m.Name() | m.Attribute(value=m.Name("self"))):
                    continue
                if code_of(call.func).removeprefix("self.") not in returning:
                    continue
                scope = _scope(analysis, assign)
                bound = {n.value for t in assign.targets for n in analysis.within(t.target, cst.Name)} - reduced.get(scope, set())
                if not bound <= seeds.get(scope, set()):
                    seeds.setdefault(scope, set()).update(bound)
                    grown = True
            if not grown:
                break
        # A line with values reduced in place (in_loop) is still read for what it prints beside them.
        handled = set(self.read_reduced) | self.progress_reported
        for statement in analysis.nodes(cst.SimpleStatementLine):
            calls = [s.value for s in statement.body if isinstance(s, cst.Expr) and isinstance(s.value, cst.Call)]
            if not calls or not all(self.effects.is_side_effect(c) for c in calls):
                continue
            if statement in handled or m.findall(statement, REDUCTION):
                continue
            names_ = tainted.get(_scope(analysis, statement), set())
            shown = {
                n for n in self._unreduced_reads(statement) & names_
                if not self._other_entries_only(n, statement) and self._last_from_training(n, statement, names_)
            }  # fmt: skip
            if shown:
                self.report(statement, "DDP427", value=sorted(shown, key=lambda n: (len(n), n))[0])

    def _fill_enclosing(
        self, analysis: Analysis, tainted: dict[cst.CSTNode, set[str]], seeds: dict[cst.CSTNode, set[str]],
        reduced: dict[cst.CSTNode, set[str]],
    ) -> bool:
        """Seed the enclosing scope's names that a function fills, not binds, with its share's numbers.

        ``state["train_loss"] = loss_avg`` or ``history.append(loss)`` in a nested ``train()``
        changes the ``state`` or ``history`` of the function around it, which prints it. Whether
        anything grew is returned.
        """
        grown = False
        for function, names_ in list(tainted.items()):
            if not isinstance(function, cst.FunctionDef):
                continue
            bound = _bound_in(analysis, function)
            for name in names_ - bound - reduced.get(function, set()):
                outer = next((a for a in analysis.ancestors(function) if isinstance(a, (cst.FunctionDef, cst.Module)) and name in _bound_in(analysis, a)), None)
                if outer is None or name in reduced.get(outer, set()):
                    continue
                self._filled_by.setdefault(name, set()).add(function.name.value)
                self._note_filled_keys(analysis, function, name, names_)
                if name not in seeds.get(outer, set()):
                    seeds.setdefault(outer, set()).add(name)
                    grown = True
        return grown

    def _note_filled_keys(self, analysis: Analysis, function: cst.FunctionDef, name: str, tainted: set[str]) -> None:
        """The entries ``function`` fills in ``name`` with its share's numbers (``state["train_loss"] = ...``);
        any other way it fills it (``state.update(...)``, a key that is not a literal) leaves them unknown."""
        keys = self._filled_keys.setdefault(name, set())
        if keys is None:
            return
        for assign in analysis.within(function, cst.Assign):
            for target in assign.targets:
                entry = target.target
                if isinstance(entry, cst.Subscript) and m.matches(entry.value, m.Name(name)) and self._unreduced_reads(assign.value) & tainted:
                    key = _literal_key(entry)
                    if key is None:
                        self._filled_keys[name] = None
                        return
                    keys.add(key)
        if any(m.matches(c.func, m.Attribute(value=m.Name(name))) for c in analysis.within(function, cst.Call)) or not keys:
            self._filled_keys[name] = None

    def _unreduced_reads(self, node: cst.CSTNode) -> set[str]:
        """What ``node`` reads outside the values planned to be reduced on its line."""
        line = node if isinstance(node, cst.SimpleStatementLine) else next(
            (a for a in self.analysis.ancestors(node) if isinstance(a, cst.SimpleStatementLine)), None
        )
        wraps = self.in_loop.get(line, {}) if line is not None else {}  # type: ignore[arg-type]
        index, last = self.analysis.index, self.analysis.last
        # What the line reduces, and `len(losses)`: how many steps a list holds, alike on every process.
        # Sample counts scaled by the world size (`x.shape[0] * dist.get_world_size()`) are whole-batch counts again.
        scaled = self.scaled_sizes.keys() | self.scaled_products.keys()
        inside = [
            e for kind in (cst.Call, cst.Subscript, cst.Name, cst.BinaryOperation) for e in self.analysis.within(node, kind)
            if code_of(e) in wraps or e in scaled or m.matches(e, REDUCTION | m.Call(func=m.Name("len")))
        ]  # fmt: skip

        def outside(e: cst.CSTNode) -> bool:
            return not any(index[w] <= index[e] <= last[w] for w in inside)

        def value(name: cst.Name) -> bool:  # not a keyword (`loss=`) or an attribute's name (`.avg`)
            parent = self.analysis.parents.get(name)
            return not (isinstance(parent, cst.Arg) and parent.keyword is name) and not (isinstance(parent, cst.Attribute) and parent.attr is name)

        names_ = {e.value for e in self.analysis.within(node, cst.Name) if value(e) and outside(e)}
        return names_ | {code_of(e) for e in self.analysis.within(node, cst.Attribute) if outside(e)}

    def _report_progress(self, line: cst.SimpleStatementLine, why: str) -> None:
        self.progress_reported.add(line)
        self.report(line, "DDP403", why=why)

    def _plan_plateau_steps(self, analysis: Analysis) -> None:
        """Average the value a ReduceLROnPlateau steps on, so every process lowers its rate in the same epoch.

        A value each process computed alone (the last batch's loss, a list of
        its own losses) differs between processes; their learning rates, and
        then their replicas, would drift apart. An average of a value that is
        the same everywhere changes nothing.
        """
        for step in plateau_steps(analysis):
            if step.guarded:
                self.report(step.call, "DDP420", scheduler=step.scheduler)
                continue
            self.plateau_values.add(step.value)
            self.report(step.value, "DDP419", scheduler=step.scheduler, value=code_of(step.value))

    def _trains(self, loop: cst.For | cst.While) -> bool:
        """Whether ``loop`` itself takes training steps: a ``backward()`` whose innermost loop it is."""
        for call in self.analysis.within(loop.body, cst.Call):
            if m.matches(call.func, m.Attribute(attr=m.Name("backward"))):
                steps = (cst.For, cst.While, cst.FunctionDef)
                if next(a for a in self.analysis.ancestors(call) if isinstance(a, steps)) is loop:
                    return True
        return False

    def _last_from_training(self, name: str, node: cst.CSTNode, tainted: set[str], depth: int = 0) -> bool:
        """Whether the value ``name`` holds at ``node``, by the last binding of it before ``node`` in its scope,
        comes from a training loop: bound in one, or computed from a name that is. Names are followed by place
        here, so an `acc` an evaluation over the whole set binds again after the training loop is not its share.
        With no binding before ``node`` (a parameter, a value returned by a call), what the names say stands."""
        key = (name, id(node))
        cache = self._from_training
        if key not in cache:
            cache[key] = True  # a cycle of bindings reads as from training until shown otherwise
            cache[key] = self._from_training_uncached(name, node, tainted, depth)
        return cache[key]

    def _from_training_uncached(self, name: str, node: cst.CSTNode, tainted: set[str], depth: int) -> bool:
        analysis = self.analysis
        scope = _scope(analysis, node)

        def targets(binding: cst.Assign | cst.AugAssign | cst.For) -> list[cst.BaseExpression]:
            return [binding.target] if isinstance(binding, (cst.AugAssign, cst.For)) else [t.target for t in binding.targets]

        bindings = [
            b for b in (*analysis.within(scope, cst.Assign), *analysis.within(scope, cst.AugAssign), *analysis.within(scope, cst.For))
            if analysis.index[b] < analysis.index[node] and _scope(analysis, b) is scope
            and any(n.value == name for t in targets(b) for n in analysis.within(t, cst.Name))
        ]  # fmt: skip
        # `metrics.add(loss.item())`: a method called for its effect changes what the name holds, as a binding does.
        changes = [
            e.value for e in analysis.within(scope, cst.Expr)
            if m.matches(e.value, m.Call(func=m.Attribute(value=m.Name(name)))) and analysis.index[e] < analysis.index[node]
            and _scope(analysis, e) is scope
        ]  # fmt: skip
        # `train()`, a nested function that fills `state` with its share's numbers: a change from training.
        fillers = self._filled_by.get(name, set())
        filled = [
            c for c in analysis.within(scope, cst.Call)
            if fillers and m.matches(c.func, m.Name(m.MatchIfTrue(lambda n: n in fillers)))
            and analysis.index[c] < analysis.index[node] and _scope(analysis, c) is scope
        ]  # fmt: skip
        if not bindings or depth > 12:
            return True
        for last in sorted([*bindings, *changes, *filled], key=lambda b: analysis.index[b], reverse=True):
            if last in filled:
                return True
            if isinstance(last, cst.Assign) and all(m.matches(t.target, m.Subscript() | m.Attribute()) for t in last.targets):
                # `state["epoch"] = epoch`: an entry added beside the others, which the container still holds.
                read = analysis.reads(last.value) & tainted
                if any(self._last_from_training(other, last, tainted, depth + 1) for other in read):
                    return True
                continue
            return self._from_binding(name, node, last, tainted, depth)
        return False

    def _from_binding(
        self, name: str, node: cst.CSTNode, last: cst.Assign | cst.AugAssign | cst.For | cst.Call, tainted: set[str], depth: int
    ) -> bool:
        """Whether the value ``last`` gives ``name`` comes from a training loop."""
        analysis = self.analysis
        if any(isinstance(a, (cst.For, cst.While)) and self._trains(a) for a in (last, *analysis.ancestors(last))):
            return True
        if isinstance(last, cst.Call):
            read = {n for a in last.args for n in analysis.reads(a.value)} & tainted
            return any(self._last_from_training(other, last, tainted, depth + 1) for other in read)
        value = last.iter if isinstance(last, cst.For) else last.value
        calls = [c for c in analysis.within(value, cst.Call)]
        if any(code_of(c.func).removeprefix("self.") in self._returning for c in calls):
            return True  # `train_loss = train_epoch(...)`, a function that returns its share's loss
        read = (analysis.reads(value) | ({name} if isinstance(last, cst.AugAssign) else set())) & tainted
        read = {other for other in read if not self._other_entries_only(other, value)}
        return any(self._last_from_training(other, last, tainted, depth + 1) for other in read if (other, last) != (name, node))

    def _other_entries_only(self, container: str, value: cst.CSTNode) -> bool:
        """Whether ``value`` reads only entries of ``container`` no function fills with its share's numbers:
        ``best = state["test_accuracy"]`` where ``train()`` fills ``state["train_loss"]``."""
        keys = self._filled_keys.get(container)
        if keys is None:
            return False
        uses = [n for n in self.analysis.within(value, cst.Name) if n.value == container]
        return bool(uses) and all(
            isinstance(entry := self.analysis.parents.get(use), cst.Subscript) and entry.value is use
            and (key := _literal_key(entry)) is not None and key not in keys
            for use in uses
        )  # fmt: skip

    def _read_with_ungathered(self, loop: cst.For, ungathered: list[tuple[cst.CSTNode, str]]) -> set[str]:
        """Accumulators read after ``loop`` on one line with a result no reduction covers (``metrics / cnt``, where
        ``metrics`` is an object of the script's own): reducing only them would mix a whole-data count with this
        process's sums. They stay this process's own, as the other value is (DDP427 says so where they are shown)."""
        held = {h for _, h in ungathered} - {"self", "cls"}  # a method on the object itself (`self.optimizer.step()`)
        if not held:
            return set()
        owner = owner_of(self.analysis, loop)
        mixed: set[str] = set()
        for line in self.analysis.findall_in(owner, m.SimpleStatementLine()):
            if not self.analysis.is_after(line, loop):
                continue
            read = {code_of(n) for kind in (cst.Name, cst.Attribute) for n in self.analysis.within(line, kind)}
            if read & held:
                mixed |= read - held
        return mixed

    def _loader_names(self, loop: cst.For) -> list[str]:
        return loader_names(loop, self.training_loaders)

    def _is_training_loop(self, loop: cst.For) -> bool:
        return is_training_loop(loop, self.training_loaders)

    def _plan_loop(self, loop: cst.For) -> None:
        results = loop_results(self.analysis, loop, training=self._is_training_loop(loop) or self._trains(loop))
        mixed = self._read_with_ungathered(loop, results.ungathered)
        plan = _LoopPlan([n for n in results.sums if n not in mixed], [n for n in results.means if n not in mixed], results.meters)
        if plan.sums or plan.means or plan.meters:
            self.after_loop[loop] = plan
        self._plan_reports(loop, self._is_training_loop(loop), results.running, plan.meters)
        if self._is_training_loop(loop):
            self._plan_reports_after(loop)
            self._plan_step_lists(loop)

    def _plan_step_lists(self, loop: cst.For) -> None:
        """Average over processes what the lines right after a training loop compute from a list of its losses.

        ``losses = []``, ``losses.append(loss.item())`` once per step, then
        ``np.average(losses)``, ``np.mean``, ``statistics.mean`` or ``sum``: each
        process's statistic is over its own shares' losses, and with equally many
        steps on every process the mean over processes is the statistic of the whole
        batches' losses, as DataParallel computed it. Only statements of the loop's
        own block qualify (every process reaches them together, a ``return`` too),
        up to one that binds the list again; a criterion that sums over the batch
        keeps its list per process.
        """
        block = self.analysis.parents.get(loop)
        if not isinstance(block, (cst.IndentedBlock, cst.Module)) or under_rank_guard(self, loop):
            return
        losses = {
            code_of(call.func.value)  # type: ignore[attr-defined]
            for call in m.findall(loop.body, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("backward"))))
            if call not in self.analysis.scaled_backwards
        }
        owner = next((a for a in self.analysis.ancestors(loop) if isinstance(a, (cst.FunctionDef, cst.Module))), self.analysis.module)
        lists = set()
        for call in self.analysis.within(loop.body, cst.Call):
            if not m.matches(call.func, m.Attribute(value=m.Name(), attr=m.Name("append"))) or len(call.args) != 1:
                continue
            if in_inner_data_loop(self.analysis, call, loop) or not isinstance(self.analysis.parents.get(call), cst.Expr):
                continue
            value = call.args[0].value
            name = call.func.value.value  # type: ignore[attr-defined]
            empty = any(
                m.matches(a.value, m.List(elements=[])) and self.analysis.is_before(a, loop)
                for a in self.analysis.within(owner, cst.Assign)
                if any(m.matches(t.target, m.Name(name)) for t in a.targets)
            )  # fmt: skip
            if empty and self.analysis.reads(value) & losses and not summed_loss(self.analysis, value, loop):
                lists.add(name)
        if not lists:
            return
        statistic = m.Call(
            func=m.MatchIfTrue(lambda f: bool({q.name for q in self.analysis.qualified_names(f)} & _STEP_STATISTICS)),
            args=[m.Arg(m.Name(m.MatchIfTrue(lambda n: n in lists))), m.ZeroOrMore()],
        )
        statements = list(block.body)
        for statement in statements[statements.index(loop) + 1 :]:
            if isinstance(statement, cst.SimpleStatementLine) and not under_rank_guard(self, statement):
                for found in self.analysis.findall_in(statement, statistic):
                    # Reduced already, or the value a ReduceLROnPlateau steps on, which is averaged where it is passed.
                    if found not in self.plateau_args and not any(m.matches(a, REDUCTION) or a in self.plateau_args for a in self.analysis.ancestors(found)):
                        self.in_loop.setdefault(statement, {})[code_of(found)] = names.MEAN_HELPER
            rebinds = {n.value for n in self.analysis.within(statement, cst.Name) if is_bound_here(self.analysis, n)}
            lists -= rebinds
            if not lists:
                return

    def _plan_reports(
        self, loop: cst.For | cst.While, training: bool, accumulators: dict[str, str], meters: list[str]
    ) -> None:
        # A backward whose loss gets scaled by the world size no longer names the loss.
        losses = {
            code_of(call.func.value)  # type: ignore[attr-defined]
            for call in m.findall(loop.body, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("backward"))))
            if call not in self.analysis.scaled_backwards
        }
        # Names that may differ between processes; a step counter (`i += 1` or `i = i + 1` once per step) does not.
        varying = per_process_names(self.analysis, loop)
        for line in m.findall(loop.body, m.SimpleStatementLine()):
            assert isinstance(line, cst.SimpleStatementLine)
            if in_inner_data_loop(self.analysis, line, loop):
                continue  # That loop reports its own progress.
            calls = [s.value for s in line.body if isinstance(s, cst.Expr) and isinstance(s.value, cst.Call)]
            if not calls or not all(self.effects.is_side_effect(c) or self._shown_on_a_bar(c, loop) for c in calls):
                continue
            if training and isinstance(loop, cst.For):  # a while loop names no batch
                self._plan_global_sizes(loop, line)
            if m.findall(line, REDUCTION):
                continue  # Reduced already.
            read = {n.value for n in m.findall(line, m.Name()) if isinstance(n, cst.Name)}  # type: ignore[union-attr]
            wraps = {name: helper for name, helper in accumulators.items() if name in read}
            wraps.update(self._loss_reads(line, losses))
            # `log = "loss {:.4f}".format(losses.avg)` then `print(log)`: the line shows what it was built from.
            built_from = self._built_from(loop, line, read)
            shows_meter = any(meter in read | built_from for meter in meters) or bool(built_from & accumulators.keys())
            if training:
                # A progress line reads a reduced copy; the meter is reduced in place once, after the loop.
                wraps.update({meter: names.METER_COPY_HELPER for meter in meters if meter in read})
            if not wraps and not shows_meter:
                continue
            guard = self._rank_guard(loop, line)
            if training and wraps and guard is not None:
                if not self._reduce_before(guard, loop, line, wraps, varying):
                    why = "as only some processes pass the rank condition around it, and convert cannot reduce before that condition"
                    self._report_progress(line, why=why)
            elif training and wraps and self._uniform_path(loop, line, varying):
                self.in_loop[line] = wraps
            elif training and not wraps and guard is None and (built := self._meter_strings(loop, line, read, meters, varying)):
                # `msg = "...".format(loss=losses)`, then `logger.info(msg)`: the string is built from reduced copies.
                for build, meters_read in built.items():
                    self.in_loop.setdefault(build, {}).update({meter: names.METER_COPY_HELPER for meter in meters_read})
            elif training:
                self._report_progress(line, why="as convert cannot prove every process reaches this line at the same step")
            else:
                self._report_progress(line, why="as evaluation shards may give processes different numbers of steps")

    def _shown_on_a_bar(self, call: cst.Call, loop: cst.For | cst.While) -> bool:
        """``pbar.set_postfix(loss=...)`` on a tqdm bar of the loop's function: it shows what it is given, as a print
        does (the bar draws on the main process only, but every process reaches the line)."""
        if not m.matches(call.func, m.Attribute(value=m.Name(), attr=m.Name(m.MatchIfTrue(lambda a: a in _BAR_TEXT)))):
            return False
        bar = call.func.value.value  # type: ignore[attr-defined]
        built = m.Assign(targets=[m.AssignTarget(m.Name(bar))], value=m.Call())
        return any(
            self.analysis.matches(assign.value, call_to(names.TQDM))  # type: ignore[attr-defined]
            for assign in self.analysis.findall_in(owner_of(self.analysis, loop), built)
        )

    def _built_from(self, loop: cst.For | cst.While, line: cst.SimpleStatementLine, read: set[str]) -> set[str]:
        """Names that the values of ``read``, as the loop binds them before ``line``, are computed from."""
        found: set[str] = set()
        frontier = set(read)
        for _ in range(3):  # a string built from a string built from a meter
            reached: set[str] = set()
            for assign in self.analysis.within(loop.body, cst.Assign):
                if not self.analysis.is_before(assign, line) or not any(
                    isinstance(t.target, cst.Name) and t.target.value in frontier for t in assign.targets
                ):
                    continue
                reached |= {n.value for n in self.analysis.within(assign.value, cst.Name)}
            frontier = reached - found - read
            found |= reached
        return found

    def _plan_reports_after(self, loop: cst.For) -> None:
        """Average the last step's loss that lines right after the loop print: ``print(f"loss {loss.item()}")``.

        Each process's last loss is its share's; their mean is the last global batch's, as the
        original printed it. Only lines that every process reaches together qualify: later
        statements of the loop's own block, or under an ``if`` there that tests nothing the loop
        binds (``if epoch % 10 == 0:``). A statement that binds the loss again ends the search.
        """
        block = self.analysis.parents.get(loop)
        if not isinstance(block, (cst.IndentedBlock, cst.Module)):
            return
        losses = {
            code_of(call.func.value)  # type: ignore[attr-defined]
            for call in m.findall(loop.body, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("backward"))))
            if call not in self.analysis.scaled_backwards
        }
        bound = {n.value for n in self.analysis.within(loop, cst.Name) if is_bound_here(self.analysis, n)}
        statements = list(block.body)
        for statement in statements[statements.index(loop) + 1 :]:
            lines, guarded = [statement] if isinstance(statement, cst.SimpleStatementLine) else [], False
            steady = isinstance(statement, cst.If) and not self.analysis.reads(statement.test) & bound
            if steady and statement.orelse is None:  # type: ignore[union-attr]
                lines = [line for line in statement.body.body if isinstance(line, cst.SimpleStatementLine)]
                # The processes that fail a rank condition would never join a reduction under it.
                guarded = is_rank_guard(self.analysis, statement.test)
            for line in lines:
                calls = [s.value for s in line.body if isinstance(s, cst.Expr) and isinstance(s.value, cst.Call)]
                if not calls or not all(self.effects.is_side_effect(c) for c in calls) or m.findall(line, REDUCTION):
                    continue
                wraps = self._loss_reads(line, losses)
                if wraps and guarded:
                    why = "as only some processes pass the rank condition around it"
                    self._report_progress(line, why=why)
                elif wraps:
                    self.in_loop[line] = wraps
            rebinds = {n.value for n in self.analysis.within(statement, cst.Name) if is_bound_here(self.analysis, n)}
            losses -= rebinds
            if not losses:
                return

    def _loss_reads(self, line: cst.SimpleStatementLine, losses: set[str]) -> dict[str, str]:
        """What ``line`` reads of the losses, ``loss.item()`` or the tensor itself, with the helper that averages it."""
        wraps = {}
        for loss in losses:
            if m.findall(line, m.Call(func=m.Attribute(value=m.Name(loss), attr=m.Name("item")))):
                wraps[f"{loss}.item()"] = names.MEAN_HELPER
            # Its value through `.data` or `.detach()`: `loss.data.item()`, and `loss.data[0]` of old PyTorch.
            value = m.Attribute(value=m.Name(loss), attr=m.Name("data")) | m.Call(func=m.Attribute(value=m.Name(loss), attr=m.Name("detach")))
            for read in m.findall(line, m.Call(func=m.Attribute(value=value, attr=m.Name("item"))) | m.Subscript(value=value)):
                wraps[code_of(read)] = names.MEAN_HELPER
            if self._reads_tensor(line, loss):
                wraps[loss] = names.MEAN_HELPER  # `print(loss)`: the tensor, averaged as its value is
        return wraps

    def _reads_tensor(self, line: cst.SimpleStatementLine, loss: str) -> bool:
        """Whether ``line`` reads the tensor ``loss`` itself, not an attribute of it (``loss.item()``) or a keyword."""
        for name in self.analysis.within(line, cst.Name):
            if name.value != loss:
                continue
            parent = self.analysis.parents.get(name)
            if isinstance(parent, cst.Attribute) or (isinstance(parent, cst.Arg) and parent.keyword is name):
                continue
            return True
        return False

    def _plan_global_sizes(self, loop: cst.For, line: cst.SimpleStatementLine) -> None:
        """Multiply each batch size ``line`` reports by the world size: ``i * len(data) * dist.get_world_size()``.

        Each process loads ``batch_size // world_size`` of the batch DataParallel saw, so its
        ``len(data)`` is its share, and a samples-seen count printed from it would be too. Every
        process's share is equally large under DistributedSampler, so the product is the global
        batch's size exactly, with no collective: this line may run on rank 0 alone.
        """
        for size in batch_sizes(self.analysis, line, batch_names(self.analysis, loop)):
            dist = self.distributed_at(line)
            parent = self.analysis.parents.get(size)
            product = isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Multiply)
            if product and parent.right is size:  # type: ignore[union-attr]
                self.scaled_products[parent] = dist
            else:
                self.scaled_sizes[size] = dist

    def _rank_guard(self, loop: cst.For | cst.While, line: cst.CSTNode) -> cst.If | None:
        """The outermost ``if`` between ``loop`` and ``line`` that only some processes pass: ``if i % 100 == 0 and gpu == 0:``."""
        found = None
        for ancestor in self.analysis.ancestors(line):
            if ancestor is loop:
                break
            if isinstance(ancestor, cst.If) and is_rank_guard(self.analysis, ancestor.test):
                found = ancestor
        return found

    def _reduce_before(
        self,
        guard: cst.If,
        loop: cst.For | cst.While,
        line: cst.SimpleStatementLine,
        wraps: dict[str, str],
        varying: set[str],
    ) -> bool:
        """Plan the reductions ``line`` reports right before ``guard``, where every process reaches them.

        They move only where their value is the one the line would have read: no
        statement in the guard before the line assigns what they read, and no test on
        the way guards their evaluation (``if loss is not None and rank == 0:``).
        """
        if not isinstance(self.analysis.parents.get(guard), cst.IndentedBlock) or not self._uniform_path(loop, guard, varying):
            return False
        tests: list[cst.BaseExpression] = []
        for ancestor in self.analysis.ancestors(line):
            if isinstance(ancestor, (cst.For, cst.While, cst.With, cst.Try, cst.FunctionDef, cst.Lambda)):
                return False
            if isinstance(ancestor, cst.If):
                tests.append(ancestor.test)
            if ancestor is guard:
                break
        roots = {code.split(".")[0].split("(")[0] for code in wraps}
        tested = {n.value for test in tests for n in self.analysis.within(test, cst.Name)}
        bindings = [*self.analysis.within(guard.body, cst.AssignTarget), *self.analysis.within(guard.body, cst.AugAssign)]
        assigned = {code_of(node.target).split(".")[0] for node in bindings if self.analysis.is_before(node, line)}
        if roots & (tested | assigned):
            return False
        scope = self.analysis.scopes.get(line)
        planned = self.before_guard.setdefault(guard, {})
        taken = {name for name, _ in planned.values()}
        reads: dict[str, str] = {}
        for code, helper in wraps.items():
            if code not in planned:
                name = stem = f"global_{code.split('.')[0].split('(')[0]}"
                suffix = 1
                while name in taken or (scope is not None and name in scope):
                    suffix += 1
                    name = f"{stem}_{suffix}"
                taken.add(name)
                planned[code] = (name, helper)
            reads[code] = planned[code][0]
        self.read_reduced[line] = reads
        return True

    def _meter_strings(
        self, loop: cst.For | cst.While, line: cst.SimpleStatementLine, read: set[str], meters: list[str], varying: set[str]
    ) -> dict[cst.SimpleStatementLine, set[str]]:
        """The lines of the loop that build what ``line`` shows straight from meters (``msg = fmt.format(loss=losses)``),
        with the meters each reads; empty unless every process reaches ``line`` and each of them at the same step."""
        if not meters or not self._uniform_path(loop, line, varying):
            return {}
        found: dict[cst.SimpleStatementLine, set[str]] = {}
        for build in self.analysis.within(loop.body, cst.SimpleStatementLine):
            assign = build.body[0] if len(build.body) == 1 else None
            if not isinstance(assign, cst.Assign) or not self.analysis.is_before(assign, line):
                continue
            if not any(isinstance(t.target, cst.Name) and t.target.value in read for t in assign.targets):
                continue
            meters_read = {n.value for n in self.analysis.within(assign.value, cst.Name)} & set(meters)
            if meters_read:
                if not self._uniform_path(loop, build, varying) or m.findall(build, REDUCTION):
                    return {}
                found[build] = meters_read
        return found

    def _uniform_path(self, loop: cst.For | cst.While, line: cst.CSTNode, varying: set[str]) -> bool:
        """Whether every process reaches ``line`` together: only ``if``s on step counters lead to it."""
        for ancestor in self.analysis.ancestors(line):
            if ancestor is loop:
                return True
            if isinstance(ancestor, (cst.For, cst.While, cst.With, cst.Try, cst.FunctionDef)):
                return False
            if isinstance(ancestor, cst.If) and self.analysis.reads(ancestor.test) & varying:
                return False
        return False

    # -- rewriting ------------------------------------------------------------------

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For | cst.FlattenSentinel[cst.BaseStatement]:
        plan = self.after_loop.get(original_node)
        if plan is None:
            return updated_node
        self.helpers_used.add(names.SUM_HELPER)
        if plan.means:
            self.helpers_used.add(names.MEAN_HELPER)
        if plan.meters:
            self.helpers_used.add(names.METER_HELPER)
        return cst.FlattenSentinel([updated_node, *plan.statements()])

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If | cst.FlattenSentinel[cst.BaseStatement]:
        planned = self.before_guard.get(original_node)
        if not planned:
            return updated_node
        # Every process reduces here, at the same step; the rank condition then decides only who reports.
        self.helpers_used |= {names.SUM_HELPER, *(helper for _, helper in planned.values())}
        lines = [cst.parse_statement(f"{name} = {helper}({code})") for code, (name, helper) in planned.items()]
        lines[0] = lines[0].with_changes(leading_lines=updated_node.leading_lines)
        return cst.FlattenSentinel([*lines, updated_node.with_changes(leading_lines=[])])

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        reads = self.read_reduced.get(original_node)
        if reads:
            in_reads = m.MatchIfTrue(lambda node: isinstance(node, (cst.Name, cst.Call, cst.Subscript)) and code_of(node) in reads)
            return m.replace(updated_node, in_reads, lambda node, _: cst.Name(reads[code_of(node)]))  # type: ignore[return-value]
        wraps = self.in_loop.get(original_node)
        if not wraps:
            return updated_node
        self.helpers_used |= {names.SUM_HELPER, *wraps.values()}

        return updated_node.visit(_ReduceValues(wraps))  # type: ignore[return-value]

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self._agreed(original_node, updated_node)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        return self._agreed(original_node, updated_node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return self._global_size(original_node, self._agreed(original_node, updated_node))

    def leave_Subscript(self, original_node: cst.Subscript, updated_node: cst.Subscript) -> cst.BaseExpression:
        return self._global_size(original_node, updated_node)

    def leave_BinaryOperation(
        self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation
    ) -> cst.BaseExpression:
        dist = self.scaled_products.get(original_node)
        if dist is None:
            return updated_node
        # `a * len(x)` -> `a * len(x) * W`: the same product, and no parentheses to add.
        world = cst.parse_expression(f"{dist}.get_world_size()")
        inner = updated_node.with_changes(lpar=[], rpar=[])
        return cst.BinaryOperation(inner, cst.Multiply(), world, lpar=updated_node.lpar, rpar=updated_node.rpar)

    def _global_size(self, original_node: cst.BaseExpression, updated_node: cst.BaseExpression) -> cst.BaseExpression:
        dist = self.scaled_sizes.get(original_node)
        if dist is None:
            return updated_node
        world = cst.parse_expression(f"{dist}.get_world_size()")
        parent = self.analysis.parents.get(original_node)
        # Inside an operator or as an attribute's value, `len(x) * W` needs parentheses to stay one value.
        operand = isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.Comparison, cst.ComparisonTarget,
                                      cst.Attribute, cst.Subscript, cst.BooleanOperation))
        parens = {"lpar": [cst.LeftParen()], "rpar": [cst.RightParen()]} if operand else {}
        return cst.BinaryOperation(updated_node, cst.Multiply(), world, **parens)

    def _agreed(self, original_node: cst.BaseExpression, updated_node: cst.BaseExpression) -> cst.BaseExpression:
        """``if loss.item() < eps: continue`` tests the loss averaged over processes (the life-cycle's plan)."""
        if original_node not in self.analysis.lifecycle.agreed_losses:
            return updated_node
        self.helpers_used |= {names.SUM_HELPER, names.MEAN_HELPER}
        if not isinstance(updated_node, cst.Call):
            # The loss tensor itself: its value, without the graph (float() of it would warn every step).
            updated_node = cst.Call(func=cst.Attribute(value=updated_node, attr=cst.Name("detach")))
        return cst.Call(func=cst.Name(names.MEAN_HELPER), args=[cst.Arg(updated_node)])

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if original_node.value not in self.plateau_values:
            return updated_node
        self.helpers_used |= {names.SUM_HELPER, names.MEAN_HELPER}
        averaged = cst.Call(func=cst.Name(names.MEAN_HELPER), args=[cst.Arg(updated_node.value)])
        return updated_node.with_changes(value=averaged)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not self.helpers_used:
            return updated_node
        AddImportsVisitor.add_needed_import(self.context, "torch")
        import_torch_distributed(self.context, self.facts.distributed_alias)
        module = updated_node
        used = self.helpers_used.union(*(HELPER_NEEDS.get(name, set()) for name in self.helpers_used))
        # Inserted in reverse, so the sum helper comes first.
        for name, source in (
            (names.METER_COPY_HELPER, METER_COPY_HELPER_SOURCE),
            (names.METER_HELPER, METER_HELPER_SOURCE),
            (names.MEAN_HELPER, MEAN_HELPER_SOURCE),
            (names.SUM_HELPER, SUM_HELPER_SOURCE),
        ):
            if name in used:
                module = add_helper(module, self.facts, name, source)
        return module


class _ReduceValues(cst.CSTTransformer):
    """Wrap each value read in ``wraps`` (``running_loss``, ``loss.item()``) in its reduction.

    Only values are read: a keyword (``log(avg_loss=avg_loss)``) and an
    attribute name (``meter.avg_loss``) spelled like one stay as they are.
    """

    def __init__(self, wraps: dict[str, str]) -> None:
        super().__init__()
        self.wraps = wraps

    def visit_Call(self, node: cst.Call) -> bool:
        return code_of(node) not in self.wraps  # `loss.item()` is wrapped whole, not its `loss`

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self._reduced(original_node, updated_node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        return self._reduced(original_node, updated_node)

    def visit_Subscript(self, node: cst.Subscript) -> bool:
        return code_of(node) not in self.wraps  # `loss.data[0]` is wrapped whole

    def leave_Subscript(self, original_node: cst.Subscript, updated_node: cst.Subscript) -> cst.BaseExpression:
        return self._reduced(original_node, updated_node)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)

    def _reduced(self, original_node: cst.BaseExpression, updated_node: cst.BaseExpression) -> cst.BaseExpression:
        helper = self.wraps.get(code_of(original_node))
        return updated_node if helper is None else cst.Call(func=cst.Name(helper), args=[cst.Arg(updated_node)])


def _scope(analysis: Analysis, node: cst.CSTNode) -> cst.CSTNode:
    return next((a for a in analysis.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.Module))), analysis.module)


def _literal_key(entry: cst.Subscript) -> str | None:
    """``"train_loss"`` of ``state["train_loss"]``; None for any other index."""
    index = entry.slice[0].slice if len(entry.slice) == 1 else None
    if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
        value = index.value.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _bound_in(analysis: Analysis, scope: cst.CSTNode) -> set[str]:
    """The names ``scope`` binds as its own: assigned as a whole, a loop's target, a parameter, or declared there."""
    bound = set()
    for node in (*analysis.within(scope, cst.AssignTarget), *analysis.within(scope, cst.AugAssign), *analysis.within(scope, cst.For)):
        target = node.target
        if _scope(analysis, node) is scope:
            bound |= {n.value for n in analysis.within(target, cst.Name) if not _inside_subscript_or_attribute(analysis, n, target)}
    if isinstance(scope, cst.FunctionDef):
        bound |= {p.name.value for p in analysis.within(scope.params, cst.Param)}
    for declared in (*analysis.within(scope, cst.Global), *analysis.within(scope, cst.Nonlocal)):
        if _scope(analysis, declared) is scope:
            bound -= {n.name.value for n in declared.names}
    return bound


def _inside_subscript_or_attribute(analysis: Analysis, name: cst.Name, target: cst.CSTNode) -> bool:
    """Whether ``name`` in ``target`` is the object of an item or attribute assignment (``state["k"] = ...``)."""
    return any(isinstance(a, (cst.Subscript, cst.Attribute)) for a in _between(analysis, name, target))


def _between(analysis: Analysis, node: cst.CSTNode, top: cst.CSTNode) -> list[cst.CSTNode]:
    found = []
    for ancestor in analysis.ancestors(node):
        found.append(ancestor)
        if ancestor is top:
            break
    return found


# Methods that keep what they are handed: a list's, a set's, a deque's, a meter's.
_COLLECTING = frozenset({"append", "extend", "insert", "appendleft", "add", "update", "push", "put"})


def _flow(
    analysis: Analysis,
    scope: cst.CSTNode,
    seeds: set[str],
    clean: set[str],
    reads: Callable[[cst.CSTNode], set[str]],
    shows: Callable[[cst.Call], bool] = lambda call: False,
) -> set[str]:
    """``seeds`` and the names of ``scope`` that take a value from one of them: by assignment, by ``+=``, or as
    what a method called for its effect is handed one (``losses.append(loss.item())``, ``meter.add(loss)``,
    ``metrics.add_dict({...})``) unless the call ``shows`` it (a print, a log). Names in ``clean`` are reduced where
    they are bound and pass nothing on."""
    found = set(seeds) - clean
    while True:
        grown = set(found)
        for assign in analysis.within(scope, cst.Assign):
            if _scope(analysis, assign) is scope and reads(assign.value) & found and not m.matches(assign.value, REDUCTION):
                grown |= {n.value for t in assign.targets for n in analysis.within(t.target, cst.Name)}
        for aug in analysis.within(scope, cst.AugAssign):
            if _scope(analysis, aug) is scope and analysis.reads(aug.value) & found:
                grown |= {n.value for n in analysis.within(aug.target, cst.Name)}
        for call in analysis.within(scope, cst.Call):
            if _scope(analysis, call) is not scope or not m.matches(call.func, m.Attribute(value=m.Name())):
                continue
            # A method whose result is dropped is called for what it does to its object: it keeps what it is handed.
            collects = call.func.attr.value in _COLLECTING or isinstance(analysis.parents.get(call), cst.Expr) and not shows(call)  # type: ignore[attr-defined]
            if collects and isinstance(analysis.parents.get(call), cst.Expr) and any(analysis.reads(a.value) & found for a in call.args):
                grown.add(call.func.value.value)  # type: ignore[attr-defined]
        grown -= clean
        if grown == found:
            return found
        found = grown
