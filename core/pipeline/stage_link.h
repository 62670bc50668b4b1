// StageLink: what one pipeline rank exchanges with its neighbours during a
// step — activations forward, their gradients backward — and with every
// stage at its end (the loss, the gradient norm, the tied weights).
//
// Virtual stage s = c * p + r runs model chunk c on pp rank r (Megatron's
// interleaving; c = 0 without it). It receives activations from s - 1 and
// sends them to s + 1; gradients flow the other way. Receives are waited for
// where the program puts them (the schedule checker proved every one has its
// send); sends are posted and waited for before the step's reductions, their
// buffers recycled as they complete. Every buffer comes from a pool that
// grows to the schedule's peak in the first step, so later steps allocate
// nothing. Tags name the kind, the receiving virtual stage and the
// micro-batch, so a message can only land where it belongs.
//
// On a device the buffers are device memory and the messages travel over
// the group's device (NCCL) connections, whose sends and receives run in
// stream order and match by order, not tag: nothing is posted ahead. The
// sends and receives the program lists between two computations are
// collected and posted as one exchange (EndExchange; an order
// core/pipeline/exchange_order.h proved cannot hang or cross), and the
// compute stream waits for it without the host blocking.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/common/status.h"
#include "core/kernels/step_kernels.h"
#include "core/runtime/memory.h"

namespace dst {

// One model chunk as the link sees it.
struct ChunkShape {
  int64_t in_width = 0;   // width of the activations entering it (received unless virtual stage 0)
  int64_t out_width = 0;  // width of what it sends on (unless it is the last virtual stage)
};

// Seconds spent in the link during one step (DeepSpeed's pipeline timers).
struct PipeTimes {
  double send_output = 0, recv_input = 0, send_grad = 0, recv_grad = 0;
};

class StageLink {
 public:
  // `p2p`: the pipeline group's connections for sends and receives only
  // (rank = stage; ProcessGroups::pp_p2p), `pp`: the same members for the
  // step's collectives; `chunks`: this rank's model chunks; `max_rows`: rows
  // of the largest micro-batch (B x context).
  // `placement`: where the activations and gradients crossing stages live
  // (the model's memory) and what copies them.
  StageLink(Communicator *p2p, Communicator *pp, std::vector<ChunkShape> chunks, int64_t max_rows,
            MemoryTracker *tracker, StepPlacement placement = {});
  ~StageLink();

  int64_t stages() const { return pp_->size(); }
  int64_t stage() const { return pp_->rank(); }
  int64_t virtual_stages() const { return int64_t(chunks_.size()); }
  int64_t virtual_stage(int64_t chunk) const { return chunk * stages() + stage(); }
  bool is_first(int64_t chunk) const { return virtual_stage(chunk) == 0; }
  bool is_last(int64_t chunk) const {
    return virtual_stage(chunk) + 1 == stages() * virtual_stages();
  }

  // Called once per step before its first action: the step has
  // `micro_batches` micro-batches of `rows` rows each (their keys are sized
  // for it); `training`: gradients will flow back. The first receive of each
  // kind is posted at once, and each receive posts the next (every schedule
  // takes a chunk's micro-batches in order), so a message always finds its
  // buffer waiting: Gloo leaves a message nobody has asked for in the
  // socket, and TCP's window then stalls the sender for hundreds of ms.
  Status BeginStep(int64_t micro_batches, int64_t rows, bool training);

  // Forward: the chunk's input for micro-batch mb of `rows` rows, received
  // from the previous virtual stage (waits for it) and held until the
  // micro-batch's backward (or, in eval, its forward) releases it.
  Status RecvActivation(int64_t chunk, int64_t mb, int64_t rows);
  const float *activation_input(int64_t chunk, int64_t mb) const;
  // The chunk's output, copied at once (the model's own buffer is reused by
  // the next pass), then posted to the next virtual stage by SendActivation.
  // An error when no buffer can be had: a send posted earlier failed (the
  // peer died) and is reported here, not as a missing output later.
  Status KeepOutput(int64_t chunk, int64_t mb, const float *output, int64_t rows);
  Status SendActivation(int64_t chunk, int64_t mb);

  // Backward: the gradient of the chunk's output (from the next virtual
  // stage), and where its input gradient goes before SendGradient posts it.
  Status RecvGradient(int64_t chunk, int64_t mb, int64_t rows);
  float *gradient_input(int64_t chunk, int64_t mb);
  // Where the chunk's input gradient goes (*out), or the error of a failed
  // earlier send, as KeepOutput.
  Status GradientOutput(int64_t chunk, int64_t mb, int64_t rows, float **out);
  Status SendGradient(int64_t chunk, int64_t mb);
  // The micro-batch's backward (or eval forward) is done: its received
  // buffers go back to the pool.
  void Release(int64_t chunk, int64_t mb);

  // On a device: posts the sends and receives collected since the last
  // exchange as one group (the program marks where each exchange ends), and
  // has later compute wait for it; its buffers go back to the pool at once
  // (later work on the streams runs after it). Nothing on the host, where
  // each was posted as it came.
  Status EndExchange();

  // Waits for every posted send (before the step's reductions).
  Status FinishSends();

  // The sum over the stages of a per-stage value (the loss lives on the last
  // stage, the others add 0; a squared gradient norm is summed).
  Result<double> SumOverStages(double value);

  const PipeTimes &times() const { return times_; }
  void ResetTimes() { times_ = PipeTimes(); }
  int64_t bytes_sent() const { return bytes_sent_; }

 private:
  enum Kind : uint32_t { kActivation = 0, kGradient = 1 };
  struct Held {  // buffers per (chunk, micro-batch) key, -1 = none
    int activation_in = -1, output = -1, gradient_in = -1, gradient_out = -1;
    int64_t output_rows = 0, gradient_rows = 0;
  };
  struct Pending {
    std::unique_ptr<Work> work;
    int buffer;
  };
  struct Posted {  // a receive posted ahead
    std::unique_ptr<Work> work;
    int buffer = -1;
    int64_t mb = -1;
  };

  size_t Key(int64_t chunk, int64_t mb) const { return size_t(chunk * micro_batches_ + mb); }
  uint32_t Tag(Kind kind, int64_t to_virtual_stage, int64_t mb) const;
  int64_t RankOf(int64_t virtual_stage) const { return virtual_stage % stages(); }
  // A free buffer (recycling completed sends first).
  Result<int> Acquire();
  void Free(int *buffer);
  // Frees the buffers of completed sends; with `all`, waits for every one.
  Status Reap(bool all);
  Status Post(Kind kind, int64_t to_virtual_stage, int64_t mb, int buffer, int64_t bytes,
              double *seconds);
  // Waits for the receive of micro-batch mb of (kind, chunk) — posted ahead,
  // or now — into *buffer, then posts the next one.
  Status Receive(Kind kind, int64_t chunk, int64_t mb, int *buffer, double *seconds);
  Status PostReceive(Kind kind, int64_t chunk, int64_t mb);
  // Receive into the micro-batch's held buffer of that kind (checked rows).
  Status ReceiveHeld(Kind kind, int64_t chunk, int64_t mb, int64_t rows);
  // On a device: exchanges in program order over a stream-ordered transport.
  bool ordered() const { return !placement_.on_host(); }
  // Adds a send or receive of buffer b to the open exchange.
  void Collect(bool send, Kind kind, int64_t peer_virtual_stage, int64_t mb, int b, int64_t bytes,
               uint32_t tag, double *seconds);
  // Post the micro-batch's held output (activation) or input gradient.
  Status SendHeld(Kind kind, int64_t chunk, int64_t mb);
  int64_t Bytes(Kind kind, int64_t chunk) const;

  Communicator *p2p_, *pp_;
  std::vector<ChunkShape> chunks_;
  int64_t max_rows_, max_width_ = 0;
  MemoryTracker *tracker_;
  StepPlacement placement_;
  int64_t micro_batches_ = 0;
  std::vector<Held> held_;
  std::vector<Buffer<float>> pool_;  // where the messages travel from and to (the model's memory)
  std::vector<int> free_;
  std::vector<Pending> pending_;
  std::vector<Posted> posted_[2];  // [kind][chunk]
  // On a device: the exchange being collected, its sends' buffers, what it
  // is for (errors name it) and the timer its posting counts in.
  std::vector<PeerOp> exchange_;
  std::vector<int> exchange_sends_;
  std::string exchange_what_;
  double *exchange_clock_ = nullptr;
  int64_t rows_ = 0;
  PipeTimes times_;
  int64_t bytes_sent_ = 0;
};

}  // namespace dst
