#include "torchmt/decoding/constraints.h"

#include <algorithm>
#include <stdexcept>

namespace torchmt {

ConstraintState::ConstraintState(const Phrases* phrases) : phrases_(phrases) {
  if (phrases_ == nullptr) return;
  met_.assign(phrases_->size(), 0);
  for (const auto& p : *phrases_) {
    if (p.empty()) throw std::invalid_argument("a constraint phrase has no tokens");
    total_ += static_cast<int64_t>(p.size());
  }
  remaining_ = total_;
}

std::vector<int64_t> ConstraintState::allowed() const {
  if (phrases_ == nullptr) return {};
  if (phrase_ >= 0) return {(*phrases_)[static_cast<size_t>(phrase_)][static_cast<size_t>(at_)]};
  std::vector<int64_t> out;
  for (size_t i = 0; i < met_.size(); ++i)
    if (!met_[i]) out.push_back((*phrases_)[i][0]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

ConstraintState ConstraintState::advance(int64_t token) const {
  ConstraintState next = *this;
  if (phrases_ == nullptr || remaining_ == 0) return next;
  if (next.phrase_ >= 0) {
    const auto& p = (*phrases_)[static_cast<size_t>(next.phrase_)];
    if (p[static_cast<size_t>(next.at_)] == token) {
      next.at_ += 1;
      next.remaining_ -= 1;
      if (next.at_ == static_cast<int32_t>(p.size())) {
        next.met_[static_cast<size_t>(next.phrase_)] = 1;
        next.phrase_ = -1;
        next.at_ = 0;
      }
      return next;
    }
    next.remaining_ += next.at_;  // broken off: owed again from its start
    next.phrase_ = -1;
    next.at_ = 0;
  }
  for (size_t i = 0; i < next.met_.size(); ++i) {
    const auto& p = (*phrases_)[i];
    if (next.met_[i] || p[0] != token) continue;
    next.remaining_ -= 1;
    if (p.size() == 1) {
      next.met_[i] = 1;
    } else {
      next.phrase_ = static_cast<int32_t>(i);
      next.at_ = 1;
    }
    break;
  }
  return next;
}

std::vector<int64_t> bank_sizes(int64_t total, int64_t beam, const std::vector<int64_t>& candidates) {
  const int64_t banks = total + 1;
  if (static_cast<int64_t>(candidates.size()) != banks)
    throw std::invalid_argument("bank_sizes: " + std::to_string(candidates.size()) + " candidate counts for " +
                                std::to_string(banks) + " banks");
  std::vector<int64_t> sizes(static_cast<size_t>(banks), beam / banks);
  sizes.back() += beam % banks;
  // From the last bank down, push what a bank cannot fill to the one below it (wrapping from
  // bank 0 to the last, as Sockeye does, so slots pushed past bank 0 are not lost).
  for (int64_t i = banks - 1; i >= 0; --i) {
    const int64_t over = sizes[static_cast<size_t>(i)] - candidates[static_cast<size_t>(i)];
    if (over > 0) {
      sizes[static_cast<size_t>(i)] -= over;
      sizes[static_cast<size_t>((i - 1 + banks) % banks)] += over;
    }
  }
  return sizes;
}

std::vector<BankCandidate> allocate_beam(std::vector<BankCandidate> pool, int64_t total, int64_t beam) {
  std::sort(pool.begin(), pool.end(), [](const BankCandidate& a, const BankCandidate& b) {
    return a.score > b.score || (a.score == b.score && (a.beam < b.beam || (a.beam == b.beam && a.token < b.token)));
  });
  std::vector<int64_t> counts(static_cast<size_t>(total + 1), 0), taken(counts.size(), 0);
  for (const auto& c : pool) counts.at(static_cast<size_t>(c.bank)) += 1;
  const auto sizes = bank_sizes(total, beam, counts);
  std::vector<uint8_t> picked(pool.size(), 0);
  int64_t n = 0;
  for (size_t i = 0; i < pool.size() && n < beam; ++i) {
    const auto bank = static_cast<size_t>(pool[i].bank);
    if (taken[bank] < sizes[bank]) {
      taken[bank] += 1;
      picked[i] = 1;
      n += 1;
    }
  }
  for (size_t i = 0; i < pool.size() && n < beam; ++i)  // slots no bank could use
    if (!picked[i]) {
      picked[i] = 1;
      n += 1;
    }
  std::vector<BankCandidate> kept;
  for (size_t i = 0; i < pool.size(); ++i)
    if (picked[i]) kept.push_back(pool[i]);
  return kept;
}

}  // namespace torchmt
