"""The ``llm-planner`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

R = TypeVar("R", bound="BaseModel")

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llm-planner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the web service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    sub.add_parser(
        "validate",
        help="predicted vs measured on the published kernel, training and serving records",
        add_help=False,
    )
    ranks = sub.add_parser(
        "ranks", help="which GPUs form each TP/CP/DP/PP/EP group (Megatron-LM rank order)"
    )
    for name in ("tp", "pp", "dp", "cp", "ep"):
        ranks.add_argument(f"--{name}", type=int, default=1)
    ranks.add_argument("--etp", type=int, default=None, help="expert TP (default: tp)")
    ranks.add_argument("--gpus-per-node", type=int, default=8)
    ranks.add_argument("--json", action="store_true", help="print the API's JSON")
    comms = sub.add_parser(
        "comms", help="every collective of a training step (a training request as JSON)"
    )
    comms.add_argument("plan", help="a JSON file holding a /api/v1/training/estimate request")
    comms.add_argument("--json", action="store_true", help="print the API's JSON")
    layers = sub.add_parser(
        "layers", help="per-layer modules, shards, saved activations (a training request as JSON)"
    )
    layers.add_argument("plan", help="a JSON file holding a /api/v1/training/estimate request")
    tl = sub.add_parser(
        "timeline",
        help="memory through one step (a training or, with --serving, a serving request)",
    )
    tl.add_argument("plan", help="a JSON file holding a training (or inference) estimate request")
    tl.add_argument("--serving", action="store_true")
    tree = sub.add_parser(
        "tree", help="modules with params, MACs, FLOPs and time of one forward (analytical)"
    )
    tree.add_argument("model", help="a catalog model id or a config.json path")
    tree.add_argument("--seq-len", type=int, default=2048)
    tree.add_argument("--batch-size", type=int, default=1)
    tree.add_argument("--accelerator", default="h100-sxm-80gb")
    tree.add_argument("--precision", default="bf16")
    tree.add_argument("--depth", type=int, default=3)
    plans = sub.add_parser("plans", help="saved plans in the store (DATABASE_URL)")
    plans_sub = plans.add_subparsers(dest="action", required=True)
    plans_list = plans_sub.add_parser("list")
    plans_list.add_argument("--search", default="")
    plans_list.add_argument("--tag", default="")
    plans_list.add_argument("--json", action="store_true")
    plans_show = plans_sub.add_parser("show")
    plans_show.add_argument("id")
    plans_save = plans_sub.add_parser("save")
    plans_save.add_argument("plan", help="a JSON file holding the request")
    plans_save.add_argument("--name", required=True)
    plans_save.add_argument(
        "--kind",
        default="training",
        choices=("training", "inference", "training_sweep", "inference_sweep"),
    )
    plans_save.add_argument("--tag", action="append", default=[])
    plans_save.add_argument("--description", default="")
    plans_delete = plans_sub.add_parser("delete")
    plans_delete.add_argument("id")
    prof = sub.add_parser(
        "profile-modules",
        help="measure each module's forward time on a GPU (forward hooks + CUDA events)",
    )
    prof.add_argument("model", help="a catalog model id or a config.json path")
    prof.add_argument("--seq-len", type=int, default=2048)
    prof.add_argument("--batch-size", type=int, default=1)
    prof.add_argument("--device", default="cuda")
    prof.add_argument("--dtype", default="bfloat16")
    prof.add_argument("--repeats", type=int, default=10)
    prof.add_argument("--top", type=int, default=25)
    args, rest = parser.parse_known_args(argv)
    if args.command == "validate":
        from validation.report import main as validate_main

        return validate_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    command = COMMANDS.get(args.command)
    if command is not None:
        try:
            return command(args)
        except (OSError, ValueError, LookupError) as exc:  # bad input: said in one line
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.command == "serve":
        import uvicorn

        uvicorn.run("app.main:app", host=args.host, port=args.port)
    return 0


def _request(path: str, model: type[R]) -> R:
    """A request body (the API's JSON) read from a file and validated."""
    return model.model_validate_json(Path(path).read_bytes())


def _model(ref: str) -> str | dict[str, Any]:
    """A catalog id, or the config.json at a ``.json`` path."""
    path = Path(ref)
    if path.suffix != ".json":
        return ref
    config = json.loads(path.read_text())
    if not isinstance(config, dict):
        raise ValueError(f"{ref}: a config.json holds a JSON object")
    return config


def _ranks(args: argparse.Namespace) -> int:

    from estimator import Parallelism
    from estimator.ranks import rank_layout

    from .views import rank_layout_out

    p = Parallelism(tp=args.tp, pp=args.pp, dp=args.dp, cp=args.cp, ep=args.ep, etp=args.etp)
    out = rank_layout_out(rank_layout(p, args.gpus_per_node))
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{out['world']} GPUs, {out['gpus_per_node']} per node; order {out['order']}")
    for d in out["dimensions"]:
        if d["size"] == 1:
            continue
        shown = "  ".join("[" + " ".join(g) + "]" for g in d["listed"][:4])
        more = f"  ... ({d['groups']} groups)" if d["groups"] > 4 else ""
        print(f"{d['dimension']:>4}: {d['size']} GPUs, stride {d['stride']}: {shown}{more}")
    return 0


def _comms(args: argparse.Namespace) -> int:

    from .plans import run_comms
    from .schemas.training import TrainingRequest
    from .views import comm_plan_out

    out = comm_plan_out(run_comms(_request(args.plan, TrainingRequest)))
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{out['world']} GPUs, {out['microbatches']} micro-batches per step")
    for e in out["events"]:
        print(
            f"{e['dimension']:>5} {e['collective']:<14} {e['message_bytes'] / 2**20:9.1f} MiB "
            f"x {e['calls_per_iteration']:>7,.0f} over {e['group_size']:>4} GPUs "
            f"({e['nodes_per_group']} node(s)): {e['sent_bytes_per_iteration'] / 2**30:8.2f} GiB "
            f"sent, {e['time_per_iteration_s']:.3f} s; {e['overlap']}"
        )
    print(f"total sent per GPU per step: {out['sent_bytes_per_gpu'] / 2**30:.2f} GiB")
    return 0


def _layers(args: argparse.Namespace) -> int:

    from .plans import run_layers
    from .schemas.training import TrainingRequest

    table = run_layers(_request(args.plan, TrainingRequest))
    for layer in table.layers:
        print(
            f"{layer.kind}: {layer.layers_on_gpu} of {layer.layers_in_model} layers on the GPU, "
            f"{layer.params_per_gpu:,.0f} params and {layer.activation_bytes / 2**20:,.1f} MiB "
            "saved per layer and micro-batch"
        )
        for m in layer.modules:
            shape = " x ".join(map(str, m.shape))
            shard = " x ".join(map(str, m.shard_shape))
            print(
                f"  {m.name:<34} {m.split:<10} {shape:>15} -> {shard:<15} "
                f"{m.params_per_gpu:>14,.0f} params"
            )
    print(f"most-loaded GPU total: {table.memory.total_bytes / 2**30:.2f} GiB")
    return 0


def _tree(args: argparse.Namespace) -> int:

    from .plans import run_tree
    from .schemas.catalog import TreeRequest

    req = TreeRequest(
        model=_model(args.model),
        accelerator=args.accelerator,
        precision=args.precision,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
    )
    _, root = run_tree(req)
    print(f"{'module':<52} {'params':>15} {'GFLOPs':>12} {'time ms':>9}  share of FLOPs")
    for depth, node in root.walk():
        if depth > args.depth:
            continue
        name = "  " * depth + node.name + (f" x{node.repeat}" if node.repeat > 1 else "")
        print(
            f"{name:<52} {node.params:>15,} {node.flops / 1e9:>12,.1f} "
            f"{node.time_s * 1e3:>9.2f}  {node.shares['flops']:6.1%}"
        )
    return 0


def _profile(args: argparse.Namespace) -> int:

    from estimator import model_entry

    from .exact import profile_modules

    model = _model(args.model)
    config = model_entry(model)["config"] if isinstance(model, str) else model
    times = profile_modules(
        config,
        args.seq_len,
        args.batch_size,
        device=args.device,
        dtype=args.dtype,
        repeats=args.repeats,
    )
    print(f"{'module (layers summed)':<50} {'ms per forward':>14}")
    for name, ms in list(times.items())[: args.top]:
        print(f"{name:<50} {ms:>14.3f}")
    return 0


def _timeline(args: argparse.Namespace) -> int:

    from .plans import run_inference_timeline, run_training_timeline
    from .schemas.inference import InferenceRequest
    from .schemas.training import TrainingRequest

    if args.serving:
        timeline = run_inference_timeline(_request(args.plan, InferenceRequest))
    else:
        timeline = run_training_timeline(_request(args.plan, TrainingRequest))
    peak = timeline.peak
    for point in timeline.points:
        mark = "  <- peak" if point is peak else ""
        print(f"{point.label:<48} {point.total_bytes / 2**30:9.2f} GiB{mark}")
    print(f"capacity {timeline.capacity_bytes / 2**30:.2f} GiB; " + " ".join(timeline.notes))
    return 0


def _plans(args: argparse.Namespace) -> int:
    """Saved plans, straight from the store the service uses (same DATABASE_URL)."""

    from fastapi.exceptions import RequestValidationError

    import estimator

    from .api.plans import headline
    from .settings import Settings
    from .store import PlanStore

    store = PlanStore(Settings.from_env().database_url)
    try:
        if args.action == "list":
            plans = store.list(args.search, args.tag)
            if args.json:
                print(json.dumps(plans, indent=1))
                return 0
            for p in plans:
                print(f"{p['id']}  {p['kind']:<15} {p['updated_at'][:19]}  {p['name']}")
            return 0
        if args.action == "show":
            plan = store.get(args.id)
            if plan is None:
                raise LookupError(f"no saved plan {args.id!r}")
            now = headline(plan["kind"], plan["request"])
            print(json.dumps({**plan, "current_result": now}, indent=1))
            return 0
        if args.action == "save":
            request = json.loads(Path(args.plan).read_text())
            result = headline(args.kind, request)
            plan = store.create(
                name=args.name,
                description=args.description,
                tags=args.tag,
                kind=args.kind,
                request=request,
                saved_result=result,
                estimator_version=estimator.__version__,
            )
            print(plan["id"])
            return 0
        if not store.delete(args.id):
            raise LookupError(f"no saved plan {args.id!r}")
        return 0
    except RequestValidationError as exc:  # headline() reports a bad request like the API
        raise ValueError(str(exc.errors())) from None
    finally:
        store.engine.dispose()


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "ranks": _ranks,
    "comms": _comms,
    "layers": _layers,
    "tree": _tree,
    "timeline": _timeline,
    "profile-modules": _profile,
    "plans": _plans,
}


if __name__ == "__main__":
    sys.exit(main())
