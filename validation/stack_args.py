"""The argument names of the training stacks a plan's job configuration is written for, read
from each stack's source at a pinned commit into ``tests/data/stack_args.json`` (the vendored
snapshot ``tests/test_training_jobs.py`` checks every emitted name against, offline).

Read statically (``ast``), never imported or executed:

- Megatron-LM ``megatron/training/arguments.py``: every ``--flag`` string passed to an
  ``add_argument`` call, and the flags ``ArgumentGroupFactory(ConfigClass, exclude=[...])``
  generates from a config dataclass (``megatron/training/argument_utils.py``: ``--`` plus the
  field name with ``_`` as ``-``, or the field's ``argparse_meta`` ``arg_names``), the class's
  fields and its dataclass bases', less ``exclude``.
- TorchTitan: the fields of the sections of ``Trainer.Config`` the job sets
  (``torchtitan/config/configs.py`` ``TrainingConfig``, ``ParallelismConfig``; the checkpoint
  manager's ``Config`` in ``torchtitan/components/checkpointer/{base,dcp}.py``), as the CLI
  overrides ``--<section>.<field>`` tyro builds from them, and the ``--module`` / ``--config``
  the config manager reads first (``torchtitan/config/manager.py``).
- DeepSpeed: the config keys, the string constants of ``deepspeed/runtime/constants.py`` and
  ``deepspeed/runtime/zero/config.py`` (``ZERO_OPTIMIZATION``) and the fields of the ZeRO
  config model (that module's ``DeepSpeedZeroConfig``, ``offload_config.py``'s offload models).

Run: ``python -m validation.stack_args MIRROR_DIR`` where ``MIRROR_DIR`` holds git mirrors as
``NVIDIA+Megatron-LM/repo``, ``pytorch+torchtitan/repo``, ``deepspeedai+DeepSpeed/repo``.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "stack_args.json"


def _show(repo: Path, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"HEAD:{path}"], check=True, capture_output=True,
        text=True,
    ).stdout  # fmt: skip


def _head(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}


def _fields(cls: ast.ClassDef) -> dict[str, list[str]]:
    """A dataclass body's annotated fields and any ``--`` names in their ``field(...)``."""
    out: dict[str, list[str]] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            inner = [] if node.value is None else list(ast.walk(node.value))
            names = [
                c.value for c in inner
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
                and c.value.startswith("--")
            ]  # fmt: skip
            out[node.target.id] = names
    return out


def megatron(repo: Path) -> dict[str, object]:
    source = _show(repo, "megatron/training/arguments.py")
    tree = ast.parse(source)
    flags = set()
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "add_argument":
            for a in call.args:
                if isinstance(a, ast.Constant) and str(a.value).startswith("--"):
                    flags.add(str(a.value))
    # The config modules the factory reads, parsed once each: every class by name.
    classes: dict[str, ast.ClassDef] = {}
    for path in _config_modules(repo):
        classes.update(_classes(ast.parse(_show(repo, path))))
    for call in ast.walk(tree):
        if (
            isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id == "ArgumentGroupFactory" and call.args
            and isinstance(call.args[0], ast.Name)
        ):  # fmt: skip
            excluded = set()
            for kw in call.keywords:
                if kw.arg == "exclude" and isinstance(kw.value, ast.List):
                    excluded = {str(e.value) for e in kw.value.elts if isinstance(e, ast.Constant)}
            for name, names in _class_fields(classes, call.args[0].id).items():
                if name not in excluded:
                    flags.update(names or ["--" + name.replace("_", "-")])
    version = _megatron_version(_show(repo, "megatron/core/package_info.py"))
    return {
        "repo": "NVIDIA/Megatron-LM", "commit": _head(repo), "version": version,
        "paths": ["megatron/training/arguments.py", "megatron/training/argument_utils.py"],
        "names": sorted(flags),
    }  # fmt: skip


def _config_modules(repo: Path) -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "HEAD", "megatron"],
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    return [p for p in listed if p.endswith("config.py") or p.endswith("_config.py")]


def _class_fields(classes: dict[str, ast.ClassDef], name: str) -> dict[str, list[str]]:
    cls = classes.get(name)
    if cls is None:
        return {}
    out: dict[str, list[str]] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name):
            out.update(_class_fields(classes, base.id))
    out.update(_fields(cls))
    return out


def _megatron_version(source: str) -> str:
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    values[t.id] = node.value.value
    major, minor, patch = (values[k] for k in ("MAJOR", "MINOR", "PATCH"))
    return f"{major!s}.{minor!s}.{patch!s}{values.get('PRE_RELEASE', '')!s}"


def torchtitan(repo: Path) -> dict[str, object]:
    sections = {
        "training": ("torchtitan/config/configs.py", "TrainingConfig"),
        "parallelism": ("torchtitan/config/configs.py", "ParallelismConfig"),
    }
    names = set()
    for section, (path, cls_name) in sections.items():
        for field in _fields(_classes(ast.parse(_show(repo, path)))[cls_name]):
            names.add(f"--{section}.{field}")
    for path in ("torchtitan/components/checkpointer/base.py",
                 "torchtitan/components/checkpointer/dcp.py"):  # fmt: skip
        tree = ast.parse(_show(repo, path))
        for cls in _classes(tree).values():
            if cls.name == "Config":
                names.update(f"--checkpoint.{f}" for f in _fields(cls))
    # --module and --config, which the config manager reads before the CLI overrides
    for node in ast.walk(ast.parse(_show(repo, "torchtitan/config/manager.py"))):
        if isinstance(node, ast.Constant) and re.fullmatch(r"--[a-z]+", str(node.value)):
            names.add(str(node.value))
    version = _show(repo, "assets/version.txt").strip()
    return {
        "repo": "pytorch/torchtitan", "commit": _head(repo), "version": version,
        "paths": [p for p, _ in sections.values()]
        + ["torchtitan/components/checkpointer", "torchtitan/config/manager.py"],
        "names": sorted(names),
    }  # fmt: skip


def deepspeed(repo: Path) -> dict[str, object]:
    keys = set()
    for path in ("deepspeed/runtime/constants.py", "deepspeed/runtime/zero/config.py"):
        for node in ast.parse(_show(repo, path)).body:  # the modules' key constants
            value = node.value if isinstance(node, ast.Assign) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                keys.add(value.value)
    for path, cls_name in (
        ("deepspeed/runtime/zero/config.py", "DeepSpeedZeroConfig"),
        ("deepspeed/runtime/zero/offload_config.py", "DeepSpeedZeroOffloadOptimizerConfig"),
        ("deepspeed/runtime/zero/offload_config.py", "DeepSpeedZeroOffloadParamConfig"),
    ):
        prefix = "zero_optimization." + ("" if "Zero" in cls_name and "Offload" not in cls_name
                                         else "offload.")  # fmt: skip
        keys.update(prefix + f for f in _fields(_classes(ast.parse(_show(repo, path)))[cls_name]))
    version = _show(repo, "version.txt").strip()
    return {
        "repo": "deepspeedai/DeepSpeed", "commit": _head(repo), "version": version,
        "paths": ["deepspeed/runtime/constants.py", "deepspeed/runtime/zero/config.py",
                  "deepspeed/runtime/zero/offload_config.py"],
        "names": sorted(keys),
    }  # fmt: skip


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    snapshot = {
        "about": __doc__.splitlines()[0] if __doc__ else "",
        "megatron": megatron(root / "NVIDIA+Megatron-LM" / "repo"),
        "torchtitan": torchtitan(root / "pytorch+torchtitan" / "repo"),
        "deepspeed": deepspeed(root / "deepspeedai+DeepSpeed" / "repo"),
    }
    OUT.write_text(json.dumps(snapshot, indent=1) + "\n")
    for stack, entry in snapshot.items():
        if isinstance(entry, dict):
            print(stack, entry["version"], str(entry["commit"])[:10], len(entry["names"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
