"""Add one distributed setup that works under torchrun, SLURM srun and plain ``python``.

The script gains a ``setup_distributed()`` helper, called first thing in the
``if __name__ == "__main__":`` entry, or after the imports of a script with
no entry guard. It joins the process group (NCCL with CUDA, else gloo),
selects this process's GPU, and destroys the group at exit.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.codemod.visitors import AddImportsVisitor

from . import _names as names
from ._analysis import Analysis
from ._base import (
    MAIN_GUARD,
    Dp2ddpCodemod,
    add_helper,
    call_to,
    import_torch_distributed,
    main_guard,
)

# One statement per line and a one-line docstring: LibCST re-indents lines
# and newlines to the script's own style (tabs, CRLF), not text inside them.
SETUP_HELPER_SOURCE = f'''
def {names.SETUP_HELPER}() -> None:
    """Join the process group under torchrun, SLURM srun or plain python."""
    # torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; srun sets the SLURM_* equivalents.
    if "RANK" not in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        nodelist = os.environ["SLURM_JOB_NODELIST"]
        hosts = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True)
        os.environ.setdefault("MASTER_ADDR", hosts.stdout.split()[0])
        os.environ.setdefault("MASTER_PORT", "29500")
    # Plain `python script.py` on several GPUs: restart under torchrun, one process per GPU,
    # so the script still uses every GPU as it did with DataParallel.
    if "RANK" not in os.environ and torch.cuda.device_count() > 1:
        nproc = torch.cuda.device_count()
        command = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={{nproc}}", "--", *sys.argv]
        os.execv(sys.executable, [sys.executable, *command])
    backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if "RANK" in os.environ:
        dist.init_process_group(backend)
    else:
        # A single process: an in-memory store needs no address or port.
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    atexit.register(dist.destroy_process_group)
    # Runs first at exit: leaving while other processes still talk to this one makes gloo
    # abort ("terminate called without an active exception"); after a crash, leave at once.
    atexit.register(lambda: hasattr(sys, "last_value") or dist.barrier())
'''

class AddLaunchWrapperCommand(Dp2ddpCodemod):
    DESCRIPTION = "Add a distributed setup for torchrun, SLURM and plain python, called at the entry point."

    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        node = analysis.module
        self.entry = self._entry_point(node)
        if self.entry is None and names.SETUP_HELPER not in self.facts.helpers:
            self.report(self.facts.model_wraps[0] if self.facts.model_wraps else node, "DDP101")

    def visit_Module(self, node: cst.Module) -> bool:
        return False  # Everything happens in leave_Module, on the converted module.

    def _needs_distributed(self, statement: cst.CSTNode) -> bool:
        needs = m.Call(func=m.Name(names.WRAP_HELPER)) | call_to(
            names.DATA_PARALLEL | names.DATA_LOADER | names.DISTRIBUTED_SAMPLER
        )
        return bool(m.findall(statement, needs, metadata_resolver=self.analysis))

    def _entry_point(self, module: cst.Module) -> str | None:
        """Where setup goes: "main" (the entry guard), "top" (after the imports) or nowhere."""
        top_level_training = any(
            self._needs_distributed(statement)
            for statement in module.body
            if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and not m.matches(statement, MAIN_GUARD)
        )
        if top_level_training:
            return "top"
        if main_guard(module) is not None:
            return "main"
        return None

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.entry is None or names.SETUP_HELPER in self.facts.helpers:
            return updated_node
        module = add_helper(updated_node, self.facts, names.SETUP_HELPER, SETUP_HELPER_SOURCE)
        body = list(module.body)
        call = cst.parse_statement(f"{names.SETUP_HELPER}()")
        if self.entry == "main":
            guard = main_guard(module)
            assert guard is not None and isinstance(guard.body, cst.IndentedBlock)
            index = body.index(guard)
            body[index] = guard.with_changes(body=guard.body.with_changes(body=[call, *guard.body.body]))
        else:
            index = next(i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == names.SETUP_HELPER)
            helpers = m.FunctionDef(name=m.Name(m.MatchIfTrue(lambda name: name in names.HELPERS)))
            while index + 1 < len(body) and m.matches(body[index + 1], helpers):
                index += 1
            body.insert(index + 1, call.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()]))
        for module_name in ("atexit", "os", "subprocess", "sys", "torch"):
            AddImportsVisitor.add_needed_import(self.context, module_name)
        import_torch_distributed(self.context, self.facts.distributed_alias)
        return module.with_changes(body=body)
