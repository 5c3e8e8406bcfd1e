"""What the template's suite runs where: the answer bakes and the version matrix, and which bake each entry checks.

Every non-default answer's quick tier must run once, and each end of the claimed torch range must run a
generated project's quick tier once. Both are the same kind of run (a bake's `pytest -m "not slow"`), so they
share runs: version entry i runs answer bake i's quick tier in its own environment, and the answer bakes left
over run theirs in the template's own environment (tests/test_baked_runs.py). The default bake's whole suite
runs in the template's environment too. One quick tier per bake, not two: CI's budget is 30 minutes on 2 cores.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helpers import CHOICES, NEEDS, NON_DEFAULT

# The licence answers change only LICENSE and pyproject.toml (test_licence_answers_leave_the_python_alone
# proves it), so running their Python again would repeat the default bake's runs.
CODE_CHANGING = [pair for pair in NON_DEFAULT if pair[0] != "license"]
# The answers are independent choices, so their non-default values pack into as few bakes as the longest choice
# has values: bake i takes each code-changing choice's (i+1)-th non-default value where it has one.
_OTHER_VALUES = {var: values[1:] for var, values in CHOICES.items() if var != "license"}
ANSWER_SETS: list[dict[str, str]] = [
    {var: values[i] for var, values in _OTHER_VALUES.items() if i < len(values)}
    for i in range(max(map(len, _OTHER_VALUES.values())))
]
# An answer that works only beside another (scheduler=slurm needs multi_gpu=ddp) moves to the bake that has it.
for _answers in ANSWER_SETS:
    for (_var, _value), _needs in NEEDS.items():
        if _answers.get(_var) == _value and not _needs.items() <= _answers.items():
            del _answers[_var]
            next(other for other in ANSWER_SETS if _needs.items() <= other.items())[_var] = _value


@dataclass(frozen=True)
class Entry:
    """One environment: a Python, a torch release series, the torchvision built for it, and the bake it checks."""

    python: str
    torch: str
    torchvision: str
    why: str
    answers: dict[str, str] = field(hash=False)
    # another bake whose plugin tests (quick tier) run in this environment too, for a plugin whose code depends on
    # the torch pair: the gpu_decode answer falls back to torchvision's decoder where TorchCodec has no release;
    # fine_tuning's EMA is torch's AveragedModel and foreach kernels
    plugins_of: dict[str, str] = field(default_factory=dict, hash=False)
    timm: str = ""  # a timm release to pin (the [timm] extra's floor); empty: the newest

    def __str__(self) -> str:
        return f"py{self.python}-torch{self.torch}"


MATRIX = [
    # torch 2.4 is the floor: the checkpoint code asks torch.serialization.get_safe_globals() (new in 2.4) what
    # weights_only loading accepts. Python 3.10 is the oldest that the newest torch still had wheels for (2.14).
    # The oldest torch gets the bake whose defaults lean most on version-dependent code (fp16's GradScaler,
    # DDP, the fake-CUDA paths of a cuda default).
    # timm 1.0.22 is the [timm] extra's floor: older releases import names today's huggingface_hub has dropped, so
    # their hub weights never load (and the GPU machine's older timm lacked the test models the suite builds).
    Entry("3.10", "2.4", "0.19", "the oldest torch pair, on the oldest Python", ANSWER_SETS[1],
          plugins_of={"gpu_decode": "yes", "fine_tuning": "yes"}, timm="1.0.22"),
    Entry("3.12", "2.11", "0.26", "the GPU machine's pins", ANSWER_SETS[0]),
    Entry("3.13", "2.15", "0.29", "the newest torch pair, on the newest Python", ANSWER_SETS[3]),
]
OLDEST, NEWEST = MATRIX[0], MATRIX[-1]
# The answer bakes whose quick tier no version entry runs: the template's own environment runs it.
QUICK_ON_MAIN = [answers for answers in ANSWER_SETS if all(answers != entry.answers for entry in MATRIX)]


def bake_id(answers: dict[str, str]) -> str:
    """`defaults` for the default bake, else `var=value,var=value`."""
    return ",".join(f"{var}={value}" for var, value in answers.items()) if answers else "defaults"


# The order xdist's workers take the tests in (conftest.py sorts by these nodeid prefixes; the rest follow in
# their own order). The SLURM and two-node tests are one xdist group ("cluster": they share the machine's
# cluster and namespaces), which xdist hands out first. The default bake's slow tier is the longest single
# run; the worker that takes it queues one more test behind it, so a quick one comes next.
RUN_FIRST = [
    "tests/test_baked_runs.py::test_default_project_suite_passes_after_the_readme_install[slow]",
    "tests/test_baked_runs.py::test_the_answer_sets_cover_every_code_changing_answer",
    "tests/test_versions.py::test_a_generated_project_passes",
    "tests/test_baked_runs.py::test_plugin_slow_tests_pass",  # the ddp bake's plugin tests: 5-7 minutes, not last
    "tests/test_ordinary_changes.py",
    "tests/test_baked_runs.py::test_default_project_suite_passes_after_the_readme_install[quick]",
    "tests/test_baked_runs.py::test_quick_tier_passes",
    "tests/test_template_update.py",
    "tests/test_first_hour.py",
    "tests/test_externally_managed.py",  # uv synced into a fresh clone: a minute or two
    "tests/test_baked_commands.py",
]
