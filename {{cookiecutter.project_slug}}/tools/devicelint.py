#!/usr/bin/env python3
"""devicelint: a static checker for PyTorch device anti-patterns (standard library only).

Usage::

    python tools/devicelint.py PATH...            # files or folders (recurses into *.py)
    python tools/devicelint.py --list-rules       # codes and one-line descriptions
    python tools/devicelint.py --explain DEV003   # why a rule exists and how to fix it
    python tools/devicelint.py --select DEV001,DEV003 --exclude 'tests/*' src/

Findings print like any linter, sorted and once each: ``path:line:col: CODE message``, then one
summary line. Exit code 0 means clean, 1 means findings (a file that does not parse is one DEV000
finding), 2 means a bad command line or a file that could not be checked (missing, a broken link,
undecodable, nested too deeply): those print ``path: error: ...`` on stderr.

Silence one line with ``# devicelint: ignore[DEV002]`` (several codes: ``ignore[DEV002,DEV007]``;
a bare ``# devicelint: ignore`` silences every code on that line). The comment must sit on the
line the finding names.

Guards are understood: CUDA-only code (``.cuda()``, ``torch.cuda.FloatTensor``, ``torch.cuda.synchronize()``)
inside ``if torch.cuda.is_available():``, ``if device.type == "cuda":``, ``if use_cuda:`` (any name
with cuda/gpu in it), the ``else`` of a CPU check, after ``if not ...: return`` (or ``pytest.skip``), under
a decorator that skips without CUDA (``@unittest.skipIf(not torch.cuda.is_available(), ...)``,
``@pytest.mark.skipif``, ``@requires_cuda``, a module's ``pytestmark``), or in a block or function that
itself starts NCCL is not reported. A flag set to True with no availability check (``--cuda
default=True``, ``use_gpu=True``) guards nothing. A device string chosen by availability (``"cuda" if
torch.cuda.is_available() else "cpu"``) cannot crash; it is DEV011, off by default. Strings that place
nothing are not reported: an autocast/GradScaler device type, a comparison, a key.

Device strings (DEV002) and CUDA runtime calls (DEV012) are allowed in the project's own device module:
a file with a function that checks availability, whatever its name; name more files with
``--allow-devices-in PATTERN`` (a file name, a path suffix or a glob) or in pyproject.toml::

    [tool.devicelint]
    allow-devices-in = ["mypkg/config.py"]

What counts as a hazard (the labelling policy behind the rules and their measured precision): a line
that fails, or silently misplaces tensors, on a machine without the named accelerator (or loads a
checkpoint saved on another machine's device, or unpickles without ``weights_only``) when that line is
reached; and a checkpoint whose keys carry a wrapper's ``module.`` (DEV009), which a plain model
elsewhere cannot load, even when the project strips the prefix in its own loader. Not hazards: code that
only runs where the accelerator already exists (a guard, a skip decorator, an NCCL process group, a
TensorRT engine); a file loaded in the process that saved it or saved from CPU tensors; CPU tensors that
are 0-dim, moved later, indices, or read on the host; calls that are safe without CUDA (``empty_cache``,
``memory_allocated``, ``manual_seed``).

Some rules are heuristics and say so: DEV006 decides "this is a module" from the variable name,
DEV008 decides "this is a Dataset" from the base-class name, DEV009 follows names bound to
DataParallel/DDP(...) within one file, and DEV007 follows helpers called from forward() within
one file.

To use it elsewhere, copy this one file into the other project and run ``python devicelint.py
PATH...``, or use the pre-commit hook ``devicelint`` from the template repository.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import functools
import io
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
         "It crashes on machines without CUDA and pins device 0. Use .to(device) with a device passed "
         "in as an argument, or put the call under `if torch.cuda.is_available():`."),
    Rule("DEV002", "hard-coded accelerator device",
         "A literal 'cuda'/'mps' (in torch.device(), .to(), device=, a `device = ...` default or an "
         "argparse --device default) fails where that backend is absent. Take the device as a "
         "parameter and decide it once, in config.py/devices.py (or --allow-devices-in)."),
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
         "The tensor is created on the CPU and meets GPU inputs. Pass device=x.device, use "
         "torch.*_like(x) or x.new_*(), or register a buffer. Helpers called from forward() in "
         "the same file count as forward()."),
    Rule("DEV008", "device move inside Dataset.__getitem__",
         "CUDA fails in DataLoader worker processes. Return CPU tensors and move the batch in "
         "the training loop."),
    Rule("DEV009", "state_dict() of a DataParallel/DDP-wrapped model",
         "Its keys carry a 'module.' prefix that an unwrapped model rejects. Save "
         "model.module.state_dict()."),
    Rule("DEV010", "legacy CUDA tensor type outside a CUDA guard",
         "torch.cuda.FloatTensor and friends crash without CUDA. Use torch.tensor(..., "
         "device=device) or torch.empty(..., device=device)."),
    Rule("DEV011", "accelerator chosen by availability (silent CPU fallback)",
         "Off by default: it cannot crash, but a run meant for the GPU quietly trains on the CPU. "
         "Resolve the device once and refuse what is absent (resolve_device in devices.py).",
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
_ACCELERATOR = re.compile(r"(cuda|mps|xpu|hpu|xla|npu|ipu|gpu)(:\d+)?\Z")
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
                 "memory_summary", "device", "set_stream"}
# Calls whose device argument names a backend type (autocast, GradScaler) and places nothing.
_TYPE_ONLY = {"autocast", "GradScaler", "is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled",
              "get_autocast_gpu_dtype", "is_available", "device_count"}
_MOVERS = ("to_device", "todevice", "move_to", "to_cuda", "to_gpu", "send_to", "place")
# Checkpoint entries under these names are usually objects (Namespace, config) that weights_only refuses.
_OBJECT_NAMES = {"args", "opt", "opts", "config", "cfg", "hparams", "options", "parser", "namespace"}
_IGNORE = re.compile(r"#\s*devicelint:\s*ignore(?:\[([^\]]*)\])?", re.IGNORECASE)
_CUDA, _NOT_CUDA = "cuda", "not-cuda"


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


def _dotted(node: ast.AST) -> str:
    """`torch.nn.DataParallel` for a Name/Attribute chain, '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _last(node: ast.AST) -> str:
    """The last part of a dotted name or of a call's function: `DataParallel`, `cuda`, ''."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _keyword(call: ast.Call, name: str | None) -> ast.keyword | None:
    """The `name=` keyword of a call; name None finds `**kwargs` (then anything may be passed)."""
    return next((kw for kw in call.keywords if kw.arg == name), None)


def _string(node: ast.AST | None) -> str | None:
    """The value of a string constant, else None."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


_NO_FLAGS: frozenset[str] = frozenset()


def _guard(test: ast.AST, unsafe: frozenset[str] = _NO_FLAGS) -> str | None:
    """_CUDA if the test being true establishes CUDA, _NOT_CUDA if it being false does, else None.

    `unsafe` names flags that are set to True without any availability check (`--cuda default=True`):
    they say what the user wants, not what the machine has, so they guard nothing."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return {_CUDA: _NOT_CUDA, _NOT_CUDA: _CUDA}.get(_guard(test.operand, unsafe) or "")
    if isinstance(test, ast.BoolOp):  # `a and b` true: both hold; `a or b` false: neither holds
        strong, weak = (_CUDA, _NOT_CUDA) if isinstance(test.op, ast.And) else (_NOT_CUDA, _CUDA)
        guards = [_guard(v, unsafe) for v in test.values]
        return strong if strong in guards else weak if all(g == weak for g in guards) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        return _compare_guard(test.left, test.ops[0], test.comparators[0], unsafe)
    if isinstance(test, ast.Call):
        return _CUDA if _availability_call(test) else None
    return _flag_guard(test, unsafe)


def _availability_call(call: ast.Call) -> bool:
    """`torch.cuda.is_available()`, `torch.cuda.device_count()` and their mps/xpu/accelerator twins."""
    name = _dotted(call.func)
    return any(a in name for a in ("cuda", "mps", "xpu", "accelerator")) and \
        name.endswith((".is_available", ".device_count", ".is_initialized"))


_ACCEL_FLAG = ("cuda", "gpu", "nccl", "mps", "xpu", "xla", "tpu")


def _flag_guard(node: ast.AST, unsafe: frozenset[str] = _NO_FLAGS) -> str | None:
    """`use_cuda`, `args.gpu`, `x.is_cuda`: flags whose names say CUDA is on (or `no_cuda`: off)."""
    name = _last(node).lower()
    if not name or isinstance(node, ast.Call) or name in unsafe:
        return None
    if "no_cuda" in name or "no_gpu" in name or "cpu" in name:
        return _NOT_CUDA
    return _CUDA if any(a in name for a in _ACCEL_FLAG) else None


def _decorator_guard(decorator: ast.AST, unsafe: frozenset[str] = _NO_FLAGS) -> bool:
    """A decorator that runs its function only where CUDA is: `skipIf(not cuda)`, `skipUnless()`, `@requires_cuda`."""
    markers = decorator.elts if isinstance(decorator, (ast.List, ast.Tuple)) else [decorator]
    for marker in markers:
        name = _last(marker).lower()
        if isinstance(marker, ast.Call) and marker.args and name in ("skipif", "skip_if"):
            if _guard(marker.args[0], unsafe) == _NOT_CUDA:
                return True
        elif isinstance(marker, ast.Call) and marker.args and name in ("skipunless", "skip_unless"):
            if _guard(marker.args[0], unsafe) == _CUDA:
                return True
        elif any(a in name for a in _ACCEL_FLAG) and ("skip" in name or _flag_guard(ast.Name(name)) == _CUDA):
            return True  # @pytest.mark.cuda, @requires_gpu, @skip_if_no_cuda, @pytest.mark.multi_gpu
    return False


def _compare_guard(left: ast.AST, op: ast.cmpop, right: ast.AST, unsafe: frozenset[str] = _NO_FLAGS) -> str | None:
    """`device.type == "cuda"`, `"cuda" in str(d)`, `backend == "nccl"`, `args.gpu is not None`."""
    literal = _string(right) if _string(left) is None else _string(left)
    other = left if _string(left) is None else right
    if literal is not None:
        positive = isinstance(op, (ast.Eq, ast.In))
        if not positive and not isinstance(op, (ast.NotEq, ast.NotIn)):
            return None
        if literal.startswith(("cuda", "nccl")):
            return _CUDA if positive else _NOT_CUDA
        return (_NOT_CUDA if positive else _CUDA) if literal == "cpu" else None
    base = _guard(other, unsafe) if isinstance(other, ast.Call) else _flag_guard(other, unsafe)
    if base is None:
        return None
    negative = isinstance(op, (ast.Is, ast.Eq)) or \
        (isinstance(op, (ast.Lt, ast.LtE)) and isinstance(right, ast.Constant))
    return {_CUDA: _NOT_CUDA, _NOT_CUDA: _CUDA}[base] if negative else base


def _device_literals(node: ast.AST | None, unsafe: frozenset[str] = _NO_FLAGS) -> list[tuple[str, bool]]:
    """Accelerator names hard-coded in an expression, each with True where a CUDA test guards it."""
    if isinstance(node, ast.IfExp):
        guard = _guard(node.test, unsafe)
        return [(s, g or guard == _CUDA) for s, g in _device_literals(node.body, unsafe)] + \
            [(s, g or guard == _NOT_CUDA) for s, g in _device_literals(node.orelse, unsafe)]
    text = _string(node)
    if text is not None:
        return [(text, False)] if _ACCELERATOR.match(text.strip()) else []
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]  # f"cuda:{rank}" starts with the constant "cuda:"
        if isinstance(head, ast.Constant) and re.match(r"(cuda|xpu|hpu|npu):", str(head.value)):
            return [(str(head.value) + "{...}", False)]
    return []


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


def _is_dataset(cls: ast.ClassDef) -> bool:
    """Heuristic for DEV008: a base class named *Dataset, ImageFolder or DatasetFolder."""
    names = [_dotted(base).rsplit(".", 1)[-1] for base in cls.bases]
    return any(n.endswith("Dataset") or n in ("ImageFolder", "DatasetFolder") for n in names)


def _is_dict(node: ast.AST | None) -> bool:
    """A dict display, comprehension or dict(...) call: a checkpoint, never a module."""
    return isinstance(node, (ast.Dict, ast.DictComp)) or (isinstance(node, ast.Call) and _dotted(node.func) == "dict")


def _wraps(value: ast.AST, wrapped: set[str]) -> bool:
    """Whether `value` is a DP/DDP wrapper: `DDP(m)`, `DataParallel(m).cuda()`, `model.to(d)` of one."""
    while isinstance(value, (ast.Call, ast.Attribute)):
        if isinstance(value, ast.Call) and _last(value) in _WRAPPERS:
            return True
        if isinstance(value, ast.Attribute) and value.attr == "module":
            return False  # `.module` unwraps
        if isinstance(value, ast.Attribute) and _dotted(value) in wrapped:
            return True
        value = value.func if isinstance(value, ast.Call) else value.value
    return isinstance(value, ast.Name) and value.id in wrapped


def _child_nodes(node: ast.AST) -> list[ast.AST]:
    """ast.iter_child_nodes as a list, leaving out the shared Load/Store/Del context nodes."""
    found: list[ast.AST] = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            if not isinstance(value, ast.expr_context):
                found.append(value)
        elif isinstance(value, list):
            found.extend(item for item in value if isinstance(item, ast.AST))
    return found


_VISITORS: dict[tuple[type, type], Callable] = {}  # (checker class, node type) -> method (filled as types are met)


class _FileFacts:
    """What one pre-pass over the module learns for rules that need more than the current node."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        # One pass, in ast.walk's breadth-first order: every later walk reuses these child lists.
        self.children: dict[ast.AST, list[ast.AST]] = {}
        self.parents: dict[ast.AST, ast.AST] = {}
        self.nodes: list[ast.AST] = [tree]
        for node in self.nodes:  # grows while iterating: breadth first, like ast.walk
            kids = _child_nodes(node)
            self.children[node] = kids
            for kid in kids:
                self.parents[kid] = node
            self.nodes.extend(kids)
        self._walks: dict[ast.AST, list[ast.AST]] = {}
        calls = [n for n in self.nodes if isinstance(n, ast.Call)]
        self.calls = calls
        self.moves_to_device = any(_last(c) == "cuda" or (_last(c) == "to" and (c.args or c.keywords)) for c in calls) \
            or any(_keyword(c, "device") is not None for c in calls)
        saves = [c for c in calls if _dotted(c.func) == "torch.save"]
        self.cpu_saved = {self._path_key(p) for c in saves if self._from_cpu(c) for p in self._paths(c)}
        self.pickled_objects = sorted({name for c in calls if "save" in _last(c).lower() and c.args
                                       for name in self._objects(c.args[0])})
        self.nccl_names = {t.id for n in self.nodes if isinstance(n, ast.Assign) and _string(n.value) == "nccl"
                           for t in n.targets if isinstance(t, ast.Name)}
        self.sibling_cpu_saved: Callable[[str], bool] = lambda key: False

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
    def unsafe_flags(self) -> frozenset[str]:
        return self._unsafe_flags(self.tree, self.calls)

    @functools.cached_property
    def resolves_devices(self) -> bool:
        return any(_availability_call(c) and isinstance(self._function_of(c), ast.FunctionDef) for c in self.calls)

    @functools.cached_property
    def collective_functions(self) -> set[int]:
        """ids of the functions (at any depth) that contain a torch.distributed collective call."""
        found: set[int] = set()
        for call in self.calls:
            if _last(call) in _COLLECTIVES and _dotted(call.func).startswith(("dist.", "torch.distributed.")):
                node: ast.AST = call
                while node in self.parents:
                    node = self.parents[node]
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        found.add(id(node))
        return found

    def _unsafe_flags(self, tree: ast.Module, calls: list[ast.Call]) -> frozenset[str]:
        """Accelerator flags set to True (a default, an assignment, `--cuda default=True`) and never checked.

        A flag guards only when it derives from an availability check somewhere in the file
        (`use_cuda = args.cuda and torch.cuda.is_available()`); one that is just True states a wish."""
        wished, checked = set(), set()
        for node in self.nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {_last(t).lower() for t in targets}
                if any(isinstance(c, ast.Call) and _availability_call(c) or
                       isinstance(c, ast.Attribute) and c.attr == "is_cuda" for c in self.walk(node.value)):
                    checked |= names
                elif isinstance(node.value, ast.Constant) and node.value.value is True:
                    wished |= names
            elif isinstance(node, ast.keyword) and node.arg and any(
                    isinstance(c, ast.Call) and _availability_call(c) for c in self.walk(node.value)):
                checked.add(node.arg.lower())  # f(use_gpu=torch.cuda.is_available())
            elif isinstance(node, ast.arguments):
                params = node.posonlyargs + node.args
                pairs = list(zip(params[len(params) - len(node.defaults):], node.defaults))
                pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
                wished |= {a.arg.lower() for a, d in pairs if isinstance(d, ast.Constant) and d.value is True}
        for call in calls:
            if _last(call) != "add_argument":
                continue
            options = [_string(a) or "" for a in call.args]
            dest = _string(getattr(_keyword(call, "dest"), "value", None)) or \
                next((o.lstrip("-").replace("-", "_") for o in options if o.startswith("--")), "")
            default, action = _keyword(call, "default"), _string(getattr(_keyword(call, "action"), "value", None))
            if (default is not None and getattr(default.value, "value", None) is True) or action == "store_false":
                wished.add(dest.lower())
        return frozenset(n for n in wished - checked if any(a in n for a in _ACCEL_FLAG))

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
        """The loaded path (or buffer) is written earlier in the same function: same process, so the same devices."""
        key = self._path_key(load.args[0])
        function = self._function_of(load)
        return any(_dotted(c.func) == "torch.save" and c.lineno < load.lineno and
                   any(self._path_key(p) == key for p in self._paths(c))
                   for c in self.walk(function) if isinstance(c, ast.Call))

    def _paths(self, save: ast.Call) -> list[ast.AST]:
        """Where a torch.save writes: its path, or the path `open()`ed by the `with ... as f` around it."""
        target = save.args[1] if len(save.args) > 1 else getattr(_keyword(save, "f"), "value", None)
        node: ast.AST = save
        while isinstance(target, ast.Name) and node in self.parents:
            node = self.parents[node]
            for item in node.items if isinstance(node, ast.With) else []:
                var, ctx = item.optional_vars, item.context_expr
                if isinstance(var, ast.Name) and var.id == target.id and _last(ctx) == "open" and ctx.args:
                    return [ctx.args[0]]
        return [target] if target is not None else []

    def _path_key(self, path: ast.AST | None) -> str:
        """Compare paths by their last string constant (`"feat.pth"`), else by their whole expression."""
        constants = [n.value for n in self.walk(path) if _string(n) and "." in n.value]
        return constants[-1] if constants else ast.dump(path)

    def _from_cpu(self, save: ast.Call) -> bool:
        """A save of CPU data: `x.cpu()`, or `m.state_dict()` after `m.cpu()`, or a file that never moves."""
        saved = save.args[0] if save.args else None
        if not self.moves_to_device or any(_last(n) == "cpu" for n in self.walk(saved) if isinstance(n, ast.Call)):
            return True
        owner = _dotted(saved.func.value) if isinstance(saved, ast.Call) and _last(saved) == "state_dict" else ""
        calls = (n for n in self.walk(self._function_of(save)) if isinstance(n, ast.Call) and _last(n) == "cpu")
        return bool(owner) and any(_dotted(c.func.value).startswith(owner) for c in calls if c.lineno < save.lineno)

    def saved_on_cpu_here(self, load_path: ast.AST) -> bool:
        """This file saved the path being loaded, from CPU tensors: no map_location is needed."""
        return self._path_key(load_path) in self.cpu_saved

    def moved_after(self, call: ast.Call) -> bool:
        """`helper(n).to(device)`: what the call returns is moved, so where it was made does not matter."""
        parent = self.parents.get(call)
        return isinstance(parent, ast.Attribute) and parent.attr in ("to", "cuda", "type_as")

    def starts_nccl(self, body: list[ast.stmt]) -> bool:
        """A block that itself calls init_process_group(backend="nccl"): it only runs where CUDA is.

        Only the block's own simple statements count: an NCCL start in a nested `if`, loop or function
        (`if __name__ == "__main__": ... if args.distributed: init(...)`) guards that inner block only."""
        simple = [stmt for stmt in body if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign, ast.Return))]
        for call in (c for stmt in simple for c in self.walk(stmt) if isinstance(c, ast.Call)):
            backend = _keyword(call, "backend") or (call.args[0] if call.args else None)
            value = backend.value if isinstance(backend, ast.keyword) else backend
            if _last(call) == "init_process_group" and value is not None and \
                    (_string(value) == "nccl" or _dotted(value) in self.nccl_names):
                return True
        return False

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
        for cls in (n for n in self.nodes if isinstance(n, ast.ClassDef)):
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


class _Checker(ast.NodeVisitor):
    """Walks one module's tree, keeping just enough context (class, method, guards, scope) for the rules."""

    def __init__(self, path: str, allow_device_strings: bool, facts: _FileFacts) -> None:
        self.path, self.allow_device_strings, self.facts = path, allow_device_strings, facts
        self.findings: list[Finding] = []
        self.parents: list[ast.AST] = []  # enclosing classes and functions, innermost last
        self.in_forward = self.in_getitem = False
        self.guarded = 0  # > 0 while CUDA is known to be present (inside a guard)
        self.branches = 0  # > 0 inside if/for/while/try: a rebinding there may not happen
        self.safe_globals = 0  # > 0 inside `with torch.serialization.safe_globals(...)`
        self.wrapped: list[set[str]] = [set()]  # per function scope: names bound to DP/DDP(...)
        self.dicts: list[set[str]] = [set()]  # per function scope: names bound to a dict
        self.wrapped_attrs: set[str] = set()  # `self.model = DDP(...)` outlives the method
        self.moved: set[int] = set()  # factory calls whose result is moved with .to()/.type_as()

    def visit(self, node: ast.AST) -> None:
        """Dispatch like ast.NodeVisitor, with the method looked up once per node type."""
        key = (type(self), type(node))
        method = _VISITORS.get(key)
        if method is None:
            method = _VISITORS[key] = getattr(type(self), "visit_" + type(node).__name__, None) \
                or type(self).generic_visit
        method(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        """Visit the children, from the pre-pass's child lists (the same order as ast.NodeVisitor)."""
        children = self.facts.children.get(node)
        if children is None:
            super().generic_visit(node)
            return
        for child in children:
            self.visit(child)

    def report(self, node: ast.AST, code: str, detail: str = "") -> None:
        """Record a finding at the node's position (columns are 1-based, like flake8)."""
        self.findings.append(Finding(self.path, node.lineno, node.col_offset + 1, code, detail))

    def report_device(self, node: ast.AST, literals: list[tuple[str, bool]]) -> None:
        """DEV002 for a hard-coded accelerator, DEV011 where a CUDA test already guards it."""
        if not self.allow_device_strings and not self.facts.resolves_devices:
            for literal, guarded in literals:
                self.report(node, "DEV011" if guarded or self.guarded else "DEV002", repr(literal))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        """Remember the class so its methods know whether they are a forward or a __getitem__."""
        guarded = self._decorated_guard(node) or any(
            isinstance(s, ast.Assign) and _dotted(s.targets[0]) == "pytestmark"
            and _decorator_guard(s.value, self.facts.unsafe_flags) for s in node.body)
        self.guarded += guarded
        self.parents.append(node)
        self.generic_visit(node)
        self.parents.pop()
        self.guarded -= guarded

    def _decorated_guard(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """A decorator that skips the whole function or class unless CUDA is there guards all of it."""
        return any(_decorator_guard(d, self.facts.unsafe_flags) for d in node.decorator_list)

    def visit_Module(self, node: ast.Module) -> None:
        """`pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), ...)` guards the whole file."""
        self.guarded += any(isinstance(s, ast.Assign) and _dotted(s.targets[0]) == "pytestmark"
                            and _decorator_guard(s.value, self.facts.unsafe_flags) for s in node.body)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Check defaults, then the body with forward/__getitem__/guard context and a fresh scope."""
        self._check_default_devices(node.args)
        owner = self.parents[-1] if self.parents else None
        saved = (self.in_forward, self.in_getitem, self.guarded, self.branches)
        inherited = self.in_forward and not isinstance(owner, ast.ClassDef)
        self.in_forward = id(node) in self.facts.forward_like or inherited
        if isinstance(owner, ast.ClassDef):
            self.in_getitem = node.name == "__getitem__" and _is_dataset(owner)
        # Collectives mean a process group; device strings there run under NCCL, which needs CUDA.
        self.guarded += id(node) in self.facts.collective_functions \
            or self._decorated_guard(node) or self.facts.starts_nccl(node.body)
        self.branches = 0
        self.parents.append(node)
        self.wrapped.append(set())
        self.dicts.append(set())
        self.generic_visit(node)
        self.dicts.pop()
        self.wrapped.pop()
        self.parents.pop()
        self.in_forward, self.in_getitem, self.guarded, self.branches = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If | ast.IfExp) -> None:
        """Visit each branch knowing whether CUDA is established there; an early exit guards the rest."""
        guard = _guard(node.test, self.facts.unsafe_flags)
        if isinstance(node, ast.If) and self.facts.starts_nccl(node.body):
            guard = _CUDA
        self.visit(node.test)
        self._visit_branch(node.body, guard == _CUDA)
        self._visit_branch(node.orelse, guard == _NOT_CUDA)
        body = node.body if isinstance(node.body, list) else []
        if guard == _NOT_CUDA and body and _exits(body[-1]):
            self.guarded += 1  # `if not torch.cuda.is_available(): return`; restored when the function ends

    visit_IfExp = visit_If

    def _visit_branch(self, body: list[ast.stmt] | ast.expr, guarded: bool) -> None:
        """Visit statements (or an expression) that run only on one side of a test."""
        self.guarded += guarded
        self.branches += 1
        for child in body if isinstance(body, list) else [body]:
            self.visit(child)
        self.branches -= 1
        self.guarded -= guarded

    def visit_Assert(self, node: ast.Assert) -> None:
        """`assert torch.cuda.is_available()` guards everything after it."""
        self.generic_visit(node)
        self.guarded += _guard(node.test, self.facts.unsafe_flags) == _CUDA

    def generic_branch(self, node: ast.AST) -> None:
        """Loops and try blocks may not run: a rebinding inside them does not forget a wrapper."""
        self.branches += 1
        self.generic_visit(node)
        self.branches -= 1

    visit_For = visit_AsyncFor = visit_While = visit_Try = generic_branch

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        """`with torch.serialization.safe_globals([...]):` makes the loads inside deliberate."""
        trusted = any(_last(item.context_expr) == "safe_globals" for item in node.items)
        self.safe_globals += trusted
        self.generic_visit(node)
        self.safe_globals -= trusted

    visit_AsyncWith = visit_With

    def visit_Attribute(self, node: ast.Attribute) -> None:
        """DEV010: `torch.cuda.FloatTensor` and friends exist only with CUDA."""
        if _TYPED_CUDA.match(_dotted(node)) and not self.guarded:
            self.report(node, "DEV010", _dotted(node))
        self.generic_visit(node)

    def _check_default_devices(self, args: ast.arguments) -> None:
        """DEV002 for `def f(device="cuda")`: a hidden default device is still a hard-coded one."""
        params = args.posonlyargs + args.args
        pairs = list(zip(params[len(params) - len(args.defaults):], args.defaults, strict=True))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
        for param, default in pairs:
            if "device" in param.arg:
                self.report_device(default, _device_literals(default, self.facts.unsafe_flags))

    def visit_Assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        """Track names holding a DP/DDP wrapper or a dict; DEV002 for `device = "cuda"`."""
        self.generic_visit(node)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            name = _dotted(target)
            if "device" in _last(target).lower() and not _last(target).lower().endswith("type") \
                    and not _names_only(target, self.facts):
                self.report_device(node.value, _device_literals(node.value, self.facts.unsafe_flags))
            if not name or node.value is None:
                continue
            scope = self.wrapped_attrs if isinstance(target, ast.Attribute) else self.wrapped[-1]
            self._rebind(scope, name, _wraps(node.value, self.wrapped_attrs | set().union(*self.wrapped)))
            self._rebind(self.dicts[-1], name, _is_dict(node.value))

    visit_AnnAssign = visit_Assign

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
        if method in ("to", "cuda", "type_as"):
            self._mark_moved(func.value, node)
        if method == "cuda" and not self.guarded:
            self.report(node, "DEV001")
        self._check_device_strings(node, method)
        name = _dotted(func)
        if name.startswith("torch.cuda.") and name[11:] in _CUDA_RUNTIME and not self.guarded \
                and not self.facts.resolves_devices and not self.allow_device_strings:
            self.report(node, "DEV012", f"{name}()")
        if name in ("torch.load", "torch.jit.load"):
            self._check_load(node, name)
        if _last(node) == "partial" and node.args and _dotted(node.args[0]) == "torch.load" \
                and _false(_keyword(node, "weights_only")):
            self.report(node, "DEV004", "weights_only=False in a torch.load wrapper")
        if name == "torch.save" and node.args and _looks_like_module(node.args[0]) \
                and _dotted(node.args[0]) not in self.dicts[-1]:
            self.report(node, "DEV006", f"{_dotted(node.args[0]) or 'object'} is saved whole")
        if self.in_forward and name.startswith("torch.") and name[6:] in _FACTORIES:
            self._check_factory(node, name)
        if self.in_getitem and (method == "cuda" or (method == "to" and _moves_device(node))):
            self.report(node, "DEV008")
        if method == "state_dict" and _wraps(func.value, self.wrapped_attrs | set().union(*self.wrapped)) \
                and self._kept(node):
            self.report(node, "DEV009", f"{_dotted(func.value) or 'the wrapper'} is still wrapped")
        self.generic_visit(node)

    def _kept(self, node: ast.Call) -> bool:
        """A state_dict() that is saved or stored, not one handed to a checking/loading function."""
        parent = self.facts.parents.get(node)
        return not isinstance(parent, ast.Call) or "save" in _last(parent).lower() or _last(parent) == "dict"

    def _mark_moved(self, receiver: ast.AST, move: ast.Call) -> None:
        """Remember the calls in `torch.arange(n)[None].float().to(x)` as moved (not DEV007)."""
        if move.func.attr == "to" and move.args and all(_DTYPE.match(_dotted(a)) for a in move.args):
            return  # .to(torch.float16) changes the dtype, not the device
        while isinstance(receiver, (ast.Call, ast.Subscript, ast.Attribute)):
            if isinstance(receiver, ast.Call):
                self.moved.add(id(receiver))
            receiver = receiver.func if isinstance(receiver, ast.Call) else receiver.value

    def _check_device_strings(self, node: ast.Call, method: str) -> None:
        """DEV002: accelerator literals in torch.device(), .to(), device= or an argparse --device default.

        Strings that place nothing are not hard-coded devices: a backend type for autocast/GradScaler,
        `torch.device("cuda")` compared with another device or used as a key."""
        naming = _dotted(node.func) == "torch.device" and _naming_use(node, self.facts.parents)
        if _last(node) in _TYPE_ONLY or naming:
            return
        candidates = list(node.args) if method == "to" else []
        candidates += [kw.value for kw in node.keywords if kw.arg == "map_location"]
        if _dotted(node.func) == "torch.device" and node.args:
            candidates.append(node.args[0])
        device_kw = _keyword(node, "device")
        if device_kw is not None:
            candidates.append(device_kw.value)
        default = _keyword(node, "default")
        if method == "add_argument" and default is not None and any("device" in (_string(a) or "") for a in node.args):
            candidates.append(default.value)
        for candidate in candidates:
            self.report_device(candidate, _device_literals(candidate, self.facts.unsafe_flags))

    def _check_load(self, node: ast.Call, name: str) -> None:
        """DEV003/DEV004: a load must say where tensors go and refuse arbitrary pickles.

        `**kwargs` hides what the caller passes, but not what this call or its function forces:
        a wrapper that passes `weights_only=False` (or sets it in the options it forwards) is reported."""
        forwarded = _keyword(node, None) is not None
        same_process = bool(node.args) and (self.facts.saved_on_cpu_here(node.args[0])
                                            or self.facts.saves_in_function(node)
                                            or self.facts.sibling_cpu_saved(self.facts._path_key(node.args[0])))
        if not forwarded and len(node.args) < 2 and _keyword(node, "map_location") is None and not same_process:
            self.report(node, "DEV003", name if name != "torch.load" else "")
        if name != "torch.load" or self.safe_globals:
            return  # torch.jit.load runs no pickle; safe_globals means the allow-list was chosen
        weights_only = _keyword(node, "weights_only")
        objects = self.facts.pickled_objects
        advice = f"; the checkpoint pickles {', '.join(objects)}: save plain values" if objects else ""
        if _false(weights_only) or (forwarded and weights_only is None and self.facts.forces_unsafe(node)):
            self.report(node, "DEV004", "weights_only=False" + advice)
        elif weights_only is None and not forwarded:
            self.report(node, "DEV004", "not given" + advice)

    def _check_factory(self, node: ast.Call, name: str) -> None:
        """DEV007 unless the tensor is moved (now or later), given a device, 0-dim, or only used on the host."""
        if id(node) in self.moved or _keyword(node, "device") or _keyword(node, None) or _scalar(node, name):
            return
        if not _host_only(node, self.facts):
            self.report(node, "DEV007", f"{name}() is created on the CPU")


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
    return isinstance(parent, ast.Call) and node is not parent.func and _last(parent) in _TYPE_ONLY | {"print", "str"}


def _names_only(target: ast.AST, facts: _FileFacts) -> bool:
    """`amp_device = "cuda"` in a function whose every later use only names the backend (autocast, a comparison)."""
    if not isinstance(target, ast.Name):
        return False
    parents = facts.parents
    function = target
    while function in parents and not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        function = parents[function]
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False  # a module-level constant is read from other files we cannot see
    uses = [n for n in facts.walk(function)
            if isinstance(n, ast.Name) and n.id == target.id and isinstance(n.ctx, ast.Load)]
    return bool(uses) and all(_naming_use(use, parents) for use in uses)


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


def _matches(path: Path | str, patterns: Iterable[str]) -> bool:
    """Whether a path matches a name (`config.py`), a path suffix (`src/setup.py`) or a glob (`tests/*`)."""
    text = Path(path).as_posix()
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        if any(fnmatch.fnmatch(text, p) for p in (pattern, f"*/{pattern}", f"{pattern}/*", f"*/{pattern}/*")):
            return True
    return False


def lint_source(source: str, filename: str = "<string>", select: Iterable[str] | None = None,
                ignore: Iterable[str] = (), allow_devices_in: Iterable[str] = DEVICE_MODULES) -> list[Finding]:
    """Lint one module's text; DEV000 (syntax error) is reported whatever select/ignore say."""
    try:
        tree = ast.parse(source, filename)
        facts = _FileFacts(tree)
        if os.path.isfile(filename):
            facts.sibling_cpu_saved = lambda key: key in _sibling_cpu_saves(os.path.dirname(os.path.abspath(filename)),
                                                                            os.path.basename(filename))
        checker = _Checker(filename, _matches(filename, allow_devices_in) or _allowed_by_pyproject(filename), facts)
        checker.visit(tree)
    except SyntaxError as error:
        if "null bytes" in str(error.msg):
            raise LintError("contains null bytes; not a Python source file") from None
        return [Finding(filename, error.lineno or 1, error.offset or 1, "DEV000", error.msg)]
    except (RecursionError, MemoryError):
        raise LintError("nested too deeply to check") from None
    chosen = set(select) if select else {code for code, rule in RULES.items() if rule.default}
    chosen -= set(ignore)
    silenced = _ignored(source) if checker.findings and _IGNORE.search(source) else {}
    kept = []
    for finding in checker.findings:
        codes = silenced.get(finding.line, set())
        if finding.code in chosen and codes is not None and finding.code not in codes:
            kept.append(finding)
    return sorted(set(kept))


@functools.lru_cache(maxsize=64)
def _sibling_saves(folder: str) -> dict[str, frozenset[str]]:
    """For each script in a folder that calls torch.save: the paths it saves from CPU (by their file name)."""
    saves: dict[str, frozenset[str]] = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        file = os.path.join(folder, name)
        if not name.endswith(".py") or not os.path.isfile(file):
            continue
        try:
            text = read_source(Path(file))
            saves[name] = frozenset(_FileFacts(ast.parse(text)).cpu_saved) if "torch.save" in text else frozenset()
        except (LintError, SyntaxError, ValueError, RecursionError):
            continue
    return saves


def _sibling_cpu_saves(folder: str, me: str) -> set[str]:
    """Paths a sibling script (same folder, another file) saves from CPU: loading them needs no map_location."""
    return {key for name, keys in _sibling_saves(folder).items() if name != me for key in keys}


@functools.lru_cache(maxsize=64)
def _pyproject_patterns(folder: str) -> tuple[str, tuple[str, ...]]:
    """The nearest pyproject.toml at or above a folder: its folder and `[tool.devicelint] allow-devices-in`."""
    here = Path(folder)
    for candidate in (here, *here.parents):
        file = candidate / "pyproject.toml"
        if file.is_file():
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                return "", ()
            section = re.search(r"^\[tool\.devicelint\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
            value = re.search(r"^allow-devices-in\s*=\s*\[(.*?)\]", section.group(1), re.M | re.S) if section else None
            return str(candidate), tuple(re.findall(r"[\"']([^\"']+)[\"']", value.group(1))) if value else ()
    return "", ()


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
               **options) -> list[Finding]:
    """Lint each Python file under the paths once; files that cannot be checked go to `errors`."""
    findings: set[Finding] = set()
    seen: set[str] = set()
    for path in paths:
        for file in python_files(Path(path), exclude):
            key = os.path.realpath(file)
            if key in seen:
                continue  # overlapping arguments (`src src/a.py`) check a file once
            seen.add(key)
            try:
                findings.update(lint_source(read_source(file), str(file), **options))
            except LintError as error:
                if errors is not None:
                    errors.append(f"{file}: error: {error}")
    return sorted(findings)


def _codes(text: str | None) -> list[str]:
    """Split a `DEV001,DEV002` option into upper-case codes."""
    return [c.strip().upper() for c in (text or "").split(",") if c.strip()]


def build_parser() -> argparse.ArgumentParser:
    """The command line; returned so other tools can reuse it."""
    parser = argparse.ArgumentParser(prog="devicelint", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="files or folders to check")
    parser.add_argument("--select", help="comma-separated codes to report (default: all rules on by default)")
    parser.add_argument("--ignore", help="comma-separated codes to skip")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="skip files and folders matching this glob or path (repeatable)")
    parser.add_argument("--allow-devices-in", action="append", default=[], metavar="PATTERN",
                        help="a file name, path or glob allowed to hold device strings (repeatable)")
    parser.add_argument("--list-rules", action="store_true", help="print the rules and exit")
    parser.add_argument("--explain", metavar="CODE", help="print why a rule exists and how to fix it")
    return parser


def _summary(findings: list[Finding]) -> str:
    """One line: how many findings, in how many files, per code."""
    counts = Counter(f.code for f in findings)
    per_code = ", ".join(f"{code} x{n}" for code, n in sorted(counts.items()))
    files = len({f.path for f in findings})
    return (f"devicelint: {len(findings)} finding{'s' * (len(findings) != 1)} in {files} "
            f"file{'s' * (files != 1)} ({per_code}); `--explain CODE` shows the fix")


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
    return "" if args.paths or args.list_rules or args.explain else "no paths given"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the linter: 0 clean, 1 findings, 2 bad command line or a file that could not be checked."""
    args = build_parser().parse_args(argv)
    select, ignore = _codes(args.select), _codes(args.ignore)
    problem = _usage_problem(args, select, ignore)
    if problem:
        print(f"devicelint: {problem}", file=sys.stderr)
        return 2
    if args.list_rules or args.explain:
        for rule in RULES.values():
            if args.list_rules:
                off = "" if rule.default else " [off by default]"
                print(f"{rule.code}  {rule.summary}{off} (--explain {rule.code})")
            elif rule.code == args.explain.strip().upper():
                print(f"{rule.code}: {rule.summary}\n\n{rule.hint}")
        return 0
    errors: list[str] = []
    findings = lint_paths(args.paths, exclude=args.exclude, errors=errors, select=select or None, ignore=ignore,
                          allow_devices_in=DEVICE_MODULES + tuple(args.allow_devices_in))
    for finding in findings:
        print(finding.format())
    if findings:
        print(_summary(findings))
    for error in errors:
        print(error, file=sys.stderr)
    return 2 if errors else 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
