"""Write part of Fashion-MNIST as an image folder, the layout of a dataset of one's own (README walkthrough):

python scripts/fashion-mnist-folder.py clothes      # clothes/train/<class>/*.png (from the IDX train split)
                                                     # clothes/val/<class>/*.png   (from the IDX test split)
"""

import sys
from pathlib import Path

from PIL import Image

from vitkit.data.sources.idx import FASHION_MNIST_CLASSES, default_dir, load_idx_split

CLASSES = {"T-shirt/top": "t-shirt", "Trouser": "trouser", "Bag": "bag", "Ankle boot": "ankle boot"}
PER_CLASS = {"train": 300, "val": 100}

root = Path(sys.argv[1])
for split, source in (("train", "train"), ("val", "test")):
    images, labels = load_idx_split(default_dir(), source)
    for label, folder in ((FASHION_MNIST_CLASSES.index(name), folder) for name, folder in CLASSES.items()):
        (root / split / folder).mkdir(parents=True, exist_ok=True)
        for i, index in enumerate((labels == label).nonzero()[0][: PER_CLASS[split]]):
            Image.fromarray(images[index]).save(root / split / folder / f"{i:04d}.png")
print(
    f"wrote {root}/train and {root}/val: {len(CLASSES)} classes, {PER_CLASS['train']} + {PER_CLASS['val']} images each"
)
