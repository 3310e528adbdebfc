"""The ``llm-planner`` command line: the service, the REST API's estimates and sweeps (the same
request body as JSON, flags for the common fields), saved plans and the deep dives.

Tables by default, ``--json`` for exactly the API's answer, ``--csv`` for sweep rows or an
estimate as key,value rows. Bad input exits with status 2 and one line naming the field and rule.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import logging.config
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from app import format as fmt

if TYPE_CHECKING:  # pydantic is imported by the commands that validate a request
    from pydantic import BaseModel

R = TypeVar("R", bound="BaseModel")

__all__ = ["main"]


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of integers") from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


# Flags that fill or override one field of the request body: (flag, field path, type, help),
# read off the request models (``schemas.fields``): every field the API takes has its flag.
Flag = tuple[str, str, Callable[[str], Any], str]


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: true or false")


def flags_of(model: type[BaseModel]) -> tuple[Flag, ...]:
    """A flag for each field of ``model`` (nested mappings such as ``prices`` come in the
    request file only)."""
    from app.schemas.fields import leaves

    parsers: dict[str, Callable[[str], Any]] = {
        "int": int,
        "intselect": int,
        "float": float,
        "ints": _ints,
        "multi": _names,
        "bool": _bool,
    }
    out = []
    for leaf in leaves(model):
        if leaf.kind == "object":
            continue
        parse = parsers.get(leaf.kind, str)
        literal = {str(v): v for v in leaf.values}
        if leaf.kind == "select" and any(not isinstance(v, str) for v in literal.values()):
            parse = literal.__getitem__  # a choice of True, say: the value, not its name
        text = (
            "a catalog model id, a Hugging Face id (org/name[@revision]) or a config.json path"
            if leaf.path == "model"
            else leaf.help
        )
        out.append((leaf.flag, leaf.path, parse, text))
    return tuple(out)


def _request_parser(
    sub: Any, name: str, help: str, flags: Iterable[Flag], csv: str
) -> argparse.ArgumentParser:
    """A command that reads a request body: a JSON file (``-``: stdin), flags laid over it,
    and the output format."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help)
    parser.add_argument(
        "plan", nargs="?", help="a JSON file holding the API's request body (-: stdin)"
    )
    seen = set()
    for flag, field, kind, text in flags:
        if flag not in seen:
            seen.add(flag)
            # argparse formats help with %: a field's own "5%" must reach it as "5%%"
            help_text = text.replace("%", "%%") if text else None
            parser.add_argument(flag, dest=field, type=kind, help=help_text)
    _output_flags(parser, csv)
    return parser


def _output_flags(parser: argparse.ArgumentParser, csv: str) -> None:
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print exactly the API's JSON")
    out.add_argument("--csv", action="store_true", help=csv)


def _request_models(command: str) -> tuple[type[BaseModel], ...]:
    """The request models whose fields are a request command's flags."""
    if command == "train":
        from app.schemas.training import TrainingRequest

        return (TrainingRequest,)
    if command == "infer":
        from app.schemas.inference import InferenceRequest

        return (InferenceRequest,)
    from app.schemas.sweep import ServingSweepRequest, TrainingSweepRequest

    return (TrainingSweepRequest, ServingSweepRequest)


def _request_flags(command: str, chosen: str | None) -> tuple[Flag, ...]:
    """``command``'s flags when it is the command given (``chosen``), else none."""
    if command != chosen:
        return ()
    return tuple(flag for model in _request_models(command) for flag in flags_of(model))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llm-planner", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve", help="start the web service (settings from the environment: docs/deployment.md)"
    )
    serve.add_argument("--host", help="default PLANNER_HOST, else 127.0.0.1")
    serve.add_argument("--port", type=int, help="default PLANNER_PORT, else 8000")
    sub.add_parser(
        "migrate", help="bring the plan store (DATABASE_URL) to the latest schema revision"
    )
    # Only the command that runs gets its request's flags: reading them builds its request
    # models (pydantic), which neither --help nor the other commands need.
    given = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in given if not a.startswith("-")), None)
    estimate_csv = "print the answer as key,value rows"
    _request_parser(
        sub,
        "train",
        "a training plan's memory, step time, throughput and cost",
        _request_flags("train", chosen),
        estimate_csv,
    )
    _request_parser(
        sub,
        "infer",
        "a serving replica's memory, TTFT/TPOT, throughput and cost",
        _request_flags("infer", chosen),
        estimate_csv,
    )
    sweep = _request_parser(
        sub,
        "sweep",
        "every training layout (or, with --serving, serving replica) of a space",
        _request_flags("sweep", chosen),
        "print every listed row as CSV",
    )
    sweep.add_argument("--serving", action="store_true", help="a serving sweep")
    model = sub.add_parser(
        "import-model", help="a config.json (or catalog id) read into the spec and exact counts"
    )
    model.add_argument("config", help="a config.json path (-: stdin) or a catalog model id")
    _output_flags(model, estimate_csv)
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
    from app.resolve import SweepTimeout

    if args.command != "serve":  # the server's log lines are JSON already
        sys.stdout, sys.stderr = Printable(sys.stdout), Printable(sys.stderr)
    try:
        return COMMANDS[args.command](args)
    except (OSError, ValueError, LookupError) as exc:  # bad input: said in one line
        print(f"error: {_message(exc)}", file=sys.stderr)
        return 2
    except SweepTimeout as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


# Terminal control characters (C0 but tab and newline, DEL, C1: ESC starts the sequences that
# move the cursor, retitle the window or write to the clipboard), as a plan's name may hold.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class Printable:
    """A text stream that writes control characters as visible escapes (``\x1b``): what a
    saved plan's or a team entry's name holds is printed, never obeyed by the terminal."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _message(exc: Exception) -> str:
    """Bad input in one line, naming the field and the rule as the API's 422 and 404 do."""
    from pydantic import ValidationError

    from estimator.errors import UnknownIdError

    if isinstance(exc, ValidationError):
        return _errors_line(exc.errors())
    if isinstance(exc, UnknownIdError):
        near = difflib.get_close_matches(exc.ident, exc.known, n=5, cutoff=0.3)
        return f"{exc.kind}: unknown {exc.kind} id {exc.ident!r}" + (
            f"; nearest: {', '.join(near)}" if near else ""
        )
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def _errors_line(errors: Iterable[Mapping[str, Any]]) -> str:
    """pydantic's errors as ``field=value: rule; ...`` (the first five)."""
    from app.service.errors import field_path

    said = []
    for e in errors:
        field = field_path(tuple(e.get("loc", ())))
        value = e.get("input")
        if e.get("type") != "missing" and isinstance(value, str | int | float):
            field += f"={value!r}"
        said.append(f"{field}: {e.get('msg', 'invalid')}")
    return "; ".join(list(dict.fromkeys(said))[:5])


def _read_json(source: str) -> Any:
    """The JSON in a file, or on stdin for ``-``."""
    text = sys.stdin.read() if source == "-" else Path(source).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        name = "stdin" if source == "-" else source
        raise ValueError(f"{name}: not valid JSON: {exc}") from None


def _request(source: str | None, model: type[R], fields: Mapping[str, Any] | None = None) -> R:
    """A request body (the API's JSON) from a file or stdin, with ``fields`` (dotted paths)
    laid over it, validated as the API validates its body."""
    body = {} if source is None else _read_json(source)
    if not isinstance(body, dict):
        raise ValueError(f"{source}: must hold a JSON object (the request body)")
    for path, value in (fields or {}).items():
        *parents, last = path.split(".")
        node = body
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"{key}: must be a JSON object")
        node[last] = value
    return model.model_validate_json(json.dumps(body))


def _flags(
    args: argparse.Namespace, flags: Iterable[Flag], others: Iterable[Flag] = ()
) -> dict[str, Any]:
    """The request fields the flags of ``flags`` gave; a flag of ``others`` (another kind of
    request on the same command) is refused by name."""
    given = {}
    mine = set()
    for flag, field, _, _ in flags:
        mine.add(flag)
        value = getattr(args, field)
        if value is not None:
            given[field] = _model(value) if field == "model" else value
    for flag, field, _, _ in others:
        if flag not in mine and getattr(args, field) is not None:
            raise ValueError(f"{flag}: not an input of this kind of request")
    return given


def _from_args(args: argparse.Namespace, model: type[R], other: type[BaseModel] | None = None) -> R:
    """The command's request: its file (or stdin) with its flags laid over it; a flag of
    ``other`` (the other kind of request the command takes) is refused by name."""
    others = flags_of(other) if other is not None else ()
    return _request(args.plan, model, _flags(args, flags_of(model), others))


def _model(ref: str) -> str | dict[str, Any]:
    """A catalog id, or the config.json at a ``.json`` path (``-``: stdin)."""
    if ref != "-" and Path(ref).suffix != ".json":
        return ref
    config = _read_json(ref)
    if not isinstance(config, dict):
        raise ValueError(f"{ref}: a config.json holds a JSON object")
    return config


def _print(args: argparse.Namespace, out: Any, text: Callable[[Any], str]) -> int:
    """The answer as a table, the API's JSON (``--json``) or key,value rows (``--csv``)."""
    from app.cli.tables import flat_csv

    if args.json:
        print(json.dumps(out, indent=1, allow_nan=False))
    elif args.csv:
        sys.stdout.write(flat_csv(out))
    else:
        print(text(out))
    return 0


def _serve(args: argparse.Namespace) -> int:
    """The service under uvicorn, as the image runs it: the store's migrations applied once, then
    the workers with settings from the environment (the flags override host and port), JSON log
    lines on stderr, graceful shutdown on SIGTERM."""
    import signal

    import uvicorn

    from app.service.operations import log_config
    from app.service.server import server_options
    from app.settings import Settings, current

    # The flags override the environment, for the workers' own settings too (the app decides
    # from PLANNER_HOST whether writes need a token and which Host names it answers).
    if args.host:
        os.environ["PLANNER_HOST"] = args.host
    if args.port:
        os.environ["PLANNER_PORT"] = str(args.port)
    current.cache_clear()
    s = Settings.from_env()
    logging.config.dictConfig(log_config(s.log_level))
    _migrate(args)  # once, here: workers that each migrate a fresh database at once collide
    if not s.on_loopback and s.api_token is None:
        logging.getLogger("llm_planner").warning(
            "listening on %s without PLANNER_API_TOKEN: every write is refused; set "
            "PLANNER_API_TOKEN to a secret (e.g. openssl rand -hex 32) to allow them",
            s.host,
        )
    # uvicorn finishes the requests in flight on SIGTERM/SIGINT, then raises the signal again so
    # the process ends by it; a stop that was asked for and completed is a success (exit 0).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    uvicorn.run(
        "app.main:app",
        **server_options(s),
        log_config=log_config(s.log_level),
        access_log=False,
    )
    return 0


def _migrate(_: argparse.Namespace) -> int:
    """The plan store's schema at the latest revision (``serve`` applies it before the workers
    start; each worker's own check at start-up is then a no-op)."""
    from app.settings import Settings
    from app.store.plans import make_engine, migrate

    engine = make_engine(Settings.from_env().database_url)
    try:
        migrate(engine)
    finally:
        engine.dispose()
    logging.getLogger("llm_planner").info("plan store at the latest schema revision")
    return 0


def _train(args: argparse.Namespace) -> int:

    from app.answers import training_answer
    from app.cli.tables import training_text
    from app.schemas.training import TrainingRequest

    req = _from_args(args, TrainingRequest)
    return _print(args, training_answer(req), training_text)


def _infer(args: argparse.Namespace) -> int:

    from app.answers import inference_out
    from app.cli.tables import serving_text
    from app.resolve import run_inference
    from app.schemas.inference import InferenceRequest

    req = _from_args(args, InferenceRequest)
    return _print(args, inference_out(req, *run_inference(req)), serving_text)


def _sweep(args: argparse.Namespace) -> int:
    """A training sweep, or with ``--serving`` a serving sweep; ``--csv`` lists every listed
    row as the API's ``?format=csv`` does."""
    from app.answers import (
        rows_csv,
        serving_sweep_out,
        serving_sweep_rows,
        training_sweep_out,
        training_sweep_rows,
    )
    from app.api.training import check_csv_rows
    from app.cli.tables import serving_sweep_text, training_sweep_text
    from app.resolve import run_serving_sweep, run_training_sweep
    from app.schemas.sweep import (
        ServingSweepRequest,
        ServingSweepRow,
        TrainingSweepRequest,
        TrainingSweepRow,
    )

    if args.serving:
        serving = _from_args(args, ServingSweepRequest, TrainingSweepRequest)
        served = run_serving_sweep(serving)
        if args.csv:
            listed = serving_sweep_rows(served, serving)
            sys.stdout.write(rows_csv(listed, list(ServingSweepRow.model_fields)))
            return 0
        out = serving_sweep_out(served, serving).model_dump(mode="json")
        return _print(args, out, serving_sweep_text)
    req = _from_args(args, TrainingSweepRequest, ServingSweepRequest)
    result = run_training_sweep(req)
    if args.csv:
        check_csv_rows(result.counts["feasible"] if req.rows == "feasible" else len(result))
        text = rows_csv(training_sweep_rows(result, req), list(TrainingSweepRow.model_fields))
        sys.stdout.write(text)
        return 0
    return _print(
        args, training_sweep_out(result, req).model_dump(mode="json"), training_sweep_text
    )


def _import_model(args: argparse.Namespace) -> int:
    """What ``POST /api/v1/models/import`` answers for a config.json, or ``GET
    /api/v1/models/{id}`` for a catalog id."""
    from app.answers import model_out
    from app.cli.tables import model_text
    from app.resolve import resolve_model
    from estimator import get_model, model_entry

    ref = _model(args.config)
    if isinstance(ref, str):
        out = model_out(get_model(ref), model_entry(ref))
    else:
        out = model_out(resolve_model(ref, "config"), {"config": ref})
    return _print(args, out.model_dump(mode="json"), model_text)


def _ranks(args: argparse.Namespace) -> int:

    from app.answers import rank_layout_out
    from estimator import Parallelism
    from estimator.layout.ranks import rank_layout

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

    from app.answers import comm_plan_out
    from app.resolve import run_comms
    from app.schemas.training import TrainingRequest

    out = comm_plan_out(run_comms(_request(args.plan, TrainingRequest)))
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{out['world']} GPUs, {out['microbatches']} micro-batches per step")
    for e in out["events"]:
        sent = fmt.gib(e["sent_bytes_per_iteration"], 2, unit=False)
        print(
            f"{e['dimension']:>5} {e['collective']:<14} {e['message_bytes'] / 2**20:9.1f} MiB "
            f"x {e['calls_per_iteration']:>7,.0f} over {e['group_size']:>4} GPUs "
            f"({e['nodes_per_group']} node(s)): {sent:>8} GiB "
            f"sent, {e['time_per_iteration_s']:.3f} s; {e['overlap']}"
        )
    print(f"total sent per GPU per step: {fmt.gib(out['sent_bytes_per_gpu'], 2)}")
    return 0


def _layers(args: argparse.Namespace) -> int:

    from app.resolve import run_layers
    from app.schemas.training import TrainingRequest

    table = run_layers(_request(args.plan, TrainingRequest))
    for layer in table.layers:
        print(
            f"{layer.kind}: {layer.layers_on_gpu} of {layer.layers_in_model} layers on the GPU, "
            f"{layer.params_per_gpu:,.0f} params to compute with"
            + (
                f" ({layer.resident_params_per_gpu:,.0f} kept between uses, ZeRO-3)"
                if layer.resident_params_per_gpu < layer.params_per_gpu
                else ""
            )
            + f" and {layer.activation_bytes / 2**20:,.1f} MiB saved per layer and micro-batch"
        )
        for m in layer.modules:
            shape = " x ".join(map(str, m.shape))
            shard = " x ".join(map(str, m.shard_shape))
            print(
                f"  {m.name:<34} {m.split:<10} {shape:>15} -> {shard:<15} "
                f"{m.params_per_gpu:>14,.0f} params {m.resident_params_per_gpu:>14,.0f} resident"
            )
    print(f"most-loaded GPU total: {fmt.gib(table.memory.total_bytes, 2)}")
    return 0


def _tree(args: argparse.Namespace) -> int:

    from app.resolve import run_tree
    from app.schemas.catalog import TreeRequest

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

    from app.service.exact import profile_modules
    from estimator import model_entry

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

    from app.resolve import run_inference_timeline, run_training_timeline
    from app.schemas.inference import InferenceRequest
    from app.schemas.training import TrainingRequest

    if args.serving:
        timeline = run_inference_timeline(_request(args.plan, InferenceRequest))
    else:
        timeline = run_training_timeline(_request(args.plan, TrainingRequest))
    peak = timeline.peak
    for point in timeline.points:
        mark = "  <- peak" if point is peak else ""
        print(f"{point.label:<48} {fmt.gib(point.total_bytes, 2, unit=False):>9} GiB{mark}")
    print(f"capacity {fmt.gib(timeline.capacity_bytes, 2)}; " + " ".join(timeline.notes))
    return 0


def _plans(args: argparse.Namespace) -> int:
    """Saved plans, straight from the store the service uses (same DATABASE_URL), under the
    API's rules (``api.plans``: evaluated first, the size cap, the team entries it uses)."""

    from fastapi import HTTPException
    from fastapi.exceptions import RequestValidationError

    from app.service.errors import refusal_text
    from app.settings import Settings
    from app.store import catalog as team
    from app.store.plans import PlanStore
    from app.store.saving import reopened, save_plan
    from app.store.team import TeamStore

    settings = Settings.from_env()
    store = PlanStore(settings.database_url)
    try:
        with team.using(TeamStore(store.engine)):
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
                print(json.dumps(reopened(plan), indent=1))
                return 0
            if args.action == "save":
                plan = save_plan(
                    store,
                    args.name,
                    args.description,
                    args.tag,
                    args.kind,
                    _read_json(args.plan),
                    settings.max_plan_bytes,
                )
                print(plan["id"])
                return 0
            if not store.delete(args.id):
                raise LookupError(f"no saved plan {args.id!r}")
            return 0
    except RequestValidationError as exc:  # save_plan reports a bad request like the API
        raise ValueError(_errors_line(exc.errors())) from None
    except HTTPException as exc:  # the size cap, a team entry deleted meanwhile
        raise ValueError(refusal_text(exc)) from None
    finally:
        store.engine.dispose()


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _serve,
    "migrate": _migrate,
    "train": _train,
    "infer": _infer,
    "sweep": _sweep,
    "import-model": _import_model,
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
