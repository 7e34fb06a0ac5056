"""Facts about a folder of modules: one training program spread over several files.

From each entry point (an ``if __name__ == "__main__":`` block or training
code at module level) the project's own imports are followed: absolute and
relative imports, packages, and ``from x import *`` where ``x`` is the
project's. Nothing outside the folder is followed. Then:

- a module that wraps a model in DataParallel (or, converted already, in
  ``wrap_ddp``) is converted, and every entry point that imports it, directly
  or not, starts the process group;
- a function that returns the wrapped model (a factory) is a wrap in every
  module that calls it, so the caller's loaders, loops and saves are
  converted around it;
- a function of another module that writes (saves, prints, logs, makes
  directories) and is called from a converted module is guarded where that
  is safe: inside the function when every caller is converted, at the
  converted callers otherwise.

The import graph is read with ``ast``, which costs a fraction of a LibCST
parse; only the modules that hold a writer are analysed with LibCST, once.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import libcst as cst
import libcst.matchers as m

from . import names
from .collates import cuts_fixed_groups
from .deep import run_deep
from .effects import is_rank_guard, opens_for_writing, under_rank_guard
from .losses import pairing_losses, referenced
from .module import Analysis
from .parameters import is_model_class, skipping_classes, unfreezing_methods, unregistered_tensor_methods
from .paths import sys_path_folders
from .roles import ModuleRole, Site
from .steps import Flag, dotted, repeated_forwards, step_flags
from .syntax import code_of

# Spellings of a wrap: DataParallel itself, and the helper a conversion wraps with.
_WRAP_NAMES = frozenset({"DataParallel", names.WRAP_HELPER})


# A dotted name in a string: `"processor.recognition.REC_Processor"`.
DOTTED_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
# `"train.log"`, `"config.yaml"`: a file's name, not a module's, though it reads as a dotted name.
FILE_SUFFIXES = frozenset({
    "log", "txt", "json", "yaml", "yml", "py", "pth", "pt", "pkl", "pickle", "csv", "tsv", "npy", "npz", "png", "jpg",
    "jpeg", "gif", "h5", "hdf5", "tar", "gz", "zip", "md", "cfg", "ini", "dat", "ckpt", "bin", "onnx", "mat", "xml",
    "html", "out", "err", "wav", "mp4", "avi", "toml", "lock", "state", "model", "weights", "params", "tfevents",
})
PACKAGE_PREFIX = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\.$")
_DOTTED_STRING = re.compile(r"""['"]([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)['"]""")
# A package named by a string that a module name is added to at run time: `"models.trainer." + name`,
# `f"models.{name}"`. Every module of that package may be the one imported.
_PACKAGE_PREFIX = re.compile(r"""(?:['"]|f['"])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\.(?:['"]|\{)""")


@dataclass
class _Module:
    name: str
    path: Path
    tree: ast.Module
    source: str
    # Bound name -> (module it refers to, attribute or None for the module itself, qualified spelling).
    bindings: dict[str, tuple[str, str | None, str]] = field(default_factory=dict)
    imports: set[str] = field(default_factory=set)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    wraps: list[ast.Call] = field(default_factory=list)
    loaders: list[ast.Call] = field(default_factory=list)
    import_nodes: list[ast.Import | ast.ImportFrom] = field(default_factory=list)
    # Every call whose function is a name or a dotted name, with that spelling.
    calls: list[tuple[ast.Call, str]] = field(default_factory=list)
    factories: dict[str, ast.Call] = field(default_factory=dict)
    # Classes that keep a running average as `sum`, `count` and `avg`, with an `update` method.
    meters: set[str] = field(default_factory=set)
    # Classes whose `train()` sets parameters' requires_grad to False.
    freezing: set[str] = field(default_factory=set)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    # Model classes whose forward may leave a sub-module without a gradient, with which.
    skipping: dict[str, str] = field(default_factory=dict)
    # Classes that subclass DataParallel (`DataParallelWithCallback`), with their definitions.
    subclasses: dict[str, ast.ClassDef] = field(default_factory=dict)
    # What `from x import *` of project modules binds here to modules outside the project (`nn` -> `torch.nn`), and
    # the names imported by name that such a module re-exports (`from dataset import DataLoader`).
    star_bindings: dict[str, str] = field(default_factory=dict)
    # Calls whose value is thrown away (`save_checkpoint(...)` alone on its line), by id: only such a call can be
    # guarded where it is made, since other processes would get None for a value that is used.
    discarded: set[int] = field(default_factory=set)
    # Wraps in the `__main__` block of a module the project imports: its self-test, not part of any program.
    self_test_wraps: int = 0
    entry: bool = False

    @cached_property
    def steppers(self) -> dict[str, tuple[Flag, ...]]:
        """Functions (``train_step``) and methods (``LossCompute.__call__``) that take one training step each time
        they run, directly or through another of them, each with the flags that choose whether it does."""
        units: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = dict(self.functions)
        for class_name, cls in self.classes.items():
            units |= {f"{class_name}.{s.name}": s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        found: dict[str, tuple[Flag, ...]] = {}
        while True:
            more = {}
            for name, unit in units.items():
                owner = name.rpartition(".")[0]

                def steps(spelled: str, owner: str = owner) -> bool:
                    return spelled in found or bool(owner) and f"{owner}.{spelled.removeprefix('self.')}" in found

                if name not in found and (flags := step_flags(unit, steps)) is not None:
                    more[name] = flags
            if not more:
                return found
            found |= more

    @cached_property
    def draws(self) -> set[str]:
        """Functions (``random_point_dropout``) and methods (``MixUp_AUG.aug``) that draw from Python's, NumPy's or
        torch's shared random state and train nothing: handed a batch in a training step, they draw its noise."""
        units: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = dict(self.functions)
        for class_name, cls in self.classes.items():
            units |= {f"{class_name}.{s.name}": s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        found = set()
        for name, unit in units.items():
            inside = range(unit.lineno, (unit.end_lineno or unit.lineno) + 1)
            spelled = [text for call, text in self.calls if call.lineno in inside]
            if any(_RANDOM_DRAW.match(text) for text in spelled) and not any(text.endswith(".backward") for text in spelled):
                found.add(name)
        return found

    @cached_property
    def batch_parameters(self) -> dict[str, tuple[tuple[str, int, int], ...]]:
        """Functions and classes whose training loop draws its batches from what they are handed: by name, each
        parameter as (name, position among the positional parameters, the loop's line).

        ``def train_epoch(model, loader, ...)`` looping ``for x, y in loader:`` around a ``backward()``; a class
        whose ``__init__`` binds ``self.data_iter = data_iter`` and one of whose methods loops over it. The caller
        chooses the data: what it hands in must be split.
        """
        found: dict[str, tuple[tuple[str, int, int], ...]] = {}
        for name, function in self.functions.items():
            positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
            trained = [(p, i, line) for i, p in enumerate(positional) if (line := _trains_over(function, p)) is not None]
            if trained:
                found[name] = tuple(trained)
        for name, cls in self.classes.items():
            methods = [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
            init = next((s for s in methods if s.name == "__init__"), None)
            if init is None:
                continue
            positional = [a.arg for a in (*init.args.posonlyargs, *init.args.args)][1:]
            bound = {
                target.attr: node.value.id
                for node in ast.walk(init) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                for target in node.targets
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
            }  # fmt: skip
            trained = []
            for attribute, parameter in bound.items():
                if parameter not in positional:
                    continue
                line = next((ln for method in methods if (ln := _trains_over(method, f"self.{attribute}")) is not None), None)
                if line is not None:
                    trained.append((parameter, positional.index(parameter), line))
            if trained:
                found[name] = tuple(trained)
        return found

    @cached_property
    def fixed_group_collates(self) -> frozenset[str]:
        """Functions that cut the batch they are handed into a fixed number of groups (a collate_fn)."""
        return frozenset(name for name, function in self.functions.items() if cuts_fixed_groups(function))

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def _encloses(function: ast.FunctionDef | ast.AsyncFunctionDef, node: ast.expr) -> bool:
    return function.lineno <= node.lineno <= (function.end_lineno or function.lineno)


# Calls that yield the items of what they are handed: a loop over one walks the handed object's batches. Other calls
# make something new of it (`get_loader(dataset, ...)` builds, and splits, a loader of its own).
_PASSES_ITEMS_ON = frozenset({"enumerate", "iter", "tqdm", "zip", "islice", "cycle", "chain", "trange"})


def _trains_over(function: ast.FunctionDef | ast.AsyncFunctionDef, spelled: str) -> int | None:
    """The line of a loop of ``function`` that iterates ``spelled`` (a name or ``self.x``), directly or through a
    name bound to a call over it (``bar = tqdm(self.data_iter)``), around a ``backward()``; None where none does."""
    attribute = spelled.removeprefix("self.") if spelled.startswith("self.") else None
    names = set() if attribute is not None else {spelled}

    def iterates(node: ast.expr) -> bool:
        """Whether ``node`` is the object itself or a call that yields its items (``enumerate(...)``, ``tqdm(...)``),
        not a fact of it (``range(self.cfg.n_epochs)``) or something made from it (``get_loader(dataset, ...)``)."""
        if isinstance(node, ast.Name):
            return node.id in names
        if isinstance(node, ast.Attribute):
            return attribute is not None and node.attr == attribute and isinstance(node.value, ast.Name) and node.value.id == "self"
        if isinstance(node, ast.Call) and (dotted(node.func) or "").rpartition(".")[2] in _PASSES_ITEMS_ON:
            return any(iterates(a) for a in node.args)
        return False

    assigns = [n for n in ast.walk(function) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)]
    for _ in range(2):
        names |= {t.id for node in assigns if iterates(node.value) for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(function):
        if not isinstance(node, (ast.For, ast.AsyncFor)) or not iterates(node.iter):
            continue
        if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward" for n in ast.walk(node)):
            return node.lineno
    return None


# A draw from Python's, NumPy's or torch's shared random state (not a seed, a state or a generator of its own).
_RANDOM_DRAW = re.compile(
    r"^((random|np\.random|numpy\.random)\.(?!(seed|getstate|setstate|get_state|set_state|Random|RandomState|"
    r"default_rng|Generator|SeedSequence)$)\w+|torch\.(rand\w*|bernoulli|normal|multinomial))$"
)
# A random transform: torchvision's `transforms.RandomCrop(...)`, or a project's own `RandomScale(...)`;
# not a `RandomDataset` or a `RandomIdentitySampler`.
_RANDOM_TRANSFORM = re.compile(r"(^|\.)Random[A-Z]\w*(?<!Dataset)(?<!Sampler)(?<!Loader)(?<!State)(?<!Generator)$")


def _external_names(tree: ast.Module) -> dict[str, str]:
    """What each imported name of ``tree`` stands for: ``torchvision`` for ``import torchvision``,
    ``torchvision.datasets`` for ``from torchvision import datasets``."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found[alias.asname or alias.name.partition(".")[0]] = alias.name if alias.asname else alias.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return found


def _all_functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _draws_augmentation(module: _Module, call: ast.Call, spelled: str) -> bool:
    """A random transform built, or a draw per item in a dataset class (a method other than ``__init__`` of a class
    with ``__getitem__``) from the shared random state: an augmentation."""
    if _RANDOM_TRANSFORM.search(spelled):
        return True
    if not _RANDOM_DRAW.match(spelled) or any(k.arg == "generator" for k in call.keywords):
        return False
    return any(
        isinstance(method, ast.FunctionDef)
        and method.name != "__init__"
        and method.lineno <= call.lineno <= (method.end_lineno or method.lineno)
        for definition in module.classes.values()
        if any(isinstance(s, ast.FunctionDef) and s.name == "__getitem__" for s in definition.body)
        for method in definition.body
    )


class Project:
    """The modules of one folder and what crosses between them."""

    def __init__(self, root: Path, sources: Mapping[Path, str]) -> None:
        self.root = root
        self.modules: dict[str, _Module] = {}
        self.by_path: dict[Path, _Module] = {}
        # Every file's module name, parsed or not: what imports resolve against.
        self._names = {path: _module_name(path.relative_to(root)) for path in sources}
        self._sources = sources
        self._importers: dict[Path, set[Path]] = {}
        # Whether Python can parse each file read so far: one it cannot never runs, so it calls nothing.
        self._parses_as_python: dict[Path, bool] = {}
        # Imports resolve against normalised spellings, so that a folder named `.`, `./` or `../x` (the
        # way users type it) finds the same modules as its absolute path: `run.py` sits in `.`.
        self._by_text = {os.path.normpath(path): path for path in sources}
        self._search_roots = self._path_additions(sources)
        self._search_bases = [str(root), *(str(folder) for folder in self._search_roots)]
        for path in sorted(self._relevant(sources)):
            try:
                tree = ast.parse(sources[path])
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                # The file's own conversion names the error (too deep for Python: the last two).
                self._parses_as_python[path] = False
                continue
            module = _Module(self._names[path], path, tree, sources[path])
            self.modules.setdefault(module.name, module)
            self.by_path[path] = module
        for module in self.by_path.values():
            self._index(module)
        for module in self.by_path.values():
            self._bind(module)
        self._read_parameters()
        # A script no module imports, whose top level calls into the project, runs as a program too
        # (`trainer = Trainer(model); trainer.train()` at module level, as a notebook exported to a script).
        imported = set().union(*(m.imports for m in self.by_path.values()))
        for module in self.by_path.values():
            if not module.entry and module.name not in imported and _calls_at_top_level(module):
                module.entry = True
        self.wrapping = {m.name for m in self.by_path.values() if m.wraps}
        self.reach = {m.name: self.reachable(m.name) for m in self.by_path.values() if m.entry}
        self._training_reach: dict[str, bool] = {}
        self._trains_in: dict[str, bool] = {}
        training = {entry for entry, reached in self.reach.items() if reached & self.wrapping}
        # Modules that build the DataLoaders of a program that trains a wrapped model: split there.
        reached = set().union(*(self.reach[entry] for entry in training))
        self.loading = {name for name in reached if self.modules[name].loaders} - self.wrapping
        # Every entry point that imports a converted module starts the process group, so the
        # converted code always finds one, also in a script that only evaluates or loads data.
        # A module the project imports, whose `__main__` block only loads data (a data module's self-test), is
        # no program of the project: its loaders are split for the programs that import it, and it is left so.
        self.drivers = {
            entry for entry, reached in self.reach.items()
            if reached & (self.wrapping | self.loading)
            and (reached & self.wrapping or self.modules[entry].path not in getattr(self, "_importers", {}))
        }  # fmt: skip
        self.converted = self.wrapping | self.loading | self.drivers
        # Modules that wrap a model only in the self-test of their `__main__` block: left as they were.
        self.self_tests = {m.path for m in self.by_path.values() if m.self_test_wraps and m.name not in self.converted}
        self._analyses: dict[str, Analysis] = {}

    def _relevant(self, sources: Mapping[Path, str]) -> set[Path]:
        """The files that can take part in a conversion, found from their text before any parse.

        A folder none of whose files mentions a wrap has nothing to convert. Otherwise the
        files that import a wrapping file, directly or not, and everything those import, are
        read; a large library tree of which one corner uses DataParallel is not parsed whole.
        """
        wrapping = {path for path, source in sources.items() if _WRAP_CALL.search(source)}
        if not wrapping:
            return set()
        imports = {path: self._quick_imports(path, source) for path, source in sources.items()}
        importers: dict[Path, set[Path]] = {}
        for path, targets in imports.items():
            for target in targets:
                importers.setdefault(target, set()).add(path)
        self._importers = importers
        self._imports = imports
        upstream = _closure(wrapping, importers)
        # What the programs that train a wrapped model import: their loaders, writers and meters.
        programs = {path for path in upstream if path not in importers or _MAIN_GUARD_TEXT.search(sources[path])}
        return upstream | _closure(programs | wrapping, imports)

    def _quick_imports(self, path: Path, source: str) -> set[Path]:
        found: set[Path] = set()
        for match in _IMPORT_LINE.finditer(source):
            if match.group("module") is not None:
                stem = match.group("module")
                level = len(stem) - len(stem.lstrip("."))
                dotted = stem.lstrip(".")
                found |= self._resolve_path(path, dotted, level)
                for name in re.findall(r"[A-Za-z_]\w*", match.group("names")):
                    found |= self._resolve_path(path, f"{dotted}.{name}" if dotted else name, level)
            else:
                for dotted in re.findall(r"[A-Za-z_][\w.]*", match.group("plain").split(" as ")[0]):
                    found |= self._resolve_path(path, dotted, 0)
        for dotted in _DOTTED_STRING.findall(source):  # a module named by a string, imported at run time
            if dotted.rpartition(".")[2].lower() in FILE_SUFFIXES:
                continue
            found |= self._resolve_path(path, dotted, 0) or self._resolve_path(path, dotted.rpartition(".")[0], 0)
        for dotted in _PACKAGE_PREFIX.findall(source):
            found |= self._package_modules(path, dotted)
        return found

    def _package_modules(self, path: Path, dotted: str) -> set[Path]:
        """The modules of the project's package ``dotted``, as an import from ``path`` would find it."""
        init = self._resolve_path(path, dotted, 0)
        folder = next((os.path.dirname(str(p)) for p in init if os.path.basename(str(p)) == "__init__.py"), None)
        if folder is None:
            return set()
        return {p for text, p in self._by_text.items() if os.path.dirname(text) == folder}

    def _resolve_path(self, path: Path, dotted: str, level: int) -> set[Path]:
        # Strings, not Paths: this runs for every import of every file of a large tree.
        parts = "/".join(p for p in dotted.split(".") if p)
        if level:
            base = os.path.dirname(str(path))
            for _ in range(level - 1):
                base = os.path.dirname(base)
            bases = [base]
        else:
            bases = [os.path.dirname(str(path)), *self._search_bases]
        for base in bases:
            stem = os.path.join(base, parts)
            for candidate in (f"{stem}.py" if parts else None, os.path.join(stem, "__init__.py")):
                found = self._by_text.get(os.path.normpath(candidate)) if candidate is not None else None
                if found is not None:
                    return {found}
        return set()

    def _path_additions(self, sources: Mapping[Path, str]) -> list[Path]:
        """Folders of the project that its code puts on ``sys.path``, so that absolute imports find modules there.

        Each file's additions are read from its own folder and from the project's root.
        """
        folders = {parent for path in sources for parent in path.parents if parent.is_relative_to(self.root)}
        found: list[Path] = []
        for path, source in sources.items():
            for start in (path.parent, self.root):
                for joined in sys_path_folders(source, start):
                    if joined in folders and joined not in found and joined != self.root:
                        found.append(joined)
        return found

    def site(self, module: _Module, node: ast.AST) -> Site:
        return Site(module.path.relative_to(self.root).as_posix(), getattr(node, "lineno", 1))

    # -- reading one module -----------------------------------------------------------

    def _index(self, module: _Module) -> None:
        """One walk of the tree: its functions, imports, calls and returns, and whether it is an entry point.

        In a module other modules of the project import, the ``__main__`` block is a self-test
        (a dataset's demo loop, a model's shape check): its wraps and loaders are no part of the
        programs that import the module, so they do not make it a wrapping or a loading module.
        """
        demo: list[range] = []
        for statement in module.tree.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                module.functions[statement.name] = statement
            elif isinstance(statement, ast.ClassDef):
                module.classes[statement.name] = statement
                if _is_meter(statement):
                    module.meters.add(statement.name)
                if freezes_in_train(statement):
                    module.freezing.add(statement.name)
                if any(dotted(base) is not None and dotted(base).rpartition(".")[2] == "DataParallel" for base in statement.bases):
                    module.subclasses[statement.name] = statement
            elif _is_main_guard(statement) or (isinstance(statement, (ast.For, ast.While)) and _trains(statement)):
                module.entry = True
                if _is_main_guard(statement) and module.path in self._importers:
                    demo.append(range(statement.lineno, (statement.end_lineno or statement.lineno) + 1))
        returns: list[ast.Return] = []
        # What the methods of model classes hold: a DataParallel there wraps a part of the model (its file's own
        # analysis leaves it, DDP201), such as a pretrained network wrapped only to load its checkpoint.
        in_models = {id(n) for cls in module.classes.values() if is_model_class(cls) for n in ast.walk(cls)}
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                module.import_nodes.append(node)
            elif isinstance(node, ast.Call):
                spelled = dotted(node.func)
                if spelled is None:
                    continue
                module.calls.append((node, spelled))
                name = spelled.rpartition(".")[2]
                if any(node.lineno in lines for lines in demo):
                    module.self_test_wraps += name in _WRAP_NAMES
                    continue
                # A DataParallel-like class (`DataParallelWithCallback`) wraps as DataParallel does: its
                # module is refused (DDP229, DDP234), and holds back the programs that reach it.
                if (name in _WRAP_NAMES or names.is_data_parallel_like(name)) and not _wraps_part_of_a_model(node) and id(node) not in in_models:
                    module.wraps.append(node)
                elif name == "DataLoader":
                    module.loaders.append(node)
            elif isinstance(node, ast.Return) and node.value is not None:
                returns.append(node)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                module.discarded.add(id(node.value))
        for name, function in module.functions.items():
            inside = range(function.lineno, (function.end_lineno or function.lineno) + 1)
            wraps = [call for call in module.wraps if call.lineno in inside]
            if wraps and any(r.lineno in inside for r in returns):
                module.factories[name] = wraps[0]
        # A function that returns what a factory of its module returns (`create_model(opt)` returning
        # `define_net(opt)`, which wraps) hands out the wrapped model too.
        changed = True
        while changed:
            changed = False
            for name, function in module.functions.items():
                if name in module.factories:
                    continue
                made = next((c for c in ast.walk(function) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                             and c.func.id in module.factories and _returns_the_value_of(function, c)), None)
                if made is not None:
                    module.factories[name] = module.factories[made.func.id]  # type: ignore[attr-defined]
                    changed = True

    def _read_parameters(self) -> None:
        """Which model classes may leave a sub-module without a gradient: a class built from another module's
        class that does is read once that one is known, so the modules are read until nothing changes."""
        models = {name for module in self.by_path.values() for name, cls in module.classes.items() if is_model_class(cls)}
        known: dict[str, str] = {}
        changed = True
        while changed:
            changed = False
            for module in self.by_path.values():
                found = skipping_classes(list(module.classes.values()), known, models)
                module.skipping.update(found)
                known.update(found)
                changed |= bool(found)

    def _bind(self, module: _Module) -> None:
        """What each import binds, once every module's functions are known (``from x import *``)."""
        for node in ast.walk(module.tree):
            # `import_class("processor.recognition.REC_Processor")`, `importlib.import_module("models.resnet")`:
            # a module of the project named by a string is imported at run time all the same.
            if (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED_NAME.match(node.value)
                and node.value.rpartition(".")[2].lower() not in FILE_SUFFIXES
            ):  # fmt: skip
                named = self._resolve(module, node.value, 0) or self._resolve(module, node.value.rpartition(".")[0], 0)
                if named is not None and named != module.name:
                    module.imports.add(named)
            # `loadmodule("models.trainer." + name)`, `f"models.{arch}"`: any module of that package.
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and PACKAGE_PREFIX.match(node.value):
                package = self._resolve(module, node.value.rstrip("."), 0)
                if package is not None:
                    module.imports |= {
                        name for name in self.modules
                        if name.startswith(f"{package}.") and "." not in name[len(package) + 1 :] and name != module.name
                    }  # fmt: skip
        for node in module.import_nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = self._resolve(module, alias.name, 0)
                    if target is None:
                        continue
                    module.imports.add(target)
                    if alias.asname:
                        module.bindings[alias.asname] = (target, None, alias.name)
                    else:
                        # `import a.b` binds `a`; `a.b.f()` is read through the dotted spelling.
                        for depth in range(1, alias.name.count(".") + 2):
                            prefix = ".".join(alias.name.split(".")[:depth])
                            resolved = self._resolve(module, prefix, 0)
                            if resolved is not None:
                                module.bindings.setdefault(prefix, (resolved, None, prefix))
                continue
            spelled = "." * node.level + (node.module or "")
            target = self._resolve(module, node.module or "", node.level)
            if target is None:
                # A folder without `__init__.py` (a namespace package): its modules are still imported.
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}" if node.module else alias.name
                    submodule = self._resolve(module, dotted, node.level)
                    if submodule is not None:
                        module.imports.add(submodule)
                        module.bindings[alias.asname or alias.name] = (submodule, None, f"{spelled}.{alias.name}")
                continue
            module.imports.add(target)
            for alias in node.names:
                if alias.name == "*":
                    module.bindings.update(
                        (function, (target, function, f"{spelled}.{function}")) for function in self._public_functions(target)
                    )
                    for bound, qualified in self._outside_bindings(target).items():
                        module.star_bindings.setdefault(bound, qualified)
                    continue
                qualified = f"{spelled}.{alias.name}" if spelled != "." * node.level else f"{spelled}{alias.name}"
                submodule = self._resolve(module, f"{node.module}.{alias.name}" if node.module else alias.name, node.level)
                if submodule is not None:
                    module.imports.add(submodule)
                    module.bindings[alias.asname or alias.name] = (submodule, None, qualified)
                else:
                    module.bindings[alias.asname or alias.name] = (target, alias.name, qualified)
                    # `from dataset import DataLoader` where dataset.py imports it from torch: torch's DataLoader.
                    outside = self._outside_bindings(target, every_name=True).get(alias.name)
                    if outside is not None:
                        module.star_bindings.setdefault(alias.asname or alias.name, outside)

    def _outside_bindings(self, target: str, seen: frozenset[str] = frozenset(), every_name: bool = False) -> dict[str, str]:
        """What a star import of project module ``target`` binds to modules outside the project, from its
        top-level imports: `import torch.nn as nn` binds `nn` to `torch.nn`, `import torch.nn` binds `torch`;
        and what its own star imports of project modules bind (`from .transforms import *` in a package)."""
        module = self.modules.get(target)
        if module is None or target in seen:
            return {}
        found: dict[str, str] = {}
        exported: set[str] | None = None
        for statement in module.tree.body:
            if isinstance(statement, ast.ImportFrom) and any(a.name == "*" for a in statement.names):
                inner = self._resolve(module, statement.module or "", statement.level)
                if inner is not None:
                    for name, qualified in self._outside_bindings(inner, seen | {target}).items():
                        found.setdefault(name, qualified)
            elif isinstance(statement, ast.Import):
                for alias in statement.names:
                    if self._resolve(module, alias.name, 0) is None:
                        head = alias.name.partition(".")[0]
                        found[alias.asname or head] = alias.name if alias.asname else head
            elif isinstance(statement, ast.ImportFrom) and not statement.level and statement.module:
                if self._resolve(module, statement.module, 0) is None:
                    found.update((a.asname or a.name, f"{statement.module}.{a.name}") for a in statement.names if a.name != "*")
            elif isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets):
                if isinstance(statement.value, (ast.List, ast.Tuple)):
                    exported = {e.value for e in statement.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        if every_name:
            return found  # a name imported by name is bound whatever `__all__` says
        # `__all__` decides what a star import binds; without it, every name without a leading underscore.
        return {name: q for name, q in found.items() if (name in exported if exported is not None else not name.startswith("_"))}

    def _public_functions(self, target: str, seen: frozenset[str] = frozenset()) -> list[str]:
        module = self.modules.get(target)
        if module is None or target in seen:
            return []
        # `from models import *` in a package re-exports what its __init__ defines, and what the __init__'s own
        # star imports bind (`from utils.experiment import *`), as Python's star import does without `__all__`.
        found = [name for name in [*module.functions, *module.classes] if not name.startswith("_")]
        for node in module.tree.body:
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                inner = self._resolve(module, node.module or "", node.level)
                if inner is not None:
                    found += [name for name in self._public_functions(inner, seen | {target}) if name not in found]
        return found

    def _resolve(self, module: _Module, dotted: str, level: int) -> str | None:
        """The project module an import names, or None for anything outside the folder (or not read)."""
        found = self._resolve_path(module.path, dotted, level)
        name = self._names[found.pop()] if found else None
        return name if name in self.modules else None

    def reachable(self, name: str) -> set[str]:
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            if current in seen or current not in self.modules:
                continue
            seen.add(current)
            todo += self.modules[current].imports
        return seen

    # -- what crosses modules -----------------------------------------------------------

    def calls(self, module: _Module) -> Iterator[tuple[ast.Call, str, str, str]]:
        """Each call of another project module's function: (call, module, function, qualified spelling)."""
        for node, spelled in module.calls:
            if spelled in module.bindings and module.bindings[spelled][1] is not None:
                target, function, qualified = module.bindings[spelled]
                yield node, *self._defined_in(target, function), qualified  # type: ignore[misc]
                continue
            # `utils.save(...)`, `reidlib.data.DataManager(...)`: the longest prefix bound to a module,
            # then its submodules, attribute by attribute.
            parts = spelled.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                prefix = ".".join(parts[:cut])
                if prefix in module.bindings and module.bindings[prefix][1] is None:
                    target, _, qualified = module.bindings[prefix]
                    for part in parts[cut:-1]:
                        inner = self._resolve(self.modules[target], f"{part}", 1) if self.modules[target].is_package else None
                        if inner is None:
                            break
                        target = inner
                    else:
                        yield node, *self._defined_in(target, parts[-1]), f"{qualified}.{'.'.join(parts[cut:])}"
                    break

    def _defined_in(self, target: str, name: str, hops: int = 3) -> tuple[str, str]:
        """Where ``name`` of module ``target`` is defined: a package re-exports it from a module of its own."""
        module = self.modules.get(target)
        while module is not None and hops and name not in module.functions and name in module.bindings:
            source, attribute, _ = module.bindings[name]
            if attribute is None or source not in self.modules:
                break
            module, name, hops = self.modules[source], attribute, hops - 1
        return (module.name if module is not None else target), name

    def _analysis(self, name: str) -> Analysis | None:
        if name not in self._analyses:
            try:
                self._analyses[name] = Analysis(cst.parse_module(self.modules[name].source))
            except cst.ParserSyntaxError:
                return None
        return self._analyses[name]

    def check_roles(self) -> dict[Path, ModuleRole]:
        """For ``check``: each module's calls of other project modules' functions that write on every process,
        and the options' defaults, which a loader module dividing ``args.batch_size`` reads (DDP531).

        The other project functions it calls are known too (``project_calls``):
        check judges them where they are defined, never by their names.
        """
        roles: dict[Path, ModuleRole] = {}
        program_options: dict[frozenset[str], tuple[tuple[str, int], ...]] = {}
        for module in self.by_path.values():
            option_defaults = self._program_options(module.name, program_options)
            found: dict[str, Site] = {}
            called: set[str] = set()
            for _, target, function, qualified in self.calls(module):
                if target != module.name:
                    called.add(qualified)
                if target != module.name and qualified not in found:
                    written = self.writes(target, function, unguarded=True)
                    if written is not None:
                        found[qualified] = written
            if found or called or option_defaults:
                roles[module.path] = ModuleRole(
                    guarded_calls=tuple(found.items()), project_calls=frozenset(called), option_defaults=option_defaults
                )
        return roles

    def writes(self, target: str, function: str, unguarded: bool = False, depth: int = 2) -> Site | None:
        """The first line where ``function`` of ``target`` writes: a save, print, log or new directory;
        with ``unguarded``, only a write every process makes (not under a rank condition).

        Read with room for deep nesting; a module nested past that is read as writing nothing, and its own
        conversion says why.
        """
        try:
            return run_deep(self._writes, target, function, unguarded, depth)
        except RecursionError:
            return None

    def _writes(self, target: str, function: str, unguarded: bool, depth: int) -> Site | None:
        analysis = self._analysis(target)
        if analysis is None:
            return None
        # A function, or a class whose methods write (`Visualizer(opt)`, then `visualizer.print_losses(...)`).
        definition = next(
            (s for s in analysis.module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef)) and s.name.value == function), None
        )
        if definition is None:
            return None
        # Files only the main process really opens: whatever else writes into them elsewhere writes into os.devnull.
        main_only = {
            code_of(a.targets[0].target) for a in analysis.within(definition.body, cst.Assign)
            if len(a.targets) == 1 and isinstance(a.value, cst.Call) and _devnull_off_main(analysis, a.value)
        }  # fmt: skip
        # A class's own methods (`self.close()` in `__del__`) write where their bodies do, which are read here too.
        methods = {f.name.value for f in analysis.within(definition.body, cst.FunctionDef)} if isinstance(definition, cst.ClassDef) else set()
        for call in analysis.within(definition.body, cst.Call):
            if unguarded and (under_rank_guard(analysis, call) or _devnull_off_main(analysis, call)):
                continue
            if m.matches(call.func, m.Attribute(value=m.Name("self"), attr=m.Name(m.MatchIfTrue(lambda name: name in methods)))):
                continue
            if unguarded and main_only and analysis.reads(call) & main_only:
                continue  # `f.write(...)`, `os.fsync(f.fileno())`, `tofile(f)`: into os.devnull off the main process
            helper = call.func.value if isinstance(call.func, cst.Name) else None
            if depth and helper in self.modules[target].functions and helper != function:
                # `save_debug_images` writes through `save_batch_heatmaps` of the same module.
                inner = self._writes(target, helper, unguarded, depth - 1)
                if inner is not None:
                    return inner
            if analysis.effects.is_side_effect(call) or opens_for_writing(analysis, call):
                line = analysis.position(call).start.line
                return Site(self.modules[target].path.relative_to(self.root).as_posix(), line)
        return None

    def makes_directories(self, target: str, function: str) -> bool:
        """Whether ``function`` of ``target`` makes a directory in a way that fails where it exists
        (``if not os.path.exists(d): os.makedirs(d)``): run by every process, all but the first can find it made
        between the test and the call."""
        analysis = self._analysis(target)
        definition = next(
            (s for s in analysis.module.body if isinstance(s, cst.FunctionDef) and s.name.value == function), None
        ) if analysis is not None else None
        return definition is not None and any(
            analysis.effects.fails_on_a_made_directory(call) for call in analysis.within(definition.body, cst.Call)  # type: ignore[union-attr]
        )

    def only_writes(self, target: str, function: str, depth: int = 2) -> bool:
        """Whether ``function`` of ``target`` does nothing but write: prints, logs, saves, files it opens
        itself; so the other processes miss nothing when a call of it runs on the main process only.

        A function that also assigns a global, changes an object it was handed or a module's own (a config
        merged from a file), or calls what does not only write, is no such function.
        """
        analysis = self._analysis(target)
        definition = next(
            (s for s in analysis.module.body if isinstance(s, cst.FunctionDef) and s.name.value == function), None
        ) if analysis is not None else None
        if analysis is None or definition is None:
            return False
        local = {
            code_of(t.target) for a in analysis.within(definition.body, cst.Assign) for t in a.targets if isinstance(t.target, cst.Name)
        } | {
            code_of(w.asname.name) for w in analysis.within(definition.body, cst.WithItem)
            if w.asname is not None and isinstance(w.asname.name, cst.Name)
        }  # fmt: skip
        if analysis.within(definition.body, cst.Global) or analysis.within(definition.body, cst.Nonlocal):
            return False

        def call_only_writes(call: cst.Call) -> bool:
            if analysis.effects.is_side_effect(call) or opens_for_writing(analysis, call):
                return True
            if isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) and call.func.value.value in local:
                return True  # `f.write(...)`, `store.create_dataset(...)`: an object this function made
            helper = call.func.value if isinstance(call.func, cst.Name) else None
            return bool(depth) and helper in self.modules[target].functions and self.only_writes(target, helper, depth - 1)

        def statement_only_writes(statement: cst.CSTNode) -> bool:
            if isinstance(statement, cst.SimpleStatementLine):
                return all(small_only_writes(small) for small in statement.body)
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                return True
            if not isinstance(statement, (cst.If, cst.For, cst.While, cst.With, cst.Try)):
                return False
            if isinstance(statement, cst.With) and not all(
                isinstance(item.item, cst.Call) and call_only_writes(item.item) for item in statement.items
            ):
                return False
            blocks = [getattr(statement, field, None) for field in ("body", "orelse", "finalbody")]
            blocks += list(getattr(statement, "handlers", ()))
            return all(statement_only_writes(inner) for block in blocks if block is not None for inner in _statements(block))

        def small_only_writes(small: cst.BaseSmallStatement) -> bool:
            if isinstance(small, (cst.Pass, cst.Return, cst.Import, cst.ImportFrom, cst.Raise, cst.Assert, cst.Continue, cst.Break)):
                return True
            if isinstance(small, cst.Expr):
                return isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)) or (
                    isinstance(small.value, cst.Call) and call_only_writes(small.value)
                )
            if isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                return all(isinstance(t, (cst.Name, cst.Tuple)) and not m.findall(t, m.Attribute() | m.Subscript()) for t in targets)
            return False

        return all(statement_only_writes(s) for s in definition.body.body)

    def roles(self, helpers_module: str | None = None) -> dict[Path, ModuleRole]:
        """The role of every module the project changes, by path."""
        wraps: dict[str, list[tuple[str, Site]]] = {}
        loader_sources: dict[str, list[tuple[str, Site]]] = {}
        project_calls: dict[str, set[str]] = {}
        training_calls: dict[str, set[str]] = {}
        step_calls: dict[str, dict[str, tuple[Flag, ...]]] = {}
        batch_parameters: dict[str, dict[tuple[str, str], tuple[int, Site]]] = {}
        meters: dict[str, set[str]] = {}
        freezing: dict[str, set[str]] = {}
        subclass_wraps: dict[str, list[tuple[str, Site]]] = {}
        callers: dict[tuple[str, str], list[tuple[str, str, Site]]] = {}
        # (caller, qualified) of calls of another module's function whose value the caller uses.
        used: set[tuple[str, str]] = set()
        split_builders: dict[str, list[tuple[str, int]]] = {}
        drawing: dict[str, set[str]] = {}
        for module in self.by_path.values():
            for call, target, function, qualified in self.calls(module):
                project_calls.setdefault(module.name, set()).add(qualified)
                if self._reaches_training(target):
                    training_calls.setdefault(module.name, set()).add(qualified)
                steppers = self.modules[target].steppers
                if function in steppers:
                    step_calls.setdefault(module.name, {})[qualified] = steppers[function]
                # A class whose objects take a step when called or asked to (`LossCompute(...)`, then `compute(x, y)`).
                step_calls.setdefault(module.name, {}).update(
                    (f"{qualified}.{name.partition('.')[2]}", flags) for name, flags in steppers.items() if name.partition(".")[0] == function
                )
                for parameter, position, line in self.modules[target].batch_parameters.get(function, ()):
                    site = Site(self.modules[target].path.relative_to(self.root).as_posix(), line)
                    batch_parameters.setdefault(module.name, {})[(qualified, parameter)] = (position, site)
                drawn = self.modules[target].draws
                if target != module.name and function in drawn:
                    drawing.setdefault(module.name, set()).add(qualified)
                drawing.setdefault(module.name, set()).update(
                    f"{qualified}.{name.partition('.')[2]}" for name in drawn if target != module.name and name.partition(".")[0] == function
                )
                if function in self.modules[target].meters:
                    meters.setdefault(module.name, set()).add(qualified)
                if function in self.modules[target].freezing:
                    freezing.setdefault(module.name, set()).add(qualified)
                subclass = self.modules[target].subclasses.get(function)
                if subclass is not None and target != module.name:
                    subclass_wraps.setdefault(module.name, []).append((qualified, self.site(self.modules[target], subclass)))
                factory = self.modules[target].factories.get(function)
                if factory is not None and module.name not in self.wrapping:
                    wraps.setdefault(module.name, []).append((qualified, self.site(self.modules[target], factory)))
                    continue
                if target != module.name and (loading := self._loading_from(target)) is not None:
                    site = self.site(loading, loading.loaders[0])
                    loader_sources.setdefault(module.name, []).append((qualified, site))
                if (target, function) in self._shared_builders and target != module.name:
                    split_builders.setdefault(module.name, []).extend((qualified, p) for p in self._shared_builders[target, function])
                if target not in self.converted:
                    callers.setdefault((target, function), []).append((module.name, qualified, self.site(module, call)))
                    if id(call) not in module.discarded:
                        used.add((module.name, qualified))
        inside: dict[str, list[tuple[str, Site, tuple[Site, ...]]]] = {}
        at_call: dict[str, list[tuple[str, Site]]] = {}
        unguarded: dict[str, list[tuple[str, Site]]] = {}
        directories: dict[str, set[str]] = {}
        # First the modules that train for converted callers, to a fixed point: they are converted
        # whole, so their own calls count as converted code's in what follows.
        training: set[str] = set()
        changed = True
        while changed:
            changed = False
            converted = self.converted | training
            for (target, function), sites in sorted(callers.items()):
                if target in training or not all(caller in converted for caller, _, _ in sites):
                    continue
                if not self._unread_callers(target, function) and self._steps(self.modules[target], {function}):
                    # `train_one_epoch(model, loader, ...)` of lib/, or an engine class whose methods train, and
                    # the modules of the classes it builds on (an `Engine` base with the epoch loop and the logs).
                    training |= {target, *self._bases(self.modules[target], function)}
                    changed = True
        converted = self.converted | training
        unhandled: dict[str, set[str]] = {}
        for (target, function), sites in sorted(callers.items()):
            if target in training or not any(caller in converted for caller, _, _ in sites):
                continue
            all_converted = all(caller in converted for caller, _, _ in sites) and not self._unread_callers(target, function)
            for maker in (f for f in self._writers_within(target, function) if self.makes_directories(target, f)):
                # `utils.mkdir(d)`, now run by every process: `exist_ok=True` is right for any caller.
                directories.setdefault(target, set()).add(maker)
            written = self.writes(target, function)
            if all_converted and function in self.modules[target].classes:
                # `TrainOptions().parse()`: the writes may be in a base class of another module (BaseOptions).
                for base_module, base in self._base_classes(self.modules[target], function):
                    if base_module not in converted and (base_written := self.writes(base_module, base)) is not None:
                        inside.setdefault(base_module, []).append((base, base_written, tuple(site for _, _, site in sites)))
            if written is None:
                continue
            if all_converted:
                callers_at = tuple(site for _, _, site in sites)
                # The function, and the functions of its module it writes through (`save_debug_images` ->
                # `save_batch_heatmaps`): each is guarded where its own writes are.
                for writer in self._writers_within(target, function):
                    direct = self.writes(target, writer, depth=0)
                    if direct is not None and all(w != writer for w, _, _ in inside.get(target, [])):
                        inside.setdefault(target, []).append((writer, direct, callers_at))
            elif function in self.modules[target].classes or self._steps(self.modules[target], {function}):
                # An object whose methods write: guarding its construction would leave None on the other
                # processes; a function that runs training steps (`train_epoch(model, loader, ...)`) under a
                # guard would leave the other processes waiting in DDP's backward forever. Their writes are
                # left to the user, and reported as another file's writers are.
                for caller, qualified, _ in sites:
                    unhandled.setdefault(caller, set()).add(qualified)
            else:
                for caller, qualified, _ in sites:
                    if (caller, qualified) in used:
                        # `net = build_ssd(...)`: guarded, the other processes would get no model.
                        if caller in converted:
                            unguarded.setdefault(caller, []).append((qualified, written))
                    elif caller in converted and not self.only_writes(target, function):
                        # `cfg_from_file(path)` merges a config every process needs; under a guard only the
                        # main process would have it.
                        unguarded.setdefault(caller, []).append((qualified, written))
                    elif caller in converted:
                        at_call.setdefault(caller, []).append((qualified, written))
        program_options: dict[frozenset[str], tuple[tuple[str, int], ...]] = {}
        local_devices = self._local_devices()
        roles: dict[Path, ModuleRole] = {}
        for module in self.by_path.values():
            name = module.name
            setup_elsewhere = (name in self.wrapping or name in self.loading or name in training) and name not in self.drivers and any(
                name in self.reach[entry] for entry in self.drivers
            )
            role = ModuleRole(
                star_bindings=tuple(sorted(module.star_bindings.items())),
                imported_wraps=tuple(dict.fromkeys(wraps.get(name, ()))),
                drives=self._first_wrap(self.reach[name]) if name in self.drivers and name not in self.wrapping else None,
                setup_elsewhere=setup_elsewhere,
                evaluates_only=self._evaluates_only(name),
                guarded_functions=tuple(inside.get(name, ())),
                directory_functions=tuple(sorted(directories.get(name, ()))),
                trains=name in training,
                guarded_calls=tuple(dict.fromkeys(at_call.get(name, ()))),
                unguarded_calls=tuple(dict.fromkeys(unguarded.get(name, ()))),
                loader_sources=tuple(dict.fromkeys(loader_sources.get(name, ()))) if name in self.converted else (),
                splits_loaders=name in self.loading,
                project_calls=(
                    frozenset(project_calls.get(name, set()) - unhandled.get(name, set()))
                    if name in self.converted | set(inside) | training
                    else frozenset()
                ),
                training_calls=frozenset(training_calls.get(name, ())),
                step_calls=tuple(sorted(step_calls.get(name, {}).items())) if name in self.converted or name in training else (),
                model_classes=self._model_classes(module) if name in self.converted else frozenset(),
                drawing_calls=frozenset(drawing.get(name, ())),
                fixed_group_collates=frozenset(
                    bound for bound, (target, function, _) in module.bindings.items()
                    if function is not None and target in self.modules and function in self.modules[target].fixed_group_collates
                ),
                batch_parameters=tuple(
                    (qualified, parameter, position, site)
                    for (qualified, parameter), (position, site) in sorted(batch_parameters.get(name, {}).items())
                ) if name in self.converted else (),
                batch_sizers=self._batch_sizers(module) if module.loaders else (),
                augmentations=self._program_augmentations(name) if name in self.converted or name in self.loading else None,
                pair_losses=self._program_pair_losses(name) if module.loaders else (),
                whole_builders=frozenset(function for target, function in self._shared_builders if target == name),
                split_builders=tuple(dict.fromkeys(split_builders.get(name, ()))) if name in self.converted else (),
                meter_classes=frozenset(meters.get(name, ())) if name in self.converted else frozenset(),
                freezing_classes=frozenset(freezing.get(name, ())),
                unfreezing_methods=self._program_unfreezing(name) if name in self.converted else frozenset(),
                unregistered_tensors=self._program_unregistered(name) if name in self.converted else (),
                program_functions=self._program_functions(name) if name in self.converted else frozenset(),
                saved_attributes=self._program_saved_attributes(name) if name in self.converted else frozenset(),
                downloading_classes=self._downloading_classes(name) if name in self.converted else frozenset(),
                unreferenced_functions=self._unreferenced_functions(name) if name in self.converted else frozenset(),
                skipping_classes=self._skipping_classes(module) if name in self.converted else (),
                repeated_forwards=self._program_repeated_forwards(name) if name in self.wrapping and name in self.converted else (),
                subclass_wraps=tuple(dict.fromkeys(subclass_wraps.get(name, ()))),
                meets_wrapped_models=any(name in self.reach[entry] for entry in self.drivers),
                local_devices=local_devices if name in self.converted else frozenset(),
                program_loaders=self._program_loaders(name) if name in self.converted else (),
                loader_attributes=self._loader_attributes(name) if name in self.converted or name in training else (),
                option_defaults=self._program_options(name, program_options) if name in self.converted else (),
                foreign_set_devices=self._foreign_set_devices(name, training) if name in self.drivers else (),
                helpers_module=helpers_module if (name in self.converted or name in inside or name in training) else None,
            )
            if role != ModuleRole():
                roles[module.path] = role
        return roles

    def _batch_sizers(self, module: _Module) -> tuple[tuple[str, str, Site], ...]:
        """Parameters of ``module``'s functions that size a DataLoader's batch, where a caller in another module also
        sizes a tensor per step with what it passes: `get_loader(data, batch_size)` called with `batch_size`, then
        `torch.randn(batch_size, latent)` beside it. Divided in the loader alone, the two would no longer match."""
        found: list[tuple[str, str, Site]] = []
        for function in _all_functions(module.tree):
            inside = range(function.lineno, (function.end_lineno or function.lineno) + 1)
            parameters = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
            for loader in (c for c in module.loaders if c.lineno in inside):
                batch = next((k.value for k in loader.keywords if k.arg == "batch_size"), loader.args[1] if len(loader.args) > 1 else None)
                if not isinstance(batch, ast.Name) or batch.id not in parameters:
                    continue
                site = self._caller_sizing(module, function, parameters.index(batch.id), batch.id)
                if site is not None:
                    found.append((function.name, batch.id, site))
        return tuple(found)

    def _caller_sizing(self, module: _Module, function: ast.FunctionDef | ast.AsyncFunctionDef, position: int, parameter: str) -> Site | None:
        """Where a call of ``function`` from another module passes a value that its caller's function also sizes a tensor with."""
        method = bool(function.args.args) and function.args.args[0].arg == "self"
        for other in self.by_path.values():
            if other is module:
                continue
            for call, target, called, _ in self.calls(other):
                if target != module.name or called != function.name:
                    continue
                index = position - 1 if method else position
                passed = next((k.value for k in call.keywords if k.arg == parameter), call.args[index] if 0 <= index < len(call.args) else None)
                if passed is None or isinstance(passed, ast.Constant):
                    continue
                spelled = ast.unparse(passed)
                caller = next((f for f in _all_functions(other.tree) if f.lineno <= call.lineno <= (f.end_lineno or f.lineno)), None)
                span = range(caller.lineno, (caller.end_lineno or caller.lineno) + 1) if caller is not None else None
                for sizer, name in other.calls:
                    if span is not None and sizer.lineno not in span or sizer is call:
                        continue
                    last = name.rpartition(".")[2]
                    if not (name in names.TENSOR_FACTORIES or last in names.TENSOR_RESHAPES | names.SIZED_DRAWS):
                        continue
                    if any(spelled == ast.unparse(n) for a in [*sizer.args, *(k.value for k in sizer.keywords)] for n in ast.walk(a)):
                        return self.site(other, sizer)
        return None

    def _program_augmentations(self, name: str) -> Site | None:
        """Where another module of the programs module ``name`` is part of draws random augmentations."""
        program = set(self.reachable(name)).union(*(reached for reached in self.reach.values() if name in reached))
        for other in sorted(program - {name}):
            module = self.modules[other]
            drawn = next((call for call, spelled in module.calls if _draws_augmentation(module, call, spelled)), None)
            if drawn is not None:
                return self.site(module, drawn)
        return None

    @cached_property
    def _shared_builders(self) -> dict[tuple[str, str], tuple[int, ...]]:
        """Functions of a loader module that build the training and the evaluation loaders alike, by (module,
        function), with where their result holds a loader: -1 for the whole value, else indices in a tuple.

        ``data_provider(args, flag)`` tells the splits apart by a string (``if flag == "test":``), or is asked
        for one (``get_loader("val")``). Split inside it, every loader it builds would be: each process would
        validate on its own shard and stop early on its own. Its callers take their share where they train.
        """
        found: dict[tuple[str, str], tuple[int, ...]] = {}
        requested = {
            (target, function)
            for module in self.by_path.values()
            for call, target, function, _ in self.calls(module)
            if _requests_evaluation(call)
        }
        for name in sorted(self.loading):
            module = self.modules[name]
            functions = [f for f in module.tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
            own_calls: dict[str, list[ast.Call]] = {}
            for call in ast.walk(module.tree):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                    own_calls.setdefault(call.func.id, []).append(call)
            for function in functions:
                inside = range(function.lineno, (function.end_lineno or function.lineno) + 1)
                built = [loader for loader in module.loaders if loader.lineno in inside]
                if not built:
                    continue
                calls = own_calls.get(function.name, [])
                asked = any(_requests_evaluation(c) for c in calls)  # `get_loader(..., "dev", ...)` in its own module
                if not ((name, function.name) in requested or asked or any(_asks_for_a_split(n) for n in ast.walk(function))):
                    continue
                positions = {_loader_position(function, loader) for loader in built}
                if len(positions) != 1 or None in positions:
                    continue  # `if basic: loader = DataLoader(...) else: loader = DataLoader(...)`: one place
                # Its own module may call it only in functions that hand its loaders on (`get_loaders()` returns
                # the "train" and the "dev" one): those build the evaluation loaders too, and split nothing.
                callers = [other for other in functions if other is not function and any(_encloses(other, c) for c in calls)]
                wrappers: dict[str, set[int]] = {}
                for other in callers:
                    handed = _returned_calls(other, function.name)
                    if handed is None:
                        wrappers = {}
                        break
                    wrappers[other.name] = handed
                if not all(any(_encloses(w, c) for w in callers if w.name in wrappers) for c in calls):
                    continue  # its own module calls it too: that module's conversion splits it where it trains
                found[name, function.name] = (positions.pop(),)  # type: ignore[assignment]
                for wrapper, handed in wrappers.items():
                    found.setdefault((name, wrapper), tuple(sorted(handed)))
        return found

    def _model_classes(self, module: _Module) -> frozenset[str]:
        """The model classes (they define ``forward``) of other project modules, as ``module`` spells them: bound by
        name (``from layers import MarginHead``) or read off a module it imports (``layer.MarginCosineProduct``)."""
        found: set[str] = set()
        for bound, (target, attribute, _) in module.bindings.items():
            other = self.modules.get(target)
            if other is None or other is module:
                continue
            if attribute is None:
                found |= {f"{bound}.{name}" for name, cls in other.classes.items() if is_model_class(cls)}
            elif attribute in other.classes and is_model_class(other.classes[attribute]):
                found.add(bound)
        return frozenset(found)

    def _program_unfreezing(self, name: str) -> frozenset[str]:
        """What the other modules of module ``name``'s programs define that makes parameters trainable."""
        program = set(self.reachable(name)).union(*(reached for reached in self.reach.values() if name in reached))
        return frozenset().union(*(unfreezing_methods(self.modules[other].tree) for other in sorted(program - {name})))

    def _program_unregistered(self, name: str) -> tuple[tuple[str, Site], ...]:
        """What the model classes of the other modules of module ``name``'s programs return that they do not register
        as parameters: (method, where such a tensor is made)."""
        program = set(self.reachable(name)).union(*(reached for reached in self.reach.values() if name in reached))
        found: dict[str, Site] = {}
        for other in sorted(program - {name}):
            module = self.modules[other]
            for method, line in unregistered_tensor_methods(module.tree).items():
                found.setdefault(method, Site(module.path.relative_to(self.root).as_posix(), line))
        return tuple(sorted(found.items()))

    def _program_functions(self, name: str) -> frozenset[str]:
        """The names of every function and method the other modules of module ``name``'s programs define."""
        program = set(self.reachable(name)).union(*(reached for reached in self.reach.values() if name in reached))
        return frozenset(f.name for other in sorted(program - {name}) for f in _all_functions(self.modules[other].tree))

    def _program_saved_attributes(self, name: str) -> frozenset[str]:
        """The attributes the other modules of module ``name``'s programs pass ``torch.save`` as the path."""
        program = set(self.reachable(name)).union(*(reached for reached in self.reach.values() if name in reached))
        found: set[str] = set()
        for other in sorted(program - {name}):
            for call in ast.walk(self.modules[other].tree):
                if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute) or call.func.attr != "save":
                    continue
                if not (isinstance(call.func.value, ast.Name) and call.func.value.id == "torch"):
                    continue
                path = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "f"), None)
                if isinstance(path, ast.Attribute):
                    found.add(path.attr)
        return frozenset(found)

    def _unreferenced_functions(self, name: str) -> frozenset[str]:
        """The functions and methods of module ``name`` whose name no module of its programs reads anywhere."""
        program = set(self.reachable(name)).union(*(reached for reached in self.reach.values() if name in reached))
        read: set[str] = set()
        for other in program:
            for node in ast.walk(self.modules[other].tree):
                if isinstance(node, ast.Name):
                    read.add(node.id)
                elif isinstance(node, ast.Attribute):
                    read.add(node.attr)
                elif isinstance(node, ast.alias):
                    read.add((node.asname or node.name).rpartition(".")[2])
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                    read.add(node.value)  # `getattr(self, "name")`
        return frozenset(f.name for f in _all_functions(self.modules[name].tree) if f.name not in read and not f.name.startswith("__"))

    def _downloading_classes(self, name: str) -> frozenset[str]:
        """The classes of the modules module ``name`` reaches, but its own, that subclass a torchvision dataset,
        directly or through another such class, by qualified name."""
        found: set[str] = set()
        reached = sorted(self.reachable(name) - {name})
        for _ in range(3):  # a subclass of a subclass, possibly in another module
            for other in reached:
                module = self.modules[other]
                external = _external_names(module.tree)
                for cls, definition in module.classes.items():
                    for base in definition.bases:
                        spelled = dotted(base)
                        if spelled is None:
                            continue
                        head, _, rest = spelled.partition(".")
                        full = ".".join(part for part in (external.get(head, ""), rest) if part)
                        local = f"{other}.{spelled}" if spelled in module.classes else None
                        bound = module.bindings.get(head)
                        imported = ".".join(self._defined_in(*bound[:2])) if bound is not None and bound[1] is not None else None  # type: ignore[arg-type]
                        if full.startswith("torchvision.datasets.") or local in found or imported in found:
                            found.add(f"{other}.{cls}")
        return frozenset(found)

    def _program_pair_losses(self, name: str) -> tuple[tuple[str, Site], ...]:
        """The losses of another module of module ``name``'s programs that pair the samples of a batch, and that the
        program uses (`losses.create(args.loss)` over a factory's dict of loss classes): they saw DataParallel's
        whole batch, and a loader here that divided its batch would give them a share of it."""
        program = set(self.reachable(name)).union(*(reached for reached in self.reach.values() if name in reached))
        found: list[tuple[str, Site]] = []
        for other in sorted(program - {name}):
            module = self.modules[other]
            for loss, line, span in pairing_losses(module.tree, other):
                users = [self.modules[user].tree for user in sorted(program) if user != other] + [module.tree]
                if any(referenced(tree, loss, span if tree is module.tree else range(0)) for tree in users):
                    found.append((loss, Site(module.path.relative_to(self.root).as_posix(), line)))
        return tuple(found)

    def _program_repeated_forwards(self, name: str) -> tuple[tuple[str, Site], ...]:
        """What the other modules of module ``name``'s programs call two or more times before one backward
        (a trainer's ``self.model(source)`` and ``self.model(target, "feat")``), by the last part of its spelling."""
        program = set(self.reachable(name)).union(*(reached for reached in self.reach.values() if name in reached))
        found: dict[str, Site] = {}
        for other in sorted(program - {name}):
            for callee, backward in repeated_forwards(self.modules[other].tree):
                found.setdefault(callee, self.site(self.modules[other], backward))
        return tuple(found.items())

    def _skipping_classes(self, module: _Module) -> tuple[tuple[str, str, Site], ...]:
        """The model classes of the modules ``module`` reaches, but its own, that may leave a sub-module without a
        gradient: (qualified name, the sub-module, where the class is)."""
        found = []
        for name in sorted(self.reachable(module.name) - {module.name}):
            other = self.modules[name]
            for cls, submodule in other.skipping.items():
                found.append((f"{name}.{cls}", submodule, self.site(other, other.classes[cls])))
            # A package's re-export (`models/__init__.py`: `from .DispResNet import DispResNet`): `models.DispResNet`.
            for bound, (source, attribute, _) in other.bindings.items():
                if attribute is None:
                    continue
                target, cls = self._defined_in(source, attribute)
                defining = self.modules.get(target)
                if defining is not None and target != name and cls in defining.skipping:
                    found.append((f"{name}.{bound}", defining.skipping[cls], self.site(defining, defining.classes[cls])))
        # As this module's own imports spell it: `from network import RAFTGMA` after `sys.path.append("core")`
        # names `network.RAFTGMA`, the class of core/network.py.
        for bound, (source, attribute, written) in module.bindings.items():
            if attribute is None:
                continue
            target, cls = self._defined_in(source, attribute)
            defining = self.modules.get(target)
            if defining is not None and target != module.name and cls in defining.skipping:
                found.append((written, defining.skipping[cls], self.site(defining, defining.classes[cls])))
        return tuple(dict.fromkeys(found))

    def _bases(self, module: _Module, name: str) -> set[str]:
        """The project modules that define the base classes of class ``name``, followed up the hierarchy."""
        return {target for target, _ in self._base_classes(module, name)}

    def _base_classes(self, module: _Module, name: str) -> list[tuple[str, str]]:
        """(module, class) of each base class of class ``name`` that another project module defines, up the hierarchy."""
        found: list[tuple[str, str]] = []
        todo = [(module, name)]
        while todo:
            current, cls = todo.pop()
            definition = current.classes.get(cls)
            for base in definition.bases if definition is not None else []:
                spelled = dotted(base)
                if spelled is None:
                    continue
                if spelled in current.classes:
                    todo.append((current, spelled))
                elif spelled in current.bindings and current.bindings[spelled][1] is not None:
                    target, attribute = self._defined_in(*current.bindings[spelled][:2])  # type: ignore[arg-type]
                    if (target, attribute) not in found and target in self.modules:
                        found.append((target, attribute))
                        todo.append((self.modules[target], attribute))
        return found

    def _writers_within(self, target: str, function: str, depth: int = 2) -> list[str]:
        """``function`` (or a class, through its methods) and the functions of its module it calls, to ``depth``:
        ``Logger.__init__`` calling ``backup_source_code(directory)`` writes through it."""
        module = self.modules[target]
        found = [function]
        definition: ast.AST | None = module.functions.get(function) or module.classes.get(function)
        if definition is None or not depth:
            return found
        inside = range(definition.lineno, (definition.end_lineno or definition.lineno) + 1)
        for call, spelled in module.calls:
            if call.lineno in inside and spelled in module.functions and spelled != function:
                found += [name for name in self._writers_within(target, spelled, depth - 1) if name not in found]
        return found

    def _foreign_set_devices(self, entry: str, also_converted: set[str]) -> tuple[tuple[str, Site], ...]:
        """GPU selections in the modules this entry point reaches that the conversion does not change.

        A converted module's own ``set_device`` is judged by its life-cycle (DDP226); one in an
        options module (``torch.cuda.set_device(opt.gpu_ids[0])`` in ``parse()``) runs after
        setup_distributed() all the same, and nothing else would see it.
        """
        found: list[tuple[str, Site]] = []
        for name in sorted(self.reach[entry] - self.converted - also_converted):
            module = self.modules[name]
            for call, spelled in module.calls:
                if spelled.endswith("cuda.set_device") and call.args and not self._never_called(module, call):
                    argument = ast.unparse(call.args[0])
                    if not LOCAL_RANK_TEXT.search(argument):
                        found.append((ast.unparse(call), self.site(module, call)))
        return tuple(found)

    def _never_called(self, module: _Module, call: ast.Call) -> bool:
        """Whether ``call`` is in a function of ``module`` that no module of the project names: it never runs.

        ``from utils import collate_fn`` reaches ``utils``, not its ``init_distributed_mode()``.
        """
        function = next(
            (f for f in module.functions.values() if f.lineno <= call.lineno <= (f.end_lineno or f.lineno)), None
        )  # fmt: skip
        return function is not None and function.name not in self._named_anywhere

    @cached_property
    def _named_anywhere(self) -> frozenset[str]:
        """Every name, attribute and imported name the project's modules spell."""
        found: set[str] = set()
        for module in self.by_path.values():
            for node in ast.walk(module.tree):
                if isinstance(node, ast.Name):
                    found.add(node.id)
                elif isinstance(node, ast.Attribute):
                    found.add(node.attr)
                elif isinstance(node, ast.alias):
                    found.add(node.name.rpartition(".")[2])
        return frozenset(found)

    def _program_options(self, name: str, cache: dict[frozenset[str], tuple[tuple[str, int], ...]]) -> tuple[tuple[str, int], ...]:
        """The option defaults of the programs module ``name`` is part of: a test script's `--batch_size` default 1
        says nothing of the training program's, whose options module defaults it to 32."""
        program = frozenset(n for reached in self.reach.values() if name in reached for n in reached)
        if program not in cache:
            cache[program] = self._option_defaults(program or None)
        return cache[program]

    def _option_defaults(self, modules: frozenset[str] | None = None) -> tuple[tuple[str, int], ...]:
        """Each option ``modules`` (by default the project's) declare with integer literal defaults only: the smallest default."""
        found: dict[str, list[int | None]] = {}
        for module in self.by_path.values():
            if modules is not None and module.name not in modules:
                continue
            for call, spelled in module.calls:
                if not spelled.endswith(".add_argument"):
                    continue
                destination = _destination(call)
                if destination is None:
                    continue
                default = next((k.value for k in call.keywords if k.arg == "default"), None)
                integer = default.value if isinstance(default, ast.Constant) and type(default.value) is int else None
                found.setdefault(destination, []).append(integer)
        return tuple(
            (destination, min(defaults))  # type: ignore[type-var]
            for destination, defaults in sorted(found.items())
            if None not in defaults
        )

    def _local_devices(self) -> frozenset[str]:
        """Module-level names of the project bound once, to a device every process resolves to its own:
        ``device = torch.device("cuda" if torch.cuda.is_available() else "cpu")`` in a config module."""
        found: set[str] = set()
        for module in self.by_path.values():
            bound: dict[str, list[ast.expr]] = {}
            for statement in module.tree.body:
                if isinstance(statement, ast.Assign):
                    for target in statement.targets:
                        if isinstance(target, ast.Name):
                            bound.setdefault(target.id, []).append(statement.value)
            found |= {f"{module.name}.{name}" for name, values in bound.items() if len(values) == 1 and _local_device(values[0])}
        return frozenset(found)

    def _reaches_training(self, name: str) -> bool:
        """Whether module ``name``, or one it imports, wraps a model or may train: its code may reach a collective."""
        found = self._training_reach.get(name)
        if found is None:
            found = any(other in self.wrapping or self._may_train(other) for other in self.reachable(name))
            self._training_reach[name] = found
        return found

    def _may_train(self, name: str) -> bool:
        """Whether a module calls ``backward()``, steps anything, or builds an optimizer: an engine of a library
        (`create_supervised_trainer(model, optimizer, loss)`) may run the backward where the project cannot see."""
        return any(may_train(spelled) for _, spelled in self.modules[name].calls)

    def trains_nowhere(self, within: set[Path] | None = None) -> bool:
        """Whether the project has programs that use a wrapped model (those of ``within``, if given) and none of
        them may train: DataParallel only ran inference there, which DDP does not speed up, and under torchrun
        each process would repeat it whole."""
        programs = [e for e in self.drivers if within is None or self.modules[e].path in within]
        # Data loaded for inference is where converting goes wrong (a shard whose outputs no one gathers).
        loads = any(self.modules[other].loaders for entry in programs for other in self.reach[entry])
        return loads and not self._any_trains(programs)

    def _evaluates_only(self, name: str) -> bool:
        """Whether every program that runs ``name`` only evaluates: its loaders then train nowhere."""
        programs = [entry for entry in self.drivers if name in self.reach[entry]]
        return bool(programs) and not self._any_trains(programs)

    def _any_trains(self, programs: list[str]) -> bool:
        """Whether a module one of ``programs`` runs may train, however its calls are spelled; each module's tree
        is walked once for the whole project."""
        trains = self._trains_in
        for name in {other for entry in programs for other in self.reach[entry]}:
            if name not in trains:
                trains[name] = may_train_in(self.modules[name].tree)
            if trains[name]:
                return True
        return False

    def _steps(self, module: _Module, functions: set[str]) -> bool:
        """Whether one of ``functions`` (or classes) of ``module`` runs a training step: it calls ``backward()``."""
        for name in functions & (module.functions.keys() | module.classes.keys()):
            function = module.functions.get(name) or module.classes[name]
            inside = range(function.lineno, (function.end_lineno or function.lineno) + 1)
            if any(spelled.endswith(".backward") and call.lineno in inside for call, spelled in module.calls):
                return True
        return False

    def _program_loaders(self, name: str) -> tuple[Site, ...]:
        """The DataLoaders the other modules of the programs that import ``name`` build."""
        program = set().union(*(self.reach[entry] for entry in self.drivers if name in self.reach[entry])) - {name}
        return tuple(self.site(self.modules[other], call) for other in sorted(program) for call in self.modules[other].loaders)

    def _loader_attributes(self, name: str) -> tuple[tuple[str, Site], ...]:
        """Attributes the loader modules of ``name``'s programs bind to a DataLoader they build and split
        (``self.loader_train = DataLoader(...)`` in a data module's class), each with where."""
        program = set().union(*(self.reach[entry] for entry in self.drivers if name in self.reach[entry])) - {name}
        found: dict[str, Site] = {}
        for other in sorted(program & self.loading):
            module = self.modules[other]
            loaders = {id(call) for call in module.loaders}
            for node in ast.walk(module.tree):
                if not isinstance(node, ast.Assign) or not any(id(n) in loaders for n in ast.walk(node.value)):
                    continue
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                        found.setdefault(target.attr, self.site(module, node))
        return tuple(sorted(found.items()))

    def _loading_from(self, target: str) -> _Module | None:
        """The loader module a call into ``target`` builds its loaders in: ``target`` itself, or one it imports."""
        if target in self.loading:
            return self.modules[target]
        reached = sorted(self.reachable(target) & self.loading)
        return self.modules[reached[0]] if reached else None

    def _unread_callers(self, target: str, function: str) -> list[Path]:
        """Files the project did not read that import ``target`` and name ``function``: callers too, unconverted."""
        called = re.compile(rf"\b{re.escape(function)}\b")
        return [
            path
            for path in self._importers.get(self.modules[target].path, ())
            if path not in self.by_path and called.search(self._sources[path]) and self._parses(path)
        ]

    def _parses(self, path: Path) -> bool:
        """Whether Python can read the file: one it cannot never runs, so it calls nothing of the project's."""
        if path not in self._parses_as_python:
            try:
                ast.parse(self._sources[path])
                self._parses_as_python[path] = True
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._parses_as_python[path] = False
        return self._parses_as_python[path]

    def _first_wrap(self, reached: set[str]) -> Site:
        """Where the first module this entry point imports wraps a model, or else builds its loaders."""
        wrapping = reached & self.wrapping
        module = self.modules[min(wrapping or (reached & self.loading))]
        return self.site(module, (module.wraps or module.loaders)[0])

    def helpers_folder(self, within: set[Path] | None = None) -> Path | None:
        """The folder a helpers module goes in: the one that every converted entry point runs from
        (with ``within``, every one among these files)."""
        folders = self.entry_folders(within)
        return folders[0] if len(folders) == 1 else None

    def unparsed_imports(self, paths: set[Path]) -> set[Path]:
        """The files ``paths`` import, directly or through the project's modules, that Python cannot parse."""
        imports = getattr(self, "_imports", {})
        reached = _closure(set(paths), imports)
        return {path for path in reached if self._parses_as_python.get(path) is False}

    def entry_folders(self, within: set[Path] | None = None) -> tuple[Path, ...]:
        """The folders the converted entry points run from (with ``within``, those among these files)."""
        entries = set(self.drivers)
        if within is not None:
            entries = {name for name in entries if self.modules[name].path in within}
        return tuple(sorted({self.modules[name].path.parent for name in entries}))


_EVALUATION_REQUEST = re.compile(r"val|test|eval|pred|infer|^dev$", re.IGNORECASE)
# A comparison with one of these tells the data splits apart: `data_split == "train"` as much as `flag == "test"`.
_SPLIT_NAME = re.compile(r"val|test|eval|pred|infer|^dev$|^train$", re.IGNORECASE)


def _asks_for_a_split(node: ast.AST) -> bool:
    """``flag == "test"``, ``split in ("val", "test")``, ``data_split == "train"``: a comparison that tells the data
    splits apart."""
    if not isinstance(node, ast.Compare):
        return False
    return any(
        isinstance(c, ast.Constant) and isinstance(c.value, str) and _SPLIT_NAME.search(c.value)
        for operand in [node.left, *node.comparators]
        for c in ast.walk(operand)
    )


def _requests_evaluation(call: ast.Call) -> bool:
    """``get_loader("val")``, ``data_provider(args, flag="test")``, ``get_loader(val=True)``: a call that asks for an
    evaluation split by name."""
    return any(
        isinstance(a, ast.Constant) and isinstance(a.value, str) and _EVALUATION_REQUEST.search(a.value)
        for a in [*call.args, *(k.value for k in call.keywords)]
    ) or any(
        k.arg is not None and _EVALUATION_REQUEST.search(k.arg) and isinstance(k.value, ast.Constant) and k.value.value is True
        for k in call.keywords
    )


def _returned_calls(function: ast.FunctionDef | ast.AsyncFunctionDef, callee: str) -> set[int] | None:
    """Where every ``return`` of ``function`` holds what a call of ``callee`` returned, directly or through a name
    bound to it: -1 for the whole value, else tuple indices; None where a return holds anything else, or none does.
    ``train_loader = get_loader(..., "train"); val_loader = get_loader(..., "dev"); return train_loader, val_loader``."""

    def is_call(value: ast.expr) -> bool:
        return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == callee

    bound = {
        target.id for statement in ast.walk(function)
        if isinstance(statement, ast.Assign) and is_call(statement.value)
        for target in statement.targets if isinstance(target, ast.Name)
    }  # fmt: skip

    def holds(value: ast.expr) -> bool:
        return is_call(value) or (isinstance(value, ast.Name) and value.id in bound)

    positions: set[int] = set()
    returns = [r for r in ast.walk(function) if isinstance(r, ast.Return) and r.value is not None]
    for statement in returns:
        if holds(statement.value):  # type: ignore[arg-type]
            positions.add(-1)
        elif isinstance(statement.value, ast.Tuple) and any(holds(e) for e in statement.value.elts):
            positions |= {i for i, element in enumerate(statement.value.elts) if holds(element)}
        else:
            return None
    return positions or None


def _loader_position(function: ast.FunctionDef | ast.AsyncFunctionDef, loader: ast.Call) -> int | None:
    """Where every ``return`` of ``function`` holds ``loader``: -1 for the whole value, else its tuple index."""
    bound = {
        target.id
        for statement in ast.walk(function)
        if isinstance(statement, ast.Assign) and statement.value is loader
        for target in statement.targets
        if isinstance(target, ast.Name)
    }

    def is_loader(value: ast.expr) -> bool:
        return value is loader or (isinstance(value, ast.Name) and value.id in bound)

    positions = set()
    for statement in ast.walk(function):
        if not isinstance(statement, ast.Return) or statement.value is None:
            continue
        if is_loader(statement.value):
            positions.add(-1)
        elif isinstance(statement.value, ast.Tuple):
            positions |= {i for i, element in enumerate(statement.value.elts) if is_loader(element)} or {None}
        else:
            positions.add(None)
    return positions.pop() if len(positions) == 1 else None


def _local_device(value: ast.expr) -> bool:
    """``"cuda"``, ``"cpu"``, a conditional between them, or ``torch.device`` of one: each process's own device."""
    if isinstance(value, ast.Constant):
        return value.value in ("cuda", "cpu")
    if isinstance(value, ast.IfExp):
        return _local_device(value.body) and _local_device(value.orelse)
    if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
        func = value.func
        spelled = f"{func.value.id}.{func.attr}" if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
        return spelled == "torch.device" and _local_device(value.args[0])
    return False


# `from .models import create_model, (...)` and `import utils.tools as tools`, read from text.
_IMPORT_LINE = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<module>\.*[\w.]*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#;]*)"
    r"|import[ \t]+(?P<plain>[^\n#;]+))",
    re.MULTILINE,
)


# A wrap, in the text: a call of DataParallel or of the wrap helper, or a class that subclasses DataParallel.
_WRAP_CALL = re.compile(
    r"\b(?:(?!\w*Distributed)\w*DataParallel\w*|data_parallel|" + names.WRAP_HELPER + r")\s*\(|^class\s+\w+\s*\([^)]*DataParallel", re.M
)
# A GPU picked by the process's local rank: named so, or the global rank modulo the GPUs of a node
# (`rank % num_gpus`, `proc_id % torch.cuda.device_count()`), as distributed launch code writes it.
LOCAL_RANK_TEXT = re.compile(r"local_rank|LOCAL_RANK|current_device|\b\w*(rank|proc_id|procid)\w*\s*%\s*\w+", re.IGNORECASE)
_MAIN_GUARD_TEXT = re.compile(r"""__name__\s*==\s*['"]__main__['"]|['"]__main__['"]\s*==\s*__name__""")


def _closure(start: set[Path], edges: Mapping[Path, set[Path]]) -> set[Path]:
    seen = set(start)
    todo = list(start)
    while todo:
        for target in edges.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _module_name(relative: Path) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__init__"


def _destination(call: ast.Call) -> str | None:
    """The attribute ``add_argument(...)`` stores into, as argparse names it (``dest=``, else the first long option)."""
    dest = next((k.value for k in call.keywords if k.arg == "dest"), None)
    if dest is not None:
        return dest.value if isinstance(dest, ast.Constant) and isinstance(dest.value, str) else None
    flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not flags or len(flags) != len(call.args):
        return None
    chosen = next((f for f in flags if f.startswith("--")), flags[0])
    return chosen.lstrip("-").replace("-", "_") or None


def _calls_at_top_level(module: _Module) -> bool:
    """Whether statements outside any function or class call something imported from the project, directly
    or through a module-level alias of it (`Exp = Exp_Informer`, then `exp = Exp(args)`)."""
    called = set(module.bindings) | {
        target.id
        for statement in module.tree.body
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Name) and statement.value.id in module.bindings
        for target in statement.targets
        if isinstance(target, ast.Name)
    }
    for statement in module.tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and (spelled := dotted(node.func)) is not None:
                if spelled in called or spelled.rpartition(".")[0] in called:
                    return True
    return False


def _is_meter(cls: ast.ClassDef) -> bool:
    methods = {s.name for s in cls.body if isinstance(s, ast.FunctionDef)}
    if "update" not in methods:
        return False
    kept = {
        target.attr
        for node in ast.walk(cls)
        if isinstance(node, (ast.Assign, ast.AugAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for target in (target.elts if isinstance(target, ast.Tuple) else [target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }
    # The samples counted: `count`, or `cnt` in DARTS-style meters (`AvgrageMeter`).
    return {"sum", "avg"} <= kept and bool({"count", "cnt"} & kept)


# torch.optim's optimizers, as a `from torch.optim import Adam` spells them.
_OPTIMIZERS = frozenset({"SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "LBFGS", "NAdam", "RAdam", "SparseAdam"})


# Packages whose code runs no training of a script's model unless the script calls a trainer of theirs, which
# may_train sees: a script importing only these and Python's own modules shows everything it runs.
_LIBRARIES = frozenset(sys.stdlib_module_names) | {
    "torch", "torchvision", "torchaudio", "torchtext", "numpy", "scipy", "PIL", "cv2", "sklearn", "skimage",
    "pandas", "tqdm", "matplotlib", "h5py", "yaml", "imageio", "tensorboardX", "wandb", "visdom",
}  # fmt: skip


def runs_inference_only(tree: ast.Module) -> bool:
    """Whether a script is a program (a ``__main__`` block) that loads data but trains nothing it shows, and
    imports no code of its own that could train elsewhere: no backward, gradient, step or optimizer anywhere."""
    if not any(_is_main_guard(statement) for statement in tree.body):
        return False
    loaders = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and (dotted(n.func) or "").endswith("DataLoader")]
    if not loaders:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").partition(".")[0] not in _LIBRARIES):
            return False
        if isinstance(node, ast.Import) and any(alias.name.partition(".")[0] not in _LIBRARIES for alias in node.names):
            return False
    return not may_train_in(tree)


def may_train_in(tree: ast.AST) -> bool:
    """Whether any call in ``tree`` may train, however its receiver is spelled (``model(x).backward()``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("backward", "step"):
            return True
        if (spelled := dotted(node.func)) is not None and may_train(spelled):
            return True
    return False


def may_train(spelled: str) -> bool:
    """Whether a call, spelled as written, may train: a backward, a gradient, a step, or an optimizer built."""
    return (
        spelled.endswith((".backward", ".step", "autograd.grad"))
        or "optim." in spelled
        or spelled.rpartition(".")[2] in _OPTIMIZERS
    )


def _is_main_guard(statement: ast.stmt) -> bool:
    if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
        return False
    sides = [statement.test.left, *statement.test.comparators]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides
    )


def _trains(loop: ast.stmt) -> bool:
    """A module-level loop that steps a model: it calls ``backward()`` or ``step()``."""
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("backward", "step")
        for node in ast.walk(loop)
    )




def _devnull_off_main(analysis: Analysis, call: cst.Call) -> bool:
    """``open(path if is_main_process() else os.devnull, "w")``: the file only the main process writes."""
    if not call.args or not isinstance(call.args[0].value, cst.IfExp) or not opens_for_writing(analysis, call):
        return False
    chosen = call.args[0].value
    return is_rank_guard(analysis, chosen.test) and "devnull" in code_of(chosen.orelse)


def _statements(block: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements of a block, a one-line suite, an ``else``/``except``/``finally`` clause, or an ``elif``."""
    if isinstance(block, cst.If):
        return [block]
    if isinstance(block, (cst.Else, cst.ExceptHandler, cst.Finally)):
        block = block.body
    if isinstance(block, (cst.IndentedBlock, cst.SimpleStatementSuite)):
        return list(block.body)
    return []


def _returns_the_value_of(function: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call) -> bool:
    """Whether ``function`` returns what ``call`` gives: ``return call(...)``, or a name bound to it and returned."""
    bound = {
        t.id for a in ast.walk(function) if isinstance(a, ast.Assign) and a.value is call for t in a.targets if isinstance(t, ast.Name)
    }  # fmt: skip
    return any(
        isinstance(r, ast.Return) and (r.value is call or (isinstance(r.value, ast.Name) and r.value.id in bound))
        for r in ast.walk(function)
    )


def _wraps_part_of_a_model(call: ast.Call) -> bool:
    """``model.encoder = DataParallel(model.encoder)``: a sub-module, which convert leaves as it is (DDP201), so
    the module does not wrap a model for the project; as the file's own analysis tells them apart."""
    wrapped = call.args[0] if call.args else None
    while isinstance(wrapped, ast.Call) and isinstance(wrapped.func, ast.Attribute) and wrapped.func.attr in ("cuda", "to"):
        wrapped = wrapped.func.value
    return isinstance(wrapped, ast.Attribute) and isinstance(wrapped.value, ast.Name) and wrapped.value.id != "self"


def freezes_in_train(cls: ast.ClassDef) -> bool:
    """Whether the class's ``train()`` sets parameters' ``requires_grad`` to False (TSN's partial BatchNorm)."""
    train = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "train"), None)
    if train is None:
        return False
    for node in ast.walk(train):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in node.targets
        ) and isinstance(node.value, ast.Constant) and node.value.value is False:
            return True
        if (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_"
            and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value is False
        ):  # fmt: skip
            return True
    return False
