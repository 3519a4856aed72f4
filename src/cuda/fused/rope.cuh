/* rope.cuh - the rotary embedding of one (position, pair), shared by the
 * RoPE kernel (rope.cu) and any kernel that rotates keys on the way
 * somewhere else (a paged-cache append).
 *
 * Angles: a = pos * f_i.  The host backends take a in double and its cos
 * and sin in double (seqfuse.h), so a position of 10^5 carries no angle
 * error; an f32 product would be off by pos * 6e-8 radians (6e-3 at 10^5,
 * far past the f32 tolerance).  Here the frequency comes in turns per
 * position, f_i / 2 pi (double), the product and its reduction to the
 * nearest whole turn are done in double (two DFMA-class instructions),
 * and the remaining fraction r in [-1/2, 1/2] goes through sincospif in
 * f32: the angle error is that of rounding r to f32, under 2^-25 turns
 * (2e-7 rad), plus the double product's own rounding (|pos f_i| 2^-53
 * radians, as on the host: 1e-10 rad at a million positions).
 *
 * sf_rope_freq_dev is the device twin of fused_ops.h's sf_rope_freq (theta
 * and the llama3 scaling, in double) for kernels that cannot take a
 * host-made frequency table. */
#ifndef SF_FUSED_ROPE_CUH
#define SF_FUSED_ROPE_CUH

#include <stdint.h>

/* Frequency definition (seqfuse.h, sf_rope_params) in the form a kernel
 * argument block carries. */
struct sf_rope_freq_args {
    double theta;
    int R;        /* rotary dim */
    int llama3;   /* Llama 3.1 scaling */
    double factor, low_freq_factor, high_freq_factor, original_max_position;
};

/* f_i of pair i (0 <= i < R / 2), in radians per position. */
static __device__ __forceinline__ double sf_rope_freq_dev(const sf_rope_freq_args &fa, int i) {
    const double f = pow(fa.theta, -2.0 * (double)i / (double)fa.R);
    if (!fa.llama3) return f;
    const double L = fa.original_max_position, lf = fa.low_freq_factor, hf = fa.high_freq_factor;
    const double w = 2.0 * 3.14159265358979323846 / f;
    if (w < L / hf) return f;
    if (w > L / lf) return f / fa.factor;
    const double s = (L / w - lf) / (hf - lf);
    return (1.0 - s) * f / fa.factor + s * f;
}

/* Turns per position of pair i: f_i / 2 pi. */
static __device__ __forceinline__ double sf_rope_turns_dev(const sf_rope_freq_args &fa, int i) {
    return sf_rope_freq_dev(fa, i) * (0.5 / 3.14159265358979323846);
}

/* (cos a, sin a) for a = 2 pi * pos * turns. */
static __device__ __forceinline__ float2 sf_rope_cs(int64_t pos, double turns) {
    const double u = (double)pos * turns;
    const float r = (float)(u - rint(u));
    float s, c;
    sincospif(2.0f * r, &s, &c);
    return make_float2(c, s);
}

/* The rotation of one pair (x1, x2) by the angle whose (cos, sin) is cs:
 * x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin (f32). */
static __device__ __forceinline__ void sf_rope_rotate(float &x1, float &x2, float2 cs) {
    const float a = x1, b = x2;
    x1 = fmaf(a, cs.x, -b * cs.y);
    x2 = fmaf(b, cs.x, a * cs.y);
}

/* Both in one: pair (x1, x2) of a token at position pos. */
static __device__ __forceinline__ void sf_rope_pair(float &x1, float &x2, int64_t pos, double turns) {
    sf_rope_rotate(x1, x2, sf_rope_cs(pos, turns));
}

#endif
