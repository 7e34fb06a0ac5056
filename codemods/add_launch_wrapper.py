"""Add one distributed setup that works under torchrun, SLURM srun and plain ``python``.

The script gains a ``setup_distributed()`` helper, called first thing in the
``if __name__ == "__main__":`` entry, or after the imports of a script with
no entry guard. It joins the process group (NCCL with CUDA, else gloo),
selects this process's GPU, gives every process rank 0's random state, and
destroys the group at exit.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from libcst.codemod.visitors import AddImportsVisitor

from dp2ddp.analysis import names
from dp2ddp.analysis.module import Analysis
from dp2ddp.analysis.syntax import MAIN_GUARD, VISIBLE_DEVICES, code_of, main_guard
from ._base import Dp2ddpCodemod, add_helper, import_torch_distributed
from dp2ddp.analysis.script import entry_point

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
    # Every process goes on from rank 0's random state, as the one DataParallel process did: what
    # the script draws before training (a shuffled file list, a random split) is then one draw.
    numpy = sys.modules.get("numpy")
    states = [(random.getstate(), torch.get_rng_state(), numpy.random.get_state() if numpy is not None else None)]
    dist.broadcast_object_list(states, src=0)
    random.setstate(states[0][0])
    torch.set_rng_state(states[0][1])
    if numpy is not None:
        numpy.random.set_state(states[0][2])
    atexit.register(dist.destroy_process_group)
    # Runs first at exit: leaving while other processes still talk to this one makes gloo
    # abort ("terminate called without an active exception"); after a crash, leave at once.
    atexit.register(lambda: hasattr(sys, "last_value") or dist.barrier())
'''

def _after_last(block: list[cst.BaseStatement], targets: set[str], start: int) -> int:
    """Where setup goes in ``block``: at ``start``, or after the last statement in ``targets`` past it."""
    found = [i + 1 for i, statement in enumerate(block) if code_of(statement) in targets and i >= start]
    return max(found, default=start)


class AddLaunchWrapperCommand(Dp2ddpCodemod):
    DESCRIPTION = "Add a distributed setup for torchrun, SLURM and plain python, called at the entry point."

    def plan(self, analysis: Analysis) -> None:
        super().plan(analysis)
        node = analysis.module
        self.entry = entry_point(analysis)
        role = analysis.role
        for call in self.facts.imported_wraps:
            site = next(role.wrap_site(q.name) for q in analysis.qualified_names(call.func) if role.wrap_site(q.name))
            self.report(call, "DDP104", call=code_of(call.func), site=site)
        for call, site in role.foreign_set_devices:
            guard = main_guard(node)
            self.report(guard if guard is not None else node, "DDP230", call=call, site=site)
        if role.setup_elsewhere:
            self.entry = None  # An entry point of the project that imports this module starts the group.
        elif self.entry is None and names.SETUP_HELPER not in self.facts.helpers:
            self.report(self.facts.model_wraps[0] if self.facts.model_wraps else node, "DDP101")
        elif role.drives is not None and not self.facts.model_wraps and names.SETUP_HELPER not in self.facts.helpers:
            guard = main_guard(node)
            self.report(guard if guard is not None and self.entry == "main" else node, "DDP103", site=role.drives)
        # CUDA reads CUDA_VISIBLE_DEVICES when setup_distributed() starts it: setup goes after
        # the script's own assignment when that is in the block setup goes into, and one
        # inside a function runs too late.
        self.visible_devices: set[cst.CSTNode] = set()
        for subscript in analysis.findall(VISIBLE_DEVICES):
            target = analysis.parents.get(subscript)
            if not isinstance(target, cst.AssignTarget):
                continue
            statement = analysis.parents[analysis.parents[target]]
            block = analysis.parents.get(statement)
            owner = analysis.parents.get(block) if isinstance(block, cst.IndentedBlock) else block
            if isinstance(owner, cst.Module) or (isinstance(owner, cst.If) and m.matches(owner, MAIN_GUARD)):
                self.visible_devices.add(statement)
            elif names.SETUP_HELPER not in self.facts.helpers:
                self.report(subscript, "DDP209")

    def visit_Module(self, node: cst.Module) -> bool:
        return False  # Everything happens in leave_Module, on the converted module.

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        if self.entry is None or names.SETUP_HELPER in self.facts.helpers:
            return updated_node
        module = add_helper(updated_node, self.facts, names.SETUP_HELPER, SETUP_HELPER_SOURCE)
        body = list(module.body)
        call = cst.parse_statement(f"{names.SETUP_HELPER}()")
        # Earlier codemods of this traversal leave these assignments as they were.
        targets = {code_of(statement) for statement in self.visible_devices}
        if self.entry == "main":
            guard = main_guard(module)
            assert guard is not None and isinstance(guard.body, cst.IndentedBlock)
            index = body.index(guard)
            block = list(guard.body.body)
            position = _after_last(block, targets, 0)
            block.insert(position, call)
            body[index] = guard.with_changes(body=guard.body.with_changes(body=block))
        else:
            index = next(i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == names.SETUP_HELPER)
            helper_name = m.Name(m.MatchIfTrue(lambda name: name in names.HELPERS))
            helpers = m.FunctionDef(name=helper_name) | m.ClassDef(name=helper_name)
            while index + 1 < len(body) and m.matches(body[index + 1], helpers):
                index += 1
            position = _after_last(body, targets, index + 1)
            spacing = [cst.EmptyLine(), cst.EmptyLine()] if position == index + 1 else []
            body.insert(position, call.with_changes(leading_lines=spacing))
        for module_name in ("atexit", "os", "random", "subprocess", "sys", "torch"):
            AddImportsVisitor.add_needed_import(self.context, module_name)
        import_torch_distributed(self.context, self.facts.distributed_alias)
        return module.with_changes(body=body)
