"""devicelint: a static checker for PyTorch device anti-patterns (standard library only).

Usage::

    python -m <package>.devicelint PATH...            # files or folders (recurses into *.py)
    python -m <package>.devicelint --list-rules       # codes, one-line descriptions, fix hints
    python -m <package>.devicelint --select DEV001,DEV003 src/
    python -m <package>.devicelint --ignore DEV006 train.py

Findings print like any linter, sorted: ``path:line:col: CODE message (hint)``. Exit code 0
means clean, 1 means findings (a file that does not parse is one DEV000 finding), 2 means a
bad command line or a missing path.

Silence one line with ``# devicelint: ignore[DEV002]`` (several codes: ``ignore[DEV002,DEV007]``;
a bare ``# devicelint: ignore`` silences every code on that line). The comment must sit on the
line the finding names.

Device strings (DEV002) are allowed in the modules whose job is to name devices: files called
``config.py`` or ``devices.py``; add more with ``--allow-devices-in NAME.py``. Only accelerator
names are flagged ("cuda", "cuda:1", "mps", ...): "cpu" and "meta" exist on every machine.

Some rules are heuristics and say so: DEV006 decides "this is a module" from the variable name
(model, net, module, self, *model*), DEV008 decides "this is a Dataset" from the base-class name,
and DEV009 follows names assigned from DataParallel/DDP(...) in source order within one file.

To use it elsewhere, copy this one file into the other project (any package, or next to the
scripts) and run it with ``python devicelint.py PATH...``: it imports nothing but the stdlib.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import re
import sys
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple


class Rule(NamedTuple):
    """One check: its code, what it reports, and how to fix it."""

    code: str
    summary: str
    hint: str


RULES = {rule.code: rule for rule in (
    Rule("DEV000", "syntax error", "fix the syntax error; nothing else was checked"),
    Rule("DEV001", ".cuda() hard-codes the CUDA backend and device index",
         "use .to(device) with a device passed in as an argument"),
    Rule("DEV002", "device string literal outside the config/devices module",
         "take the device as a parameter; decide it once in config.py/devices.py"),
    Rule("DEV003", "torch.load without map_location",
         "pass map_location=device, or 'cpu', so GPU-saved files load anywhere"),
    Rule("DEV004", "torch.load without weights_only=True",
         "pass weights_only=True and save plain dicts of tensors"),
    Rule("DEV005", "DEVICE imported by value from the config module",
         "import the module and read config.DEVICE when it is needed; the copy goes stale"),
    Rule("DEV006", "torch.save of a whole module, judged by its name",
         "save model.state_dict() instead; pickled modules pin classes and devices"),
    Rule("DEV007", "tensor factory in forward() without device=",
         "pass device=x.device, use torch.*_like(x) or x.new_*(), or a registered buffer"),
    Rule("DEV008", "device move inside Dataset.__getitem__",
         "return CPU tensors and move the batch in the training loop; CUDA fails in workers"),
    Rule("DEV009", "state_dict() of a DataParallel/DDP-wrapped model",
         "save model.module.state_dict() so keys carry no 'module.' prefix"),
)}

DEVICE_MODULES = ("config.py", "devices.py")
SKIP_DIRS = {".venv", "venv", ".git", "__pycache__", "build", "dist", ".tox", ".eggs", "node_modules"}
# "cpu" and "meta" are absent on purpose: they exist everywhere, so naming them is a choice, not a guess.
_ACCELERATOR = re.compile(r"(cuda|mps|xpu|hpu|xla|npu|ipu|gpu)(:\d+)?\Z")
_FACTORIES = {"zeros", "ones", "empty", "full", "arange", "tensor", "randn", "rand", "randint",
              "randperm", "eye", "linspace", "logspace", "empty_strided", "scalar_tensor"}
_WRAPPERS = {"DataParallel", "DistributedDataParallel", "DDP"}
_DTYPE = re.compile(r"torch\.(u?int\d*|float\d*|bfloat16|half|double|long|short|bool|complex\d*)\Z")
_IGNORE = re.compile(r"#\s*devicelint:\s*ignore(?:\[([^\]]*)\])?", re.IGNORECASE)


class Finding(NamedTuple):
    """One reported hazard; tuples sort by path, line, column."""

    path: str
    line: int
    col: int
    code: str
    detail: str = ""

    def format(self) -> str:
        """The linter line: `path:line:col: CODE message (hint)`."""
        rule = RULES[self.code]
        message = f"{rule.summary}: {self.detail}" if self.detail else rule.summary
        return f"{self.path}:{self.line}:{self.col}: {self.code} {message} ({rule.hint})"


def _dotted(node: ast.AST) -> str:
    """`torch.nn.DataParallel` for a Name/Attribute chain, '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _keyword(call: ast.Call, name: str | None) -> ast.keyword | None:
    """The `name=` keyword of a call; name None finds `**kwargs` (then anything may be passed)."""
    return next((kw for kw in call.keywords if kw.arg == name), None)


def _device_literals(node: ast.AST | None) -> list[str]:
    """Accelerator names hard-coded in an expression: "cuda:1", f"cuda:{rank}", a if c else b."""
    if isinstance(node, ast.IfExp):
        return _device_literals(node.body) + _device_literals(node.orelse)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if _ACCELERATOR.match(node.value.strip()) else []
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]  # f"cuda:{rank}" starts with the constant "cuda:"
        if isinstance(head, ast.Constant) and re.match(r"(cuda|xpu|hpu|npu):", str(head.value)):
            return [str(head.value) + "{...}"]
    return []


def _moves_device(call: ast.Call) -> bool:
    """A .to() that names a device: device=, a literal, torch.device(...) or a *device* variable."""
    names = [_dotted(a.func if isinstance(a, ast.Call) else a).lower() for a in call.args]
    return _keyword(call, "device") is not None or any(_device_literals(a) for a in call.args) \
        or any("device" in n or "cuda" in n or n == "dev" for n in names)


def _looks_like_module(node: ast.AST) -> bool:
    """Heuristic for DEV006: a variable whose name says it holds an nn.Module, not its state."""
    name = (node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")).lower()
    if any(part in name for part in ("state", "dict", "sd", "ckpt", "checkpoint", "weight", "param")):
        return False
    return name in ("self", "module", "net", "network") or "model" in name or name.endswith("net")


def _is_dataset(cls: ast.ClassDef) -> bool:
    """Heuristic for DEV008: a base class named *Dataset, ImageFolder or DatasetFolder."""
    names = [_dotted(base).rsplit(".", 1)[-1] for base in cls.bases]
    return any(n.endswith("Dataset") or n in ("ImageFolder", "DatasetFolder") for n in names)


class _Checker(ast.NodeVisitor):
    """Walks one module's tree, keeping just enough context (class, method, scope) for the rules."""

    def __init__(self, path: str, allow_device_strings: bool) -> None:
        self.path, self.allow_device_strings = path, allow_device_strings
        self.findings: list[Finding] = []
        self.parents: list[ast.AST] = []  # enclosing classes and functions, innermost last
        self.in_forward = self.in_getitem = False
        self.wrapped: list[set[str]] = [set()]  # per function scope: names bound to DP/DDP(...)
        self.wrapped_attrs: set[str] = set()  # `self.model = DDP(...)` outlives the method
        self.moved: set[int] = set()  # factory calls whose result is moved with .to()/.type_as()

    def report(self, node: ast.AST, code: str, detail: str = "") -> None:
        """Record a finding at the node's position (columns are 1-based, like flake8)."""
        self.findings.append(Finding(self.path, node.lineno, node.col_offset + 1, code, detail))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        """Remember the class so its methods know whether they are a forward or a __getitem__."""
        self.parents.append(node)
        self.generic_visit(node)
        self.parents.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Check defaults, then the body with forward/__getitem__ context and a fresh scope."""
        self._check_default_devices(node.args)
        owner = self.parents[-1] if self.parents else None
        saved = (self.in_forward, self.in_getitem)
        if isinstance(owner, ast.ClassDef):
            self.in_forward = node.name == "forward"
            self.in_getitem = node.name == "__getitem__" and _is_dataset(owner)
        self.parents.append(node)
        self.wrapped.append(set())
        self.generic_visit(node)
        self.wrapped.pop()
        self.parents.pop()
        self.in_forward, self.in_getitem = saved

    visit_AsyncFunctionDef = visit_FunctionDef

    def _check_default_devices(self, args: ast.arguments) -> None:
        """DEV002 for `def f(device="cuda")`: a hidden default device is still a hard-coded one."""
        params = args.posonlyargs + args.args
        pairs = list(zip(params[len(params) - len(args.defaults):], args.defaults))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
        for param, default in pairs:
            if "device" in param.arg and not self.allow_device_strings:
                for literal in _device_literals(default):
                    self.report(default, "DEV002", repr(literal))

    def visit_Assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        """Track which names hold a DataParallel/DDP wrapper (rebinding forgets it)."""
        self.generic_visit(node)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        is_wrapper = isinstance(node.value, ast.Call) and \
            _dotted(node.value.func).rsplit(".", 1)[-1] in _WRAPPERS
        for target in targets:
            name = _dotted(target)
            scope = self.wrapped_attrs if isinstance(target, ast.Attribute) else self.wrapped[-1]
            if name and is_wrapper:
                scope.add(name)
            elif name:
                scope.discard(name)

    visit_AnnAssign = visit_Assign

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
        if method == "cuda":
            self.report(node, "DEV001")
        self._check_device_strings(node, method)
        name = _dotted(func)
        if name == "torch.load":
            self._check_load(node)
        if name == "torch.save" and node.args and _looks_like_module(node.args[0]):
            self.report(node, "DEV006", f"{_dotted(node.args[0]) or 'object'} is saved whole")
        if self.in_forward and name.startswith("torch.") and name[6:] in _FACTORIES:
            if id(node) not in self.moved and not _keyword(node, "device") and not _keyword(node, None):
                self.report(node, "DEV007", f"{name}() is created on the CPU")
        if self.in_getitem and (method == "cuda" or (method == "to" and _moves_device(node))):
            self.report(node, "DEV008")
        if method == "state_dict":
            self._check_wrapped_state_dict(func.value, node)
        self.generic_visit(node)

    def _mark_moved(self, receiver: ast.AST, move: ast.Call) -> None:
        """Remember the calls in `torch.arange(n)[None].float().to(x)` as moved (not DEV007)."""
        if move.func.attr == "to" and move.args and all(_DTYPE.match(_dotted(a)) for a in move.args):
            return  # .to(torch.float16) changes the dtype, not the device
        while isinstance(receiver, (ast.Call, ast.Subscript, ast.Attribute)):
            if isinstance(receiver, ast.Call):
                self.moved.add(id(receiver))
            receiver = receiver.func if isinstance(receiver, ast.Call) else receiver.value

    def _check_device_strings(self, node: ast.Call, method: str) -> None:
        """DEV002: accelerator literals given to torch.device(), .to() or any device= argument."""
        if self.allow_device_strings:
            return
        candidates = list(node.args) if method == "to" else []
        if _dotted(node.func) == "torch.device" and node.args:
            candidates.append(node.args[0])
        device_kw = _keyword(node, "device")
        if device_kw is not None:
            candidates.append(device_kw.value)
        for candidate in candidates:
            for literal in _device_literals(candidate):
                self.report(candidate, "DEV002", repr(literal))

    def _check_load(self, node: ast.Call) -> None:
        """DEV003/DEV004: torch.load must say where tensors go and refuse arbitrary pickles."""
        if _keyword(node, None):
            return  # the caller forwards options we cannot see
        if len(node.args) < 2 and _keyword(node, "map_location") is None:
            self.report(node, "DEV003")
        weights_only = _keyword(node, "weights_only")
        if weights_only is None:
            self.report(node, "DEV004", "not given")
        elif isinstance(weights_only.value, ast.Constant) and not weights_only.value.value:
            self.report(node, "DEV004", "weights_only=False")

    def _check_wrapped_state_dict(self, receiver: ast.AST, node: ast.Call) -> None:
        """DEV009: `ddp_model.state_dict()` keys carry 'module.'; unwrap with .module first."""
        name = _dotted(receiver)
        wrapped_call = isinstance(receiver, ast.Call) and \
            _dotted(receiver.func).rsplit(".", 1)[-1] in _WRAPPERS
        if wrapped_call or (name and (name in self.wrapped_attrs or any(name in s for s in self.wrapped))):
            self.report(node, "DEV009", f"{name or 'the wrapper'} is still wrapped")


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


def lint_source(source: str, filename: str = "<string>", select: Iterable[str] | None = None,
                ignore: Iterable[str] = (), allow_devices_in: Iterable[str] = DEVICE_MODULES) -> list[Finding]:
    """Lint one module's text; DEV000 (syntax error) is reported whatever select/ignore say."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as error:
        return [Finding(filename, error.lineno or 1, error.offset or 1, "DEV000", error.msg)]
    checker = _Checker(filename, Path(filename).name in set(allow_devices_in))
    checker.visit(tree)
    chosen = set(select) if select else set(RULES)
    chosen -= set(ignore)
    silenced = _ignored(source)
    kept = []
    for finding in checker.findings:
        codes = silenced.get(finding.line, set())
        if finding.code in chosen and codes is not None and finding.code not in codes:
            kept.append(finding)
    return sorted(set(kept))


def python_files(path: Path) -> Iterator[Path]:
    """The *.py files at `path`: itself if a file, else recursively, skipping venvs and build dirs."""
    if path.is_file():
        yield path
        return
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        yield from (Path(root) / f for f in sorted(files) if f.endswith(".py"))


def lint_paths(paths: Sequence[str], **options) -> list[Finding]:
    """Lint every Python file under the given files and folders, sorted by path, line, column."""
    findings: list[Finding] = []
    for path in paths:
        for file in python_files(Path(path)):
            try:
                with tokenize.open(file) as handle:  # honours PEP 263 encoding cookies
                    source = handle.read()
            except (SyntaxError, UnicodeDecodeError) as error:
                findings.append(Finding(str(file), 1, 1, "DEV000", f"cannot decode: {error}"))
                continue
            findings += lint_source(source, str(file), **options)
    return sorted(findings)


def _codes(text: str | None) -> list[str]:
    """Split a `DEV001,DEV002` option into upper-case codes."""
    return [c.strip().upper() for c in (text or "").split(",") if c.strip()]


def build_parser() -> argparse.ArgumentParser:
    """The command line; returned so other tools can reuse it."""
    parser = argparse.ArgumentParser(prog="devicelint", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="files or folders to check")
    parser.add_argument("--select", help="comma-separated codes to report (default: all)")
    parser.add_argument("--ignore", help="comma-separated codes to skip")
    parser.add_argument("--allow-devices-in", action="append", default=[], metavar="NAME",
                        help="another file name allowed to hold device strings (repeatable)")
    parser.add_argument("--list-rules", action="store_true", help="print the rules and exit")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the linter: 0 clean, 1 findings, 2 bad command line or missing path."""
    args = build_parser().parse_args(argv)
    if args.list_rules:
        for rule in RULES.values():
            print(f"{rule.code}  {rule.summary} ({rule.hint})")
        return 0
    select, ignore = _codes(args.select), _codes(args.ignore)
    unknown = sorted(set(select + ignore) - set(RULES))
    missing = [p for p in args.paths if not Path(p).exists()]
    if unknown or missing or not args.paths:
        problem = (f"unknown rule code(s): {', '.join(unknown)}" if unknown else
                   f"no such file or directory: {missing[0]}" if missing else "no paths given")
        print(f"devicelint: {problem}", file=sys.stderr)
        return 2
    findings = lint_paths(args.paths, select=select or None, ignore=ignore,
                          allow_devices_in=DEVICE_MODULES + tuple(args.allow_devices_in))
    for finding in findings:
        print(finding.format())
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
