// Operations on 16-bit float arrays (fp16 or bf16 bit patterns, uint16_t),
// for the mixed-precision path: conversion to and from fp32, rounding fp32
// data onto the 16-bit grid in place, accumulating fp32 into 16-bit storage,
// elementwise sums (the reduction of a 16-bit collective) and finiteness.
// Every result is rounded to nearest even, as in convert.h.
#pragma once

#include <cstdint>

#include "core/precision/convert.h"

namespace dst {

enum class Half { kFp16, kBf16 };

// "fp16" / "bf16".
const char *HalfName(Half h);

// out[i] = float(in[i]).
void ToFloat(Half h, const uint16_t *in, float *out, int64_t n);
// out[i] = round16(in[i]).
void FromFloat(Half h, const float *in, uint16_t *out, int64_t n);
// x[i] = float(round16(x[i])): fp32 storage holding 16-bit values.
void RoundInPlace(Half h, float *x, int64_t n);
// out[i] = the 16-bit x[i], and x[i] rounded the same way (one pass; out may
// be null): a value stored in 16 bits whose fp32 copy stays in use.
void FromFloatRounding(Half h, float *x, uint16_t *out, int64_t n);
// acc[i] = round16(float(acc[i]) + add[i]).
void AccumulateInto(Half h, const float *add, uint16_t *acc, int64_t n);
// x[i] = round16(float(x[i]) + float(y[i])).
void Sum16(Half h, uint16_t *x, const uint16_t *y, int64_t n);
// Sum of float(x[i])^2 in double; inf or nan if any element is not finite.
double SumOfSquares16(Half h, const uint16_t *x, int64_t n);

}  // namespace dst
