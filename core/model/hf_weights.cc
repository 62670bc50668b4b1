#include "core/model/hf_weights.h"

#include <algorithm>
#include <set>

#include "core/model/family.h"
#include "core/precision/convert.h"

namespace dst {

namespace {

using HfSource = HfWeights::Source;

std::string ShapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// "a, b, c and 7 more".
std::string NameList(const std::vector<std::string> &names) {
  constexpr size_t kShown = 8;
  std::string s;
  for (size_t i = 0; i < names.size() && i < kShown; ++i)
    s += (i ? ", " : "") + std::string("'") + names[i] + "'";
  if (names.size() > kShown) s += " and " + std::to_string(names.size() - kShown) + " more";
  return s;
}

// Every tensor of the whole model found, shaped and typed as it must be; the
// checkpoint's tensors all used or ignorable. `sources`: by model tensor name.
Status MatchHfTensors(const HfCheckpoint &ckpt, const ModelSpec &spec,
                      const std::vector<ParamDecl> &whole,
                      std::map<std::string, HfSource> *sources) {
  const std::string where = "Hugging Face checkpoint " + ckpt.dir();
  std::vector<std::string> missing;
  std::set<std::string> used;
  for (const ParamDecl &d : whole) {
    const HfTensorName hf = HfTensorOf(spec, d.name);
    HfSource source;
    for (const std::string &name : HfAliases(hf.name))
      if (HfCheckpoint::Tensor t = ckpt.Find(name); t.entry != nullptr) {
        source = {name, t, hf.transposed};
        break;
      }
    if (source.tensor.entry == nullptr) {
      missing.push_back(hf.name);
      continue;
    }
    used.insert(source.file_name);
    const SafetensorsEntry &e = *source.tensor.entry;
    std::vector<int64_t> want = d.global_shape;
    if (hf.transposed) std::reverse(want.begin(), want.end());
    if (e.shape != want)
      return CheckpointError(
          where + ": tensor '" + source.file_name + "' has shape " + ShapeText(e.shape) +
          " but this model's " + (hf.transposed ? "(Conv1D layout [in, out]) " : "") + "is " +
          ShapeText(want) + ": the model spec (config.json) does not describe these weights");
    if (e.dtype != TensorDType::kF32 && e.dtype != TensorDType::kF16 &&
        e.dtype != TensorDType::kBF16)
      return CheckpointError(where + ": tensor '" + source.file_name + "' is " +
                             DTypeName(e.dtype) + "; weights are read from F32, F16 or BF16");
    (*sources)[d.name] = source;
  }
  std::vector<std::string> unexpected;
  for (const std::string &name : ckpt.Names())
    if (!used.count(name) && !HfIgnorable(spec, name)) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty()) {
    std::string msg = where + " does not fit this " + ModelTypeName(spec.type) + " model:";
    if (!missing.empty())
      msg += " it lacks " + std::to_string(missing.size()) + " tensor(s) the model needs (" +
             NameList(missing) + ")";
    if (!unexpected.empty())
      msg += std::string(missing.empty() ? "" : ";") + " it has " +
             std::to_string(unexpected.size()) + " tensor(s) the model does not (" +
             NameList(unexpected) + ")";
    return CheckpointError(msg + ": the model spec (config.json) does not describe these weights");
  }
  return Status::Ok();
}

}  // namespace

Result<HfWeights> HfWeights::Open(const std::string &dir, const ModelSpec &spec,
                                  const std::vector<ParamDecl> &whole) {
  Result<HfCheckpoint> ckpt = HfCheckpoint::Open(dir);
  DST_RETURN_IF_ERROR(ckpt.status());
  HfWeights weights(std::move(ckpt).value());
  DST_RETURN_IF_ERROR(MatchHfTensors(weights.ckpt_, spec, whole, &weights.sources_));
  return weights;
}

Status HfWeights::ReadWhole(const std::string &name, std::vector<float> *out) const {
  auto it = sources_.find(name);
  if (it == sources_.end())
    return InternalError("HfWeights::ReadWhole: no tensor '" + name + "' was matched");
  const HfSource &source = it->second;
  const HfCheckpoint &ckpt = ckpt_;
  const SafetensorsEntry &e = *source.tensor.entry;
  const int64_t n = e.numel();
  out->resize(size_t(n));
  std::vector<float> converted;
  float *dst = source.transposed ? (converted.resize(size_t(n)), converted.data()) : out->data();
  if (e.dtype == TensorDType::kF32) {
    DST_RETURN_IF_ERROR(ckpt.ReadAll(source.tensor, dst));
  } else {
    std::vector<uint16_t> half(static_cast<size_t>(n));
    DST_RETURN_IF_ERROR(ckpt.ReadAll(source.tensor, half.data()));
    if (e.dtype == TensorDType::kF16)
      HalfToFloat(half.data(), dst, n);
    else
      BFloat16ToFloat(half.data(), dst, n);
  }
  if (source.transposed) {  // stored [in, out]
    const int64_t in = e.shape[0], cols = e.shape[1];
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < cols; ++o) (*out)[size_t(o * in + i)] = dst[size_t(i * cols + o)];
  }
  return Status::Ok();
}

}  // namespace dst
