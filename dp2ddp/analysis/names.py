"""Qualified names of the torch APIs the codemods recognise.

Every codemod resolves names through ``QualifiedNameProvider``, so
``nn.DataParallel`` after ``import torch.nn as nn`` and ``DP`` after
``from torch.nn import DataParallel as DP`` both land in these sets.
"""

from __future__ import annotations

DATA_PARALLEL = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)
FUNCTIONAL_DATA_PARALLEL = frozenset(
    {
        "torch.nn.parallel.data_parallel",
        "torch.nn.parallel.data_parallel.data_parallel",
    }
)
DISTRIBUTED_DATA_PARALLEL = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
    }
)


def is_data_parallel_like(name: str) -> bool:
    """A class name built on DataParallel's (``DataParallelWithCallback``, ``DataParallelModel``,
    ``BalancedDataParallel``), but neither torch's own DataParallel nor any DistributedDataParallel."""
    return "DataParallel" in name and name != "DataParallel" and "Distributed" not in name


INIT_PROCESS_GROUP = frozenset({"torch.distributed.init_process_group"})
DATA_LOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
DISTRIBUTED_SAMPLER = frozenset(
    {
        "torch.utils.data.DistributedSampler",
        "torch.utils.data.distributed.DistributedSampler",
    }
)
# Samplers convert turns into a DistributedSampler with the same shuffle.
RANDOM_SAMPLER = frozenset({"torch.utils.data.RandomSampler", "torch.utils.data.sampler.RandomSampler"})
SEQUENTIAL_SAMPLER = frozenset({"torch.utils.data.SequentialSampler", "torch.utils.data.sampler.SequentialSampler"})
# Samplers that draw from the whole dataset on every process: under DDP each process trains on all of it.
PLAIN_SAMPLERS = RANDOM_SAMPLER | SEQUENTIAL_SAMPLER | frozenset(
    {
        "torch.utils.data.WeightedRandomSampler", "torch.utils.data.sampler.WeightedRandomSampler",
        "torch.utils.data.SubsetRandomSampler", "torch.utils.data.sampler.SubsetRandomSampler",
    }
)  # fmt: skip
BATCH_SAMPLER_CLASSES = frozenset({"torch.utils.data.BatchSampler", "torch.utils.data.sampler.BatchSampler"})
# What a sampler class of the script's own derives from.
SAMPLER_BASES = PLAIN_SAMPLERS | BATCH_SAMPLER_CLASSES | frozenset({"torch.utils.data.Sampler", "torch.utils.data.sampler.Sampler"})
# Calls whose arguments size a tensor or a draw: a batch size among them must match the loader's batch.
TENSOR_FACTORIES = frozenset(
    f"torch.{name}" for name in ("zeros", "ones", "full", "empty", "randn", "rand", "randint", "arange", "eye", "tensor", "Tensor")
)
TENSOR_RESHAPES = frozenset({"view", "reshape", "expand", "repeat", "new_zeros", "new_ones", "new_full", "new_empty", "resize_"})
# Draws sized by their argument: `zdist.sample((batch_size,))` from a torch.distributions object.
SIZED_DRAWS = frozenset({"sample", "rsample", "sample_n"})
ITERABLE_DATASET = frozenset(
    {"torch.utils.data.IterableDataset", "torch.utils.data.dataset.IterableDataset"}
)
NN_MODULE = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})

# Names of the helpers that converted scripts define. Finding them marks a
# script as converted by dp2ddp, which keeps every codemod idempotent.
SETUP_HELPER = "setup_distributed"
WRAP_HELPER = "wrap_ddp"
MAIN_PROCESS_HELPER = "is_main_process"
MAIN_PROCESS_FIRST_HELPER = "main_process_first"
SUM_HELPER = "all_reduce_sum"
MEAN_HELPER = "all_reduce_mean"
METER_HELPER = "all_reduce_meter"
METER_COPY_HELPER = "all_reduce_meter_copy"
EVALUATION_SHARD_HELPER = "evaluation_shard"
LOCAL_DEVICE_HELPER = "local_device"
LOAD_STATE_HELPER = "load_model_state"
SHARDED_SAMPLER_HELPER = "ShardedSampler"
SPLIT_LOADER_HELPER = "split_loader"
WORKER_INIT_HELPER = "WorkerInitPerProcess"
# Wraps a split training dataset whose augmentations the main process draws: each process draws its own.
DRAWN_PER_PROCESS_HELPER = "DrawnPerProcess"
# Holds a training step's lines that draw noise for the batch: each process draws its own.
PER_PROCESS_RANDOM_HELPER = "per_process_random"
# Hands every process the main process's value of something each draws for itself (a timestamp naming a file).
MAIN_VALUE_HELPER = "main_process_value"
HELPERS = frozenset(
    {
        SETUP_HELPER,
        WRAP_HELPER,
        MAIN_PROCESS_HELPER,
        MAIN_PROCESS_FIRST_HELPER,
        SUM_HELPER,
        MEAN_HELPER,
        METER_HELPER,
        METER_COPY_HELPER,
        EVALUATION_SHARD_HELPER,
        LOCAL_DEVICE_HELPER,
        LOAD_STATE_HELPER,
        SHARDED_SAMPLER_HELPER,
        SPLIT_LOADER_HELPER,
        WORKER_INIT_HELPER,
        DRAWN_PER_PROCESS_HELPER,
        PER_PROCESS_RANDOM_HELPER,
        MAIN_VALUE_HELPER,
    }
)
# Helpers that every process must call together.
COLLECTIVE_HELPERS = frozenset({SUM_HELPER, MEAN_HELPER, METER_HELPER, METER_COPY_HELPER})

# torch.distributed functions that only ask about the process group; every
# other torch.distributed call is treated as a collective.
DISTRIBUTED_QUERIES = frozenset(
    f"torch.distributed.{name}"
    for name in (
        "get_rank",
        "get_world_size",
        "get_backend",
        "is_initialized",
        "is_available",
        "is_nccl_available",
        "is_gloo_available",
        "is_torchelastic_launched",
        "get_node_local_rank",
        "destroy_process_group",
    )
)
# What returns a process group (``new_subgroups`` returns it first in a tuple), and the default group itself.
PROCESS_GROUP_FACTORIES = frozenset(
    {
        "torch.distributed.new_group", "torch.distributed.distributed_c10d.new_group",
        "torch.distributed.distributed_c10d._get_default_group",
    }
)  # fmt: skip
PROCESS_SUBGROUP_FACTORIES = frozenset(
    {
        "torch.distributed.new_subgroups", "torch.distributed.new_subgroups_by_enumeration",
        "torch.distributed.distributed_c10d.new_subgroups", "torch.distributed.distributed_c10d.new_subgroups_by_enumeration",
    }
)  # fmt: skip
DEFAULT_PROCESS_GROUP = frozenset(
    {
        "torch.distributed.group.WORLD", "torch.distributed.GroupMember.WORLD",
        "torch.distributed.distributed_c10d.group.WORLD", "torch.distributed.distributed_c10d.GroupMember.WORLD",
    }
)  # fmt: skip
# Parameter names that hold a process group by convention, as torch's own functions name them.
PROCESS_GROUP_PARAMETERS = frozenset({"process_group", "pg", "group"})
# A process group's own collectives: ``pg.barrier()``, ``pg.monitored_barrier()``, ``pg.allreduce([t])``.
PROCESS_GROUP_METHODS = frozenset(
    {
        "barrier", "monitored_barrier", "allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced",
        "broadcast", "reduce", "reduce_scatter", "scatter", "gather", "alltoall", "alltoall_base",
    }
)  # fmt: skip

# Calls whose effect outside the process (a line on the console, a file)
# should happen once per run, not once per process.
SIDE_EFFECT_CALLS = frozenset(
    {
        "builtins.print",
        "pprint.pprint",
        "torch.save",
        "torchvision.utils.save_image",
        "os.remove",
        "os.unlink",
        # A link to the latest checkpoint: made by a second process, it finds the first one's (FileExistsError).
        "os.symlink",
        "os.link",
        # Forcing a file to disk: once per run, and os.devnull, which the other processes write to, refuses it (EINVAL).
        "os.fsync",
        "os.fdatasync",
        "os.rename",
        "os.replace",
        "urllib.request.urlretrieve",
        "torchvision.datasets.utils.download_url",
        "torchvision.datasets.utils.download_and_extract_archive",
        "torchvision.datasets.utils.extract_archive",
        "shutil.copy",
        "shutil.copy2",
        "shutil.copyfile",
        "shutil.copytree",
        "shutil.move",
        "shutil.rmtree",
        "sys.stdout.write",
        "sys.stderr.write",
        "json.dump",
        "pickle.dump",
        "numpy.save",
        "numpy.savetxt",
        # Images and figures written to disk: debug batches, plots.
        "cv2.imwrite",
        "imageio.imwrite",
        "imageio.imsave",
        "skimage.io.imsave",
        "matplotlib.pyplot.savefig",
        "matplotlib.pyplot.savefig",
    }
)
# Calls that run a shell command, whose effect is in a string convert does not read.
SHELL_COMMANDS = frozenset(
    {"os.system", "subprocess.call", "subprocess.run", "subprocess.check_call", "subprocess.check_output", "subprocess.Popen"}
)
LOGGING_FUNCTIONS = frozenset(
    f"logging.{name}" for name in ("debug", "info", "warning", "warn", "error", "exception", "critical", "log")
)
LOGGER_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
GET_LOGGER = frozenset({"logging.getLogger"})
# Module prefixes whose every call reports somewhere (wandb.init, wandb.log, ...).
REPORTING_MODULES = ("wandb.", "tensorboard_logger.")
# Calls that write a file other code may read back: a download, a cache, a renamed temporary file.
FILE_WRITES = frozenset(
    {
        "torch.save",
        "torchvision.utils.save_image",
        "os.rename",
        "os.replace",
        "shutil.copy",
        "shutil.copy2",
        "shutil.copyfile",
        "shutil.copytree",
        "shutil.move",
        "json.dump",
        "pickle.dump",
        "numpy.save",
        "numpy.savetxt",
        "urllib.request.urlretrieve",
        "torchvision.datasets.utils.download_url",
        "torchvision.datasets.utils.download_and_extract_archive",
        "torchvision.datasets.utils.extract_archive",
    }
)
# Calls that read a file, or ask whether one is there.
FILE_READS = frozenset(
    {
        "torch.load",
        "os.path.exists",
        "os.path.isfile",
        "os.path.isdir",
        "os.listdir",
        "glob.glob",
        "json.load",
        "pickle.load",
        "numpy.load",
        "numpy.loadtxt",
        "pandas.read_csv",
        "PIL.Image.open",
    }
)
# Constructors of objects that write somewhere: each process would open its own.
WRITER_CONSTRUCTORS = frozenset(
    {
        "torch.utils.tensorboard.SummaryWriter",
        "torch.utils.tensorboard.writer.SummaryWriter",
        "tensorboardX.SummaryWriter",
        "visdom.Visdom",
        "wandb.init",
        "tensorboard_logger.Logger",
        "tensorflow.summary.FileWriter",
        "tensorflow.compat.v1.summary.FileWriter",
        "tensorflow.summary.create_file_writer",
    }
)
# Directory creation: with exist_ok it is idempotent, and every process may run it.
MAKE_DIRECTORY = frozenset({"os.makedirs", "os.mkdir"})
# Methods that save a model to files: `model.module.save(path)`, `model.save_pretrained(path)`.
MODEL_SAVE_METHODS = frozenset({"save", "save_pretrained", "save_networks", "save_checkpoint", "save_model"})
# The `progress` package's bars (`Bar("Training", max=len(loader))`, vendored under utils/ by many CIFAR/ImageNet scripts).
PROGRESS_BARS = frozenset({"Bar", "IncrementalBar", "ChargingBar", "FillingSquaresBar", "FillingCirclesBar", "ShadyBar", "PixelBar"})
TQDM = frozenset({"tqdm.tqdm", "tqdm.trange", "tqdm.auto.tqdm", "tqdm.auto.trange", "tqdm.notebook.tqdm"})
TORCH_LOAD = frozenset({"torch.load"})
TORCH_SAVE = frozenset({"torch.save"})
NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode"})
REDUCE_LR_ON_PLATEAU = frozenset(
    {"torch.optim.lr_scheduler.ReduceLROnPlateau", "torch.optim.ReduceLROnPlateau"}
)
# Values each process draws for itself: a run id or a timestamp that names a directory differs per process.
PER_PROCESS_VALUES = frozenset(
    {
        "random.randint",
        "random.random",
        "random.choice",
        "uuid.uuid1",
        "uuid.uuid4",
        "time.time",
        "time.strftime",
        "datetime.datetime.now",
        "datetime.datetime.today",
        "secrets.token_hex",
    }
)
# Calls that create or write a file or a directory at a path.
PATH_USERS = frozenset(
    {"os.makedirs", "os.mkdir", "torch.save", "shutil.copy", "shutil.copyfile", "shutil.copytree", "logging.FileHandler"}
)
# SummaryWriter's own methods: whatever holds the writer (a parameter, an attribute), a call writes an event file.
SUMMARY_WRITER_METHODS = frozenset(
    {
        "add_scalar",
        "add_scalars",
        "add_image",
        "add_images",
        "add_histogram",
        "add_figure",
        "add_text",
        "add_graph",
        "add_embedding",
        "add_pr_curve",
        "add_hparams",
        "add_video",
        "add_audio",
        "add_summary",
    }
)
# Losses whose "mean" is not a plain mean over samples when they carry class weights (the
# sum of the targets' weights divides), and, for cross-entropy, the loss of in-batch contrastive training.
CROSS_ENTROPY_LOSS = frozenset({"torch.nn.CrossEntropyLoss", "torch.nn.modules.loss.CrossEntropyLoss"})
NLL_LOSS = frozenset({"torch.nn.NLLLoss", "torch.nn.modules.loss.NLLLoss"})
CROSS_ENTROPY = frozenset({"torch.nn.functional.cross_entropy"})
NLL = frozenset({"torch.nn.functional.nll_loss"})
ARANGE = frozenset({"torch.arange"})
MATRIX_PRODUCTS = frozenset({"torch.matmul", "torch.mm"})
EINSUM = frozenset({"torch.einsum"})
# torch.optim's optimizers, each of which takes `lr` second (`SGD(params, lr=...)`).
OPTIMIZERS = frozenset(
    f"torch.optim.{name}"
    for name in (
        "SGD", "Adam", "AdamW", "Adamax", "Adadelta", "Adagrad", "Adafactor", "ASGD", "LBFGS", "NAdam", "RAdam",
        "RMSprop", "Rprop", "SparseAdam",
    )
) | frozenset(
    f"torch.optim.{module}.{name}"
    for module, name in (
        ("sgd", "SGD"), ("adam", "Adam"), ("adamw", "AdamW"), ("adamax", "Adamax"), ("adadelta", "Adadelta"),
        ("adagrad", "Adagrad"), ("_adafactor", "Adafactor"), ("asgd", "ASGD"), ("lbfgs", "LBFGS"), ("nadam", "NAdam"),
        ("radam", "RAdam"), ("rmsprop", "RMSprop"), ("rprop", "Rprop"), ("sparse_adam", "SparseAdam"),
    )
)  # fmt: skip
# Schedulers that set the learning rate from bounds of their own, with those bounds' positions after the optimizer.
CYCLIC_SCHEDULERS: dict[str, tuple[str, ...]] = {
    "torch.optim.lr_scheduler.OneCycleLR": ("max_lr",),
    "torch.optim.lr_scheduler.CyclicLR": ("base_lr", "max_lr"),
}

# The last part of a library function or class that opens a file in the mode it is given (second argument
# or `mode=`): `h5py.File`, `tarfile.open`, `gzip.open`, `zipfile.ZipFile`, `numpy.memmap`, `pandas.HDFStore`.
FILE_OPENERS = frozenset({"open", "File", "ZipFile", "TarFile", "memmap", "HDFStore"})

# Calls that seed a random generator of the process with their one argument.
SEEDING_CALLS = frozenset({
    "torch.manual_seed", "torch.random.manual_seed", "torch.cuda.manual_seed", "torch.cuda.manual_seed_all",
    "numpy.random.seed", "random.seed",
})  # fmt: skip
