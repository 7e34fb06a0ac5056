from __future__ import annotations

import textwrap

from dp2ddp.codemods.replace_data_parallel import (
    WRAP_HELPER_SOURCE,
    ReplaceDataParallelCommand,
)
from libcst.codemod import CodemodTest

# Indented to sit inside the dedented test strings below.
HELPER = textwrap.indent(WRAP_HELPER_SOURCE.strip("\n"), " " * 12).lstrip()


class ReplaceDataParallelTest(CodemodTest):
    TRANSFORM = ReplaceDataParallelCommand

    def test_torch_nn_spelling(self) -> None:
        """Should swap torch.nn.DataParallel for the DDP wrap helper."""
        before = """
            import torch

            model = torch.nn.DataParallel(Net())
        """
        after = f"""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            model = wrap_ddp(Net())
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_nn_alias_parallel_spelling_and_imported_name(self) -> None:
        """Should resolve nn.DataParallel, torch.nn.parallel.DataParallel and an imported alias alike."""
        before = """
            import torch
            import torch.nn as nn
            from torch.nn import DataParallel as DP

            a = nn.DataParallel(a)
            b = torch.nn.parallel.DataParallel(b)
            c = DP(c)
        """
        after = f"""
            import torch
            import torch.nn as nn
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            a = wrap_ddp(a)
            b = wrap_ddp(b)
            c = wrap_ddp(c)
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_device_arguments_and_chained_moves(self) -> None:
        """Should drop device_ids/output_device and absorb .cuda()/.to(); dim is kept."""
        before = """
            import torch

            a = torch.nn.DataParallel(a, device_ids=[0, 1], output_device=0).cuda()
            b = torch.nn.DataParallel(b, [0, 1]).to(device)
            c = torch.nn.DataParallel(c, None, None, 1)
        """
        after = f"""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            a = wrap_ddp(a)
            b = wrap_ddp(b)
            c = wrap_ddp(c, dim=1)
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_conditional_wrap_leaves_its_if(self) -> None:
        """Should move a wrap out of a GPU-count check: every process must wrap the model."""
        before = """
            import torch

            def build():
                device = "cuda" if torch.cuda.is_available() else "cpu"
                model = Net().to(device)
                if torch.cuda.device_count() > 1:
                    print("Let's use", torch.cuda.device_count(), "GPUs!")
                    model = torch.nn.DataParallel(model)
                if device == "cuda":
                    model2 = torch.nn.DataParallel(model2).cuda()
                return model
        """
        after = f"""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            def build():
                device = "cuda" if torch.cuda.is_available() else "cpu"
                model = Net().to(device)
                if torch.cuda.device_count() > 1:
                    print("Let's use", torch.cuda.device_count(), "GPUs!")
                model = wrap_ddp(model)
                model2 = wrap_ddp(model2)
                return model
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_conditional_wrap_with_else_leaves_the_file_as_it_was(self) -> None:
        """Should convert nothing when a wrap cannot leave its condition: some processes would not wrap.

        The `else` binds `fallback`, which the wrapping branch does not, so it cannot simply be dropped.
        """
        before = """
            import torch

            if args.multi_gpu:
                model = torch.nn.DataParallel(model)
            else:
                model = model.cuda()
                fallback = True
        """
        self.assertCodemod(
            before,
            before,
            expected_warnings=[
                "4:13: DDP204 the DataParallel wrap cannot leave its condition (an `else` that binds other names or "
                "leaves the block, code after it in the `if` that uses the model, or an `elif`); the file is "
                "left as it was: every process must wrap the model, so make the wrap unconditional by hand"
            ],
        )

    def test_isinstance_still_holds_for_the_ddp_model(self) -> None:
        """Should make isinstance(m, nn.DataParallel) accept DistributedDataParallel too."""
        before = """
            import torch.nn as nn

            model = nn.DataParallel(model)
            state = model.module.state_dict() if isinstance(model, nn.DataParallel) else model.state_dict()
        """
        after = f"""
            import torch.nn as nn
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            model = wrap_ddp(model)
            state = model.module.state_dict() if isinstance(model, (nn.DataParallel, DistributedDataParallel)) else model.state_dict()
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_first_gpu_literals_become_this_process_gpu(self) -> None:
        """Should turn "cuda:0" and .cuda(0) into this process's GPU, with a note."""
        before = """
            import torch

            device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
            model = torch.nn.DataParallel(model).to(device)
            x = x.cuda(0)
        """
        after = f"""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            model = wrap_ddp(model)
            x = x.cuda()
        """
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                "3:23: DDP205 `\"cuda:0\"` would put every process on GPU 0; now `\"cuda\"`, this process's GPU",
                "5:5: DDP205 `.cuda(0)` would put every process on GPU 0; now `.cuda()`, this process's GPU",
            ],
        )

    def test_data_parallel_first_gpu_becomes_this_process_gpu(self) -> None:
        """Should turn every device built from the first of DataParallel's device_ids into this process's GPU,
        and leave the list's other entries and other lists alone."""
        before = """
            import torch

            a = torch.device("cuda:{}".format(args.gpus[0]))
            b = "cuda:%d" % args.gpus[0]
            c = "cuda:" + str(args.gpus[0])
            d = torch.device("cuda", args.gpus[0])
            e = torch.zeros(2, device=args.gpus[0])
            f = x.to(args.gpus[0])
            g = f"cuda:{args.gpus[1]}"
            h = f"cuda:{other[0]}"
            model = torch.nn.DataParallel(model, device_ids=args.gpus)
        """
        after = f"""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            a = torch.device("cuda")
            b = "cuda"
            c = "cuda"
            d = torch.device("cuda", torch.cuda.current_device())
            e = torch.zeros(2, device=torch.cuda.current_device())
            f = x.to(torch.cuda.current_device())
            g = f"cuda:{{args.gpus[1]}}"
            h = f"cuda:{{other[0]}}"
            model = wrap_ddp(model)
        """
        first = "is the first GPU DataParallel was given, where it gathered the outputs; under DDP every process would use it: now"
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                f"3:18: DDP246 `\"cuda:{{}}\".format(args.gpus[0])` {first} `\"cuda\"`, this process's GPU",
                f"4:5: DDP246 `\"cuda:%d\" % args.gpus[0]` {first} `\"cuda\"`, this process's GPU",
                f"5:5: DDP246 `\"cuda:\" + str(args.gpus[0])` {first} `\"cuda\"`, this process's GPU",
                f"6:26: DDP246 `args.gpus[0]` {first} `torch.cuda.current_device()`, this process's GPU",
                f"7:27: DDP246 `args.gpus[0]` {first} `torch.cuda.current_device()`, this process's GPU",
                f"8:10: DDP246 `args.gpus[0]` {first} `torch.cuda.current_device()`, this process's GPU",
            ],
        )

    def test_a_gpu_parameter_called_with_0_gets_the_local_rank(self) -> None:
        """Should pass the local rank where `train(0, args)` pinned every process to GPU 0, with a note."""
        before = """
            import torch


            def train(gpu, args):
                torch.cuda.set_device(gpu)
                model = torch.nn.DataParallel(Net().cuda(gpu))


            train(0, args)
        """
        after = f"""
            import torch
            import os
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            def train(gpu, args):
                torch.cuda.set_device(gpu)
                model = wrap_ddp(Net().cuda(gpu))


            train(int(os.environ.get("LOCAL_RANK", "0")), args)
        """
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                "9:7: DDP217 `train` picks its GPU with `gpu`, and this call passes `0`, which would put every "
                'process on one GPU; it now passes `int(os.environ.get("LOCAL_RANK", "0"))`, this process\'s local rank',
            ],
        )

    def test_a_gpu_parameter_set_from_an_unknown_value_leaves_the_file_as_it_was(self) -> None:
        """Should convert nothing: `args.gpu` is the same on every process, which would share one GPU."""
        before = """
            import torch


            def train(gpu, args):
                torch.cuda.set_device(gpu)
                model = torch.nn.DataParallel(Net())


            train(args.gpu, args)
        """
        self.assertCodemod(
            before,
            before,
            expected_warnings=[
                "9:7: DDP218 `train` picks its GPU with `gpu`, but convert cannot establish that every call "
                "passes GPU 0 or this process's own GPU (a call passes `args.gpu`); the file is left as it was: "
                'pass `int(os.environ["LOCAL_RANK"])` for `gpu` at every call, then run convert again',
            ],
        )

    def test_a_gpu_index_of_another_function_is_not_the_parameter(self) -> None:
        """Should do nothing to `show(0)`: its `gpu` is another binding than the one that picks the GPU."""
        before = """
            import torch


            def show(gpu):
                print("gpu", gpu)


            model = torch.nn.DataParallel(Net())
            show(0)
        """
        after = f"""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            def show(gpu):
                print("gpu", gpu)


            model = wrap_ddp(Net())
            show(0)
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_submodule_functional_and_subclass_are_reported_not_changed(self) -> None:
        """Should leave DataParallel on a sub-module, functional data_parallel and subclasses alone."""
        before = """
            import torch.nn as nn

            model.features = nn.DataParallel(model.features)
            y = nn.parallel.data_parallel(model, x)

            class Encoder(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body = nn.DataParallel(nn.Linear(2, 2))

            class MyDataParallel(nn.DataParallel):
                pass
        """
        self.assertCodemod(
            before,
            before,
            expected_warnings=[
                "3:18: DDP201 DataParallel wraps a sub-module; left unchanged: wrap the whole model in DistributedDataParallel instead",
                "9:21: DDP201 DataParallel wraps a sub-module; left unchanged: wrap the whole model in DistributedDataParallel instead",
                "4:5: DDP202 functional nn.parallel.data_parallel spreads this call over the GPUs; the file is left as "
                "it was: under DDP each process would still scatter it over every GPU, and the module it runs is wrapped "
                "by no DDP, so its gradients would never be averaged: call the module directly and wrap the whole model "
                "in nn.DataParallel where it is built, then run convert again",
                "11:7: DDP203 subclass of DataParallel `MyDataParallel` cannot be converted; left unchanged",
            ],
        )

    def test_visible_devices_in_script_is_reported(self) -> None:
        """Should warn that CUDA_VISIBLE_DEVICES set in the script applies to every process."""
        before = """
            import os
            import torch

            os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
            model = torch.nn.DataParallel(model)
        """
        after = f"""
            import os
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
            model = wrap_ddp(model)
        """
        self.assertCodemod(
            before,
            after,
            expected_warnings=[
                "4:1: DDP206 the script sets CUDA_VISIBLE_DEVICES: every process sees the same GPUs, "
                "so start no more processes than it lists, or set it in the shell instead"
            ],
        )

    def test_shadowing_parameter_is_not_data_parallel(self) -> None:
        """Should do nothing, since DataParallel here is a local parameter, not torch's."""
        before = """
            import torch

            def wrap(model, DataParallel):
                return DataParallel(model)
        """
        self.assertCodemod(before, before, expected_skip=True)

    def test_already_ddp_is_skipped(self) -> None:
        """Should do nothing, since the script already has its own DDP path."""
        before = """
            import torch

            if args.distributed:
                model = torch.nn.parallel.DistributedDataParallel(model)
            else:
                model = torch.nn.DataParallel(model)
        """
        self.assertCodemod(
            before,
            before,
            expected_skip=True,
            expected_warnings=["4:13: DDP001 already uses torch.distributed (DistributedDataParallel); left unchanged"],
        )

    def test_no_data_parallel_is_skipped(self) -> None:
        """Should do nothing, since there is no DataParallel to replace."""
        self.assertCodemod("import torch\nmodel = Net()\n", "import torch\nmodel = Net()\n", expected_skip=True)

    def test_converted_output_is_stable(self) -> None:
        """Should change nothing in its own output, and still run to report the hazards left."""
        after = f"""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            model = wrap_ddp(Net())
        """
        self.assertCodemod(after, after)

    def test_cast_after_the_wrap_leaves_the_file_as_it_was(self) -> None:
        """Should convert nothing: DDP would hook the float32 parameters, and the cast replaces them.

        The wrapper runs a forward before the cast, so the wrap cannot move after it.
        """
        before = """
            import torch

            model = torch.nn.DataParallel(net)
            print(model(x))
            model.half()
        """
        self.assertCodemod(
            before,
            before,
            expected_warnings=[
                "5:1: DDP210 `model.half()` casts the parameters after the DataParallel wrap; the file is left "
                "as it was: DDP hooks the parameters it is given, so cast before the wrap"
            ],
        )

    def test_wraps_on_both_branches_convert_in_place(self) -> None:
        """Should convert both wraps where they are: every path through the `if` wraps the model."""
        before = """
            import torch

            if torch.cuda.is_available():
                net = torch.nn.DataParallel(net).cuda()
            else:
                net = torch.nn.DataParallel(net)
        """
        after = f"""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            if torch.cuda.is_available():
                net = wrap_ddp(net)
            else:
                net = wrap_ddp(net)
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_gpu_conditional_expression_becomes_the_wrap(self) -> None:
        """Should drop `if gpu else model`: under DDP every process wraps."""
        before = """
            import torch

            model = torch.nn.DataParallel(model) if torch.cuda.device_count() > 1 else model
        """
        after = f"""
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel


            {HELPER}


            model = wrap_ddp(model)
        """
        self.assertCodemod(before, after, expected_warnings=[])
