"""Imports the codemods queue are added as LibCST's own AddImportsVisitor adds them, byte for byte."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, ImportItem

from dp2ddp.codemods._chain import add_imports_at_top

HEADERS = {
    "no imports": "x = 1\n",
    "a docstring, then imports": '"""Train."""\nimport os\nfrom torch.nn.parallel import DataParallel\n\nx = 1\n',
    "a comment above the first statement": "import torch\n# the model\nmodel = 1\n",
    "a star import": "from torch.nn.parallel import *\nimport torch.distributed as d\n",
    "an import after other code is not at the top": "x = 1\nfrom torch.nn.parallel import DataParallel\n",
    "two aliases of one module": "import torch.distributed as dist\nimport torch.distributed as td\ny = 2\n",
    "a future import": "from __future__ import annotations\nimport os\n",
    "two imports on one line": "import os; import sys\nz = 3\n",
}
REQUESTS = {
    "a module": [ImportItem("os")],
    "an alias": [ImportItem("torch.distributed", alias="dist")],
    "names from an imported module": [ImportItem("torch.nn.parallel", "DistributedDataParallel"), ImportItem("torch.nn.parallel", "DataParallel")],
    "a renamed name": [ImportItem("torch.nn.parallel", "DistributedDataParallel", "DDP")],
    "a mix, in the order asked": [
        ImportItem("torch.distributed", alias="td"),
        ImportItem("sys"),
        ImportItem("torch.utils.data.distributed", "DistributedSampler"),
        ImportItem("__future__", "annotations"),
        ImportItem("os"),
    ],
}


@pytest.mark.parametrize("header", HEADERS.values(), ids=HEADERS.keys())
@pytest.mark.parametrize("requests", REQUESTS.values(), ids=REQUESTS.keys())
def test_imports_are_added_as_libcst_adds_them(header: str, requests: list[ImportItem]) -> None:
    """Should give the code AddImportsVisitor gives, so a converted file does not depend on which added them."""
    module = cst.parse_module(textwrap.dedent(header))
    context = CodemodContext()
    for item in requests:
        AddImportsVisitor.add_needed_import(context, item.module_name, item.obj_name, item.alias)
    expected = AddImportsVisitor(context).transform_module(module).code
    assert add_imports_at_top(module, requests).code == expected
