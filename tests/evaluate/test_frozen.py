"""Frozen-feature evaluations: the few-shot least-squares evaluator, linear probe, k-NN, feature extraction."""

import numpy as np
import pytest
import torch

from vitkit.data import synthetic
from vitkit.evaluate.metrics import (
    extract_features,
    fewshot_eval,
    fewshot_indices,
    knn_predict,
    linear_probe,
    linear_probe_predict,
    lsr_accuracy,
    lsr_weights,
    report_markdown,
    split_features,
)
from vitkit.models import create_model


def reference_lsr(train_x, train_y, test_x, test_y, K, l2=2.0**10):
    """PAPER.md §4 written out in numpy, primal form: standardise, bias 100, targets 2*onehot-1, ridge, argmax."""
    x, t = train_x.numpy().astype(np.float64), test_x.numpy().astype(np.float64)
    mean, std = x.mean(0), x.std(0) + 1e-5  # numpy's std is the population std
    X = np.hstack([(x - mean) / std, np.full((len(x), 1), 100.0)])
    T = np.hstack([(t - mean) / std, np.full((len(t), 1), 100.0)])
    Y = 2.0 * np.eye(K)[train_y.numpy()] - 1.0
    W = np.linalg.solve(X.T @ X + l2 * np.eye(X.shape[1]), X.T @ Y)
    return W, float(((T @ W).argmax(1) == test_y.numpy()).mean())


@pytest.mark.parametrize("n", [200, 12])  # N >= D + 1: primal form; N < D + 1: dual form
def test_lsr_weights_equal_the_direct_solve_in_both_forms(n):
    g = torch.Generator().manual_seed(n)
    x, y = torch.randn(n, 30, generator=g) * 3 + 1, torch.randint(0, 4, (n,), generator=g)
    W_ref, _ = reference_lsr(x, y, x[:1], y[:1], 4)
    _, _, W = lsr_weights(x, y, 4)
    assert W.shape == (31, 4)
    np.testing.assert_allclose(W.numpy(), W_ref, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("n,l2", [(300, 2.0**10), (20, 2.0**10), (40, 1.0)])
def test_lsr_accuracy_matches_the_formula_on_random_data(n, l2):
    g = torch.Generator().manual_seed(7)
    means = torch.randn(5, 16, generator=g)
    y, ty = torch.randint(0, 5, (n,), generator=g), torch.randint(0, 5, (500,), generator=g)
    x, tx = means[y] + torch.randn(n, 16, generator=g), means[ty] + torch.randn(500, 16, generator=g)
    _, expected = reference_lsr(x, y, tx, ty, 5, l2)
    got = lsr_accuracy(x, y, tx, ty, l2_reg=l2)
    assert got == pytest.approx(expected, abs=1e-12)
    assert 0.2 < got < 1.0  # informative features, not a degenerate case


def test_lsr_separable_case_reaches_100_percent():
    g = torch.Generator().manual_seed(0)
    centres = torch.eye(6) * 20  # 6 well-separated clusters in 6-d
    y, ty = torch.arange(6).repeat(5), torch.arange(6).repeat(50)
    x, tx = centres[y] + torch.randn(30, 6, generator=g), centres[ty] + torch.randn(300, 6, generator=g)
    assert lsr_accuracy(x, y, tx, ty) == 1.0  # 5-shot: N = 30 >= D + 1 = 7, primal form
    assert lsr_accuracy(x[:6], y[:6], tx, ty) == 1.0  # 1-shot: N = 6 < 7, dual form


def test_fewshot_indices_per_class_nested_and_seeded():
    labels = torch.arange(10).repeat(30)[torch.randperm(300, generator=torch.Generator().manual_seed(1))]
    five = fewshot_indices(labels, 5, seed=3)
    assert torch.bincount(labels[five], minlength=10).tolist() == [5] * 10
    assert set(fewshot_indices(labels, 1, seed=3).tolist()) <= set(five.tolist())
    assert torch.equal(five, fewshot_indices(labels, 5, seed=3))
    assert not torch.equal(five, fewshot_indices(labels, 5, seed=4))
    with pytest.raises(ValueError, match="fewer than 31 shots"):
        fewshot_indices(labels, 31, seed=0)


def test_extract_features_are_pre_logits_batched_and_in_inference_mode():
    model = create_model("vit_test", representation_size=24, num_classes=3).train()
    images = torch.randint(0, 256, (5, 3, 16, 16), dtype=torch.uint8)
    feats, labels = extract_features(model, [(images[:3], torch.tensor([0, 1, 2])), (images[3:], torch.tensor([1, 1]))])
    assert feats.shape == (5, 24) and labels.tolist() == [0, 1, 2, 1, 1]
    assert feats.abs().max() <= 1.0 and not feats.requires_grad  # after the tanh pre-logits layer, not logits
    model.eval()
    x = (images.float() / 255 - 0.5) / 0.5
    with torch.no_grad():
        torch.testing.assert_close(
            feats, model.forward_head(model.forward_features(x), pre_logits=True), atol=1e-5, rtol=1e-5
        )
    model.train()
    extract_features(model, [(images, torch.zeros(5, dtype=torch.long))])
    assert model.training


def test_linear_probe_and_knn_on_separable_features():
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(3, 6, generator=g) * 5
    y, ty = torch.arange(3).repeat(20), torch.arange(3).repeat(10)
    x, tx = centres[y] + 0.3 * torch.randn(60, 6, generator=g), centres[ty] + 0.3 * torch.randn(30, 6, generator=g)
    probe = linear_probe(x, y, l2=1e-4)
    assert probe[2].shape == (7, 3)
    assert torch.equal(linear_probe_predict(probe, tx), ty)
    assert torch.equal(knn_predict(x, y, tx, k=5), ty)
    assert torch.equal(knn_predict(x, y, tx, k=5, temperature=None, chunk=7), ty)


def test_knn_votes_by_hand():
    bank = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.2, 0.8]])
    labels = torch.tensor([0, 0, 1, 1, 1])
    query = torch.tensor([[1.0, 0.05]])
    assert knn_predict(bank, labels, query, k=1, temperature=None).tolist() == [0]
    assert knn_predict(bank, labels, query, k=5, temperature=None).tolist() == [1]  # 3 votes beat 2
    assert knn_predict(bank, labels, query, k=5, temperature=0.07).tolist() == [0]  # but the near ones weigh more


def test_fewshot_eval_on_a_split_extracts_only_the_drawn_images():
    model = create_model("vit_test", depth=1, image_size=8)
    train, test = synthetic(4, 80, 3, 8, seed=0, split="train"), synthetic(4, 40, 3, 8, seed=0, split="test")
    result = fewshot_eval(model, train, test, shots=[1, 5], seeds=2, batch_size=16)
    assert result["n_train_features"] <= 4 * 5 * 2 and result["n_test"] == 40
    assert set(result["shots"]) == {"1", "5"} and len(result["shots"]["5"]["per_seed"]) == 2
    # the same numbers by hand from the full feature matrices
    x, y = split_features(model, train)
    tx, ty = split_features(model, test)
    for s, acc in enumerate(result["shots"]["5"]["per_seed"]):
        i = fewshot_indices(y, 5, s)
        assert acc == pytest.approx(lsr_accuracy(x[i], y[i], tx, ty, num_classes=4), abs=1e-9)
    table = report_markdown(result, "title")
    assert "| 5 |" in table and "title" in table
