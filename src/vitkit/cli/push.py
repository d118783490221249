"""`vitkit push DIR ORG/NAME`: upload a Hugging Face or timm export folder to the Hugging Face Hub."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "push",
        help="upload a Hugging Face or timm export folder (vitkit convert --to hf|timm) to the Hugging Face Hub",
        description="Upload DIR, as vitkit convert --to hf or --to timm wrote it (model card included), to the hub "
        "repository ORG/NAME, created where missing, through huggingface_hub.upload_folder. The token is Hugging "
        "Face's own: `hf auth login`, or HF_TOKEN. Refused offline (HF_HUB_OFFLINE=1).",
    )
    p.add_argument("folder", metavar="DIR", help="the export folder: config.json, model.safetensors, README.md")
    p.add_argument("repo", metavar="ORG/NAME", help="the hub repository: your user or organisation, then a name")
    p.add_argument("--private", action="store_true", help="create the repository private (where it is new)")
    p.add_argument("--message", default=None, help="the commit message (default: what was uploaded)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vitkit.checkpoint.hub import push

    address = push(args.folder, args.repo, private=args.private, message=args.message)
    print(f"pushed {args.folder} to https://huggingface.co/{args.repo} ({address})")
    return 0
