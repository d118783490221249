"""The one seam for speed paths (vitkit.kernels.swap): swap-ins keep the state dict's keys and the model's sums."""

import copy

import torch

from vitkit.inference import precision
from vitkit.kernels import block_kernels, patch_gemm, short_attention, swap
from vitkit.models import create_model
from vitkit.models.vit import Attention, Block, Mlp


def _plain(model) -> bool:
    return type(model.patch_embed) is torch.nn.Conv2d and all(
        type(b) is Block and type(b.attn) is Attention and type(b.mlp) is Mlp for b in model.blocks
    )


def _every_speed_path(model):
    spy = type("Torch", (), {"attention": None, "bias_gelu_": None})()
    spy.attention = lambda qkv, bias, heads: _reference_attention(qkv, bias, heads)
    spy.bias_gelu_ = lambda h, bias, approximate: torch.nn.functional.gelu(h + bias)
    block_kernels.install(model, spy)
    patch_gemm.install(model)
    swap.swap(model, precision._dense_class_row)
    return model


def _reference_attention(qkv, bias, heads):
    B, T, three_d = qkv.shape
    q, k, v = (qkv + bias).view(B, T, 3, heads, -1).permute(2, 0, 3, 1, 4)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, three_d // 3)


def test_swap_ins_keep_the_keys_and_the_sums_and_unswap_gives_the_model_back():
    torch.manual_seed(0)
    model = create_model("vit_test", num_classes=5).eval()
    torch.nn.init.normal_(model.head.weight)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        want = model(x)
    keys = list(model.state_dict())
    _every_speed_path(model)
    assert not _plain(model) and list(model.state_dict()) == keys
    twin = copy.deepcopy(model)
    with torch.no_grad():
        torch.testing.assert_close(model(x), want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(twin(x), want, atol=1e-5, rtol=1e-5)
    # a checkpoint loads into a model with swap-ins, and the model's own modules see the weights
    state = {k: v + 1 for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    swap.unswap(model)
    assert _plain(model) and not model.training
    torch.testing.assert_close(model.blocks[0].attn.qkv.weight, state["blocks.0.attn.qkv.weight"])


def test_a_swap_for_one_call_leaves_the_model_as_it_was_and_short_attention_is_reported():
    model = short_attention.install(create_model("vit_test"))
    assert all(isinstance(b.attn, short_attention.WrittenOutAttention) for b in model.blocks)
    written_out = [b.attn for b in model.blocks]
    with block_kernels.installed(model, type("K", (), {"attention": staticmethod(_reference_attention)})):
        assert all(isinstance(b.attn, block_kernels.KernelAttention) for b in model.blocks)
        assert all(type(b.mlp) is Mlp for b in model.blocks)
    assert [b.attn for b in model.blocks] == written_out


def test_the_dense_class_row_is_the_same_sums_as_the_block():
    block = create_model("vit_test").blocks[-1].eval()
    dense = swap.adopt(precision._DenseClassRow, block)
    x = torch.randn(3, 17, block.norm1.normalized_shape[0])
    with torch.no_grad():
        assert torch.equal(dense(x, class_token_only=True), block(x, class_token_only=True))
        assert torch.equal(dense(x), block(x))


def test_int8s_graph_is_exported_with_a_dense_class_row_and_the_model_keeps_its_blocks():
    """The graph int8 quantizes copies the class token's row before the residual sum (compiled int8 may write that
    sum into the row's buffer); the model's own blocks read the row in place and come back after the export."""
    model = create_model("vit_test").eval()
    forward = precision._Forward(model, pre_logits=False)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad(), swap.swapped(forward, precision._dense_class_row):
        graph = torch.export.export(forward, (x,)).module()
    assert all(type(b) is Block for b in model.blocks)
    ops = {str(n.target) for n in graph.graph.nodes}
    assert any("clone" in op or "contiguous" in op for op in ops), sorted(ops)
    with torch.no_grad():
        torch.testing.assert_close(graph(x), model(x))
