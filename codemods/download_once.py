"""Download datasets on the main process first, then let the other processes load them.

``datasets.MNIST(root, download=True)`` on every process at once makes each
one download and unpack the same files into the same folder: they overwrite
each other's half-written archives. The statement that builds the dataset
goes into ``with main_process_first():``, which runs it on the main process
while the others wait at a barrier, then on the others, which find the files
there and download nothing.

Only torchvision datasets are recognised, and only statements every process
runs after ``setup_distributed()``: a module-level one in a script whose
setup is in the entry block runs before any process group exists, and is
left as it was.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from . import _names as names
from ._analysis import Analysis
from ._base import Dp2ddpCodemod, add_helper, entry_point, import_torch_distributed
from ._effects import under_rank_guard
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
    DESCRIPTION = "Download datasets on the main process first, then load them on the others."

    def __init__(self, context: CodemodContext) -> None:
        super().__init__(context)
        self.statements: set[cst.SimpleStatementLine] = set()

    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        before_setup = entry_point(analysis) == "main"
        for call in analysis.nodes(cst.Call):
            if not m.matches(call, m.Call(args=[m.ZeroOrMore(), _DOWNLOADS, m.ZeroOrMore()])):
                continue
            if not any(q.name.startswith("torchvision.datasets.") for q in analysis.qualified_names(call.func)):
                continue
            statement = next(a for a in analysis.ancestors(call) if isinstance(a, (cst.SimpleStatementLine, cst.Module)))
            if not isinstance(statement, cst.SimpleStatementLine) or under_rank_guard(analysis, statement):
                continue
            if before_setup and isinstance(analysis.parents.get(statement), cst.Module):
                continue  # runs at import, before any process group exists
            if any(analysis.matches(a, _MAIN_PROCESS_FIRST) for a in analysis.ancestors(statement)):
                continue  # converted already
            self.statements.add(statement)

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
        module = add_helper(updated_node, self.facts, names.MAIN_PROCESS_HELPER, MAIN_PROCESS_HELPER_SOURCE)
        return add_helper(module, self.facts, names.MAIN_PROCESS_FIRST_HELPER, MAIN_PROCESS_FIRST_HELPER_SOURCE)
