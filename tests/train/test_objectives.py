"""The training objectives' seam: multi-label targets, loss and Mixup; average precision and F1 at a threshold."""

import math

import pytest
import torch

from vitkit.data import mix
from vitkit.data.augment import AugmentConfig
from vitkit.evaluate.metrics import average_precision, multilabel_scores
from vitkit.train.objectives import OBJECTIVES, Classification


def test_multi_label_targets_smooth_toward_one_half_mix_convexly_and_train_by_binary_cross_entropy():
    objective = OBJECTIVES["multi_label"](torch.nn.Identity())
    hot = torch.tensor([[1, 0, 1], [0, 1, 0]], dtype=torch.uint8)
    assert objective.targets(hot, 3, 0.0).tolist() == [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    smoothed = objective.targets(hot, 3, 0.2)  # each label a two-class decision: 1 -> 0.9, 0 -> 0.1
    assert smoothed.flatten().tolist() == pytest.approx([0.9, 0.1, 0.9, 0.1, 0.9, 0.1])
    assert objective.targets(torch.tensor([2, 0]), 3, 0.0).tolist() == [[0, 0, 1], [1, 0, 0]]  # one label: one-hot
    x = torch.stack([torch.zeros(3, 4, 4), torch.ones(3, 4, 4)])
    mixed_x, mixed = mix(x, smoothed, AugmentConfig(mixup=1.0), torch.Generator().manual_seed(3))
    lam = 1.0 - float(mixed_x[0].mean())  # image 0 is lam * zeros + (1 - lam) * ones
    convex = lam * smoothed + (1 - lam) * smoothed.flip(0)
    assert 0.0 < lam < 1.0 and mixed.flatten().tolist() == pytest.approx(convex.flatten().tolist(), rel=1e-5)
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 3.0, -2.0]])
    by_hand = [
        -(t * math.log(1 / (1 + math.exp(-z))) + (1 - t) * math.log(1 - 1 / (1 + math.exp(-z))))
        for z, t in zip(logits.flatten().tolist(), smoothed.flatten().tolist())
    ]
    assert float(objective.loss(logits, smoothed)) == pytest.approx(sum(by_hand) / 6, rel=1e-5)
    classification = Classification(torch.nn.Identity())  # the softmax objective is unchanged: smoothing s/K
    assert classification.targets(torch.tensor([1]), 4, 0.2)[0].tolist() == pytest.approx([0.05, 0.85, 0.05, 0.05])


def test_average_precision_counts_ties_as_one_step_and_f1_counts_every_image_class_pair():
    # ranked 0.9 (yes), 0.8 (no), 0.7 (yes), 0.1 (no): precision 1 at the first hit, 2/3 at the second
    assert average_precision(torch.tensor([0.9, 0.8, 0.7, 0.1]), torch.tensor([1, 0, 1, 0])) == pytest.approx(5 / 6)
    # a tie of a hit and a miss is one threshold: both in at once, precision 1/2 for the one hit
    assert average_precision(torch.tensor([0.5, 0.5]), torch.tensor([1, 0])) == pytest.approx(0.5)
    assert average_precision(torch.tensor([0.3, 0.2]), torch.tensor([0, 0])) is None  # no image has the class
    probs = torch.tensor([[0.9, 0.6, 0.2], [0.4, 0.7, 0.1], [0.8, 0.3, 0.05]])
    truth = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 0]])
    scores = multilabel_scores(probs, truth, threshold=0.5)
    # at 0.5: predicted (0,0) (0,1) (1,1) (2,0); true (0,0) (1,0) (1,1) (2,0): 3 hits, 1 false alarm, 1 missed
    assert (scores["precision"], scores["recall"], scores["f1"]) == pytest.approx((0.75, 0.75, 0.75))
    assert scores["per_class_ap"][0] == pytest.approx(1.0) and scores["per_class_ap"][2] is None
    assert scores["per_class_ap"][1] == pytest.approx(1.0) and scores["map"] == pytest.approx(1.0)  # class 2: no image
