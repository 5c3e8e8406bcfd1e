#!/usr/bin/env python3
"""devicelint: a static checker for PyTorch device anti-patterns (standard library only).

Usage::

    python tools/devicelint.py                    # what pyproject's [tool.devicelint] paths names, else the project
    python tools/devicelint.py PATH...            # files or folders (recurses into *.py), linted as one tree
                                                  # (a folder that holds several projects: one project at a time)
    python tools/devicelint.py --porting PATH...  # every .cuda(), guarded or not, and the opt-in rules too
    python tools/devicelint.py --list-rules       # codes and one-line descriptions
    python tools/devicelint.py --explain DEV003   # why a rule exists and how to fix it
    python tools/devicelint.py --select DEV002,DEV003 --exclude 'tests/*' src/

Findings print like any linter, sorted and once each: ``path:line:col: CODE message``, then one
summary line (a clean run's says how many files it checked). Exit code 0 means clean, 1 means findings
(a file that does not parse is one DEV000 finding), 2 means a bad command line or a file that could not
be checked (missing, a broken link, undecodable, nested too deeply): those print ``path: error: ...`` on stderr.

Silence one line with ``# devicelint: ignore[DEV002]`` (several codes: ``ignore[DEV002,DEV007]``;
a bare ``# devicelint: ignore`` silences every code on that line). The comment must sit on the
line the finding names.

The default rules are the ones precise on code nobody tuned the lint on (precision first: it is meant
to stay switched on in pre-commit), ``.cuda()`` (DEV001) among them. Tensors made in forward() (DEV007)
and the silent CPU fallback (DEV011) are opt-in: ``--porting``, or ``porting = true`` under
[tool.devicelint] in the project's pyproject.toml, for code becoming device-portable; porting also
reports every ``.cuda()`` (a guarded one pins device 0 all the same) and CUDA-only code.

What runs only where CUDA exists is not reported (by default); a script's top level and a caller with no
CUDA check on the way are reached. The lint follows the file and its entry points, and calls into the
other checked files and the modules they import, each call resolved to its definitions by scope and
import: ``f()`` in the enclosing functions, the module and its imports; ``self.f()`` in the class and its
bases; ``mod.f()`` in an imported module; ``x.f()`` in the class ``x`` was made from (``x = Trainer()``,
``x: Trainer``, ``self.x = Trainer()``, ``super().f()``). A call it cannot resolve that way reaches nothing
it knows: a method is never matched by its name alone. A finding in a function no call was found to
says that the lint cannot tell whether its callers check for CUDA. Not reported:
- guards: ``if torch.cuda.is_available():``, ``if device.type == "cuda":``, ``device.startswith("cuda")``,
  ``isinstance(x, torch.cuda.FloatTensor)``, a backend asked for by name (``args.gpu_type == "mps"``),
  the ``else`` of a CPU check, after ``if not ...: return``, a skip decorator or a module's
  ``pytestmark``, a flag an availability check sets (``use_cuda = torch.cuda.is_available()``, also as an
  argument), a flag off by default (``--cuda`` store_true, ``args.gpu is not None``), a GPU id compared
  with a number where each default the lint sees takes the CPU side (``if gpu_id >= 0:`` with
  ``gpu_id=-1`` or ``--gpu default=[-1]``; ``default=0`` guards nothing), the branch of
  ``isinstance(model, DataParallel)`` that failed (DEV009: not wrapped there), a helper that
  returns a check (or a tensor's ``is_cuda``: ``if self.is_cuda():``), a test's ``with pytest.raises(...)``/
  ``pytest.warns(...)`` (the failure is the point), a flag a block refuses without the accelerator
  (``if cuda and not torch.cuda.is_available(): raise``), a branch a parameter's value decides that no caller
  takes (``if name.endswith(".pth"):`` where the default and every caller's constant make it false; not in a
  hubconf.py, whose callers are outside; not with --porting);
- code after NCCL starts or CUDA is asserted (``assert torch.cuda.is_available()``, ``if not ...:
  sys.exit()``), wherever that happens: in the function, in ``__main__``, in a ``setup()`` or
  ``init_distributed_mode()`` helper in another file that starts NCCL or exits without CUDA on every
  path; a function every caller in the checked files reaches that way is CUDA-only too; an ``if``
  with the same test as a block that started NCCL; after a collective or a ``DistributedSampler(d)`` not told
  its rank (both need a process group); under TensorRT/CuPy imports;
- tests of a CUDA-only compiled extension (importing a ``CUDAExtension``, or beside its build script),
  and modules that import one at their top level, directly or through a checked module;
- code nothing reaches: a private helper no file names, and in an application (no pyproject
  ``[project]`` or setup.py: no users outside) a function or class no file names or evaluates (a
  wrapping decorator such as ``@torch.no_grad()`` registers nothing; another file's calls of its own
  function of the same name are not calls of this one), and what only such code names; a script that stops at a
  top-level import of a module the repository lacks (``from csml import CSML`` with no csml module, but a
  ``CSML`` defined in a checked file: a module renamed since), after that import. A file that does not parse
  (Python 2) is one DEV000 finding that says nothing in it was checked.
A flag something only wishes on guards nothing: ``--cuda default=True``, ``--gpus default=1``,
``--gpu_ids default="0"``, a parameter every caller passes ``gpu=True``, ``cuda = not no_cuda``, another
script's option on by default; nor does a flag asking for the CPU that no availability check sets
(``"cpu" if args.no_cuda else "cuda"``, ``--cpu`` store_true): left at its default, the GPU path runs.
Flags are told by their words: ``use_cuda``, ``n_gpu``, ``gpu_ids``, not ``output_path``; a flag an availability
check sets is followed across files through attributes (``args.use_gpu = ... torch.cuda.is_available()`` in the
entry script, ``if self.args.use_gpu:`` elsewhere) and names passed on (``Net(cuda=use_cuda)``, ``self.cuda``), but
a name a file binds only to True stays its own wish; one set by
assignment also by its owner (``cfg.CUDA = True`` is not ``args.cuda``), and ``args.cuda > 0`` of an
option off by default asks like ``args.cuda``. A config constant wishes too: ``GPU = cfg["gpu_train"]`` where
every config dict sets the key True, ``cfg.model.cuda`` of a config class field ``cuda: bool = True``. A type test
(``isinstance(x, torch.cuda.FloatTensor)``) makes no tensor; a device name only compared or formatted
(``"torch." + DEVICE + ".FloatTensor"``) places none.

Hidden defaults are reported where they sit: ``def f(device="cuda")`` (unless only a backend name, never
read, or every caller passes the device: a private helper's, or in an application any function's or class's),
``add_argument("--device", default="cuda")`` (any option whose default names an accelerator), ``device_map="cuda"``,
``getattr(args, "device", "cuda")``, ``cfg.get("device", "cuda")``, ``torch.set_default_device("cuda")``, and
a literal passed by position to a parameter named for a device (``model.sample(8, "cuda")``).
A file this process just wrote (also through a helper called earlier in the function, such as an
early-stopping object that saves the best model; a save up to three calls deep, a method of the same class, a
helper given the same path for its path parameter, a `shutil.copyfile` of a saved file; or before every call of
the function holding the load: `trainer.fit()` then `trainer.test(load=True)`; not from the other branch of an
`if`, and not in a process that only loads), or whose every save in the checked files writes no tensors (a
config, counters, CPU random states), or that a checked file saves from CPU tensors
(``torch.save(feats.cpu(), "feats.pt")``), loads anywhere: no map_location is asked for; nor in a data set
class (``class FooDataset``, a ``*Dataset`` base), whose files hold what data processing made on the host; nor,
in a test, a path from pytest's ``tmp_path`` or from ``__file__`` (the repository's own test data), also through
fixtures. A ``map_location`` parameter whose default is None passes none. ``.cuda()`` that resolves to the
repository's own ``def cuda`` (which calls no ``.cuda()`` itself) is not torch's. Unpickling is reported at the call:
torch.load without ``weights_only=True`` (not for a file this process just wrote, one shipped beside the code (a path
from ``__file__``, in any module), or one this file saves at a path built the same way: a template of the code's own
text filled with no command-line option, ``"models/epo%d.tar" % epoch``, or a name bound once to a call given
nothing),
``torch.hub.load_state_dict_from_url``, ``model_zoo.load_url`` (also imported by name), Lightning's
``load_from_checkpoint``, any function in the
checked files that calls torch.load with ``weights_only=False``, and ultralytics' ``torch_load``.

Device strings (DEV002) and CUDA runtime calls (DEV012) are allowed in the project's own device module:
a file with a function that checks availability and returns a device, or a file that says so itself
with a comment line of its own (the device kit's files carry it, so the kit is clean wherever it is
copied)::

    # devicelint: device-module -- naming devices is this file's job

Name more files with ``--allow-devices-in PATTERN`` (a file name, a path suffix or a glob) or in
pyproject.toml::

    [tool.devicelint]
    paths = ["mypkg", "tools", "*.py"]        # what a run without paths lints
    allow-devices-in = ["mypkg/config.py"]
    porting = true                            # opt-in rules and CUDA-only code too

What counts as a hazard is the labelling policy the figures are measured by (the template README's
"Device lint" section has them, per rule, with the repositories and commits): a line that, reached with
the code's default arguments or by a caller in the repository, fails or silently misplaces tensors on a
machine without the named accelerator, loads a possibly GPU-saved checkpoint without ``map_location``,
unpickles a file that may come from elsewhere, or saves a wrapper's ``module.`` keys or a whole module.

Some rules are heuristics and say so: DEV006 decides "this is a module" from the variable name
(also of a saved dict's values: ``{"encoder": encoder}``), DEV008 decides "this is a Dataset" from the
base-class name, DEV009 follows names bound to DataParallel/DDP(...) within one file and into the functions
they are passed to by name (``train(args, model)`` saving ``model.state_dict()``), and DEV007 follows
helpers called from forward() within one file; a function-valued variable (``fn = self._load; fn()``) is
not followed.

To use it elsewhere, copy this one file into the other project and run ``python devicelint.py
PATH...``, or use the pre-commit hook ``devicelint`` from the template repository.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import functools
import gc
import glob
import io
import itertools
import os
import re
import sys
import tokenize
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple


class Rule(NamedTuple):
    """One check: its code, what it reports, how to fix it, and whether it runs by default."""

    code: str
    summary: str
    hint: str
    default: bool = True


RULES = {rule.code: rule for rule in (
    Rule("DEV000", "syntax error", "Fix the syntax error; nothing else in the file was checked."),
    Rule("DEV001", ".cuda() outside a CUDA guard",
         "It crashes on a machine without CUDA and pins device 0. Reported where a run without CUDA reaches it "
         "(a script's top level, a caller with no CUDA check on the way); not under an availability guard, a "
         "flag an availability check sets, or after NCCL starts or CUDA is asserted. Where no call to the "
         "function was found, the message says the lint cannot tell. Use .to(device) with a device passed in "
         "as an argument, or put the call under `if torch.cuda.is_available():`. With --porting every "
         ".cuda() is reported, guarded or not."),
    Rule("DEV002", "hard-coded accelerator device",
         "A literal 'cuda'/'mps' (in torch.device(), .to(), device=, a `device = ...` default or an "
         "argparse --device default) fails where that backend is absent. Take the device as a "
         "parameter and decide it once, in a module that says so on a line of its own "
         "(`# devicelint: device-module`) or that --allow-devices-in names."),
    Rule("DEV003", "load without map_location",
         "torch.load/torch.jit.load restore tensors to the device they were saved from, so a GPU "
         "checkpoint fails on a CPU machine. Pass map_location=device, or 'cpu'."),
    Rule("DEV004", "torch.load without weights_only=True",
         "Unpickling runs arbitrary code. Pass weights_only=True and save plain values (tensors, "
         "dicts, lists, numbers, strings). If the checkpoint holds objects (an argparse Namespace, "
         "a config object, a numpy array), weights_only=True alone will fail: save vars(args), "
         "dicts and .tolist() instead."),
    Rule("DEV005", "DEVICE imported by value from the config module",
         "The copy goes stale when the device is configured at start-up. Import the module and "
         "read config.DEVICE when it is needed."),
    Rule("DEV006", "torch.save of a whole module",
         "A pickled module pins its class path and device. Save model.state_dict() instead "
         "(judged by the variable name: model, net, module, self)."),
    Rule("DEV007", "tensor factory in forward() without device=",
         "Opt-in (--porting): most such tensors are indices, 0-dim limits or host bookkeeping. "
         "The tensor is created on the CPU and may meet GPU inputs. Pass device=x.device, use "
         "torch.*_like(x) or x.new_*(), or register a buffer. Helpers called from forward() in "
         "the same file count as forward().", default=False),
    Rule("DEV008", "device move inside Dataset.__getitem__",
         "CUDA fails in DataLoader worker processes. Return CPU tensors and move the batch in "
         "the training loop."),
    Rule("DEV009", "state_dict() of a DataParallel/DDP-wrapped model",
         "Its keys carry a 'module.' prefix that an unwrapped model rejects. Save "
         "model.module.state_dict()."),
    Rule("DEV010", "legacy CUDA tensor type outside a CUDA guard",
         "torch.cuda.FloatTensor and friends crash without CUDA, named as a type or as a string "
         "(`.type(\"torch.cuda.FloatTensor\")`, `torch.set_default_tensor_type(...)`); a type test "
         "(`isinstance(x, torch.cuda.FloatTensor)`) makes none and is not reported. Use torch.tensor(..., "
         "device=device) or torch.empty(..., device=device)."),
    Rule("DEV011", "accelerator chosen by availability (silent CPU fallback)",
         "Off by default: it cannot crash, but a run meant for the GPU quietly trains on the CPU. "
         "Resolve the device once and refuse what is absent (devkit's resolve_device).",
         default=False),
    Rule("DEV012", "CUDA runtime call outside a CUDA guard",
         "torch.cuda.synchronize(), set_device(), current_device(), get_device_name()/properties(), "
         "mem_get_info(), Stream() and friends raise without a CUDA driver. Call them under "
         "`if torch.cuda.is_available():` or `if device.type == \"cuda\":`, or use the torch.accelerator "
         "equivalents. (empty_cache(), memory_allocated(), manual_seed() and device_count() are safe "
         "without CUDA and are not reported.)"),
)}

# Files named here (or by --allow-devices-in / [tool.devicelint] allow-devices-in) may name devices; a file
# that resolves devices itself (a function that checks availability) may too, whatever its name.
DEVICE_MODULES: tuple[str, ...] = ()
SKIP_DIRS = {".venv", "venv", ".git", "__pycache__", "build", "dist", ".tox", ".eggs", "node_modules"}
# "cpu" and "meta" are absent on purpose: they exist everywhere, so naming them is a choice, not a guess.
_ACCELERATOR = re.compile(r"(cuda|mps|xpu|hpu|xla|npu|ipu)(:\d+)?\Z")  # "gpu" is no torch device: a flag's value
_FACTORIES = {"zeros", "ones", "empty", "full", "arange", "tensor", "randn", "rand", "randint",
              "randperm", "eye", "linspace", "logspace", "empty_strided", "scalar_tensor"}
_WRAPPERS = {"DataParallel", "DistributedDataParallel", "DDP"}
_DTYPE = re.compile(r"torch\.(u?int\d*|float\d*|bfloat16|half|double|long|short|bool|complex\d*)\Z")
_TYPED_CUDA = re.compile(r"torch\.cuda\.\w*Tensor\Z")
_COLLECTIVES = {"all_reduce", "all_gather", "all_gather_object", "broadcast", "reduce_scatter",
                "all_to_all", "reduce", "gather", "scatter", "barrier"}
_HOST_USES = {"item", "tolist", "numpy", "cpu", "int", "float", "len", "range", "enumerate", "zip", "list",
              "print", "log", "info", "debug", "warning", "log_dict", "add_scalar", "add_scalars", "format", "str"}
# torch.cuda calls that raise on a machine without a CUDA driver (checked on a CPU-only torch 2.x).
_CUDA_RUNTIME = {"synchronize", "set_device", "current_device", "get_device_name", "get_device_properties",
                 "get_device_capability", "mem_get_info", "reset_peak_memory_stats", "reset_max_memory_allocated",
                 "reset_max_memory_cached", "Stream", "current_stream", "default_stream", "ipc_collect", "init",
                 "set_per_process_memory_fraction", "get_rng_state", "get_rng_state_all", "utilization",
                 "memory_summary", "device", "set_stream", "Event", "CUDAGraph", "graph", "current_blas_handle",
                 "ExternalStream"}
# Helpers outside the checked files known to unpickle with weights_only=False unless told otherwise.
_UNSAFE_HELPERS = {"ultralytics.utils.patches.torch_load": "ultralytics' torch_load() sets weights_only=False"}
_HELPER_LOADS = {"partial", "load_state_dict_from_url", "load_url", "load_from_checkpoint", "load"} | \
    {n.rsplit(".", 1)[-1] for n in _UNSAFE_HELPERS}
_LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric")  # Fabric/LightningLite there: load() unpickles
# Calls whose device argument names a backend type (autocast, GradScaler) and places nothing.
_TYPE_ONLY = {"autocast", "GradScaler", "is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled",
              "get_autocast_gpu_dtype", "is_available", "device_count"}
_MOVERS = ("to_device", "todevice", "move_to", "to_cuda", "to_gpu", "send_to", "place")
# Names that hold model or training state (saved from the device it lives on), not a cache of host data.
_STATE_NAMES = ("model", "net", "state", "ckpt", "checkpoint", "weight", "optim", "param", "dict", "module",
                "snapshot", "save", "ema", "generator", "discriminator", "encoder", "decoder", "g_", "d_")
# Checkpoint entries under these names are usually objects (Namespace, config) that weights_only refuses.
_OBJECT_NAMES = {"args", "opt", "opts", "config", "cfg", "hparams", "options", "parser", "namespace"}
_MAY_ESTABLISH = {ast.Expr, ast.Assign, ast.AnnAssign, ast.If, ast.With, ast.AsyncWith, ast.Try, ast.Assert,
                  ast.Import, ast.ImportFrom}
# Names whose files a test itself wrote (pytest's fresh temporary folder) or ships beside itself (`__file__`).
_TEST_LOCAL = {"tmp_path", "tmpdir", "tmp_path_factory", "tmpdir_factory", "__file__"}
_CUDA_ONLY_MODULES = {"tensorrt", "pycuda", "cupy", "torch_tensorrt", "torch2trt"}
_EXIT_CALLS = {"exit", "quit", "_exit", "skip", "skipTest", "fail"}
# Decorators that wrap a function without registering it anywhere: nothing calls it because of them.
_WRAPPERS_ONLY = {"no_grad", "inference_mode", "enable_grad", "staticmethod", "classmethod", "lru_cache", "cache",
                  "wraps", "script", "ignore", "unused", "compile", "custom_fwd", "custom_bwd", "cached_property"}
# Context managers under which a test expects an error or a warning: what fails there is the point.
_EXPECTS = {"raises", "warns", "deprecated_call", "assertRaises", "assertRaisesRegex", "assertWarns",
            "assertWarnsRegex"}
# How a block can end, for "did this code start NCCL or check for CUDA on every path that goes on".
_FALL, _RET, _LOOP, _EXIT, _EST = "falls through", "returns", "leaves the loop", "exits", "CUDA established"
# Codes that a CUDA-only context hides (DEV002 there becomes DEV011).
_HIDEABLE = {"DEV001", "DEV002", "DEV003", "DEV010", "DEV012"}
_IGNORE = re.compile(r"#\s*devicelint:\s*ignore(?:\[([^\]]*)\])?", re.IGNORECASE)
_DEVICE_MODULE = re.compile(r"^\s*#\s*devicelint:\s*device-module\b", re.IGNORECASE | re.MULTILINE)
# The same without the line start: it begins with "#", which the regex engine finds fast, not at every position.
_DEVICE_MARK = re.compile(r"#\s*devicelint:\s*device-module\b", re.IGNORECASE)
_CUDA, _NOT_CUDA = "cuda", "not-cuda"
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)
# Calls that hand back the module or tensor they were called on: `Net().to(device).eval()` is still a Net.
_SAME_OBJECT = {"to", "cuda", "cpu", "eval", "train", "float", "half", "double", "bfloat16", "requires_grad_",
                "share_memory", "to_empty"}


class Finding(NamedTuple):
    """One reported hazard; tuples sort by path, line, column."""

    path: str
    line: int
    col: int
    code: str
    detail: str = ""

    def format(self) -> str:
        """The linter line: `path:line:col: CODE message` (the fix: --explain CODE)."""
        summary = RULES[self.code].summary
        message = f"{summary}: {self.detail}" if self.detail else summary
        return f"{self.path}:{self.line}:{self.col}: {self.code} {message}"


class LintError(Exception):
    """A file that could not be checked at all (undecodable, unreadable, nested too deeply)."""


def _parameter_defaults(arguments: ast.arguments) -> list[tuple[ast.arg, ast.expr]]:
    """Each parameter that has a default, with its default: the positional ones, then the keyword-only ones."""
    params = arguments.posonlyargs + arguments.args
    return [*zip(params[len(params) - len(arguments.defaults):], arguments.defaults),
            *((a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None)]


def _dotted(node: ast.AST) -> str:
    """`torch.nn.DataParallel` for a Name/Attribute chain, '' for anything else."""
    kind = type(node)  # exact types: this runs for most nodes, and ast's node classes are never subclassed here
    if kind is ast.Name:
        return node.id
    if kind is ast.Attribute:
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _last(node: ast.AST) -> str:
    """The last part of a dotted name or of a call's function: `DataParallel`, `cuda`, ''."""
    target = node.func if type(node) is ast.Call else node
    kind = type(target)
    if kind is ast.Attribute:
        return target.attr
    return target.id if kind is ast.Name else ""


def _keyword(call: ast.Call, name: str | None) -> ast.keyword | None:
    """The `name=` keyword of a call; name None finds `**kwargs` (then anything may be passed)."""
    for keyword in call.keywords:  # a loop, not next(generator): this runs several times for every call
        if keyword.arg == name:
            return keyword
    return None


def _string(node: ast.AST | None) -> str | None:
    """The value of a string constant, else None."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _guard(test: ast.AST, facts: _FileFacts | None = None) -> str | None:
    """_CUDA if the test being true establishes CUDA, _NOT_CUDA if it being false does, else None.

    `facts.unsafe_flags` names flags that are set to True without any availability check (`--cuda
    default=True`): they say what the user wants, not what the machine has, so they guard nothing; a call
    to a helper that checks availability (`has_gpu()`, anywhere in the checked files) is a check."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return {_CUDA: _NOT_CUDA, _NOT_CUDA: _CUDA}.get(_guard(test.operand, facts) or "")
    if isinstance(test, ast.BoolOp):  # `a and b` true: both hold; `a or b` false: neither holds
        strong, weak = (_CUDA, _NOT_CUDA) if isinstance(test.op, ast.And) else (_NOT_CUDA, _CUDA)
        guards = [_guard(v, facts) for v in test.values]
        return strong if strong in guards else weak if all(g == weak for g in guards) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        flag = _bool_compared(test)
        if flag is not None:  # `is_cuda == True` tests the flag itself, not a count or a None
            return _guard(flag, facts)
        return _compare_guard(test.left, test.ops[0], test.comparators[0], facts)
    if isinstance(test, ast.Call) and _last(test) == "isinstance" and len(test.args) == 2:
        types = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
        if types and all(_TYPED_CUDA.match(_dotted(t)) for t in types):
            return _CUDA  # `isinstance(x, torch.cuda.FloatTensor)`: x is a CUDA tensor, like `x.is_cuda`
    if isinstance(test, ast.Call) and _last(test) == "startswith" and test.args:
        prefix = _string(test.args[0]) or ""  # `device.startswith("cuda")`: like `device.type == "cuda"`
        return _CUDA if prefix.startswith("cuda") else _NOT_CUDA if prefix == "cpu" else None
    if isinstance(test, ast.Call):
        return _CUDA if _availability_call(test) or (facts is not None and facts.checks_availability(test)) else None
    return _flag_guard(test, facts)


def _bool_compared(test: ast.Compare) -> ast.AST | None:
    """The test a comparison with True or False makes: `x == True`, `x is True`, `x != False` test `x`; `x == False`,
    `x is False`, `x != True` test `not x`; None for any other comparison."""
    op, left, right = test.ops[0], test.left, test.comparators[0]
    constant = right if isinstance(right, ast.Constant) and type(right.value) is bool else \
        left if isinstance(left, ast.Constant) and type(left.value) is bool else None
    if constant is None or not isinstance(op, (ast.Eq, ast.Is, ast.NotEq, ast.IsNot)):
        return None
    other = left if constant is right else right
    if constant.value == isinstance(op, (ast.Eq, ast.Is)):
        return other
    return ast.UnaryOp(op=ast.Not(), operand=other)


def _availability_call(call: ast.Call) -> bool:
    """`torch.cuda.is_available()`, `torch.cuda.device_count()` and their mps/xpu/accelerator twins."""
    name = _dotted(call.func)  # the suffix first: most calls fail it, and it is the cheaper test
    return name.endswith((".is_available", ".device_count", ".is_initialized")) and \
        any(a in name for a in ("cuda", "mps", "xpu", "accelerator"))


# A flag's name says "accelerator" in one of its words: `use_cuda`, `n_gpu`, `ngpus`, `multiGPU`, `requires_cuda`
# (`output_path` holds "tpu" but no such word).
_ACCEL_WORD = re.compile(r"(?:^|[^a-z])(?:n|num|use|with|is|has|no|multi|on|requires)?_?"
                         r"(?:cuda|gpus?|nccl|mps|xpu|xla|tpus?)(?:only|available|enabled)?(?:$|[^a-z])")
_CPU_WORD = re.compile(r"(?:^|[^a-z])(?:no_?(?:cuda|gpus?)|(?:use_?|on_?|force_?|only_?)?cpu(?:_?only)?)(?:$|[^a-z])")


def _flag_key(node: ast.AST) -> str:
    """How a flag set by assignment is known: `use_cuda`; an attribute by its owner too (`cfg.cuda` is not
    `args.cuda`; `self.args.cuda` is `args.cuda`)."""
    return ".".join(_dotted(node).lower().split(".")[-2:]) if isinstance(node, ast.Attribute) else _last(node).lower()


@functools.lru_cache(maxsize=4096)  # asked of every keyword of every call; the same few names come back
def _accel_flag(name: str) -> bool:
    """Whether a (lower-case) flag name has an accelerator word in it."""
    return bool(_ACCEL_WORD.search(name))


def _flag_guard(node: ast.AST, facts: _FileFacts | None = None) -> str | None:
    """`use_cuda`, `args.gpu`, `x.is_cuda`: flags whose names say CUDA is on; `x.is_cpu`: off.

    Any name this file sets from an availability check (`pin = torch.cuda.is_available()`) is a flag too. A
    flag that asks for the CPU (`no_cuda`, `--cpu`) guards only where an availability check sets it: left at
    its default it chooses the accelerator, so the other branch runs on a machine without one."""
    name = _last(node).lower()
    if facts is not None and facts.cleared_flags and facts.cleared_after(node):  # most files clear none
        return _CUDA  # cleared where the availability test failed: a True default no longer says anything
    if not name or isinstance(node, ast.Call) or (facts is not None and (
            name in facts.unsafe_flags or _flag_key(node) in facts.unsafe_flags)):
        return None
    if facts is not None and name in facts.availability_flags:
        return _CUDA
    if name == "is_cpu":
        return _NOT_CUDA
    if _CPU_WORD.search(name):
        return _NOT_CUDA if facts is not None and name in facts.checked_flags else None
    return _CUDA if _accel_flag(name) else None


def _decorator_guard(decorator: ast.AST, facts: _FileFacts | None = None) -> bool:
    """A decorator that runs its function only where CUDA is: `skipIf(not cuda)`, `skipUnless()`, `@requires_cuda`."""
    markers = decorator.elts if isinstance(decorator, (ast.List, ast.Tuple)) else [decorator]
    for marker in markers:
        name = _last(marker).lower()
        if isinstance(marker, ast.Call) and marker.args and name in ("skipif", "skip_if"):
            if _guard(marker.args[0], facts) == _NOT_CUDA:
                return True
        elif isinstance(marker, ast.Call) and marker.args and name in ("skipunless", "skip_unless"):
            if _guard(marker.args[0], facts) == _CUDA:
                return True
        elif any(a in name for a in ("cuda", "gpu", "nccl")) and \
                ("skip" in name or _flag_guard(ast.Name(name)) == _CUDA):
            return True  # @pytest.mark.cuda, @requires_gpu, @skip_if_no_cuda, @pytest.mark.multi_gpu
    return False


def _compare_guard(left: ast.AST, op: ast.cmpop, right: ast.AST, facts: _FileFacts | None = None) -> str | None:
    """`device.type == "cuda"`, `"cuda" in str(d)`, `backend == "nccl"`, `args.gpu is not None`."""
    literal = _string(right) if _string(left) is None else _string(left)
    other = left if _string(left) is None else right
    typed = next((side for side in (left, right) if _TYPED_CUDA.match(_dotted(side)) or
                  _TYPED_CUDA.match(_string(side) or "")), None)
    if typed is not None and isinstance(op, (ast.Eq, ast.Is, ast.NotEq, ast.IsNot)):
        return _CUDA if isinstance(op, (ast.Eq, ast.Is)) else _NOT_CUDA  # `x.type() == "torch.cuda.FloatTensor"`
    if literal is not None:
        positive = isinstance(op, (ast.Eq, ast.In))
        if not positive and not isinstance(op, (ast.NotEq, ast.NotIn)):
            return None
        if literal.startswith(("cuda", "nccl", "gpu", "mps", "xpu")):  # `args.device == "gpu"`: the user asked
            return _CUDA if positive else _NOT_CUDA  # (a default that asks is reported where it is set)
        return (_NOT_CUDA if positive else _CUDA) if literal in ("cpu", "gloo") else None
    signed = next((side for side in (left, right) if _int(side) is not None), None)  # `-1` too
    known = None if signed is None or facts is None else _default_guard(left, op, right, signed, facts)
    if known is not None:
        return known or None
    base = _guard(other, facts) if isinstance(other, ast.Call) else _flag_guard(other, facts)
    number = next((side for side in (left, right) if isinstance(side, ast.Constant) and type(side.value) is int), None)
    if base is None or (number is not None and facts is not None and not isinstance(other, ast.Call)
                        and _last(other).lower() not in facts.checked_flags | facts.options_off):
        return None  # `gpus >= 1` counts what was asked for; only a count from device_count() says what exists
    negative = isinstance(op, (ast.Is, ast.Eq)) or \
        (isinstance(op, (ast.Lt, ast.LtE)) and isinstance(right, ast.Constant))
    return {_CUDA: _NOT_CUDA, _NOT_CUDA: _CUDA}[base] if negative else base


def _option_dest(call: ast.Call) -> str:
    """An add_argument call's destination, lower-cased: `dest=`, else its first long or short option's name."""
    options = [_string(a) or "" for a in call.args]
    dest = _string(getattr(_keyword(call, "dest"), "value", None)) or \
        next((o.lstrip("-").replace("-", "_") for o in options if o.startswith("-")), "")
    return dest.lower()


def _on_default(node: ast.AST | None) -> bool:
    """Whether an option's default turns it on: True, `1` (`--gpus`), `"0"` (`--gpu_ids`), `[0]`; not `"cpu"`, `-1`."""
    value = getattr(node, "value", None)
    return (value is not None and type(value) in (bool, int) and bool(value)) or \
        (type(value) is str and value.strip().lower() not in ("", "-1", "none", "cpu")) or \
        (isinstance(node, (ast.List, ast.Tuple)) and bool(node.elts))


def _int(node: ast.AST | None) -> int | None:
    """An int constant's value, `-1` included (a unary minus in the tree), else None (bools too)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _int(node.operand)
        return None if value is None else -value
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def _int_default(node: ast.AST | None) -> int | tuple[int, ...] | None:
    """A default that is an int (`-1`) or a list or tuple of ints (`[-1]`, a `nargs` option's), else None."""
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        values = tuple(_int(e) for e in node.elts)
        return None if None in values else values
    return _int(node)


_ORDER = {ast.Gt: int.__gt__, ast.GtE: int.__ge__, ast.Lt: int.__lt__, ast.LtE: int.__le__,
          ast.Eq: int.__eq__, ast.NotEq: int.__ne__}


def _default_guard(left: ast.AST, op: ast.cmpop, right: ast.AST, number: ast.AST, facts: _FileFacts) -> str | None:
    """`gpu_id >= 0`, `args.gpu[0] < 0` of a GPU id whose every visible default (argparse, a parameter) is a
    number or a list of numbers: _CUDA/_NOT_CUDA where each default takes the CPU side (the GPU needs an
    explicit id), '' where one takes the GPU side (no guard: `--gpu default=0`), None where the defaults do
    not settle it.

    The GPU side is the one a large id takes; `== -1`/`!= -1` compare with the CPU's value. A flag an
    availability check sets is left to the other rules."""
    other = right if number is left else left
    if isinstance(other, ast.Subscript):  # `args.gpu[0]` of `--gpu nargs="+" default=[-1]`
        other = other.value
    name, compare, limit = _last(other).lower(), _ORDER.get(type(op)), _int(number)
    if compare is None or not _accel_flag(name) or _CPU_WORD.search(name) or name in facts.checked_flags or \
            (isinstance(op, (ast.Eq, ast.NotEq)) and limit >= 0):
        return None  # `gpus == 0` counts, `gpu == 0` names one: the other rules decide
    defaults = facts.int_defaults.get(name)
    if not defaults:
        return None
    values = [v for d in defaults for v in ((d,) if isinstance(d, int) else d)]  # a list's ids reach it one by one
    holds = (lambda v: compare(v, limit)) if number is right else (lambda v: compare(limit, v))
    gpu_side = holds(10**9)
    if any(holds(v) == gpu_side for v in values):
        return ""  # the default itself takes the GPU branch: nothing guards it
    return _CUDA if gpu_side else _NOT_CUDA


def _wrapper_test(test: ast.AST) -> tuple[str, bool]:
    """`isinstance(model, nn.DataParallel)` (or a tuple of DP/DDP types): ("model", True); under `not`: False;
    ("", False) for any other test."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        name, wrapped = _wrapper_test(test.operand)
        return name, bool(name) and not wrapped
    if not (isinstance(test, ast.Call) and _last(test) == "isinstance" and len(test.args) == 2):
        return "", False
    types = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
    name = _dotted(test.args[0])
    return (name, True) if name and types and all(_last(t) in _WRAPPERS for t in types) else ("", False)


def _device_literals(node: ast.AST | None, facts: _FileFacts | None = None) -> list[tuple[str, bool]]:
    """Accelerator names hard-coded in an expression, each with True where a CUDA test guards it."""
    if isinstance(node, ast.IfExp):
        guard = _CUDA if facts is not None and facts.implies_cuda(node) else _guard(node.test, facts)
        return [(s, g or guard == _CUDA) for s, g in _device_literals(node.body, facts)] + \
            [(s, g or guard == _NOT_CUDA) for s, g in _device_literals(node.orelse, facts)]
    text = _string(node)
    if text is not None:
        return [(text, False)] if _ACCELERATOR.match(text.strip()) else []
    if isinstance(node, ast.Call) and _last(node) == "format" and isinstance(node.func, ast.Attribute) and \
            re.match(r"(cuda|xpu|hpu|npu):\{", _string(node.func.value) or ""):
        return [(_string(node.func.value) or "", False)]  # "cuda:{}".format(rank)
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]  # f"cuda:{rank}" starts with the constant "cuda:"
        if isinstance(head, ast.Constant) and re.match(r"(cuda|xpu|hpu|npu):", str(head.value)):
            return [(str(head.value) + "{...}", False)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)) and \
            re.match(r"(cuda|xpu|hpu|npu):", _string(node.left) or ""):
        return [(f"{_string(node.left)}...", False)]  # "cuda:" + str(rank), "cuda:%d" % rank
    return []


def _names_device(value: ast.AST, facts: _FileFacts) -> bool:
    """A returned value that is a device: `torch.device(...)`, a device string, a name with "device" in it."""
    return any(_dotted(n.func) == "torch.device" if isinstance(n, ast.Call) else
               _ACCELERATOR.match(_string(n) or "") or _string(n) == "cpu" or "device" in _last(n).lower()
               for n in facts.walk(value))


def _moves_device(call: ast.Call) -> bool:
    """A .to() that names a device: device=, a literal, torch.device(...) or a *device* variable."""
    names = [_dotted(a.func if isinstance(a, ast.Call) else a).lower() for a in call.args]
    return _keyword(call, "device") is not None or any(_device_literals(a) for a in call.args) \
        or any("device" in n or "cuda" in n or n == "dev" for n in names)


def _looks_like_module(node: ast.AST) -> bool:
    """Heuristic for DEV006: a variable whose name says it holds an nn.Module, not its state."""
    name = _last(node).lower() if not isinstance(node, ast.Call) else ""
    if any(part in name for part in ("state", "dict", "sd", "ckpt", "checkpoint", "weight", "param")):
        return False
    return name in ("self", "module", "net", "network") or "model" in name or name.endswith("net")


def _module_value(node: ast.AST) -> bool:
    """A dict value that names a module object (`encoder`, `self.model`), not a config's field or its state."""
    if not isinstance(node, (ast.Name, ast.Attribute)) or _dotted(node).split(".")[0] in _OBJECT_NAMES:
        return False
    name = _last(node).lower()
    return _looks_like_module(node) and name != "self" or \
        any(name.endswith(word) for word in ("encoder", "decoder", "generator", "discriminator", "backbone"))


def _either(values: list[ast.expr | None]) -> list[ast.expr | None]:
    """The values, each conditional expression as both its branches (`net.state_dict() if use_cuda else net`:
    either may be what is saved)."""
    found = []
    for value in values:
        while type(value) is ast.IfExp:
            found += _either([value.body])
            value = value.orelse
        found.append(value)
    return found


def _is_dataset(cls: ast.ClassDef) -> bool:
    """Heuristic for DEV008: a base class named *Dataset, ImageFolder or DatasetFolder."""
    names = [_dotted(base).rsplit(".", 1)[-1] for base in cls.bases]
    return any(n.endswith("Dataset") or n in ("ImageFolder", "DatasetFolder") for n in names)


def _is_dict(node: ast.AST | None) -> bool:
    """A dict display, comprehension or dict(...) call: a checkpoint, never a module."""
    return isinstance(node, (ast.Dict, ast.DictComp)) or (isinstance(node, ast.Call) and _dotted(node.func) == "dict")


def _wraps(value: ast.AST, wrapped: set[str], wrappers: Iterable[str] = _WRAPPERS) -> bool:
    """Whether `value` is a DP/DDP wrapper: `DDP(m)`, `DataParallel(m).cuda()`, `model.to(d)` of one; `wrappers`: the
    wrapper class names (a checked file's subclass of DataParallel too, `Project.wrappers`)."""
    while isinstance(value, (ast.Call, ast.Attribute)):
        if isinstance(value, ast.Call) and _last(value) in wrappers:
            return True
        if isinstance(value, ast.Attribute) and value.attr == "module":
            return False  # `.module` unwraps
        if isinstance(value, ast.Attribute) and _dotted(value) in wrapped:
            return True
        value = value.func if isinstance(value, ast.Call) else value.value
    return isinstance(value, ast.Name) and value.id in wrapped


_FIELDS: dict[type, tuple[str, ...]] = {}  # node class -> its fields that may hold nodes (no context, no operator)


_NO_CHILDREN: list[ast.AST] = []  # shared by every leaf; never mutated
_LEAVES = (ast.Name, ast.Constant)


def _index(tree: ast.Module) -> tuple[dict, dict, list[ast.AST], dict[type, list[ast.AST]]]:
    """Child lists, parents, every node (in ast.walk's breadth-first order) and the nodes of each type, in one pass.

    Like ast.iter_child_nodes, without the shared context and operator singletons. This loop runs for every node
    of every file, so it is written out flat: no call per node, no generator."""
    children: dict[ast.AST, list[ast.AST]] = {}
    parents: dict[ast.AST, ast.AST] = {}
    nodes: list[ast.AST] = [tree]
    kinds: dict[type, list[ast.AST]] = {}
    node_class = ast.AST
    for node in nodes:  # grows while iterating: breadth first, like ast.walk
        kind = type(node)
        same = kinds.get(kind)
        if same is None:
            kinds[kind] = [node]
        else:
            same.append(node)
        if kind in _LEAVES:
            children[node] = _NO_CHILDREN
            continue
        fields = _FIELDS.get(kind)
        if fields is None:
            fields = _FIELDS[kind] = tuple(f for f in node._fields if f not in ("ctx", "op", "ops"))
        kids: list[ast.AST] = []
        for name in fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:  # `Dict.keys` may hold None, `Global.names` strings
                    if isinstance(item, node_class):
                        kids.append(item)
                        parents[item] = node
            elif isinstance(value, node_class):
                kids.append(value)
                parents[value] = node
        children[node] = kids
        nodes += kids
    return children, parents, nodes, kinds


_VISITORS: dict[type, dict[type, Callable]] = {}  # checker class -> node type -> method (filled as types are met)


class _FileFacts:
    """What one pre-pass over the module learns for rules that need more than the current node."""

    def __init__(self, tree: ast.Module, path: str = "<string>", project: _Project | None = None) -> None:
        self.tree, self.path = tree, path
        self.project = project or _Project()
        # One pass, in ast.walk's breadth-first order: every later walk reuses these child lists.
        self.children, self.parents, self.nodes, self.kinds = _index(tree)
        kinds = self.kinds
        self.folder = os.path.dirname(os.path.abspath(path))
        self._walks: dict[ast.AST, list[ast.AST]] = {}
        self._memo: dict[ast.stmt, frozenset[str]] = {}
        self._cuda_tests: dict[ast.AST, dict[int, str]] = {}
        self._wrapped_attributes: dict[ast.ClassDef, set[str]] = {}
        self._scope_bindings: dict[ast.AST, tuple[Counter[str], dict[str, object], set[str]]] = {}
        self._bindings: dict[ast.AST, dict[str, list[ast.AST]]] = {}
        self._scope_cache: dict[ast.AST, ast.AST] = {}
        calls: list[ast.Call] = kinds.get(ast.Call, [])
        self.calls = calls
        self.moves_to_device = any(_last(c) == "cuda" or (_last(c) == "to" and (c.args or c.keywords)) for c in calls) \
            or any(_keyword(c, "device") is not None for c in calls)
        saves = [c for c in calls if _dotted(c.func) == "torch.save"]
        self.cpu_saved = {self._path_key(p, c) for c in saves if self._from_cpu(c) for p in self._paths(c)}
        # saved after an explicit .cpu(): other files may rely on it (a file that moves nothing may save what a
        # caller put on the GPU)
        self.cpu_saved_explicitly = {self._path_key(p, c) for c in saves if self._from_cpu(c, moves=True)
                                     for p in self._paths(c)}
        self.saved = {self._path_key(p) for c in saves for p in self._paths(c)}
        self.pickled_objects = sorted({name for c in calls if "save" in _last(c).lower() and c.args
                                       for name in self._objects(c.args[0])})
        self.nccl_names = {t.id for n in kinds.get(ast.Assign, []) if _string(n.value) == "nccl"
                           for t in n.targets if isinstance(t, ast.Name)}
        self.nccl_starts = [c for c in calls if _last(c) == "init_process_group"]
        self.sibling_cpu_saved: Callable[[str], bool] = lambda key: False
        self.sibling_saved: Callable[[str], bool] = lambda key: False
        self.porting = False  # set per checked file (--porting, or `porting = true` in its pyproject.toml)
        self.defs: dict[str, list[ast.AST]] = {}  # function and class name -> their definitions, at any depth
        self.imports: dict[str, tuple[str, str | None, int]] = {}  # local name -> (module, imported name, level)
        for kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            for node in kinds.get(kind, []):
                self.defs.setdefault(node.name, []).append(node)
        for node in kinds.get(ast.Import, []):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                self.imports[local] = (alias.name if alias.asname else local, None, 0)
        self.star_imports: list[tuple[str, int]] = []  # `from models.common import *`: (module, level)
        for node in kinds.get(ast.ImportFrom, []):
            for alias in node.names:
                if alias.name == "*":
                    self.star_imports.append((node.module or "", node.level))
                else:
                    self.imports[alias.asname or alias.name] = (node.module or "", alias.name, node.level)
        self.torch_aliases = {local for local, (module, name, _) in self.imports.items()
                              if module == "torch" and name is None and local != "torch"}  # `import torch as th`
        self.load_aliases = {"torch.load"} | {f"{a}.load" for a in self.torch_aliases} | \
            {t.id for n in tree.body if isinstance(n, ast.Assign)
                                              and _dotted(n.value) == "torch.load" for t in n.targets
                                              if isinstance(t, ast.Name)}  # `_torch_load = torch.load`

    def walk(self, node: ast.AST) -> list[ast.AST]:
        """`ast.walk(node)` as a list (without the shared Load/Store context nodes), cached for scopes."""
        if node not in self.children:
            return [n for n in ast.walk(node) if not isinstance(n, ast.expr_context)]  # not from this tree
        cached = self._walks.get(node)
        if cached is not None:
            return cached
        found = [node]
        for item in found:
            found.extend(self.children[item])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            self._walks[node] = found
        return found

    @functools.cached_property
    def forward_like(self) -> set[int]:
        return self._forward_like(self.tree)

    @functools.cached_property
    def options_declared(self) -> set[str]:
        """argparse destinations this file declares (`--gpu`, `-gpu`, `dest=`)."""
        return {dest for dest, _ in self._options()}

    @functools.cached_property
    def options_off(self) -> frozenset[str]:
        """argparse destinations off unless asked for (`--cuda` store_true, `default=None`), here or in a checked
        file: `args.cuda > 0` is then an explicit request, like `args.cuda`."""
        return frozenset(self.project.options_off | {dest for dest, on in self._options() if not on and dest})

    @functools.cached_property
    def int_defaults(self) -> dict[str, list[int | tuple[int, ...]]]:
        """Number defaults of accelerator flags: this file's argparse options (else the checked files') and
        parameters (`gpu_id=-1`); a flag with any other default (`None`, True, a name) is left out."""
        found: dict[str, list] = {}
        options = list(self.option_defaults)
        for dest, default in self.project.option_defaults:
            if dest not in self.options_declared:
                options.append((dest, default))
        for node in self.kinds.get(ast.arguments, []):
            options += [(a.arg.lower(), d) for a, d in _parameter_defaults(node)]
        for name, default in options:
            if name and _accel_flag(name):
                found.setdefault(name, []).append(_int_default(default))
        wished = self._wished_flags() | self.project.wished  # `f(gpu_id=True)` somewhere: not a number
        return {n: values for n, values in found.items() if None not in values and n not in wished}

    @functools.cached_property
    def option_defaults(self) -> list[tuple[str, ast.AST | None]]:
        """(destination, default node) for each add_argument call here (None: no default, or a store action), a
        `set_defaults` of this file overriding it."""
        found, given = [], self.set_defaults
        for call in self.argument_calls:
            action = _string(getattr(_keyword(call, "action"), "value", None))
            dest = _option_dest(call)
            default = None if action else getattr(_keyword(call, "default"), "value", None)
            found.append((dest, given.get(dest, default)))
        declared = {dest for dest, _ in found}
        return found + [(dest, value) for dest, value in given.items() if dest not in declared]

    @functools.cached_property
    def set_defaults(self) -> dict[str, ast.AST]:
        """Defaults this file's parsers set by `parser.set_defaults(gpu=True)` (the last one wins, as it runs): the
        script's own, whatever another script sets for an option of the same name."""
        return {k.arg.lower(): k.value for call in self.calls if _last(call) == "set_defaults"
                for k in call.keywords if k.arg}

    @functools.cached_property
    def argument_calls(self) -> list[ast.Call]:
        """The add_argument calls here (read by every question about options)."""
        return [call for call in self.calls if _last(call) == "add_argument"]

    @functools.cached_property
    def options_on(self) -> set[str]:
        """argparse destinations on by default: `default=True`, `default=1` (`--gpus`), `store_false`, `"0"`, `[0]`."""
        return {dest for dest, on in self._options() if on}

    def _options(self) -> list[tuple[str, bool]]:
        """(destination, on by default) for each add_argument call here, and each option only `set_defaults` names."""
        found, given = [], self.set_defaults
        for call in self.argument_calls:
            dest = _option_dest(call)
            action = _string(getattr(_keyword(call, "action"), "value", None))
            if dest in given:  # `add_argument("--gpu", action="store_true")` then `set_defaults(gpu=True)`: on
                found.append((dest, _on_default(given[dest])))
                continue
            default = getattr(_keyword(call, "default"), "value", None)
            found.append((dest, action == "store_false" or _on_default(default)))
        declared = {dest for dest, _ in found}
        return found + [(dest, _on_default(node)) for dest, node in given.items() if dest not in declared]

    @functools.cached_property
    def availability_calls(self) -> list[ast.Call]:
        """The availability checks called here (`torch.cuda.is_available()`), found once for the rules that ask."""
        return [c for c in self.calls if _availability_call(c)]

    @functools.cached_property
    def availability_flags(self) -> frozenset[str]:
        """Names assigned straight from an availability check (`pin_memory = torch.cuda.is_available()`)."""
        return frozenset(_last(t).lower() for n in self.kinds.get(ast.Assign, []) if
                         isinstance(n.value, ast.Call) and _availability_call(n.value) for t in n.targets)

    @functools.cached_property
    def cleared_flags(self) -> dict[str, list[tuple[ast.AST, int]]]:
        """Flags set False (or another falsy constant) on the side where an availability test fails (`if gpu and
        torch.cuda.is_available(): ... else: gpu = False`): flag key -> (scope, last line of that `if`)."""
        cleared: dict[str, list[tuple[ast.AST, int]]] = {}
        for call in self.availability_calls:
            node = self.parents.get(call)
            while node is not None and not isinstance(node, ast.stmt):
                node = self.parents.get(node)
            if not isinstance(node, ast.If):  # the nearest statement is an `if` only when the call is in its test
                continue
            guard = _guard(node.test)
            failing = node.orelse if guard == _CUDA else node.body if guard == _NOT_CUDA else []
            for statement in failing:
                for assign in self.walk(statement):
                    if isinstance(assign, ast.Assign) and isinstance(assign.value, ast.Constant) \
                            and not assign.value.value:
                        for target in assign.targets:
                            if isinstance(target, (ast.Name, ast.Attribute)):
                                entry = (self.scope_of(node), node.end_lineno or node.lineno)
                                cleared.setdefault(_flag_key(target), []).append(entry)
        return cleared

    def cleared_after(self, flag: ast.AST) -> bool:
        """Whether the flag is read after such an `if` cleared it: a name in the same scope, an attribute anywhere
        in the file (the object travels); past that point the flag is on only where the accelerator is."""
        if not self.cleared_flags or not isinstance(flag, (ast.Name, ast.Attribute)):
            return False
        entries, line = self.cleared_flags.get(_flag_key(flag), ()), getattr(flag, "lineno", 0)
        found = any(line > end and (isinstance(flag, ast.Attribute) or self.scope_of(flag) is scope)
                    for scope, end in entries)
        return found and not _CPU_WORD.search(_last(flag).lower())  # `cpu = False` there says nothing of CUDA

    @functools.cached_property
    def unsafe_flags(self) -> frozenset[str]:
        return self._unsafe_flags(self.tree, self.calls)

    @functools.cached_property
    def resolves_devices(self) -> bool:
        """The project's device module: a function here checks availability and returns a device."""
        functions = {self._function_of(c) for c in self.availability_calls}
        return any(isinstance(r, ast.Return) and r.value is not None and _names_device(r.value, self)
                   for f in functions if isinstance(f, ast.FunctionDef) for r in self.walk(f))

    @functools.cached_property
    def tests_cuda_extension(self) -> bool:
        """A test file that imports a module built by CUDAExtension: it tests code that only runs on CUDA."""
        name = os.path.basename(self.path)
        parts = set(Path(self.path).parts[:-1])
        if not (name.startswith("test") or name.endswith("_test.py") or parts & {"tests", "test"}):
            return False
        folder = os.path.dirname(_realpath(self.path))
        if any(folder == f or folder.startswith(f + os.sep) for f in self.project.cuda_extension_folders):
            return True  # beside the extension's own build script (DCNv2/test.py next to DCNv2/build.py)
        imported = {m for m, _, _ in self.imports.values()} | \
            {f"{m}.{n}".strip(".") for m, n, _ in self.imports.values() if n}
        return any(m in self.project.cuda_extensions or m.rsplit(".", 1)[-1] in self.project.cuda_extensions
                   for m in imported if m)

    def needs_cuda_extension(self, depth: int = 0) -> bool:
        """A module that imports a CUDA-only compiled extension at its top level, unconditionally (not in a
        `try`), itself or through a checked module that does: it cannot even be imported without CUDA."""
        cached = self.__dict__.get("_needs_cuda_extension")
        if cached is not None:
            return cached
        self._needs_cuda_extension = False  # while computing (an import cycle answers no); no extension: no
        extensions = self.project.cuda_extensions
        if not extensions:
            return False
        for node in self.tree.body:
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or "", *(f"{node.module}.{a.name}".strip(".") for a in node.names)]
            if any(n and (n in extensions or n.rsplit(".", 1)[-1] in extensions) for n in names):
                self._needs_cuda_extension = True
                break
            level = node.level if isinstance(node, ast.ImportFrom) else 0
            modules = [self.project.module(self, n, level) for n in names[:1] if n] if depth < 3 else []
            if any(m is not None and m is not self and m.needs_cuda_extension(depth + 1) for m in modules):
                self._needs_cuda_extension = True
                break
        return self._needs_cuda_extension

    @functools.cached_property
    def collective_scopes(self) -> set[tuple[int, str]]:
        """Where a torch.distributed collective runs: the innermost `if` branch around it, else its function.

        (id(if), "body" or "orelse") or (id(function), ""): a collective under `if num_gpus > 1:` says a
        process group exists in that branch only."""
        found: set[tuple[int, str]] = set()
        for call in self.calls:
            if _collective(call):
                child, node = call, self.parents.get(call)
                while node is not None:
                    if isinstance(node, (ast.IfExp, ast.BoolOp, ast.Lambda)):
                        break  # `DistributedSampler(d) if n_gpu > 1 else None`: only one side needs the group
                    if isinstance(node, ast.If) and (child in node.body or child in node.orelse):
                        found.add((id(node), "body" if child in node.body else "orelse"))
                        break
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        found.add((id(node), ""))
                        break
                    child, node = node, self.parents.get(node)
        return found

    def canonical(self, func: ast.AST) -> str:
        """The dotted name with `torch` for a module alias (`th.load` -> `torch.load`)."""
        name = _dotted(func)
        head, _, rest = name.partition(".")
        return f"torch.{rest}" if rest and head in self.torch_aliases else name

    def qualified(self, func: ast.AST) -> str:
        """`pkg.mod.name` for a called name imported from elsewhere (`from pkg.mod import name`), else ''."""
        if isinstance(func, ast.Name) and func.id in self.imports:
            module, name, level = self.imports[func.id]
            return f"{module}.{name}" if name and not level else ""
        owner = _dotted(func.value) if isinstance(func, ast.Attribute) else ""
        if owner.split(".")[0] in self.imports:
            module, name, level = self.imports[owner.split(".")[0]]
            head = f"{module}.{name}" if name else module
            return "" if level else ".".join([head, *owner.split(".")[1:], func.attr])
        return ""

    @functools.cached_property
    def cuda_aliases(self) -> set[str]:
        """Names of the `torch.cuda` module: `tt = torch.cuda`, `self.tt = torch.cuda`, `from torch import cuda`."""
        found = {local for local, (module, name, level) in self.imports.items()
                 if not level and (module, name) in (("torch", "cuda"), ("torch.cuda", None))}
        for node in self.kinds.get(ast.Assign, []):
            if type(node.value) is ast.Attribute and node.value.attr == "cuda" and \
                    self.canonical(node.value) == "torch.cuda":
                found.update(_dotted(t) for t in node.targets if _dotted(t))
        return found

    def legacy_type(self, node: ast.Attribute) -> str:
        """`torch.cuda.FloatTensor` for that type written out or through an alias of `torch.cuda` (`tt.FloatTensor`)."""
        dotted = _dotted(node)
        if _TYPED_CUDA.match(dotted):
            return dotted
        owner = dotted[:-len(node.attr) - 1]
        typed = f"torch.cuda.{node.attr}"
        return typed if owner and _TYPED_CUDA.match(typed) and owner in self.cuda_aliases else ""

    def bound_off(self, name: str, node: ast.AST) -> tuple[bool, object]:
        """(True, value) if the name read at node is bound once in its scope, to False/0/None, and never rebound
        (`load_model = False` ... `if load_model is True:`): a parameter, a global or nonlocal, a name of a module
        that calls globals() (options copied in), or a second store anywhere in the scope decides nothing."""
        if name in self.mentions_global:
            return False, None
        scope = self._function_of(node)
        while True:
            stores, values, params = self._scope_names(scope)
            if name in params or stores[name] > 1:
                return False, None
            if stores[name]:
                return (name in values and (scope is not self.tree or "globals" not in self.mentions)), values.get(name)
            if scope is self.tree:
                return False, None
            scope = self._function_of(self.parents[scope])  # a name the function only reads: the enclosing one's

    def _scope_names(self, scope: ast.AST) -> tuple[Counter[str], dict[str, object], set[str]]:
        """A scope's stores of each name (nested ones too), the falsy constants it assigns names, its parameters."""
        cached = self._scope_bindings.get(scope)
        if cached is None:
            nodes = self.nodes if scope is self.tree else self.walk(scope)
            stores = Counter(n.id for n in nodes if type(n) is ast.Name and type(n.ctx) is ast.Store)
            values = {n.targets[0].id: n.value.value for n in nodes if type(n) is ast.Assign and len(n.targets) == 1
                      and type(n.targets[0]) is ast.Name and type(n.value) is ast.Constant and not n.value.value
                      and self._function_of(n) is scope}  # the scope's own: a nested function's is its local
            params = {a.arg for n in nodes if type(n) is ast.arguments
                      for a in n.posonlyargs + n.args + n.kwonlyargs + [n.vararg, n.kwarg] if a}
            cached = self._scope_bindings[scope] = (stores, values, params)
        return cached

    @functools.cached_property
    def mentions_global(self) -> set[str]:
        """Names declared `global`/`nonlocal` (rebound from elsewhere)."""
        return {name for n in self.kinds.get(ast.Global, []) + self.kinds.get(ast.Nonlocal, []) for name in n.names}

    @functools.cached_property
    def mentions(self) -> Counter[str]:
        """Names read, called or spelt in a string (a string may be looked up), with how often; the dotted
        parts of a string an eval builds its name from (`eval('models.' + name + '.get_pose_net')`) too."""
        counts = Counter(_mentions(self.kinds, self.names_read))
        if "eval" in counts or "exec" in counts:
            counts.update(part for c in self.calls if type(c.func) is ast.Name and c.func.id in ("eval", "exec")
                          for n in self.walk(c) if type(n) is ast.Constant and type(n.value) is str
                          for part in n.value.split(".") if part.isidentifier() and part != n.value)
        return counts

    @functools.cached_property
    def name_reads(self) -> Counter[str]:
        """Bare names read (`fliplr(img)`), with how often."""
        return Counter(self.names_read)

    @functools.cached_property
    def names_read(self) -> list[str]:
        """Bare names read, in order (one pass over every name, kept for mentions and name_reads)."""
        return _names_read(self.kinds)

    @functools.cached_property
    def availability_holders(self) -> set[ast.AST]:
        """Every node with an availability check inside it (the checks and all that is around them)."""
        found: set[ast.AST] = set()
        for call in self.availability_calls:
            node: ast.AST | None = call
            while node is not None and node not in found:
                found.add(node)
                node = self.parents.get(node)
        return found

    @functools.cached_property
    def availability_names(self) -> frozenset[str]:
        """Names every binding of which here holds an availability check (`use_cuda = args.cuda and
        torch.cuda.is_available()`); one also bound otherwise (`use_cuda = True`) is no check."""
        bound: dict[str, bool] = {}
        for node in self.kinds.get(ast.Assign, []):
            for target in node.targets:
                if type(target) in (ast.Name, ast.Attribute):
                    name = _last(target).lower()
                    bound[name] = bound.get(name, True) and node.value in self.availability_holders
        return frozenset(name for name, checked in bound.items() if checked)

    @functools.cached_property
    def loads(self) -> bool:
        """Whether anything here calls torch.load (or a name bound to it)."""
        return any(_dotted(c.func) in self.load_aliases for c in self.calls)

    @functools.cached_property
    def function_ids(self) -> frozenset[int]:
        """ids of the functions defined here (a finding's chain mixes them with classes)."""
        return frozenset(id(n) for kind in (ast.FunctionDef, ast.AsyncFunctionDef) for n in self.kinds.get(kind, []))

    def defs_at_top(self) -> list[ast.AST]:
        """Functions and classes defined at the module's top level."""
        return [n for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The function, class or module whose body holds the node (for a definition: the one around it)."""
        scope = self._scope_cache.get(node)
        if scope is None:
            scope = self.parents.get(node)
            while scope is not None and not isinstance(scope, _SCOPES):
                scope = self.parents.get(scope)
            scope = self._scope_cache[node] = self.tree if scope is None else scope
        return scope

    @functools.cached_property
    def scopes(self) -> dict[ast.AST, dict[str, list[ast.AST]]]:
        """Per scope (the module, a function, a class): the functions and classes defined directly in it."""
        found: dict[ast.AST, dict[str, list[ast.AST]]] = {}
        for nodes in self.defs.values():
            for node in nodes:
                found.setdefault(self.scope_of(node), {}).setdefault(node.name, []).append(node)
        return found

    def top(self, name: str) -> list[ast.AST]:
        """The module-level functions and classes of that name (also those defined under an `if` or `try`)."""
        return self.scopes.get(self.tree, {}).get(name, [])

    def lookup(self, name: str, at: ast.AST) -> list[ast.AST]:
        """The functions and classes a name means where it is read: the enclosing functions' own, then the module's.

        A class body's names are not seen from its methods, as in Python."""
        scope = self.scope_of(at)
        first = True
        while True:
            if first or not isinstance(scope, ast.ClassDef):
                found = self.scopes.get(scope, {}).get(name)
                if found:
                    return found
            if scope is self.tree:
                return []
            scope, first = self.scope_of(scope), False

    def in_data_set(self, node: ast.AST) -> bool:
        """Inside a data set class (`class FooDataset`, a `*Dataset` base): its files hold what data processing
        made on the host (splits, collated graphs, counts), not a model's state from a device."""
        owner = self.parents.get(self._function_of(node))
        while owner is not None and not isinstance(owner, ast.ClassDef):
            owner = self.parents.get(self._function_of(owner))
        return owner is not None and (owner.name.endswith("Dataset") or _is_dataset(owner))

    def wrapped_attributes(self, cls: ast.ClassDef) -> set[str]:
        """Attributes a method of the class sets to a DP/DDP wrapper (`self.model = nn.DataParallel(self.model)`,
        or a local bound to one), read in source order within each method."""
        found = self._wrapped_attributes.get(cls)
        if found is not None:
            return found
        found = self._wrapped_attributes[cls] = set()
        wrappers = self.project.wrappers
        for method in cls.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names: set[str] = set()
            for node in sorted((n for n in self.walk(method) if type(n) is ast.Assign), key=lambda n: n.lineno):
                holds = _wraps(node.value, names, wrappers)
                for target in node.targets:
                    if type(target) is ast.Name:
                        (names.add if holds else names.discard)(target.id)
                    elif holds and type(target) is ast.Attribute and _dotted(target.value) == "self":
                        found.add(target.attr)
        return found

    def enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        """The class whose method holds the node (`self.x` inside it), else None."""
        function = self._function_of(node)
        owner = self.parents.get(function)
        return owner if isinstance(owner, ast.ClassDef) else None

    @functools.cached_property
    def _assignments(self) -> dict[ast.AST, dict[str, list[ast.Assign]]]:
        """`x = ...` per scope, in source order (one pass over the assignments)."""
        names: dict[ast.AST, dict[str, list[ast.Assign]]] = {}
        for node in self.kinds.get(ast.Assign, []):
            if len(node.targets) == 1 and type(node.targets[0]) is ast.Name:
                names.setdefault(self.scope_of(node), {}).setdefault(node.targets[0].id, []).append(node)
        for bound in names.values():
            for nodes in bound.values():
                nodes.sort(key=lambda n: n.lineno)
        return names

    @functools.cached_property
    def _assigned_calls(self) -> tuple[dict[ast.AST, dict[str, list[ast.AST]]], ...]:
        """`x = Call(...)` per scope, and `self.x = Call(...)` per class."""
        names = {scope: {name: [n.value for n in nodes if type(n.value) is ast.Call] for name, nodes in bound.items()}
                 for scope, bound in self._assignments.items()}
        attributes: dict[ast.AST, dict[str, list[ast.AST]]] = {}
        for node in self.kinds.get(ast.Assign, []):
            target = node.targets[0]
            if len(node.targets) == 1 and type(node.value) is ast.Call and type(target) is ast.Attribute and \
                    type(target.value) is ast.Name and target.value.id == "self":
                cls = self.enclosing_class(node)
                if cls is not None:
                    attributes.setdefault(cls, {}).setdefault(target.attr, []).append(node.value)
        return names, attributes

    def bindings(self, scope: ast.AST) -> dict[str, list[ast.AST]]:
        """What names in a scope are bound to: `x = Net()` and annotated parameters `x: Net` (cached per scope)."""
        cached = self._bindings.get(scope)
        if cached is not None:
            return cached
        found = self._bindings[scope] = dict(self._assigned_calls[0].get(scope, {}))
        if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in scope.args.posonlyargs + scope.args.args + scope.args.kwonlyargs:
                if isinstance(arg.annotation, (ast.Name, ast.Attribute)):
                    found[arg.arg] = found.get(arg.arg, []) + [arg.annotation]
        return found

    def attribute_bindings(self, cls: ast.ClassDef) -> dict[str, list[ast.AST]]:
        """What `self.x` is bound to in any method of a class: `self.trainer = Trainer(cfg)`."""
        return self._assigned_calls[1].get(cls, {})

    @functools.cached_property
    def dynamic_names(self) -> set[str]:
        """Names an `eval(name)` or `globals()[name]` here may reach: this module's own and imported names."""
        if not any(isinstance(c.func, ast.Name) and (
                c.func.id in ("eval", "exec") and not (c.args and isinstance(c.args[0], ast.Constant)) or
                c.func.id in ("globals", "vars", "locals") and not c.args)  # `vars(opt)` reads an object, not names
                for c in self.calls):
            return set()
        names = {n.name for n in self.defs_at_top()} | set(self.imports)
        for module, level in self.star_imports:  # `from models.common import *`
            target = self.project.module(self, module, level)
            names |= {n.name for n in target.defs_at_top()} if target else set()
        return names

    def checks_availability(self, call: ast.Call) -> bool:
        """A call to a helper (in the checked files or the modules they import) that returns an availability check."""
        return self.calls_to(call, "checks")

    def calls_to(self, call: ast.Call, question: str) -> bool:
        """Whether every definition the call may reach answers the question ("establishes", "checks", "unpickles")."""
        targets = self.project.resolve(self, call.func)
        return bool(targets) and all(self.project.verdict(question, facts, node) for facts, node in targets)

    def establishes(self, statement: ast.stmt) -> bool:
        """After this statement CUDA exists: every path through it that goes on started NCCL or checked for CUDA."""
        outcomes = self._memo.get(statement)  # outcomes([statement]), without building a block's set for one
        if outcomes is None:
            outcomes = self._memo[statement] = self._statement_outcomes(statement)
        return _EST in outcomes and _FALL not in outcomes and _LOOP not in outcomes

    def outcomes(self, body: list[ast.stmt]) -> set[str]:
        """How a block can end: falls through, returns, leaves a loop, exits, or with CUDA established."""
        found: set[str] = set()
        for statement in body:
            result = self._memo.get(statement)
            if result is None:
                result = self._memo[statement] = self._statement_outcomes(statement)
            found |= result - {_FALL}
            if _FALL not in result:
                return found
        return found | {_FALL}

    def _statement_outcomes(self, node: ast.stmt) -> frozenset[str]:
        """outcomes() of one statement (see there)."""
        value = getattr(node, "value", None)
        if isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign, ast.Return)) and isinstance(value, ast.Call):
            if self.starts_nccl_call(value) or _collective(value) or self.calls_to(value, "establishes"):
                return frozenset({_EST})
            if isinstance(node, ast.Expr) and _last(value) in _EXIT_CALLS:
                return frozenset({_EXIT})
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.name if isinstance(node, ast.Import) else node.module or "").split(".")[0] in _CUDA_ONLY_MODULES
                for a in node.names):
            return frozenset({_EST})  # TensorRT, PyCUDA and CuPy work only where CUDA is
        if isinstance(node, ast.Return):
            return frozenset({_RET})
        if isinstance(node, ast.Raise):
            return frozenset({_EXIT})
        if isinstance(node, (ast.Continue, ast.Break)):
            return frozenset({_LOOP})
        if isinstance(node, ast.Assert):
            if _guard(node.test, self) == _CUDA:
                return frozenset({_EST})
            return frozenset({_EXIT if isinstance(node.test, ast.Constant) and not node.test.value else _FALL})
        if isinstance(node, ast.If):
            guard = _CUDA if self.implies_cuda(node) else _guard(node.test, self)
            body = {_EST} if guard == _CUDA else self.outcomes(node.body)
            return frozenset(body | ({_EST} if guard == _NOT_CUDA else self.outcomes(node.orelse)))
        if isinstance(node, (ast.With, ast.AsyncWith)):
            return frozenset(self.outcomes(node.body))
        if isinstance(node, ast.Try):
            found = self.outcomes(node.body + node.orelse)
            for handler in node.handlers:
                found |= self.outcomes(handler.body)
            return frozenset(found)
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            return frozenset({_FALL} | (self.outcomes(node.body) & {_RET}))
        return frozenset({_FALL})

    def starts_nccl_call(self, call: ast.Call) -> bool:
        """`init_process_group(backend="nccl")`, or a name bound to "nccl", or an option whose default is "nccl"."""
        if _last(call) != "init_process_group":
            return False
        backend = _keyword(call, "backend") or (call.args[0] if call.args else None)
        value = backend.value if isinstance(backend, ast.keyword) else backend
        return value is not None and (_string(value) in ("nccl", "NCCL") or _dotted(value) in self.nccl_names
                                      or isinstance(value, ast.Attribute) and value.attr in self.nccl_options)

    @functools.cached_property
    def nccl_options(self) -> set[str]:
        """argparse destinations whose default is "nccl" (`--dist-backend default="nccl"`)."""
        found = set()
        for call in self.calls:
            default = _keyword(call, "default")
            if _last(call) == "add_argument" and default is not None and _string(default.value) == "nccl":
                options = [_string(a) or "" for a in call.args]
                found |= {o.lstrip("-").replace("-", "_") for o in options if o.startswith("-")}
        return found

    def implies_cuda(self, test_of: ast.If | ast.IfExp) -> bool:
        """An `if` whose test, elsewhere in the same function, guards a block that starts NCCL or checks CUDA.

        `if args.distributed: init_process_group("nccl")` ... `if args.distributed: model.cuda()`: the
        second block runs only where the first started NCCL."""
        function = self._function_of(test_of)
        tests = self._cuda_tests.get(function)
        if tests is None:
            self._cuda_tests[function] = {}  # while computing: no test implies CUDA yet
            ifs = [n for n in self.walk(function) if isinstance(n, ast.If) and self._function_of(n) is function]
            tests = self._cuda_tests[function] = {
                id(n): ast.dump(n.test) for n in ifs if (lambda o: _EST in o and not o & {_FALL, _LOOP})(
                    self.outcomes(n.body))}
        return bool(tests) and any(key != id(test_of) and dump == ast.dump(test_of.test) for key, dump in tests.items())

    def _unsafe_flags(self, tree: ast.Module, calls: list[ast.Call]) -> frozenset[str]:
        """Accelerator flags set to True (a default, an assignment, `--cuda default=True`) and never checked.

        A flag guards only when it derives from an availability check somewhere in the file
        (`use_cuda = args.cuda and torch.cuda.is_available()`); one that is just True states a wish."""
        wished, checked = set(), set(self.checked_flags)
        wished |= self._wished_flags()
        wished |= self.options_on | self.project.wished  # `build(model, gpu=True)` in any checked file
        # `use_cuda = cfg["use_cuda"]`: what a config file asks for (unless a config dict here sets the key otherwise)
        wished |= {name for key, name in self.project.data_flags if key not in self.project.other_keys}
        wished |= self.project.options_on - self.options_declared  # another script's option, unless parsed here too
        found = {n for n in wished if n.rsplit(".", 1)[-1] not in checked and _accel_flag(n.rsplit(".", 1)[-1])}
        # a name this file binds only to True is its own: another file's check of a flag so named does not set it
        local = {n for n, true in self._bound_names().items() if true and n not in self.local_checked}
        return frozenset(found | {n for n in local if _accel_flag(n)})

    def _bound_names(self) -> dict[str, bool]:
        """Plain names this file assigns, and whether every assignment is the constant True."""
        bound: dict[str, bool] = {}
        for node in self.kinds.get(ast.Assign, []):
            for target in node.targets:
                if type(target) is ast.Name:
                    name = target.id.lower()
                    true = isinstance(node.value, ast.Constant) and node.value.value is True
                    bound[name] = bound.get(name, True) and true
        return bound

    @functools.cached_property
    def checked_flags(self) -> frozenset[str]:
        """Names an availability check flows into: an assignment (`n_gpu = torch.cuda.device_count()`), a keyword,
        here or, for keywords and attributes (`args.use_gpu = ...`), in any checked file."""
        return frozenset(self.local_checked | self.project.checked | self.project.checked_attributes)

    @functools.cached_property
    def local_checked(self) -> frozenset[str]:
        """`checked_flags` of this file alone."""
        checked: set[str] = set()
        sources = list(self.availability_calls) + \
            [a for a in self.kinds.get(ast.Attribute, []) if a.attr == "is_cuda"]
        for source in sources:  # the assignment or keyword each availability check flows into
            node = self.parents.get(source)
            while node is not None and not isinstance(node, (ast.Assign, ast.AnnAssign, ast.keyword, ast.stmt)):
                node = self.parents.get(node)
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                checked |= {_last(t).lower() for t in (node.targets if isinstance(node, ast.Assign) else [node.target])}
            elif isinstance(node, ast.keyword) and node.arg and not isinstance(source, ast.Attribute):
                checked.add(node.arg.lower())  # f(use_gpu=torch.cuda.is_available())
        checked |= self._refused_flags()
        for _ in range(3 if checked else 0):  # `n_gpu_use = n_gpu` after `n_gpu = torch.cuda.device_count()`
            flowed = {_last(t).lower() for n in self.kinds.get(ast.Assign, []) for t in n.targets
                      if any(isinstance(v, (ast.Name, ast.Attribute)) and _last(v).lower() in checked
                             for v in self.walk(n.value))}
            if flowed <= checked:
                break
            checked |= flowed
        return frozenset(checked)

    @functools.cached_property
    def data_flags(self) -> set[tuple[str, str]]:
        """Accelerator flags bound to a value read from a mapping by a constant key (`self.use_cuda =
        train_config["use_cuda"]`, `cfg.get("use_cuda", False)`): the key and the names bound. Such a value is what
        a config file asks for, not what the machine has; it guards only where an availability check is assigned
        to a flag so named somewhere (then `checked_flags` keeps it a guard), or where a config dict in the checked
        files sets the key to something other than True (a real switch). Pairs of (key, flag), the key as one."""
        found: set[tuple[str, str]] = set()
        for node in self.kinds.get(ast.Assign, []):
            value = node.value
            if isinstance(value, ast.Subscript):
                key = _string(value.slice)
            elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
                    value.func.attr == "get" and value.args:
                key = _string(value.args[0])
            else:
                continue
            if key and _accel_flag(key.lower()):
                found.add((key.lower(), key.lower()))
                found |= {(key.lower(), _last(t).lower()) for t in node.targets
                          if isinstance(t, (ast.Name, ast.Attribute)) and _accel_flag(_last(t).lower())}
        return found

    @functools.cached_property
    def checked_attributes(self) -> set[str]:
        """Attributes an availability check is assigned to here (`args.use_gpu = args.use_gpu and
        torch.cuda.is_available()`, `self.cuda = use_cuda`): the object travels, so other files read the flag."""
        found: set[str] = set()
        for call in self.availability_calls:
            node = self.parents.get(call)
            while node is not None and not isinstance(node, (ast.Assign, ast.stmt)):
                node = self.parents.get(node)
            if isinstance(node, ast.Assign):
                found |= {t.attr.lower() for t in node.targets if isinstance(t, ast.Attribute)}
        return found

    def _refused_flags(self) -> set[str]:
        """Flags a block refuses without the accelerator: `if cuda and not torch.cuda.is_available(): raise ...`.

        Past that block the flag is on only where CUDA is, as if an availability check had set it."""
        refused: set[str] = set()
        for node in self.kinds.get(ast.If, []):
            test = node.test
            if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and node.body
                    and _exits(node.body[-1])):
                continue
            if any(isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not) and isinstance(v.operand, ast.Call)
                   and _availability_call(v.operand) for v in test.values):
                refused |= {_last(v).lower() for v in test.values if isinstance(v, (ast.Name, ast.Attribute))}
        return refused

    def _wished_flags(self) -> set[str]:
        """Names set to True here: an assignment, a negation (`cuda = not no_cuda`), a parameter default."""
        wished: set[str] = set()
        for node in self.kinds.get(ast.Assign, []):
            negated = isinstance(node.value, ast.UnaryOp) and isinstance(node.value.op, ast.Not)
            if negated or isinstance(node.value, ast.Constant) and node.value.value is True:
                wished |= {_flag_key(t) for t in node.targets}  # `opt.cuda = not opt.no_cuda` is True by default
            elif isinstance(node.value, ast.Subscript) and \
                    (_string(node.value.slice) or "").lower() in self.project.constant_keys:
                wished |= {_flag_key(t) for t in node.targets}  # `GPU = cfg['gpu_train']`, True in every config
        for node in self.kinds.get(ast.arguments, []):
            wished |= {a.arg.lower() for a, d in _parameter_defaults(node)
                       if isinstance(d, ast.Constant) and d.value is True}
        return wished

    def forces_unsafe(self, load: ast.Call) -> bool:
        """The function around a `torch.load(f, **kw)` sets weights_only False in what it forwards."""
        for node in self.walk(self._function_of(load)):
            if isinstance(node, ast.Call) and _last(node) in ("setdefault", "update", "dict"):
                pairs = list(zip(node.args, node.args[1:])) + [(ast.Constant(k.arg), k.value) for k in node.keywords]
                if any(_string(k) == "weights_only" and _false(ast.keyword("x", v)) for k, v in pairs):
                    return True
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
                if _string(node.targets[0].slice) == "weights_only" and _false(ast.keyword("x", node.value)):
                    return True
            elif isinstance(node, ast.Dict):
                pairs = list(zip(node.keys, node.values))
                if any(_string(k) == "weights_only" and _false(ast.keyword("x", v)) for k, v in pairs):
                    return True
        return False

    def saves_in_function(self, load: ast.Call) -> bool:
        """The loaded path (or buffer) is written earlier in the same function: same process, so the same devices.

        Also through a helper called earlier there that saves that file name (`EarlyStopping()` whose
        `__call__` saves "checkpoint.pth", loaded back as `path + "/checkpoint.pth"`)."""
        key = self._path_key(self.opened(load, load.args[0]))
        function = self._function_of(load)
        earlier = [c for c in self.walk(function) if isinstance(c, ast.Call) and c.lineno < load.lineno and
                   self._function_of(c) is function]
        if any("save" in _last(c).lower() and any(self._path_key(p) == key for p in self._saved_to(c))
               for c in earlier):
            return True
        if "(" not in key and any(self.project.saves_file(f, d, key, 2) for c in earlier
                                  for f, d in self.project.resolve(self, c.func)):
            return True
        return self.project.saved_before(self, load, self.opened(load, load.args[0]), 2)

    def exclusive(self, first: ast.AST, second: ast.AST) -> bool:
        """Whether two nodes sit in different branches of one `if` (`if new: save() else: load()`)."""
        branch: dict[int, str] = {}
        child, node = first, self.parents.get(first)
        while node is not None:
            if isinstance(node, ast.If):
                branch[id(node)] = "body" if child in node.body else "orelse" if child in node.orelse else "test"
            child, node = node, self.parents.get(node)
        child, node = second, self.parents.get(second)
        while node is not None:
            if isinstance(node, ast.If) and id(node) in branch:
                side = "body" if child in node.body else "orelse" if child in node.orelse else "test"
                return "test" not in (side, branch[id(node)]) and side != branch[id(node)]
            child, node = node, self.parents.get(node)
        return False

    @functools.cached_property
    def is_test(self) -> bool:
        """A test module: `test_*.py`, `*_test.py`, `conftest.py`, or a file in a `tests` folder."""
        base = os.path.basename(self.path)
        return base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py" or \
            "tests" in self.path.replace("\\", "/").split("/")[:-1]

    def test_local(self, path: ast.AST | None, depth: int = 3) -> bool:
        """In a test: a path under pytest's fresh `tmp_path` (only this test wrote there) or from `__file__` (the
        repository's own test data), also through the names it is built from and the fixtures that provide them."""
        if not self.is_test or path is None:
            return False
        for node in self.walk(path):
            if type(node) is not ast.Name:
                continue
            if node.id in _TEST_LOCAL:
                return True
            if not depth or node not in self.parents:
                continue
            scopes = [self.scope_of(node), self.tree]
            bound = [a for scope in scopes for a in self._assignments.get(scope, {}).get(node.id, [])
                     if scope is self.tree or a.lineno < node.lineno]
            if bound:
                if self.test_local(bound[-1].value, depth - 1):
                    return True
                continue
            for facts, fixture in self._fixtures(node.id):
                if any(isinstance(r, ast.Return) and facts.test_local(r.value, depth - 1) for r in facts.walk(fixture)):
                    return True
        return False

    def ships(self, path: ast.AST | None) -> bool:
        """A path built from `__file__` (also through the names it is built from): a file the repository ships
        beside its code, which comes from nowhere else (its tensors' devices stay unknown: DEV003 still asks)."""
        return path is not None and self._built_from(path, "__file__", 3)

    def _built_from(self, path: ast.AST, name: str, depth: int) -> bool:
        """Whether `name` occurs in the expression or, `depth` bindings back, in what one of its names was bound
        to, by every binding of it (a parameter, or a name rebound to a download on one branch, is not)."""
        names = [n for n in self.walk(path) if type(n) is ast.Name]
        if any(n.id == name for n in names):
            return True
        for node in names if depth else []:
            function = self._function_of(node)
            params = function.args if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            if node not in self.parents or params and any(a.arg == node.id for a in ast.walk(params)
                                                           if isinstance(a, ast.arg)):
                continue
            scopes = [self.scope_of(node), self.tree]
            bound = [a for scope in scopes for a in self._assignments.get(scope, {}).get(node.id, [])
                     if scope is self.tree or a.lineno < node.lineno]
            if bound and all(self._built_from(a.value, name, depth - 1) for a in bound):
                return True
        return False

    def _fixtures(self, name: str) -> list[tuple[_FileFacts, ast.AST]]:
        """Functions named `name` decorated as pytest fixtures, here or in a checked conftest.py."""
        files = [self] + [f for p, f in self.project.files.items() if f is not None and f is not self
                          and os.path.basename(p) == "conftest.py"]
        return [(f, d) for f in files for d in f.defs.get(name, [])
                if isinstance(d, ast.FunctionDef) and any("fixture" in _dotted(getattr(x, "func", x))
                                                           for x in d.decorator_list)]

    def none_parameter(self, at: ast.AST, value: ast.AST) -> bool:
        """`value` is a parameter of the function around `at` whose default is None and that it never rebinds
        (`def load(path, map_location=None): torch.load(path, map_location)` passes no map_location by default)."""
        function = self._function_of(at)
        if type(value) is not ast.Name or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        if not any(a.arg == value.id and isinstance(d, ast.Constant) and d.value is None
                   for a, d in _parameter_defaults(function.args)):
            return False
        return not any(type(n) is ast.Name and n.id == value.id and isinstance(n.ctx, ast.Store)
                       for n in self.walk(function))

    def _saved_to(self, save: ast.Call) -> list[ast.AST]:
        """Where a save call writes: torch.save's path, else any argument (`saver.save(state, path)`)."""
        if _dotted(save.func) in ("torch.save", "torch.jit.save"):
            return self._paths(save)
        return [self.opened(save, a) for a in [*save.args, *(k.value for k in save.keywords)]]

    def _paths(self, save: ast.Call) -> list[ast.AST]:
        """Where a torch.save writes: its path, or the path `open()`ed by the `with ... as f` around it."""
        target = save.args[1] if len(save.args) > 1 else getattr(_keyword(save, "f"), "value", None)
        return [self.opened(save, target)] if target is not None else []

    def opened(self, call: ast.AST, target: ast.AST) -> ast.AST:
        """The path behind a file name: `f` of an enclosing `with open(path) as f:` is `path`."""
        node: ast.AST = call
        while isinstance(target, ast.Name) and node in self.parents:
            node = self.parents[node]
            for item in node.items if isinstance(node, (ast.With, ast.AsyncWith)) else []:
                var, ctx = item.optional_vars, item.context_expr
                if isinstance(var, ast.Name) and var.id == target.id and _last(ctx) == "open" and ctx.args:
                    return ctx.args[0]
        return target

    def _path_key(self, path: ast.AST | None, at: ast.AST | None = None) -> str:
        """Compare paths by their last string constant (`"feat.pth"`), else by their whole expression.

        Given `at` (the save or load), a bare variable (`fn`) names the same file only within one function."""
        constants = self._file_names(path, 3)
        if constants:
            return constants[-1]
        scoped = at is not None and isinstance(path, ast.Name)
        return ast.dump(path) + (f"@{id(self._function_of(at))}" if scoped else "")

    def _file_names(self, path: ast.AST | None, depth: int) -> list[str]:
        """The string constants with a dot in a path expression, also through the names it is built from in its
        function (`save_path = os.path.join(d, save_filename)`, `save_filename = "%s_net_%s.pth" % (...)`)."""
        found = []
        for node in self.walk(path) if path is not None else []:
            if type(node) is ast.Constant and type(node.value) is str and "." in node.value:
                found.append(node.value)
            elif type(node) is ast.Name and depth and node in self.parents:
                bound = self._assignments.get(self.scope_of(node), {}).get(node.id, [])
                before = [a for a in bound if a.lineno < node.lineno]
                found += self._file_names(before[-1].value, depth - 1) if before else []
        return found

    def _from_cpu(self, save: ast.Call, moves: bool = False) -> bool:
        """A save of CPU data: `x.cpu()`, or `m.state_dict()` after `m.cpu()`, or a file that never moves
        (unless `moves`: then only the first two count)."""
        saved = save.args[0] if save.args else None
        if not (self.moves_to_device or moves) or \
                any(_last(n) == "cpu" for n in self.walk(saved) if isinstance(n, ast.Call)):
            return True
        if not moves and isinstance(saved, (ast.Name, ast.Attribute)) and not any(
                part in _last(saved).lower() for part in _STATE_NAMES):
            return True  # a cache of data (`torch.save(corpus, fn)`, `torch.save(x, cache_path)`), not model state
        owner = _dotted(saved.func.value) if isinstance(saved, ast.Call) and _last(saved) == "state_dict" else ""
        calls = (n for n in self.walk(self._function_of(save)) if isinstance(n, ast.Call) and _last(n) == "cpu")
        return bool(owner) and any(_dotted(c.func.value).startswith(owner) for c in calls if c.lineno < save.lineno)

    def saved_on_cpu_here(self, load_path: ast.AST, load: ast.AST | None = None) -> bool:
        """This file saved the path being loaded, from CPU tensors: no map_location is needed."""
        return self._path_key(load_path, load) in self.cpu_saved

    def own_file(self, load_path: ast.AST) -> bool:
        """A fixed file name (a string, not a user's path) that this file or a sibling script writes."""
        key = self._path_key(load_path)
        if isinstance(load_path, ast.Constant):
            return key in self.saved or self.sibling_saved(key)
        return key in self.saved and self._fixed_path(load_path)

    def _fixed_path(self, path: ast.AST) -> bool:
        """A path the code builds itself: a template that starts with its own text (`"models/epo%d.tar" % epoch`,
        `"ckpt_{}.pth".format(step)`) filled with no command-line option (`% (opt.dataset_name, opt.epoch)` is the
        user's), or a name bound once to a call given nothing (`weight_file = utils.getFileName()`); not a folder
        or a name the user passes in."""
        if isinstance(path, ast.BinOp) and isinstance(path.op, ast.Mod):
            template = path.left
        elif isinstance(path, ast.Call) and isinstance(path.func, ast.Attribute) and path.func.attr == "format":
            template = path.func.value
        elif isinstance(path, ast.JoinedStr) and path.values:
            template = path.values[0]
        elif type(path) is ast.Name and path in self.parents:
            bound = [a for scope in {self.scope_of(path), self.tree}
                     for a in self._assignments.get(scope, {}).get(path.id, [])]
            value = bound[0].value if len(bound) == 1 else None
            return isinstance(value, ast.Call) and not value.args and not value.keywords and not any(
                isinstance(a, ast.arg) and a.arg == path.id for a in self.walk(self._function_of(path)))
        else:
            return False
        text = _string(template) or ""
        options = {dest for dest, _ in self.project.option_defaults}  # `opt.dataset_name`: the user's choice
        return bool(text) and not text.startswith(("%", "{", "/", "~")) and not any(
            _last(n) in options for n in self.walk(path) if isinstance(n, (ast.Name, ast.Attribute)))

    def moved_after(self, call: ast.Call) -> bool:
        """`helper(n).to(device)`: what the call returns is moved, so where it was made does not matter."""
        parent = self.parents.get(call)
        return isinstance(parent, ast.Attribute) and parent.attr in ("to", "cuda", "type_as")

    def starts_nccl(self, body: list[ast.stmt]) -> bool:
        """A block that itself calls init_process_group(backend="nccl"): it only runs where CUDA is.

        Only the block's own simple statements count: an NCCL start in a nested `if`, loop or function
        (`if __name__ == "__main__": ... if args.distributed: init(...)`) guards that inner block only."""
        if not self.nccl_starts:
            return False
        simple = [stmt for stmt in body if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign, ast.Return))]
        return any(self.starts_nccl_call(c) for stmt in simple for c in self.walk(stmt) if isinstance(c, ast.Call))

    def _function_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or the module) around a node."""
        while node in self.parents and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node = self.parents[node]
        return node

    @staticmethod
    def _objects(saved: ast.AST) -> list[str]:
        """Names of object-like entries of a saved dict: `'args': args`, `np.array(...)`."""
        values = saved.values if isinstance(saved, ast.Dict) else []
        found = [_dotted(v) for v in values if _last(v).lower() in _OBJECT_NAMES and not isinstance(v, ast.Call)]
        return found + ["a numpy array" for v in values if _dotted(getattr(v, "func", v)).startswith(("np.", "numpy."))]

    def _forward_like(self, tree: ast.Module) -> set[int]:
        """ids of forward() and of the methods/functions it calls in this file, transitively."""
        functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        found: set[int] = set()
        for cls in self.kinds.get(ast.ClassDef, []):
            methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            todo = [methods["forward"]] if "forward" in methods else []
            while todo:
                func = todo.pop()
                if id(func) in found:
                    continue
                found.add(id(func))
                for call in (c for c in self.walk(func) if isinstance(c, ast.Call) and not self.moved_after(c)):
                    if _dotted(call.func).startswith("self.") and _dotted(call.func).count(".") == 1:
                        todo += [methods[call.func.attr]] if call.func.attr in methods else []
                    elif isinstance(call.func, ast.Name) and call.func.id in functions:
                        todo.append(functions[call.func.id])
        return found


class _Project:
    """What the lint learns across files: helpers that start NCCL, check availability or unpickle, and callers.

    A call is followed to its definitions in the same file, through `self.`, or through the calling file's
    imports into the checked files and the modules they import (read from disk when not checked); a call
    the lint cannot resolve is not followed."""

    def __init__(self) -> None:
        self.files: dict[str, _FileFacts | None] = {}  # real path -> facts (None: unreadable)
        self.roots: set[str] = set()  # imports are followed into files under these folders only
        self._verdicts: dict[tuple, bool] = {}
        self._written: dict[tuple, tuple[frozenset[str], frozenset[str]]] = {}
        self._saves_by_key: dict[str, list[tuple[_FileFacts, ast.Call]]] | None = None
        self.checked_attributes: set[str] = set()  # `args.use_gpu = ... torch.cuda.is_available()`: any file's
        self.classes: list[tuple[str, set[str]]] = []  # (name, last names of its bases) of every class with bases
        self._wrappers: tuple[int, frozenset[str]] = (-1, frozenset(_WRAPPERS))
        self.data_flags: set[tuple[str, str]] = set()  # (key, flag) read from a mapping: `use_cuda = cfg["use_cuda"]`
        self.callers: dict[int, tuple[list[ast.Call], int] | None] = {}  # id(function) -> its calls (_Checker._callers)
        self._calls_named: dict[str, list[tuple[_FileFacts, ast.Call]]] | None = None  # built on first use
        self._calls_counted = 0
        self._modules: dict[tuple[str, str, int], _FileFacts | None] = {}
        # Call sites: id(definition) -> [(ids of the functions around the call, CUDA known there)]; a call the
        # lint cannot resolve to a definition (`trainer.fit()` on an object of unknown class) counts for none.
        self.sites: dict[int, list[tuple[tuple[int, ...], bool]]] = {}
        self.reached: set[int] = set()  # definitions with a call site found (filled by cuda_only)
        self._resolved: dict[int, list[tuple[_FileFacts, ast.AST]]] = {}  # id(call's function) -> definitions
        self.wished_keywords: set[str] = set()  # flags passed as `gpu=True` somewhere
        self.passing_true: list[tuple[_FileFacts, ast.Call]] = []  # calls passing True by position: `build(m, True)`
        self.cuda_extensions: set[str] = set()  # modules built by CUDAExtension(...): they need CUDA to run
        self.cuda_extension_folders: set[str] = set()  # folders (not a project root) that build a CUDA extension
        self.options_on: set[str] = set()  # argparse options on by default in some checked file
        self.options_off: set[str] = set()  # ... and off unless asked for
        self.option_defaults: list[tuple[str, ast.AST | None]] = []  # (destination, default) of every option
        self.checked_keywords: set[str] = set()  # flags passed an availability check by keyword somewhere
        self.cpu_saved_files: set[str] = set()  # file names some checked file saves CPU tensors to (`feats.pt`)
        self.wrapped_params: dict[int, tuple[_FileFacts, ast.AST, set[str]]] = {}  # parameters passed a DP/DDP
        # Config constants: accelerator keys a dict literal sets True (and none sets otherwise), dataclass-style
        # fields defaulting to True per class, and (attribute, class) of fields holding a config class.
        self.true_keys: set[str] = set()
        self.other_keys: set[str] = set()
        self.true_fields: dict[str, set[str]] = {}
        self.field_classes: set[tuple[str, str]] = set()

    def add(self, path: str, facts: _FileFacts) -> None:
        """Register a checked file (so imports of it reuse its tree) and the flags its calls pass."""
        if os.path.isfile(path):
            self.files[_realpath(path)] = facts
        self.options_on |= facts.options_on
        self.options_off |= {dest for dest, on in facts._options() if not on and dest}
        self.option_defaults += facts.option_defaults
        self.cpu_saved_files |= {key for key in facts.cpu_saved_explicitly if "(" not in key}  # names, not code
        self.checked_attributes |= facts.checked_attributes
        self.data_flags |= facts.data_flags
        self.classes += [(n.name, {_last(b) for b in n.bases}) for n in facts.kinds.get(ast.ClassDef, []) if n.bases]
        self._add_config_constants(facts)
        if _builds_cuda_extension(facts) and os.path.isfile(path):
            folder = os.path.dirname(_realpath(path))
            if _project_root(folder) != folder:
                self.cuda_extension_folders.add(folder)
        for call in facts.calls:
            if _last(call) == "CUDAExtension":
                name = _string(call.args[0]) if call.args else _string(getattr(_keyword(call, "name"), "value", None))
                self.cuda_extensions |= {name, name.rsplit(".", 1)[-1]} if name else set()
            if any(isinstance(a, ast.Constant) and a.value is True or _checks(a, facts) for a in call.args):
                self.passing_true.append((facts, call))  # resolved once every file is registered
            own_default = _last(call) == "set_defaults"  # the script's own option default (`_options`), no call's
            for keyword in call.keywords:
                if keyword.arg and _accel_flag(keyword.arg.lower()) and not own_default:
                    if _checks(keyword.value, facts):
                        self.checked_keywords.add(keyword.arg.lower())
                    elif isinstance(keyword.value, ast.Constant) and keyword.value.value is True:
                        self.wished_keywords.add(keyword.arg.lower())

    @property
    def wrappers(self) -> frozenset[str]:
        """DP/DDP wrapper class names: torch's, and the checked files' classes derived from one, at any depth
        (`class CustomDataParallel(nn.DataParallel)` to reach its methods); recomputed when classes were added."""
        if self._wrappers[0] != len(self.classes):
            found = set(_WRAPPERS)
            while True:
                more = {name for name, bases in self.classes if bases & found} - found
                if not more:
                    break
                found |= more
            self._wrappers = (len(self.classes), frozenset(found))
        return self._wrappers[1]

    def calls_named(self, name: str) -> list[tuple[_FileFacts, ast.Call]]:
        """The calls in the checked files whose callee's last name is `name` (`f(...)`, `x.f(...)`)."""
        if self._calls_named is None or self._calls_counted != len(self.files):  # imports read later add files
            self._calls_named, self._calls_counted = {}, len(self.files)
            for facts in self.files.values():
                for call in facts.calls if facts is not None else ():
                    self._calls_named.setdefault(_last(call), []).append((facts, call))
        return self._calls_named.get(name, [])

    def _add_config_constants(self, facts: _FileFacts) -> None:
        """Note `{'gpu_train': True}` keys and `cuda: bool = True` fields (with the fields that hold their class)."""
        for node in facts.kinds.get(ast.Dict, []):
            for key, value in zip(node.keys, node.values):
                name = (_string(key) or "").lower()
                if name and _accel_flag(name):
                    (self.true_keys if _is_true(value, facts) else self.other_keys).add(name)
        for cls in facts.kinds.get(ast.ClassDef, []):
            for field in (n for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)):
                name = field.target.id.lower()
                if field.value is not None and _is_true(field.value, facts) and _accel_flag(name):
                    self.true_fields.setdefault(cls.name, set()).add(name)
                self.field_classes.add((name, _last(field.annotation)))

    @functools.cached_property
    def constant_keys(self) -> set[str]:
        """Accelerator keys every config dict literal sets True (`cfg['gpu_train']`): constants, no guards."""
        return self.true_keys - self.other_keys

    @functools.cached_property
    def wished(self) -> set[str]:
        """Accelerator flags some call passes True: `build(model, gpu=True)`, `Loss(21, True)` (after every add);
        and config fields defaulting to True, by the field holding their class (`cfg.model.cuda`)."""
        fields = {f"{attr}.{flag}" for attr, cls in self.field_classes for flag in self.true_fields.get(cls, ())}
        return fields | self.wished_keywords.union(*(_positional_flags(f, c, _is_true) for f, c in self.passing_true))

    @functools.cached_property
    def checked(self) -> set[str]:
        """Flags some call passes an availability check: `Net(use_gpu=torch.cuda.is_available())`, by position too."""
        return self.checked_keywords.union(*(_positional_flags(f, c, _checks) for f, c in self.passing_true))

    def saves_file(self, facts: _FileFacts, node: ast.AST, key: str, depth: int) -> bool:
        """Whether a function (a class: its __call__) saves to that file name, itself or through what it calls."""
        if isinstance(node, ast.ClassDef):
            node = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__call__"), None)
        if node is None:
            return False
        memo = (id(node), key, depth)
        if memo not in self._verdicts:
            self._verdicts[memo] = False  # a cycle answers no
            calls = [c for c in facts.walk(node) if isinstance(c, ast.Call)]
            self._verdicts[memo] = any(
                _dotted(c.func) == "torch.save" and any(facts._path_key(p) == key for p in facts._paths(c))
                for c in calls) or depth > 0 and any(
                self.saves_file(f, d, key, depth - 1) for c in calls for f, d in self.resolve(facts, c.func))
        return self._verdicts[memo]

    def written(self, facts: _FileFacts, node: ast.AST, depth: int) -> tuple[frozenset[str], frozenset[str]]:
        """What a function (a class: its __call__) saves to, itself or through what it calls: the keys of paths it
        builds (`"best.pt"`, `self.best_path`) and the names of its parameters that it saves to (`path`)."""
        if isinstance(node, ast.ClassDef):
            node = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__call__"), None)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return frozenset(), frozenset()
        memo = ("written", id(node), depth)
        if memo in self._written:
            return self._written[memo]
        self._written[memo] = frozenset(), frozenset()  # a cycle writes nothing
        params = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        keys: set[str] = set()
        names: set[str] = set()
        for call in (c for c in facts.walk(node) if isinstance(c, ast.Call)):
            if _dotted(call.func) in ("torch.save", "torch.jit.save"):
                targets = facts._paths(call)
            elif depth > 0:
                targets = []
                for f, d in self.resolve(facts, call.func):
                    found, given = self.written(f, d, depth - 1)
                    keys.update(found)
                    targets += _passed(call, d, given)
            else:
                continue
            for target in targets:
                if isinstance(target, ast.Name) and target.id in params:
                    names.add(target.id)
                else:
                    key = _attribute_key(target) or facts._path_key(target)
                    if "(" not in key or isinstance(target, ast.Attribute):
                        keys.add(key)  # a file name, or `self.best_path`: not a local name of the callee
        for call in (c for c in facts.walk(node) if isinstance(c, ast.Call) and _dotted(c.func) in _COPIES):
            source = call.args[0] if len(call.args) > 1 else None  # `shutil.copyfile(last, best)` of a saved file
            if source is not None and ((_attribute_key(source) or facts._path_key(source)) in keys or
                                       isinstance(source, ast.Name) and source.id in names):
                keys.add(_attribute_key(call.args[1]) or facts._path_key(call.args[1]))
        self._written[memo] = frozenset(keys), frozenset(names)
        return self._written[memo]

    def saved_before(self, facts: _FileFacts, at: ast.AST, path: ast.AST, depth: int) -> bool:
        """Whether this process saved `path` before reaching `at`: a call earlier in the same function saves it
        (through helpers, methods, objects' __call__; a helper's path parameter given the same path), or every
        call of the function around `at` (at least one) comes after such a save, the path mapped through the
        function's parameter it is (`read(path)` called as `read(args.ckpt)` after `write(m, args.ckpt)`)."""
        key = _attribute_key(path) or facts._path_key(path)
        function = facts._function_of(at)
        for call in facts.walk(function):
            if isinstance(call, ast.Call) and call.lineno < at.lineno and facts._function_of(call) is function \
                    and not facts.exclusive(call, at):
                for f, d in self.resolve(facts, call.func):
                    found, given = self.written(f, d, 3)
                    if key in found or any((_attribute_key(a) or facts._path_key(a)) == key
                                           for a in _passed(call, d, given)):
                        return True
        if depth <= 0 or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        params = [a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs]
        parameter = path.id if isinstance(path, ast.Name) and path.id in params else None
        if isinstance(path, ast.Name) and not parameter:
            return False  # a local name: its callers do not know it
        sites = [(f, c) for f, c in self.calls_named(function.name)
                 if any(d is function for _, d in self.resolve(f, c.func))]
        if not sites:
            return False
        for f, call in sites:
            mapped = _passed(call, function, {parameter}) if parameter else [path]
            if not mapped or not self.saved_before(f, call, mapped[0], depth - 1):
                return False
        return True

    def saves_no_tensors(self, key: str) -> bool:
        """Every save in the checked files to that file name or path (at least one) writes no tensors: a config,
        counters, CPU random states (`{"args": vars(args), "rng": torch.get_rng_state()}`); no map_location needed."""
        if not key or (key.startswith(("Name(", "Call(", "Subscript(")) and "(" in key):
            return False  # a local name or an expression: not the same file everywhere
        if self._saves_by_key is None:
            self._saves_by_key = {}
            for facts in self.files.values():
                for call in facts.calls if facts is not None else ():
                    if _dotted(call.func) == "torch.save" and call.args:
                        for target in facts._paths(call):
                            self._saves_by_key.setdefault(facts._path_key(target), []).append((facts, call))
        saves = self._saves_by_key.get(key, [])
        return bool(saves) and all(_no_tensors(f, c.args[0], c, 2) for f, c in saves)

    def library_at(self, path: str) -> bool:
        """Whether the file belongs to an installable package (pyproject [project], setup.py, setup.cfg)."""
        return _in_package(path)

    def verdict(self, question: str, facts: _FileFacts, node: ast.AST) -> bool:
        """Memoised answer for one definition; a cycle answers no."""
        key = (question, id(node))
        if key not in self._verdicts:
            self._verdicts[key] = False
            if isinstance(node, ast.ClassDef):  # a constructor call runs __init__
                init = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
                self._verdicts[key] = bool(init) and self.verdict(question, facts, init[0])
            elif question == "establishes":
                outcomes = facts.outcomes(node.body)
                self._verdicts[key] = _EST in outcomes and outcomes <= {_EST, _EXIT}
            elif question == "checks":
                returned = [c for r in facts.walk(node) if isinstance(r, ast.Return) and r.value
                            for c in facts.walk(r.value) if isinstance(c, (ast.Call, ast.Attribute))]
                # `return next(self.parameters()).is_cuda`: where the weights are answers like an availability check
                self._verdicts[key] = any(c.attr == "is_cuda" if isinstance(c, ast.Attribute) else
                                          _availability_call(c) or facts.checks_availability(c) for c in returned)
            elif facts.loads:  # "unpickles": a torch.load inside that forces weights_only=False
                self._verdicts[key] = any(isinstance(c, ast.Call) and _dotted(c.func) in facts.load_aliases and
                                          (_false(_keyword(c, "weights_only")) or facts.forces_unsafe(c))
                                          for c in facts.walk(node))
        return self._verdicts[key]

    def resolve(self, facts: _FileFacts, func: ast.AST) -> list[tuple[_FileFacts, ast.AST]]:
        """The definitions a call's function names, by scope and import (functions, or classes for constructors).

        `f()` is looked up in the enclosing functions, the module, its imports; `self.f()` in the class and its
        bases; `mod.f()` in an imported module; `x.f()` in the class `x` was made from (`x = Trainer(cfg)`,
        `x: Trainer`, `self.x = Trainer(cfg)`, `Trainer(cfg).f()`, `super().f()`). Anything else is not resolved:
        a method is never matched by its name alone. Answers are kept per node (a cycle answers nothing)."""
        key = id(func)
        found = self._resolved.get(key)
        if found is not None:
            return found
        self._resolved[key] = []
        if isinstance(func, ast.Name):
            if func.id in facts.defs or func.id in facts.imports or facts.star_imports:  # not `len()`, `print()`
                found = self._named(facts, func.id, func)
        elif isinstance(func, ast.Attribute):
            head = func.value
            while isinstance(head, ast.Attribute):
                head = head.value
            imported = facts.imports.get(head.id) if isinstance(head, ast.Name) else None
            target = self._module_of(facts, func.value) if imported else None
            if target is not None:
                found = target.top(func.attr)
                found = [(target, node) for node in found]
            elif not (imported and imported[1] is None):  # `torch.cat()`: a module outside the checked files
                found = [hit for facts_, cls in self._classes_of(facts, func.value)
                         for hit in self._methods(facts_, cls, func.attr, 0)]
        self._resolved[key] = found or []
        return self._resolved[key]

    def _named(self, facts: _FileFacts, name: str, at: ast.AST) -> list[tuple[_FileFacts, ast.AST]]:
        """What a bare name means where it is read: a local or module definition, an import, a star import."""
        local = facts.lookup(name, at)
        if local:
            return [(facts, node) for node in local]
        if name in facts.imports:
            module, imported, level = facts.imports[name]
            return self._imported(facts, module, imported, level) if imported else []
        for module, level in facts.star_imports:
            target = self.module(facts, module, level)
            if target is not None and target.top(name):
                return [(target, node) for node in target.top(name)]
        return []

    def _module_of(self, facts: _FileFacts, value: ast.AST) -> _FileFacts | None:
        """The checked module an expression names: `utils` (import utils), `pkg.mod`, `from pkg import mod`."""
        dotted = _dotted(value)
        head, _, rest = dotted.partition(".")
        if not head or head not in facts.imports or facts.lookup(head, value):
            return None
        module, imported, level = facts.imports[head]
        path = ".".join(part for part in (module, imported, rest) if part)
        return self.module(facts, path, level) if path else None

    def _classes_of(self, facts: _FileFacts, value: ast.AST) -> list[tuple[_FileFacts, ast.ClassDef]]:
        """The classes an object may be an instance of (or a class itself names): see resolve()."""
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and \
                value.func.attr in _SAME_OBJECT:
            value = value.func.value  # `Net().to(device).f()`
        made: list[ast.AST] = []
        if isinstance(value, ast.Call):
            if isinstance(value.func, ast.Name) and value.func.id == "super":
                cls = facts.enclosing_class(value)
                return self._bases(facts, cls) if cls is not None else []
            made = [value.func]
        elif isinstance(value, ast.Name):
            if value.id in ("self", "cls"):
                cls = facts.enclosing_class(value)
                return [(facts, cls)] if cls is not None else []
            named = [(f, n) for f, n in self._named(facts, value.id, value) if isinstance(n, ast.ClassDef)]
            if named:
                return named  # `Trainer.f(...)`
            scope = facts.scope_of(value)
            made = [getattr(b, "func", b) for b in facts.bindings(scope).get(value.id, [])]
            if not made and scope is not facts.tree:
                made = [getattr(b, "func", b) for b in facts.bindings(facts.tree).get(value.id, [])]
        elif isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
            cls = facts.enclosing_class(value)
            made = [b.func for b in facts.attribute_bindings(cls).get(value.attr, [])] if cls is not None else []
        return [(f, n) for func in made for f, n in self.resolve(facts, func) if isinstance(n, ast.ClassDef)]

    def _bases(self, facts: _FileFacts, cls: ast.ClassDef) -> list[tuple[_FileFacts, ast.ClassDef]]:
        """A class's base classes found in the checked files (or the modules they import)."""
        return [(f, n) for base in cls.bases for f, n in self.resolve(facts, base)
                if isinstance(n, ast.ClassDef) and n is not cls]

    def wraps_attribute(self, facts: _FileFacts, value: ast.Attribute) -> bool:
        """`obj.model` where a method of obj's class (or a base's) sets `self.model` to a DP/DDP wrapper."""
        pending, seen = self._classes_of(facts, value.value), set()
        while pending:
            owner, cls = pending.pop()
            if id(cls) in seen or len(seen) > 8:
                continue
            seen.add(id(cls))
            if value.attr in owner.wrapped_attributes(cls):
                return True
            pending += self._bases(owner, cls)
        return False

    def _methods(self, facts: _FileFacts, cls: ast.ClassDef, name: str, depth: int) -> list[tuple[_FileFacts, ast.AST]]:
        """A class's method (or nested class) of that name, else its bases' (depth-first, like a simple MRO)."""
        own = [(facts, n) for n in facts.scopes.get(cls, {}).get(name, [])]
        if own or depth > 4:
            return own
        return [found for f, base in self._bases(facts, cls) for found in self._methods(f, base, name, depth + 1)]

    def _imported(self, facts: _FileFacts, module: str, name: str, level: int, depth: int = 0) -> list:
        """Module-level definitions of `name` in a module, following `from .x import name` re-exports."""
        target = self.module(facts, module, level)
        if target is None:
            return []
        found = [(target, node) for node in target.top(name)]
        if not found and name in target.imports and depth < 2:
            module, again, level = target.imports[name]
            return self._imported(target, module, again, level, depth + 1) if again else []
        for module, level in target.star_imports if not found and depth < 2 else ():  # `from .vae import *`
            found = self._imported(target, module, name, level, depth + 1)
            if found:
                break
        return found

    def module(self, facts: _FileFacts, module: str, level: int) -> _FileFacts | None:
        """The facts of an imported module found next to the importing file or above it, read once."""
        folder = facts.folder
        key = (folder, module, level)
        if key in self._modules:
            return self._modules[key]
        self._modules[key] = None
        if not os.path.isfile(facts.path) or not (module or level):
            return None
        if level:
            for _ in range(level - 1):
                folder = os.path.dirname(folder)
            roots = [folder]
        else:
            roots = [folder]
            while len(roots) < 5 and os.path.dirname(roots[-1]) != roots[-1]:
                roots.append(os.path.dirname(roots[-1]))
        parts = module.split(".") if module else []
        for root in roots:
            if parts and not {parts[0], parts[0] + ".py"} & _listing(root):
                continue  # `import torch`: no torch/ or torch.py here (one listing per folder, not two stats)
            stem = os.path.join(root, *parts)
            for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
                if os.path.isfile(candidate) and (_realpath(candidate) in self.files or any(
                        _under(candidate, r) for r in self.roots) and not SKIP_DIRS & set(Path(candidate).parts)):
                    self._modules[key] = self.load(candidate)
                    return self._modules[key]
        return None

    def load(self, path: str) -> _FileFacts | None:
        """Facts of a file that is imported but not checked (parsed once; None when it cannot be)."""
        real = _realpath(path)
        if real not in self.files:
            self.files[real] = None
            try:
                self.files[real] = _FileFacts(_parse(read_source(Path(path)), path), path, self)
            except (LintError, SyntaxError, ValueError, RecursionError, MemoryError):
                pass
        return self.files[real]

    def record(self, facts: _FileFacts, call: ast.Call, chain: tuple[int, ...], known: bool) -> list:
        """Note a call site (and functions passed by name, `mp.spawn(worker, ...)`); return its targets."""
        targets = self.resolve(facts, call.func)
        for _, node in targets:
            self.sites.setdefault(id(node), []).append((chain, known))
        for value in [*call.args, *(k.value for k in call.keywords)]:
            passed = value.id if type(value) is ast.Name else value.attr if type(value) is ast.Attribute and \
                type(value.value) is ast.Name and value.value.id == "self" else ""
            if passed and (passed in facts.defs or passed in facts.imports):
                launched = known or _per_gpu_launch(facts, call, value)  # a worker per GPU: none without one
                for _, node in self.resolve(facts, value):  # `mp.spawn(worker)`, `Thread(target=self.run)`
                    self.sites.setdefault(id(node), []).append((chain, launched))
        return targets

    def cuda_only(self, definitions: list[tuple[_FileFacts, ast.AST]]) -> set[int]:
        """Functions every caller in the checked files reaches only where CUDA exists (the least fixed point)."""
        pending = []
        for facts, node in definitions:
            sites = self.sites.get(id(node), [])
            owner = facts.parents.get(node)
            if isinstance(owner, ast.ClassDef) and (node.name == "__init__" or not sites and
                                                    not self.library_at(facts.path)):
                # `Trainer(cfg)` runs __init__; in an application, a method no call names (`model(x)` runs forward)
                # runs where its object was made (a package's objects are also made by its users)
                sites = sites + self.sites.get(id(owner), [])
            sites = [(chain, known) for chain, known in sites if id(node) not in chain]  # recursion
            if sites:
                pending.append((id(node), sites))
            implicit = isinstance(owner, ast.ClassDef) and (node.name == "forward" or node.name.endswith("__")) and \
                self.sites.get(id(owner))  # `model(x)`, `len(data)`, `data[i]` on an object made somewhere
            if sites or implicit or node.name.lower().startswith("test"):  # a test runner calls tests
                self.reached.add(id(node))
        found: set[int] = set()
        changed = True
        while changed:
            changed = False
            for key, sites in pending:
                if key not in found and all(known or found.intersection(chain) for chain, known in sites):
                    found.add(key)
                    changed = True
        return found


class _Checker(ast.NodeVisitor):
    """Walks one module's tree, keeping just enough context (class, method, guards, scope) for the rules."""

    def __init__(self, path: str, allow_device_strings: bool, facts: _FileFacts, porting: bool = False) -> None:
        self.path, self.allow_device_strings, self.facts, self.porting = path, allow_device_strings, facts, porting
        self.findings: list[tuple[Finding, tuple[int, ...]]] = []  # each with the functions around it
        self.parents: list[ast.AST] = []  # enclosing classes and functions, innermost last
        self.in_forward = self.in_getitem = False
        self.guarded = 0  # > 0 inside a guard: a CUDA test, a skip decorator, after `if not cuda: return`
        self.cuda_only = 0  # > 0 where the code cannot be without CUDA: NCCL started, CUDA asserted
        self.branches = 0  # > 0 inside if/for/while/try: a rebinding there may not happen
        self.safe_globals = 0  # > 0 inside `with torch.serialization.safe_globals(...)`
        self.wrapped: list[set[str]] = [set()]  # per function scope: names bound to DP/DDP(...)
        self.dicts: list[set[str]] = [set()]  # per function scope: names bound to a dict
        self.wrapped_attrs: set[str] = set()  # `self.model = DDP(...)` outlives the method
        self.unwrapped: list[str] = []  # per branch: a name its test found not wrapped ('' for none)
        self.moved: set[int] = set()  # factory calls whose result is moved with .to()/.type_as()
        self._methods = _VISITORS.setdefault(type(self), {})
        self.checked = _checked_nodes(type(self), facts)

    def visit(self, node: ast.AST) -> None:
        """Dispatch like ast.NodeVisitor, with the method looked up once per node type."""
        kind = type(node)
        method = self._methods.get(kind)
        if method is None:
            method = self._methods[kind] = getattr(type(self), "visit_" + kind.__name__, None) \
                or type(self).generic_visit
        method(self, node)
        if kind in _MAY_ESTABLISH and self.facts.establishes(node):
            self.cuda_only += 1  # restored where the block ends (a function, a branch, a loop)

    def known(self) -> bool:
        """Whether CUDA is known to exist here (--porting: only a guard counts, not a CUDA-only script)."""
        return bool(self.guarded or (self.cuda_only and not self.porting))

    def _chain(self) -> tuple[int, ...]:
        """ids of the module, functions and classes around the current node, outermost first."""
        return (id(self.facts.tree), *(id(p) for p in self.parents))

    def generic_visit(self, node: ast.AST) -> None:
        """Visit the children, from the pre-pass's child lists (the same order as ast.NodeVisitor)."""
        children = self.facts.children.get(node)
        if children is None:
            super().generic_visit(node)
            return
        checked = self.checked
        for child in children:
            if child in checked:  # a subtree with nothing any rule looks at is not walked (over half the nodes)
                self.visit(child)

    def report(self, node: ast.AST, code: str, detail: str = "") -> None:
        """Record a finding at the node's position (columns are 1-based, like flake8)."""
        finding = Finding(self.path, node.lineno, node.col_offset + 1, code, detail)
        self.findings.append((finding, self._chain()))

    def report_device(self, node: ast.AST, literals: list[tuple[str, bool]], default: bool = False) -> None:
        """DEV002 for a hard-coded accelerator, DEV011 where a CUDA test already guards it.

        A file that resolves devices may name them, but a hidden default (a parameter's, an argparse
        option's, a `getattr(args, "device", "cuda")` fallback) is reported there too unless the file is listed."""
        if not self.allow_device_strings and (default or not self.facts.resolves_devices):
            for literal, guarded in literals:
                self.report(node, "DEV011" if guarded or self.known() else "DEV002", repr(literal))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        """Remember the class so its methods know whether they are a forward or a __getitem__."""
        guarded = self._decorated_guard(node) or any(
            isinstance(s, ast.Assign) and _dotted(s.targets[0]) == "pytestmark"
            and _decorator_guard(s.value, self.facts) for s in node.body)
        self.guarded += guarded
        self.parents.append(node)
        self.generic_visit(node)
        self.parents.pop()
        self.guarded -= guarded

    def _decorated_guard(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """A decorator that skips the whole function or class unless CUDA is there guards all of it."""
        return any(_decorator_guard(d, self.facts) for d in node.decorator_list)

    def visit_Module(self, node: ast.Module) -> None:
        """`pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), ...)` guards the whole file."""
        self.guarded += any(isinstance(s, ast.Assign) and _dotted(s.targets[0]) == "pytestmark"
                            and _decorator_guard(s.value, self.facts) for s in node.body)
        self.cuda_only += self.facts.tests_cuda_extension or self.facts.needs_cuda_extension()
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Check defaults, then the body with forward/__getitem__/guard context and a fresh scope."""
        self._check_default_devices(node)
        owner = self.parents[-1] if self.parents else None
        saved = (self.in_forward, self.in_getitem, self.guarded, self.cuda_only, self.branches)
        inherited = self.in_forward and not isinstance(owner, ast.ClassDef)
        self.in_forward = id(node) in self.facts.forward_like or inherited
        if isinstance(owner, ast.ClassDef):
            self.in_getitem = node.name == "__getitem__" and _is_dataset(owner)
        self.guarded += self._decorated_guard(node)
        # Collectives mean a process group; device strings there run under NCCL, which needs CUDA.
        self.cuda_only += (id(node), "") in self.facts.collective_scopes or self.facts.starts_nccl(node.body)
        self.branches = 0
        self.parents.append(node)
        self.wrapped.append(set())
        self.dicts.append(set())
        self.generic_visit(node)
        self.dicts.pop()
        self.wrapped.pop()
        self.parents.pop()
        self.in_forward, self.in_getitem, self.guarded, self.cuda_only, self.branches = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If | ast.IfExp) -> None:
        """Visit each branch knowing whether CUDA is established there; an early exit guards the rest."""
        if isinstance(node, ast.If) and self._switched_off(node.test):
            self.visit(node.test)  # `classify = False` ... `if classify:`: that branch never runs
            self._visit_branch(node.orelse, False)
            return
        if isinstance(node, ast.If) and isinstance(node.test, ast.Constant) and not node.test.value:
            self._visit_branch(node.orelse, False)  # `if False:  # torch.cuda.is_available():` never runs
            return
        if isinstance(node, ast.If) and not self.porting and self._untaken(node):  # porting: every .cuda()
            self.visit(node.test)
            self._visit_branch(node.orelse, False)
            return
        guard = _guard(node.test, self.facts)
        scopes = self.facts.collective_scopes
        nccl = self.facts.implies_cuda(node) or isinstance(node, ast.If) and (
            (id(node), "body") in scopes or self.facts.starts_nccl(node.body))
        self.visit(node.test)
        tested, wrapped_if_true = _wrapper_test(node.test)
        self._visit_branch(node.body, guard == _CUDA, nccl, "" if wrapped_if_true else tested)
        self._visit_branch(node.orelse, guard == _NOT_CUDA, isinstance(node, ast.If) and (
            (id(node), "orelse") in scopes or self.facts.starts_nccl(node.orelse)), tested if wrapped_if_true else "")
        body = node.body if isinstance(node.body, list) else []
        if guard == _NOT_CUDA and body and _exits(body[-1]):
            self.guarded += 1  # `if not torch.cuda.is_available(): return`; restored when the function ends

    visit_IfExp = visit_If

    def _visit_branch(self, body: list[ast.stmt] | ast.expr, guarded: bool, cuda_only: bool = False,
                      unwrapped: str = "") -> None:
        """Visit statements (or an expression) that run only on one side of a test; `unwrapped` names a model the
        test found not to be a DP/DDP wrapper there (the `else` of `isinstance(model, DataParallel)`)."""
        saved = self.guarded, self.cuda_only
        hidden = [names for names in (self.wrapped_attrs, *self.wrapped) if unwrapped and unwrapped in names]
        for names in hidden:
            names.discard(unwrapped)
        self.unwrapped.append(unwrapped)
        self.guarded += guarded
        self.cuda_only += cuda_only
        self.branches += 1
        for child in body if isinstance(body, list) else [body]:
            self.visit(child)
        self.branches -= 1
        self.guarded, self.cuda_only = saved
        self.unwrapped.pop()
        for names in hidden:
            names.add(unwrapped)

    def generic_branch(self, node: ast.AST) -> None:
        """Loops and try blocks may not run: a rebinding inside them does not forget a wrapper."""
        saved = self.guarded, self.cuda_only
        self.branches += 1
        self.generic_visit(node)
        self.branches -= 1
        self.guarded, self.cuda_only = saved

    visit_For = visit_AsyncFor = visit_While = visit_Try = generic_branch

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        """`with torch.serialization.safe_globals([...]):` makes the loads inside deliberate; what a test expects
        to raise or warn (`with pytest.raises(...)`, `self.assertWarns(...)`) is meant to fail without CUDA."""
        trusted = any(_last(item.context_expr) == "safe_globals" for item in node.items)
        expected = any(_last(item.context_expr) in _EXPECTS for item in node.items)
        self.safe_globals += trusted
        self.guarded += expected
        self.generic_visit(node)
        self.guarded -= expected
        self.safe_globals -= trusted

    visit_AsyncWith = visit_With

    def visit_Constant(self, node: ast.Constant) -> None:
        """Constants have no children and no rule of their own (NodeVisitor's version is slow)."""

    def visit_Attribute(self, node: ast.Attribute) -> None:
        """DEV010: `torch.cuda.FloatTensor` and friends exist only with CUDA (a type test makes no tensor)."""
        typed = node.attr.endswith("Tensor") and self.facts.legacy_type(node)  # the cheap test first
        if typed and not self.known() and not _type_test(node, self.facts.parents) and \
                not _unread_binding(node, self.facts):
            self.report(node, "DEV010", _dotted(node))
        self.generic_visit(node)

    def _check_default_devices(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """DEV002 for `def f(device="cuda")`: a hidden default device is still a hard-coded one.

        Unless the function only names a backend with it (`torch.get_autocast_dtype(device)`, comparisons)."""
        params = function.args.posonlyargs + function.args.args
        for param, default in _parameter_defaults(function.args):
            if "device" in param.arg and not _names_only(ast.Name(param.arg), self.facts, function) \
                    and self._reads(function, param.arg) \
                    and not self._always_passed(function, param.arg, params.index(param) if param in params else -1):
                self.report_device(default, _device_literals(default, self.facts), default=True)

    def _reads(self, function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
        """Whether the function reads a parameter (or may, through `locals()`/`vars()`): an unused one's default
        places nothing."""
        return any(type(n) is ast.Name and (n.id == name and isinstance(n.ctx, ast.Load) or n.id in ("locals", "vars"))
                   for n in self.facts.walk(function))

    def _always_passed(self, function: ast.FunctionDef | ast.AsyncFunctionDef, name: str, position: int) -> bool:
        """Every call passes the parameter, so its default is never used: a private helper's calls in this file;
        in an application (no users outside), any function's or class's calls in the checked files."""
        found = self._callers(function)
        if found is None:
            return False
        resolved, shift = found
        return bool(resolved) and all(_keyword(c, name) is not None or 0 <= position - shift < len(c.args)
                                      for c in resolved)

    def _callers(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[ast.Call], int] | None:
        """The calls of a function (a class: of the class), and how many leading parameters they do not pass
        (`self`): a private helper's in this file; in an application (no users outside), any function's or class's
        in the checked files. None where callers outside may exist or a call the lint cannot resolve may be one."""
        memo = self.facts.project.callers
        if id(function) not in memo:
            memo[id(function)] = self._find_callers(function)
        return memo[id(function)]

    def _find_callers(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[ast.Call], int] | None:
        """`_callers`, uncached."""
        owner = self.facts.parents.get(function)
        constructor = function.name == "__init__" and isinstance(owner, ast.ClassDef)
        private = function.name.startswith("_") and not function.name.endswith("__")
        if not (private or (constructor or not function.name.endswith("__")) and
                not self.facts.project.library_at(self.facts.path)):
            return None
        callee, target = (owner.name, owner) if constructor else (function.name, function)
        shift = 1 if function.args.args and function.args.args[0].arg in ("self", "cls") else 0
        calls = [(f, c) for f, c in self.facts.project.calls_named(callee) if not private or f is self.facts]
        resolved = [c for f, c in calls if any(d is target for _, d in f.project.resolve(f, c.func))]
        if private:  # a call of another `_name` does not count; one the lint cannot resolve may be this one
            resolved += [c for f, c in calls if not f.project.resolve(f, c.func)]
        elif len(resolved) != len(calls) and any(not f.project.resolve(f, c.func) for f, c in calls):
            return None  # a call the lint cannot resolve may let the default through
        return resolved, shift

    def _switched_off(self, test: ast.AST) -> bool:
        """A test of a name bound once to a falsy constant that is false with it: `if flag:`, `if flag is True:`."""
        name = _tested_parameter(test)
        if not name:
            return False
        bound, value = self.facts.bound_off(name, test)
        return bound and _decide(test, value) is False

    def _untaken(self, node: ast.If) -> bool:
        """The test is false for every value callers give the parameter it reads: each call leaves the default or
        passes a constant, and none makes it true (`if name.endswith(".pth"):` with `name="dla34"` and every
        caller passing names of released weights). A parameter rebound in the function, or a call that
        unpacks arguments, decides nothing; nor does a hubconf.py entry point's (torch.hub's users pass theirs)."""
        param = _tested_parameter(node.test)
        function = self.facts._function_of(node)
        if not param or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or \
                os.path.basename(self.facts.path) == "hubconf.py":
            return False
        default = {a.arg: d for a, d in _parameter_defaults(function.args)}.get(param)
        if not isinstance(default, ast.Constant) or _decide(node.test, default.value) is not False or any(
                type(n) is ast.Name and n.id == param and isinstance(n.ctx, ast.Store)
                for n in self.facts.walk(function)):
            return False
        found = self._callers(function)
        if not found or not found[0]:
            return False
        params = function.args.posonlyargs + function.args.args
        position = next((i for i, a in enumerate(params) if a.arg == param), -1) - found[1]
        values = [default.value]
        for call in found[0]:
            if any(isinstance(a, ast.Starred) for a in call.args) or _keyword(call, None) is not None:
                return False
            given = _keyword(call, param)
            value = given.value if given is not None else call.args[position] if 0 <= position < len(call.args) \
                else default
            if not isinstance(value, ast.Constant):
                return False
            values.append(value.value)
        return all(_decide(node.test, v) is False for v in values)

    def visit_Assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        """Track names holding a DP/DDP wrapper or a dict; DEV002 for `device = "cuda"`."""
        self.generic_visit(node)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            name = _dotted(target)
            if "device" in _last(target).lower() and not _last(target).lower().endswith("type") \
                    and not _names_only(target, self.facts):
                self.report_device(node.value, _device_literals(node.value, self.facts))
            if type(target) is ast.Tuple and isinstance(node.value, ast.Call):
                for place in self._wrapped_places(target, node.value):  # `model, params = generate_model(opt)`
                    self._rebind(self.wrapped[-1], place, True)
            if not name or node.value is None:
                continue
            scope = self.wrapped_attrs if isinstance(target, ast.Attribute) else self.wrapped[-1]
            wrapped = self.wrapped_attrs | set().union(*self.wrapped) if self.wrapped_attrs or any(self.wrapped) \
                else set()
            self._rebind(scope, name, _wraps(node.value, wrapped, self.facts.project.wrappers))
            self._rebind(self.dicts[-1], name, _is_dict(node.value))

    visit_AnnAssign = visit_Assign

    def _wrapped_places(self, target: ast.Tuple, call: ast.Call) -> list[str]:
        """The names of `a, b = helper()` at the places where one of the helper's tuple returns holds a DP/DDP
        wrapper: made in the return, or a name the helper binds to one (`model = nn.DataParallel(model)`)."""
        wrappers, found = self.facts.project.wrappers, []
        for facts, helper in self.facts.project.resolve(self.facts, call.func):
            if not isinstance(helper, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            inside = facts.walk(helper)
            made = {t.id for a in inside if isinstance(a, ast.Assign) and _wraps(a.value, set(), wrappers)
                    for t in a.targets if type(t) is ast.Name}
            for value in (r.value for r in inside if isinstance(r, ast.Return)):
                if type(value) is ast.Tuple and len(value.elts) == len(target.elts):
                    found += [t.id for t, v in zip(target.elts, value.elts) if type(t) is ast.Name and
                              (_wraps(v, made, wrappers))]
        return found

    def _rebind(self, names: set[str], name: str, holds: bool) -> None:
        """Add a name that now holds the thing; forget it only when the rebinding surely runs."""
        if holds:
            names.add(name)
        elif not self.branches:
            names.discard(name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        """DEV005: `from .config import DEVICE` copies a value that is only set at start-up."""
        if (node.module or "").rsplit(".", 1)[-1] == "config":
            for alias in node.names:
                if alias.name == "DEVICE":
                    self.report(node, "DEV005")

    def visit_Call(self, node: ast.Call) -> None:
        """Run every call-shaped rule on this call, then visit its arguments."""
        func = node.func
        method = func.attr if isinstance(func, ast.Attribute) else ""
        targets = self.facts.project.record(self.facts, node, self._chain(), self.known())
        if method in ("to", "cuda", "type_as"):
            self._mark_moved(func.value, node)
        if method in ("type", "set_default_tensor_type") and node.args and not self.known() and \
                _TYPED_CUDA.match(_string(node.args[0]) or ""):
            self.report(node.args[0], "DEV010", _string(node.args[0]) or "")  # .type("torch.cuda.FloatTensor")
        # `def cuda(self, *items)` of the repository's own, which moves nothing with torch's `.cuda()` itself
        own = method == "cuda" and targets and all(getattr(d, "name", "") == "cuda" and not any(
            _last(c) == "cuda" for c in f.walk(d) if isinstance(c, ast.Call)) for f, d in targets)
        if method == "cuda" and (self.porting or not (self.known() or own)):
            self.report(node, "DEV001", "guarded, but it still pins device 0" if self.guarded else "")
        name = self.facts.canonical(func)
        self._check_device_strings(node, method, name)
        if targets and method != "to":
            for literal in self._positional_devices(node, targets):
                self.report_device(literal, _device_literals(literal, self.facts))
        self._check_runtime(node, name, method)
        if name in self.facts.load_aliases or name == "torch.jit.load":
            self._check_load(node, "torch.load" if name in self.facts.load_aliases else name)
        else:
            self._check_helper_load(node, name, targets)
        if name == "torch.save" and node.args and _looks_like_module(node.args[0]) \
                and _dotted(node.args[0]) not in self.dicts[-1] and not self._bound_to_no_module(node.args[0]):
            self.report(node, "DEV006", f"{_dotted(node.args[0]) or 'object'} is saved whole")
        elif name == "torch.save" and node.args:
            held = self._modules_in_dict(node.args[0])
            if held:
                self.report(node, "DEV006", f"{', '.join(held)} saved whole inside a dict")
            for entry, module in self._modules_in_dict(node.args[0], either=True):
                self.report(entry, "DEV006", f"{module} saved whole in one branch of a conditional inside a dict")
        if self.in_forward and name.startswith("torch.") and name[6:] in _FACTORIES:
            self._check_factory(node, name)
        if self.in_getitem and (method == "cuda" or (method == "to" and _moves_device(node))):
            self.report(node, "DEV008")
        if method == "state_dict" or targets:
            wrapped = self.wrapped_attrs.union(*self.wrapped)
            if method == "state_dict" and (_wraps(func.value, wrapped, self.facts.project.wrappers) or
                                           self._wrapped_elsewhere(func.value)) and self._kept(node):
                self.report(node, "DEV009", f"{_dotted(func.value) or 'the wrapper'} is still wrapped")
            if wrapped and targets:
                self._pass_wrapped(node, targets, wrapped)
        self.generic_visit(node)

    def _wrapped_elsewhere(self, value: ast.AST) -> bool:
        """`self.model` (or `trainer.model`) that another method of its class sets to a wrapper; a method that
        stores the attribute itself is left to the in-order tracking (it may unwrap it first)."""
        if type(value) is not ast.Attribute or type(value.value) is not ast.Name or _dotted(value) in self.unwrapped:
            return False  # the `else` of `isinstance(self.model, DataParallel)` holds the plain model
        function = self.facts._function_of(value)
        if value.value.id == "self" and function is not self.facts.tree and any(
                type(n) is ast.Attribute and n.attr == value.attr and type(n.ctx) is ast.Store and
                _dotted(n.value) == "self" for n in self.facts.walk(function)):
            return False
        return self.facts.project.wraps_attribute(self.facts, value)

    def _pass_wrapped(self, node: ast.Call, targets: list, wrapped: set[str]) -> None:
        """Note the parameters a DP/DDP wrapper is passed to (`train(args, model)`), for DEV009 in the callee."""
        for facts, target in targets:
            if not isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = [a.arg for a in target.args.posonlyargs + target.args.args]
            if params[:1] in (["self"], ["cls"]) and isinstance(node.func, ast.Attribute):
                params = params[1:]
            # local names only: `self.net` is wrapped or not by branch (`if use_gpu:`), which attributes do not track
            names = {params[i] for i, a in enumerate(node.args)
                     if i < len(params) and isinstance(a, ast.Name) and _wraps(a, wrapped)}
            names |= {k.arg for k in node.keywords
                      if k.arg and isinstance(k.value, ast.Name) and _wraps(k.value, wrapped)}
            if names:
                entry = self.facts.project.wrapped_params.setdefault(id(target), (facts, target, set()))
                entry[2].update(names)

    def _check_runtime(self, node: ast.Call, name: str, method: str) -> None:
        """DEV012: CUDA runtime calls and `Tensor.pin_memory()` raise without a CUDA driver."""
        runtime = name.startswith("torch.cuda.") and name[11:] in _CUDA_RUNTIME
        if not (runtime or method == "pin_memory") or self.known() or self.facts.resolves_devices or \
                self.allow_device_strings:
            return  # the name first: it rules out nearly every call, and costs least
        if runtime:
            self.report(node, "DEV012", f"{name}()")
        elif not node.args and not node.keywords and \
                not (self.parents and getattr(self.parents[-1], "name", "") == "pin_memory"):
            self.report(node, "DEV012", ".pin_memory()")  # a batch's own pin_memory() runs only when pinning

    def _check_helper_load(self, node: ast.Call, name: str, targets: list) -> None:
        """DEV004 for unpickling through a helper: a download, or a function that forces weights_only=False."""
        last = _last(node)
        if not (targets or last in _HELPER_LOADS) or _true(_keyword(node, "weights_only")) or self.safe_globals:
            return
        if _last(node) == "partial" and node.args and _dotted(node.args[0]) == "torch.load":
            if _false(_keyword(node, "weights_only")):
                self.report(node, "DEV004", "weights_only=False in a torch.load wrapper")
        elif _last(node) == "load_state_dict_from_url" or name.endswith("model_zoo.load_url") or \
                self.facts.qualified(node.func).endswith(("model_zoo.load_url", "hub.load_url")):
            self.report(node, "DEV004", f"{name or _last(node)}() unpickles a download")
        elif last == "load_from_checkpoint" and not targets and isinstance(node.func, ast.Attribute):
            if not (node.args and (self.facts.saves_in_function(node) or self.facts.test_local(node.args[0]))):
                self.report(node, "DEV004", "Lightning's load_from_checkpoint() unpickles the whole file")
        elif last == "load" and not targets and self._lightning_load(node.func) and \
                not (node.args and (self.facts.saves_in_function(node) or self.facts.test_local(node.args[0]))):
            self.report(node, "DEV004", "Lightning Fabric's load() unpickles the whole file")
        elif self.facts.qualified(node.func) in _UNSAFE_HELPERS:
            self.report(node, "DEV004", _UNSAFE_HELPERS[self.facts.qualified(node.func)])
        elif targets and all(self.facts.project.verdict("unpickles", f, d) for f, d in targets) and \
                not any(id(d) in map(id, self.parents) for _, d in targets) and \
                not (node.args and (self.facts.saves_in_function(node) or self.facts.test_local(node.args[0]))):
            self.report(node, "DEV004", f"{name or _last(node)}() loads with weights_only=False")

    def _lightning_load(self, func: ast.AST) -> bool:
        """`self.load(path)` in a subclass of Lightning's LightningLite/Fabric (through checked bases too), whose
        inherited load() calls torch.load without weights_only (a class with its own load() is resolved instead)."""
        if type(func) is not ast.Attribute or type(func.value) is not ast.Name:
            return False
        project, seen = self.facts.project, set()
        pending = project._classes_of(self.facts, func.value)
        while pending:
            facts, cls = pending.pop()
            if id(cls) in seen or len(seen) > 8:
                continue
            seen.add(id(cls))
            for base in cls.bases:
                named = facts.qualified(base) or _dotted(base)  # `L.Fabric` of `import lightning as L` too
                module, _, last = named.rpartition(".")
                if last in ("LightningLite", "Fabric") and module.startswith(_LIGHTNING):
                    return True
            pending += project._bases(facts, cls)
        return False

    def _kept(self, node: ast.Call) -> bool:
        """A state_dict() that is saved or stored (directly or by the name it is bound to), not only read or checked."""
        parent = self.facts.parents.get(node)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
            uses = [n for n in self.facts.walk(self.facts._function_of(node)) if isinstance(n, ast.Name)
                    and n.id == parent.targets[0].id and isinstance(n.ctx, ast.Load)]
            return not uses or any(_stored(use, self.facts.parents) for use in uses)
        return _stored(node, self.facts.parents)

    def _mark_moved(self, receiver: ast.AST, move: ast.Call) -> None:
        """Remember the calls in `torch.arange(n)[None].float().to(x)` as moved (not DEV007)."""
        if move.func.attr == "to" and move.args and all(_DTYPE.match(_dotted(a)) for a in move.args):
            return  # .to(torch.float16) changes the dtype, not the device
        while isinstance(receiver, (ast.Call, ast.Subscript, ast.Attribute)):
            if isinstance(receiver, ast.Call):
                self.moved.add(id(receiver))
            receiver = receiver.func if isinstance(receiver, ast.Call) else receiver.value

    def _check_device_strings(self, node: ast.Call, method: str, name: str) -> None:
        """DEV002: accelerator literals in torch.device(), .to(), device= or an argparse --device default.

        Strings that place nothing are not hard-coded devices: a backend type for autocast/GradScaler,
        `torch.device("cuda")` compared with another device or used as a key."""
        naming = name == "torch.device" and _naming_use(node, self.facts.parents)
        if _last(node) in _TYPE_ONLY or naming or self._overridden_default(node):
            return
        candidates = list(node.args) if method == "to" else []
        candidates += [kw.value for kw in node.keywords if kw.arg == "map_location"]
        if name == "torch.device" and node.args:
            candidates.append(node.args[0])
        for name in ("device", "device_map"):  # `from_pretrained(..., device_map="cuda")` places the model too
            keyword = _keyword(node, name)
            if keyword is not None:
                candidates.append(keyword.value)
        default = _keyword(node, "default")
        defaults = _lookup_default(node)
        accelerator = _ACCELERATOR.match(_string(getattr(default, "value", None)) or "")
        if method == "add_argument" and default is not None and (
                accelerator or any("device" in (_string(a) or "") for a in node.args)):
            defaults.append(default.value)  # `--device default="cuda"`, `--gpu_type default="cuda"`
        if _last(node) == "set_default_device" and node.args:
            defaults.append(node.args[0])
        for candidate in candidates:
            self.report_device(candidate, _device_literals(candidate, self.facts))
        for candidate in defaults:
            self.report_device(candidate, _device_literals(candidate, self.facts), default=True)

    def _overridden_default(self, node: ast.AST) -> bool:
        """A parameter's default (`device=torch.device("cuda")`) that every call passes a value for, so never used."""
        arguments = self.facts.parents.get(node)
        function = self.facts.parents.get(arguments)
        if not isinstance(arguments, ast.arguments) or \
                not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        params = arguments.posonlyargs + arguments.args
        param = next((a for a, d in _parameter_defaults(arguments) if d is node), None)
        return param is not None and self._always_passed(function, param.arg,
                                                         params.index(param) if param in params else -1)

    def _modules_in_dict(self, saved: ast.AST, either: bool = False) -> list:
        """Modules held whole by a saved dict (`{'encoder': encoder, 'model': self.model}`), shown or bound in
        this function: the values themselves, not their `.state_dict()`, judged by name like DEV006's. `either`:
        (entry, module) for each entry that is a conditional with a module in a branch (`net.state_dict() if
        use_cuda else net` pickles the module where CUDA is missing), to be reported at that entry."""
        displays = [saved] if isinstance(saved, ast.Dict) else []
        if isinstance(saved, ast.Name):
            scope = self.parents[-1] if self.parents else self.facts.tree
            displays = [n.value for n in self.facts.walk(scope) if isinstance(n, ast.Assign) and
                        isinstance(n.value, ast.Dict) and any(_dotted(t) == saved.id for t in n.targets)]
        if not either:
            return sorted({_dotted(v) for d in displays for v in d.values if _module_value(v) and
                           _dotted(v) not in self.dicts[-1] and not self._bound_to_no_module(v)})  # `= dict(...)`
        found = []
        for value in (v for d in displays for v in d.values if type(v) is ast.IfExp):
            held = [_dotted(m) for m in _either([value]) if _module_value(m) and _dotted(m) not in self.dicts[-1]]
            found += [(value, held[0])] if held else []
        return found

    def _bound_to_no_module(self, node: ast.AST) -> bool:
        """A local whose every binding in this function holds no module, whatever its name says: `model =
        net.state_dict()`, or a place of a helper's tuple return that names none (`model, model_kwargs =
        build_model()` where it returns `model, kwargs`)."""
        if type(node) is not ast.Name:
            return False
        inside = self.facts.walk(self.parents[-1] if self.parents else self.facts.tree)
        stores = [n for n in inside if type(n) is ast.Name and n.id == node.id and type(n.ctx) is ast.Store]
        binds = [self.facts.parents.get(n) for n in stores]
        binds = [self.facts.parents.get(b) if type(b) is ast.Tuple else b for b in binds]
        return bool(stores) and all(isinstance(b, ast.Assign) and len(b.targets) == 1 and
                                    self._binds_no_module(b.targets[0], b.value, node.id) for b in binds)

    def _binds_no_module(self, target: ast.AST, value: ast.AST, name: str) -> bool:
        """`name = X.state_dict()`; or `a, name = helper()` where each of the helper's returns is a tuple whose item
        at that place is a name no module goes by."""
        if type(target) is ast.Name:
            return isinstance(value, ast.Call) and _last(value) == "state_dict"
        if type(target) is not ast.Tuple or not isinstance(value, ast.Call):
            return False
        place = next((i for i, e in enumerate(target.elts) if type(e) is ast.Name and e.id == name), None)
        helpers = self.facts.project.resolve(self.facts, value.func)
        returns = [r.value for f, d in helpers if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for r in f.walk(d) if isinstance(r, ast.Return)]
        return place is not None and bool(returns) and all(
            type(r) is ast.Tuple and len(r.elts) == len(target.elts) and
            isinstance(r.elts[place], (ast.Name, ast.Attribute)) and not _module_value(r.elts[place])
            for r in returns)

    def _positional_devices(self, node: ast.Call, targets: list) -> list[ast.AST]:
        """Accelerator literals passed by position to a parameter named for a device (`model.sample(8, 'cuda')`
        where `def sample(self, num_samples, current_device)`), the call resolved to its definitions."""
        literal = [i for i, a in enumerate(node.args) if _ACCELERATOR.match(_string(a) or "")]
        if not literal:
            return []
        found = []
        for _, target in targets:
            if isinstance(target, ast.ClassDef):
                target = next((n for n in target.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
                              None)
            if not isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            params = [a.arg for a in target.args.posonlyargs + target.args.args]
            if params[:1] in (["self"], ["cls"]):
                params = params[1:]
            found += [node.args[i] for i in literal if i < len(params) and "device" in params[i].lower()]
        return found

    def _check_load(self, node: ast.Call, name: str) -> None:
        """DEV003/DEV004: a load must say where tensors go and refuse arbitrary pickles.

        `**kwargs` hides what the caller passes, but not what this call or its function forces:
        a wrapper that passes `weights_only=False` (or sets it in the options it forwards) is reported."""
        forwarded = _keyword(node, None) is not None
        path = self.facts.opened(node, node.args[0]) if node.args else None
        key = self.facts._path_key(path) if path is not None else ""
        same_process = path is not None and (
            self.facts.saved_on_cpu_here(path, node) or self.facts.saves_in_function(node)
            or self.facts.sibling_cpu_saved(key) or key in self.facts.project.cpu_saved_files
            or self.facts.in_data_set(node) or self.facts.test_local(path)
            or self.facts.project.saves_no_tensors(key))
        location = node.args[1] if len(node.args) > 1 else getattr(_keyword(node, "map_location"), "value", None)
        if not forwarded and (location is None or self.facts.none_parameter(node, location)) and not same_process \
                and not self.known():  # where CUDA exists, a GPU checkpoint loads
            self.report(node, "DEV003", name if name != "torch.load" else "")
        if name != "torch.load" or self.safe_globals:
            return  # torch.jit.load runs no pickle; safe_globals means the allow-list was chosen
        weights_only = _keyword(node, "weights_only")
        objects = self.facts.pickled_objects
        advice = f"; the checkpoint pickles {', '.join(objects)}: save plain values" if objects else ""
        if _false(weights_only) or (forwarded and weights_only is None and self.facts.forces_unsafe(node)):
            self.report(node, "DEV004", "weights_only=False" + advice)
        elif weights_only is None and not forwarded and not (path is not None and self.facts.own_file(path)) \
                and not (path is not None and (self.facts.saves_in_function(node) or self.facts.test_local(path))) \
                and not self.facts.ships(path):
            self.report(node, "DEV004", "not given" + advice)

    def _check_factory(self, node: ast.Call, name: str) -> None:
        """DEV007 unless the tensor is moved (now or later), given a device, 0-dim, or only used on the host."""
        if id(node) in self.moved or _keyword(node, "device") or _keyword(node, None) or _scalar(node, name):
            return
        if not _host_only(node, self.facts):
            self.report(node, "DEV007", f"{name}() is created on the CPU")


_NO_TENSOR_CALLS = {"vars", "get_rng_state", "getstate", "get_state", "item", "tolist", "cpu", "str", "int", "float",
                    "len", "round", "time", "dict", "list", "numpy"}


def _no_tensors(facts: _FileFacts, value: ast.AST, at: ast.AST, depth: int) -> bool:
    """A saved value that holds no device tensors: constants, a config object (`args`, `vars(args)`), CPU random
    states, host values (`.item()`, `.cpu()`), and dicts, lists and names bound to those (in the function)."""
    if isinstance(value, ast.Constant):
        return True
    if isinstance(value, ast.Dict):
        return all(_no_tensors(facts, v, at, depth) for v in value.values)
    if isinstance(value, (ast.List, ast.Tuple)):
        return all(_no_tensors(facts, v, at, depth) for v in value.elts)
    if isinstance(value, ast.Call):
        return _last(value) in _NO_TENSOR_CALLS and "cuda" not in _dotted(value.func)
    if isinstance(value, ast.Attribute):
        return value.attr.lower() in _OBJECT_NAMES
    if isinstance(value, ast.Name):
        if value.id.lower() in _OBJECT_NAMES:
            return True
        function = facts._function_of(at)
        bound = [n for n in facts.walk(function) if isinstance(n, ast.Assign) and n.lineno < at.lineno and
                 any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)]
        return depth > 0 and len(bound) == 1 and _no_tensors(facts, bound[0].value, bound[0], depth - 1)
    return False


_COPIES = {"shutil.copyfile", "shutil.copy", "shutil.copy2"}


def _attribute_key(path: ast.AST) -> str:
    """A path held in an attribute, known by the attribute's name (`self.best_path`, `args.save_path`: the same
    setting read through another object), unless a file name in it says more."""
    return f"attribute {path.attr}" if isinstance(path, ast.Attribute) else ""


def _passed(call: ast.Call, function: ast.AST, names: Iterable[str]) -> list[ast.AST]:
    """The arguments a call gives the named parameters of a function (a class: its __init__/__call__), by
    keyword or position (`self`/`cls` not passed when the call names a method on an object)."""
    if isinstance(function, ast.ClassDef):
        function = next((n for n in function.body if isinstance(n, ast.FunctionDef) and n.name == "__call__"), None)
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or not names:
        return []
    params = [a.arg for a in function.args.posonlyargs + function.args.args]
    if params[:1] in (["self"], ["cls"]) and isinstance(call.func, ast.Attribute):
        params = params[1:]
    found = []
    for name in names:
        keyword = _keyword(call, name)
        if keyword is not None:
            found.append(keyword.value)
        elif name in params and params.index(name) < len(call.args) and \
                not any(isinstance(a, ast.Starred) for a in call.args[:params.index(name) + 1]):
            found.append(call.args[params.index(name)])
    return found


def _checked_nodes(checker: type, facts: _FileFacts) -> set[ast.AST]:
    """The nodes whose subtree holds one the checker acts on: a node of a type it has a visitor for or asks
    about after visiting, or a `torch.cuda.*Tensor` attribute (no other attribute, name or constant has a rule)."""
    acted_on = {kind for kind in facts.kinds if hasattr(checker, "visit_" + kind.__name__)} | _MAY_ESTABLISH
    acted_on -= {ast.Attribute, ast.Constant}
    found: set[ast.AST] = set()
    parents = facts.parents
    starts = [node for kind in acted_on for node in facts.kinds.get(kind, ())]
    starts += [node for node in facts.kinds.get(ast.Attribute, ()) if node.attr.endswith("Tensor")]  # _TYPED_CUDA
    for node in starts:
        while node is not None and node not in found:  # up to the root, or to a node already found
            found.add(node)
            node = parents.get(node)
    return found


def _lookup_default(call: ast.Call) -> list[ast.AST]:
    """The fallback of a device lookup: `getattr(args, "device", "cuda")`, `cfg.get("device", "cuda")`, getenv."""
    name = _last(call)
    key_at = 1 if name == "getattr" else 0 if name in ("get", "pop", "setdefault", "getenv") else None
    key = (_string(call.args[key_at]) or "").lower() if key_at is not None and len(call.args) > key_at + 1 else ""
    if "device" not in key or key.endswith("type"):
        return []
    return [call.args[key_at + 1]]


def _collective(call: ast.Call) -> bool:
    """A torch.distributed collective (`dist.all_reduce(x)`): a process group exists.

    So does a `DistributedSampler(dataset)` not told its replicas and rank: it asks the default group."""
    last = _last(call)
    if last == "DistributedSampler":
        told = len(call.args) >= 3 or _keyword(call, "num_replicas") and _keyword(call, "rank")
        return not told and _keyword(call, None) is None
    return last in _COLLECTIVES and _dotted(call.func).startswith(("dist.", "torch.distributed."))


def _stored(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """A value that is saved, put in a container, returned or stored in an attribute, not only read or checked."""
    parent = parents.get(node)
    if isinstance(parent, ast.Call):
        return node is not parent.func and ("save" in _last(parent).lower() or _last(parent) == "dict")
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return any(not isinstance(t, ast.Name) for t in targets)
    if isinstance(parent, ast.keyword):
        return _stored(parent, parents)
    return isinstance(parent, (ast.Dict, ast.List, ast.Tuple, ast.Return, ast.Yield))


def _true(keyword: ast.keyword | None) -> bool:
    """`weights_only=True` (a constant true value)."""
    return keyword is not None and isinstance(keyword.value, ast.Constant) and keyword.value.value is True


def _false(keyword: ast.keyword | None) -> bool:
    """`weights_only=False` (a constant false value)."""
    return keyword is not None and isinstance(keyword.value, ast.Constant) and not keyword.value.value


def _scalar(node: ast.Call, name: str) -> bool:
    """A 0-dim tensor (`torch.tensor(0.5)`, `torch.zeros(())`): CPU scalars mix with tensors on any device."""
    first = node.args[0] if node.args else None
    if isinstance(first, ast.UnaryOp):
        first = first.operand
    if name in ("torch.tensor", "torch.scalar_tensor"):
        number = isinstance(first, ast.Constant) and isinstance(first.value, (int, float, bool))
        return number or _last(first) in ("item", "float", "int") if first is not None else False
    return name in ("torch.zeros", "torch.ones", "torch.empty", "torch.full") and \
        isinstance(first, (ast.Tuple, ast.List)) and not first.elts


def _naming_use(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """A device value that places nothing: compared, used as a key or index, formatted, printed, given as a type."""
    parent = parents.get(node)
    while isinstance(parent, ast.Tuple):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, (ast.Compare, ast.FormattedValue)):
        return True
    if isinstance(parent, ast.Subscript) and parent.slice is node:
        return True
    if isinstance(parent, ast.Dict) and node in parent.keys:
        return True
    if isinstance(parent, ast.keyword):
        return parent.arg == "device_type" or _last(parents.get(parent)) in _TYPE_ONLY
    if isinstance(parent, ast.BinOp) and any(_string(side) is not None for side in (parent.left, parent.right)):
        return True  # "torch." + name + ".FloatTensor", "%s" % name: a string is built, nothing is placed
    return isinstance(parent, ast.Call) and node is not parent.func and \
        _last(parent) in _TYPE_ONLY | {"print", "str", "format"}


def _type_test(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """A type used only to test one: `isinstance(x, torch.cuda.FloatTensor)`, `type(x) == torch.cuda.LongTensor`."""
    parent = parents.get(node)
    while isinstance(parent, ast.Tuple):
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.Compare):
        return True
    return isinstance(parent, ast.Call) and _last(parent) in ("isinstance", "issubclass") and node in parent.args[1:]


def _names_only(target: ast.AST, facts: _FileFacts, function: ast.AST | None = None) -> bool:
    """`amp_device = "cuda"` in a function whose every later use only names the backend (autocast, a comparison)."""
    uses = _name_loads(target, facts, function)
    return bool(uses) and all(_naming_use(use, facts.parents) for use in uses)


def _name_loads(target: ast.AST, facts: _FileFacts, function: ast.AST | None = None) -> list[ast.Name] | None:
    """The reads of a bound name in its function (the file, for a module-level name); None where they cannot all
    be seen: not a plain name, or a module-level name other checked files mention."""
    if not isinstance(target, ast.Name):
        return None
    parents = facts.parents
    function = function or target
    while function in parents and not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        function = parents[function]
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # a module-level name: other checked files may read it too (then it may place tensors there)
        if any(other is not facts and other.mentions[target.id] for other in facts.project.files.values() if other):
            return None
        function = facts.tree
    return [n for n in (facts.kinds.get(ast.Name, []) if function is facts.tree else facts.walk(function))
            if isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Load)]


def _unread_binding(node: ast.AST, facts: _FileFacts) -> bool:
    """`long_dtype = torch.cuda.LongTensor` where nothing reads `long_dtype`: a type bound and never used makes
    no tensor (sg2im's `check_model`), as an unused parameter's default places nothing."""
    parent = facts.parents.get(node)
    if not isinstance(parent, ast.Assign) or parent.value is not node:
        return False
    return all(_name_loads(target, facts) == [] for target in parent.targets)


def _tested_parameter(test: ast.AST) -> str:
    """The one name a test reads, in a shape `_decide` can evaluate: `p`, `not p`, `p == "x"`, `p is None`,
    `p.endswith(".pth")`; "" otherwise."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant) \
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
        test = test.left
    elif isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr in (
            "endswith", "startswith") and len(test.args) == 1 and isinstance(test.args[0], ast.Constant):
        test = test.func.value
    return test.id if type(test) is ast.Name else ""


def _decide(test: ast.AST, value: object) -> bool | None:
    """The test's outcome with its parameter (see `_tested_parameter`) set to `value`; None if it cannot tell."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _decide(test.operand, value)
        return None if inner is None else not inner
    if isinstance(test, ast.Compare):
        other, op = test.comparators[0].value, test.ops[0]
        return {ast.Eq: value == other, ast.NotEq: value != other, ast.Is: value is other,
                ast.IsNot: value is not other}[type(op)]
    if isinstance(test, ast.Call):
        suffix = test.args[0].value
        if not (isinstance(value, str) and isinstance(suffix, (str, tuple))):
            return None
        return value.endswith(suffix) if test.func.attr == "endswith" else value.startswith(suffix)
    return bool(value)


def _exits(statement: ast.stmt) -> bool:
    """A statement that leaves the block: return, raise, continue, break, sys.exit()/exit()."""
    if isinstance(statement, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        return True
    return isinstance(statement, ast.Expr) and _last(statement.value) in ("exit", "quit", "_exit", "skip", "skipTest")


def _host_only(node: ast.AST, facts: _FileFacts) -> bool:
    """Whether a tensor (maybe wrapped in more torch calls) feeds only host-side bookkeeping."""
    parents = facts.parents
    holder = parents.get(node)
    if isinstance(holder, ast.Tuple) and isinstance(parents.get(holder), ast.Subscript):
        return parents[holder].slice is holder  # x[:, torch.arange(n)]: a CPU index works on any device
    while isinstance(parents.get(node), (ast.Call, ast.Subscript, ast.Attribute, ast.keyword)):
        parent = parents[node]
        if isinstance(parent, ast.Attribute) and parent.attr in _HOST_USES:
            return True
        if isinstance(parent, ast.Subscript) and parent.slice is node:
            return True  # a CPU index tensor may index a tensor on any device
        if isinstance(parent, ast.Call) and node is not parent.func and not _dotted(parent.func).startswith("torch."):
            return _host_call(parent)
        node = parent
    assign = parents.get(node)
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)):
        return False
    function = assign
    while function in parents and not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        function = parents[function]
    uses = [n for n in facts.walk(function) if isinstance(n, ast.Name) and n.id == assign.targets[0].id
            and isinstance(n.ctx, ast.Load)]
    return bool(uses) and (all(_host_use(use, parents) for use in uses) or any(_moved_use(u, parents) for u in uses))


def _host_call(call: ast.Call) -> bool:
    """A call that takes values to the host: len(), print(), a logger, numpy."""
    return _last(call) in _HOST_USES or _dotted(call.func).startswith(("np.", "numpy.", "math."))


def _host_use(name: ast.Name, parents: dict[ast.AST, ast.AST]) -> bool:
    """A use that reads values on the host: loop over it, index or slice with it, .item()/.tolist(), len(), numpy."""
    parent = parents.get(name)
    if isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is name:
        return True
    if isinstance(parent, ast.Slice) or (isinstance(parent, ast.Attribute) and parent.attr in _HOST_USES):
        return True
    if isinstance(parent, ast.Tuple) and isinstance(parents.get(parent), ast.Subscript):
        parent, name = parents[parent], parent  # x[i, idx]
    if isinstance(parent, ast.Subscript) and parent.slice is name:
        return True
    return isinstance(parent, ast.Call) and name is not parent.func and _host_call(parent)


def _moved_use(name: ast.Name, parents: dict[ast.AST, ast.AST]) -> bool:
    """A later use that puts the tensor on a device: `t.to(x.device)`, `return t.cuda()`, `to_device(t, d)`."""
    parent = parents.get(name)
    if isinstance(parent, ast.Attribute) and parent.attr in ("to", "cuda", "type_as"):
        call = parents.get(parent)
        dtype_only = bool(call.args) and all(_DTYPE.match(_dotted(a)) for a in call.args) if call else False
        moves = parent.attr != "to" or bool(call.args or call.keywords)
        return isinstance(call, ast.Call) and moves and not dtype_only
    return isinstance(parent, ast.Call) and name is not parent.func and \
        any(m in _last(parent).lower() for m in _MOVERS) and _last(parent) not in ("to", "cuda")


def _ignored(source: str) -> dict[int, set[str] | None]:
    """Line -> codes silenced there by `# devicelint: ignore[...]` (None: every code)."""
    silenced: dict[int, set[str] | None] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            match = _IGNORE.search(token.string) if token.type == tokenize.COMMENT else None
            if match:
                codes = match.group(1)
                silenced[token.start[0]] = None if codes is None else \
                    {c.strip().upper() for c in codes.split(",") if c.strip()}
    except (tokenize.TokenError, SyntaxError):
        pass  # the AST parsed, so this is an edge case; lint without the comments
    return silenced


def _marked_device_module(source: str) -> bool:
    """Whether a comment line says `# devicelint: device-module` (the file names devices on purpose)."""
    if not (_DEVICE_MARK.search(source) and _DEVICE_MODULE.search(source)):  # most files: the first says no
        return False
    try:  # a comment, not the same text inside a string
        return any(t.type == tokenize.COMMENT and _DEVICE_MODULE.match(t.string) and t.line.lstrip().startswith("#")
                   for t in tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return False


def _matches(path: Path | str, patterns: Iterable[str]) -> bool:
    """Whether a path matches a name (`config.py`), a path suffix (`src/setup.py`) or a glob (`tests/*`)."""
    text = Path(path).as_posix()
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        if any(fnmatch.fnmatch(text, p) for p in (pattern, f"*/{pattern}", f"{pattern}/*", f"*/{pattern}/*")):
            return True
    return False


def lint_source(source: str, filename: str = "<string>", select: Iterable[str] | None = None,
                ignore: Iterable[str] = (), allow_devices_in: Iterable[str] = DEVICE_MODULES,
                porting: bool = False) -> list[Finding]:
    """Lint one module's text; DEV000 (syntax error) is reported whatever select/ignore say."""
    errors: list[str] = []
    findings = lint_sources([(filename, source)], errors, select, ignore, allow_devices_in, porting, from_disk=False)
    if errors:
        raise LintError(errors[0].split(": error: ", 1)[-1])
    return findings


def lint_sources(sources: Iterable[tuple[str, str]], errors: list[str] | None = None,
                 select: Iterable[str] | None = None, ignore: Iterable[str] = (),
                 allow_devices_in: Iterable[str] = DEVICE_MODULES, porting: bool = False,
                 roots: Iterable[str] = (), from_disk: bool = True) -> list[Finding]:
    """Lint modules together, (filename, text) each: calls between them are followed.

    A function whose every caller in these files runs only where CUDA exists is CUDA-only too;
    `porting` turns the opt-in rules on and reports CUDA-only code as well. Imports are followed into
    other files under `roots` (default: the project around each file: pyproject.toml, setup.py or .git).
    `from_disk`: the texts are the files' contents, so their pyproject.toml may turn porting on."""
    for cache in (_in_package, _is_package, _project_root, _pyproject_patterns, _sibling_saves, _listing,
                  _realpath):
        cache.cache_clear()  # files may have changed since the last call in this process
    enabled = gc.isenabled()
    gc.disable()  # every tree stays alive until the end: the collector would rescan them all, again and again
    try:
        return _lint_sources(list(sources), [] if errors is None else errors, select, ignore, allow_devices_in,
                             porting, roots, from_disk)
    finally:
        if enabled:
            gc.enable()


def _lint_sources(sources: list[tuple[str, str]], errors: list[str], select: Iterable[str] | None,
                  ignore: Iterable[str], allow_devices_in: Iterable[str], porting: bool,
                  roots: Iterable[str], from_disk: bool) -> list[Finding]:
    """lint_sources() with the collector off."""
    project, parsed, findings = _Project(), [], []
    project.roots = {_realpath(r) for r in roots} or \
        {_project_root(os.path.dirname(_realpath(f))) for f, _ in sources if os.path.isfile(f)}
    for filename, source in sources:
        try:
            facts = _FileFacts(_parse(source, filename), filename, project)
        except (SyntaxError, ValueError) as error:  # null bytes: ValueError on Python 3.10, SyntaxError on 3.11.7+
            if "null bytes" in str(getattr(error, "msg", error)):
                errors.append(f"{filename}: error: contains null bytes; not a Python source file")
            else:
                # a file that does not parse may still hold hazards (Python 2 code): say it went unchecked
                python2 = " (Python 2 code?)" if re.match(r"Missing parentheses in call to '(print|exec)'",
                                                          error.msg or "") else ""
                findings.append(Finding(filename, error.lineno or 1, error.offset or 1, "DEV000",
                                        f"{error.msg}; nothing in this file was checked{python2}"))
            continue
        except (RecursionError, MemoryError):
            errors.append(f"{filename}: error: nested too deeply to check")
            continue
        if os.path.isfile(filename):
            folder, me = os.path.dirname(os.path.abspath(filename)), os.path.basename(filename)
            facts.sibling_cpu_saved = lambda key, folder=folder, me=me: key in _sibling_cpu_saves(folder, me)
            facts.sibling_saved = lambda key, folder=folder, me=me: key in _sibling_cpu_saves(folder, me, cpu=False)
        project.add(filename, facts)
        parsed.append((filename, source, facts))
    checked = []
    for filename, source, facts in parsed:
        allowed = _matches(filename, allow_devices_in) or _allowed_by_pyproject(filename) or \
            _marked_device_module(source)
        facts.porting = porting or (from_disk and _porting_by_pyproject(filename))
        checker = _Checker(filename, allowed, facts, facts.porting)
        try:
            checker.visit(facts.tree)
        except (RecursionError, MemoryError):
            errors.append(f"{filename}: error: nested too deeply to check")
            continue
        checked.append((source, facts, checker.findings))
    _wrapped_saves(project, {id(facts): found for _, facts, found in checked})
    functions = [(facts, node) for _, facts, _ in checked for nodes in facts.defs.values() for node in nodes
                 if not isinstance(node, ast.ClassDef)]
    hidden = project.cuda_only(functions)
    broken = _broken_imports(project, [facts for _, facts, _ in checked])
    unreached = _unreached(project, functions, [facts for _, facts, _ in checked], broken)
    chosen = {True: _chosen(select, ignore, True), False: _chosen(select, ignore, False)}
    uncalled = {id(node): node.name for _, node in functions if id(node) not in project.reached}
    hidden |= _nccl_scripts([facts for _, facts, _ in checked])
    return sorted(set(findings) | _kept(checked, hidden, unreached, chosen, uncalled, broken))


def _parse(source: str, filename: str) -> ast.Module:
    """ast.parse; a file that fails only on mixing tabs and spaces in its indentation (TabError) is read again with
    each line's leading tabs expanded to columns of 8, as Python 2, which such files were written for, read them:
    it is checked rather than reported unchecked (PSMNet's finetune.py). So is a file that uses `async`/`await` as
    names, with them renamed (Real-time-GesRec's `.cuda(async=True)`). Line numbers are unchanged."""
    try:
        return ast.parse(source, filename)
    except TabError:
        lines = source.splitlines(keepends=True)
        expanded = "".join(_INDENT.sub(lambda m: m.group(0).expandtabs(8), line, count=1) for line in lines)
        return ast.parse(expanded, filename)
    except SyntaxError:
        if not _OLD_KEYWORDS.search(source):
            raise
        renamed = _OLD_KEYWORDS.sub(lambda m: m.group(0) + "_", source)
    try:  # written before Python 3.7 made them keywords (`.cuda(async=True)`): checked with them renamed
        return ast.parse(renamed, filename)
    except SyntaxError:
        return ast.parse(source, filename)  # another error: report the file's own


_INDENT = re.compile(r"\A[ \t]+")
# `async`/`await` used as names: an attribute, a keyword argument or parameter, an assignment's target
_OLD_KEYWORDS = re.compile(r"(?<=\.)\s*(?:async|await)\b|\b(?:async|await)\b(?=\s*(?:=(?!=)|[,).\]:]))")


def _per_gpu_launch(facts: _FileFacts, call: ast.Call, function: ast.AST) -> bool:
    """`mp.spawn(work, nprocs=torch.cuda.device_count())`, or `Process(target=work)` in a loop over `range(n_gpus)`
    of `n_gpus = torch.cuda.device_count()`: one process per visible GPU, so `work` never runs without one."""
    name = _last(call)
    if name == "spawn" and call.args and call.args[0] is function:
        count = _keyword(call, "nprocs")
        return _gpu_count(count.value if count else call.args[2] if len(call.args) > 2 else None, facts)
    if name != "Process" or getattr(_keyword(call, "target"), "value", None) is not function:
        return False
    node = facts.parents.get(call)
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and _last(node.iter) == "range" and \
                len(node.iter.args) == 1 and _gpu_count(node.iter.args[0], facts):
            return True
        node = facts.parents.get(node)
    return False


def _gpu_count(node: ast.AST | None, facts: _FileFacts) -> bool:
    """`torch.cuda.device_count()`, or a name its scope binds to nothing else (no parameter, no other store)."""
    if isinstance(node, ast.Call):
        return _dotted(node.func).endswith("cuda.device_count")
    if type(node) is not ast.Name:
        return False
    scope = facts.parents.get(node)
    while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        scope = facts.parents.get(scope)
    scope = scope or facts.tree
    stores = [n for n in facts.walk(scope) if type(n) is ast.Name and n.id == node.id and type(n.ctx) is ast.Store]
    params = {a.arg for a in ast.walk(scope.args) if isinstance(a, ast.arg)} if hasattr(scope, "args") else set()
    if not stores or node.id in params:
        return False
    binds = [facts.parents.get(n) for n in stores]
    return all(isinstance(b, ast.Assign) and len(b.targets) == 1 and b.targets[0] in stores and
               isinstance(b.value, ast.Call) and _gpu_count(b.value, facts) for b in binds)


def _nccl_scripts(files: list[_FileFacts]) -> set[int]:
    """id(facts.tree) of scripts whose `__main__` block starts NCCL and that no checked file's import can name
    (by a tail of its dotted path): their top level runs only as that script, so only where CUDA is."""
    spelled: set[tuple[str, ...]] = set()
    for facts in files:
        for node in facts.kinds.get(ast.Import, []):
            spelled.update(tuple(a.name.split(".")[:i]) for a in node.names for i in range(1, a.name.count(".") + 2))
        for node in facts.kinds.get(ast.ImportFrom, []):
            module = tuple(node.module.split(".")) if node.module else ()
            spelled.update((*module, a.name) for a in node.names)
            spelled.update(module[:i] for i in range(1, len(module) + 1))
    found = set()
    for facts in files:
        mains = [n for n in facts.tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Compare)
                 and _dotted(n.test.left) == "__name__"]
        parts = tuple(Path(facts.path).with_suffix("").parts)
        if any(facts.starts_nccl(m.body) for m in mains) and \
                not any(parts[-i:] in spelled for i in range(1, len(parts) + 1)):
            found.add(id(facts.tree))
    return found


def _wrapped_saves(project: _Project, found: dict[int, list]) -> None:
    """DEV009 where a function saves `param.state_dict()` of a parameter some caller passes a DP/DDP wrapper
    (`model = DataParallel(m); train(args, model)`), unless the function rebinds or tests that parameter."""
    for facts, function, names in project.wrapped_params.values():
        if id(facts) not in found:
            continue
        inside = facts.walk(function)
        # rebound (`model = model.module`) or tested (`isinstance(model, DataParallel)`): not judged here
        unwrapped = _rebound(facts, inside, names) | \
            {n.args[0].id for n in inside if isinstance(n, ast.Call) and _last(n) == "isinstance" and n.args and
             isinstance(n.args[0], ast.Name)}
        checker = _Checker(facts.path, False, facts)
        for call in inside:
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "state_dict" \
                    and isinstance(call.func.value, ast.Name) and call.func.value.id in names - unwrapped \
                    and checker._kept(call):
                chain, node = [], call
                while node is not None:
                    node = facts.parents.get(node)
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        chain.insert(0, id(node))
                finding = Finding(facts.path, call.lineno, call.col_offset + 1, "DEV009",
                                  f"{call.func.value.id} is passed a DataParallel/DDP wrapper by a caller")
                found[id(facts)].append((finding, tuple(chain)))


def _rebound(facts: _FileFacts, inside: list[ast.AST], names: set[str]) -> set[str]:
    """The names a function stores to other than as the wrapper they hold: `model = model.module` unwraps (so
    does any other store), `model = model.eval()` or `model.cuda()` keeps the wrapper (`_wraps`), as a caller's
    own rebinding does."""
    found = set()
    for node in inside:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            assign = facts.parents.get(node)
            kept = isinstance(assign, ast.Assign) and node in assign.targets and node.id in names and \
                _wraps(assign.value, {node.id})
            if not kept:
                found.add(node.id)
    return found


def _broken_imports(project: _Project, files: list[_FileFacts]) -> dict[int, int]:
    """Files that stop at a top-level import of a module the repository lacks: id(facts) -> that import's line.

    Only where the repository shows the module was its own: `from csml import CSML` (not a package's
    `from nets.mobilenet import ...`) where no checked file or
    folder is named `csml`, the standard library has none, no other checked file imports it, and a checked
    file defines `CSML` (a module renamed since; a third-party package's names are not the repository's)."""
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    held: set[str] = set()
    for facts in files:
        parts = Path(facts.path).with_suffix("").parts
        held.update(parts[-4:])
    defined = {n.name for f in files for n in f.defs_at_top()}
    importers: Counter[str] = Counter()
    for facts in files:
        importers.update({m.split(".")[0] for m, _, level in facts.imports.values() if not level and m})
    broken = {}
    for facts in files:
        for node in facts.tree.body:  # unguarded: not inside try/except ImportError or an if
            if isinstance(node, ast.ImportFrom) and not node.level and node.module and "." not in node.module:
                head = node.module.split(".")[0]
                if head in held or head in stdlib or importers[head] > 1 or \
                        project.module(facts, node.module, 0) is not None:
                    continue
                if any(alias.name in defined for alias in node.names):
                    broken[id(facts)] = node.lineno
                    break
    return broken


def _unreached(project: _Project, functions: list[tuple[_FileFacts, ast.AST]], files: list[_FileFacts],
               broken: dict[int, int] | None = None) -> set[int]:
    """Definitions nothing in the checked files names (a call, a reference, a string), so nothing reaches them.

    Private helpers (`_name`) always; in an application (no pyproject [project] or setup.py around it,
    so no user of an installed package calls in), also module-level functions and classes, unless they
    are decorated (registered), named like tests, in hubconf.py, or reachable by an eval of the module's names.
    A file that stops at an import of a module the repository lacks (`broken`) names nothing."""
    # counted in one go: Counter.update(another Counter) adds key by key in Python, once per file
    mentioned = Counter(itertools.chain.from_iterable(facts.mentions.elements() for facts in files
                                                      if id(facts) not in (broken or {})))
    # an eval of names reaches its own module's definitions, and what that module imports
    dynamic = set().union(*(f.dynamic_names - {n.name for n in f.defs_at_top()} for f in files))
    definers: dict[str, list[_FileFacts]] = {}  # name -> the files that define it at their top level
    for f in files:
        for name in f.scopes.get(f.tree, {}) if id(f) not in (broken or {}) else ():
            definers.setdefault(name, []).append(f)
    plugins = _plugin_prefixes(files)
    candidates = []
    for facts, node in functions + [(f, n) for f in files for n in f.defs_at_top() if isinstance(n, ast.ClassDef)]:
        registered = any(_last(d) not in _WRAPPERS_ONLY for d in node.decorator_list)  # `@torch.no_grad()` wraps
        if node.name in dynamic or node.name in facts.dynamic_names or registered or node.name.endswith("__"):
            continue
        private = node.name.startswith("_")
        if not private and (facts.parents.get(node) is not facts.tree or project.library_at(facts.path) or
                            node.name.lower().startswith(("pytest_", "setup", "teardown")) or
                            node.name.lower().startswith("test") and _collected(facts) or
                            os.path.basename(facts.path) in ("hubconf.py", "conftest.py", "setup.py") or
                            _imported_by_name(facts, plugins)):
            continue
        candidates.append((facts, node))
    found: set[int] = set()
    dead: dict[int, Counter[str]] = {}  # per file: what its unreached code mentions (already out of `mentioned`)
    pending = candidates
    while pending:  # what only unreached code names is unreached too (a helper only a dead class calls)
        new = []
        for facts, node in pending:
            # another file's bare `fliplr(...)` means its own fliplr when it defines one and does not import it;
            # its reads inside its unreached code were taken off `mentioned` already, so they are not taken twice
            count = mentioned[node.name] - sum(
                max(0, other.name_reads[node.name] - dead.get(id(other), Counter())[node.name])
                for other in definers.get(node.name, ()) if other is not facts and node.name not in other.imports)
            if count <= 0 or count <= 2 and count <= _mentions_inside(facts, node)[node.name]:  # `super(Name, self)`
                new.append((facts, node))
        dropped: set[str] = set()
        for facts, node in new:
            found.add(id(node))
            inside = _mentions_inside(facts, node)
            mentioned.subtract(inside)
            dead.setdefault(id(facts), Counter()).update(inside)
            dropped.update(inside)
        pending = [(f, n) for f, n in candidates if n.name in dropped and id(n) not in found]
    return found


def _collected(facts: _FileFacts) -> bool:
    """Whether a test runner calls this file's `test*` functions: pytest collects `test_*.py`, `*_test.py`,
    `conftest.py` (and files under a `tests` folder), unittest runs a file that imports it. Elsewhere a
    `test_epoch()` is an ordinary function, reached only by its calls."""
    return facts.is_test or "unittest" in facts.imports or \
        any(a.name.split(".")[0] == "unittest" for n in facts.kinds.get(ast.Import, []) for a in n.names) or \
        any((n.module or "").split(".")[0] == "unittest" for n in facts.kinds.get(ast.ImportFrom, []))


def _plugin_prefixes(files: list[_FileFacts]) -> set[str]:
    """Dotted module prefixes an `importlib.import_module(prefix + name)` (or `__import__`) with a computed name
    loads from: `"models." + opt.model + "_model"` -> "models.". Such a registry finds its classes through the
    module's namespace (`getattr(lib, name)`, `lib.__dict__`), so nothing names them."""
    found: set[str] = set()
    for facts in files:
        for call in facts.calls:
            if _last(call) not in ("import_module", "__import__") or not call.args or \
                    isinstance(call.args[0], ast.Constant):
                continue
            arg = call.args[0]
            if isinstance(arg, ast.Name):  # `name = "models." + opt.model; import_module(name)`
                scope = facts._function_of(call)
                values = [n.value for n in facts.walk(scope) if isinstance(n, ast.Assign) and
                          any(isinstance(t, ast.Name) and t.id == arg.id for t in n.targets)]
                arg = values[0] if len(values) == 1 else arg
            while isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add):
                arg = arg.left
            if isinstance(arg, ast.JoinedStr) and arg.values:
                arg = arg.values[0]
            elif isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "format":
                arg = arg.func.value
            prefix = _string(arg) or ""
            prefix = prefix.split("{")[0].split("%")[0]
            if "." in prefix:  # a package named: `models.` (a bare name prefix would match too much)
                found.add(prefix[:prefix.rindex(".") + 1])
    return found


def _imported_by_name(facts: _FileFacts, prefixes: set[str]) -> bool:
    """Whether the file's module path (any tail of it: `models.pix2pix_model`) starts with a plugin prefix."""
    if not prefixes:
        return False
    parts = Path(facts.path).with_suffix("").parts
    dotted = [".".join(parts[i:]) + "." for i in range(len(parts))]
    return any(d.startswith(p) for d in dotted for p in prefixes)


def _builds_cuda_extension(facts: _FileFacts) -> bool:
    """A build script for a CUDA extension: CUDAExtension(...), or an extension with .cu sources or with_cuda."""
    builders = [c for c in facts.calls if _last(c) in ("CUDAExtension", "create_extension", "load", "setup")]
    if not builders:
        return False
    cuda_sources = any(type(n.value) is str and re.search(r"\.cu(\.o)?\Z", n.value)
                       for n in facts.kinds.get(ast.Constant, []))
    return any(_last(c) == "CUDAExtension" for c in builders) or cuda_sources and \
        any(_last(c) in ("create_extension", "load") for c in builders)


def _names_read(kinds: dict[type, list[ast.AST]]) -> list[str]:
    """The ids of the names read (not bound), once per occurrence."""
    load = ast.Load  # the context is always this class itself, never a subclass
    return [n.id for n in kinds.get(ast.Name, []) if type(n.ctx) is load]


def _mentions(kinds: dict[type, list[ast.AST]], read: list[str] | None = None) -> list[str]:
    """Every name read (a Name, an attribute) or spelt as an identifier string, once per occurrence; `read`: the
    names read, when already known."""
    return (_names_read(kinds) if read is None else read) + \
        [n.attr for n in kinds.get(ast.Attribute, [])] + [n.name for n in kinds.get(ast.alias, [])] + \
        [n.value for n in kinds.get(ast.Constant, []) if type(n.value) is str and n.value.isidentifier()]


def _mentions_inside(facts: _FileFacts, node: ast.AST) -> Counter[str]:
    """The mentions within one definition (its own recursive calls and `super(Name, self)`)."""
    kinds: dict[type, list[ast.AST]] = {}
    for item in facts.walk(node):
        kinds.setdefault(type(item), []).append(item)
    return Counter(_mentions(kinds))


def _is_true(node: ast.AST, facts: _FileFacts) -> bool:
    """The constant True."""
    return isinstance(node, ast.Constant) and node.value is True


def _checks(node: ast.AST, facts: _FileFacts) -> bool:
    """An expression with an availability check in it (`torch.cuda.is_available() and not args.cpu`), or a name this
    file binds to one (`use_cuda = torch.cuda.is_available()`, passed on as `Net(cuda=use_cuda)`)."""
    return node in facts.availability_holders or \
        type(node) in (ast.Name, ast.Attribute) and _last(node).lower() in facts.availability_names


def _positional_flags(facts: _FileFacts, call: ast.Call, passes: Callable[[ast.AST, _FileFacts], bool]) -> set[str]:
    """Accelerator-named parameters of the function (or class) this call names that it passes `passes` by position."""
    found: set[str] = set()
    for _, node in facts.project.resolve(facts, call.func):
        if isinstance(node, ast.ClassDef):
            node = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if node is None:
            continue
        params = [a.arg for a in node.args.posonlyargs + node.args.args]
        params = params[1:] if params[:1] in (["self"], ["cls"]) else params
        passed = [params[i].lower() for i, a in enumerate(call.args[:len(params)]) if passes(a, facts)]
        found |= {p for p in passed if _accel_flag(p)}
    return found


@functools.lru_cache(maxsize=8192)
def _realpath(path: str) -> str:
    """os.path.realpath, once per path (it stats every part of the path)."""
    return os.path.realpath(path)


@functools.lru_cache(maxsize=1024)
def _listing(folder: str) -> frozenset[str]:
    """The names in a folder (empty if it cannot be listed)."""
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


@functools.lru_cache(maxsize=256)
def _project_root(folder: str) -> str:
    """The nearest folder at or above this one with pyproject.toml, setup.py or .git (else the folder itself)."""
    here = folder
    for _ in range(8):
        if any(os.path.exists(os.path.join(here, marker)) for marker in ("pyproject.toml", "setup.py", ".git")):
            return here
        if os.path.dirname(here) == here:
            break
        here = os.path.dirname(here)
    return folder


@functools.lru_cache(maxsize=1024)
def _in_package(path: str) -> bool:
    """Whether a file on disk lies in an installable package; sources given as text count as one."""
    return not os.path.isfile(path) or _is_package(_project_root(os.path.dirname(_realpath(path))))


@functools.lru_cache(maxsize=64)
def _is_package(root: str) -> bool:
    """A project folder that installs as a package: its users are callers the lint cannot see."""
    if os.path.isfile(os.path.join(root, "setup.cfg")):
        return True
    if os.path.isfile(os.path.join(root, "setup.py")) and _setup_installs(os.path.join(root, "setup.py")):
        return True
    try:
        text = Path(root, "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    return bool(re.search(r"^\[(project|tool\.poetry)\]", text, re.M))


def _setup_installs(path: str) -> bool:
    """Whether a setup.py installs code: its `setup(...)` names `packages`, `py_modules`, `ext_modules` or
    `package_dir`, or passes `**kwargs` (unknown). `setup(name=..., author=...)` alone (hgraph2graph) installs no
    module, so nobody imports the repository's functions from an installed package. Unreadable: installs."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return True
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _last(n.func) == "setup"]
    return not calls or any(k.arg in (None, "packages", "py_modules", "ext_modules", "package_dir")
                            for c in calls for k in c.keywords) or any(c.args for c in calls)


def _under(path: str, folder: str) -> bool:
    """Whether a file lies inside a folder (after resolving links)."""
    real = _realpath(path)
    return real == folder or real.startswith(folder.rstrip(os.sep) + os.sep)


def _chosen(select: Iterable[str] | None, ignore: Iterable[str], porting: bool) -> set[str]:
    """The codes to report: --select, else the default rules (and the opt-in ones with --porting), less --ignore."""
    chosen = set(select) if select else {code for code, rule in RULES.items() if rule.default or porting}
    return chosen - set(ignore)


def _kept(checked: list, hidden: set[int], unreached: set[int], chosen: dict[bool, set[str]],
          uncalled: dict[int, str], broken: dict[int, int] | None = None) -> set[Finding]:
    """Findings left after unreached code, CUDA-only functions (DEV002 there is DEV011), rule choice, ignores.

    A file linted for porting keeps its CUDA-only findings and takes the opt-in rules too. A finding in a
    function no call was found to (`uncalled`: id -> name) says the lint cannot tell what its callers check."""
    kept: set[Finding] = set()
    for source, facts, found in checked:
        silenced = _ignored(source) if found and _IGNORE.search(source) else {}
        stop = (broken or {}).get(id(facts))
        for finding, chain in found:
            if not facts.porting and (unreached.intersection(chain) or stop is not None and finding.line > stop):
                continue
            if not facts.porting and finding.code in _HIDEABLE and hidden.intersection(chain):
                if finding.code != "DEV002":
                    continue
                finding = finding._replace(code="DEV011")
            inner = next((i for i in reversed(chain) if i in uncalled or i in facts.function_ids), None)
            if finding.code in _HIDEABLE and inner in uncalled:
                note = f"no call to {uncalled[inner]}() was found, so the lint cannot tell whether its callers " \
                       "check for CUDA first"
                finding = finding._replace(detail=f"{finding.detail}; {note}" if finding.detail else note)
            codes = silenced.get(finding.line, set())
            if finding.code in chosen[facts.porting] and codes is not None and finding.code not in codes:
                kept.add(finding)
    return kept


@functools.lru_cache(maxsize=64)
def _sibling_saves(folder: str) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """For each script in a folder that calls torch.save: the paths it saves from CPU, and all it saves."""
    saves: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        file = os.path.join(folder, name)
        if not name.endswith(".py") or not os.path.isfile(file):
            continue
        try:
            text = read_source(Path(file))
            facts = _FileFacts(ast.parse(text)) if "torch.save" in text else None
            saves[name] = (frozenset(facts.cpu_saved), frozenset(facts.saved)) if facts else (frozenset(), frozenset())
        except (LintError, SyntaxError, ValueError, RecursionError):
            continue
    return saves


def _sibling_cpu_saves(folder: str, me: str, cpu: bool = True) -> set[str]:
    """Paths a sibling script (same folder, another file) saves (from CPU: loading them needs no map_location)."""
    return {key for name, keys in _sibling_saves(folder).items() if name != me for key in keys[0 if cpu else 1]}


@functools.lru_cache(maxsize=64)
def _pyproject_patterns(folder: str, key: str = "allow-devices-in") -> tuple[str, tuple[str, ...]]:
    """The nearest pyproject.toml at or above a folder: its folder and a `[tool.devicelint]` list (or ())."""
    here = Path(folder)
    for candidate in (here, *here.parents):
        file = candidate / "pyproject.toml"
        if file.is_file():
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                return "", ()
            section = re.search(r"^\[tool\.devicelint\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
            if section and re.search(rf"^{key}\s*=\s*true\b", section.group(1), re.M):
                return str(candidate), ("true",)  # a boolean setting (`porting = true`)
            value = re.search(rf"^{key}\s*=\s*\[(.*?)\]", section.group(1), re.M | re.S) if section else None
            return str(candidate), tuple(re.findall(r"[\"']([^\"']+)[\"']", value.group(1))) if value else ()
    return "", ()


def _porting_by_pyproject(filename: str) -> bool:
    """Whether the project's pyproject.toml says `porting = true` under [tool.devicelint]."""
    return os.path.isfile(filename) and \
        _pyproject_patterns(os.path.dirname(os.path.abspath(filename)), "porting")[1] == ("true",)


def _allowed_by_pyproject(filename: str) -> bool:
    """Whether the project's pyproject.toml names this file in `[tool.devicelint] allow-devices-in`."""
    if not os.path.isfile(filename):
        return False
    absolute = os.path.abspath(filename)
    root, patterns = _pyproject_patterns(os.path.dirname(absolute))
    return bool(patterns) and _matches(os.path.relpath(absolute, root), patterns)


def python_files(path: Path, exclude: Sequence[str] = ()) -> Iterator[Path]:
    """The *.py files at `path`: itself if a file, else recursively, skipping venvs, build dirs and --exclude."""
    if not path.is_dir():
        yield path  # a file (or a broken link, which the reader reports)
        return
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")
                         and not _matches(Path(root) / d, exclude))
        chosen = (Path(root) / f for f in sorted(files) if f.endswith(".py"))
        yield from (file for file in chosen if not _matches(file, exclude))


def read_source(file: Path) -> str:
    """A file's text, honouring PEP 263 encoding cookies; LintError says why it cannot be read."""
    if file.is_symlink() and not file.exists():
        raise LintError("broken symbolic link")
    try:
        with tokenize.open(file) as handle:
            return handle.read()
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        raise LintError(f"cannot decode as Python source ({error.__class__.__name__}: {error})") from None
    except OSError as error:
        raise LintError(f"cannot read ({error.strerror or error})") from None


def lint_paths(paths: Sequence[str], exclude: Sequence[str] = (), errors: list[str] | None = None,
               checked: list[str] | None = None, **options) -> list[Finding]:
    """Lint each Python file under the paths once, together (a folder of several projects: per project); files
    that cannot be checked go to `errors`, the names of those read to `checked`."""
    errors = [] if errors is None else errors
    sources: list[tuple[str, str]] = []
    seen: set[str] = set()
    for path in paths:
        for file in python_files(Path(path), exclude):
            key = _realpath(file)
            if key in seen:
                continue  # overlapping arguments (`src src/a.py`) check a file once
            seen.add(key)
            try:
                sources.append((str(file), read_source(file)))
            except LintError as error:
                errors.append(f"{file}: error: {error}")
    if checked is not None:
        checked += [name for name, _ in sources]
    roots = [p if os.path.isdir(p) else _project_root(os.path.dirname(_realpath(p))) for p in paths]
    groups = _projects(sources, paths)
    if len(groups) == 1:
        return lint_sources(sources, errors, roots=roots, **options)
    return sorted(f for root, group in groups.items()
                  for f in lint_sources(group, errors, roots=[root] if root else roots, **options))


def _marked(folder: str) -> bool:
    """A folder that is a project's root: it holds pyproject.toml, setup.py or .git."""
    return bool(_listing(folder) & {"pyproject.toml", "setup.py", ".git"})


def _projects(sources: list[tuple[str, str]], paths: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """The sources per project: a folder that is no project (nor inside one) but holds several (each with its
    own pyproject.toml, setup.py or .git) is linted project by project, so that no project's names stand in
    for another's (a name one imports from a third-party package is not the other's definition of it)."""
    loose = [_realpath(p) for p in paths if os.path.isdir(p)]
    loose = [p for p in loose if not _marked(_project_root(p))]
    groups: dict[str, list[tuple[str, str]]] = {}
    for name, source in sources:
        real = _realpath(name)
        holder = next((p for p in loose if _under(real, p)), None)
        root = _project_root(os.path.dirname(real)) if holder else ""
        key = root if holder and root != holder and _under(root, holder) and _marked(root) else holder or ""
        groups.setdefault(key or "", []).append((name, source))
    return groups


def _codes(text: str | None) -> list[str]:
    """Split a `DEV001,DEV002` option into upper-case codes."""
    return [c.strip().upper() for c in (text or "").split(",") if c.strip()]


def build_parser() -> argparse.ArgumentParser:
    """The command line; returned so other tools can reuse it."""
    parser = argparse.ArgumentParser(prog="devicelint", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="files or folders to check (default: pyproject.toml's "
                        "[tool.devicelint] paths, else the project around the current folder)")
    parser.add_argument("--select", help="comma-separated codes to report (default: all rules on by default)")
    parser.add_argument("--ignore", help="comma-separated codes to skip")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="skip files and folders matching this glob or path (repeatable)")
    parser.add_argument("--allow-devices-in", action="append", default=[], metavar="PATTERN",
                        help="a file name, path or glob allowed to hold device strings (repeatable)")
    parser.add_argument("--porting", action="store_true",
                        help="for code becoming device-portable: the opt-in rules too, and CUDA-only code "
                             "(NCCL scripts, CUDA asserted) is reported like any other")
    parser.add_argument("--list-rules", action="store_true", help="print the rules and exit")
    parser.add_argument("--explain", metavar="CODE", help="print why a rule exists and how to fix it")
    return parser


def _summary(findings: list[Finding], checked: int) -> str:
    """One line: how many findings, in how many files, per code; a clean run says how many files it checked."""
    if not findings:
        return f"devicelint: {checked} file{'s' * (checked != 1)} checked, 0 findings"
    counts = Counter(f.code for f in findings)
    per_code = ", ".join(f"{code} x{n}" for code, n in sorted(counts.items()))
    files = len({f.path for f in findings})
    return (f"devicelint: {len(findings)} finding{'s' * (len(findings) != 1)} in {files} "
            f"file{'s' * (files != 1)} ({per_code}); `--explain CODE` shows the fix")


def project_paths(folder: str = ".") -> list[str]:
    """What to lint when no path is given: pyproject's `[tool.devicelint] paths` (globs), else its project.

    A path named there that does not exist is returned as it is, so the usage check reports it."""
    root, patterns = _pyproject_patterns(os.path.abspath(folder), "paths")
    if not root:
        return [folder]
    found: list[str] = []
    for pattern in patterns or ["."]:
        matches = sorted(glob.glob(os.path.join(root, pattern))) if glob.has_magic(pattern) else \
            [os.path.join(root, pattern)]
        found += [os.path.relpath(m) if not os.path.relpath(m).startswith("..") else m for m in matches]
    return found


def _usage_problem(args: argparse.Namespace, select: list[str], ignore: list[str]) -> str:
    """The first thing wrong with the command line, or ''."""
    unknown = sorted(set(select + ignore + _codes(args.explain)) - set(RULES))
    missing = [p for p in args.paths if not os.path.lexists(p)]
    broken = [p for p in args.paths if os.path.lexists(p) and not os.path.exists(p)]
    if unknown:
        return f"unknown rule code(s): {', '.join(unknown)}"
    if missing:
        return f"no such file or directory: {missing[0]}"
    if broken:
        return f"broken symbolic link: {broken[0]}"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the linter: 0 clean, 1 findings, 2 bad command line or a file that could not be checked."""
    args = build_parser().parse_args(argv)
    select, ignore = _codes(args.select), _codes(args.ignore)
    if not args.paths and not (args.list_rules or args.explain):
        args.paths = project_paths()
    problem = _usage_problem(args, select, ignore)
    if problem:
        print(f"devicelint: {problem}", file=sys.stderr)
        return 2
    if args.list_rules or args.explain:
        for rule in RULES.values():
            if args.list_rules:
                off = "" if rule.default else " [off by default; on with --porting]"
                print(f"{rule.code}  {rule.summary}{off} (--explain {rule.code})")
            elif rule.code == args.explain.strip().upper():
                print(f"{rule.code}: {rule.summary}\n\n{rule.hint}")
        return 0
    errors: list[str] = []
    checked: list[str] = []
    findings = lint_paths(args.paths, exclude=args.exclude, errors=errors, checked=checked, select=select or None,
                          ignore=ignore, allow_devices_in=DEVICE_MODULES + tuple(args.allow_devices_in),
                          porting=args.porting)
    for finding in findings:
        print(finding.format())
    if findings or not errors:  # a run that could not check a file is no clean run
        print(_summary(findings, len(checked)))
    for error in errors:
        print(error, file=sys.stderr)
    return 2 if errors else 1 if findings else 0


if __name__ == "__main__":
    gc.disable()  # one run, then exit: its trees go with the process, not through the collector (~15% of the time)
    status = main()
    gc.freeze()  # and not through the collector's pass at exit either
    sys.exit(status)
