"""`vitkit finetune`: fine-tune any checkpoint on new data with the paper's recipe, sweeping the learning rate."""

from __future__ import annotations

import argparse

from ._frozen import DATA_HELP, numbers

EPILOG = """\
The recipe (paper App. B), the default under any --config: SGD momentum 0.9, no weight decay, global-norm
clipping at 1, a twentieth of the steps of warmup (500 of 10k) then cosine decay. Fitted to the training images
where neither --config nor the command sets them: 5 epochs (--epochs to change; at most 10k steps), a batch of 20
steps an epoch (64..512), the padded shift and flip of `vitkit train --data` for images up to 64 px, else an
Inception crop that keeps a 48-px box (the paper's 5% from 224 px). Validation on the data's val split, else a
held-out 10% of train. The last line compares the picked model with the checkpoint on the same images (where
it classifies the same classes) and warns when fine-tuning made it worse. The model: the checkpoint at --image-size
(position embeddings 2D-interpolated, same patch size, longer sequence). Its head is kept where it was
trained on the data's classes (by name); else, and with --new-head, a zero-initialised head for the data's
classes, the pre-logits layer dropped (official rule) unless --keep-pre-logits.

--lr with several values runs one fine-tune per value (DIR/lr_<value>/) and picks the best final
validation top-1; DIR/final points at the picked model, DIR/sweep.json and sweep.md list every run. Without
--lr (or train.lr=), under 5,000 training images it tries the recipe's rate and a half decade either side
(0.003, 0.01, 0.03), each run as long as one, and picks on val; from 5,000 images, the recipe's one.
Running the same command again continues an interrupted sweep; a sweep stopped by Ctrl-C or SIGTERM picks
nothing (no DIR/final) until every learning rate has finished.

examples:
  vitkit finetune --from ViT-B_16.npz --data ~/cifar10 --image-size 384 --out runs/c10 --config configs/finetune_cifar10.yaml
  vitkit finetune --from runs/demo --config configs/finetune_fashion_mnist.yaml --image-size 42 --lr 0.003,0.01,0.03 --out runs/ft42
  vitkit finetune --from hf-vit/ --data ~/pets --lr 0.001,0.003,0.01,0.03 --steps 500 --micro-batch 64 --out runs/pets
  vitkit eval runs/ft42 --split test                   the picked model
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "finetune",
        help="fine-tune a checkpoint (any format) at a new resolution with the paper's recipe and a learning-rate sweep",
        description="Fine-tune a pre-trained ViT (paper §3.2): a zero-initialised head for new classes, position "
        "embeddings resampled to the new resolution, SGD-momentum recipe, optional learning-rate sweep.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_inputs(p)
    _add_recipe(p)
    p.set_defaults(run=run)


def _add_inputs(p: argparse.ArgumentParser) -> None:
    """The recipe's overrides, the checkpoint, the data, the output and the recipe file."""
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="dotted overrides on the recipe, e.g. train.steps=500 augment.crop=pad",
    )
    p.add_argument(
        "--from",
        dest="checkpoint",
        required=True,
        metavar="CKPT",
        help="checkpoint to start from: vitkit checkpoint or run directory, .npz, timm file, HF directory, or a hub "
        "name (hf-hub:ORG/NAME[@REV], timm's MODEL.TAG)",
    )
    p.add_argument("--data", metavar="PATH", help=DATA_HELP + "; for a recipe file naming none")
    p.add_argument(
        "--out", required=True, metavar="DIR", help="output directory (one run directory per learning rate inside)"
    )
    p.add_argument(
        "--config", metavar="YAML", help="recipe file (configs/finetune_*.yaml) applied over the paper's recipe"
    )


def _add_recipe(p: argparse.ArgumentParser) -> None:
    """The flags that stand for recipe keys: resolution, learning rates, steps, batch."""
    p.add_argument(
        "--image-size",
        type=int,
        nargs="+",
        metavar="PX",
        help="fine-tuning resolution H [W] (default: the recipe's, else the checkpoint's)",
    )
    p.add_argument(
        "--lr",
        type=numbers(float),
        metavar="LR[,LR...]",
        help="learning rate(s); several run a sweep (paper: 0.001,0.003,0.01,0.03; default: the recipe's, "
        "and under 5,000 training images also a half decade either side)",
    )
    p.add_argument("--steps", type=int, help="optimizer steps per run (= train.steps; default: 5 epochs)")
    p.add_argument("--epochs", type=float, help="passes over the training images per run, instead of --steps")
    p.add_argument("--batch-size", type=int, help="logical batch (= train.batch_size, recipe: 512)")
    p.add_argument(
        "--micro-batch", type=int, help="images per forward pass; the logical batch accumulates (= train.micro_batch)"
    )
    p.add_argument(
        "--keep-pre-logits",
        action="store_true",
        help="keep the checkpoint's pre-logits layer (default: dropped, as officially)",
    )
    p.add_argument(
        "--new-head",
        action="store_true",
        help="a new zero-initialised head even where the checkpoint's scores the data's classes (the paper's rule)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    import json

    from vitkit.train.finetune import compared_with_start, sweep_markdown
    from vitkit.train.finetune_setup import finetune_sweep

    result = finetune_sweep(_request(args))
    if "stopped" in result:  # SIGTERM/SIGINT: a checkpoint was saved at the step boundary, nothing picked
        s = result["stopped"]
        print(
            f"stopped at step {s['step']} of {s['steps']} of lr {s['lr']:g} ({s['runs_finished']} of {s['runs']} learning rates "
            f"finished), checkpoint saved; nothing picked yet: run the same command again to continue the sweep"
        )
        print(json.dumps(result))
        return 0
    print(sweep_markdown(result))
    print(f"{'picked' if len(result['runs']) > 1 else 'final'}: {args.out}/final -> {result['best']['run']}/final")
    for line in compared_with_start(result, args.checkpoint):
        print(line)
    print(json.dumps(result))
    return 0


def _request(args: argparse.Namespace):
    """The typed request of the command's arguments (the flags named as its fields, then the ones it types anew)."""
    import dataclasses

    from vitkit.cli import image_size_arg
    from vitkit.train.requests import FinetuneRequest

    same = {f.name for f in dataclasses.fields(FinetuneRequest)} & set(vars(args))
    return FinetuneRequest(
        **{name: getattr(args, name) for name in same - {"overrides", "image_size"}},
        overrides=tuple(args.overrides),
        image_size=image_size_arg(args.image_size),
        lrs=None if args.lr is None else tuple(args.lr),
        progress=not args.no_progress,
    )
