"""The tiny training run the suite's tests share: a one-block ViT on 8x8 synthetic images, a few steps a second.
A test adds what it changes after it (a later override of a key wins): `[*TINY_RUN, "train.steps=4"]`."""

TINY_RUN = [
    "model.name=vit_test",
    "model.depth=1",
    "model.image_size=8",
    "data.name=synthetic",
    "data.synthetic_size=64",
    "train.batch_size=16",
    "train.warmup_steps=2",
    "train.log_every=2",
    "train.eval_every=4",
    "train.checkpoint_every=2",
    "train.progress=false",
    "train.figures=false",  # tests of the figures turn them on
    "augment.crop=pad",
    "augment.pad=1",
    "train.threads=1",
]
