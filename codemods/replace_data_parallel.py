"""Replace ``nn.DataParallel`` with ``DistributedDataParallel`` on this process's device.

Every spelling resolves through ``QualifiedNameProvider``: ``torch.nn.DataParallel``,
``nn.DataParallel``, ``torch.nn.parallel.DataParallel`` and imported aliases.
The wrap becomes a call to a small ``wrap_ddp`` helper added to the script,
which moves the model to this process's GPU and binds DDP to it there
(``device_ids=[local_rank]``), or leaves ``device_ids`` unset on CPU. Fixed
GPUs become this process's own: ``.cuda(0)`` becomes ``.cuda()``, and
``train(0, args)``, where ``train`` picks its GPU with that parameter, passes
the local rank instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext, SkipFile
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.helpers import get_full_name_for_node

from dp2ddp.rules import RULES

from dp2ddp.analysis import names
from dp2ddp.analysis.module import Analysis
from dp2ddp.analysis.syntax import DEVICE_MOVE, VISIBLE_DEVICES, argument, call_to, code_of, resolves_to, string_literal, without_device_move
from ._base import Dp2ddpCodemod, add_helper, import_torch_distributed, keyword_arg
from .secure_checkpoints import LOCAL_DEVICE_HELPER_SOURCE

# One statement per line and a one-line docstring, so that LibCST renders the
# helper in the script's own indentation and newline style.
WRAP_HELPER_SOURCE = f'''
def {names.WRAP_HELPER}(model: torch.nn.Module, **kwargs) -> torch.nn.Module:
    """Wrap ``model`` in DistributedDataParallel on this process's device."""
    # Stands in for nn.DataParallel: on GPUs the model moves to the GPU that
    # setup_distributed() selected, and DDP copies each batch there as DataParallel did.
    device = torch.cuda.current_device() if torch.cuda.is_available() else None
    if device is not None:
        model = model.to(device)
    if not any(parameter.requires_grad for parameter in model.parameters()):
        # Nothing trains in it (a frozen feature extractor), so there is nothing to
        # synchronise, and DDP refuses such a module: it only keeps DataParallel's `.module`.
        class Unwrapped(torch.nn.Module):
            def __init__(self, module):
                super().__init__()
                self.module = module

            def forward(self, *args, **kwargs):
                # As DataParallel and DDP do, the inputs go to this process's GPU first: a loss
                # module with no parameters is handed labels that are still on the CPU.
                def moved(value):
                    if isinstance(value, torch.Tensor):
                        return value.to(device)
                    if isinstance(value, dict):
                        return {{key: moved(item) for key, item in value.items()}}
                    if isinstance(value, (list, tuple)):
                        items = [moved(item) for item in value]
                        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
                    return value

                if device is not None:
                    args, kwargs = moved(args), moved(kwargs)
                return self.module(*args, **kwargs)

        # DDP would have copied rank 0's weights to every process: a frozen network drawn at random
        # where the processes' seeds differ must still be one network.
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, 0)
        return Unwrapped(model)
    # On CPU, DDP must be given no device_ids.
    return DistributedDataParallel(model, device_ids=None if device is None else [device], **kwargs)
'''

# "cuda:0" and .cuda(0) meant "the GPU DataParallel gathers on"; under DDP each
# process has its own, which plain "cuda" and .cuda() name after set_device.
FIRST_GPU_STRING = string_literal("cuda:0")
FIRST_GPU_CALL = m.Call(func=m.Attribute(attr=m.Name("cuda")), args=[m.Arg(m.Integer("0"), keyword=None)])
# This process's GPU index, as setup_distributed() selects it.
LOCAL_RANK = 'int(os.environ.get("LOCAL_RANK", "0"))'


def _cuda_string(node: cst.SimpleString) -> cst.SimpleString:
    return node.with_changes(value=node.value.replace("cuda:0", "cuda"))


DATA_PARALLEL_IMPORT_MODULES = ("torch.nn", "torch.nn.parallel", "torch.nn.parallel.data_parallel")
# This process's local rank, as setup_distributed() reads it to select the GPU (DDP217).
LOCAL_RANK = 'int(os.environ.get("LOCAL_RANK", "0"))'


class ReplaceDataParallelCommand(Dp2ddpCodemod):
    DESCRIPTION = "Replace nn.DataParallel with DistributedDataParallel on this process's device."
    RUNS_ON_MENTION = True
    def __init__(self, context: CodemodContext) -> None:
        super().__init__(context)
        # Original DataParallel calls to convert, mapped to whether their
        # statement leaves its `if`, which drops the device moves it guarded.
        self.conversions: dict[cst.Call, bool] = {}
        # DataParallel around a part of a model class, inside a model DDP wraps whole: the part stays, bare.
        self.unwrapped_parts: set[cst.Call] = set()
        self.needs_ddp_import = False
        # A wrap moved below code that needs the model on its device already left a device move behind.
        self.moves_early = False

    # -- detection, on the original tree --------------------------------------------

    def plan(self, analysis: Analysis) -> None:
        try:
            super().plan(analysis)
        except SkipFile:
            if analysis.role.guard_only:
                # A module converted for its writes alone still runs in the program: a functional data_parallel
                # there is how the program spreads its model over the GPUs, and it cannot stay (DDP202).
                for call in analysis.nodes(cst.Call):
                    if self.matches(call, call_to(names.FUNCTIONAL_DATA_PARALLEL)):
                        self.report(call, "DDP202")
            raise
        self.lifecycle = analysis.lifecycle
        dropped = {id(statement) for _, parts in self.lifecycle.submodule_sides.values() for statement in parts}
        for call in self.facts.submodule_wraps:
            statement = next((a for a in analysis.ancestors(call) if isinstance(a, cst.SimpleStatementLine)), None)
            if id(statement) in dropped and self.facts.converts_to_ddp and not self.lifecycle.blocked:
                model = next(model for model, parts in self.lifecycle.submodule_sides.values() if statement in parts)
                self.report(call, "DDP236", part=code_of(argument(call, 0, "module")), model=model)  # type: ignore[arg-type]
            elif self.facts.converts_to_ddp and not self.lifecycle.blocked and self._part_unwrappable(call):
                self.unwrapped_parts.add(call)
                self.report(call, "DDP237", part=code_of(analysis.parents[call].targets[0].target))  # type: ignore[attr-defined]
            else:
                self.report(call, "DDP201")
        if self.facts.converts_to_ddp:
            for call in self.facts.loading_wraps:
                self.report(call, "DDP239", call=code_of(call.func))
        for call in self.facts.unresolved_wraps:
            self.report(call, "DDP102", spelled=code_of(call.func))
        role = analysis.role
        for call in self.facts.subclass_wraps:
            site = next(role.subclass_site(q.name) for q in analysis.qualified_names(call.func) if role.subclass_site(q.name))
            self.report(call, "DDP229", call=code_of(call.func), site=site)
        for call in self.facts.foreign_wraps:
            self.report(call, "DDP234", call=code_of(call.func))
        # A file that wraps no whole model is not a training script to migrate, and
        # one whose model life-cycle has a hazard no edit makes safe is left as it
        # was: what could not be converted is reported, and nothing is edited.
        self.lifecycle = analysis.lifecycle
        for hazard in [*self.lifecycle.blockers, *self.lifecycle.findings]:
            if self.lifecycle.blocked and RULES[hazard.code].severity == "note":
                continue  # a note says what convert changed, and a refused file changes nothing
            self.report(hazard.node, hazard.code, **dict(hazard.values))
        self.converting = self.facts.converts_to_ddp and not self.lifecycle.blocked
        hoisted = {s for statements in self.lifecycle.hoisted.values() for s in statements}
        for wrap in self.lifecycle.wraps:
            self.conversions[wrap.call] = wrap.statement in hoisted
        for node in analysis.order:  # in document order, as a reader meets them
            if isinstance(node, cst.ClassDef):
                if any(self.matches(base.value, resolves_to(names.DATA_PARALLEL)) for base in node.bases):
                    self.report(node.name, "DDP203", name=node.name.value)
            elif isinstance(node, cst.Call):
                if self.matches(node, call_to(names.FUNCTIONAL_DATA_PARALLEL)):
                    self.report(node, "DDP202")
                elif self.converting and self._selects_first_gpu(node):
                    self.report(node, "DDP205", literal="torch.cuda.set_device(0)", replacement=f"torch.cuda.set_device({LOCAL_RANK})")
                elif self.converting and m.matches(node, FIRST_GPU_CALL) and not self.matches(
                    node, m.Call(func=m.Attribute(value=call_to(names.DATA_PARALLEL)))
                ):
                    self.report(node, "DDP205", literal=".cuda(0)", replacement=".cuda()")
            if self.converting and node in self.lifecycle.gathering_devices:
                self.report(node, "DDP246", device=code_of(node), replacement=self._own_gpu(node, self.lifecycle.gathering_devices[node]))
            if isinstance(node, cst.SimpleString):
                if self.converting and m.matches(node, FIRST_GPU_STRING):
                    self.report(node, "DDP205", literal=node.value, replacement=_cuda_string(node).value)
            elif isinstance(node, cst.Subscript):
                if self.converting and m.matches(node, VISIBLE_DEVICES) and isinstance(analysis.parents.get(node), cst.AssignTarget):
                    self.report(node, "DDP206")

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if not self.converting or original_node not in self.lifecycle.local_rank_arguments:
            return updated_node
        # `train(0, args)` for `def train(gpu, args)`: each process passes the GPU setup_distributed() selected.
        AddImportsVisitor.add_needed_import(self.context, "os")
        return updated_node.with_changes(value=cst.parse_expression(LOCAL_RANK))

    def _own_gpu(self, node: cst.BaseExpression, how: str) -> str:
        """What names this process's GPU in place of DataParallel's first (DDP246)."""
        if how == "string":
            return '"cuda"'
        call = self.analysis.parents.get(self.analysis.parents.get(node))  # type: ignore[arg-type]
        if m.matches(call, m.Call(func=m.Attribute(attr=m.Name("cuda")))):
            return ".cuda()"
        if isinstance(call, cst.Call) and self._selects_first_gpu(call, node):
            return LOCAL_RANK
        return "torch.cuda.current_device()"

    def leave_FormattedString(self, original_node: cst.FormattedString, updated_node: cst.FormattedString) -> cst.BaseExpression:
        return self._at_own_gpu(original_node, updated_node)

    def leave_BinaryOperation(self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation) -> cst.BaseExpression:
        return self._at_own_gpu(original_node, updated_node)

    def leave_Subscript(self, original_node: cst.Subscript, updated_node: cst.Subscript) -> cst.BaseExpression:
        return self._at_own_gpu(original_node, updated_node)

    def _at_own_gpu(self, original_node: cst.BaseExpression, updated_node: cst.BaseExpression) -> cst.BaseExpression:
        """DataParallel's first GPU, where this process's own goes (DDP246): a string is "cuda", an index the
        current device; `.cuda(gpus[0])` and `set_device(gpus[0])` are rewritten whole in leave_Call."""
        how = self.lifecycle.gathering_devices.get(original_node) if self.converting else None
        if how is None:
            return updated_node
        if how == "string":
            return cst.SimpleString('"cuda"', lpar=updated_node.lpar, rpar=updated_node.rpar)
        AddImportsVisitor.add_needed_import(self.context, "torch")
        return cst.parse_expression("torch.cuda.current_device()")

    def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
        if not self.converting:
            return updated_node
        return _cuda_string(updated_node) if m.matches(original_node, FIRST_GPU_STRING) else updated_node

    # -- rewriting ------------------------------------------------------------------

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        if not self.converting:
            if self.analysis.role.meets_wrapped_models and not self.lifecycle.blocked and self._asks_for_data_parallel(original_node):
                # `is_model_2d(model)` in a module that wraps nothing: the model it is handed is DDP now.
                return self._isinstance_accepting_ddp(updated_node)
            return updated_node
        if original_node in self.lifecycle.gathering_devices:
            return self._at_own_gpu(original_node, updated_node)  # "cuda:{}".format(gpus[0])
        if original_node in self.unwrapped_parts:
            return updated_node.args[0].value.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar) if updated_node.lpar else updated_node.args[0].value
        if original_node in self.conversions:
            unused = original_node in self.lifecycle.unused_parameters
            static = original_node in self.lifecycle.static_graph
            return self._wrap_call(updated_node, drop_device_moves=self.conversions[original_node], unused_parameters=unused, static_graph=static)
        inner = original_node.func.value if isinstance(original_node.func, cst.Attribute) else None
        if isinstance(inner, cst.Call) and inner in self.conversions and m.matches(original_node, DEVICE_MOVE):
            # DataParallel(model).cuda(): the helper already moved the model.
            assert isinstance(updated_node.func, cst.Attribute)
            return updated_node.func.value
        if m.matches(original_node, FIRST_GPU_CALL) or self._cuda_at_gathering_device(original_node):
            return updated_node.with_changes(args=[])
        if self._selects_first_gpu(original_node) or (original_node.args and self._selects_first_gpu(original_node, original_node.args[0].value)):
            AddImportsVisitor.add_needed_import(self.context, "os")
            return updated_node.with_changes(args=[cst.Arg(cst.parse_expression(LOCAL_RANK))])
        if self._asks_for_data_parallel(original_node):
            return self._isinstance_accepting_ddp(updated_node)
        return updated_node

    def _asks_for_data_parallel(self, call: cst.Call) -> bool:
        return self.matches(call, m.Call(func=m.Name("isinstance"), args=[m.Arg(), m.Arg(value=resolves_to(names.DATA_PARALLEL))]))

    def _part_unwrappable(self, call: cst.Call) -> bool:
        """``self.encoder = nn.DataParallel(Encoder())`` in a model class, whose ``.module`` nothing reads: inside a
        model DDP wraps whole, the part's own DataParallel only spreads it over every GPU again."""
        assign = self.analysis.parents.get(call)
        if not m.matches(assign, m.Assign(targets=[m.AssignTarget(m.Attribute(value=m.Name("self")))])) or argument(call, 0, "module") is None:
            return False
        if not any(isinstance(a, cst.ClassDef) for a in self.analysis.ancestors(call)):
            return False
        attribute = assign.targets[0].target.attr.value  # type: ignore[union-attr]
        return not any(
            m.matches(node, m.Attribute(value=m.Attribute(attr=m.Name(attribute)), attr=m.Name("module")))
            for node in self.analysis.nodes(cst.Attribute)
        )

    def _selects_first_gpu(self, call: cst.Call, index: cst.BaseExpression | None = None) -> bool:
        """``torch.cuda.set_device(0)``: after setup_distributed() it would move every process to GPU 0; or to
        ``index``, DataParallel's first GPU (``set_device(gpus[0])``)."""
        if not self.matches(call, call_to({"torch.cuda.set_device"})):
            return False
        device = argument(call, 0, "device")
        if index is not None:
            return device is index and self.lifecycle.gathering_devices.get(index) == "index"
        return m.matches(device, m.Integer("0"))

    def _cuda_at_gathering_device(self, call: cst.Call) -> bool:
        """``.cuda(gpus[0])``, DataParallel's first GPU: ``.cuda()`` is this process's own (DDP246)."""
        return (m.matches(call, m.Call(func=m.Attribute(attr=m.Name("cuda")), args=[m.Arg(keyword=None)]))
                and self.lifecycle.gathering_devices.get(call.args[0].value) == "index")

    def _wrap_call(self, call: cst.Call, drop_device_moves: bool, unused_parameters: bool, static_graph: bool = False) -> cst.Call:
        wrapped = argument(call, 0, "module")
        assert wrapped is not None
        if drop_device_moves:
            wrapped = without_device_move(wrapped)
        args = [cst.Arg(wrapped)]
        dim = argument(call, 3, "dim")
        if dim is not None:
            args.append(keyword_arg("dim", dim))
        if static_graph:
            # Several forwards per backward: find_unused_parameters=True would mark a parameter ready twice (DDP245).
            args.append(keyword_arg("static_graph", cst.Name("True")))
        elif unused_parameters:
            args.append(keyword_arg("find_unused_parameters", cst.Name("True")))
        return cst.Call(func=cst.Name(names.WRAP_HELPER), args=args)

    def _isinstance_accepting_ddp(self, call: cst.Call) -> cst.Call:
        """``isinstance(m, nn.DataParallel)`` must stay true for the DDP model."""
        classes = call.args[1].value
        ddp = cst.Element(cst.Name("DistributedDataParallel"))
        self.needs_ddp_import = True
        updated = cst.Tuple([cst.Element(classes), ddp])
        return call.with_changes(args=[call.args[0], call.args[1].with_changes(value=updated)])

    def leave_Return(self, original_node: cst.Return, updated_node: cst.Return) -> cst.Return:
        """``return crnn`` of a loading wrap returned wrapped: the caller wraps the model inside it."""
        if self.converting and original_node in self.facts.returned_loading_wraps.values() and isinstance(updated_node.value, cst.Name):
            name = updated_node.value.value
            return updated_node.with_changes(value=cst.parse_expression(f'getattr({name}, "module", {name})'))
        return updated_node

    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp) -> cst.BaseExpression:
        if not self.converting:
            return updated_node
        if original_node in self.lifecycle.collapsed or original_node in self.lifecycle.always_wrapped:
            # `DataParallel(m) if gpu else m` and `net.module if gpu else net`: under DDP the
            # model is always wrapped, whatever the condition says.
            return updated_node.body.with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return updated_node

    def leave_If(
        self, original_node: cst.If, updated_node: cst.If
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        if self.converting and (original_node in self.lifecycle.taken_branches or original_node in self.lifecycle.taken_else):
            # Under DDP every process wraps: the branch that wraps is the one that runs.
            taken = updated_node.body if original_node in self.lifecycle.taken_branches else updated_node.orelse.body  # type: ignore[union-attr]
            body = list(taken.body)  # type: ignore[attr-defined]
            body[0] = body[0].with_changes(leading_lines=[*updated_node.leading_lines, *body[0].leading_lines])
            return cst.FlattenSentinel(body)
        wrap_statements = self.lifecycle.hoisted.get(original_node) if self.converting else None
        if not wrap_statements:
            return updated_node
        # Under DDP every process must wrap the model, so the wraps leave their `if` statements,
        # together, to just after the outermost one.
        wraps = [self.became[statement] for statement in wrap_statements]
        rest = updated_node.visit(_Without({id(wrap) for wrap in wraps}))
        if isinstance(rest, cst.RemovalSentinel):
            first = wraps[0].with_changes(leading_lines=[*updated_node.leading_lines, *wraps[0].leading_lines])  # type: ignore[attr-defined]
            self.became[wrap_statements[0]] = first  # a wrap the life-cycle also moves is found by what it became
            return cst.FlattenSentinel([first, *wraps[1:]])  # type: ignore[list-item]
        return cst.FlattenSentinel([rest, *wraps])  # type: ignore[list-item]

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.BaseExpression:
        return self._unwrapped(original_node, updated_node)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self._unwrapped(original_node, updated_node)

    def _unwrapped(self, original_node: cst.BaseExpression, updated_node: cst.BaseExpression) -> cst.BaseExpression:
        """A use of the wrapper before the wrap's new place names the model it wraps."""
        spelled = self.lifecycle.unwrapped.get(original_node) if self.converting else None
        return updated_node if spelled is None else cst.parse_expression(spelled)

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        body = self._moved_wraps(original_node.body, updated_node.body)
        side = self.lifecycle.submodule_sides.get(original_node) if self.converting else None
        if side is not None:
            # `model.features = DataParallel(model.features)` on one side, the whole model wrapped on the other:
            # under DDP the whole model is wrapped on both, once it is where it trains.
            model, parts = side
            kept = [new for old, new in zip(original_node.body, body, strict=False) if old not in parts] if len(body) == len(original_node.body) else body
            body = [*kept, cst.parse_statement(f"{model} = {names.WRAP_HELPER}({model})")]
        return updated_node.with_changes(body=body)

    def _moved_wraps(
        self, originals: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement]
    ) -> list[cst.BaseStatement]:
        """Each wrap the life-cycle moved goes right after the last statement that mutates its model."""
        body = list(updated)
        if not self.converting:
            return body
        for wrap, (leaves, anchor) in self.lifecycle.moved.items():
            if leaves not in originals:
                continue
            moved = self.became[wrap]
            became = self.became[anchor]
            last = list(became.nodes)[-1] if isinstance(became, cst.FlattenSentinel) else became
            index = next(i for i, statement in enumerate(body) if statement is moved)
            # `model = DataParallel(model).cuda()`: the code between here and the wrap's new place ran with the
            # model on its GPU (`optimizer.load_state_dict(...)` puts the state where the parameters are), so the
            # model moves here still, and the wrap later.
            early = bool(m.findall(wrap, DEVICE_MOVE))
            if wrap in self.lifecycle.split:
                # `model = wrap_ddp(Net())` -> `model = Net()` here, `model = wrap_ddp(model)` later.
                assign = moved.body[0]  # type: ignore[attr-defined]
                call = assign.value
                built = self._to_local_device(call.args[0].value) if early else call.args[0].value
                body[index] = moved.with_changes(body=[assign.with_changes(value=built)])  # type: ignore[attr-defined]
                target = assign.targets[0].target
                moved = moved.with_changes(body=[assign.with_changes(value=call.with_changes(args=[cst.Arg(target), *call.args[1:]]))])  # type: ignore[attr-defined]
            elif early and isinstance(call := moved.body[0].value, cst.Call) and call.args:  # type: ignore[attr-defined]
                # `model = DataParallel(net).cuda()` -> `net.to(local_device())` here (a module moves in place).
                body[index] = moved.with_changes(body=[cst.Expr(self._to_local_device(call.args[0].value))])
            else:
                del body[index]
            position = next(i for i, statement in enumerate(body) if statement is last)
            if wrap in self.lifecycle.returned:
                # `return model.to(device)` -> `model = model.to(device)`, the wrap, `return model`.
                target = moved.body[0].targets[0].target  # type: ignore[attr-defined]
                value = last.body[0].value  # type: ignore[attr-defined]
                body[position] = last.with_changes(body=[cst.Assign([cst.AssignTarget(target)], value)])  # type: ignore[attr-defined]
                body.insert(position + 1, cst.SimpleStatementLine([cst.Return(target)]))
            body.insert(position + 1, moved.with_changes(leading_lines=[]))  # type: ignore[attr-defined]
        return body

    def _to_local_device(self, model: cst.BaseExpression) -> cst.Call:
        self.moves_early = True
        return cst.Call(cst.Attribute(model, cst.Name("to")), [cst.Arg(cst.Call(cst.Name(names.LOCAL_DEVICE_HELPER)))])

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if not self.converting:
            if self.needs_ddp_import:
                AddImportsVisitor.add_needed_import(self.context, "torch.nn.parallel", "DistributedDataParallel")
            return updated_node
        updated_node = updated_node.with_changes(body=self._moved_wraps(original_node.body, updated_node.body))
        if self.conversions:
            self.needs_ddp_import = True
            AddImportsVisitor.add_needed_import(self.context, "torch")
            import_torch_distributed(self.context, self.facts.distributed_alias)
            updated_node = add_helper(updated_node, self.facts, names.WRAP_HELPER, WRAP_HELPER_SOURCE)
            if self.moves_early:
                updated_node = add_helper(updated_node, self.facts, names.LOCAL_DEVICE_HELPER, LOCAL_DEVICE_HELPER_SOURCE)
            for module in DATA_PARALLEL_IMPORT_MODULES:
                for alias in self._imported_aliases(original_node, module):
                    RemoveImportsVisitor.remove_unused_import(self.context, module, "DataParallel", alias)
        if self.needs_ddp_import:
            AddImportsVisitor.add_needed_import(self.context, "torch.nn.parallel", "DistributedDataParallel")
        return updated_node

    @staticmethod
    def _imported_aliases(module: cst.Module, source: str) -> list[str | None]:
        aliases: list[str | None] = []
        for statement in module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                    continue
                if small.module is None or get_full_name_for_node(small.module) != source:
                    continue
                for alias in small.names:
                    if get_full_name_for_node(alias.name) == "DataParallel":
                        aliases.append(alias.evaluated_alias)
        return aliases


class _Without(cst.CSTTransformer):
    """A statement without the given statements; an ``if`` left with an empty body goes too.

    The ``if`` statements a wrap leaves test GPUs and nothing else, so dropping
    one that no longer does anything changes nothing.
    """

    def __init__(self, removed: set[int]) -> None:
        super().__init__()
        self.removed = removed

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        return cst.RemovalSentinel.REMOVE if id(original_node) in self.removed else updated_node

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If | cst.RemovalSentinel:
        body = updated_node.body
        if isinstance(body, cst.IndentedBlock) and not body.body and updated_node.orelse is None:
            return cst.RemovalSentinel.REMOVE
        return updated_node
