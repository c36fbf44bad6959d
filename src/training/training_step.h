#pragma once
// One optimizer update (forward under autocast, label-smoothed loss, backward over the
// micro-batches, per-token gradient normalisation, clipping, finiteness check, Adam step),
// shared by the Trainer and the training benchmark so both measure the same code.
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "data/token_batcher.h"
#include "torchmt/model/transformer.h"
#include "training/adam_optimizer.h"
#include "training/label_smoothed_cross_entropy.h"

namespace torchmt {

// What an update reports. run() returns as soon as the update is queued on the device; the
// loss and gradient norm stay on the device until wait() copies them to the host (the one
// host-device synchronisation of an update, made by the caller when it needs the numbers:
// after it has queued its next batches' copies, so the device is never left waiting).
struct StepResult {
  double loss = 0;        // label-smoothed loss, summed over target tokens   (after wait())
  int64_t tokens = 0;     // non-pad target tokens
  double grad_norm = 0;   // before clipping                                  (after wait())
  bool applied = false;   // false: non-finite loss or gradient, update skipped (after wait())

  void wait();
  at::Tensor pending;     // [2] fp32 on the device: loss, gradient norm; undefined once waited
};

class GradientReducer;
class ProcessGroup;

// fp16: a fresh loss scale and counter in `state`, on `device`. fairseq's initial scale: the
// loss here is a sum over target tokens, so its gradients are thousands of times a mean
// loss's, and PyTorch's 2^16 would overflow for many updates.
void start_loss_scaling(OptimizerState& state, c10::Device device, double initial_scale = 128.0);

class TrainingStep {
 public:
  TrainingStep(Transformer model, AdamOptimizer& optimizer, LabelSmoothedCrossEntropy criterion, c10::Device device,
               c10::ScalarType dtype, double clip_norm);
  // Accumulates gradients over `batches` and applies one update with learning rate `lr`.
  // Under data parallelism: the last micro-batch's gradients are summed over the ranks by
  // `reducer`, and the loss and target tokens over `group`, so every rank normalises by the
  // global token count and applies the same update (loss and tokens in the result are global).
  void distribute(GradientReducer* reducer, ProcessGroup* group) {
    reducer_ = reducer;
    group_ = group;
  }
  // ffn: moe: the load-balancing loss joins the training loss with this weight per target
  // token (Switch Transformer's alpha, 0.01 there); it is not part of the reported loss.
  void set_moe_aux_loss(double coefficient) { moe_aux_coefficient_ = coefficient; }
  // R-Drop (rdrop_symmetric_kl): alpha > 0 runs every micro-batch twice in one forward (two
  // dropout masks) and trains on the copies' mean loss plus alpha/4 x their symmetric KL per
  // target token (the R-Drop paper's fairseq criterion, normalised per token of one copy). The
  // reported loss is the copies' mean label-smoothed loss; tokens count one copy.
  void set_rdrop(double alpha) { rdrop_alpha_ = alpha; }
  // Trains over the open output columns only (`open` [V] bool: the model's
  // open_output_columns()): logits, softmax and label smoothing span those columns, the same
  // distribution as the whole layer's with the closed columns' zero probability, for less work.
  // Targets must be open columns (a closed one would count as padding). All open: the whole
  // layer, as without.
  void set_output_columns(const at::Tensor& open);
  // fp16 (CUDA): dynamic loss scaling as PyTorch's GradScaler (reference 002). The loss is
  // multiplied by the scale before backward so that small gradients survive fp16, and the
  // gradients divided by it before the update; an update whose gradients overflowed is
  // skipped and the scale halved, and after `growth_interval` clean updates in a row the scale
  // doubles. All on the device (ATen's _amp_update_scale_): no host synchronisation.
  // The scale and its counter live in the optimizer state (saved with it in checkpoints); a
  // state that already holds them (restored by a resume) keeps them. set_loss_scaling resets.
  void set_loss_scaling(double initial_scale, int64_t growth_interval);
  double loss_scale() const;  // 1 without fp16 (reads the device)
  StepResult run(const std::vector<Batch>& batches, double lr);

 private:
  Transformer model_;
  AdamOptimizer& optimizer_;
  LabelSmoothedCrossEntropy criterion_;  // its pad id: the padding's column (set_output_columns)
  int64_t vocabulary_pad_id_;            // the padding's vocabulary id
  c10::Device device_;
  c10::ScalarType dtype_;
  double clip_norm_;
  double moe_aux_coefficient_ = 0.0;
  double rdrop_alpha_ = 0.0;
  at::Tensor columns_;    // [C] int64 on the device: the open output columns; undefined: all
  at::Tensor column_of_;  // [V] int64 on the device: a vocabulary id's place in columns_
  int64_t growth_interval_ = 2000;  // fp16: the scale itself is optimizer_.state().loss_scale
  GradientReducer* reducer_ = nullptr;
  ProcessGroup* group_ = nullptr;
};

// What a process that trains sets for itself (train, distill, bench_train): the tensor pool at
// training's 2 GiB (util/heap.h) and oneDNN's primitive cache at kTrainingOnednnPrimitives
// (kernels/cpu_isa.h). Process policy: before the first step, never from the library.
void use_training_process_policy();

// Mean NLL per target token of `batches` in eval mode (restores train mode after).
double evaluate_nll(Transformer& model, const std::vector<Batch>& batches, c10::Device device, c10::ScalarType dtype);

}  // namespace torchmt
