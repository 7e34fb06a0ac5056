"""Stable finding codes with their messages, in one place.

A codemod never writes a message inline: it reports a code and the values
that fill the code's message template, so wording stays consistent between
``convert``'s migration report and the unit tests that expect it.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Literal

# error: convert left the whole file as it was, because converting it would hang,
# desynchronise the processes or crash one; warning: a human must look; note: done, for review.
Severity = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    message: str
    # What it does / Why is this bad? / Example / Use instead / Fix safety, as ruff documents rules.
    doc: str = ""


def _doc(what: str, why: str, example: str, instead: str, fix: str) -> str:
    return (
        f"## What it does\n{what}\n\n## Why is this bad?\n{why}\n\n## Example\n```python\n{example}\n```\n\n"
        f"## Use instead\n```python\n{instead}\n```\n\n## Fix safety\n{fix}\n"
    )


# Convert warns about these losses when it converts a DataParallel script, and check finds them in a
# DDP script (DDP319/DDP515, DDP320/DDP516): one hazard, so one wording.
WEIGHTED_LOSS_MESSAGE = (
    "`{loss}` averages with class weights `{weight}`, so it divides by the sum of the weights of the batch's "
    "targets: under DDP each process divides by the sum of its own share's, not the whole batch's, and the "
    "objective changes; to keep it, compute the loss with `reduction=\"sum\"` and divide by the weight sum over "
    "all processes: `total = {weight}[{target}].sum()`, `dist.all_reduce(total)`, "
    "`loss = loss_sum * dist.get_world_size() / total` (the `* world_size` cancels DDP's averaging of gradients)"
)
WEIGHTED_LOSS_WHY = (
    "With class weights, the mean cross-entropy is the weighted sum of the samples' losses divided by the sum of "
    "their targets' weights. DataParallel computed it on the gathered outputs, so it divided by the whole batch's "
    "weight sum. Under DDP each process computes it on its share and divides by its share's weight sum, which "
    "differs from process to process: averaging the processes' gradients no longer gives the whole batch's "
    "gradient, and rare, heavily weighted classes pull harder or weaker than they did. A measured pair of runs "
    "differed from the first step (a loss of 1.1246 against 1.1182)."
)
WEIGHTED_LOSS_EXAMPLE = (
    "criterion = nn.CrossEntropyLoss(weight=class_weights)\nloss = criterion(model(x), y)\nloss.backward()"
)
WEIGHTED_LOSS_INSTEAD = (
    "criterion = nn.CrossEntropyLoss(weight=class_weights, reduction=\"sum\")\n"
    "total = class_weights[y].sum()  # the weight sum of this process's share\n"
    "dist.all_reduce(total)  # ... and of the whole batch\n"
    "# DDP averages gradients over processes: `* world_size` turns that average back into the sum\n"
    "loss = criterion(model(x), y) * dist.get_world_size() / total\n"
    "loss.backward()"
)
IN_BATCH_NEGATIVES_MESSAGE = (
    "`{loss}` is a contrastive loss with in-batch negatives (labels `{labels}`): under DDP each process scores "
    "its samples only against its own share of the batch, so it sees fewer negatives and the objective changes; "
    "to keep them, gather the embeddings of every process with `torch.distributed.nn.functional.all_gather` "
    "(it keeps gradients), build the similarity against the gathered set, and use the labels "
    "`torch.arange(n) + dist.get_rank() * n`"
)
IN_BATCH_NEGATIVES_WHY = (
    "In-batch contrastive training scores every sample against every other sample of the batch: the other "
    "samples are the negatives. DataParallel computed the loss on the gathered outputs, so each sample had the "
    "whole batch as negatives. Under DDP each process builds the similarity matrix from its own share only, so "
    "each sample has 1/world_size as many negatives: the task is easier, the loss lower, and what the model "
    "learns changes. `dist.all_gather` would gather the embeddings but drops their gradients; "
    "`torch.distributed.nn.functional.all_gather` keeps them."
)
IN_BATCH_NEGATIVES_EXAMPLE = (
    "logits = image_features @ text_features.T / temperature\n"
    "labels = torch.arange(logits.size(0), device=logits.device)\n"
    "loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2\n"
    "loss.backward()"
)
IN_BATCH_NEGATIVES_INSTEAD = (
    "import torch.distributed.nn.functional as dist_nn\n\n"
    "# every process's embeddings, with gradients flowing back to the process that computed them\n"
    "all_images = torch.cat(dist_nn.all_gather(image_features))\n"
    "all_texts = torch.cat(dist_nn.all_gather(text_features))\n"
    "n = image_features.size(0)\n"
    "labels = torch.arange(n, device=image_features.device) + dist.get_rank() * n\n"
    "loss = (F.cross_entropy(image_features @ all_texts.T / temperature, labels)\n"
    "        + F.cross_entropy(text_features @ all_images.T / temperature, labels)) / 2\n"
    "loss.backward()  # DDP averages the processes' gradients: the mean over the whole batch"
)


def is_check_rule(code: str) -> bool:
    """DDP5xx: hazards ``check`` finds in a script that runs DDP; the other codes are convert's findings."""
    return code.startswith("DDP5")


RULES: dict[str, Rule] = {
    rule.code: rule
    for rule in (
        Rule(
            "DDP001",
            "already-distributed",
            "note",
            "already uses torch.distributed ({what}); left unchanged",
            doc=_doc(
                "Finds a script that already calls `init_process_group` or builds `DistributedDataParallel` itself.",
                "Such a script manages its own processes. Adding a second setup, samplers or guards on top of the script's own would initialise the process group twice or split the data twice.",
                'dist.init_process_group("nccl")\nmodel = DistributedDataParallel(model, device_ids=[local_rank])',
                "# nothing to convert: check it with the other findings instead",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP002",
            "data-parallel-in-use",
            "warning",
            "`{call}` runs one process with a thread per GPU: convert the script to DistributedDataParallel "
            "with `dp2ddp convert`",
            doc=_doc(
                "Finds `nn.DataParallel` (any spelling) wrapping a model.",
                "DataParallel drives every GPU from threads of one process. It is GIL-bound, copies the model "
                "to every GPU on each forward, gathers outputs on GPU 0, and PyTorch recommends "
                "DistributedDataParallel instead, which is typically several times faster.",
                "model = nn.DataParallel(Net()).cuda()",
                "model = wrap_ddp(Net())  # what dp2ddp convert writes, with setup_distributed() at the entry",
                "`check --fix` runs `dp2ddp convert` on the file: the whole migration, which changes how the "
                "script is launched, the data each process loads and which process prints. Review the diff "
                "(`check --diff`) first. A file that convert would leave as it was is not fixable.",
            ),
        ),
        Rule(
            "DDP101",
            "no-entry-point",
            "warning",
            "no `if __name__ == \"__main__\":` entry or top-level training code, so no process-group "
            "setup was added here: the script that imports this one must start the process group before it "
            "builds the model, and be launched with torchrun: convert the folder as one project "
            "(`dp2ddp convert DIR`, or `convert ENTRY.py --project`), which adds the setup to the entry point "
            "that imports this module, or add it there by hand (`dp2ddp explain DDP101` shows the lines)",
            doc=_doc(
                'Finds a file with a DataParallel wrap but no `if __name__ == "__main__":` block and no top-level training code, such as a trainer module.',
                "DDP needs a process group before the model is wrapped. A module that is imported has no place "
                "where convert can start one for every way the program is launched. Converted on its own, a "
                "trainer module gets no setup; converted as part of its folder (`dp2ddp convert DIR`), the entry "
                "point that imports it gets `setup_distributed()` (DDP103), and this finding is not reported.",
                "# trainer.py\nclass Trainer:\n    def __init__(self, model):\n        self.model = nn.DataParallel(model)\n\n"
                "# run.py\nfrom trainer import Trainer\n\nif __name__ == \"__main__\":\n    Trainer(Net()).fit()",
                "# run.py, once trainer.py is converted; launch: torchrun --nproc-per-node=N run.py\n"
                "import os\n\nimport torch\nimport torch.distributed as dist\n\nfrom trainer import Trainer\n\n"
                "if __name__ == \"__main__\":\n"
                "    if torch.cuda.is_available():  # before the model is built: wrap_ddp uses the current GPU\n"
                "        torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"]))\n"
                "    dist.init_process_group(\"nccl\" if torch.cuda.is_available() else \"gloo\")\n"
                "    Trainer(Net()).fit()\n"
                "    dist.barrier()  # every process leaves together\n"
                "    dist.destroy_process_group()",
                "Safe: the module is converted; its importer must start the process group. If the run script "
                "wraps a model in DataParallel itself, converting it adds `setup_distributed()` there instead.",
            ),
        ),
        Rule(
            "DDP103",
            "project-entry-point",
            "note",
            "starts the process group here: this entry point imports code that wraps a model ({site})",
            doc=_doc(
                "Finds an entry point of a project (`convert DIR`) that has no DataParallel itself but imports a module that wraps a model.",
                "DDP needs a process group before the model is wrapped, and only the script that is launched "
                "can start one for every process. The module that wraps the model is imported, so the entry "
                "point that imports it gets `setup_distributed()` first thing in its `__main__` block.",
                "# run.py\nfrom trainer import Trainer\n\nif __name__ == \"__main__\":\n    Trainer().fit()",
                "# run.py\nfrom ddp_helpers import setup_distributed\nfrom trainer import Trainer\n\n"
                "if __name__ == \"__main__\":\n    setup_distributed()\n    Trainer().fit()",
                "Done by convert.",
            ),
        ),
        Rule(
            "DDP104",
            "project-factory-wrap",
            "note",
            "`{call}` returns the model that {site} wraps in DDP: the loaders, loops and writes here are converted around it",
            doc=_doc(
                "Finds a call of a project function that returns a model it wrapped (a model factory in another module).",
                "The wrap is in the factory, but the model trains in the caller: the caller's loaders are "
                "split, its epoch loop calls `set_epoch`, its prints and saves run on the main process, and "
                "anything done to the model after the call is checked as done after the wrap.",
                "# models/__init__.py\ndef create_model(opt):\n    return nn.DataParallel(Net())\n\n"
                "# train.py\nmodel = create_model(opt)",
                "# models/__init__.py\ndef create_model(opt):\n    return wrap_ddp(Net())",
                "Done by convert.",
            ),
        ),
        Rule(
            "DDP105",
            "project-helper-guarded",
            "note",
            "`{function}` writes ({site}) on the main process only now: every caller of it is converted ({callers})",
            doc=_doc(
                "Finds a function of another project module that saves, prints, logs or writes files and is called from converted code.",
                "After conversion every process runs the caller, so the helper would write once per process: "
                "duplicate logs, and checkpoints written by several processes to one path. When every caller "
                "is converted, the writes are guarded inside the helper, as convert guards them in a script.",
                "# utils.py\ndef save_checkpoint(state, path):\n    torch.save(state, path)",
                "# utils.py\ndef save_checkpoint(state, path):\n    if is_main_process():\n        torch.save(state, path)",
                "Done by convert.",
            ),
        ),
        Rule(
            "DDP106",
            "project-call-guarded",
            "note",
            "`{call}` writes ({site}); it is guarded at this call, because code that is not converted calls it too",
            doc=_doc(
                "Finds a call, in converted code, of a project function that writes and that other, unconverted code also calls.",
                "Guarding inside the helper would change what the unconverted callers do, so the converted "
                "call runs on the main process only instead.",
                "utils.save_checkpoint(state, path)",
                "if is_main_process():\n    utils.save_checkpoint(state, path)",
                "Done by convert.",
            ),
        ),
        Rule(
            "DDP108",
            "project-call-writes-unguarded",
            "warning",
            "`{call}` writes ({site}) on every process, and {why}, so the call cannot run on the "
            "main process only: put its writes under `if is_main_process():` inside it",
            doc=_doc(
                "Finds a call, in converted code, of a project function that writes (prints, logs, saves) and "
                "returns a value the caller uses, or does more than write (merges a config, fills a cache), where "
                "code that is not converted calls it too.",
                "Guarding the call would leave the other processes without its value (a model, a dataset, a "
                "logger) or its other effects (a configuration every process trains with), and guarding inside "
                "the function would change what its unconverted callers do. So it "
                "writes on every process: a line printed once per process, or a file written by each.",
                "net = build_net(cfg)  # build_net prints the configuration",
                "# in build_net: if is_main_process(): print(cfg)\nnet = build_net(cfg)",
                "No fix: the call is left as it was.",
            ),
        ),
        Rule(
            "DDP107",
            "obligation-left-open-by-option",
            "error",
            "{what}, because the options leave out `{codemod}`; the file is left as it was: {why}: run convert "
            "without `--skip {codemod}` (or with it in `--only`)",
            doc=_doc(
                "Finds a wrap or a training DataLoader that `--skip` or `--only` keeps from being converted, in a "
                "file that convert changes otherwise.",
                "The rest of the conversion assumes it: the data split across processes and the launch under "
                "torchrun with a model left in DataParallel give replicas that never synchronise, and a DDP model "
                "fed a whole, unsplit loader trains every process on all the data. An option narrows what "
                "convert edits; it never makes such a program right.",
                "dp2ddp convert --skip replace_data_parallel train.py",
                "dp2ddp convert train.py  # review the diff; skip only codemods whose work is optional (download_once)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP110",
            "converted-output-fails-check",
            "error",
            "check finds {check} in the converted script, at its line {line}, and convert did not report it: "
            "{message}; the file is left as it was: change the line of this script it came from so that it holds "
            "for the DataParallel model and for DDP alike (a model that may be wrapped is `getattr(model, \"module\", "
            "model)`), then convert again, or report this script",
            doc=_doc(
                "Runs check on every script convert produces, before anything is written. Finds an error check "
                "reports in that output (or a data split, an epoch advance or a use of the model the DDP script "
                "cannot make) that no finding of convert's own accounts for.",
                "convert and check share one analysis, but convert edits in many steps, and an edit can leave "
                "what check sees as a hazard: a collective under a rank guard, a loader not split, a custom "
                "method called on the DDP wrapper. Such a script would exit 0 from convert and then hang, crash "
                "or train differently from the DataParallel run.",
                "dp2ddp convert train.py  # the output would fail `dp2ddp check`",
                "dp2ddp convert train.py  # after the line named is fixed by hand, or the script reported",
                "No fix: the file is left as it was, and every finding is listed at once.",
            ),
        ),
        Rule(
            "DDP111",
            "converted-output-warns",
            "warning",
            "check finds {check} in the converted script, at its line {line}, which convert did not report: "
            "{message}",
            doc=_doc(
                "Runs check on every script convert produces, before anything is written, and passes on each "
                "warning of check's that no finding of convert's own accounts for.",
                "What convert cannot make safe it must say. A hazard check sees in the output and convert did not "
                "name would otherwise reach the user only when they run check, or the script.",
                "dp2ddp convert train.py  # a print of a per-process value check flags in the output",
                "dp2ddp convert train.py && dp2ddp check train.py  # the same hazard, named by both",
                "No fix: the converted script is written, with this warning at the line the hazard came from.",
            ),
        ),
        Rule(
            "DDP112",
            "converted-output-fixed-as-check-fixes",
            "note",
            "check finds {check} in the converted script, at its line {line}, and convert made check's fix there: "
            "{message}",
            doc=_doc(
                "Runs check on every script convert produces, and makes the fix check knows for a finding no "
                "finding of convert's own accounts for: a branch that reads the model through `.module` on one "
                "side and bare on the other becomes `.module` on both.",
                "The conversion made a condition that once decided the wrap irrelevant: the model is DDP on "
                "every path now. The side written for the bare model would call the model's own methods on the "
                "DDP wrapper, which has none of them, and crash there.",
                "if num_gpu == 1:\n    sample = model.reverse(z)\nelse:\n    sample = model.module.reverse(z)",
                "if num_gpu == 1:\n    sample = model.module.reverse(z)\nelse:\n    sample = model.module.reverse(z)",
                "Safe: the fix is check's own, made only where the model is DDP on both sides.",
            ),
        ),
        Rule(
            "DDP102",
            "unresolved-data-parallel",
            "error",
            "`{spelled}` cannot be resolved: a star import may bind `torch` here; the file is left as it was: "
            "import torch (or DataParallel) by name in this file, then run convert again",
            doc=_doc(
                "Finds a call spelled like DataParallel in a file whose torch names come from `from x import *`.",
                "convert resolves every name before it edits. A star import hides what `torch` means, so "
                "nothing about the wrap can be established, and no part of the file is converted.",
                "from modeling.deeplab import *\nmodel = torch.nn.DataParallel(model)",
                "import torch\nfrom modeling.deeplab import *\nmodel = torch.nn.DataParallel(model)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP201",
            "data-parallel-submodule",
            "warning",
            "DataParallel wraps a sub-module; left unchanged: wrap the whole model "
            "in DistributedDataParallel instead",
            doc=_doc(
                "Finds `nn.DataParallel` around a part of a model (`self.backbone = nn.DataParallel(...)`).",
                "DDP wraps the module whose parameters it synchronises and whose forward it calls; a wrapped sub-module inside an unwrapped model would synchronise part of the gradients and not the rest.",
                "self.features = nn.DataParallel(self.features)",
                "model = DistributedDataParallel(model)  # the whole model, once",
                "No fix: the wrap is left as it was.",
            ),
        ),
        Rule(
            "DDP202",
            "functional-data-parallel",
            "error",
            "functional nn.parallel.data_parallel spreads this call over the GPUs; the file is left as it was: "
            "under DDP each process would still scatter it over every GPU, and the module it runs is wrapped by "
            "no DDP, so its gradients would never be averaged: call the module directly and wrap the whole "
            "model in nn.DataParallel where it is built, then run convert again",
            doc=_doc(
                "Finds the functional `nn.parallel.data_parallel(module, inputs)`.",
                "It scatters one call over GPUs inside one process; there is no module object for DDP to wrap. "
                "Left in a converted script, every process scatters over every GPU from its own (DataParallel "
                "then refuses a module that is not on the first of them), and on CPU the module trains on each "
                "process alone.",
                "output = nn.parallel.data_parallel(model, inputs, device_ids)",
                "model = nn.DataParallel(model)  # where it is built; convert then wraps it in DDP\noutput = model(inputs)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP203",
            "data-parallel-subclass",
            "warning",
            "subclass of DataParallel `{name}` cannot be converted; left unchanged",
            doc=_doc(
                "Finds a class of the script that subclasses DataParallel (a balanced or custom scatter).",
                "Its overrides (`scatter`, `forward`) only make sense inside one process with many GPUs; DDP has no equivalent of them.",
                "class BalancedDataParallel(nn.DataParallel):\n    def scatter(self, inputs, kwargs, device_ids): ...",
                "model = DistributedDataParallel(model)  # one process per GPU: no scatter to balance",
                "No fix: the class and its uses are left as they were.",
            ),
        ),
        Rule(
            "DDP204",
            "conditional-wrap",
            "error",
            "the DataParallel wrap cannot leave its condition (an `else` that binds other names or "
            "leaves the block, code after it in the `if` that uses the model, or an `elif`); the file is "
            "left as it was: every process must wrap the model, so make the wrap unconditional by hand",
            doc=_doc(
                "Finds a DataParallel wrap under GPU conditions that cannot be moved out of them: an `if` "
                "whose `else` binds names the wrapping branch does not or leaves with `return`/`break`/"
                "`raise`, an `elif`, later code in the `if` that uses the wrapped model other than to move "
                "it to its own device, or a conditional expression other than `DataParallel(m) if gpu else m`.",
                "DDP averages gradients only between processes that wrapped the model. A process that "
                "skips the wrap trains alone while the data is split, so the replicas drift apart.",
                "if torch.cuda.device_count() > 1:\n    model = nn.DataParallel(model)\nelse:\n    single_device = True",
                "model = nn.DataParallel(model)  # then run dp2ddp convert\nsingle_device = torch.cuda.device_count() <= 1",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP205",
            "first-gpu-literal",
            "note",
            "`{literal}` would put every process on GPU 0; now `{replacement}`, this process's GPU",
            doc=_doc(
                'Finds `.cuda(0)`, `"cuda:0"` and `torch.device("cuda:0")` in a script being converted.',
                "Under DDP each process owns one GPU. A hard-coded GPU 0 puts every process's tensors on the first GPU, which runs out of memory and serialises the processes.",
                'x = x.to("cuda:0")',
                'x = x.to("cuda")  # the current device, which setup_distributed() set to this process\'s GPU',
                "Safe: `cuda` means the current device, which is this process's.",
            ),
        ),
        Rule(
            "DDP247",
            "wrap-once-guard",
            "note",
            "the DataParallel wrap depends on `{condition}`, which only keeps `{model}` from being wrapped twice: the "
            "model is wrapped whichever way it goes, and the test accepts the DDP model too, so the wrap converts "
            "where it is",
            doc=_doc(
                "Finds a wrap under `if not isinstance(model, nn.DataParallel):` that wraps that same model, with no "
                "`else`.",
                "A helper handed either a bare or a wrapped model wraps it once. The condition is about the model, "
                "not the machine, and every process takes the same branch; convert makes the `isinstance` accept "
                "DistributedDataParallel too, so a converted model is not wrapped again.",
                "if not isinstance(model, nn.DataParallel):\n    model = nn.DataParallel(model)",
                "if not isinstance(model, (nn.DataParallel, DistributedDataParallel)):\n    model = wrap_ddp(model)",
                "Safe: whichever way the test goes, the model every process trains is wrapped once.",
            ),
        ),
        Rule(
            "DDP248",
            "step-agreed-on-the-averaged-loss",
            "note",
            "`{step}` runs only when `{test}` holds, a test of the loss; the test now reads the loss averaged over "
            "processes, as DataParallel's loss was the whole batch's, so every process steps or skips together",
            doc=_doc(
                "Finds an optimizer step after `backward()` under an `if` whose test reads only the loss (`if "
                "loss.item() < threshold: optimizer.step()`).",
                "Under DataParallel one process tested the whole batch's loss. After the split each process would "
                "test its own share's: one process steps while another skips, and the replicas drift apart. The "
                "averaged loss is the same number on every process.",
                "loss.backward()\nif loss.item() < 10:\n    optimizer.step()",
                "loss.backward()\nif all_reduce_mean(loss.item()) < 10:\n    optimizer.step()",
                "Safe: the test reads the number DataParallel read, up to how the batch is divided.",
            ),
        ),
        Rule(
            "DDP249",
            "step-on-some-processes",
            "error",
            "`{step}` runs only when `{test}` holds, which reads `{value}`, computed from this process's share of the "
            "batch: one process would step while another does not, and the replicas drift apart; the file is left "
            "as it was: test the loss itself (convert then averages it), or step unconditionally, convert, and test "
            "again on values reduced with `all_reduce_mean(...)`",
            doc=_doc(
                "Finds an optimizer step after `backward()` under an `if` whose test reads something computed from "
                "the loss other than the loss itself (`last = loss.item()`, then `if loss.item() < 3 * last:`).",
                "Each process tests its own numbers. Where they differ, some processes step and others do not: the "
                "gradients were averaged, but the weights no longer are the same on every process.",
                "loss.backward()\nif loss.item() < 3 * last:\n    optimizer.step()\n    last = loss.item()",
                "loss.backward()\nloss_value = all_reduce_mean(loss.item())\nif loss_value < 3 * last:\n"
                "    optimizer.step()\n    last = loss_value",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP250",
            "optimizer-over-unregistered-tensors",
            "error",
            "this optimizer steps `{call}`, tensors the model makes ({site}) but does not register as parameters: DDP "
            "averages only the gradients of registered parameters, so each process would step its own and they "
            "would drift apart; the file is left as it was: make them `nn.Parameter`s of the model (DDP then averages "
            "their gradients) and build the other optimizers from the other parameters only, then convert again",
            doc=_doc(
                "Finds an optimizer built over a method of the wrapped model (`model.module.arch_parameters()`) that "
                "returns tensors the model class makes with `requires_grad=True` (`Variable(...)`, "
                "`torch.randn(..., requires_grad=True)`) instead of `nn.Parameter`.",
                "A DARTS search model keeps its architecture weights as plain tensors. DataParallel's one process "
                "stepped them once. Under DDP each process steps them with the gradient of its own share of the "
                "batch, since DDP averages only registered parameters: the architectures drift apart, and the one "
                "found is rank 0's.",
                "self.alphas = Variable(1e-3 * torch.randn(k, n), requires_grad=True)\n...\n"
                "optimizer_a = torch.optim.Adam(model.module.arch_parameters(), lr=6e-3)",
                "self.alphas = nn.Parameter(1e-3 * torch.randn(k, n))\n...\n"
                "weights = [p for name, p in model.named_parameters() if 'alphas' not in name]\n"
                "optimizer = torch.optim.SGD(weights, lr=0.1)\n"
                "optimizer_a = torch.optim.Adam(model.module.arch_parameters(), lr=6e-3)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP246",
            "data-parallel-first-gpu",
            "note",
            "`{device}` is the first GPU DataParallel was given, where it gathered the outputs; under DDP every "
            "process would use it: now `{replacement}`, this process's GPU",
            doc=_doc(
                "Finds, in a script being converted, a device built from the first entry of the list handed to "
                "`nn.DataParallel(..., device_ids=...)`: `f\"cuda:{gpus[0]}\"`, `\"cuda:{}\".format(gpus[0])`, "
                "`.cuda(gpus[0])`, `torch.device(\"cuda\", gpus[0])` or `device=gpus[0]`.",
                "DataParallel keeps the model and gathers the outputs on its first GPU, so the script moves its "
                "batches there. Under DDP each process owns one GPU and its model is there: every process moving "
                "its batches to the same first GPU stops at the first forward with tensors on two devices.",
                'device = torch.device(f"cuda:{args.gpus[0]}")\nmodel = nn.DataParallel(model, device_ids=args.gpus).to(device)',
                'device = torch.device("cuda")  # the current device, which setup_distributed() set to this process\'s GPU\nmodel = wrap_ddp(model)',
                "Safe: `cuda` means the current device, which is this process's. Which GPUs the processes use is "
                "now torchrun's choice: set CUDA_VISIBLE_DEVICES to the GPUs `device_ids` listed.",
            ),
        ),
        Rule(
            "DDP206",
            "visible-devices-in-script",
            "warning",
            "the script sets CUDA_VISIBLE_DEVICES: every process sees the same GPUs, so start "
            "no more processes than it lists, or set it in the shell instead",
            doc=_doc(
                'Finds `os.environ["CUDA_VISIBLE_DEVICES"] = ...` in the script.',
                "Set inside the script, it gives every process the same list of GPUs. Started with more processes than it lists, several processes share a GPU or ask for one that is not visible.",
                'os.environ["CUDA_VISIBLE_DEVICES"] = args.gpus',
                "CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node=2 train.py",
                "No fix: the assignment is kept; setup_distributed() runs after it.",
            ),
        ),
        Rule(
            "DDP207",
            "wrap-condition-not-about-gpus",
            "error",
            "the DataParallel wrap depends on `{condition}`, which is not about GPUs; the file is "
            "left as it was: every process must wrap the model, so decide by hand whether the "
            "wrap may become unconditional",
            doc=_doc(
                "Finds a DataParallel wrap under a condition that convert cannot prove is a GPU-count "
                "or CUDA-availability test: a feature flag, a mode, a config value from another file. "
                "An `if` with no `else` that tests only the item of the loop it is in, with literals, types "
                "and `isinstance` (`for name in self.model_names: if isinstance(name, str):`), is no such "
                "condition: it picks which items are wrapped, alike on every process, so it stays and the "
                "wrap inside converts.",
                "A wrap under `torch.cuda.device_count() > 1` only meant \"use the GPUs there are\", and under "
                "DDP it becomes unconditional. Any other condition may say the model must not be wrapped "
                "(evaluation mode, apex fp16). Making it unconditional could change what the script does, "
                "and leaving it conditional lets some processes train an unwrapped model on their shard.",
                "if opt.isTrain and not opt.fp16:\n    model = nn.DataParallel(model)",
                "model = nn.DataParallel(model)  # when the wrap is right in every mode",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP208",
            "branch-on-old-wrap-condition",
            "warning",
            "this branch tests `{condition}`, which no longer decides whether the model is wrapped: "
            "under DDP it always is, so use `model.module` on both sides",
            doc=_doc(
                "Finds an `if` on the condition a wrap was moved out of, where the branch uses the model.",
                "The branch assumed an unwrapped model when the condition was false. Now the model is "
                "always a DDP wrapper, so that side saves `module.`-prefixed keys or a pickled DDP object.",
                "if use_cuda:\n    torch.save(net.module, path)\nelse:\n    torch.save(net, path)",
                "torch.save(net.module, path)",
                "No fix. `net.module if use_cuda else net` alone is rewritten to `net.module`.",
            ),
        ),
        Rule(
            "DDP209",
            "visible-devices-after-setup",
            "warning",
            "CUDA_VISIBLE_DEVICES is set after setup_distributed() has chosen this process's GPU, so "
            "it has no effect: set it in the shell, or before setup_distributed() runs",
            doc=_doc(
                "Finds an assignment to `os.environ[\"CUDA_VISIBLE_DEVICES\"]` that runs after the process group is set up.",
                "CUDA reads the variable once, when it starts; setup_distributed() has started it.",
                "def main():\n    os.environ[\"CUDA_VISIBLE_DEVICES\"] = args.gpus",
                "CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc-per-node=2 train.py",
                "No fix. An assignment in the entry block itself is kept before setup_distributed().",
            ),
        ),
        Rule(
            "DDP210",
            "cast-after-wrap",
            "error",
            "`{call}` casts the parameters after the DataParallel wrap; the file is left as it was: "
            "DDP hooks the parameters it is given, so cast before the wrap",
            doc=_doc(
                "Finds `.half()`, `.float()`, `.double()`, `.bfloat16()` or `.to(dtype)` on a wrapped model after the wrap.",
                "DDP registers its gradient hooks and buckets on the parameters it was built with. "
                "A cast afterwards leaves the gradients unaveraged, with no error.",
                "model = nn.DataParallel(net)\nif args.half:\n    model.half()",
                "if args.half:\n    net.half()\nmodel = nn.DataParallel(net)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP211",
            "reinitialised-after-wrap",
            "error",
            "`{call}` writes the model's weights after the DataParallel wrap; the file is left as it "
            "was: DDP copies rank 0's weights only when it is built, so initialise before the wrap",
            doc=_doc(
                "Finds weight initialisation of a wrapped model after the wrap: `.apply(init)`, "
                "`nn.init.*`, `reset_parameters()`, in-place `normal_`/`fill_`/`copy_` on its tensors.",
                "Each process draws its own random weights after DDP broadcast rank 0's, and DDP never "
                "broadcasts again: the replicas train different models from the first step.",
                "net = nn.DataParallel(base)\nbase.extras.apply(weights_init)",
                "base.extras.apply(weights_init)\nnet = nn.DataParallel(base)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP212",
            "device-move-after-wrap",
            "error",
            "the wrapped model moves to `{device}` after the wrap, which may not be this process's "
            "GPU; the file is left as it was: move it before the wrap, or use a device every process "
            "resolves to its own (\"cuda\")",
            doc=_doc(
                "Finds `.to(device)` or `.cuda(device)` on a wrapped model after the wrap, with a device "
                "convert cannot resolve to this process's own: an argument, a config value.",
                "The converted wrap binds DDP to this process's GPU. A later move to a fixed device puts "
                "every process's model on the same GPU, away from DDP's device.",
                "model = nn.DataParallel(model)\nmodel = model.to(cfg.DEVICE)",
                "model = model.to(\"cuda\")\nmodel = nn.DataParallel(model)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP213",
            "device-from-variable",
            "warning",
            "device `{device}` comes from a variable: under DDP each process must use its own GPU, "
            "which setup_distributed() selected; make sure `{device}` is this process's local rank, "
            "or drop it",
            doc=_doc(
                "Finds `torch.cuda.set_device(x)`, `.cuda(x)` and `.to(x)` where `x` is a config value, an "
                "attribute or a variable convert cannot resolve. A function parameter that picks the GPU is "
                "DDP217's or DDP218's.",
                "A DataParallel script picks one GPU for everything. Under DDP, a fixed index such as "
                "`cfg.GPU = 0` puts every process on that GPU, and NCCL fails or the GPUs are shared.",
                "torch.cuda.set_device(cfg.GPU)\nimages = images.to(cfg.DEVICE)",
                "# setup_distributed() already called set_device(local_rank)\nimages = images.cuda()",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP217",
            "gpu-argument-to-local-rank",
            "note",
            "`{function}` picks its GPU with `{parameter}`, and this call passes `{value}`, which would put "
            "every process on one GPU; it now passes `int(os.environ.get(\"LOCAL_RANK\", \"0\"))`, this process's local rank",
            doc=_doc(
                "Finds a function of the script that picks its GPU with a parameter (`torch.cuda.set_device(gpu)`, "
                "`.cuda(gpu)`, `device_ids=[gpu]`) and a call of it that passes `0`.",
                "Under DataParallel `train(0, args)` meant \"the GPU the model gathers on\". Under DDP every process "
                "would pick GPU 0: NCCL fails on duplicate GPUs, or the processes share one. Passing the local "
                "rank makes every use of the parameter this process's GPU at once, tests such as `gpu == 0` "
                "included, which then hold on one process per node, as `local_rank == 0` would.",
                "def train(gpu, args):\n    torch.cuda.set_device(gpu)\n    model.cuda(gpu)\n\ntrain(0, args)",
                "train(int(os.environ.get(\"LOCAL_RANK\", \"0\")), args)  # after setup_distributed()",
                "Safe: setup_distributed() selected the GPU of the local rank already, and a single process "
                "without a launcher has local rank 0, as before. Without CUDA the parameter reaches only the "
                "`.cuda()` calls the script already skips on a CPU.",
            ),
        ),
        Rule(
            "DDP218",
            "gpu-parameter-unknown",
            "error",
            "`{function}` picks its GPU with `{parameter}`, but convert cannot establish that every call passes "
            "GPU 0 or this process's own GPU ({why}); the file is left as it was: pass "
            "`int(os.environ[\"LOCAL_RANK\"])` for `{parameter}` at every call, then run convert again",
            doc=_doc(
                "Finds a function of the script that picks its GPU with a parameter, where some call passes a "
                "value convert cannot resolve, passes nothing for it, or the function is handed on as a value "
                "(`mp.spawn(train, ...)`, a callback) or never called in the file.",
                "Converted as it is, every process could pick the same GPU, and NCCL fails on duplicate GPUs or "
                "the processes share one. Whatever the value is, it must be this process's local rank under DDP.",
                "def train(gpu, args):\n    torch.cuda.set_device(gpu)\n\ntrain(args.gpu, args)",
                "train(int(os.environ[\"LOCAL_RANK\"]), args)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP214",
            "saves-ddp-wrapper",
            "note",
            "`torch.save({model}, ...)` would pickle the DDP wrapper, which cannot be loaded without a "
            "process group; it now saves `{model}.module`, the model inside",
            doc=_doc(
                "Finds `torch.save` of a wrapped model object itself.",
                "Unpickling DistributedDataParallel needs an initialised process group.",
                "torch.save(model, \"model.pt\")",
                "torch.save(model.module, \"model.pt\")",
                "Safe: the file holds the model the DataParallel script trained. Code that loads it and "
                "reads `.module` must read the object itself.",
            ),
        ),
        Rule(
            "DDP215",
            "unused-parameters",
            "note",
            "`{model}`'s forward may leave `{module}` without a gradient: DDP needs "
            "find_unused_parameters=True for that, now passed to the wrap",
            doc=_doc(
                "Finds a wrapped model whose class (of the script, or of a module it imports) builds a sub-module "
                "that a training forward may not reach: no method but `__init__` names it; a walk of a "
                "sub-module's children stops early (`for name, layer in self.base._modules.items(): if name == "
                "'avgpool': break`); every use is under a condition other than `self.training` while `__init__` "
                "builds it unconditionally; or it is built from another class of which one of these holds.",
                "DDP waits for a gradient of every parameter; one that never gets one stops training at "
                "the second step with an error that names find_unused_parameters.",
                "self.pooler = nn.Linear(768, 768)  # never called in forward",
                "wrap_ddp(model, find_unused_parameters=True)",
                "Safe, and a little slower: DDP walks the graph once per step to find the parameters that "
                "got no gradient. Deleting the unused module is faster.",
            ),
        ),
        Rule(
            "DDP232",
            "unused-parameters-possible",
            "note",
            "the wrapped model comes from `{source}`, which convert cannot follow to its class, and `{model}` "
            "({where}) may leave `{module}` without a gradient: find_unused_parameters=True is now passed to the wrap",
            doc=_doc(
                "Finds a wrapped model built by a call or a name convert cannot follow to one class (a factory "
                "such as `models.create(args.arch)`, a name bound on two branches), in a file or project with a "
                "model class whose forward may leave a sub-module without a gradient (as DDP215 reads it).",
                "Whether every parameter gets a gradient is not known, and DDP stops at the second step if one "
                "does not. The safe assumption is that the wrapped model is that class.",
                "model = models.create(args.arch)  # reid/models/resnet.py: forward stops before base.fc\n"
                "model = nn.DataParallel(model)",
                "model = wrap_ddp(model, find_unused_parameters=True)",
                "Safe, and a little slower: DDP walks the graph once per step. When the wrapped model reaches "
                "every parameter, DDP says so in a warning at the first step, and the argument can be removed.",
            ),
        ),
        Rule(
            "DDP233",
            "unused-parameters-unknown",
            "note",
            "the wrapped model comes from `{source}`, whose code convert does not read: whether its forward reaches "
            "every parameter is not known, so find_unused_parameters=True is now passed to the wrap",
            doc=_doc(
                "Finds a wrapped model built by a call into code convert does not read: a module outside the "
                "file or project it converts, other than torch, torchvision and timm.",
                "DDP stops at the second step if a parameter gets no gradient (a head the forward skips, a "
                "backbone whose classifier is cut off), and nothing read says that cannot happen.",
                "from reid import models\nmodel = nn.DataParallel(models.create(args.arch))",
                "model = wrap_ddp(models.create(args.arch), find_unused_parameters=True)",
                "Safe, and a little slower: DDP walks the graph once per step. Convert the project "
                "(`dp2ddp convert .`) so its model classes are read, or remove the argument when DDP warns at "
                "the first step that it found no unused parameter.",
            ),
        ),
        Rule(
            "DDP220",
            "backward-skipped-on-some-processes",
            "error",
            "a backward pass can be skipped here: {how}; the file is left as it was: DDP's backward is a "
            "collective, so a process that skips it leaves the others waiting forever",
            doc=_doc(
                "Finds a `continue` or `break` on a value that differs between processes (the batch, the "
                "loss) before or around `backward()`, and a `try` around `backward()` whose handler goes on.",
                "Every process must run the same number of backward passes. Under DataParallel the skip was "
                "decided once, on the whole batch; under DDP each process decides on its own share, and the "
                "processes that did not skip wait forever in the all-reduce of the one that did. Multiplying "
                "the loss by zero is no cure: `optimizer.step()` still runs, and momentum, Adam's moments and "
                "weight decay still move the weights. There is no equivalent of catching an error in "
                "`backward()`: a process that failed there has left the all-reduce the others are in.",
                "for x, y in loader:\n    loss = criterion(model(x), y)\n    if bool(loss == 0) or torch.isnan(loss):\n"
                "        continue\n    optimizer.zero_grad()\n    try:\n        loss.backward()\n"
                "    except RuntimeError:\n        continue\n    optimizer.step()",
                "for x, y in loader:\n    loss = criterion(model(x), y)\n    optimizer.zero_grad()\n"
                "    loss.backward()  # on every process, every batch, with no try around it\n"
                "    # The gradients are averaged over processes by now, so this test has one answer on every\n"
                "    # process: all zero where the whole batch's loss was 0 (a loss of 0 has no gradient),\n"
                "    # not finite where any process's loss was NaN. The skipped step changes no weight and no state.\n"
                "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
                "    if all(g.isfinite().all() for g in grads) and any(g.any() for g in grads):\n"
                "        optimizer.step()",
                "No fix: the file is left as it was. Rewritten as above, with `zero_grad()` before every "
                "backward, the file converts. A skip on the data itself (a batch without targets) is better "
                "made in the dataset or `collate_fn`, so that no process sees such a batch; an error that "
                "was caught should stop the run instead (lower the batch for out-of-memory).",
            ),
        ),
        Rule(
            "DDP224",
            "skip-agreed-on-the-averaged-loss",
            "note",
            "a backward pass was skipped here on a test of the loss ({how}); the test now reads the loss "
            "averaged over processes, as DataParallel's loss was the whole batch's, so every process skips together",
            doc=_doc(
                "Finds a `continue` or `break` before or after `backward()` whose condition reads only the "
                "loss (`loss`, `loss.item()`), and makes the condition read `all_reduce_mean(loss)` instead.",
                "DDP's backward is a collective. With a test of each process's own loss, one process may skip "
                "a backward that the others run, and they wait forever. Under DataParallel the loss was "
                "computed over the whole batch; the average over equal shards is that same number, and it is "
                "the same on every process.",
                "if loss.item() < 1e-8:\n    continue\nloss.backward()",
                "if all_reduce_mean(loss.item()) < 1e-8:\n    continue\nloss.backward()",
                "Safe: one scalar all-reduce per step, reached by every process before the test.",
            ),
        ),
        Rule(
            "DDP225",
            "wrapping-branch-taken",
            "note",
            "the DataParallel wrap is in one branch of `if {condition}:`; under DDP every process wraps, so the "
            "`if` became its wrapping branch and {dropped} was dropped: check that nothing {dropped} did is still "
            "needed",
            doc=_doc(
                "Finds a wrap under a GPU condition whose `if` has an `else` that sets the same things up "
                "for one device, and keeps only the branch that wraps.",
                "Under DataParallel the `else` ran on one GPU. Under DDP every process wraps its model, "
                "whatever the device count, so code written for the wrapped model (`model.module.classifier`) "
                "is what must run; the unwrapped branch would reach into a DDP model as if it were bare.",
                "if len(gpu_ids) > 1:\n    model = nn.DataParallel(model)\n    head = model.module.classifier\n"
                "else:\n    head = model.classifier",
                "model = wrap_ddp(model)\nhead = model.module.classifier",
                "Safe when the `else` binds nothing the wrapping branch does not and has no `return`, `break` "
                "or `raise`; otherwise the file is left as it was (`DDP204`).",
            ),
        ),
        Rule(
            "DDP226",
            "set-device-not-local",
            "error",
            "`torch.cuda.set_device({device})` selects a GPU convert cannot prove is this process's own; the "
            "file is left as it was: after setup_distributed() every process would move to that one GPU, and "
            "NCCL fails on duplicate GPUs: pass int(os.environ[\"LOCAL_RANK\"]) or drop the call",
            doc=_doc(
                "Finds `torch.cuda.set_device(x)` where `x` is a variable, an attribute or an argument "
                "(`args.gpu`, `cfg.GPU`) that convert cannot resolve to this process's local rank.",
                "setup_distributed() selects each process's own GPU, its local rank. Selecting a fixed "
                "GPU afterwards puts every process on it: the model and DDP's buckets share one device, "
                "and NCCL refuses duplicate GPUs in one group.",
                "torch.cuda.set_device(args.gpu)",
                "torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"]))  # or drop it: setup_distributed() selects it",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP221",
            "several-backward-per-forward",
            "error",
            "{backwards} for {forwards} of the wrapped model in one pass through this loop; the file is "
            "left as it was: DDP reduces gradients once per forward, so back-propagate once per forward: "
            "sum the losses that one optimizer steps on, or give each backward a forward of its own",
            doc=_doc(
                "Finds a loop one pass of which can call `backward()` more often than it calls the wrapped "
                "model. Backward passes in the two branches of one `if` count once.",
                "A DDP forward prepares one gradient reduction. A second backward through it fails with "
                "\"Expected to mark a variable ready only once\", or reduces gradients that are not ready.",
                "out = model(x)\nloss_a = criterion(out, y)\nloss_b = out.pow(2).mean()\n"
                "loss_a.backward(retain_graph=True)\nloss_b.backward()\noptimizer.step()",
                "out = model(x)\n(criterion(out, y) + out.pow(2).mean()).backward()  # the same gradient, one backward\noptimizer.step()\n"
                "# Two optimizers stepping between the backward passes (a GAN in one module): summing would\n"
                "# change what each steps on. Wrap each network on its own and run a forward per backward:\n"
                "loss_d = D(G(z).detach()).mean() - D(real).mean()\nloss_d.backward()\nopt_d.step()\n"
                "loss_g = -D(G(z)).mean()\nloss_g.backward()\nopt_g.step()",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP222",
            "double-backward-through-ddp",
            "error",
            "a double backward here would train differently under DDP: {how}; the file is left as it was: "
            "take the gradient with respect to the inputs with torch.autograd.grad(create_graph=True) and "
            "back-propagate the penalty in one backward() with the loss of an ordinary forward",
            doc=_doc(
                "Finds `torch.autograd.grad(..., create_graph=True)`, as in a WGAN-GP or R1 gradient penalty, "
                "that DDP would train differently, and `backward(create_graph=True)`. A penalty on the gradient "
                "with respect to the inputs, back-propagated in the same `backward()` as the loss of an "
                "ordinary forward of the model, converts as it is.",
                "DDP averages each parameter's gradient once, when it reaches the parameter in a `backward()`. "
                "`torch.autograd.grad` reaches no parameter: its gradients stay per process, which is what a "
                "penalty on the inputs' gradients needs. Back-propagated with a loss that reaches every "
                "parameter, the penalty's parameter gradients are averaged with the rest. Back-propagated "
                "alone, in a `backward()` of its own, a parameter it does not reach (the last bias) gets no "
                "gradient, the reduction never completes, the optimizer steps on unaveraged gradients and the "
                "replicas drift apart; the next forward fails. Computing the penalty on `model.module` does "
                "not help: in a `backward()` of its own it is not averaged either. With respect to the "
                "parameters, the gradient is one process's share instead of the whole batch's. "
                "`backward(create_graph=True)` through DDP raises an error.",
                "loss_d = D(fake).mean() - D(real).mean()\nloss_d.backward(retain_graph=True)\n"
                "mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)\n"
                "grads = torch.autograd.grad(D(mixed).sum(), mixed, create_graph=True)[0]\n"
                "(10 * ((grads.norm(2, dim=1) - 1) ** 2).mean()).backward()",
                "mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)\n"
                "grads = torch.autograd.grad(D(mixed).sum(), mixed, create_graph=True)[0]\n"
                "penalty = ((grads.norm(2, dim=1) - 1) ** 2).mean()\n"
                "loss_d = D(fake).mean() - D(real).mean() + 10 * penalty\n"
                "loss_d.backward()  # one backward: every gradient, the penalty's part too, is averaged\n"
                "# A penalty on a step of its own (lazy R1): add the forward's output times zero, so\n"
                "# every parameter gets a gradient: out = D(x); ...; (penalty + 0 * out.sum()).backward()",
                "No fix: the file is left as it was. Written as above, in the function that calls `backward()` "
                "or in a function it calls, the file converts; the penalty is then the mean over processes of "
                "each share's penalty, which is the whole batch's when the shares are equal.",
            ),
        ),
        Rule(
            "DDP223",
            "trainable-module-not-wrapped",
            "error",
            "the optimizer trains `{module}`, which no DataParallel wrap holds; the file is left as it "
            "was: its gradients would never be averaged, so wrap it together with the model",
            doc=_doc(
                "Finds an optimizer over the parameters of a module of the script that is never wrapped.",
                "Only a DDP module's gradients are averaged. Every process steps this module with its own "
                "shard's gradients, and the copies drift apart without an error.",
                "net = nn.DataParallel(backbone)\nopt = SGD([*backbone.parameters(), *head.parameters()])",
                "model = nn.Sequential(backbone, head)\nnet = nn.DataParallel(model)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP227",
            "part-replaced-after-wrap",
            "error",
            "`{target} = ...` puts a new sub-module into the model after the DataParallel wrap; the file is left as "
            "it was: DDP registers the parameters it is given at the wrap, so the new part's gradients would not be "
            "averaged and its initial weights would differ between processes: replace the part before the wrap",
            doc=_doc(
                "Finds an assignment of a freshly built module (`nn.Linear(...)`, a model class) to an attribute of a wrapped model, after the wrap.",
                "DataParallel replicates the module on every forward, so a part replaced after the wrap is used. "
                "DDP hooks the parameters once, when it is built: a part added later trains on each process "
                "alone, from a different random initialisation on each, and the replicas drift apart. Where the "
                "wrap and the change sit in one block, convert moves the wrap after the change (DDP219).",
                "model = nn.DataParallel(backbone)\nif cond:\n    model.module.fc = nn.Linear(512, 10)",
                "if cond:\n    backbone.fc = nn.Linear(512, 10)\nmodel = nn.DataParallel(backbone)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP228",
            "change-after-imported-wrap",
            "error",
            "`{change}` changes the model after `{factory}` wrapped it ({site}); the file is left as it was: DDP "
            "hooks the parameters it is given at the wrap, so casts, re-initialisations, device moves and new parts "
            "must come first: make the change inside `{factory}`, before its wrap (pass what it needs as an "
            "argument), then run convert again",
            doc=_doc(
                "Finds a change to a model after a call of another project module's function that returns the model it wrapped in DataParallel.",
                "The wrap is in the factory and cannot move to the caller without changing every other caller. "
                "A cast, a re-initialisation, a move to another device or a new sub-module after the DDP wrap "
                "desynchronises the processes or breaks DDP's hooks.",
                "# common/model.py\ndef build(args):\n    return nn.DataParallel(Net())\n\n"
                "# finetune.py\nmodel = build(args)\nmodel.module.head = nn.Linear(64, 3)",
                "# common/model.py\ndef build(args, num_classes=None):\n    net = Net()\n"
                "    if num_classes is not None:\n        net.head = nn.Linear(64, num_classes)\n"
                "    return nn.DataParallel(net)\n\n# finetune.py\nmodel = build(args, num_classes=3)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP229",
            "imported-data-parallel-subclass",
            "error",
            "`{call}` wraps the model in a subclass of DataParallel defined at {site}; the file is left as it was: "
            "its overrides (a custom scatter, callbacks on each replica) have no DDP equivalent, so convert cannot "
            "tell what the DDP model must keep: wrap the model in `nn.DataParallel` itself, or write the DDP wrap "
            "by hand, then run convert again",
            doc=_doc(
                "Finds, in a project, a model wrapped in a DataParallel subclass that another module of the project defines.",
                "A subclass overrides how DataParallel scatters inputs or replicates modules (SyncBatchNorm "
                "callbacks, balanced GPU 0 loads). Those overrides act across threads of one process; under DDP "
                "there is one process per GPU, and what they did must be redone by hand, if at all.",
                "# trainer.py\nfrom sync_batchnorm import DataParallelWithCallback\n"
                "model = DataParallelWithCallback(net, device_ids=gpus)",
                "# trainer.py\nmodel = nn.DataParallel(net, device_ids=gpus)  # nn.SyncBatchNorm after the DDP conversion",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP234",
            "foreign-data-parallel-class",
            "error",
            "`{call}` wraps the model in a DataParallel-like class whose code convert does not read; the file is "
            "left as it was: what it overrides (callbacks on each replica, a custom scatter, a gathered loss) cannot "
            "be told: wrap the model in `nn.DataParallel` itself, or convert the folder that defines `{call}`, then "
            "run convert again",
            doc=_doc(
                "Finds a call of a class named after DataParallel (`DataParallelWithCallback`, `DataParallelModel`, "
                "`BalancedDataParallel`) that is neither torch's nor defined in the file or project convert reads.",
                "Such a class replaces DataParallel in the script, so the script trains on several GPUs through "
                "it. Leaving it alone would say 'nothing to convert' of a multi-GPU script; converting it blind "
                "would drop what it does across the replicas.",
                "from sync_batchnorm import DataParallelWithCallback\n"
                "model = DataParallelWithCallback(net, device_ids=gpus)",
                "model = nn.DataParallel(net, device_ids=gpus)  # nn.SyncBatchNorm after the DDP conversion",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP235",
            "parameter-free-part-after-wrap",
            "note",
            "`{target} = {value}` replaces a part of the model after the wrap with a layer that holds no parameter: "
            "DDP has nothing new to average, but the part it replaces stays hooked and gets no gradient, so "
            "find_unused_parameters=True is now passed to the wrap",
            doc=_doc(
                "Finds an assignment of a torch.nn layer without parameters (`nn.Identity()`, `nn.ReLU()`, a pooling "
                "layer) to an attribute of a wrapped model, after the wrap.",
                "A part with parameters put in after the wrap is refused (DDP227): DDP never registered them. One "
                "without parameters registers nothing, and the same initial weights are not at stake. The part it "
                "replaced stays in DDP's list, and DDP waits for its gradient in every backward.",
                "model = nn.DataParallel(model)\n...\nmodel.module.contrastive_head = nn.Identity()",
                "model = wrap_ddp(model, find_unused_parameters=True)\n...\nmodel.module.contrastive_head = nn.Identity()",
                "Safe, and a little slower: DDP walks the graph once per step.",
            ),
        ),
        Rule(
            "DDP238",
            "parameters-frozen-after-wrap",
            "note",
            "parameters of the wrapped model are frozen here (`{frozen}`), after DDP hooked them: they get no "
            "gradient, and DDP waits for every one it hooked, so find_unused_parameters=True is now passed to the wrap",
            doc=_doc(
                "Finds `requires_grad = False` (or `requires_grad_(False)`) on parameters of a wrapped model after "
                "the wrap, in a loop over its `parameters()`, on one of its parts, or in a function of this file "
                "that is handed the model.",
                "DDP hooks every parameter that requires a gradient when it is built, then waits for each one's "
                "gradient in every backward. Frozen after that, they never get one, and the second step stops "
                "with 'Expected to have finished reduction in the prior iteration'.",
                "model = nn.DataParallel(model)\nfor param in model.module.features.parameters():\n"
                "    param.requires_grad = False",
                "model = wrap_ddp(model, find_unused_parameters=True)\nfor param in model.module.features.parameters():\n"
                "    param.requires_grad = False",
                "Safe, and a little slower: DDP walks the graph once per step. Parameters unfrozen later get "
                "gradients again, and are averaged as before.",
            ),
        ),
        Rule(
            "DDP239",
            "loading-wrap-kept",
            "note",
            "`{call}` only loads a checkpoint saved from a DataParallel model (its `module.` keys) and is unwrapped "
            "once it has: it runs no batch, so it stays as it was",
            doc=_doc(
                "Finds a DataParallel wrap whose model, until it is unwrapped (`model = model.module`, or "
                "`next(model.children())`), only has state dicts loaded into it. A builder that returns the "
                "wrapper after the load, to callers that all wrap what it returns again, counts too: its return "
                "becomes `return getattr(model, \"module\", model)`, so the model is wrapped once, by DDP.",
                "Such a wrap spreads nothing over the GPUs: it lets keys saved from a DataParallel model "
                "(`module.conv1.weight`) load into the bare model. It may sit under any condition, since no process "
                "trains through it.",
                "encoder = nn.DataParallel(Encoder())\nencoder.load_state_dict(torch.load(path))\n"
                "encoder = encoder.module",
                "encoder = nn.DataParallel(Encoder())  # left as it was\nencoder.load_state_dict(torch.load(path))\n"
                "encoder = encoder.module",
                "Safe: the wrapper is gone before the model runs. On GPUs it moves the model to the first GPU "
                "until the script moves it on.",
            ),
        ),
        Rule(
            "DDP240",
            "model-wrapped-again-under-flag",
            "note",
            "the model is built and wrapped again under `{condition}`, which is not about GPUs; on the path that "
            "skips it, the model is the one wrapped at line {line}, so every process trains a wrapped model either "
            "way and the wrap converts where it is",
            doc=_doc(
                "Finds a DataParallel wrap under a condition that is not about GPUs (a command-line flag, a phase "
                "of training), of a model the same function wrapped before that condition.",
                "Every process must train a wrapped model. A flag that skips the wrap leaves the model bare, unless "
                "it was wrapped already: then the flag only decides whether the model is rebuilt, which is the same "
                "on every process.",
                "if args.cuda:\n    model = nn.DataParallel(model).cuda()\n...\nif not args.state:\n"
                "    model = Net(encoder=encoder)\n    if args.cuda:\n        model = nn.DataParallel(model).cuda()",
                "model = wrap_ddp(model)\n...\nif not args.state:\n    model = Net(encoder=encoder)\n"
                "    model = wrap_ddp(model)",
                "Safe: the model is wrapped on both paths. A model bound again between the two wraps (other than by "
                "a function of the file that returns the model it is handed) keeps DDP207.",
            ),
        ),
        Rule(
            "DDP241",
            "parameters-unfrozen-after-wrap",
            "error",
            "`{call}` makes parameters of the wrapped model trainable after the wrap: DDP synchronises only the "
            "parameters that required gradients when it was built, so these would train apart on each process; "
            "the file is left as it was: make them trainable before the wrap and keep them out of the optimizer "
            "until here (`optimizer.add_param_group(...)`), then convert again",
            doc=_doc(
                "Finds, after a DataParallel wrap, `requires_grad = True` in a loop over the wrapped model's "
                "parameters, `requires_grad_()` on it, or a call on it of a method or function of the program that "
                "does so (`model.module.features.unfix(ratio)`, which unfreezes the backbone as training goes on). "
                "Methods named `train`, `eval`, `forward` and `__init__` are not counted.",
                "DataParallel copied every parameter to its replicas at each forward, so unfreezing a layer just "
                "worked. DDP registers its gradient hooks once, for the parameters that require gradients when it "
                "is built. A parameter unfrozen later gets gradients that are never averaged: each process steps it "
                "with its own share's gradient, and the replicas drift apart without an error.",
                "model = nn.DataParallel(model)\n...\nif epoch == 10:\n    for p in model.module.backbone.parameters():\n"
                "        p.requires_grad = True",
                "for p in model.backbone.parameters():\n    p.requires_grad = True  # before the wrap: DDP hooks them\n"
                "optimizer = torch.optim.SGD(model.head.parameters(), lr=0.1)\nmodel = wrap_ddp(model)\n...\n"
                "if epoch == 10:\n    optimizer.add_param_group({\"params\": model.module.backbone.parameters()})",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP242",
            "optimizer-rebuilt-after-unread-method",
            "error",
            "`{call}` runs code convert cannot read on the wrapped model, and the optimizer is then built again from "
            "it (`{rebuild}`): if the method makes parameters trainable, DDP, which synchronises only those that "
            "required gradients when it was built, would leave them training apart on each process; the file is "
            "left as it was: make them trainable before the wrap and add them with `optimizer.add_param_group(...)` "
            "in place of building the optimizer again, then convert again",
            doc=_doc(
                "Finds, after a DataParallel wrap, an optimizer built again from the wrapped model (a name that "
                "steps or zeroes gradients, bound from a call handed the model) after a method called on the model "
                "that is neither nn.Module's nor defined by the program convert reads (a class imported from a "
                "folder put on `sys.path`, or a module outside the project).",
                "Building the optimizer again mid-training is how a script starts training what a method just made "
                "trainable (a backbone unfrozen after some epochs). DDP registers its gradient hooks once, for the "
                "parameters that require gradients when it is built; one unfrozen later gets gradients that are "
                "never averaged, and the replicas drift apart without an error. convert cannot tell whether the "
                "method unfreezes anything, and the difference changes training.",
                "model = nn.DataParallel(model)\n...\nif model.module.features.unfix(epoch / epochs):\n"
                "    optimizer = build_optimizer(model.module)",
                "model.features.unfix(1.0)  # trainable before the wrap: DDP hooks them\n"
                "optimizer = build_optimizer(model)\nmodel = wrap_ddp(model)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP243",
            "model-unwrapped-and-wrapped-again-under-flag",
            "note",
            "`{unwrap}` takes the model out of its wrapper under `{condition}`, which is not about GPUs, and the "
            "branch wraps it again: on either path every process trains a wrapped model, so the wrap converts where "
            "it is",
            doc=_doc(
                "Finds a DataParallel wrap under a condition that is not about GPUs, of a model the same branch took "
                "out of its wrapper just before (`model = model.cpu().module`), to change it and wrap it again.",
                "A wrap under a flag usually means some processes would train an unwrapped model, which DDP207 "
                "refuses. Here the model was a wrapper before the branch (`.module` would raise otherwise) and is "
                "one after it, so the flag decides only which wrapped model trains.",
                "if args.convert_from:\n    model = model.cpu().module\n    convert_model(model)\n"
                "    model = nn.DataParallel(model).cuda()",
                "if args.convert_from:\n    model = model.cpu().module\n    convert_model(model)\n"
                "    model = wrap_ddp(model)",
                "Safe: the wrap converts where it is.",
            ),
        ),
        Rule(
            "DDP244",
            "wrap-under-flag-with-an-untrained-path",
            "note",
            "the DataParallel wrap depends on `{condition}`, which is not about GPUs, and {path} trains nothing: the "
            "flag is alike on every process, and no process trains a model without the wrap, so the wrap converts "
            "where it is",
            doc=_doc(
                "Finds a DataParallel wrap under a condition that is not about GPUs or ranks (a command-line mode) "
                "where one path trains nothing: the branch with the wrap only evaluates and then leaves "
                "(`sys.exit(0)`, `return`), or the branch without it (and all after the `if`) only evaluates.",
                "A wrap under a flag usually means some processes could train an unwrapped model, which DDP207 "
                "refuses. A mode flag read from the arguments is alike on every process, and where the path "
                "without the wrap runs no backward pass, no replica can train apart.",
                "if args.test_only:\n    model = nn.DataParallel(model)\n    evaluate(model)\n    sys.exit(0)\n"
                "model = nn.DataParallel(build())\ntrain(model)",
                "if args.test_only:\n    model = wrap_ddp(model)\n    evaluate(model)\n    sys.exit(0)\n"
                "model = wrap_ddp(build())\ntrain(model)",
                "Safe: the wrap converts where it is.",
            ),
        ),
        Rule(
            "DDP245",
            "several-forwards-per-backward",
            "note",
            "`{model}` runs {count} forwards before one backward ({lines}), and its wrap needs unused parameters "
            "handled ({reason}): with find_unused_parameters=True DDP stops at the first backward where the forwards "
            "use different parameters, so static_graph=True is passed to the wrap instead; it requires the parameters "
            "each step uses to be the same at every step, and stops with 'Your training graph has changed' if not",
            doc=_doc(
                "Finds a wrapped model called two or more times before one `backward()` in a training loop (a "
                "source and a target batch, two views, a feature mode beside a classifier mode), where convert would "
                "pass `find_unused_parameters=True` to the wrap (DDP215, DDP231, DDP232, DDP233, DDP238).",
                "With `find_unused_parameters=True`, each forward makes DDP search the graph from its outputs and "
                "mark what it does not reach as unused. A parameter the last forward skips but an earlier one used "
                "is then marked ready twice, and the backward stops with 'Expected to mark a variable ready only "
                "once'. `static_graph=True` learns at the first step which parameters a step uses, and accepts "
                "several forwards per step.",
                "model = nn.DataParallel(models.create(args.arch))\n...\nsource = model(inputs)\n"
                "features = model(inputs_target, 'tgt_feat')\n(criterion(source, pids) + memory(features)).backward()",
                "model = wrap_ddp(models.create(args.arch), static_graph=True)\n...\nsource = model(inputs)\n"
                "features = model(inputs_target, 'tgt_feat')\n(criterion(source, pids) + memory(features)).backward()",
                "An edit that is right or stops: if a step uses other parameters than the first step did (a layer "
                "dropped at random), DDP raises at that step instead of training wrongly; run one forward per "
                "backward then.",
            ),
        ),
        Rule(
            "DDP236",
            "part-wrap-beside-whole-wrap",
            "note",
            "`{part}` is wrapped in DataParallel on this side of the `if`, and the whole `{model}` on the other: under "
            "DDP the whole model is wrapped on both, so this part's wrap goes and `{model}` is wrapped at the end of "
            "this side",
            doc=_doc(
                "Finds an `if`/`else` whose one side wraps a part of the model in DataParallel (`model.features`) and "
                "whose other side wraps the whole model, as the ImageNet example does for AlexNet and VGG.",
                "Both sides train on several GPUs. DataParallel around a part inside a DDP process would spread that "
                "part over every GPU again, and DataParallel refuses a module that is not on the first of them; the "
                "part outside DDP would not have its gradients averaged. PyTorch's own DDP version of the example "
                "wraps the whole model for every architecture.",
                "if arch.startswith(\"alexnet\"):\n    model.features = nn.DataParallel(model.features)\n    model.cuda()\n"
                "else:\n    model = nn.DataParallel(model).cuda()",
                "if arch.startswith(\"alexnet\"):\n    model.cuda()\n    model = wrap_ddp(model)\nelse:\n    model = wrap_ddp(model)",
                "Safe: DDP averages the gradients of every parameter, the part's included; its forward runs on this "
                "process's GPU.",
            ),
        ),
        Rule(
            "DDP237",
            "part-wrap-inside-model",
            "note",
            "`{part}` is wrapped in DataParallel inside a model class; under DDP the whole model is wrapped, so the "
            "part is left bare: its own DataParallel would spread it over every GPU again from each process",
            doc=_doc(
                "Finds `self.x = nn.DataParallel(part)` in a model class of a file that converts, where nothing reads "
                "`self.x.module`.",
                "Inside a DDP process the part's DataParallel replicates it over every visible GPU, and refuses a "
                "module that is not on the first of them: every process but the one on GPU 0 stops at the first "
                "forward. DDP already averages the part's gradients with the rest of the model's.",
                "self.encoder = nn.DataParallel(Encoder())",
                "self.encoder = Encoder()",
                "Safe: the part runs on this process's GPU, as the rest of the model does.",
            ),
        ),
        Rule(
            "DDP231",
            "parameters-frozen-in-train",
            "note",
            "`{model}`'s `train()` sets parameters' requires_grad to False (a partial BatchNorm), after DDP hooked "
            "them: DDP needs find_unused_parameters=True for that, now passed to the wrap",
            doc=_doc(
                "Finds a DataParallel wrap of a model whose class (of this file, or of another module of the "
                "project) overrides `train()` to freeze some of its parameters.",
                "DDP hooks every parameter that requires a gradient when it is built, then waits for each one's "
                "gradient in every backward. `model.train()` freezes some of them after that, so they never get "
                "one, and the second step stops with 'Expected to have finished reduction in the prior iteration'.",
                "model = nn.DataParallel(TSN(num_class, partial_bn=True))",
                "model = wrap_ddp(TSN(num_class, partial_bn=True), find_unused_parameters=True)",
                "Safe: DDP then finds each step which parameters got no gradient; it costs a walk of the graph "
                "per step.",
            ),
        ),
        Rule(
            "DDP230",
            "set-device-in-another-module",
            "error",
            "`{call}` ({site}) selects one GPU for every process this entry point starts; the file is left as it "
            "was, and its program with it: it runs after setup_distributed() has given each process its own GPU, and would move them all to "
            "that one: pass int(os.environ[\"LOCAL_RANK\"]) there, or drop the call, then run convert again",
            doc=_doc(
                "Finds `torch.cuda.set_device(x)` in a module of the project that the conversion does not change, "
                "reached from an entry point that starts the process group, where `x` is not the local rank.",
                "Option parsers often select the first GPU of `--gpu_ids`. Under DataParallel that was the "
                "output device; under DDP it is called in every process after setup_distributed(), and every "
                "process moves to that GPU: the model, DDP's buckets and NCCL then share one device.",
                "# options/base_options.py\ntorch.cuda.set_device(opt.gpu_ids[0])",
                "# options/base_options.py\ntorch.cuda.set_device(int(os.environ.get(\"LOCAL_RANK\", opt.gpu_ids[0])))",
                "No fix: the program is left as it was.",
            ),
        ),
        Rule(
            "DDP219",
            "wrap-moved-after-mutation",
            "note",
            "`{call}` changed the model's parameters after the DataParallel wrap; the wrap moved after it, "
            "so DDP is built on the final parameters: check that nothing in between needed the wrapped model",
            doc=_doc(
                "Finds a cast, a weight initialisation or a device move of a wrapped model after the wrap, "
                "where the wrap can move after it: the two are in one block, and in between the wrapper is "
                "only mutated or handed to an optimizer as its parameters.",
                "DDP hooks the parameters it is given and broadcasts rank 0's weights once, when it is built. "
                "A cast or re-initialisation afterwards leaves gradients unaveraged or replicas different, with "
                "no error. Under DataParallel the order did not matter; under DDP the wrap must come last.",
                "model = nn.DataParallel(net)\noptimizer = optim.SGD(model.parameters(), lr=0.1)\n"
                "model.module.head.apply(weights_init)\nif args.half:\n    model.half()",
                "optimizer = optim.SGD(net.parameters(), lr=0.1)\nnet.head.apply(weights_init)\n"
                "if args.half:\n    net.half()\nmodel = wrap_ddp(net)",
                "Safe: the optimizer holds the same parameter objects either way, and the mutations act on "
                "the same module; only uses of the wrapper in between are renamed to the module.",
            ),
        ),
        Rule(
            "DDP216",
            "side-effect-at-import",
            "warning",
            "this runs at import on every process, before setup_distributed() in the entry block, "
            "where no guard can tell the processes apart; left on every process: move it into the "
            "entry block, after setup_distributed()",
            doc=_doc(
                "Finds a print, log, file write or writer at module level in a script whose training "
                "starts in `if __name__ == \"__main__\":`.",
                "`is_main_process()` is true while no process group exists, so a guard here would "
                "not stop any process: every rank prints, and `os.makedirs` without `exist_ok` races.",
                "print(\"config:\", CONFIG)\n\nif __name__ == \"__main__\":\n    main()",
                "if __name__ == \"__main__\":\n    setup_distributed()\n    if is_main_process():\n        print(\"config:\", CONFIG)\n    main()",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP301",
            "sampler-sometimes-none",
            "error",
            "`{argument}={sampler}` is None on some paths and a sampler on others; convert cannot tell which "
            "one this run takes and cannot split the training data, so the file is left as it was: build the "
            "sampler on every path (`RandomSampler(dataset)` where it was None and the loader shuffled) and "
            "convert again",
            doc=_doc(
                "Finds a training DataLoader whose sampler is bound to None on one path and to a sampler on another.",
                "Convert splits a sampler where it is built, and replaces a sampler that is always None with a "
                "DistributedSampler. A name that is sometimes one and sometimes the other cannot be split either "
                "way without knowing the path, and an unsplit loader trains every process on all the data.",
                "sampler = None\nif args.balanced:\n    sampler = WeightedRandomSampler(weights, len(weights))\n"
                "loader = DataLoader(ds, batch_size=32, shuffle=sampler is None, sampler=sampler)",
                "sampler = RandomSampler(ds)\nif args.balanced:\n    sampler = WeightedRandomSampler(weights, len(weights))\n"
                "loader = DataLoader(ds, batch_size=32, sampler=sampler)",
                "No fix: the whole file is left as it was.",
            ),
        ),
        Rule(
            "DDP302",
            "iterable-dataset",
            "error",
            "training DataLoader over an IterableDataset, which takes no sampler, so convert cannot split it and "
            "every process would train on the same stream; the file is left as it was: make the dataset's "
            "`__iter__` yield only this process's share (every `dist.get_world_size()`-th item, from "
            "`dist.get_rank()`), then convert again",
            doc=_doc(
                "Finds a training DataLoader over an `IterableDataset` of this file whose `__iter__` does not "
                "split the stream by process.",
                "An iterable dataset takes no sampler; it must itself yield a different share on each process, "
                "or every process trains on the same stream and DDP repeats the work. A dataset whose `__iter__` "
                "reads the rank and the world size splits itself, and convert leaves its loader as it is.",
                "class TokenStream(IterableDataset):\n    def __iter__(self):\n        yield from read_tokens(self.path)\n\n"
                "loader = DataLoader(TokenStream(path), batch_size=32)",
                "class TokenStream(IterableDataset):\n    def __iter__(self):\n"
                "        rank, world_size = dist.get_rank(), dist.get_world_size()\n"
                "        for index, item in enumerate(read_tokens(self.path)):\n"
                "            if index % world_size == rank:\n                yield item",
                "No fix: the file is left as it was. Every process should yield equally many batches, or "
                "the ones with more wait at the last step for the others.",
            ),
        ),
        Rule(
            "DDP303",
            "loader-arguments",
            "warning",
            "DataLoader with {count} positional arguments; left unchanged: pass "
            "arguments after `shuffle` by keyword",
            doc=_doc(
                "Finds a DataLoader called with more positional arguments than `dataset, batch_size, shuffle`.",
                "The fourth positional argument is the sampler; convert cannot add one by keyword next to it without reading which parameter each value binds.",
                "DataLoader(ds, 32, True, None, None, 4)",
                "DataLoader(ds, batch_size=32, shuffle=True, num_workers=4)",
                "No fix: the loader is left as it was.",
            ),
        ),
        Rule(
            "DDP304",
            "dataset-expression",
            "error",
            "the training dataset is built inside the DataLoader call of a statement that is not an assignment, "
            "so convert cannot give the same dataset to a DistributedSampler; the file is left as it was: bind "
            "the dataset to a name first, then convert again",
            doc=_doc(
                "Finds a training DataLoader whose dataset is built inside the call, in a statement other than an assignment.",
                "The DistributedSampler needs the same dataset object as the loader, so the dataset must have a "
                "name convert can bind before the statement. Left unsplit, every process would train on all the data.",
                "for x, y in DataLoader(MNIST(root), batch_size=64, shuffle=True):",
                "dataset = MNIST(root)\nfor x, y in DataLoader(dataset, batch_size=64, shuffle=True):",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP306",
            "no-data-loader",
            "warning",
            "no DataLoader in this file: give the training loader a DistributedSampler "
            "where it is built, and call set_epoch every epoch",
            doc=_doc(
                "Finds a file that wraps a model but builds no DataLoader and has no training loop of its own.",
                "The training data is built somewhere else, where convert cannot add the DistributedSampler that splits it between processes.",
                "model = nn.DataParallel(build_model())\ntrainer.fit(model)",
                "# where the loader is built:\nDataLoader(ds, batch_size=bs // dist.get_world_size(), sampler=DistributedSampler(ds))",
                "No fix: the data is left as it was.",
            ),
        ),
        Rule(
            "DDP307",
            "global-batch-kept",
            "note",
            "global batch `{batch}` -> `{batch}` (kept): each of the world_size processes loads "
            "`{batch} // world_size`; {divisibility}",
            doc=_doc(
                "Notes that a training loader's batch is divided by the world size, which keeps the global batch (`--batch global`, the default). The message states the global batch before and after.",
                "DataParallel's `batch_size` was the global batch split over GPUs. Dividing it keeps the learning rate right; a batch that does not divide evenly changes it slightly.",
                "DataLoader(ds, batch_size=128, shuffle=True)",
                "DataLoader(ds, batch_size=128 // dist.get_world_size(), sampler=DistributedSampler(ds, shuffle=True))",
                "Safe: the global batch is the same wherever it divides by the process count.",
            ),
        ),
        Rule(
            "DDP308",
            "per-process-batch-kept",
            "note",
            "global batch `{batch}` -> `{batch} * world_size`: each process loads `{batch}` ({reason}); "
            "{learning_rate}",
            doc=_doc(
                "Notes that a training loader keeps its batch per process: under `--batch per-process`, for a batch of 1, "
                "which cannot be divided, or for a batch value that also sizes a tensor per step (`DDP312`). The message "
                "states the global batch before and after, and what happens to the learning rate.",
                "Each process loads the full batch, so the effective batch is the world size times larger; a learning rate "
                "tuned for the old batch may be too small. Under `--batch per-process` convert scales each optimizer's "
                "learning rate by the world size (`DDP330`) and says where it could not (`DDP331`).",
                "DataLoader(ds, batch_size=32, shuffle=True)  # 4 processes: 128 per step",
                "optimizer = SGD(model.parameters(), lr=base_lr * dist.get_world_size())",
                "Safe: nothing is divided; the report states the new effective batch.",
            ),
        ),
        Rule(
            "DDP309",
            "global-batch-not-divisible",
            "warning",
            "global batch {size} does not divide by {misses} processes: each process loads "
            "`{size} // world_size` and the global batch shrinks there; pick a multiple of the process count",
            doc=_doc(
                "Finds a literal batch that some common process counts do not divide.",
                "Each process loads `batch // world_size`; the remainder is lost, so the global batch, and the gradient scale with it, shrink on those counts.",
                "DataLoader(ds, batch_size=100, shuffle=True)  # 8 processes: 12 each, 96 in all",
                "DataLoader(ds, batch_size=96, shuffle=True)",
                "Safe: the batch is divided; the report names the counts where it shrinks.",
            ),
        ),
        Rule(
            "DDP310",
            "summed-loss-scaled",
            "note",
            "`{loss}` sums over the batch and DDP averages gradients over processes: backward "
            "now runs on `{loss} * world_size`, so the gradient is the whole batch's sum again",
            doc=_doc(
                'Notes that a loss that sums over the batch (`reduction="sum"`) is multiplied by the world size before backward.',
                "DDP averages gradients over processes. For a summed loss the average of per-process sums is 1/world_size of the whole batch's sum that DataParallel computed.",
                'loss = F.mse_loss(out, y, reduction="sum")\nloss.backward()',
                "(loss * dist.get_world_size()).backward()",
                "Safe: the logged loss is unchanged; only backward is scaled.",
            ),
        ),
        Rule(
            "DDP311",
            "summed-loss-class-unclear",
            "warning",
            "criterion class `{loss}` sums with reduction=\"sum\" and also divides, so convert cannot "
            "tell whether its loss sums over the batch; left unscaled: if it does, back-propagate "
            "`loss * dist.get_world_size()`",
            doc=_doc(
                "Finds a loss class of the script that uses `reduction=\"sum\"` and also divides.",
                "DDP averages gradients over processes. A loss that sums over the batch must be "
                "multiplied by the world size to keep DataParallel's gradient; a mean must not be.",
                "class Loss(nn.Module):\n    def forward(self, x, y):\n        return F.mse_loss(x, y, reduction=\"sum\") / self.norm",
                "(loss * dist.get_world_size()).backward()  # when the loss is a sum over the batch",
                "No fix: the loss is left as it was.",
            ),
        ),
        Rule(
            "DDP312",
            "batch-value-sizes-a-step",
            "warning",
            "`{batch}` also sizes this, per step; the loader keeps `{batch}` per process, so the "
            "effective batch becomes world_size times `{batch}`: scale the learning rate, or divide "
            "the batch where it is defined, for both uses",
            doc=_doc(
                "Finds another use of a DataLoader's batch value that sizes a tensor or an object for one "
                "step: a class of the script, a tensor factory, a `view`/`reshape`/`expand`.",
                "Keeping the global batch divides the loader's batch by the world size. A criterion or "
                "buffer sized by the old value no longer matches the batches, and crashes or computes "
                "a wrong loss. Keeping the per-process batch is safe, and changes the effective batch.",
                "criterion = YoloLoss(batch=cfg.batch)\nloader = DataLoader(ds, batch_size=cfg.batch, shuffle=True)",
                "cfg.batch //= dist.get_world_size()  # once, before both uses",
                "Safe: nothing is divided; the report states the new effective batch.",
            ),
        ),
        Rule(
            "DDP313",
            "evaluation-with-gradients",
            "note",
            "`{loader}` is evaluated with gradients enabled through the DDP model, whose forward then "
            "syncs buffers, a collective; shards of unequal length would hang, so every process "
            "evaluates the whole set: run the loop under torch.no_grad() to let convert shard it",
            doc=_doc(
                "Finds an evaluation loop that calls the wrapped model outside `torch.no_grad()`.",
                "With gradients enabled, each DDP forward broadcasts buffers from rank 0. If the "
                "evaluation shards differ in length by one batch, one process waits forever.",
                "model.eval()\nfor x, y in val_loader:\n    correct += (model(x).argmax(1) == y).sum()",
                "model.eval()\nwith torch.no_grad():\n    for x, y in val_loader:\n        correct += (model(x).argmax(1) == y).sum()",
                "Safe: the loader is left whole and its metrics are not gathered; evaluation is not faster.",
            ),
        ),
        Rule(
            "DDP314",
            "loader-arguments-unpacked",
            "error",
            "training DataLoader arguments come from `{arguments}`, which convert cannot see into, so it cannot "
            "split the data and every process would train on all of it; the file is left as it was: pass "
            "each argument by keyword, without `*` or `**` (`batch_size=64, shuffle=True, num_workers=2`), "
            "then convert again",
            doc=_doc(
                "Finds a training DataLoader whose arguments are unpacked from a dict or a list. A `**kwargs` "
                "beside an explicit `batch_size=` and `shuffle=True` is split all the same: it cannot hold the "
                "batch or shuffle (Python raises \"got multiple values\") nor a sampler (DataLoader raises "
                "\"sampler option is mutually exclusive with shuffle\"), unless this file puts a `sampler` key in it.",
                "Whether the dict holds `shuffle`, `sampler` or `batch_size` is only known at run time, so "
                "convert cannot add a DistributedSampler safely. Unsplit, every process trains on all the data "
                "and the effective batch grows with the world size. An evaluation loader with unpacked "
                "arguments is only kept whole on every process (DDP316).",
                "train_kwargs = {\"batch_size\": 64, \"shuffle\": True, \"num_workers\": 2}\n"
                "loader = DataLoader(ds, **train_kwargs)",
                "loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=2)",
                "No fix: the file is left as it was.",
            ),
        ),
        Rule(
            "DDP315",
            "set-epoch-on-restart",
            "note",
            "`{loader}` starts a new pass here, in a script that counts iterations, not epochs: each new "
            "pass now calls `{loader}.sampler.set_epoch({loader}.sampler.epoch + 1)` first, so every pass "
            "is shuffled anew",
            doc=_doc(
                "Finds an `except StopIteration:` handler, or a `while` loop around a `for` over a training "
                "loader, that starts a new pass over the loader.",
                "A DistributedSampler shuffles by its epoch; a script that counts iterations, not epochs, "
                "has no epoch loop to call `set_epoch` in, and every pass would repeat one order.",
                "try:\n    batch = next(it)\nexcept StopIteration:\n    it = iter(loader)\n    batch = next(it)",
                "except StopIteration:\n    loader.sampler.set_epoch(loader.sampler.epoch + 1)\n    it = iter(loader)",
                "Safe: the sampler counts its own passes.",
            ),
        ),
        Rule(
            "DDP340",
            "set-epoch-advances-across-calls",
            "note",
            "this epoch loop starts over each time `{function}` runs, and it runs more than once: `{loader}` now calls "
            "`{loader}.sampler.set_epoch({loader}.sampler.epoch + 1)` at each epoch, so no pass repeats an earlier order",
            doc=_doc(
                "Finds an epoch loop over a training loader in a function the script calls more than once (two "
                "training phases, a loop over stages).",
                "`set_epoch(epoch)` would give the second call's first epoch the first call's order, and so on: "
                "the processes would see the same shuffles again, where DataParallel drew a new order every pass.",
                "def train(model, loader, epochs):\n    for epoch in range(epochs):\n        ...\n"
                "train(encoder, loader, 10)\ntrain(model, loader, 20)",
                "    for epoch in range(epochs):\n        loader.sampler.set_epoch(loader.sampler.epoch + 1)",
                "Safe: the sampler counts its own passes.",
            ),
        ),
        Rule(
            "DDP341",
            "batch-sized-by-caller",
            "note",
            "`{batch}` is handed in by {site}, which also sizes something per step with it (a GAN's noise, a "
            "buffer): this loader keeps `{batch}` per process so the two still match, and the effective batch "
            "becomes world_size times `{batch}`: scale the learning rate, or pass a smaller batch",
            doc=_doc(
                "Finds a training DataLoader whose batch size is a parameter of its function, where a caller in "
                "another module of the project passes a value it also sizes a tensor with (`torch.randn(batch_size, "
                "latent)`, `.view(batch_size, -1)`).",
                "Dividing the batch in the loader alone would leave the caller's tensors at the global size: the "
                "fake batch would no longer match the real one, and the step fails on a shape mismatch.",
                "# data.py\ndef get_loader(data, batch_size):\n    return DataLoader(data, batch_size=batch_size, shuffle=True)\n"
                "# gan.py\nloader = get_loader(data, batch_size)\nnoise = torch.randn(batch_size, latent)",
                "# data.py: the batch stays per process\n"
                "    return DataLoader(data, batch_size=batch_size, sampler=DistributedSampler(data, shuffle=True))",
                "Safe: every tensor keeps the size the script gave it; only the effective batch grows.",
            ),
        ),
        Rule(
            "DDP342",
            "batch-kept-for-pair-loss",
            "warning",
            "the loss `{loss}` ({site}) pairs the samples of a batch with each other (a similarity or distance "
            "matrix, hard-pair mining), and under DataParallel it paired the whole batch: this loader keeps `{batch}` "
            "per process so each process's loss pairs as many samples, and the effective batch becomes world_size "
            "times `{batch}`: scale the learning rate, or pass a smaller batch",
            doc=_doc(
                "Finds a loss, in the script or in another module of its program, whose definition is named as a loss "
                "(or sits in a module named so) and that builds a matrix of the batch against itself: "
                "`inputs @ inputs.t()`, `torch.cdist(x, x)`, `targets.eq(targets.t())`, directly or through a function "
                "of its module handed its inputs. A definition only re-exported, never used, does not count.",
                "DataParallel computed the loss on the outputs gathered from every GPU, so a metric-learning or "
                "contrastive loss mined its pairs and negatives from the whole batch. Dividing the batch would give "
                "each process's loss 1/world_size of the samples and (1/world_size)^2 of the pairs: the hardest "
                "pairs, the margins and the objective change. Keeping the batch per process keeps what each loss "
                "sees, and changes only how many samples one step averages.",
                "sim_mat = torch.matmul(inputs, inputs.t())  # losses/contrastive.py\n"
                "loader = DataLoader(ds, batch_size=args.batch_size, sampler=IdentitySampler(ds))",
                "# keep the global batch and gather the embeddings of every process, gradients included:\n"
                "import torch.distributed.nn.functional as dist_nn\n"
                "inputs = torch.cat(dist_nn.all_gather(inputs)); targets = torch.cat(dist_nn.all_gather(targets))",
                "Safe: every loss sees the number of samples it saw; the report states the new effective batch.",
            ),
        ),
        Rule(
            "DDP316",
            "evaluation-kept-whole",
            "note",
            "`{loader}` is evaluated whole on every process, correct but not faster: {why}; to shard it, "
            "keep results as sums and counts, or reduce them over processes after the loop",
            doc=_doc(
                "Finds an evaluation loop whose results convert cannot gather exactly from shards: a list "
                "averaged later, a metric object of another file, a value kept from the last batch, a loader "
                "handed to code convert cannot read.",
                "Sharding evaluation is only right when every number computed from the loop is reduced over "
                "processes. One that is not reports one process's share as the whole set's, and a "
                "best-checkpoint or learning-rate decision then differs between processes.",
                "losses = []\nfor x, y in val_loader:\n    losses.append(criterion(model(x), y).item())\nval_loss = np.mean(losses)",
                "total, count = 0.0, 0\nfor x, y in val_loader:\n    total += criterion(model(x), y).item() * len(y)\n    count += len(y)",
                "Safe: the loader is left whole and its metrics are not gathered; evaluation is not faster.",
            ),
        ),
        Rule(
            "DDP317",
            "training-data-not-split",
            "error",
            "training batches come from `{source}`, not from a DataLoader of this file, so convert cannot split "
            "them and every process would train on the same data; the file is left as it was: build the "
            "training DataLoader in this file (from its dataset, with `batch_size=` and `shuffle=`) and iterate "
            "it here, then convert again",
            doc=_doc(
                "Finds a training loop (one that calls `backward()`, or a function or an object's method that "
                "runs one backward each time it is called, such as `train_step(model, x, y)`) whose batches come "
                "from something other than a DataLoader of the same file: a `get_batch()` method, an iterator "
                "over a token stream, a generator over arrays, a loader built by a helper in another file. The "
                "finding is at the line that produces the batches.",
                "DDP averages the gradients of the processes. If every process sees the same batch, the "
                "average equals one process's gradient: the run is no faster than one GPU, and the effective "
                "batch is not what the learning rate was tuned for. Converting the rest of the script would "
                "end in a run that looks distributed and is not, so nothing is converted. dp2ddp converts one "
                "file at a time: a loader built in another module of the project cannot be split from here.",
                "from data import build_loader\n\nloader = build_loader(args)\nfor epoch in range(args.epochs):\n"
                "    for data, target in loader:\n        model(data, target).backward()",
                "from data import build_dataset\n\ndataset = build_dataset(args)\n"
                "loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)\n"
                "for epoch in range(args.epochs):\n    for data, target in loader:\n        model(data, target).backward()",
                "No fix: the file is left as it was. Once the loader is built here, convert gives it a "
                "DistributedSampler, divides the batch by the world size and calls `set_epoch`.",
            ),
        ),
        Rule(
            "DDP318",
            "scaled-by-gpu-count",
            "warning",
            "`{target}` is scaled by the GPU count `{count}`, a DataParallel habit that DDP changes: {advice}",
            doc=_doc(
                "Finds a batch size or a worker count multiplied by the number of GPUs.",
                "DataParallel runs one process for all GPUs, so its batch and its loader workers were scaled by "
                "the GPU count. Under DDP every process has its own loader: the worker count multiplies by the "
                "number of processes, and a GPU count read on one node is not the world size on several.",
                "args.batch_size *= torch.cuda.device_count()\nargs.workers *= torch.cuda.device_count()",
                "args.batch_size *= dist.get_world_size()  # the global batch, divided again per process",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP321",
            "sampler-sharded",
            "note",
            "`{sampler}` is split across processes by ShardedSampler: every process draws the same sequence "
            "(seeded with seed + epoch), and {split}",
            doc=_doc(
                "Finds a training loader's own sampler or batch sampler (a SubsetRandomSampler, a "
                "WeightedRandomSampler, a class of the script's, one imported from elsewhere) and wraps it.",
                "A DistributedSampler only replaces plain shuffling. Any other sampler must still yield one "
                "process's share: unsplit, every process trains on all the data, and the epoch does W times the work.",
                "loader = DataLoader(ds, batch_size=64, sampler=WeightedRandomSampler(weights, len(weights)))",
                "loader = DataLoader(ds, batch_size=64 // dist.get_world_size(),\n"
                "                    sampler=ShardedSampler(WeightedRandomSampler(weights, len(weights))))",
                "Safe: each pass, ShardedSampler seeds the random generators the sampler can draw from (torch, "
                "Python's `random`, NumPy, the sampler's own generator) identically on every process, keeps items "
                "rank, rank + W, ... and pads the sequence so every process gets as many. Together the processes "
                "draw what the original drew. A sampler that draws from some other source of randomness (its own "
                "`numpy.random.Generator`, a clock) would differ between processes: seed it from `set_epoch`.",
            ),
        ),
        Rule(
            "DDP322",
            "sampler-advances-itself",
            "note",
            "`{loader}` gets a sampler that reshuffles on every pass by itself, because {why}: a "
            "DistributedSampler without `set_epoch` would repeat one order",
            doc=_doc(
                "Finds a shuffled training loader with no epoch loop to call `set_epoch` from: batches fetched with "
                "`next(iter(loader))` each step, a loader in a helper with its own `get_batch()`, a loop convert cannot see.",
                "A DistributedSampler shuffles by the epoch it is given. Without `set_epoch` every pass repeats "
                "one order, and `next(iter(loader))` returns the same batch at every step.",
                "for step in range(steps):\n    x, y = next(iter(loader))",
                "loader = DataLoader(ds, batch_size=32 // dist.get_world_size(), sampler=ShardedSampler(RandomSampler(ds)))",
                "Safe: ShardedSampler counts its own passes, so every `iter()` starts a new order, the same on "
                "every process.",
            ),
        ),
        Rule(
            "DDP323",
            "sampler-splits-itself",
            "warning",
            "`{sampler}` is told the process's rank or is distributed by name, so it is taken to yield this "
            "process's share already and is left as it was: check that it does",
            doc=_doc(
                "Finds a training loader's sampler that takes `rank`, `num_replicas` or `world_size`, or whose name says it is distributed.",
                "Such a sampler splits the data itself; splitting it again would leave each process a W-th of its share.",
                "sampler = BalancedDistributedSampler(ds, num_replicas=world_size, rank=rank)",
                "# nothing to change if it yields every world_size-th item from rank; otherwise wrap the plain\n"
                "# sampler and let convert split it",
                "No fix: the sampler is left as it was.",
            ),
        ),
        Rule(
            "DDP327",
            "loader-split-where-used",
            "note",
            "`{loader}` takes this process's share of the loader `{builder}` returns, here where it trains: "
            "`{builder}` also builds the evaluation loaders of line {lines}, which stay whole",
            doc=_doc(
                "Finds a function that builds and returns a DataLoader, called both for training (its loader "
                "feeds a `backward()`) and for evaluation (named `val`, `test` or `pred`, or asked for with "
                "such a string, and never trained on). In a project, a function of another module counts when it "
                "tells the splits apart by such a string (`if flag == 'test':`) or a caller asks it for one.",
                "Split inside the function, every loader it builds would be: each process would validate on "
                "its own shard and stop early on its own number, and a prediction loader's batch of 1 would "
                "become `1 // world_size`.",
                "train_data, train_loader = self._get_data(flag='train')\n"
                "vali_data, vali_loader = self._get_data(flag='val')",
                "train_data, train_loader = self._get_data(flag='train')\n"
                "train_loader = split_loader(train_loader)\n"
                "vali_data, vali_loader = self._get_data(flag='val')",
                "Safe: `split_loader` builds the loader again over the same dataset with the same arguments, its "
                "sampler split by ShardedSampler (one order drawn alike on every process, a new one each pass) "
                "and each process's part of every batch, so the global batch is the loader's. It stops with a "
                "TypeError on anything but a DataLoader over a map-style dataset.",
            ),
        ),
        Rule(
            "DDP337",
            "per-process-training-state",
            "warning",
            "`{table}` is updated here from this process's samples and read into the loss: each process now keeps "
            "its own, where DataParallel kept one updated from the whole batch; average the update over processes "
            "(gather the indices and values with `dist.all_gather`) to keep one",
            doc=_doc(
                "Finds a tensor bound outside a training loop, updated inside it at indices read from the batch "
                "(`feature_center[y] += ...`, `memory[index] = features`), whose values reach the loss.",
                "Under DDP each process sees its share of the batch, so each updates the table from different "
                "samples. The tables drift apart, and each process computes its loss against its own.",
                "feature_center[y] += beta * (features.detach() - feature_center[y])",
                "ys = [torch.empty_like(y) for _ in range(dist.get_world_size())]\ndist.all_gather(ys, y)\n"
                "# ... gather the features the same way, then update the table from all of them",
                "No fix: the update is left as it was, and the conversion goes on.",
            ),
        ),
        Rule(
            "DDP338",
            "augmentations-drawn-per-process",
            "note",
            "this training loader may draw its random augmentations in the main process (no `num_workers`, a "
            "number that may be 0, or a `**` dict that may hold one), from the "
            "random state every process shares: its dataset now draws them from a stream of each process's own "
            "(`DrawnPerProcess`), so the processes do not draw the same crops and flips for different samples",
            doc=_doc(
                "Finds a split training loader without worker processes in a program that draws random augmentations, "
                "in its own file or another module of the project: a torchvision `Random*` transform, or a draw from "
                "`random`, `numpy.random` or torch in a dataset class's `__getitem__` or the methods it calls.",
                "Every process starts from rank 0's random state, so that a split drawn at start-up is one split. "
                "The main process would then draw the same sequence of augmentations on every process, where "
                "DataParallel drew one sequence for the whole batch.",
                "loader = DataLoader(train_set, batch_size=64, shuffle=True)",
                "loader = DataLoader(DrawnPerProcess(train_set, dist.get_rank()), batch_size=64 // dist.get_world_size(),\n"
                "                    sampler=DistributedSampler(train_set, shuffle=True))",
                "Safe: each item is drawn from Python's, NumPy's and torch's generators seeded by the rank, and the "
                "shared state is put back after it, so everything else the script draws stays alike on every "
                "process. The augmentations differ from the DataParallel run's draw for draw, as they would with "
                "loader workers.",
            ),
        ),
        Rule(
            "DDP339",
            "noise-drawn-per-process",
            "note",
            "this line draws noise for the batch in a training step, from the random state every process shares: "
            "it now draws from a stream of each process's own (`per_process_random()`), so the processes do not "
            "feed the same noise to different samples",
            doc=_doc(
                "Finds a line in a training step (the loop around a `backward()`, or a step function) that draws "
                "a tensor sized by the batch: `torch.randn(batch_size, nz)`, `torch.rand(x.size(0), 1)`, "
                "`torch.randn_like(x)`, `zdist.sample((batch_size,))`, `np.random.normal(0, 1, (imgs.shape[0], d))`.",
                "Every process starts from rank 0's random state, so that a split drawn at start-up is one split. "
                "Each would then draw the same rows for its own samples: a GAN's generator sees the same noise "
                "on every process, where DataParallel drew it once for the whole batch. Draws without a batch "
                "dimension (a mixup weight, a sequence length) were one draw for the whole batch under "
                "DataParallel too; they stay alike, as does noise added to parameters.",
                "z = torch.randn(images.size(0), nz, device=device)",
                "with per_process_random():\n    z = torch.randn(images.size(0), nz, device=device)",
                "Safe: inside the block Python's, NumPy's and torch's generators continue a stream seeded by the "
                "rank, and the shared state is put back after it, so everything else the script draws stays alike "
                "on every process. The noise differs from the DataParallel run's draw for draw.",
            ),
        ),
        Rule(
            "DDP319",
            "weighted-loss-per-process",
            "warning",
            WEIGHTED_LOSS_MESSAGE,
            doc=_doc(
                "Finds a cross-entropy or NLL loss with class weights and `reduction=\"mean\"` (given or by default) "
                "whose value reaches `backward()`.",
                WEIGHTED_LOSS_WHY,
                WEIGHTED_LOSS_EXAMPLE,
                WEIGHTED_LOSS_INSTEAD,
                "No fix: the loss is left as it was, and the conversion goes on.",
            ),
        ),
        Rule(
            "DDP320",
            "in-batch-negatives-per-process",
            "warning",
            IN_BATCH_NEGATIVES_MESSAGE,
            doc=_doc(
                "Finds a contrastive cross-entropy whose value reaches `backward()`: labels `torch.arange(n)` over a "
                "similarity matrix of two batches of embeddings (`a @ b.T`, `torch.mm`, `torch.einsum`, scaled by a "
                "temperature or not), as SimCLR- and CLIP-style training writes it.",
                IN_BATCH_NEGATIVES_WHY,
                IN_BATCH_NEGATIVES_EXAMPLE,
                IN_BATCH_NEGATIVES_INSTEAD,
                "No fix: the loss is left as it was, and the conversion goes on.",
            ),
        ),
        Rule(
            "DDP330",
            "learning-rate-scaled",
            "note",
            "learning rate `{lr}` -> `{scaled}`: each process keeps the batch (`--batch per-process`), so one "
            "step averages world_size times the samples, and the linear scaling rule scales the rate with it",
            doc=_doc(
                "Notes that an optimizer's learning rate is multiplied by the world size under `--batch per-process`.",
                "Each process loads DataParallel's whole batch, so the gradient DDP averages comes from world_size "
                "times the samples and the run takes world_size times fewer steps. Kept as it was, the rate tuned "
                "for the smaller batch trains more slowly; the linear scaling rule multiplies it by the batch's growth. "
                "Very large rates may need a warm-up.",
                "optimizer = optim.SGD(model.parameters(), lr=args.lr)",
                "optimizer = optim.SGD(model.parameters(), lr=args.lr * dist.get_world_size())",
                "Safe where the rate was tuned for the DataParallel batch; review it for schedules with a warm-up of their own.",
            ),
        ),
        Rule(
            "DDP331",
            "learning-rate-not-scaled",
            "warning",
            "this optimizer's learning rate is not scaled, though each process keeps the batch (`--batch per-process`) "
            "and one step sees world_size times the samples: {why}; {advice}",
            doc=_doc(
                "Finds a `torch.optim` optimizer whose learning rate convert cannot scale under `--batch per-process`: "
                "none is given, parameter groups set their own, the arguments are unpacked, or the optimizer is built "
                "before the process group exists.",
                "The global batch grows by the world size. A rate left as it was trains as if the batch had not grown: "
                "more slowly, and differently from the DataParallel run.",
                "optimizer = optim.SGD([{\"params\": head, \"lr\": 0.1}, {\"params\": body}], lr=0.01)",
                "world_size = dist.get_world_size()\n"
                "optimizer = optim.SGD([{\"params\": head, \"lr\": 0.1 * world_size}, {\"params\": body}], lr=0.01 * world_size)",
                "No fix: the optimizer is left as it was.",
            ),
        ),
        Rule(
            "DDP332",
            "cyclic-learning-rate-not-scaled",
            "warning",
            "`{scheduler}` sets the learning rate itself from `{argument}={value}`, which the optimizer's scaled rate "
            "does not reach: write `{argument}={value} * dist.get_world_size()` to follow the linear scaling rule",
            doc=_doc(
                "Finds a `OneCycleLR` or `CyclicLR` scheduler in a script whose optimizers convert scaled under "
                "`--batch per-process`.",
                "These schedulers overwrite the optimizer's rate on every step from their own `max_lr` and `base_lr`, "
                "so the scaled `lr=` has no effect and the run trains with the rates of the smaller batch.",
                "scheduler = OneCycleLR(optimizer, max_lr=0.1, total_steps=steps)",
                "scheduler = OneCycleLR(optimizer, max_lr=0.1 * dist.get_world_size(), total_steps=steps)",
                "No fix: the scheduler is left as it was.",
            ),
        ),
        Rule(
            "DDP333",
            "steps-per-epoch-scaled",
            "note",
            "steps per epoch counted in global batches: `{before}` -> `{after}`, since each process keeps the batch "
            "({kept}) and one step takes world_size of them",
            doc=_doc(
                "Notes that a count of steps per epoch, the dataset's length (or a sample count the loader's dataset "
                "or sampler is built with) divided by the training loader's batch, is divided by the world size as "
                "well wherever each process keeps that batch: under `--batch per-process`, and for a loader that "
                "keeps it all the same (a batch of 1, a batch value that also sizes a step: `DDP308`).",
                "Each process loads its own batch of the sampler's share, so an epoch has world_size times fewer steps. "
                "A schedule built on the old count (a total step count, a warm-up, a cosine length) would run "
                "world_size times too long and never reach its end, and a loop that draws that many batches with "
                "`next()` runs past the end of the loader on every process.",
                "iters_per_epoch = len(train_set) // args.batch_size",
                "iters_per_epoch = len(train_set) // (args.batch_size * dist.get_world_size())",
                "Safe: `len(train_loader)` counts the same steps; it is left as it was wherever the script uses it.",
            ),
        ),
        Rule(
            "DDP334",
            "steps-per-epoch-unclear",
            "warning",
            "`{expression}` divides by the training loader's batch `{batch}`, {why}; each process keeps that batch "
            "({kept}), so one step takes world_size batches: if it counts steps, divide by "
            "`({batch} * dist.get_world_size())`, or use `len(loader)`",
            doc=_doc(
                "Finds a count divided by the training loader's batch, where each process keeps that batch "
                "(`--batch per-process`, or `DDP308` under `--batch global`), and the count is not provably the "
                "number of the loader's samples, or the line runs before the process group exists.",
                "Steps per epoch counted with the per-process batch are world_size times too many: a schedule built on "
                "them never reaches its end.",
                "iters_per_epoch = args.num_train // args.batch_size",
                "iters_per_epoch = len(train_loader)",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP335",
            "gpu-count-scaling-replaced",
            "note",
            "`{target}` was scaled by the GPU count `{count}`, a DataParallel habit: {what}",
            doc=_doc(
                "Notes that a batch size scaled by the GPU count now scales by the world size, and that a worker count "
                "scaled by it drops the factor. Only where the value provably reaches a DataLoader, the count is "
                "`torch.cuda.device_count()` (directly or through a name bound to it), and for a batch, where the line "
                "runs after the process group is set up; `DDP318` reports the others.",
                "DataParallel runs one process for all GPUs: a per-GPU batch times the GPU count was its global batch, "
                "and one loader needed workers for all of them. Under DDP the world size is the number of processes, "
                "which is the GPU count on one node and stays right on several, and each process has its own loader.",
                "args.batch_size *= torch.cuda.device_count()\nnum_workers = 4 * torch.cuda.device_count()",
                "args.batch_size *= dist.get_world_size()\nnum_workers = 4",
                "Safe: on one node the batch is the same number; each process starts the workers one GPU had.",
            ),
        ),
        Rule(
            "DDP336",
            "batch-default-below-world-size",
            "warning",
            "`{batch}` defaults to {default}, fewer than {counts} processes, where `{batch} // world_size` would be 0 "
            "and DataLoader would refuse it on every process: each process loads `max(1, {batch} // world_size)`, so "
            "there the global batch grows to world_size; pass a batch that is a multiple of the number of processes",
            doc=_doc(
                "Finds a training loader whose batch is a command-line option the script declares with a small integer "
                "default (`parser.add_argument(\"--batch_size\", type=int, default=1)`), smaller than some common "
                "process counts, and floors each process's share at 1.",
                "Keeping the global batch divides it by the world size. A literal batch of 1 stays per process "
                "(`DDP308`), but an option may be given any value: a large one is divided as usual, and its default, "
                "divided by more processes than it holds, would be 0, which DataLoader refuses, so every process "
                "would crash with the script's default options. Floored at 1, each process loads one sample there and "
                "a step sees world_size samples, more than the default asked for.",
                "parser.add_argument(\"--batch_size\", type=int, default=1)\n"
                "loader = DataLoader(ds, batch_size=opt.batch_size, shuffle=True)",
                "loader = DataLoader(ds, batch_size=max(1, opt.batch_size // dist.get_world_size()), "
                "sampler=DistributedSampler(ds, shuffle=True))",
                "Safe: nothing crashes; where the option is smaller than the number of processes the global batch grows "
                "to the world size, and the learning rate may need to follow.",
            ),
        ),
        Rule(
            "DDP343",
            "batch-may-be-small",
            "note",
            "`{batch}` is {value} where line {line} binds it, fewer than {counts} processes, where `{batch} // "
            "world_size` would be 0 and DataLoader would refuse it on every process: each process loads `max(1, "
            "{batch} // world_size)`, so there the loader's global batch grows to world_size",
            doc=_doc(
                "Finds a loader whose batch is a name bound to a small literal on one path and to something else on "
                "another: a function that builds every split's loader binds `batch_size = opt[\"batch_size\"]` for "
                "training and `batch_size = 1` for validation.",
                "Keeping the global batch divides it by the world size, and 1 divided by two processes is 0, which "
                "DataLoader refuses: every process would crash where the small batch is built. Floored at 1, each "
                "process loads one sample there.",
                "if phase == \"train\":\n    batch_size = opt[\"batch_size\"]\nelse:\n    batch_size = 1\n"
                "loader = DataLoader(ds, batch_size=batch_size, shuffle=shuffle)",
                "loader = DataLoader(ds, batch_size=max(1, batch_size // dist.get_world_size()), ...)",
                "Safe: nothing crashes; where the batch is smaller than the number of processes the loader's global "
                "batch grows to the world size.",
            ),
        ),
        Rule(
            "DDP344",
            "worker-seeded-by-id",
            "note",
            "`{call}` seeds a loader worker from its id alone, alike on every process: each process's workers would "
            "draw the same augmentations for different samples; the rank is now mixed in (`+ 104729 * rank`), and "
            "rank 0 draws as before",
            doc=_doc(
                "Finds, in a file whose loaders convert splits, a call that seeds `torch`, NumPy or `random` with an "
                "expression of `torch.utils.data.get_worker_info().id` and nothing that differs per process: a "
                "dataset that seeds its worker on its first item.",
                "Under DataParallel one process's workers drew the augmentations for the whole batch, each from its "
                "own seed. After the split, every process has workers with the same ids, so their seeds, crops and "
                "flips are the same on every process, for different samples: the augmentation repeats W times.",
                "worker_info = torch.utils.data.get_worker_info()\nif worker_info is not None:\n"
                "    torch.manual_seed(worker_info.id)",
                "worker_info = torch.utils.data.get_worker_info()\nif worker_info is not None:\n"
                "    torch.manual_seed(worker_info.id + 104729 * int(os.environ.get(\"RANK\", \"0\")))",
                "Safe: the seeds stay distinct for every worker of every process while a process has fewer than "
                "104729 workers.",
            ),
        ),
        Rule(
            "DDP345",
            "training-data-handed-unsplit",
            "error",
            "`{source}` is handed to `{callee}`, whose training loop ({site}) iterates it, and it is no DataLoader "
            "convert can split: every process would train on all of it; the file is left as it was: build a "
            "DataLoader over the data in this file (from its dataset, with `batch_size=` and `shuffle=`) and hand "
            "that to `{callee}`, then convert again",
            doc=_doc(
                "Finds, in a project, a call of another module's function or class whose training loop iterates "
                "one of its parameters (`def train_epoch(model, loader, ...)`, or a trainer whose `__init__` keeps "
                "`self.data_iter = data_iter` and loops over it around a `backward()`), handed something that is "
                "not a DataLoader this file or the program's loader modules build: an iterator class, a generator, "
                "a library's iterator. The finding is where that value is made.",
                "The module that trains cannot tell what it is handed; the caller chooses the data. convert splits "
                "DataLoaders by giving them a DistributedSampler. Anything else would give every process every "
                "batch: the run looks distributed, and is one GPU's training W times over.",
                "data_iter = TextPairIterator(corpus, batch_size=32)\ntrainer = Trainer(model, data_iter, optimizer)\n"
                "trainer.train()",
                "dataset = TextPairDataset(corpus)\nloader = DataLoader(dataset, batch_size=32, shuffle=True)\n"
                "trainer = Trainer(model, loader, optimizer)\ntrainer.train()",
                "Safe: nothing is converted until the data comes through a DataLoader convert can split.",
            ),
        ),
        Rule(
            "DDP346",
            "process-group-needed-at-import",
            "error",
            "`{call}` would run when {module} is imported, before the entry point's main block starts the process "
            "group, and raise on every process; the file is left as it was: build what it splits or reduces in a "
            "function the program calls once it runs (or drop it if nothing uses it), then convert again",
            doc=_doc(
                "Finds, in a project, a module that other modules import and that would call something needing the "
                "process group at import time once converted: a loader built at module level and split "
                "(`batch_size=8 // dist.get_world_size()`), a model wrapped in DDP at module level.",
                "An entry point imports its modules at its top, and starts the process group in its main block, "
                "after them. Code a module runs at import therefore runs before the process group exists, and "
                "`dist.get_world_size()` raises there: the converted program would crash at its first line.",
                "# data.py\ntrain_loader = DataLoader(train_set, batch_size=32, shuffle=True)\n\n"
                "# train.py\nfrom data import train_loader",
                "# data.py\ndef make_train_loader():\n    return DataLoader(train_set, batch_size=32, shuffle=True)\n\n"
                "# train.py\nfrom data import make_train_loader\ntrain_loader = make_train_loader()",
                "Safe: nothing is converted until the module's import-time code needs no process group.",
            ),
        ),
        Rule(
            "DDP324",
            "loader-batch-of-batches",
            "error",
            "each step trains on an item of `{source}`, one batch of the loader: its batch holds several training "
            "batches, so dividing the loader's batch_size by the world size would change how many of them a process "
            "trains on, not their size; the file is left as it was: let the loader yield the batch one step trains "
            "on (`for batch in loader:`), then convert again",
            doc=_doc(
                "Finds a training loop over the items of a loader's batch: `for group in loader: for batch in group:`, "
                "where a collate function cuts each loaded batch into several training batches.",
                "Convert keeps the global batch by dividing the loader's batch_size by the world size. Here the loader's "
                "batch is a group of training batches, so the division shrinks the group, and the batch a step trains "
                "on keeps its size: the global batch grows world_size times, or a process gets no batch at all.",
                "loader = DataLoader(ds, batch_size=batch_size * group_size, collate_fn=collate_into_groups)\n"
                "for group in loader:\n    for batch in group:\n        train_step(batch)",
                "loader = DataLoader(ds, batch_size=batch_size, collate_fn=collate)\nfor batch in loader:\n    train_step(batch)",
                "No fix: the whole file is left as it was.",
            ),
        ),
        Rule(
            "DDP325",
            "trains-through-another-module",
            "error",
            "this script wraps a model and runs, but builds no DataLoader and has no training loop: it trains "
            "through another module, whose loader convert does not change, so every process would train on all "
            "the data; the file is left as it was: build the training DataLoader and loop here, or convert the "
            "module that builds them (give its loader a DistributedSampler and call set_epoch), then convert again",
            doc=_doc(
                "Finds a runnable script (`if __name__ == \"__main__\":`) that wraps a model in DataParallel but builds "
                "no DataLoader and runs no training loop of its own: an imported engine or trainer does both.",
                "Converting the wrap alone starts one process per GPU, each training on the whole data set through "
                "the other module's unsplit loader: W times the work per epoch, and no speed-up.",
                "model = nn.DataParallel(build_model(cfg))\nengine = Engine(datamanager, model, optimizer)\nengine.run()",
                "# in the module that builds the loader:\n"
                "loader = DataLoader(ds, batch_size=bs // dist.get_world_size(), sampler=DistributedSampler(ds))",
                "No fix: the whole file is left as it was.",
            ),
        ),
        Rule(
            "DDP326",
            "evaluation-of-a-trained-loader",
            "warning",
            "`{loader}` also trains (its batches reach a backward()), so it is split between the processes; this "
            "evaluation over it keeps `{held}` for this process's share only, which convert cannot gather: reduce it "
            "over the processes (dist.all_reduce of its sum and count) before it is reported, or evaluate on a loader "
            "of its own",
            doc=_doc(
                "Finds an evaluation loop over a loader that also feeds a training step, such as DARTS's validation "
                "queue, which trains the architecture and measures accuracy.",
                "The training needs the loader split, or every process draws its own batches. Split, the evaluation "
                "sees 1/W of the set, and an average it keeps in an object convert does not know is this process's.",
                "for step, (x, y) in enumerate(valid_queue):\n    top1.update(accuracy(model(x), y), x.size(0))",
                "correct = torch.tensor([correct_sum, count])\ndist.all_reduce(correct)",
                "No fix: the evaluation is left as it was.",
            ),
        ),
        Rule(
            "DDP401",
            "side-effect-with-collective",
            "warning",
            "this line has a side effect and calls `{call}`, which every process must run, "
            "where it cannot be moved out; left on every process: bind the value first, then "
            "guard the rest with `if is_main_process():`",
            doc=_doc(
                "Finds a line that both writes (a print, a log) and calls something every process must run, in a form convert cannot split.",
                "Guarded whole, the other processes would skip the collective and hang; left whole, every process writes the line.",
                'print(evaluate(model) if verbose else "")',
                'result = evaluate(model)\nif is_main_process():\n    print(result if verbose else "")',
                "No fix: the line runs on every process.",
            ),
        ),
        Rule(
            "DDP402",
            "collective-under-rank-guard",
            "warning",
            "`{call}` runs under a rank guard, but every process must call it; the processes "
            "that skip it leave the others waiting forever: move it out of the guard",
            doc=_doc(
                "Finds a collective (a barrier, an all-reduce, the DDP model's forward, a function that reaches one) under a rank condition such as `if rank == 0:`.",
                "Every process must enter a collective. The processes that skip it leave the others waiting forever.",
                "if rank == 0:\n    acc = evaluate(model)\n    dist.barrier()",
                "acc = evaluate(model)\ndist.barrier()\nif rank == 0:\n    print(acc)",
                "No fix: the code is left as it was.",
            ),
        ),
        Rule(
            "DDP403",
            "per-process-progress",
            "note",
            "this progress line shows this process's running values, not the whole data's: a "
            "collective here could hang, {why}; the values after the loop are gathered from every process",
            doc=_doc(
                "Notes a progress line inside a loop that shows this process's running values.",
                "Reducing there would be a collective at a place convert cannot prove every process reaches at the same step, which could hang. The values after the loop are reduced.",
                "for step, (x, y) in enumerate(val_loader):\n    print(step, correct / total)",
                "# the numbers after the loop are gathered from every process",
                "Safe: the line shows per-process values; nothing is changed.",
            ),
        ),
        Rule(
            "DDP405",
            "read-back-with-its-write",
            "note",
            "`{call}` reads `{path}`, which only the main process writes now: it runs under the same guard, "
            "after the write",
            doc=_doc(
                "Finds a call, its value unused, that is handed the path a guarded write just wrote "
                "(`open(path, \"w\")`, `torch.save(obj, path)`).",
                "Only the main process writes the file now. Every other process would read a file that is not "
                "there yet, half written, or left from an earlier run.",
                "with open(output_name, \"w\") as f:\n    json.dump(results, f)\nrun_coco_eval(labels, output_name)",
                "if is_main_process():\n    with open(output_name, \"w\") as f:\n        json.dump(results, f)\n"
                "    run_coco_eval(labels, output_name)",
                "Safe: the call runs once, on the process that wrote the file, as it ran in the one DataParallel "
                "process; its value was not used, and a call that reaches a collective is never guarded.",
            ),
        ),
        Rule(
            "DDP406",
            "barrier-before-read-back",
            "note",
            "every process reads `{path}` here, which only the main process writes now: `barrier()` makes "
            "the others wait until it is written",
            doc=_doc(
                "Finds a statement that uses its value and reads the path a guarded write just wrote.",
                "Only the main process writes the file now. Without waiting, every other process would read a "
                "file that is not there yet, half written, or left from an earlier run.",
                "torch.save(state, path)\nstate = torch.load(path)",
                "if is_main_process():\n    torch.save(state, path)\ndist.barrier()\nstate = torch.load(path)",
                "Safe where every process reaches the write, as each did before the guard; the write's own "
                "function is not called under a rank condition in the file.",
            ),
        ),
        Rule(
            "DDP417",
            "directory-made-everywhere",
            "note",
            "`{call}` now passes exist_ok=True and runs on every process, so none writes into the "
            "directory before it exists; it no longer fails when the directory exists already",
            doc=_doc(
                "Finds `os.makedirs(d)` or `os.mkdir(d)` without `exist_ok=True`, which convert changes.",
                "Made on the main process only, the directory may not exist yet when another process opens a "
                "log file in it, and that process crashes with FileNotFoundError. Made on every process without "
                "`exist_ok`, all but the first fail with FileExistsError.",
                "if not os.path.exists(log_dir):\n    os.mkdir(log_dir)\nhandler = logging.FileHandler(os.path.join(log_dir, \"train.log\"))",
                "os.makedirs(log_dir, exist_ok=True)  # on every process\nhandler = logging.FileHandler(os.path.join(log_dir, \"train.log\"))",
                "Safe for a call under a test that the directory is missing. A bare call no longer fails when "
                "the directory exists already, which is reported.",
            ),
        ),
        Rule(
            "DDP418",
            "writer-used-beyond-writes",
            "warning",
            "`{writer}` is used here for more than its writes, so every process creates it ({how}); a "
            "writer that is None off the main process would crash here. Its writes stay guarded: guard "
            "this use too, then convert again to create it on the main process only",
            doc=_doc(
                "Finds a writer (SummaryWriter, a file opened for writing) that code other than its own writes "
                "reads: a path built from `writer.log_dir`, a helper that reads its attributes.",
                "A writer created on the main process only is None on the others, and that code crashes them "
                "with AttributeError. Created on every process, each opens its own event file (or, for a "
                "file, `os.devnull`), while its writes stay on the main process.",
                "writer = SummaryWriter(log_dir)\nsave_path = os.path.join(writer.log_dir, \"best.pth\")",
                "writer = SummaryWriter(log_dir) if is_main_process() else None\nsave_path = os.path.join(log_dir, \"best.pth\")",
                "Safe: the writer exists everywhere, its writes are guarded.",
            ),
        ),
        Rule(
            "DDP419",
            "plateau-value-averaged",
            "note",
            "`{scheduler}.step` now reads `{value}` averaged over processes, so ReduceLROnPlateau "
            "lowers the learning rate in the same epoch on every process",
            doc=_doc(
                "Finds `ReduceLROnPlateau.step(value)`, which convert changes to step on the value averaged over processes.",
                "A value each process computed alone (the last batch's loss, its own losses' mean) differs "
                "between processes. Each would lower its learning rate in a different epoch, and the replicas "
                "would drift apart although DDP averages their gradients.",
                "scheduler.step(np.mean(epoch_losses))",
                "scheduler.step(all_reduce_mean(np.mean(epoch_losses)))",
                "Safe: the average of a value that is the same everywhere is that value.",
            ),
        ),
        Rule(
            "DDP420",
            "plateau-stepped-on-one-process",
            "warning",
            "`{scheduler}` steps under a rank condition, so only some processes lower their learning "
            "rate and the replicas drift apart: step it on every process, on a value averaged with "
            "all_reduce_mean",
            doc=_doc(
                "Finds a ReduceLROnPlateau stepped under a rank condition.",
                "Only the processes that pass the condition lower their learning rates; the replicas drift apart.",
                "if rank == 0:\n    scheduler.step(val_loss)",
                "scheduler.step(all_reduce_mean(val_loss))  # on every process",
                "No fix: the call is left as it was.",
            ),
        ),
        Rule(
            "DDP421",
            "schedule-counts-one-process",
            "warning",
            "`{counter}` counts this process's share of the data and sets the learning rate: the schedule "
            "sees 1/world_size of the data, and processes whose shares differ get different rates and "
            "drift apart: add the increment summed over processes, `{counter} += all_reduce_sum(...)`",
            doc=_doc(
                "Finds a counter of the batch (`tokens += (y >= 0).sum()`) in a training loop that flows into a "
                "learning rate.",
                "Each process counts only its own share, and shares differ from batch to batch; the learning "
                "rates then differ between processes and so do the replicas.",
                "self.tokens += (y >= 0).sum()\nlr = base_lr * min(1.0, self.tokens / warmup_tokens)",
                "self.tokens += all_reduce_sum((y >= 0).sum())",
                "No fix: the counter is left as it was.",
            ),
        ),
        Rule(
            "DDP422",
            "unknown-writer-unguarded",
            "warning",
            "`{call}` comes from another file and its name says it writes (a progress bar, a log, a "
            "checkpoint), so it still runs on every process: if it only writes, put it under "
            "`if is_main_process():`; if it reaches a collective, guard its writes inside it instead",
            doc=_doc(
                "Finds a call, as a statement, to another file's function whose name says it writes: "
                "`progress_bar`, `save_checkpoint`, `log_metrics`.",
                "It runs on every process: progress lines print once per process, and several processes "
                "write one checkpoint file at once. Convert cannot see inside it, so it does not guard it: a "
                "collective inside would hang the other processes.",
                "progress_bar(step, len(loader), msg)",
                "if is_main_process():\n    progress_bar(step, len(loader), msg)",
                "No fix: the call is left as it was.",
            ),
        ),
        Rule(
            "DDP423",
            "per-process-path",
            "warning",
            "`{value}` gives each process its own value, and it names a file or a directory (`{path}`): "
            "the processes write to different places; draw it on the main process and share it with "
            "dist.broadcast_object_list, or derive it from the arguments",
            doc=_doc(
                "Finds a random number, a UUID or a timestamp that later names a file, a directory or a writer's log directory.",
                "Every process draws its own value, so each makes its own run directory: the main process "
                "writes the logs and checkpoints in one, and the others' directories stay empty, or hold "
                "their copies of files the script writes on every process.",
                "run_id = random.randint(1, 100000)\nlogdir = os.path.join(\"runs\", str(run_id))\nwriter = SummaryWriter(logdir)",
                "shared = [random.randint(1, 100000)]\ndist.broadcast_object_list(shared)\nrun_id = shared[0]",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP426",
            "per-process-path-shared",
            "note",
            "`{value}` gives each process its own value, and it names a file or a directory (`{path}`): every "
            "process now takes the main process's value (`main_process_value(...)`, a broadcast), so all of them "
            "read and write one place",
            doc=_doc(
                "Finds a random number, a UUID or a timestamp that later names a file, a directory or a writer's "
                "log directory, drawn on a line every process runs together: in a function, outside loops, never "
                "called under a rank condition, and not a writer another module could guard at its call.",
                "Every process would draw its own value. The main process saves under its name, and another "
                "process that loads the file back by its own name finds nothing when its clock crossed a second, "
                "or its random draw differed. One broadcast of the main process's value makes the name the same "
                "everywhere.",
                "timestamp = time.strftime(\"%Y%m%d-%H%M%S\")\nself.snapshot_path = f\"{save_dir}/{timestamp}.pt\"",
                "timestamp = main_process_value(time.strftime(\"%Y%m%d-%H%M%S\"))\nself.snapshot_path = f\"{save_dir}/{timestamp}.pt\"",
                "Safe: every process reaches the line together, so the broadcast pairs up; a value drawn elsewhere "
                "keeps DDP423.",
            ),
        ),
        Rule(
            "DDP429",
            "existence-test-shared",
            "note",
            "`{test}` runs on every process before `{call}`, which every process now runs too: a process that tests "
            "late would find the directory another one just made, so every process now takes the main process's "
            "answer (`main_process_value(...)`, a broadcast)",
            doc=_doc(
                "Finds a test of whether a path exists (`os.path.exists`, `os.path.isdir`, `Path.exists()`) in an "
                "`if`, followed in the same function by an `os.makedirs` or `mkdir` of the same path that convert "
                "leaves on every process (with exist_ok=True), on a line every process runs together.",
                "`if os.path.exists(save_dir): raise ...` guards against reusing a run folder. With several "
                "processes, the first one makes the folder and a slower one finds it and raises: the run stops at "
                "start, at random. The broadcast of the main process's answer happens before any process passes "
                "the test, so no process has made the folder yet when the main process looks.",
                "if os.path.exists(save_dir):\n    raise NameError(\"model dir exists!\")\nos.makedirs(save_dir)",
                "if main_process_value(os.path.exists(save_dir)):\n    raise NameError(\"model dir exists!\")\n"
                "os.makedirs(save_dir, exist_ok=True)",
                "Safe: every process reaches the test together, so the broadcast pairs up; a test elsewhere is "
                "reported (DDP430).",
            ),
        ),
        Rule(
            "DDP430",
            "existence-test-races",
            "warning",
            "`{test}` runs on every process before `{call}`, which every process now runs too: a process that tests "
            "late finds the directory another one just made; convert cannot see that every process runs this test "
            "together, so test on the main process only and share the answer (`main_process_value(...)`)",
            doc=_doc(
                "Finds what DDP429 finds, where convert cannot show that every process runs the test at the same "
                "point: in a loop, in a function called under a rank condition, or at module level.",
                "A test whose answer depends on which process made the directory first makes the processes take "
                "different branches: one raises or deletes the folder while the others train in it.",
                "for run in runs:\n    if os.path.exists(run.dir):\n        continue\n    os.makedirs(run.dir)",
                "for run in runs:\n    if main_process_value(os.path.exists(run.dir)):\n        continue\n"
                "    os.makedirs(run.dir, exist_ok=True)",
                "No fix: the test is left as it was.",
            ),
        ),
        Rule(
            "DDP427",
            "per-process-number-printed",
            "warning",
            "`{value}` comes from this process's share of the training data, and this line prints or logs it as "
            "DataParallel printed the whole batch's: convert cannot tell how it combines over processes; reduce it "
            "on every process first (`all_reduce_mean(...)` for a mean, `all_reduce_sum(...)` for a sum), or read "
            "it as this process's",
            doc=_doc(
                "Finds a print, log or writer call that reads a value flowing from a training loop's loss (through "
                "assignments, a list or object that collects it, or a function that returns it) which convert did "
                "not reduce: `losses.append(loss.item())` then `print(np.average(losses))`, `meter.add(loss)` then "
                "`print(meter.val())` for a class convert does not know, `loss.data[0]`.",
                "Under DataParallel one process saw every batch, so the number was the whole data's. After the "
                "conversion each process computes it from its own share, and the main process prints its own: "
                "the number changes, and nothing says so.",
                "losses.append(loss.item())\n...\nprint(\"train loss\", np.average(losses))",
                "losses.append(loss.item())\n...\nprint(\"train loss\", all_reduce_mean(np.average(losses)))",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP428",
            "shell-command-on-every-process",
            "warning",
            "`{call}` runs a shell command on every process: convert cannot tell what it writes or removes, so it "
            "is left as it was; if it only writes (a code backup, `mkdir`), put it under `if is_main_process():` "
            "and follow it with `dist.barrier()` where the other processes read what it made",
            doc=_doc(
                "Finds a call, as a statement outside any rank condition, of `os.system`, `subprocess.call`, "
                "`subprocess.run`, `subprocess.check_call`, `subprocess.check_output` or `subprocess.Popen` in a "
                "converted program.",
                "Under DataParallel the command ran once. After the conversion every process runs it: W copies "
                "of a folder written at once, a scratch folder one process removes while another fills it. What "
                "the command does is in a string convert does not read, so it neither guards it nor proves it safe.",
                "os.system(f\"cp -r src {save_dir}\")",
                "if is_main_process():\n    os.system(f\"cp -r src {save_dir}\")\ndist.barrier()",
                "No fix: the call is left as it was.",
            ),
        ),
        Rule(
            "DDP424",
            "per-process-stop",
            "warning",
            "this decision to stop reads `{value}`, which each process computes from its own share of "
            "the training data: processes may stop in different epochs, and the others then wait forever "
            "in the next one: average it over processes first, `{value} = all_reduce_mean({value})`",
            doc=_doc(
                "Finds a `break` or `return` after a sharded training loop whose condition reads a value that "
                "loop left per process: a list of its losses, the last batch's loss.",
                "Under DDP every process must run the same number of steps. A process that stops early "
                "leaves the others waiting in their next backward pass.",
                "for epoch in range(epochs):\n    for x, y in train_loader:\n        losses.append(loss.item())\n"
                "    if np.mean(losses) < target:\n        break",
                "    if all_reduce_mean(np.mean(losses)) < target:\n        break",
                "No fix: the condition is left as it was.",
            ),
        ),
        Rule(
            "DDP425",
            "written-then-read-first",
            "note",
            "`{call}` writes files that its own code then reads (`{write}`, then `{read}`); its writes run "
            "on the main process only, so it now runs inside `with main_process_first():`, on the main "
            "process first and on the others once the files are there",
            doc=_doc(
                "Notes a construction or call of the script's own class or function that both writes a file "
                "(`torch.save`, `os.replace`, a download, `open(path, \"w\")`) and reads one (`torch.load`, "
                "`os.path.exists`, `open(path)`), as a dataset that downloads on first use does.",
                "Under DDP the writes run on the main process only. Every other process would look for the "
                "file at the same moment, before the main process wrote or renamed it, and fail "
                "(\"Dataset not found\") or read half a file.",
                "train_set = PointClouds(args.data, download=True)  # download() writes, __init__ reads",
                "with main_process_first():  # the main process first, then a barrier every process reaches\n"
                "    train_set = PointClouds(args.data, download=True)",
                "Safe: every process still runs the statement once, in order; the barriers are outside any "
                "rank guard. A statement in a loop, or one whose code reaches a collective, is left as it was.",
            ),
        ),

        # -- dp2ddp check: hazards of a script that runs DDP ----------------------------------------
        Rule(
            "DDP501",
            "unguarded-side-effect",
            "warning",
            "`{call}` {what} on every process: run it on the main process only (`if dist.get_rank() == 0:`)",
            doc=_doc(
                "In a script that starts a process group, finds a print, a log call, a checkpoint or file "
                "write, a TensorBoard or wandb write, or a tqdm bar that every process runs. Calls under a "
                "rank condition, under a test of a value only the main process holds (`if writer is not None:`), "
                "or in a function only such code calls, are guarded already. So are writes through a value that is "
                "`None` off the main process (`tb_writer = None`, then `if rank == 0: tb_writer = SummaryWriter()`), "
                "and `info`/`debug` log calls where the script sets the logging level by rank "
                "(`level=logging.INFO if rank == 0 else logging.WARN`): the other processes drop them.",
                "Every process repeats it: logs hold each line once per GPU, progress bars overwrite each other, "
                "and processes that write the same checkpoint at once can leave a truncated file.",
                "torch.save(model.module.state_dict(), \"model.pt\")\nprint(f\"epoch {epoch} loss {loss:.3f}\")",
                "if dist.get_rank() == 0:\n    torch.save(model.module.state_dict(), \"model.pt\")\n"
                "    print(f\"epoch {epoch} loss {loss:.3f}\")\nbar = tqdm(loader, disable=dist.get_rank() != 0)",
                "No fix: a guard must never hold a collective, and only a reader of the code can see what a "
                "call reaches. Guard the line, and keep collectives (all_reduce, a DDP forward) outside it.",
            ),
        ),
        Rule(
            "DDP502",
            "collective-under-rank-condition",
            "error",
            "`{call}` runs only where this rank condition holds, but every process must call it: the "
            "processes that skip it leave the others waiting forever; call it on every process",
            doc=_doc(
                "Finds a collective (`barrier`, `all_reduce`, `broadcast`, `backward()` of a DDP model, or a "
                "function of the script that reaches one) inside an `if` whose condition differs between "
                "processes: `rank == 0`, `is_main_process()`, or `gpu == 0` where `gpu` is the index the script "
                "passes to `set_device`, `.cuda()`, `device_ids` or `init_process_group(rank=)`. A barrier met by a barrier under the opposite "
                "condition (the main-process-first pattern), and calls both branches make, are not reported.",
                "A collective completes only when every process of the group calls it. The processes that "
                "call it wait for the ones that never will: the run hangs until the NCCL timeout kills it.",
                "if dist.get_rank() == 0:\n    torch.save(model.module.state_dict(), path)\n    dist.barrier()",
                "if dist.get_rank() == 0:\n    torch.save(model.module.state_dict(), path)\ndist.barrier()",
                "No fix: where the call goes depends on what the guarded code needs; move it out by hand.",
            ),
        ),
        Rule(
            "DDP503",
            "ddp-forward-under-rank-condition",
            "warning",
            "`{call}` runs a forward of the DDP model only where this rank condition holds: a forward may "
            "synchronise buffers with every process, which then hangs; run the module inside (`model.module`) here",
            doc=_doc(
                "Finds a forward of a DDP model (or a script function that runs one) under a rank-dependent "
                "condition, with gradients enabled. A forward under `torch.no_grad()` (a `with` block or a "
                "decorated function) is not reported: DDP does not communicate there. A function of the script "
                "counts where it runs the DDP model it is handed (`evaluate(args, model)`), not where it is "
                "handed `model.module` or called under `torch.no_grad()`; a branch that also requires "
                "`local_rank == -1` never runs in a distributed run, and a name bound since to a fresh model "
                "(`model = Model.from_pretrained(path)`) no longer holds the DDP one.",
                "With gradients on, DDP's forward broadcasts buffers (`broadcast_buffers=True`, the default) and "
                "prepares the gradient reduction. Run on one process only, the broadcast waits for the others "
                "forever, and a later backward on that process alone would too.",
                "if rank == 0:\n    accuracy = evaluate(model, val_loader)",
                "if rank == 0:\n    with torch.no_grad():\n        accuracy = evaluate(model.module, val_loader)",
                "No fix: the call is left as it was.",
            ),
        ),
        Rule(
            "DDP504",
            "loader-without-distributed-sampler",
            "warning",
            "the training loader `{loader}` has no DistributedSampler{sampler}, so every process trains on the "
            "whole dataset: {fix}",
            doc=_doc(
                "In a script that starts a process group, finds a DataLoader that a loop calling `backward()` "
                "iterates, with no `sampler` or `batch_sampler` (`sampler=None` is none), or with one known to "
                "draw from the whole dataset: torch's `RandomSampler`, `SequentialSampler`, "
                "`WeightedRandomSampler`, `SubsetRandomSampler`, a `BatchSampler` over one of them, or a `Sampler` "
                "subclass of the file that never reads the rank. A sampler told the rank (`rank=`, "
                "`num_replicas=`, `world_size=`) or distributed by name is taken to split the data itself, and "
                "one built in another file is not known: neither is reported.",
                "Every process then sees every sample in each epoch: an epoch costs world-size times the work, "
                "the effective batch is world-size times larger, and the processes see the same batches.",
                "loader = DataLoader(dataset, batch_size=64, shuffle=True)\n"
                "loader = DataLoader(dataset, batch_size=64, sampler=RandomSampler(dataset))",
                "loader = DataLoader(dataset, batch_size=64, sampler=DistributedSampler(dataset, shuffle=True))",
                "No fix here: `dp2ddp convert` adds the sampler to a DataParallel script, or splits the one it has.",
            ),
        ),
        Rule(
            "DDP505",
            "shuffle-with-sampler",
            "error",
            "`shuffle=True` beside `sampler=` makes DataLoader raise ValueError at start-up: the sampler "
            "decides the order, so drop `shuffle` (DistributedSampler shuffles by default)",
            doc=_doc(
                "Finds a DataLoader given both a sampler and `shuffle=True`.",
                "DataLoader refuses the combination (\"sampler option is mutually exclusive with shuffle\"), "
                "so the script crashes on every process before the first step.",
                "DataLoader(dataset, batch_size=64, shuffle=True, sampler=DistributedSampler(dataset))",
                "DataLoader(dataset, batch_size=64, sampler=DistributedSampler(dataset))",
                "Safe: the keyword is removed; the script crashed with it.",
            ),
        ),
        Rule(
            "DDP506",
            "missing-set-epoch",
            "warning",
            "`{loader}` is iterated once per epoch on a DistributedSampler that is never told the epoch: every "
            "epoch sees the same order; call `{loader}.sampler.set_epoch(epoch)` at the top of the epoch loop",
            doc=_doc(
                "Finds a loader on a shuffled DistributedSampler, in a file that never calls `set_epoch` on its "
                "sampler, that starts a pass again and again: iterated inside an outer (epoch) loop, "
                "`iter(loader)` inside a loop (`next(iter(loader))` every step, a restart on StopIteration), or "
                "iterated in a function that says it runs once per epoch (`def train_epoch(self, epoch):`) and "
                "is called from another file. A sampler that counts its own passes (the ShardedSampler convert "
                "writes) is no DistributedSampler and is not reported.",
                "DistributedSampler seeds its shuffle with the epoch it was given. Without `set_epoch`, every "
                "epoch repeats the first epoch's order on every process, which measurably hurts training.",
                "for epoch in range(epochs):\n    for x, y in loader:\n        ...",
                "for epoch in range(epochs):\n    loader.sampler.set_epoch(epoch)\n    for x, y in loader:\n        ...",
                "No fix: which value counts epochs is for a reader to say.",
            ),
        ),
        Rule(
            "DDP507",
            "set-epoch-outside-epoch-loop",
            "warning",
            "`set_epoch` for `{loader}` is not called in the loop that iterates it once per epoch: call it "
            "once at the top of that loop, before the pass over the data",
            doc=_doc(
                "Finds `set_epoch` on a loader's sampler placed before the epoch loop, or inside the loop over batches.",
                "Called once before the loop, every epoch uses the same order. Called inside the batch loop, "
                "it takes effect only at the next `iter()`, and with a per-step value it reseeds every step.",
                "sampler.set_epoch(0)\nfor epoch in range(epochs):\n    for x, y in loader:\n        ...",
                "for epoch in range(epochs):\n    sampler.set_epoch(epoch)\n    for x, y in loader:\n        ...",
                "No fix: the call is left as it was.",
            ),
        ),
        Rule(
            "DDP508",
            "load-without-map-location",
            "warning",
            "`torch.load` without `map_location` restores tensors onto the GPU they were saved from (usually "
            "GPU 0) in every process: pass `map_location=\"cpu\"` or this process's device",
            doc=_doc(
                "In a DDP script, finds `torch.load(...)` with no `map_location`.",
                "A checkpoint saved on rank 0 holds tensors on `cuda:0`. Every process then loads its copy onto "
                "GPU 0, which runs out of memory or slows every step, and parts of the model may stay there.",
                "state = torch.load(\"checkpoint.pt\")",
                "state = torch.load(\"checkpoint.pt\", map_location=\"cpu\")",
                "No fix: loading onto the CPU changes where tensors the script uses directly live.",
            ),
        ),
        Rule(
            "DDP509",
            "first-gpu-hard-coded",
            "warning",
            "`{device}` puts every process on GPU 0: use this process's GPU (`LOCAL_RANK`, or "
            "`torch.cuda.current_device()` after `set_device(local_rank)`)",
            doc=_doc(
                "In a DDP script, finds `\"cuda:0\"`, `set_device(0)` and `.cuda(0)`. A `\"cuda:0\"` default that "
                "the same function replaces with this process's GPU before using it "
                "(`device = torch.device(\"cuda\", args.local_rank)`) is not reported.",
                "With one process per GPU, every process picks GPU 0: the others sit idle, GPU 0 runs out of memory, "
                "and NCCL may refuse two processes on one device.",
                "device = torch.device(\"cuda:0\")",
                "local_rank = int(os.environ[\"LOCAL_RANK\"])\ntorch.cuda.set_device(local_rank)\n"
                "device = torch.device(\"cuda\", local_rank)",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP510",
            "visible-devices-in-ddp-script",
            "warning",
            "the script sets CUDA_VISIBLE_DEVICES itself, so every process sees the same GPUs: set it in the "
            "shell or the launcher, and let each process pick its own with LOCAL_RANK",
            doc=_doc(
                "In a DDP script, finds an assignment to `os.environ[\"CUDA_VISIBLE_DEVICES\"]`.",
                "The launcher starts one process per GPU and tells each which is its own. A script that rewrites "
                "the visible devices can put several processes on one GPU, or hide a process's GPU from it.",
                "os.environ[\"CUDA_VISIBLE_DEVICES\"] = \"0,1\"",
                "# CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node=2 train.py",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP511",
            "saves-ddp-wrapper",
            "warning",
            "`torch.save({model}, ...)` pickles the DDP wrapper, which cannot be loaded without a process "
            "group: save `{model}.module.state_dict()` instead",
            doc=_doc(
                "Finds `torch.save` of a DDP model object itself.",
                "The pickle holds the DistributedDataParallel object and its process group; loading it "
                "elsewhere (a single-GPU evaluation, a notebook) fails or needs the same process group.",
                "torch.save(model, \"model.pt\")",
                "torch.save(model.module.state_dict(), \"model.pt\")",
                "No fix: the file format the readers of the checkpoint expect is the script's choice.",
            ),
        ),
        Rule(
            "DDP512",
            "padded-evaluation",
            "warning",
            "`{loader}` evaluates on a DistributedSampler, which repeats samples to give every process as many: "
            "the gathered `{metric}` counts them twice; shard without padding, or evaluate whole on one process",
            doc=_doc(
                "Finds an evaluation loop (no `backward()`) over a loader on a DistributedSampler without "
                "`drop_last=True`, whose results (sums, means, meters) the script gathers.",
                "DistributedSampler pads the dataset with repeated samples until it divides by the number of "
                "processes. Sums and counts gathered from every process then include the repeats, so accuracy "
                "over 10,001 samples on 8 processes is computed over 10,008.",
                "val_loader = DataLoader(val_set, sampler=DistributedSampler(val_set, shuffle=False))",
                "indices = range(dist.get_rank(), len(val_set), dist.get_world_size())\n"
                "val_loader = DataLoader(val_set, sampler=indices)  # every sample exactly once",
                "No fix: the sampler is left as it was.",
            ),
        ),
        Rule(
            "DDP513",
            "metric-from-one-shard",
            "warning",
            "`{metric}` sums the evaluation of `{loader}`, whose DistributedSampler gives this process only its "
            "share, and the script never combines values over processes: the reported number covers one shard; "
            "all_reduce the sums and counts first",
            doc=_doc(
                "Finds an evaluation loop over a loader on a DistributedSampler that accumulates results (sums, "
                "means, meters) in a script that never calls a reduction (`all_reduce`, `all_gather`, ...).",
                "Each process saw 1/world-size of the evaluation data. The number rank 0 prints, compares with "
                "the best so far, or saves is that shard's, not the model's accuracy.",
                "for x, y in val_loader:\n    correct += (model(x).argmax(1) == y).sum().item()\nprint(correct / total)",
                "stats = torch.tensor([correct, total], dtype=torch.float64)\ndist.all_reduce(stats)\nprint(stats[0] / stats[1])",
                "No fix: the loop is left as it was.",
            ),
        ),
        Rule(
            "DDP514",
            "plateau-on-one-process",
            "warning",
            "ReduceLROnPlateau steps on `{value}`, which each process computes from its own share of the data "
            "in a script that never combines values over processes: the processes lower their learning rates "
            "at different epochs; average it with all_reduce first",
            doc=_doc(
                "Finds `ReduceLROnPlateau.step(value)` in a DDP script that shards its data and never reduces a value over processes.",
                "The scheduler decides on each process's own number. When they disagree, the processes train "
                "with different learning rates and their replicas drift apart.",
                "scheduler.step(val_loss)",
                "loss = torch.tensor(val_loss)\ndist.all_reduce(loss)\nscheduler.step(loss.item() / dist.get_world_size())",
                "No fix: the call is left as it was.",
            ),
        ),
        Rule(
            "DDP515",
            "weighted-loss-in-ddp",
            "warning",
            WEIGHTED_LOSS_MESSAGE,
            doc=_doc(
                "Finds, in a script that runs DDP, a cross-entropy or NLL loss with class weights and "
                "`reduction=\"mean\"` (given or by default) whose value reaches `backward()`.",
                WEIGHTED_LOSS_WHY,
                WEIGHTED_LOSS_EXAMPLE,
                WEIGHTED_LOSS_INSTEAD,
                "No fix: the loss is left as it was.",
            ),
        ),
        Rule(
            "DDP516",
            "in-batch-negatives-in-ddp",
            "warning",
            IN_BATCH_NEGATIVES_MESSAGE,
            doc=_doc(
                "Finds, in a script that runs DDP, a contrastive cross-entropy whose value reaches `backward()`: "
                "labels `torch.arange(n)` over a similarity matrix of two batches of embeddings.",
                IN_BATCH_NEGATIVES_WHY,
                IN_BATCH_NEGATIVES_EXAMPLE,
                IN_BATCH_NEGATIVES_INSTEAD,
                "No fix: the loss is left as it was.",
            ),
        ),
        Rule(
            "DDP520",
            "cast-after-ddp-wrap",
            "error",
            "`{call}` casts the parameters after the DDP wrap: DDP hooks the parameters it was given, so "
            "gradients of the new ones are never averaged; cast before the wrap",
            doc=_doc(
                "Finds `.half()`, `.double()` or `.to(dtype)` on a model after it is wrapped in DDP.",
                "A cast makes new parameter tensors. DDP registered its hooks on the old ones, so the processes "
                "train the new parameters independently and drift apart.",
                "model = DDP(model, device_ids=[local_rank])\nmodel.half()",
                "model.half()\nmodel = DDP(model, device_ids=[local_rank])",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP521",
            "reinitialised-after-ddp-wrap",
            "error",
            "`{call}` writes the model's weights after the DDP wrap: each process draws its own, and DDP "
            "copied rank 0's only when it was built; initialise before the wrap",
            doc=_doc(
                "Finds `torch.nn.init.*`, `reset_parameters()` or `apply(init_fn)` on a model after the DDP wrap.",
                "DDP broadcasts rank 0's weights once, in its constructor. Weights written after that differ "
                "per process, and the replicas never agree again.",
                "model = DDP(model)\nmodel.apply(init_weights)",
                "model.apply(init_weights)\nmodel = DDP(model)",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP522",
            "device-move-after-ddp-wrap",
            "error",
            "the DDP model moves to `{device}` after the wrap, which may not be this process's GPU: move it "
            "before the wrap, to this process's device",
            doc=_doc(
                "Finds `.to(device)` or `.cuda(device)` on a DDP model after the wrap, with a device that is not "
                "the process's own. A device bound to the local rank (`args.device = torch.device(\"cuda\", "
                "args.local_rank)`), and a name bound on every path since to a fresh model "
                "(`model = Model.from_pretrained(out_dir)`), are not reported.",
                "DDP binds to the device the parameters were on when it was built; moving them afterwards "
                "breaks the gradient reduction or puts several processes on one GPU.",
                "model = DDP(model)\nmodel.to(\"cuda:1\")",
                "model.to(local_rank)\nmodel = DDP(model, device_ids=[local_rank])",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP523",
            "backward-skippable",
            "error",
            "a backward pass of the DDP model can be skipped here: {how}; DDP's backward is a collective, so "
            "a process that skips it leaves the others waiting forever",
            doc=_doc(
                "Finds a `continue` on a per-batch condition before `backward()`, a `break` on one, or a "
                "`try` that swallows an error around the backward.",
                "Each backward all-reduces gradients with every process. A process that skips a step, or "
                "leaves the loop early, leaves the others waiting in that all-reduce.",
                "for x, y in loader:\n    if torch.isnan(loss):\n        continue\n    loss.backward()",
                "for x, y in loader:\n    loss = torch.nan_to_num(loss)  # or decide with an all_reduce\n    loss.backward()",
                "No fix: the loop is left as it was.",
            ),
        ),
        Rule(
            "DDP524",
            "several-backward-per-ddp-forward",
            "error",
            "{backwards} for {forwards} of the DDP model in one pass through this loop: DDP reduces "
            "gradients once per forward, so back-propagate once per forward: sum the losses that one "
            "optimizer steps on, or give each backward a forward of its own",
            doc=_doc(
                "Finds a loop one pass of which can call `backward()` more often than it runs the DDP model's "
                "forward. Backward passes in the two branches of one `if` count once.",
                "DDP prepares one gradient reduction per forward. A second backward through the same forward "
                "fails (\"Expected to mark a variable ready only once\") or reduces stale gradients.",
                "out = model(x)\nloss_a.backward(retain_graph=True)\nloss_b.backward()",
                "out = model(x)\n(loss_a + loss_b).backward()",
                "No fix: the loop is left as it was.",
            ),
        ),
        Rule(
            "DDP525",
            "double-backward-through-ddp",
            "error",
            "a double backward here trains differently under DDP: {how}: take the gradient with respect to "
            "the inputs with torch.autograd.grad(create_graph=True) and back-propagate the penalty in one "
            "backward() with the loss of an ordinary forward",
            doc=_doc(
                "Finds `torch.autograd.grad(..., create_graph=True)` in a script that wraps a model in DDP, "
                "where the penalty is back-propagated alone or differentiates with respect to the parameters, "
                "and `backward(create_graph=True)`.",
                "DDP averages a parameter's gradient when it reaches the parameter in a `backward()`. A penalty "
                "back-propagated alone leaves parameters it does not reach without a gradient: the reduction "
                "never completes and the penalty's gradients are not averaged, through the wrapper or through "
                "`model.module` alike. `backward(create_graph=True)` through DDP raises an error.",
                "loss.backward()\ngrads = torch.autograd.grad(model(x).sum(), x, create_graph=True)[0]\n"
                "grads.pow(2).mean().backward()",
                "grads = torch.autograd.grad(model(x).sum(), x, create_graph=True)[0]\n"
                "(loss + grads.pow(2).mean()).backward()  # one backward: every gradient is averaged",
                "No fix: the call is left as it was.",
            ),
        ),
        Rule(
            "DDP526",
            "trainable-module-not-wrapped",
            "error",
            "the optimizer trains `{module}`, which no DDP wrap holds: its gradients are never averaged and the "
            "processes' copies drift apart; wrap it in DDP too",
            doc=_doc(
                "Finds an optimizer built over the parameters of a module the script creates but never wraps in DDP.",
                "Only wrapped parameters have their gradients averaged. The unwrapped module trains on each "
                "process's data alone, and the processes end with different models.",
                "model = DDP(backbone)\nhead = nn.Linear(512, 10)\noptimizer = SGD(list(model.parameters()) + list(head.parameters()))",
                "model = DDP(nn.Sequential(backbone, nn.Linear(512, 10)))",
                "No fix: the optimizer is left as it was.",
            ),
        ),
        Rule(
            "DDP530",
            "global-batch-not-divisible-in-ddp",
            "warning",
            "each process loads `{total} // world_size`, and {size} does not divide by {misses} processes: {what}; "
            "pick a global batch that is a multiple of the number of processes",
            doc=_doc(
                "Finds a DataLoader whose batch is a literal global batch divided by the world size "
                "(`batch_size=100 // dist.get_world_size()`, `int(B / world_size)`, `max(1, B // world_size)`, or a "
                "name bound once to one), where the literal does not divide by 2, 4 or 8 processes.",
                "Floor division drops the remainder: 100 on 8 processes loads 12 each, 96 in all, so the global batch "
                "the learning rate was tuned for shrinks, and a run on 8 processes trains differently from one on 4. "
                "Below the number of processes the share is 0, and DataLoader raises \"batch_size should be a positive "
                "integer value\" on every process; floored at 1, the global batch grows to the world size instead.",
                "loader = DataLoader(ds, batch_size=100 // dist.get_world_size(), sampler=DistributedSampler(ds))",
                "loader = DataLoader(ds, batch_size=96 // dist.get_world_size(), sampler=DistributedSampler(ds))",
                "No fix: the batch is the script's choice.",
            ),
        ),
        Rule(
            "DDP531",
            "batch-default-below-world-size-in-ddp",
            "warning",
            "`{total}` defaults to {default}, fewer than {counts} processes, where `{total} // world_size` is 0: "
            "{what}; pass a batch that is a multiple of the number of processes",
            doc=_doc(
                "Finds a DataLoader whose batch is a command-line option divided by the world size "
                "(`batch_size=args.batch_size // dist.get_world_size()`, or floored: `max(1, ...)`), where the "
                "script's own argparse declares the option with an integer default below 2, 4 or 8.",
                "With the default, on more processes than the default holds, each process's share is 0: DataLoader "
                "raises \"batch_size should be a positive integer value\" on every process, so the script crashes "
                "with its own default options. Floored at 1, it runs, but each process loads one sample and a step "
                "sees world_size samples, more than the default asked for.",
                "parser.add_argument(\"--batch_size\", type=int, default=1)\n"
                "loader = DataLoader(ds, batch_size=args.batch_size // dist.get_world_size(), sampler=DistributedSampler(ds))",
                "parser.add_argument(\"--batch_size\", type=int, default=8)  # and pass a multiple of the process count",
                "No fix: the default is the script's choice.",
            ),
        ),
        Rule(
            "DDP532",
            "scaled-by-gpu-count-in-ddp",
            "warning",
            "`{target}` is scaled by the GPU count `{count}`, a DataParallel habit that DDP changes: {advice}",
            doc=_doc(
                "In a DDP script, finds a batch size or a loader worker count multiplied by "
                "`torch.cuda.device_count()`, directly or through a name every assignment of which binds it. "
                "A count the script sets otherwise under a launcher (`n_gpu = 1` when `local_rank != -1`) is not reported.",
                "DataParallel runs one process and one loader for all GPUs, so its batch and its workers were scaled "
                "by the GPU count. Under DDP every process has its own loader: the workers multiply by the number of "
                "processes, and the GPU count of one node is not the number of processes on several nodes, so a "
                "batch scaled by it changes with the cluster's shape.",
                "args.batch_size *= torch.cuda.device_count()\nargs.workers *= torch.cuda.device_count()\n"
                "loader = DataLoader(ds, batch_size=args.batch_size // dist.get_world_size(), num_workers=args.workers)",
                "args.batch_size *= dist.get_world_size()  # the global batch, divided again per process\n"
                "loader = DataLoader(ds, batch_size=args.batch_size // dist.get_world_size(), num_workers=args.workers)",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP533",
            "ddp-model-unwrapped-on-one-side",
            "warning",
            "this branch tests `{condition}`, but `{model}` is a DDP model either way: one side reads "
            "`{model}.module`, the other `{model}` itself, which is the DDP wrapper (its state_dict keys start "
            "with `module.`); use `{model}.module` on both sides",
            doc=_doc(
                "In a DDP script, finds an `if`/`else` or a conditional expression whose one side reads "
                "`model.module` and whose other side reads `model`'s own attributes, where `model` is wrapped in "
                "DDP whatever the test says (the wrap is not under the same test). A test that asks the model "
                "itself (`hasattr(model, \"module\")`, `isinstance`) is not reported.",
                "DataParallel scripts often wrap only when GPUs are there and unwrap on the same test. Under DDP "
                "the model is wrapped on every path, so the side written for the unwrapped model gets the "
                "wrapper: a checkpoint saved there has `module.`-prefixed keys that the unwrapped model cannot "
                "load, and the run on CPU (gloo) differs from the run on GPUs.",
                "model = DDP(net, device_ids=[local_rank])\nstate = model.module.state_dict() if use_gpu else model.state_dict()",
                "model = DDP(net, device_ids=[local_rank])\nstate = model.module.state_dict()",
                "No fix: the branch is left as it was.",
            ),
        ),
        Rule(
            "DDP534",
            "steps-per-epoch-of-the-whole-dataset",
            "warning",
            "`{expression}` counts the whole dataset in batches of `{batch}`, but each process loads `{batch}` "
            "from its 1/world_size share, so an epoch has world_size times fewer steps than this says: if it "
            "counts steps, divide by `({batch} * dist.get_world_size())`, or use `len(loader)`",
            doc=_doc(
                "In a DDP script, finds a count of the training data divided by the batch its loader loads on a "
                "DistributedSampler: `len(train_set) // args.batch_size`, or a sample count (`num_train`) that "
                "sizes the loader's dataset. It is what convert reports as DDP334 and leaves as it was.",
                "With a DistributedSampler each process draws 1/world_size of the data, in batches of the "
                "loader's size, so an epoch has `len(train_set) // (batch * world_size)` steps. A schedule or a "
                "warm-up sized with the whole dataset's count never reaches its end, and a step-based stop "
                "trains world_size times as many epochs.",
                "loader = DataLoader(train_set, batch_size=args.batch_size, sampler=DistributedSampler(train_set))\n"
                "total_steps = args.epochs * (len(train_set) // args.batch_size)",
                "loader = DataLoader(train_set, batch_size=args.batch_size, sampler=DistributedSampler(train_set))\n"
                "total_steps = args.epochs * len(loader)",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP535",
            "data-parallel-in-ddp-process",
            "warning",
            "`{call}` still runs DataParallel in a DDP process: each process replicates it over every GPU it "
            "sees, so the processes share GPUs and split each of their batches again; wrap the whole model in "
            "DDP once and call this part directly",
            doc=_doc(
                "In a script that runs DDP, finds DataParallel that is still used: a wrapped sub-module, the "
                "functional `nn.parallel.data_parallel`, or a subclass of DataParallel. DataParallel in a branch "
                "the script takes only when it runs no DDP (`if args.distributed: ... else:`), or in a function "
                "that also builds DDP, is an alternative to it and is not reported. Convert leaves these as they "
                "were (DDP201, DDP202, DDP203).",
                "Each DDP process owns one GPU. A DataParallel inside it scatters its input over every GPU the "
                "process can see, so all processes crowd onto the same devices, and gradients of the "
                "replicated part are gathered by threads in each process on top of DDP's own all-reduce.",
                "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.encoder = nn.DataParallel(Encoder())\n\nmodel = DDP(Net().cuda(), device_ids=[local_rank])",
                "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.encoder = Encoder()\n\nmodel = DDP(Net().cuda(), device_ids=[local_rank])",
                "No fix: the part may rely on DataParallel's scatter; call it directly once the whole model is in DDP.",
            ),
        ),
        Rule(
            "DDP536",
            "per-process-path",
            "warning",
            "`{value}` gives each process its own value, and every process names a file or a directory with it "
            "(`{path}`): the processes write to different places; draw it on the main process and share it "
            "with `dist.broadcast_object_list`, or derive it from the arguments",
            doc=_doc(
                "In a script that starts a process group, finds a random number, a UUID or a timestamp that names "
                "a file, a directory or a writer's log directory that every process creates or writes. A value "
                "drawn under a rank condition, or passed through a broadcast, is the same on every process and "
                "is not reported. Convert reports the same value in a DataParallel script (DDP423).",
                "Every process draws its own value, so each makes its own run directory: the main process "
                "writes the logs and checkpoints in one, and the others' directories stay empty, or hold "
                "their copies of what they write.",
                "stamp = time.strftime(\"%Y%m%d-%H%M%S\")\nrun_dir = os.path.join(\"runs\", stamp)\n"
                "os.makedirs(run_dir, exist_ok=True)",
                "shared = [time.strftime(\"%Y%m%d-%H%M%S\")]\ndist.broadcast_object_list(shared)  # rank 0's value\n"
                "run_dir = os.path.join(\"runs\", shared[0])\nos.makedirs(run_dir, exist_ok=True)",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP537",
            "unknown-writer-on-every-process",
            "warning",
            "`{call}` comes from another file and its name says it writes (a progress bar, a log, a "
            "checkpoint), and every process calls it: if it only writes, call it on the main process only "
            "(`if dist.get_rank() == 0:`); if it reaches a collective, guard its writes inside it instead",
            doc=_doc(
                "In a script that starts a process group, finds a call, as a statement and on every process, of "
                "a function imported from another file whose name says it writes: `progress_bar`, "
                "`save_checkpoint`, `log_metrics`. A name that says it picks its process (`save_on_master`) is "
                "not reported. `dp2ddp check DIR` reads the project's own functions where they are defined "
                "instead (DDP501). Convert reports the same calls in a DataParallel script (DDP422).",
                "Check cannot see inside it. If it writes, every process writes: progress lines print once per "
                "process, and several processes write one checkpoint file at once.",
                "from utils import save_checkpoint\n\nsave_checkpoint(model.module.state_dict(), \"last.pt\")",
                "from utils import save_checkpoint\n\nif dist.get_rank() == 0:\n"
                "    save_checkpoint(model.module.state_dict(), \"last.pt\")",
                "No fix: a guard must never hold a collective, and only a reader of the helper can see what it reaches.",
            ),
        ),
        Rule(
            "DDP538",
            "writer-on-every-process",
            "warning",
            "`{writer}` is created on every process ({how}){where}: create it on the main process only "
            "(`... if dist.get_rank() == 0 else None`) and take what other code reads from it (its path, its "
            "log directory) from where the writer got it",
            doc=_doc(
                "In a script that starts a process group, finds a writer (a SummaryWriter, a wandb or visdom "
                "run) that every process creates, reported where code other than its writes first reads it, or "
                "at its creation; and a file opened on `os.devnull` off the main process that code other than its "
                "writes reads. Convert creates a writer on every process this way when such code reads it, and "
                "says so (DDP418).",
                "A SummaryWriter creates its event file, and its default log directory named by the time, when "
                "it is built: each process leaves its own, and TensorBoard shows one run per process. A file "
                "opened on `os.devnull` is another file off the main process: its name and directory are "
                "`/dev`'s there, and what is built from them differs between processes.",
                "writer = SummaryWriter()\ncheckpoint = os.path.join(writer.log_dir, \"model.pt\")",
                "log_dir = os.path.join(\"runs\", args.name)\n"
                "writer = SummaryWriter(log_dir) if dist.get_rank() == 0 else None\n"
                "checkpoint = os.path.join(log_dir, \"model.pt\")",
                "No fix: the writer is left as it was.",
            ),
        ),
        Rule(
            "DDP545",
            "shared-file-written-by-every-process",
            "warning",
            "every process saves to `{path}` and then loads it back: another process may be writing the file at "
            "that moment, or have written it last, so a process can read a torn file; save on the main process "
            "only (`if dist.get_rank() == 0:`), then call `dist.barrier()` before the load",
            doc=_doc(
                "In a script that starts a process group, finds a `torch.save` that every process runs (no rank "
                "guard) to a path every process spells alike (a literal, or names, attributes and f-strings of "
                "them that never read the rank), followed in the same function by a `torch.load` of that path "
                "with no barrier between them. A path that includes the rank (`f\"ckpt_{rank}.pt\"`) is each "
                "process's own and is not reported; nor is a path this file cannot see, such as a parameter.",
                "Every process opens the same file for writing, truncating it, and writes its copy. A process "
                "that reaches the load first reads a file another process is still writing, or has just "
                "truncated: the load fails with a corrupt-archive error on some runs, or, worse, returns what "
                "another process saved.",
                "torch.save(model.module.state_dict(), \"best.pt\")\nmodel.module.load_state_dict(torch.load("
                "\"best.pt\", map_location=device))",
                "if dist.get_rank() == 0:\n    torch.save(model.module.state_dict(), \"best.pt\")\ndist.barrier()  "
                "# every process waits for the main process's file\nmodel.module.load_state_dict(torch.load("
                "\"best.pt\", map_location=device))",
                "No fix: where the barrier goes depends on what else the guarded code does, and a barrier "
                "must never sit under a rank guard.",
            ),
        ),
        Rule(
            "DDP539",
            "device-from-variable-in-ddp",
            "warning",
            "device `{device}` comes from a variable this file does not bind to the process's own GPU: under "
            "DDP each process must use its own, or every process lands on the one `{device}` names; make sure "
            "`{device}` is this process's local rank, or use `\"cuda\"` after `torch.cuda.set_device(local_rank)`",
            doc=_doc(
                "In a DDP script, finds `.to(x)`, `.cuda(x)` and `torch.cuda.set_device(x)` where `x` is a config "
                "value, an attribute or a variable whose value this file never binds to the local rank "
                "(`torch.device(\"cuda\", local_rank)`, `f\"cuda:{local_rank}\"`) or to a device every process "
                "resolves to its own (`\"cuda\"`, `\"cpu\"`). It is the device convert reports as DDP213 and "
                "leaves as it was.",
                "A config written for DataParallel names one GPU (`DEVICE: cuda:0`). Read by every DDP process, "
                "it puts all of them on that GPU: NCCL refuses two processes on one device, or the GPUs are "
                "shared and the others sit idle.",
                "DEVICE = cfg.DEVICE\nmodel = DDP(model.to(DEVICE), device_ids=[local_rank])",
                "torch.cuda.set_device(local_rank)\nmodel = DDP(model.to(\"cuda\"), device_ids=[local_rank])",
                "No fix: the line is left as it was.",
            ),
        ),
        Rule(
            "DDP540",
            "training-batches-not-split",
            "warning",
            "training batches come from `{source}`, which this file makes whole on every process: every process "
            "trains on the same data, so the run is no faster than one process and each step averages W copies "
            "of one batch; build a DataLoader over the data with a DistributedSampler, or take this process's "
            "share (`[dist.get_rank()::dist.get_world_size()]`)",
            doc=_doc(
                "In a script that starts a process group and trains a DDP model, finds a training loop (one that "
                "calls `backward()`) whose batches come from code of the same file that makes them without "
                "regard to the process: a list of tensors, a comprehension, a generator function, an iterator "
                "class, a function that slices a batch out of tensors. The batches are found as convert finds "
                "them (DDP317). Batches from another module (`build_loader(cfg)`), from a parameter, from code "
                "that reads the rank or the world size, or drawn at random are not reported: they may be split, "
                "or differ per process, and the file does not say.",
                "DDP averages the gradients of the processes. If every process sees the same batch, the average "
                "is one process's gradient: the run is no faster than a single GPU, and the learning rate tuned "
                "for a global batch of W shares now meets one share repeated W times.",
                "def batches(x, y, size):\n    for i in range(0, len(x), size):\n        yield x[i:i + size], y[i:i + size]\n\n"
                "for epoch in range(epochs):\n    for xb, yb in batches(x, y, 32):\n        loss_fn(model(xb), yb).backward()",
                "dataset = TensorDataset(x, y)\nsampler = DistributedSampler(dataset)\n"
                "loader = DataLoader(dataset, batch_size=32 // dist.get_world_size(), sampler=sampler)\n"
                "for epoch in range(epochs):\n    sampler.set_epoch(epoch)\n    for xb, yb in loader:\n"
                "        loss_fn(model(xb), yb).backward()",
                "No fix: how to split the data is the script's choice.",
            ),
        ),
        Rule(
            "DDP541",
            "plateau-stepped-under-rank-condition",
            "warning",
            "`{scheduler}` (ReduceLROnPlateau) steps under a rank condition, so only the processes that pass it "
            "lower their learning rate and the replicas drift apart: step it on every process, on a value "
            "averaged over processes",
            doc=_doc(
                "In a DDP script, finds `step(value)` of a ReduceLROnPlateau inside `if rank == 0:` or another "
                "condition only some processes pass. The same detection makes convert warn DDP420.",
                "The scheduler lowers the learning rate of the optimizer of the process that steps it. The "
                "other processes keep the old rate, so from that epoch on the processes apply different "
                "updates to what DDP assumes are identical replicas, and the models drift apart silently.",
                "if dist.get_rank() == 0:\n    val_loss = evaluate(model.module, val_loader)\n    scheduler.step(val_loss)",
                "val_loss = torch.tensor(evaluate(model.module, val_loader))  # on every process\n"
                "dist.all_reduce(val_loss)\nscheduler.step(val_loss.item() / dist.get_world_size())",
                "No fix: the call is left as it was.",
            ),
        ),
        Rule(
            "DDP542",
            "schedule-counts-one-shard",
            "warning",
            "`{counter}` counts this process's share of the batch and sets the learning rate: the schedule sees "
            "1/world_size of the data, and processes whose shares differ get different rates and drift apart; "
            "add the count summed over processes (`dist.all_reduce`)",
            doc=_doc(
                "In a DDP script that splits its data, finds a counter incremented from the batch in a "
                "training loop (`tokens += (y >= 0).sum()`) whose value flows into a learning rate. The same "
                "detection makes convert warn DDP421. An increment summed over processes is not reported.",
                "Each process counts only the samples of its own share, and shares differ from batch to batch "
                "(padding, masks). The learning rates computed from the counts then differ between processes, "
                "and so do the replicas; the warm-up or decay also sees 1/world_size of the data it was tuned for.",
                "self.tokens += (y >= 0).sum()\nlr = base_lr * min(1.0, self.tokens / warmup_tokens)",
                "count = (y >= 0).sum()\ndist.all_reduce(count)\nself.tokens += count\n"
                "lr = base_lr * min(1.0, self.tokens / warmup_tokens)",
                "No fix: the counter is left as it was.",
            ),
        ),
        Rule(
            "DDP543",
            "stop-decided-per-process",
            "warning",
            "this decision to stop reads `{value}`, which each process computes from its own share of the "
            "training data: processes may stop in different epochs, and the others then wait forever in the "
            "next one; average it over processes (dist.all_reduce) before deciding",
            doc=_doc(
                "In a DDP script that splits its data, finds a `break` or `return` after a training loop whose "
                "condition reads a value that loop left per process: a list of its losses, the last batch's "
                "loss. The same detection makes convert warn DDP424.",
                "Under DDP every process must run the same number of steps. A process that stops early leaves "
                "the others waiting in their next backward pass, until the NCCL timeout kills the run.",
                "for epoch in range(epochs):\n    for x, y in train_loader:\n        losses.append(loss.item())\n"
                "    if np.mean(losses) < target:\n        break",
                "    mean = torch.tensor(np.mean(losses))\n    dist.all_reduce(mean)\n"
                "    if mean.item() / dist.get_world_size() < target:\n        break",
                "No fix: the condition is left as it was.",
            ),
        ),
        Rule(
            "DDP544",
            "evaluation-of-a-split-training-loader",
            "warning",
            "`{loader}` is split between the processes and also trains (its batches reach a backward()); this "
            "evaluation over it keeps `{held}` for this process's share only, and nothing gathers it: reduce it "
            "over the processes (dist.all_reduce of its sum and count) before it is reported, or evaluate on a "
            "loader of its own",
            doc=_doc(
                "In a DDP script, finds an evaluation loop (no `backward()`) over a loader named for validation "
                "that is split between processes and also feeds a training step, such as DARTS's validation "
                "queue, which trains the architecture and measures accuracy, where the evaluation keeps a result "
                "no reduction covers. The same detection makes convert warn DDP326.",
                "The training needs the loader split, or every process would draw the same batches. Split, the "
                "evaluation sees 1/world_size of the set, and the accuracy rank 0 reports, compares or saves is "
                "its own share's.",
                "for step, (x, y) in enumerate(valid_queue):\n    top1.update(accuracy(model(x), y), x.size(0))\nprint(top1.avg)",
                "stats = torch.tensor([top1.sum, top1.cnt], dtype=torch.float64)\ndist.all_reduce(stats)\n"
                "print(stats[0].item() / stats[1].item())",
                "No fix: the evaluation is left as it was.",
            ),
        ),
    )
}


# A warning convert prints and leaves in its output names a hazard of the converted script: check must find it
# there, under one of these codes (the agreement test holds every golden fixture to it).
REPORTED_IN_OUTPUT: dict[str, frozenset[str]] = {
    "DDP206": frozenset({"DDP510"}),
    "DDP209": frozenset({"DDP510"}),
    "DDP213": frozenset({"DDP539"}),
    "DDP108": frozenset({"DDP501"}),
    "DDP208": frozenset({"DDP533"}),
    "DDP334": frozenset({"DDP534"}),
    "DDP216": frozenset({"DDP501", "DDP545"}),
    "DDP303": frozenset({"DDP504"}),
    "DDP319": frozenset({"DDP515"}),
    "DDP320": frozenset({"DDP516"}),
    "DDP309": frozenset({"DDP530"}),
    "DDP318": frozenset({"DDP532"}),
    "DDP336": frozenset({"DDP531"}),
    "DDP402": frozenset({"DDP502", "DDP503"}),
    "DDP201": frozenset({"DDP535"}),
    "DDP203": frozenset({"DDP535"}),
    "DDP401": frozenset({"DDP501"}),
    "DDP418": frozenset({"DDP538"}),
    "DDP422": frozenset({"DDP537"}),
    "DDP423": frozenset({"DDP536"}),
    "DDP326": frozenset({"DDP544"}),
    "DDP420": frozenset({"DDP541"}),
    "DDP421": frozenset({"DDP542"}),
    "DDP424": frozenset({"DDP543"}),
}
# DDP111 passes on a warning of check's about the output: check finds it there, whichever it is.
REPORTED_IN_OUTPUT["DDP111"] = frozenset(code for code, rule in RULES.items() if is_check_rule(code) and rule.severity == "warning")
# Check findings in a converted script that a convert warning of NOT_IN_OUTPUT explains, where check finds them:
# a batch kept per process for a pair loss (DDP342) leaves in-batch negatives per process (DDP516) by design.
EXPLAINED_IN_OUTPUT: dict[str, frozenset[str]] = {"DDP342": frozenset({"DDP516"})}
# Convert warnings that leave no hazard in the converted script for check to find, and why.
NOT_IN_OUTPUT: dict[str, str] = {
    "DDP430": (
        "a DDP script may test on every process for a folder every process makes on purpose (a per-process scratch "
        "folder); only against the DataParallel run, where one process tested before it made the folder, is the "
        "test a race"
    ),
    "DDP428": (
        "a shell command a DDP script runs on every process may be meant for every process (a per-process scratch "
        "folder, a query of the GPU); only against the DataParallel run, which ran it once, is it a question"
    ),
    "DDP101": "the hazard is in the script that imports this module: a module with no entry point starts no "
    "process group by design, and whether its importer starts one cannot be seen from the module (converted as "
    "a project, the importer gets the setup and convert does not warn)",
    "DDP311": (
        "an unscaled summed loss is a consistent objective under DDP whose gradient is 1/world_size of the one "
        "DataParallel computed, as if the learning rate were smaller: a difference from the original run, not a "
        "hazard of the DDP script, and convert could not even tell whether the class sums over the batch"
    ),
    "DDP312": (
        "the converted loader keeps the batch per process, which matches the per-step sizes read from the same "
        "value and is how DDP scripts ordinarily load: only against the DataParallel run is the global batch "
        "world_size times larger"
    ),
    "DDP323": (
        "check takes a sampler the script gives its loader as the script's split of the data (DDP504 fires only "
        "without one), the same assumption convert states about a sampler told the rank, so no more can be "
        "established in the output"
    ),
    "DDP331": (
        "under `--batch per-process` each process keeps DataParallel's batch; a learning rate tuned for it is an "
        "ordinary choice in a DDP script, and only against the DataParallel run is it unscaled"
    ),
    "DDP332": (
        "a cyclic schedule's bounds tuned for the per-process batch are an ordinary choice in a DDP script; only "
        "against the DataParallel run, whose global batch was world_size times smaller, are they unscaled"
    ),
    "DDP337": (
        "a table each process updates from its own samples is ordinary state of a DDP script (a per-process "
        "memory bank is a design choice); only against the DataParallel run, which updated one table from the "
        "whole batch, does it differ, and check cannot tell which the script meant"
    ),
    "DDP342": (
        "the converted loader keeps the batch per process, so each process's pair loss sees as many samples as "
        "DataParallel's did; pairing within each process's batch is how DDP scripts ordinarily mine pairs, and "
        "only against the DataParallel run is the global batch world_size times larger"
    ),
    "DDP427": (
        "a DDP script that prints the main process's own number (its share's loss, or a mean over its own steps) "
        "makes an ordinary choice; only against the DataParallel run, which printed the whole batch's, does the "
        "number differ, and check cannot tell which number the script meant to print"
    ),
    "DDP306": (
        "this file builds no DataLoader and runs no training loop: the data is loaded by code in another file, "
        "which convert neither read nor changed, so nothing in the converted file iterates data for check to "
        "judge; convert or check the file that builds the loader"
    ),
}


def section(doc: str, heading: str) -> str | None:
    """The text under ``## heading`` in a rule's ``doc``, stripped; ``None`` when there is no such section.

    A fenced block is kept whole even if a line in it starts with ``## `` (a
    Python comment can), so only headings outside fences end a section.
    """
    found: list[str] | None = None
    fenced = False
    for line in doc.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            if found is not None:
                break
            if line[3:].strip() == heading:
                found = []
            continue
        if found is not None:
            found.append(line)
    return None if found is None else "\n".join(found).strip()


def values_of(code: str, message: str) -> dict[str, str] | None:
    """The values that filled ``code``'s message template to give ``message``; ``None`` when it does not fit."""
    template = RULES[code].message
    pattern, seen = "", set()
    for literal, field_name, _, _ in string.Formatter().parse(template):
        pattern += re.escape(literal)
        if field_name is None:
            continue
        pattern += f"(?P={field_name})" if field_name in seen else f"(?P<{field_name}>.*?)"
        seen.add(field_name)
    match = re.fullmatch(pattern, message, re.DOTALL)
    return match.groupdict() if match else None
