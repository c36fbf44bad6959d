#include "data/bpe_dropout.h"

#include <queue>
#include <stdexcept>
#include <string>

#include "util/split_mix.h"

namespace torchmt {

namespace {

uint64_t pair_key(int64_t left, int64_t right) {
  return static_cast<uint64_t>(left) << 32 | static_cast<uint32_t>(right);
}

// The byte length of the UTF-8 sequence that starts with `lead` (1 for a stray byte).
size_t sequence_length(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

std::vector<std::string> characters(const std::string& piece) {
  std::vector<std::string> out;
  for (size_t i = 0; i < piece.size();) {
    const size_t n = std::min(sequence_length(static_cast<unsigned char>(piece[i])), piece.size() - i);
    out.push_back(piece.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

BpeDropout::BpeDropout(const Tokenizer& tokenizer, double p, int64_t max_tokens) : p_(p), max_tokens_(max_tokens) {
  if (!(p >= 0 && p < 1)) throw std::invalid_argument("the BPE-dropout probability must be in [0, 1), got " + std::to_string(p));
  if (!tokenizer.is_bpe())
    throw std::invalid_argument("BPE-dropout needs a SentencePiece BPE model; this tokenizer's model is not BPE");
  const int64_t size = tokenizer.vocab_size();
  characters_.resize(static_cast<size_t>(size));
  for (int64_t id = 0; id < size; ++id) {
    auto& chars = characters_[static_cast<size_t>(id)];
    chars = {static_cast<int32_t>(id)};
    if (!tokenizer.is_normal_piece(id)) continue;
    const std::string piece = tokenizer.id_to_piece(id);
    const std::vector<std::string> parts = characters(piece);
    if (parts.size() < 2) continue;
    std::vector<int32_t> ids;
    for (const auto& c : parts) {
      const int64_t cid = tokenizer.piece_to_id(c);
      if (!tokenizer.is_normal_piece(cid)) break;  // a character without a piece: the piece stays whole
      ids.push_back(static_cast<int32_t>(cid));
    }
    if (ids.size() == parts.size()) chars = std::move(ids);
    // Every split of the piece into two pieces is a merge that yields it.
    const float score = tokenizer.piece_score(id);
    for (size_t at = 0, k = 0; k + 1 < parts.size(); ++k) {
      at += parts[k].size();
      const int64_t left = tokenizer.piece_to_id(piece.substr(0, at)), right = tokenizer.piece_to_id(piece.substr(at));
      if (tokenizer.is_normal_piece(left) && tokenizer.is_normal_piece(right))
        merges_[pair_key(left, right)] = {static_cast<int32_t>(id), score};
    }
  }
}

void BpeDropout::sample(const int64_t* ids, int64_t n, uint64_t key, std::vector<int64_t>& out) const {
  struct Symbol {
    int32_t id, prev, next;  // id -1: merged into its left neighbour
  };
  struct Candidate {
    float score;
    int32_t left, right, left_id, right_id, piece;
  };
  // SentencePiece's order: the best score first, then the leftmost.
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::vector<Symbol> symbols;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= static_cast<int64_t>(characters_.size()))
      throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary of " +
                              std::to_string(characters_.size()));
    for (int32_t c : characters_[static_cast<size_t>(id)]) symbols.push_back({c, 0, 0});
  }
  const auto count = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i < count; ++i) {
    symbols[static_cast<size_t>(i)].prev = i - 1;
    symbols[static_cast<size_t>(i)].next = i + 1 < count ? i + 1 : -1;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> agenda(later);
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol &l = symbols[static_cast<size_t>(left)], &r = symbols[static_cast<size_t>(right)];
    const auto it = merges_.find(pair_key(l.id, r.id));
    if (it != merges_.end()) agenda.push({it->second.score, left, right, l.id, r.id, it->second.piece});
  };
  for (int32_t i = 0; i + 1 < count; ++i) consider(i, i + 1);
  SplitMix64 rng{key};
  while (!agenda.empty()) {
    const Candidate c = agenda.top();
    agenda.pop();
    Symbol& left = symbols[static_cast<size_t>(c.left)];
    Symbol& right = symbols[static_cast<size_t>(c.right)];
    if (left.id != c.left_id || right.id != c.right_id || left.next != c.right) continue;  // stale
    // A skipped merge is dropped, as in SentencePiece's sampling: it comes back only when a
    // neighbour changes.
    if (p_ > 0 && rng.uniform() < p_) continue;
    left.id = c.piece;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = c.left;
    right.id = -1;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
  const size_t start = out.size();
  for (int32_t i = count > 0 ? 0 : -1; i >= 0; i = symbols[static_cast<size_t>(i)].next)
    out.push_back(symbols[static_cast<size_t>(i)].id);
  if (static_cast<int64_t>(out.size() - start) > max_tokens_) {
    out.resize(start);
    out.insert(out.end(), ids, ids + n);
  }
}

}  // namespace torchmt
