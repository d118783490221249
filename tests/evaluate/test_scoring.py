import torch

from vitkit.evaluate.metrics import confusion_matrix, evaluate, topk_correct
from vitkit.models import create_model


def test_topk_and_confusion_by_hand():
    logits = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.3], [0.2, 0.3, 0.5]])
    labels = torch.tensor([1, 2, 0])
    assert topk_correct(logits, labels, 1).tolist() == [True, False, False]
    assert topk_correct(logits, labels, 2).tolist() == [True, True, False]
    cm = confusion_matrix(logits.argmax(-1), labels, 3)
    assert cm.tolist() == [[0, 0, 1], [0, 1, 0], [1, 0, 0]]


def test_evaluate_counts_and_per_class():
    model = create_model("vit_test", num_classes=3)
    with torch.no_grad():
        model.head.bias.copy_(torch.tensor([0.0, 5.0, 0.0]))  # always predicts class 1
    images = torch.randint(0, 256, (10, 3, 16, 16), dtype=torch.uint8)
    labels = torch.tensor([1, 1, 1, 1, 0, 0, 2, 2, 2, 2])
    result = evaluate(model, [(images[:6], labels[:6]), (images[6:], labels[6:])])
    assert result["n"] == 10
    assert result["top1"] == 0.4
    assert result["per_class"] == [0.0, 1.0, 0.0]
    assert result["top5"] == 1.0  # 3 classes: everything is in the top 5
    assert result["confusion"][0] == [0, 2, 0]
    absent = evaluate(model, [(images[:4], labels[:4])])  # class 1 alone: no image of 0 or 2
    assert absent["per_class"] == [None, 1.0, None] and absent["top1"] == 1.0
