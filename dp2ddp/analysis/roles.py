"""What a project tells the conversion of one of its modules."""

from __future__ import annotations

from dataclasses import dataclass

from .steps import Flag


@dataclass(frozen=True)
class Site:
    """A line of a project file, written ``models/__init__.py:12`` relative to the project."""

    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class ModuleRole:
    """What the rest of the project tells the conversion of one module."""

    # Names that `from x import *` of a project module binds here to something outside the project,
    # with its qualified name (`nn` -> `torch.nn`): what the star import means is then known. Also names
    # imported by name that such a module re-exports (`from dataset import DataLoader`).
    star_bindings: tuple[tuple[str, str], ...] = ()
    # Qualified names, as this module spells them, of project functions that return a wrapped
    # model, each with where it wraps: `create_model(opt)` is then this module's wrap.
    imported_wraps: tuple[tuple[str, Site], ...] = ()
    # An entry point that imports a module that wraps a model, with where: it starts the process group.
    drives: Site | None = None
    # An entry point none of whose program's modules calls `backward()`, steps anything or builds an optimizer:
    # it only evaluates or predicts with the model the project wraps, so none of its loaders is a training
    # loader (each process reads its data whole).
    evaluates_only: bool = False
    # Imported by an entry point that starts the process group, so none is started here.
    setup_elsewhere: bool = False
    # Functions of this module whose writes are guarded inside them, each with where it first writes
    # and its callers.
    guarded_functions: tuple[tuple[str, Site, tuple[Site, ...]], ...] = ()
    # Functions of this module that converted code calls and that make a directory every process now makes
    # (`if not os.path.exists(d): os.makedirs(d)`): each gets `exist_ok=True`, so no process fails on a
    # directory another has just made.
    directory_functions: tuple[str, ...] = ()
    # Other modules' writers that this module calls, by qualified name, each with where it writes:
    # guarded at the call, because code that is not converted calls them too.
    guarded_calls: tuple[tuple[str, Site], ...] = ()
    # Other modules' writers this module calls and uses the value of, by qualified name, each with where it
    # writes: they cannot be guarded at the call, and write on every process (DDP108).
    unguarded_calls: tuple[tuple[str, Site], ...] = ()
    # Project callables this module calls whose module builds the program's DataLoaders, with where:
    # their loaders are split there, so batches this module reads from them are split too.
    loader_sources: tuple[tuple[str, Site], ...] = ()
    # Where the other modules of this module's programs build their DataLoaders: they are split there.
    program_loaders: tuple[Site, ...] = ()
    # Attributes the loader modules of those programs bind to a DataLoader they build and split
    # (`self.loader_train = DataLoader(...)`), with where: `loader.loader_train` read here holds split batches.
    loader_attributes: tuple[tuple[str, Site], ...] = ()
    # A module whose functions, called only from converted modules, run training steps (`loss.backward()`):
    # converted whole, its metrics gathered and its writes guarded, as the caller's own code would be.
    trains: bool = False
    # A module that builds DataLoaders for a converted program, and is converted for them.
    splits_loaders: bool = False
    # A module of a program that wraps its models in DDP, which may be handed the wrapped model:
    # `isinstance(model, nn.DataParallel)` here must hold for DDP too.
    meets_wrapped_models: bool = False
    # Module-level names of the project, qualified, bound to a device every process resolves to its own
    # (`config.device = torch.device("cuda" if ... else "cpu")`): a move to one after the wrap is no hazard.
    local_devices: frozenset[str] = frozenset()
    # DataParallel subclasses of other project modules this module wraps models in, with where each is defined.
    subclass_wraps: tuple[tuple[str, Site], ...] = ()
    # Meter classes of other project modules this module builds (`utils.AverageMeter(...)`): they keep
    # `sum` and `count`, so the reduction of AverageMeter-style meters applies to them.
    meter_classes: frozenset[str] = frozenset()
    # Model classes of other project modules whose `train()` freezes parameters (a partial BatchNorm): a DDP
    # wrap of one needs find_unused_parameters=True, since those parameters stop getting gradients.
    freezing_classes: frozenset[str] = frozenset()
    # Methods and functions of the other modules of this module's programs that make parameters trainable
    # (`features.unfix(ratio)` setting requires_grad = True): called on a wrapped model, DDP never syncs them.
    unfreezing_methods: frozenset[str] = frozenset()
    # Methods of the model classes of this module's programs that return tensors the model does not register as
    # parameters (`arch_parameters()` of a DARTS search model), with where one is made: DDP never syncs them.
    unregistered_tensors: tuple[tuple[str, Site], ...] = ()
    # Names of every function and method the other modules of this module's programs define: a method called on
    # the wrapped model under none of these names (nor nn.Module's) runs code convert cannot read.
    program_functions: frozenset[str] = frozenset()
    # Attributes the other modules of this module's programs save a checkpoint at (`torch.save(model,
    # self.snapshot_path)`): a load here of `trainer.snapshot_path` reads a file the main process writes.
    saved_attributes: frozenset[str] = frozenset()
    # Dataset classes of the other modules of this module's programs that subclass torchvision's
    # (`IMBALANCECIFAR10(torchvision.datasets.CIFAR10)`), by qualified name: built with download=True, they download.
    downloading_classes: frozenset[str] = frozenset()
    # Functions of this module that no module of its programs names anywhere, itself included: dead code for
    # these programs (`cal_gradient_penalty` of a GAN library whose models never call it).
    unreferenced_functions: frozenset[str] = frozenset()
    # Model classes of the modules this one imports, directly or not, whose forward may leave a sub-module
    # without a gradient: (qualified name, the sub-module, where the class is). A DDP wrap of one, or of a model
    # convert cannot follow to its class, needs find_unused_parameters=True.
    skipping_classes: tuple[tuple[str, str, Site], ...] = ()
    # What the other modules of this module's programs call two or more times before one backward, by the last part of
    # its spelling (`model` for `self.model(...)`), with where: a wrapped model of that name runs several forwards per step.
    repeated_forwards: tuple[tuple[str, Site], ...] = ()
    # `torch.cuda.set_device(...)` calls in unconverted modules of this entry point's programs, with where: after
    # setup_distributed() they would move every process to one GPU.
    foreign_set_devices: tuple[tuple[str, Site], ...] = ()
    # Integer defaults of command-line options that other modules of the project declare
    # (`--batch_size`, default 1, in options/base_options.py), by destination.
    option_defaults: tuple[tuple[str, int], ...] = ()
    # Qualified names of the other project functions and classes this module calls whose writes the project
    # handles (converted there, guarded inside, guarded at the call, or none): no DDP422 for them.
    project_calls: frozenset[str] = frozenset()
    # Parameters of this module's functions that size a DataLoader's batch, whose callers in other modules also
    # size something per step with what they pass (a GAN's noise): (function, parameter, where the caller sizes).
    batch_sizers: tuple[tuple[str, str, Site], ...] = ()
    # Where another module of this module's programs draws random augmentations (a `Random*` transform, or
    # `random` in a dataset class): a loader here without workers draws them alike on every process.
    augmentations: Site | None = None
    # Losses of another module of this module's programs that pair the samples of a batch with each other (a
    # similarity matrix, hard-pair mining), with where: a loader here keeps its batch per process for them.
    pair_losses: tuple[tuple[str, Site], ...] = ()
    # Functions of this module that build the training and the evaluation loaders alike (`data_provider(args,
    # flag)`): their loaders stay whole here, and the callers split what they train on.
    whole_builders: frozenset[str] = frozenset()
    # Such functions of other modules, as this module calls them, with where their result holds a loader:
    # -1 for the whole value, else its index in the returned tuple; once for each loader the tuple holds.
    split_builders: tuple[tuple[str, int], ...] = ()
    # Qualified names of the other project functions and classes this module calls whose module, or one it
    # imports, wraps a model or trains (`EdgeConnect(config)`, whose `train()` runs DDP's backward): code
    # that runs one may reach a collective, so no barrier goes around it.
    training_calls: frozenset[str] = frozenset()
    # Qualified names of the other project functions this module calls that take one training step each time they
    # run (`utils.train_step`), and of such methods of their classes (`loss.LossCompute.__call__`): a loop that calls
    # one trains on the batches it hands it. Each comes with the flags that choose whether it takes its step.
    step_calls: tuple[tuple[str, tuple[Flag, ...]], ...] = ()
    # Qualified names of the other project functions and classes this module calls whose training loop iterates
    # what they are handed (`train.Trainer(cfg, model, data_iter, ...)`), each with that parameter's name, its
    # position, and where the loop is: what this module hands there must be split here.
    batch_parameters: tuple[tuple[str, str, int, Site], ...] = ()
    # Functions of other project modules imported here that cut the batch they are handed into a fixed number of
    # groups (a collate_fn): a loader that collates with one yields as many training batches per item, whatever its
    # batch, so dividing its batch divides each of them.
    fixed_group_collates: frozenset[str] = frozenset()
    # Model classes (they define `forward`) of other project modules, as this module spells them
    # (`layer.MarginCosineProduct`): building one builds a module whose parameters an optimizer may step.
    model_classes: frozenset[str] = frozenset()
    # Functions and methods of other project modules that draw from the shared random state, as this module spells
    # them (`PC_Augmentation.random_point_dropout`, `utils.MixUp_AUG.aug`): handed a batch, they draw its noise.
    drawing_calls: frozenset[str] = frozenset()
    # Where the distributed helpers come from: a module of the project, or None to inline them.
    helpers_module: str | None = None

    @property
    def converts(self) -> bool:
        """Whether the project makes this module part of a DDP program it would not be on its own."""
        return bool(
            self.imported_wraps or self.drives is not None or self.guarded_functions or self.directory_functions
            or self.splits_loaders or self.trains
        )  # fmt: skip

    @property
    def guard_only(self) -> bool:
        """A module converted only for the writes of its functions that converted code calls, or the directories
        they make."""
        return bool(self.guarded_functions or self.directory_functions) and not (self.imported_wraps or self.drives is not None or self.splits_loaders or self.trains)

    def batch_sized_by_caller(self, function: str, parameter: str) -> Site | None:
        return next((site for f, p, site in self.batch_sizers if (f, p) == (function, parameter)), None)

    def wrap_site(self, qualified: str) -> Site | None:
        return dict(self.imported_wraps).get(qualified)

    def subclass_site(self, qualified: str) -> Site | None:
        return dict(self.subclass_wraps).get(qualified)

    def option_default(self, destination: str) -> int | None:
        return dict(self.option_defaults).get(destination)

    def loader_site(self, qualified: str) -> Site | None:
        return dict(self.loader_sources).get(qualified)

    def writer_site(self, qualified: str) -> Site | None:
        return dict(self.guarded_calls).get(qualified)

    def unguarded_writer_site(self, qualified: str) -> Site | None:
        return dict(self.unguarded_calls).get(qualified)
