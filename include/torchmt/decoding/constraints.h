#pragma once
// Lexically constrained decoding with dynamic beam allocation (Post & Vilar 2018; Sockeye's
// lexical_constraints.py is the reference): what a hypothesis still owes of its target phrases,
// and how a beam is shared among hypotheses that met different numbers of constraint tokens.
#include <cstdint>
#include <vector>

namespace torchmt {

// The target phrases (token ids) one sentence's output must hold.
using Phrases = std::vector<std::vector<int64_t>>;

// One hypothesis's progress through its sentence's phrases; a value, copied along the beam.
// A phrase counts once its tokens appear consecutively; a phrase begun and then broken off is
// owed again from its start.
class ConstraintState {
 public:
  ConstraintState() = default;  // no constraints
  explicit ConstraintState(const Phrases* phrases);  // phrases must outlive the state

  // The tokens that advance it: the next token of the phrase in progress, else the first
  // token of every phrase not yet met (sorted, without repeats).
  std::vector<int64_t> allowed() const;
  ConstraintState advance(int64_t token) const;
  int64_t total() const { return total_; }          // constraint tokens in all
  int64_t remaining() const { return remaining_; }  // tokens still to produce
  int64_t met() const { return total_ - remaining_; }
  bool complete() const { return remaining_ == 0; }

 private:
  const Phrases* phrases_ = nullptr;
  std::vector<uint8_t> met_;  // per phrase
  int32_t phrase_ = -1;       // the phrase in progress, or -1
  int32_t at_ = 0;            // its tokens produced so far
  int64_t total_ = 0, remaining_ = 0;
};

// Dynamic beam allocation: how many of `beam` slots go to each bank b = 0..total (hypotheses
// with b constraint tokens met), given how many candidates each bank has. An even share, the
// remainder to the last bank, and a bank's unusable slots passed down to the bank below
// (from the last bank down, wrapping round), so the beam fills whenever candidates exist.
std::vector<int64_t> bank_sizes(int64_t total, int64_t beam, const std::vector<int64_t>& candidates);

// A continuation of one of a sentence's beams, in the bank of the constraint tokens it has met.
struct BankCandidate {
  float score;
  int64_t beam, token, bank;
};
// The `beam` candidates dynamic beam allocation keeps, best first: the best of each bank up to its
// size (bank_sizes), then the best of the rest for slots no bank could use. Equal scores in
// order of beam, then token.
std::vector<BankCandidate> allocate_beam(std::vector<BankCandidate> pool, int64_t total, int64_t beam);

}  // namespace torchmt
