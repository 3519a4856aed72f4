"""Per-kernel times of one SSD backward (ours, the default configuration)
at b8 L4096 H80 P64 N128 chunk 256 bf16, from torch.profiler (CUPTI):
where the time goes.  Run by dev/ssdbwd.sh with PYTHONPATH=python:bench."""
import torch
from torch.profiler import ProfilerActivity, profile

import gpu_ssd_bwd as g

t, dout = g.inputs(8, 4096, 80, 64, 1, 128, torch.bfloat16)
leaves = {k: v.detach().requires_grad_(True) for k, v in t.items()}
lv = [leaves[k] for k in g.NAMES]
out = g.ours_scan(leaves, 256)
for _ in range(2):
    torch.autograd.grad(out, lv, dout, retain_graph=True)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(3):
        torch.autograd.grad(out, lv, dout, retain_graph=True)
    torch.cuda.synchronize()
rows = [(e.key, e.device_time_total / 3 / 1000.0) for e in prof.key_averages() if e.device_time_total > 0]
rows.sort(key=lambda r: -r[1])
for k, ms in rows[:12]:
    print(f"kernel {ms:8.3f} ms  {k[:90]}")
