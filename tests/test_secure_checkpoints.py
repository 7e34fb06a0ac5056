from __future__ import annotations

from dp2ddp.codemods.secure_checkpoints import (
    LOCAL_DEVICE_HELPER_SOURCE,
    SecureCheckpointsCommand,
)
from libcst.codemod import CodemodTest

HELPER = LOCAL_DEVICE_HELPER_SOURCE.strip("\n").replace("\n", "\n            ")


class SecureCheckpointsTest(CodemodTest):
    TRANSFORM = SecureCheckpointsCommand

    def test_module_level_load_of_a_saved_file(self) -> None:
        """Should wait before a module-level load of a file the script saves (kuangliu/pytorch-cifar's shape)."""
        before = """
            import torch

            net = wrap_ddp(net)
            if args.resume:
                checkpoint = torch.load("./checkpoint/ckpt.pth")
            torch.save(state, "./checkpoint/ckpt.pth")
        """
        after = f"""
            import torch
            import torch.distributed as dist


            {HELPER}


            net = wrap_ddp(net)
            if args.resume:
                dist.barrier()
                checkpoint = torch.load("./checkpoint/ckpt.pth", map_location=local_device())
            torch.save(state, "./checkpoint/ckpt.pth")
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_barrier_goes_before_an_if_that_asks_for_the_file(self) -> None:
        """A process that asked `isfile` before the main process wrote would skip the load: wait before the `if`."""
        before = """
            import os
            import torch

            net = wrap_ddp(net)
            torch.save(state, "ckpt.pth")
            if os.path.isfile("ckpt.pth"):
                checkpoint = torch.load("ckpt.pth")
        """
        after = f"""
            import os
            import torch
            import torch.distributed as dist


            {HELPER}


            net = wrap_ddp(net)
            torch.save(state, "ckpt.pth")
            dist.barrier()
            if os.path.isfile("ckpt.pth"):
                checkpoint = torch.load("ckpt.pth", map_location=local_device())
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_barrier_in_a_function_that_imports_dist_after_it(self) -> None:
        """Should not read the function's own `dist` before its local import binds it."""
        before = """
            import torch

            def resume(net):
                torch.save(net.state_dict(), "w.pt")
                state = torch.load("w.pt", map_location="cpu")
                import torch.distributed as dist
                return state

            net = wrap_ddp(net)
        """
        after = """
            import torch
            import torch.distributed

            def resume(net):
                torch.save(net.state_dict(), "w.pt")
                torch.distributed.barrier()
                state = torch.load("w.pt", map_location="cpu")
                import torch.distributed as dist
                return state

            net = wrap_ddp(net)
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_load_at_module_level_outside_any_if(self) -> None:
        """Should put the barrier right before a bare module-level load, the statement whose parent is the module."""
        before = """
            import torch

            net = wrap_ddp(net)
            torch.save(net.state_dict(), "w.pt")
            state = torch.load("w.pt", map_location="cpu")
        """
        after = """
            import torch
            import torch.distributed as dist

            net = wrap_ddp(net)
            torch.save(net.state_dict(), "w.pt")
            dist.barrier()
            state = torch.load("w.pt", map_location="cpu")
        """
        self.assertCodemod(before, after, expected_warnings=[])
