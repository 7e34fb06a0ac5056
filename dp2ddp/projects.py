"""A folder converted as one project: sources in, each file's result and one helpers module out. No I/O.

Each module is converted with what the project says about it (its
``ModuleRole``). The distributed helpers the conversion adds are then moved
out of the converted files into one module of the project, which every
converted file imports, so the project carries them once. Converting the
converted project again changes nothing: the helpers module is found, and
reused as it is.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

from dp2ddp.analysis import names
from dp2ddp.analysis.project import Project
from dp2ddp.analysis.roles import ModuleRole
from dp2ddp.api import ConversionError, ConvertOptions, ConvertResult, convert_source, deeply, with_output_checked
from dp2ddp.codemods._base import Finding
from dp2ddp.codemods._base import helper_insertion_index
from dp2ddp.conversion import DEFAULT_HELPERS_MODULE, INFERENCE_ONLY, NO_DATA_PARALLEL, HelpersMode
from dp2ddp.output_check import _original_lines
from dp2ddp.rules import RULES

# The first lines of a helpers module convert wrote; the digest covers everything after them,
# so an edit by hand is seen and the module is never overwritten.
_HEADER = '"""Distributed helpers shared by the modules of this project (written by dp2ddp convert)."""\n'
_DIGEST = "# dp2ddp-digest: "
# The order helpers appear in, in the module.
_ORDER = (
    names.SETUP_HELPER,
    names.MAIN_PROCESS_HELPER,
    names.MAIN_PROCESS_FIRST_HELPER,
    names.LOCAL_DEVICE_HELPER,
    names.WRAP_HELPER,
    names.LOAD_STATE_HELPER,
    names.SUM_HELPER,
    names.MEAN_HELPER,
    names.METER_HELPER,
    names.METER_COPY_HELPER,
    names.EVALUATION_SHARD_HELPER,
    names.SHARDED_SAMPLER_HELPER,
    names.SPLIT_LOADER_HELPER,
    names.WORKER_INIT_HELPER,
    names.DRAWN_PER_PROCESS_HELPER,
    names.PER_PROCESS_RANDOM_HELPER,
)


class ProjectError(Exception):
    """The project as a whole cannot be converted; nothing is written."""


@dataclass(frozen=True)
class HelpersModule:
    path: Path
    # The module's text as it stands, and as convert would write it (equal when nothing changes).
    before: str | None
    after: str


@dataclass
class ProjectResult:
    # Each file's result, or why it could not be converted; in path order.
    files: dict[Path, ConvertResult | ConversionError] = field(default_factory=dict)
    helpers: HelpersModule | None = None
    # The folders the converted entry points run from, when there are several: no one helpers module
    # serves them all, so each converted file keeps its helpers inline.
    entry_folders: tuple[Path, ...] = ()
    roles: dict[Path, ModuleRole] = field(default_factory=dict)
    project: Project | None = None


def convert_project(
    root: Path,
    sources: Mapping[Path, str],
    options: ConvertOptions = ConvertOptions(),
    helpers: HelpersMode = "module",
    helpers_name: str = DEFAULT_HELPERS_MODULE,
    mapper: Callable[[Callable[[_Work], ConvertResult | ConversionError], Sequence[_Work]], Iterable[ConvertResult | ConversionError]] = map,
    entry: Path | None = None,
) -> ProjectResult:
    """Convert the modules of ``root`` (``sources``: path -> text) as one program.

    With ``entry``, a script of ``sources``, only it, the modules it imports and the other entry points
    that share a converted module with it are converted.

    ``mapper`` runs the conversion of each file, which needs nothing but its own
    source and role once the project is read: ``map``, or a pool's.
    """
    project = Project(root, sources)
    reached = _reached_from(project, entry) if entry is not None else None
    folder = project.helpers_folder(reached) if helpers == "module" else None
    helpers_path = folder / f"{helpers_name}.py" if folder is not None else None
    existing = sources.get(helpers_path) if helpers_path is not None else None
    if existing is not None and _DIGEST not in existing:
        raise ProjectError(
            f"{helpers_path} exists and was not written by dp2ddp: choose another name for the helpers "
            f"module with --helpers module:NAME, or --helpers inline"
        )
    helpers_import = _helpers_import(root, folder, helpers_name, sources) if folder is not None else helpers_name
    roles = project.roles(helpers_import if helpers_path is not None else None)
    result = ProjectResult(roles=roles, project=project)
    # A script named with --project is converted with its program; the rest of its folder is not.
    paths = [path for path in sorted(sources) if path != helpers_path and (reached is None or path in reached)]
    # A module's `__main__` self-test (a model's shape check under DataParallel) is no program of the project:
    # converting it would make the module import helpers from a folder it does not run from.
    for path in sorted(project.self_tests & set(paths)):
        reason = "its DataParallel is in the `__main__` self-test of a module the project imports: left as it was"
        result.files[path] = ConvertResult(sources[path], sources[path], (), reason)
    if project.trains_nowhere(reached):
        # Nothing trains: each module of the programs around the wrapped model says so, and none changes.
        for path in sorted({project.modules[name].path for name in project.converted} & set(paths)):
            result.files[path] = ConvertResult(sources[path], sources[path], (), INFERENCE_ONLY)
    paths = [path for path in paths if path not in result.files]
    work = [(sources[path], options, roles.get(path)) for path in paths]
    for path, converted in zip(paths, mapper(_convert_one, work)):
        result.files[path] = converted
    result.files = dict(sorted(result.files.items()))
    if not options.attributing:
        _check_outputs(root, sources, result)
    _refuse_work_at_import(project, result)
    _hold_back_programs_with_a_refusal(project, result)
    named = result.files.get(entry) if entry is not None else None
    unparsed = sorted(project.unparsed_imports({entry})) if entry is not None else []
    if isinstance(named, ConvertResult) and named.reason == NO_DATA_PARALLEL and unparsed:
        where = ", ".join(path.relative_to(root).as_posix() for path in unparsed)
        reason = f"it imports {where}, which Python cannot parse (see the error): nothing is converted until it does"
        result.files[entry] = ConvertResult(named.source, named.output, named.findings, reason)  # type: ignore[index]
    elif isinstance(named, ConvertResult) and named.reason == NO_DATA_PARALLEL:
        reason = "neither it nor a module of its folder it imports wraps a model in nn.DataParallel: nothing to convert"
        result.files[entry] = ConvertResult(named.source, named.output, named.findings, reason)  # type: ignore[index]
    if helpers == "module" and helpers_path is None and any(
        isinstance(r, ConvertResult) and r.changed for r in result.files.values()
    ):
        result.entry_folders = project.entry_folders(reached)
    if helpers_path is None:
        return result
    definitions = _defined_helpers(existing) if existing is not None else {}
    edited = existing is not None and not _unedited(existing)
    moved_out: dict[Path, dict[str, str]] = {}
    for path, converted in result.files.items():
        if isinstance(converted, ConvertResult) and converted.changed:
            try:
                output, moved = deeply(
                    converted.source, _move_helpers_out, converted.source, converted.output, helpers_import
                )
                result.files[path] = _recheck(converted, output, options, roles.get(path))
            except ConversionError as error:  # this file is left as it was, and so is the rest of its program
                result.files[path] = error
                continue
            moved_out[path] = moved
    # A file that failed here holds back the other modules of its program, as a refused one does above:
    # half a program converted would not run.
    _hold_back_programs_with_a_refusal(project, result)
    for path, moved in moved_out.items():
        converted = result.files[path]
        if not isinstance(converted, ConvertResult) or not converted.changed:
            continue
        missing = sorted(set(moved) - definitions.keys())
        if edited and missing:
            raise ProjectError(
                f"{helpers_path} was edited by hand and has no {', '.join(missing)}, which "
                f"{path} needs: add them there (or delete the file to have it written again), then run convert again"
            )
        for name, code in moved.items():
            definitions.setdefault(name, code)
    if definitions:
        after = existing if edited else _helpers_module(definitions)
        assert after is not None
        result.helpers = HelpersModule(helpers_path, existing, after)
    return result


_Work = tuple[str, ConvertOptions, ModuleRole | None]


def _reached_from(project: Project, entry: Path) -> set[Path]:
    """The files a script imports from its project, directly or not, and the script itself; and every other
    entry point that imports a module converted for it, with what that one imports.

    A factory converted to wrap in DDP needs a process group in every script that builds the model:
    `--project train.py` that left `test.py` as it was would leave it crashing on its first wrap.
    """
    module = project.by_path.get(entry)
    if module is None:
        return {entry}
    reached = project.reachable(module.name)
    grew = True
    while grew:
        grew = False
        for other, its in project.reach.items():
            if not its <= reached and its & reached & project.converted:
                reached |= its
                grew = True
    paths = {project.modules[name].path for name in reached}
    # A module it imports that does not parse is part of its program too: its error is the one to fix.
    return paths | project.unparsed_imports(paths)


def _check_outputs(root: Path, sources: Mapping[Path, str], result: ProjectResult) -> None:
    """Run check on each converted file as the converted project imports it; what check finds there and
    convert did not report joins the file's findings, and an error leaves the file as it was."""
    changed = {path: r for path, r in result.files.items() if isinstance(r, ConvertResult) and r.changed}
    if not changed:
        return
    outputs = {path: changed[path].output if path in changed else text for path, text in sources.items()}
    roles = Project(root, outputs).check_roles()
    for path, converted in changed.items():
        try:
            output, findings = deeply(
                converted.output, with_output_checked, converted.source, converted.output, list(converted.findings), roles.get(path)
            )
        except ConversionError as error:
            result.files[path] = error
            continue
        unique = tuple(sorted(set(findings), key=lambda f: (f.line, f.column, f.code)))
        result.files[path] = ConvertResult(converted.source, output, unique, converted.reason)


def _convert_one(work: _Work) -> ConvertResult | ConversionError:
    source, options, role = work
    try:
        return convert_source(source, options, role)
    except ConversionError as error:
        return error


def _refused(converted: ConvertResult | ConversionError) -> bool:
    if isinstance(converted, ConversionError):
        return True
    return not converted.changed and any(f.severity == "error" for f in converted.findings)


# What needs the process group, called by name in converted code: every helper but these, which work before it exists.
_WORK_WITHOUT_A_GROUP = frozenset({names.MAIN_PROCESS_HELPER, names.LOCAL_DEVICE_HELPER, names.SHARDED_SAMPLER_HELPER})
_QUERIES_WITHOUT_A_GROUP = frozenset({"is_initialized", "is_available", "is_nccl_available", "is_gloo_available"})


def _refuse_work_at_import(project: Project, result: ProjectResult) -> None:
    """Refuse a module that others import where convert made code that runs at import need the process group.

    Module-level code of an imported module runs when the entry point imports it, before its main block calls
    setup_distributed(): a loader built there and split (`batch_size=8 // dist.get_world_size()`) raises on every
    process, also where the module has a `__main__` block of its own. An entry point no module imports starts
    the process group before its own module-level code.
    """
    imported = set().union(*(module.imports for module in project.modules.values()))
    for path, converted in list(result.files.items()):
        module = project.by_path.get(path)
        if module is None or module.name not in imported:
            continue  # an entry point no module imports: its launch wrapper starts the group before such code
        if not isinstance(converted, ConvertResult) or not converted.changed:
            continue
        before = {code for _, code in _group_calls_at_import(converted.source)}
        by_line: dict[int, list[str]] = {}
        for line, code in _group_calls_at_import(converted.output):
            if code not in before and code not in by_line.setdefault(line, []):
                by_line[line].append(code)
        if not any(by_line.values()):
            continue
        lines = _original_lines(converted.source, converted.output)
        where = path.relative_to(project.root).as_posix()
        rule = RULES["DDP346"]
        # One finding for each statement, naming the smallest of the calls it would make: `dist.get_rank()` in
        # `DrawnPerProcess(dataset, dist.get_rank())`.
        findings = [
            Finding("DDP346", rule.message.format(call=min(codes, key=len), module=where), lines.get(line, (1, False))[0], 1, rule.severity)
            for line, codes in sorted(by_line.items()) if codes
        ]
        result.files[path] = ConvertResult(converted.source, converted.source, (*converted.findings, *findings), converted.reason)


def _group_calls_at_import(text: str) -> list[tuple[int, str]]:
    """The calls that need the process group in the code ``text`` runs at import (outside functions and the
    ``__main__`` block), with their lines: ``dist.get_world_size()``, ``wrap_ddp(...)``."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    found: list[tuple[int, str]] = []
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test) and "__main__" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Call):
            func = node.func
            needs = (
                isinstance(func, ast.Name) and func.id in names.HELPERS and func.id not in _WORK_WITHOUT_A_GROUP
                or isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "dist"
                and func.attr not in _QUERIES_WITHOUT_A_GROUP
            )  # fmt: skip
            if needs:
                found.append((node.lineno, ast.unparse(node)))
        pending.extend(ast.iter_child_nodes(node))
    return sorted(found)


def _hold_back_programs_with_a_refusal(project: Project, result: ProjectResult) -> None:
    """Leave every module of a program unchanged where one of its modules is refused.

    The modules of one program change together: a factory that wraps in DDP
    needs the process group its entry point starts, and a helper guarded for
    converted callers assumes they are converted. Modules are of one program
    when one imports the other and the conversion changes or refuses both, or when one entry
    point reaches both.
    """
    def blocks(path: Path, converted: ConvertResult | ConversionError) -> bool:
        # A module left as it was because it runs DDP already, but which still wraps in DataParallel on its
        # other path (`if opt["dist"]: DDP(...) else: DataParallel(...)`): the entries the others convert would
        # start the process group and split the data around an unsynchronised DataParallel model.
        kept_data_parallel = (
            isinstance(converted, ConvertResult) and not converted.changed and project.by_path[path].name in project.wrapping
            and any(f.code == "DDP001" for f in converted.findings)
        )  # fmt: skip
        return _refused(converted) or kept_data_parallel

    touched = {
        project.by_path[path].name
        for path, converted in result.files.items()
        if path in project.by_path and (blocks(path, converted) or (isinstance(converted, ConvertResult) and converted.changed))
    }
    group = {name: name for name in touched}

    def find(name: str) -> str:
        while group[name] != name:
            group[name] = group[group[name]]
            name = group[name]
        return name

    for name in touched:
        for imported in project.modules[name].imports & touched:
            group[find(name)] = find(imported)
    # An entry point's program is everything it reaches, through unchanged modules too
    # (a package `__init__` between the entry point and its loader module).
    for entry, reached in project.reach.items():
        members = sorted(reached & touched)
        for member in members[1:]:
            group[find(member)] = find(members[0])
    refused = {
        find(project.by_path[path].name): path
        for path, converted in result.files.items()
        if path in project.by_path and project.by_path[path].name in touched and blocks(path, converted)
    }
    for path, converted in list(result.files.items()):
        module = project.by_path.get(path)
        if module is None or module.name not in touched or not isinstance(converted, ConvertResult) or not converted.changed:
            continue
        blocker = refused.get(find(module.name))
        if blocker is not None:
            where = blocker.relative_to(project.root).as_posix()
            if isinstance(result.files[blocker], ConversionError):
                reason = f"{where}, which is part of the same program, failed (see its error): converting this file alone would break it"
            elif _refused(result.files[blocker]):
                reason = f"{where}, which is part of the same program, is refused: converting this file alone would break it"
            else:
                reason = (
                    f"{where}, which is part of the same program, runs DDP already but still wraps in DataParallel on "
                    "its other path (DDP001): run the program in its own distributed mode, or convert that wrap by hand"
                )
            result.files[path] = ConvertResult(converted.source, converted.source, (), reason)


def _recheck(converted: ConvertResult, output: str, options: ConvertOptions, role: ModuleRole | None) -> ConvertResult:
    """The result with its helpers imported, once converting it again is seen to change nothing."""
    again = convert_source(output, options, role)
    if again.output != output:
        raise ConversionError("internal error: the project's conversion is not stable; please report this project")
    return ConvertResult(converted.source, output, converted.findings, converted.reason)


def _added_helpers(original: cst.Module, tree: cst.Module) -> list[cst.FunctionDef | cst.ClassDef]:
    had = {s.name.value for s in original.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}
    return [
        s
        for s in tree.body
        if isinstance(s, (cst.FunctionDef, cst.ClassDef)) and s.name.value in names.HELPERS and s.name.value not in had
    ]


def _helpers_import(root: Path, folder: Path, name: str, sources: Mapping[Path, str]) -> str:
    """How converted modules import the helpers module ``name`` of ``folder``: through its package where the
    program imports the package's modules by their full name (``from pytorch3dunet.unet3d import trainer``),
    which then import it however the program runs (``python -m``, a console script); else by its bare name,
    found beside the entry points."""
    parts: list[str] = []
    package = folder
    while package / "__init__.py" in sources and package != root.parent:
        parts.insert(0, package.name)
        package = package.parent
    if not parts:
        return name
    dotted = ".".join(parts)
    imported = re.compile(rf"^[ \t]*(?:from|import)[ \t]+{re.escape(dotted)}[ \t.]", re.MULTILINE)
    return f"{dotted}.{name}" if any(imported.search(text) for text in sources.values()) else name


def _move_helpers_out(source: str, output: str, module: str) -> tuple[str, dict[str, str]]:
    """``output`` with the helpers convert added replaced by an import of ``module``, and those helpers."""
    tree = cst.parse_module(output)
    original = cst.parse_module(source)
    added = _added_helpers(original, tree)
    if not added:
        return output, {}
    moved = {helper.name.value: cst.Module([]).code_for_node(helper.with_changes(leading_lines=[])) for helper in added}
    body = [s for s in tree.body if s not in added]
    # The statement the helpers were put before gets back the blank lines it had.
    here, there = helper_insertion_index(tree.with_changes(body=body)), helper_insertion_index(original)
    if here < len(body) and there < len(original.body):
        follower, was = body[here], original.body[there]
        if _bare(follower) == _bare(was):
            body[here] = follower.with_changes(leading_lines=was.leading_lines)
    tree = tree.with_changes(body=body)
    context = CodemodContext()
    for name in sorted(moved):
        AddImportsVisitor.add_needed_import(context, module, name)
    # Imports convert added for the helpers alone go with them; the script's own stay.
    own = {_bare(statement).strip() for statement in _imports(original)}
    for statement in _imports(tree):
        if _bare(statement).strip() not in own:
            for alias in _aliases(statement):
                RemoveImportsVisitor.remove_unused_import(context, *alias)
    tree = RemoveImportsVisitor(context).transform_module(tree)
    tree = AddImportsVisitor(context).transform_module(tree)
    return tree.code, moved


def _bare(statement: cst.BaseStatement) -> str:
    return cst.Module([]).code_for_node(statement.with_changes(leading_lines=[]))


def _imports(tree: cst.Module) -> list[cst.SimpleStatementLine]:
    return [
        s for s in tree.body if isinstance(s, cst.SimpleStatementLine) and all(isinstance(b, (cst.Import, cst.ImportFrom)) for b in s.body)
    ]



def _aliases(statement: cst.SimpleStatementLine) -> list[tuple[str, str | None, str | None]]:
    """(module, name, asname) of each name an import line binds, as RemoveImportsVisitor takes them."""
    found: list[tuple[str, str | None, str | None]] = []
    for small in statement.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
                found.append((cst.Module([]).code_for_node(alias.name), None, asname))
        elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative and not isinstance(small.names, cst.ImportStar):
            for alias in small.names:
                asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
                found.append((cst.Module([]).code_for_node(small.module), cst.Module([]).code_for_node(alias.name), asname))
    return found


# Every import a helper may need, by the name it binds; the module keeps those its helpers use.
_STANDARD_IMPORTS = {name: f"import {name}" for name in ("atexit", "contextlib", "inspect", "math", "os", "random", "subprocess", "sys")}
_TORCH_IMPORTS = {
    "torch": "import torch",
    "dist": "import torch.distributed as dist",
    "DistributedDataParallel": "from torch.nn.parallel import DistributedDataParallel",
}


def _helpers_module(definitions: Mapping[str, str]) -> str:
    ordered = sorted(definitions, key=lambda name: _ORDER.index(name) if name in _ORDER else len(_ORDER))
    body = "\n\n".join(definitions[name].rstrip() + "\n" for name in ordered)
    used = {node.value for node in _names_in(cst.parse_module(body))}
    groups = [
        [line for name, line in imports.items() if name in used] for imports in (_STANDARD_IMPORTS, _TORCH_IMPORTS)
    ]
    text = "\n".join("\n".join(group) + "\n" for group in groups if group) + "\n\n" + body
    return _HEADER + _DIGEST + _digest(text) + "\n" + text


def _names_in(tree: cst.Module) -> list[cst.Name]:
    found: list[cst.Name] = []

    class Collect(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found.append(node)

    tree.visit(Collect())
    return found


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _unedited(module: str) -> bool:
    """Whether a helpers module is still exactly as convert wrote it."""
    first, _, rest = module.partition("\n")
    digest_line, _, text = rest.partition("\n")
    return first + "\n" == _HEADER and digest_line == _DIGEST + _digest(text)


def _defined_helpers(module: str) -> dict[str, str]:
    try:
        tree = cst.parse_module(module)
    except cst.ParserSyntaxError:
        return {}
    return {
        s.name.value: cst.Module([]).code_for_node(s.with_changes(leading_lines=[]))
        for s in tree.body
        if isinstance(s, (cst.FunctionDef, cst.ClassDef))
    }
