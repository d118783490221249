"""bf16 linears on oneDNN with weights packed once (mkldnn._linear_pointwise) vs F.linear, per shape and whole eager ViT."""
import contextlib, os, statistics, sys, time, torch, torch.nn.functional as F
from vitkit.inference import precision
from vitkit.models import create_model
T = int(os.environ.get("T", os.cpu_count())); torch.set_num_threads(T)
def med(f, n=30):
    f(); ts = []
    for _ in range(n):
        s = time.perf_counter(); f(); ts.append(time.perf_counter() - s)
    return 1e3 * statistics.median(ts)
rows = 1576
for name, d in () if os.environ.get("SKIP_SHAPES") else (("S", 384), ("B", 768)):
    for k, n, act in ((d, 3 * d, "none"), (d, d, "none"), (d, 4 * d, "gelu"), (4 * d, d, "none")):
        x = torch.randn(rows, k, dtype=torch.bfloat16); w = torch.randn(n, k, dtype=torch.bfloat16); b = torch.randn(n, dtype=torch.bfloat16)
        p = torch.ops.mkldnn._reorder_linear_weight(w, rows)
        plain = (lambda: F.gelu(F.linear(x, w, b))) if act == "gelu" else (lambda: F.linear(x, w, b))
        packed = lambda: torch.ops.mkldnn._linear_pointwise(x, p, b, act, [], "tanh" if False else ("none" if act == "gelu" else ""))
        torch.testing.assert_close(packed().float(), plain().float(), atol=0.1, rtol=0.05)
        a, c = [], []
        for _ in range(3):
            a.append(med(plain)); c.append(med(packed))
        print(f"{name} {rows}x{k}->{n} {act:5s} F.linear {min(a):6.3f} ms  packed {min(c):6.3f} ms  ratio {min(a)/min(c):5.2f}x", flush=True)
class BF16Linears(precision.OneDNNLinears):
    calls = 0
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear and not torch.is_grad_enabled():
            x, weight, *rest = args; bias = rest[0] if rest else kwargs.get("bias")
            if x.dtype == weight.dtype == torch.bfloat16 and x.device.type == "cpu" and weight.dim() == 2:
                BF16Linears.calls += 1
                return self.linear(x, weight, bias)
        return func(*args, **kwargs)
xb = torch.randn(8, 3, 224, 224)
for model_name in sys.argv[1:] or ["vit_s16"]:
    r = precision.prepare(create_model(model_name).eval(), "bf16", device="cpu", compile=False)
    mode = BF16Linears()
    if os.environ.get("QUICK"):
        for _ in range(2):
            with mode if os.environ["QUICK"] == "packed" else contextlib.nullcontext():
                r.run_batch(xb)
        continue
    ref = r.run_batch(xb)
    def with_mode():
        with mode:
            return r.run_batch(xb)
    out = with_mode(); print("calls per batch", BF16Linears.calls, "max diff", (out.float() - ref.float()).abs().max().item())
    a, c = [], []
    for _ in range(5):
        a.append(med(lambda: r.run_batch(xb), 10)); c.append(med(with_mode, 10))
    print(f"{model_name} eager bf16 {T} threads: plain {statistics.median(a):6.1f} ms  packed linears {statistics.median(c):6.1f} ms  ratio {statistics.median(a)/statistics.median(c):5.2f}x  rounds {[round(v,1) for v in a]} {[round(v,1) for v in c]}", flush=True)
