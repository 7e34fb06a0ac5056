"""Make checkpoint loads safe on every process.

- ``torch.load(path)`` with no ``map_location`` restores tensors onto the
  device they were saved from, which is GPU 0 for every process. It gets
  ``map_location=local_device()``, this process's own device.
- Where the script loads a file it also saves, or an attribute another module
  of the program saves at, ``dist.barrier()`` goes right before the load. Only the main process saves (guard_side_effects), so the
  others wait there until the file is complete instead of reading half of it.

- ``model.load_state_dict(sd)`` on the DDP model becomes
  ``load_model_state(model, sd)``, which takes keys with or without the
  ``module.`` prefix. A DataParallel checkpoint has the prefix, but a script
  that wrapped only when several GPUs were present saved bare keys on one
  GPU; the converted script always wraps, so it must read both.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.metadata import ParentNodeProvider

from dp2ddp.analysis import names
from dp2ddp.analysis.module import Analysis
from ._base import Dp2ddpCodemod, add_helper, keyword_arg, with_argument
from dp2ddp.analysis.syntax import argument, call_to, code_of
from dp2ddp.analysis.effects import is_rank_guard, under_rank_guard

LOAD_STATE_HELPER_SOURCE = f'''
def {names.LOAD_STATE_HELPER}(model, state_dict, **kwargs):
    """Load a state dict saved with or without the `module.` prefix into a model, wrapped in DDP or not."""
    # DataParallel and DDP save keys as `module.<name>`, a bare model as `<name>`.
    bare = type(state_dict)(state_dict)
    if hasattr(state_dict, "_metadata"):
        bare._metadata = state_dict._metadata
    torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(bare, "module.")
    # A script may load before it wraps the model, into the model itself.
    return getattr(model, "module", model).load_state_dict(bare, **kwargs)
'''
LOCAL_DEVICE_HELPER_SOURCE = f'''
def {names.LOCAL_DEVICE_HELPER}() -> torch.device:
    """This process's device: the GPU setup_distributed() selected, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
'''


class SecureCheckpointsCommand(Dp2ddpCodemod):
    DESCRIPTION = "Load checkpoints onto this process's device, and wait for the main process's save first."
    def __init__(self, context: CodemodContext) -> None:
        super().__init__(context)
        self.needs_location: set[cst.Call] = set()
        self.barriers: set[cst.BaseStatement] = set()
        self.loads_state = False

    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        self.effects = analysis.effects
        saved = {
            code_of(path)
            for call in analysis.findall(call_to(names.TORCH_SAVE))
            if isinstance(call, cst.Call) and (path := argument(call, 1, "f")) is not None
        }
        # torch.save(model, path) of the DDP model itself.
        self.saves_wrapper: set[cst.Call] = set()
        for call in analysis.findall(call_to(names.TORCH_SAVE)):
            assert isinstance(call, cst.Call)
            obj = argument(call, 0, "obj")
            if call.args and call.args[0].keyword is None and obj is not None and code_of(obj) in self.effects.models:
                self.saves_wrapper.add(call)
                self.report(call, "DDP214", model=code_of(obj))
        for call in analysis.findall(call_to(names.TORCH_LOAD)):
            assert isinstance(call, cst.Call)
            if argument(call, 1, "map_location") is None:
                self.needs_location.add(call)
            path = argument(call, 0, "f")
            if path is None:
                continue
            if isinstance(path, cst.Attribute) and path.attr.value in analysis.role.saved_attributes:
                # `torch.load(trainer.snapshot_path)`, where another module of the program saves `self.snapshot_path`.
                line = self._statement(call)
                if line is not None and not under_rank_guard(self, line):
                    self.barriers.add(line)
                continue
            if code_of(path) not in saved:
                # `def build_net(pretrained): ... torch.load(pretrained)`, called with a path the script saves:
                # the processes wait where the call hands it in.
                for caller in self._handing_in(call, path, saved):
                    line = self._statement(caller)
                    if line is not None and not under_rank_guard(self, line):
                        self.barriers.add(line)
                continue
            line = self._statement(call)
            if line is not None and not under_rank_guard(self, line):
                self.barriers.add(line)

    def _handing_in(self, load: cst.Call, path: cst.BaseExpression, saved: set[str]) -> list[cst.Call]:
        """The calls of the function around ``load`` that pass a path the script saves as the parameter ``path`` is."""
        function = next((a for a in self.analysis.ancestors(load) if isinstance(a, cst.FunctionDef)), None)
        if function is None or not isinstance(path, cst.Name):
            return []
        positional = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
        if path.value not in positional + [p.name.value for p in function.params.kwonly_params]:
            return []
        found = []
        for call in self.analysis.nodes(cst.Call):
            if not m.matches(call.func, m.Name(function.name.value)):
                continue
            index = positional.index(path.value) if path.value in positional else 99
            passed = argument(call, index, path.value)
            if passed is not None and code_of(passed) in saved:
                found.append(call)
        return found

    def _statement(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The statement a barrier goes before: the load's line, or the ``if`` chain around it.

        ``if os.path.isfile(path): ckpt = torch.load(path)`` waits before the
        ``if``, or a process could test for the file before the main process
        creates it, skip the branch, and leave the others at the barrier.
        """
        while not isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.Module)):
            node = self.get_metadata(ParentNodeProvider, node)
        if not isinstance(node, cst.SimpleStatementLine):
            return None
        statement: cst.BaseStatement = node
        while True:
            block = self.get_metadata(ParentNodeProvider, statement)
            if isinstance(block, cst.Module):
                return statement  # module level: no `if` around it
            owner = self.get_metadata(ParentNodeProvider, block)
            while isinstance(owner, (cst.Else, cst.If)) and not isinstance(owner, cst.IndentedBlock):
                parent = self.get_metadata(ParentNodeProvider, owner)
                if not isinstance(parent, (cst.If, cst.Else)):
                    break
                owner = parent
            if not isinstance(owner, cst.If) or is_rank_guard(self.analysis, owner.test) or not self._asks_for_files(owner.test):
                return statement
            statement = owner

    def _asks_for_files(self, test: cst.BaseExpression) -> bool:
        """Whether an ``if`` asks the file system (``os.path.isfile(path)``, ``glob(...)``): a process could ask before
        the main process has written, so the wait goes before it. Any other ``if`` (an option, `__name__`) gets the
        same answer on every process, and the wait stays at the load, after what the branch runs first."""
        return any(
            q.name.startswith(("os.path.", "glob.", "os.listdir", "os.scandir", "pathlib.")) or q.name.endswith((".exists", ".is_file"))
            for call in self.analysis.within(test, cst.Call)
            for q in self.analysis.qualified_names(call.func)
        ) or bool(self.analysis.findall_in(test, m.Call(func=m.Attribute(attr=m.Name("exists") | m.Name("is_file")))))

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if original_node in self.saves_wrapper:
            saved = updated_node.args[0]
            module = cst.Attribute(value=saved.value, attr=cst.Name("module"))
            return updated_node.with_changes(args=[saved.with_changes(value=module), *updated_node.args[1:]])
        loads_into_model = m.Call(func=m.Attribute(attr=m.Name("load_state_dict")))
        if m.matches(original_node, loads_into_model):
            assert isinstance(original_node.func, cst.Attribute)
            model = original_node.func.value
            if code_of(model) in self.effects.models:
                self.loads_state = True
                return cst.Call(func=cst.Name(names.LOAD_STATE_HELPER), args=[cst.Arg(model, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), *updated_node.args])
        if original_node not in self.needs_location:
            return updated_node
        location = cst.Call(func=cst.Name(names.LOCAL_DEVICE_HELPER))
        return with_argument(updated_node, keyword_arg("map_location", location))

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        return updated_node.with_changes(body=self._with_barriers(updated_node.body))

    def _with_barriers(self, updated: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """``dist.barrier()`` before each load of a saved file that every process still runs.

        The codemods before this one in its traversal (guard_side_effects) may
        have put a load under a main-process guard, and then no process may
        wait for it: a barrier goes only before a statement that is still
        exactly what those codemods made of the planned one, at this level.
        """
        targets = {id(self.became.get(statement)): statement for statement in self.barriers}
        body: list[cst.BaseStatement] = []
        for statement in updated:
            waited = body and m.matches(body[-1], m.SimpleStatementLine([m.Expr(m.Call(func=m.Attribute(attr=m.Name("barrier"))))]))
            original = targets.get(id(statement))
            if original is not None and not waited:
                barrier = cst.parse_statement(f"{self.distributed_at(original)}.barrier()")
                body.append(barrier.with_changes(leading_lines=statement.leading_lines))
                statement = statement.with_changes(leading_lines=[])
            body.append(statement)
        return body

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        module = updated_node.with_changes(body=self._with_barriers(updated_node.body))
        if self.loads_state:
            module = add_helper(module, self.facts, names.LOAD_STATE_HELPER, LOAD_STATE_HELPER_SOURCE)
        if self.needs_location:
            module = add_helper(module, self.facts, names.LOCAL_DEVICE_HELPER, LOCAL_DEVICE_HELPER_SOURCE)
        return module
