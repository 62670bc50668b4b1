#include "core/zero/partition_plan.h"

#include <algorithm>

namespace dst {

StagingLayout PackTensors(const std::vector<ParamDecl> &decls, const std::vector<int> &ids) {
  StagingLayout out;
  for (int id : ids) {
    const ParamDecl &d = decls[size_t(id)];
    out.slots.push_back({id, out.size});
    if (d.numel == 0) continue;
    if (!out.segments.empty() && out.segments.back().end == d.offset)
      out.segments.back().end += d.numel;  // flat-adjacent: one segment
    else
      out.segments.push_back({d.offset, d.offset + d.numel, out.size});
    out.size += d.numel;
  }
  return out;
}

std::vector<int> PersistentTensors(const std::vector<ParamDecl> &decls, int64_t threshold,
                                   const std::vector<bool> &whole, const std::vector<bool> &fp32) {
  std::vector<int> ids;
  for (size_t k = 0; k < decls.size(); ++k) {
    if (k < fp32.size() && fp32[k]) continue;
    if (decls[k].numel <= threshold || (k < whole.size() && whole[k])) ids.push_back(int(k));
  }
  return ids;
}

int64_t PersistentElements(const std::vector<ParamDecl> &decls, int64_t threshold,
                           const std::vector<bool> &whole, const std::vector<bool> &fp32) {
  int64_t total = 0;
  for (int id : PersistentTensors(decls, threshold, whole, fp32)) total += decls[size_t(id)].numel;
  return total;
}

namespace {

// Per tensor: the lowest index of a layer that uses it (backward runs from the
// last layer down, so that layer writes its gradient last), and how many do.
struct Writers {
  std::vector<int> count;
  std::vector<size_t> last;
};

Writers CountWriters(size_t num_tensors, const std::vector<LayerParamUse> &layers) {
  Writers w{std::vector<int>(num_tensors, 0), std::vector<size_t>(num_tensors, 0)};
  for (size_t i = layers.size(); i-- > 0;)
    for (int id : layers[i].ids) {
      ++w.count[size_t(id)];
      w.last[size_t(id)] = i;
    }
  return w;
}

std::vector<int> Select(const std::vector<int> &ids, const std::vector<bool> &excluded) {
  std::vector<int> out;
  for (int id : ids)
    if (!excluded[size_t(id)]) out.push_back(id);
  return out;
}

}  // namespace

PartitionPlan BuildPartitionPlan(const std::vector<ParamDecl> &decls,
                                 const std::vector<LayerParamUse> &layers,
                                 int64_t persistence_threshold, const std::vector<bool> &whole,
                                 const std::vector<bool> &fp32) {
  PartitionPlan plan;
  const Writers writers = CountWriters(decls.size(), layers);
  // Tensors kept in fp32 take no part in staging: "excluded" from everything.
  std::vector<bool> excluded(decls.size(), false);
  std::vector<int> fp32_ids;
  for (size_t k = 0; k < decls.size() && k < fp32.size(); ++k)
    if (fp32[k]) {
      excluded[k] = true;
      fp32_ids.push_back(int(k));
    }
  plan.fp32 = PackTensors(decls, fp32_ids);
  std::vector<bool> shared(decls.size(), false);
  std::vector<int> shared_ids;
  for (size_t k = 0; k < decls.size(); ++k)
    if (writers.count[k] > 1 && !excluded[k]) {
      shared[k] = true;
      shared_ids.push_back(int(k));
    }
  plan.shared = PackTensors(decls, shared_ids);
  plan.shared_after.resize(layers.size());
  for (const TensorSlot &slot : plan.shared.slots) {
    const ParamDecl &d = decls[size_t(slot.id)];
    plan.shared_after[writers.last[size_t(slot.id)]].push_back(
        {d.offset, d.offset + d.numel, slot.staged});
  }
  std::vector<bool> not_staged = excluded;  // gradients: shared or fp32
  for (size_t k = 0; k < decls.size(); ++k) not_staged[k] = not_staged[k] || shared[k];
  for (const LayerParamUse &layer : layers) {
    plan.grads.push_back(PackTensors(decls, Select(layer.ids, not_staged)));
    plan.max_grad_staging = std::max(plan.max_grad_staging, plan.grads.back().size);
  }
  if (persistence_threshold < 0) return plan;

  std::vector<bool> persistent = excluded;  // parameters: persistent or fp32
  const std::vector<int> persistent_ids =
      PersistentTensors(decls, persistence_threshold, whole, fp32);
  for (int id : persistent_ids) persistent[size_t(id)] = true;
  plan.persistent = PackTensors(decls, persistent_ids);
  for (const LayerParamUse &layer : layers) {
    plan.params.push_back(PackTensors(decls, Select(layer.ids, persistent)));
    plan.max_param_staging = std::max(plan.max_param_staging, plan.params.back().size);
  }
  return plan;
}

}  // namespace dst
