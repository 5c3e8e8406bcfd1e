"""Refuse answers that would generate a broken or dangerous project.

Answers are read as JSON data (the `tojson` filter), never pasted into code, so a
hostile project name cannot run anything here. Every refusal is one `ERROR:` line
and exit code 1; cookiecutter then removes the half-made project folder.
"""

import json
import keyword
import re
import sys

ANSWERS = json.loads(r"""{{ cookiecutter | tojson }}""")

# Names a package must not take: importing the project would shadow these.
DEPENDENCIES = {
    "torch", "torchvision", "tqdm", "numpy", "PIL", "pillow", "matplotlib",
    "pytest", "cookiecutter", "typing_extensions", "triton", "sympy", "jinja2",
    "filelock", "fsspec", "networkx", "setuptools", "pip", "tests", "train",
    "evaluate", "predict", "benchmarks",
}
CHOICES = {
    "backbone": {"resnet18", "resnet50", "mobilenet_v3_small", "efficientnet_b0", "convnext_tiny"},
    "pretrained": {"no", "yes"},
    "default_device": {"auto", "cpu", "cuda", "mps", "xpu"},
    "default_precision": {"fp32", "bf16", "fp16"},
    "multi_gpu": {"none", "dp", "ddp"},
    "scheduler": {"none", "slurm"},
    "tracker": {"csv", "tensorboard", "mlflow", "wandb"},
    "gpu_decode": {"no", "yes"},
    "license": {"MIT", "Apache-2.0", "BSD-3-Clause", "Proprietary"},
}
SLUG = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")


def package_name_problem(name: str) -> str | None:
    """Why `name` cannot be the package's import name, or None when it can."""
    if not (name.isascii() and name.isidentifier()):
        return "is not an ASCII Python identifier"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return "is a Python keyword"
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return "would shadow the standard library module of that name"
    if name.lower() in {d.lower() for d in DEPENDENCIES}:
        return "would shadow a dependency or a file of the project"
    return None


def problems(answers: dict) -> list[str]:
    """Every refusal for these answers, as one-line messages."""
    found = []
    name = answers.get("package_name", "")
    why = package_name_problem(name)
    if why:
        found.append(f"package_name {name!r} {why}; choose e.g. 'image_classifier'")
    slug = answers.get("project_slug", "")
    if not SLUG.match(slug):
        found.append(
            f"project_slug {slug!r} must start with a lowercase letter or digit and "
            "hold only lowercase letters, digits, '-' and '_'"
        )
    for key, allowed in CHOICES.items():
        if answers.get(key) not in allowed:
            found.append(f"{key} {answers.get(key)!r} is not one of {sorted(allowed)}")
    if answers.get("scheduler") == "slurm" and answers.get("multi_gpu") != "ddp":
        # The batch script starts torchrun, which the ddp answer brings; one GPU is --nproc_per_node=1.
        found.append("scheduler 'slurm' needs multi_gpu 'ddp' (its batch script runs torchrun, "
                     "also for one GPU: --nproc_per_node=1)")
    return found


def main() -> int:
    found = problems(ANSWERS)
    if found:
        print(f"ERROR: {found[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
