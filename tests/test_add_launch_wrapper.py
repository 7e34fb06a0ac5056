from __future__ import annotations

import textwrap

from dp2ddp.codemods.add_launch_wrapper import (
    SETUP_HELPER_SOURCE,
    AddLaunchWrapperCommand,
)
from libcst.codemod import CodemodTest

# Indented to sit inside the dedented test strings below.
HELPER = textwrap.indent(SETUP_HELPER_SOURCE.strip("\n"), " " * 12).lstrip()
IMPORTS = "import atexit\n            import os\n            import random\n            import subprocess\n            import sys\n            import torch.distributed as dist"


class AddLaunchWrapperTest(CodemodTest):
    TRANSFORM = AddLaunchWrapperCommand

    def test_setup_goes_first_in_the_main_guard(self) -> None:
        """Should call setup_distributed() at the start of the __main__ entry."""
        before = """
            import torch


            def main():
                model = wrap_ddp(Net())


            if __name__ == "__main__":
                main()
        """
        after = f"""
            import torch
            {IMPORTS}


            {HELPER}


            def main():
                model = wrap_ddp(Net())


            if __name__ == "__main__":
                setup_distributed()
                main()
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_top_level_script_sets_up_after_the_imports(self) -> None:
        """Should set up right after the imports when training code runs at module level."""
        before = """
            import torch

            model = torch.nn.DataParallel(Net())
            for epoch in range(3):
                train(epoch)
        """
        after = f"""
            import torch
            {IMPORTS}


            {HELPER}


            setup_distributed()


            model = torch.nn.DataParallel(Net())
            for epoch in range(3):
                train(epoch)
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_module_level_loader_in_a_guarded_script_sets_up_after_the_imports(self) -> None:
        """Should set up before module-level code that needs the process group, even with a guard."""
        before = """
            import torch

            trainloader = torch.utils.data.DataLoader(trainset, batch_size=8 // dist.get_world_size())
            model = wrap_ddp(Net())

            if __name__ == "__main__":
                train()
        """
        after = f"""
            import torch
            {IMPORTS}


            {HELPER}


            setup_distributed()


            trainloader = torch.utils.data.DataLoader(trainset, batch_size=8 // dist.get_world_size())
            model = wrap_ddp(Net())

            if __name__ == "__main__":
                train()
        """
        self.assertCodemod(before, after, expected_warnings=[])

    def test_library_module_without_entry_point_is_reported(self) -> None:
        """Should not set up on import of a module that only defines functions."""
        before = """
            import torch

            def build():
                return torch.nn.DataParallel(Net())
        """
        self.assertCodemod(
            before,
            before,
            expected_warnings=[
                '4:12: DDP101 no `if __name__ == "__main__":` entry or top-level training code, so no '
                "process-group setup was added here: the script that imports this one must start the process "
                "group before it builds the model, and be launched with torchrun: convert the folder as one "
                "project (`dp2ddp convert DIR`, or `convert ENTRY.py --project`), which adds the setup to the "
                "entry point that imports this module, or add it there by hand (`dp2ddp explain DDP101` shows the lines)"
            ],
        )

    def test_converted_script_is_stable(self) -> None:
        """Should do nothing, since setup_distributed is already there."""
        before = f"""
            import torch
            {IMPORTS}


            {HELPER}


            if __name__ == "__main__":
                setup_distributed()
                model = wrap_ddp(Net())
        """
        self.assertCodemod(before, before, expected_warnings=[])

    def test_user_ddp_script_is_skipped(self) -> None:
        """Should do nothing, since the script already joins a process group."""
        before = """
            import torch.distributed as dist

            if __name__ == "__main__":
                dist.init_process_group("nccl")
                model = torch.nn.DataParallel(model)
        """
        self.assertCodemod(
            before,
            before,
            expected_skip=True,
            expected_warnings=["4:5: DDP001 already uses torch.distributed (init_process_group); left unchanged"],
        )
