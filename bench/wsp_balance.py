"""Load balance of attn_fwd_wsp's tile schedule, by a model (no GPU needed).

The persistent kernel orders its work tiles as wsp_tile does: (batch, head) pairs cut
into L2 sections, the query tile outer (longest under the causal mask first), the pair
inner.  A tile of n key tiles is given the cost n + ovh (ovh: the tile's fixed cost in
key-tile units: the first S, the last P V, the epilogue).  Printed: how far the most
loaded CTA is over the mean, for the static round robin (CTA x takes tiles x, x + grid,
...), and for list scheduling in the same order (each CTA takes the next tile when it is
free, as a device counter would hand them out).

    python3 bench/wsp_balance.py [--d 64] [--grid 132] [--ovh 1.0]
"""
import argparse
import heapq
import math


def tiles(L, pairs, d, bm=128, bn=128, ovh=1.0, l2=50 << 20):
    """Tile costs in schedule order, causal (launch_wsp's section size for masks)."""
    nm = math.ceil(L / bm)
    group = min(pairs, max(1, (l2 // 2) // (L * d * 4)))
    out = []
    for g0 in range(0, pairs, group):
        for mi in range(nm):
            m = nm - 1 - mi
            n = math.ceil(min(L, (m + 1) * bm) / bn)
            out += [n + ovh] * min(group, pairs - g0)
    return out


def round_robin(costs, grid):
    load = [0.0] * grid
    for t, c in enumerate(costs):
        load[t % grid] += c
    return load


def list_schedule(costs, grid):
    heap = [(0.0, i) for i in range(grid)]
    for c in costs:
        done, i = heapq.heappop(heap)
        heapq.heappush(heap, (done + c, i))
    return [done for done, _ in heap]


def over_mean(load):
    return max(load) / (sum(load) / len(load)) - 1.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--grid", type=int, default=132)
    ap.add_argument("--ovh", type=float, default=1.0)
    a = ap.parse_args()
    h = 2048 // a.d
    print(f"d {a.d}, H {h}, B x L = 16384, grid {a.grid}, tile cost n + {a.ovh}")
    print(f"{'L':>6s} {'tiles':>6s} {'round robin':>12s} {'list':>8s}")
    for L in (512, 1024, 2048, 4096, 8192, 16384):
        c = tiles(L, (16384 // L) * h, a.d, ovh=a.ovh)
        print(f"{L:6d} {len(c):6d} {100 * over_mean(round_robin(c, a.grid)):11.1f}% "
              f"{100 * over_mean(list_schedule(c, a.grid)):7.1f}%")


if __name__ == "__main__":
    main()
