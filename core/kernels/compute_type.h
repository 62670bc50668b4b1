// What a kernel multiplies its operands in, apart from what they are stored
// in (core/zero/storage.h's StorageType): fp32, or bf16 — operands rounded to
// bf16, products accumulated in fp32, results fp32, as PyTorch's bf16
// autocast computes. bf16 training chooses it per CPU (cpu::Bf16Compute).
#pragma once

namespace dst {

enum class ComputeType { kFp32, kBf16 };

}  // namespace dst
