"""Whether a model class's forward reaches every parameter it builds, read from the class alone.

DDP waits, in every backward, for a gradient of each parameter it hooked. A sub-module whose parameters
get none stops training at the second step ("Expected to have finished reduction in the prior
iteration"), unless the wrap passes ``find_unused_parameters=True``. DataParallel never minded.

A class may leave a sub-module ``self.x`` without a gradient when:

- forward, and the methods it calls, never name it;
- a method walks ``self.x``'s children (``self.x._modules.items()``, ``self.x.children()``) and may
  stop or skip (``break``, ``continue``), or walks a slice of it (``self.layers[:depth]``): the layers
  after it get none;
- it is a list of modules (``nn.ModuleList``) that forward reads only by constant indices, not all of them;
- ``__init__`` builds it unconditionally and every use is under a condition other than
  ``self.training`` (built under a condition, it is taken to be used under the same one);
- it is built from another class of which one of these holds.

The answer is a sub-module's spelling (``self.base``), or None when every parameter is reached.
Read with :mod:`ast`, so the project reads other modules' classes the same way.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Set

# torch.nn layers that hold no parameter: leaving one unused costs DDP nothing.
PARAMETER_FREE = frozenset({
    "ReLU", "ReLU6", "LeakyReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "Sigmoid", "Tanh",
    "Hardtanh", "Hardswish", "Hardsigmoid", "Softmax", "LogSoftmax", "Softplus", "Identity", "Flatten", "Unflatten",
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "MaxPool1d", "MaxPool2d", "MaxPool3d",
    "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "Upsample", "UpsamplingBilinear2d",
    "UpsamplingNearest2d", "PixelShuffle", "PixelUnshuffle", "ZeroPad2d", "ReflectionPad2d", "ReplicationPad2d",
    "ConstantPad2d", "CrossEntropyLoss", "MSELoss", "L1Loss", "BCELoss", "BCEWithLogitsLoss", "NLLLoss",
    "SmoothL1Loss", "KLDivLoss", "CosineSimilarity", "PairwiseDistance",
})
_CHILD_WALKS = frozenset({"_modules", "children", "named_children", "modules", "named_modules"})


def is_model_class(cls: ast.ClassDef) -> bool:
    """A class that defines ``forward``."""
    return any(isinstance(s, ast.FunctionDef) and s.name == "forward" for s in cls.body)


def _forward_methods(methods: list[ast.FunctionDef]) -> list[ast.FunctionDef]:
    """``forward`` and the methods it calls (``self.features(x)``), transitively."""
    by_name = {m.name: m for m in methods}
    reached = ["forward"]
    for name in reached:
        for node in ast.walk(by_name[name]):
            if isinstance(node, ast.Call) and _is_self_attribute(node.func) and node.func.attr in by_name and node.func.attr not in reached:  # type: ignore[attr-defined]
                reached.append(node.func.attr)  # type: ignore[attr-defined]
    return [by_name[name] for name in reached]


def skipped_submodule(cls: ast.ClassDef, skipping: Mapping[str, str], models: Set[str]) -> str | None:
    """The sub-module of ``cls`` a training forward may leave without a gradient. ``skipping`` holds the
    classes already known to (bare class name -> what they skip), ``models`` the bare names of the
    model classes around it."""
    if not is_model_class(cls):
        return None
    methods = [s for s in cls.body if isinstance(s, ast.FunctionDef)]
    init = next((s for s in methods if s.name == "__init__"), None)
    forward = _forward_methods(methods)
    for method in forward:
        walked = _walk_that_stops(method) or _outputs_per_pass(method)
        if walked is not None:
            return walked
    if init is None:
        return None
    indexed = _indexed_in_part(init, forward)
    if indexed is not None:
        return indexed
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "setattr") for n in ast.walk(cls)):
        return None  # sub-modules named by strings: what is used cannot be read
    built = _built_in_init(init)
    uses: dict[str, list[bool]] = {}
    for method in forward:
        for node, conditional in _self_attributes(method.body, False):
            uses.setdefault(node.attr, []).append(conditional)
    init_mentions = [n.attr for n in ast.walk(init) if _is_self_attribute(n)]
    for attribute, (call, conditional_build) in built.items():
        name = _class_name(call.func)
        if name in PARAMETER_FREE:
            continue
        spelled = f"self.{attribute}"
        if attribute not in uses:
            # Named only in __init__, or only by methods forward does not call (`embed()` for evaluation).
            # Mentioned again in __init__ (frozen, say), it may be unused on purpose.
            if init_mentions.count(attribute) == 1 and _builds_a_module(call, models) and not conditional_build:
                return spelled
            continue
        if attribute in uses and all(uses[attribute]) and not conditional_build and _builds_a_module(call, models):
            return spelled
        children = _children_called(forward, attribute)
        if children and name not in models and name not in skipping and name != "Parameter" and _builds_a_module(call, models):
            # `self.encoder = models.resnet18()`, of which forward calls `self.encoder.conv1(x)` up to `layer4` and
            # never the whole: what it does not name (the classifier `fc`) gets no gradient.
            return f"{spelled} (forward calls only {', '.join(f'.{c}' for c in children)} of it)"
        if name in skipping:
            return f"{spelled} ({name}: {skipping[name]})"
    return None


def _children_called(forward: list[ast.FunctionDef], attribute: str) -> list[str]:
    """The parts of ``self.<attribute>`` the forward methods name (``self.encoder.layer1``), where they never use
    ``self.<attribute>`` itself (call it, pass it or iterate it); empty otherwise."""
    children: list[str] = []
    for method in forward:
        parents = {id(child): node for node in ast.walk(method) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(method):
            if not (_is_self_attribute(node) and node.attr == attribute):  # type: ignore[attr-defined]
                continue
            parent = parents.get(id(node))
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                return []
            if parent.attr not in children:
                children.append(parent.attr)
    return children


def _indexed_in_part(init: ast.FunctionDef, forward: list[ast.FunctionDef]) -> str | None:
    """``self.f = nn.ModuleList([PiecewiseLin(16) for _ in range(16)])``, of which forward reads only ``self.f[0]`` to
    ``self.f[7]``: a list of modules the training forward reads only by constant indices, not all of them (or as many
    as ``__init__`` cannot tell), leaves the others without a gradient."""
    lists: dict[str, int | None] = {}
    for node in ast.walk(init):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and _is_self_attribute(node.targets[0])):
            continue
        value = node.value
        if not (isinstance(value, ast.Call) and _class_name(value.func) == "ModuleList" and len(value.args) == 1):
            continue
        items = value.args[0]
        count = None
        if isinstance(items, ast.List | ast.Tuple):
            count = len(items.elts)
        elif isinstance(items, ast.ListComp) and len(items.generators) == 1:
            source = items.generators[0].iter
            if isinstance(source, ast.Call) and isinstance(source.func, ast.Name) and source.func.id == "range":
                bounds = [a.value for a in source.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
                count = bounds[0] if len(bounds) == len(source.args) == 1 else None
        lists[node.targets[0].attr] = count  # type: ignore[attr-defined]
    if not lists:
        return None
    used: dict[str, set[int]] = {}
    whole: set[str] = set()
    for method in forward:
        subscripted = {id(n.value): n for n in ast.walk(method) if isinstance(n, ast.Subscript) and _is_self_attribute(n.value)}
        for node in ast.walk(method):
            if not _is_self_attribute(node) or node.attr not in lists:  # type: ignore[attr-defined]
                continue
            subscript = subscripted.get(id(node))
            index = subscript.slice if subscript is not None else None
            if isinstance(index, ast.Constant) and isinstance(index.value, int) and index.value >= 0:
                used.setdefault(node.attr, set()).add(index.value)  # type: ignore[attr-defined]
            else:
                whole.add(node.attr)  # type: ignore[attr-defined]
    for attribute, indices in used.items():
        count = lists[attribute]
        if attribute not in whole and (count is None or indices != set(range(count))):
            return f"self.{attribute}"
    return None


def _builds_a_module(call: ast.Call, models: Set[str]) -> bool:
    """``nn.Linear(...)``, ``nn.Parameter(...)``, ``torchvision.models.resnet50()``, or a model class of the project."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in models or func.id == "Parameter"
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value
    prefix = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
    if prefix == "nn" and func.attr[:1].isupper():
        return func.attr not in PARAMETER_FREE
    return prefix == "models" or func.attr in models


def _class_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_self_attribute(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _built_in_init(init: ast.FunctionDef) -> dict[str, tuple[ast.Call, bool]]:
    """``self.x = Layer(...)`` in ``__init__``, each with whether it is built under a condition (its first build)."""
    built: dict[str, tuple[ast.Call, bool]] = {}

    def visit(statements: list[ast.stmt], conditional: bool) -> None:
        for statement in statements:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.value, ast.Call):
                target = statement.targets[0]
                if _is_self_attribute(target):
                    built.setdefault(target.attr, (statement.value, conditional))  # type: ignore[attr-defined]
            for field in ("body", "orelse", "handlers", "finalbody"):
                inner = getattr(statement, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt | ast.ExceptHandler):
                    visit([s for s in inner if isinstance(s, ast.stmt)], conditional or not isinstance(statement, ast.With))

    visit(init.body, False)
    return built


def _self_attributes(statements: list[ast.stmt], conditional: bool):
    """Every ``self.x`` the statements read, with whether a condition other than ``self.training`` guards
    it, or an earlier conditional ``return`` may end the method before it."""
    for statement in statements:
        if isinstance(statement, ast.If | ast.While):
            guarded = conditional or not _about_training(statement.test)
            yield from ((n, conditional) for n in ast.walk(statement.test) if _is_self_attribute(n))
            body = list(_self_attributes(statement.body, False))
            orelse = list(_self_attributes(statement.orelse, False))
            # Read on both branches, unconditionally within each: as sure as the `if` itself.
            both = {n.attr for n, c in body if not c} & {n.attr for n, c in orelse if not c}
            yield from ((n, guarded and (c or n.attr not in both)) for n, c in body + orelse)
            if any(isinstance(n, ast.Return | ast.Raise) for s in statement.body for n in ast.walk(s)) and not _about_training(statement.test):
                conditional = True
            continue
        if isinstance(statement, ast.For | ast.With | ast.Try):
            for field in ("iter", "items"):
                part = getattr(statement, field, None)
                if part is not None:
                    for piece in part if isinstance(part, list) else [part]:
                        yield from ((n, conditional) for n in ast.walk(piece) if _is_self_attribute(n))
            for field in ("body", "orelse", "finalbody"):
                yield from _self_attributes(getattr(statement, field, []) or [], conditional)
            for handler in getattr(statement, "handlers", []) or []:
                yield from _self_attributes(handler.body, True)
            continue
        for node in ast.walk(statement):
            if _is_self_attribute(node):
                yield node, conditional or _under_a_choice(statement, node)


def _under_a_choice(statement: ast.stmt, node: ast.AST) -> bool:
    """Whether ``node`` sits in a branch of ``a if c else b``, or after ``and``/``or``, within ``statement``."""
    for parent in ast.walk(statement):
        if isinstance(parent, ast.IfExp) and not _about_training(parent.test):
            branches = [{n.attr for n in ast.walk(branch) if _is_self_attribute(n)} for branch in (parent.body, parent.orelse)]  # type: ignore[attr-defined]
            inside = any(n is node for branch in (parent.body, parent.orelse) for n in ast.walk(branch))
            if inside and not (node.attr in branches[0] and node.attr in branches[1]):  # type: ignore[attr-defined]
                return True
        if isinstance(parent, ast.BoolOp) and any(n is node for value in parent.values[1:] for n in ast.walk(value)):
            return True
    return False


def _about_training(test: ast.expr) -> bool:
    """``self.training`` (or ``not self.training``): the same in every training step."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    return isinstance(test, ast.Attribute) and test.attr == "training"


def _outputs_per_pass(method: ast.FunctionDef) -> str | None:
    """``outputs.append(self.head[i](x))`` in a loop, then ``return outputs``: one output per pass, each from its own
    head (a disparity per scale, a deep-supervision map per stage). A loss that reads only some of them (the first
    `--num-scales`) leaves the other heads without a gradient."""
    returned = {
        ast.unparse(node.value) for node in ast.walk(method)
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name | ast.Attribute)
    }  # fmt: skip
    for loop in ast.walk(method):
        if not isinstance(loop, ast.For | ast.While):
            continue
        for node in ast.walk(loop):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"):
                continue
            if ast.unparse(node.func.value) not in returned or len(node.args) != 1:
                continue
            heads = [n for n in ast.walk(node.args[0]) if isinstance(n, ast.Call) and any(_is_self_attribute(a) for a in ast.walk(n.func))]
            if heads:
                head = next(a for a in ast.walk(heads[-1].func) if _is_self_attribute(a))  # the innermost: the head itself
                return f"self.{head.attr} (forward returns {ast.unparse(node.func.value)}, one output per pass of a loop)"  # type: ignore[attr-defined]
    return None


def _walk_that_stops(method: ast.FunctionDef) -> str | None:
    """``for name, layer in self.base._modules.items(): if name == "avgpool": break``: a walk of a
    sub-module's children that may stop early or skip some."""
    for loop in ast.walk(method):
        if not isinstance(loop, ast.For):
            continue
        sliced = next(
            (n.value for n in ast.walk(loop.iter) if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Slice) and _is_self_attribute(n.value)),
            None,
        )
        if sliced is not None:
            # `for block in self.layers[:depth]`: a progressive network uses the blocks up to its current depth.
            return f"self.{sliced.attr}"  # type: ignore[attr-defined]
        walked = next((n for n in ast.walk(loop.iter) if isinstance(n, ast.Attribute) and n.attr in _CHILD_WALKS), None)
        if walked is None or not _is_self_attribute(walked.value):
            continue
        stops = any(isinstance(n, ast.Break | ast.Continue) for s in loop.body for n in ast.walk(s) if not isinstance(n, ast.For | ast.While))
        if stops:
            return f"self.{walked.value.attr}"  # type: ignore[attr-defined]
    return None


def skipping_classes(classes: list[ast.ClassDef], known: Mapping[str, str] = {}, models: Set[str] = frozenset()) -> dict[str, str]:  # noqa: B006
    """Of ``classes`` (one module's, say), each that may leave a sub-module without a gradient, and which.

    ``known`` holds classes of elsewhere already read, and ``models`` the names of model classes of
    elsewhere; a class built from one that skips skips too, whatever the order of definition.
    """
    names = set(models) | {c.name for c in classes if is_model_class(c)}
    found = dict(known)
    changed = True
    while changed:
        changed = False
        for cls in classes:
            if cls.name not in found and (reason := skipped_submodule(cls, found, names)) is not None:
                found[cls.name] = reason
                changed = True
    return {name: reason for name, reason in found.items() if name not in known}


# nn.Module's own methods, public ones: called on a model they run code convert knows.
MODULE_METHODS = frozenset({
    "add_module", "apply", "bfloat16", "buffers", "children", "compile", "cpu", "cuda", "double", "eval",
    "extra_repr", "float", "forward", "get_buffer", "get_extra_state", "get_parameter", "get_submodule", "half",
    "load_state_dict", "modules", "named_buffers", "named_children", "named_modules", "named_parameters",
    "parameters", "register_backward_hook", "register_buffer", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook", "register_module", "register_parameter",
    "requires_grad_", "share_memory", "state_dict", "to", "to_empty", "train", "type", "zero_grad",
})  # fmt: skip

# Methods that only switch modes or build: a model's own `train()` that unfreezes would match every script.
_NOT_UNFREEZING = frozenset({"__init__", "train", "eval", "forward"})


def unfreezing_methods(tree: ast.Module) -> set[str]:
    """Names of the functions and methods of ``tree`` (other than ``__init__``, ``train``, ``eval`` and
    ``forward``) that make parameters trainable: ``p.requires_grad = True``, ``m.requires_grad_()`` or
    ``m.requires_grad_(True)``. Called on a model DDP already wraps, they add parameters DDP never synchronises."""
    found: set[str] = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.name in _NOT_UNFREEZING:
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in node.targets):
                if isinstance(node.value, ast.Constant) and node.value.value is True:
                    found.add(function.name)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_":
                if not node.args or (isinstance(node.args[0], ast.Constant) and node.args[0].value is True):
                    found.add(function.name)
    return found


def unregistered_tensor_methods(tree: ast.Module) -> dict[str, int]:
    """Methods of the model classes of ``tree`` that return tensors the model does not register as parameters,
    with the line where such a tensor is made: ``arch_parameters()`` returning ``self._arch_parameters``, a list
    of ``self.alphas_normal = Variable(torch.randn(k, n), requires_grad=True)``. An optimizer over them steps
    tensors DDP never synchronises."""
    found: dict[str, int] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and is_model_class(n)):
        made: dict[str, int] = {}  # self attributes bound to a tensor that requires grad and is no nn.Parameter
        lists: dict[str, list[str]] = {}  # self attributes bound to a list or tuple of self attributes
        for node in ast.walk(cls):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1 or not _is_self_attribute(node.targets[0]):
                continue
            attribute = node.targets[0].attr  # type: ignore[attr-defined]
            value = node.value
            if isinstance(value, (ast.List, ast.Tuple)) and all(_is_self_attribute(e) for e in value.elts):
                lists[attribute] = [e.attr for e in value.elts]  # type: ignore[attr-defined]
            elif isinstance(value, ast.Call) and _unregistered_tensor(value):
                made[attribute] = node.lineno
        for method in (s for s in cls.body if isinstance(s, ast.FunctionDef)):
            for ret in (r for r in ast.walk(method) if isinstance(r, ast.Return) and r.value is not None):
                returned = [ret.value] if not isinstance(ret.value, (ast.List, ast.Tuple)) else list(ret.value.elts)
                for value in returned:
                    if not _is_self_attribute(value):
                        continue
                    names = lists.get(value.attr, [value.attr])  # type: ignore[attr-defined]
                    lines = [made[n] for n in names if n in made]
                    if lines:
                        found.setdefault(method.name, lines[0])
    return found


def _unregistered_tensor(call: ast.Call) -> bool:
    """``Variable(x, requires_grad=True)`` or ``torch.randn(..., requires_grad=True)``: a tensor that trains, made
    without ``nn.Parameter``."""
    spelled = ast.unparse(call.func)
    if spelled.rpartition(".")[2] == "Parameter":
        return False
    return any(k.arg == "requires_grad" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)
