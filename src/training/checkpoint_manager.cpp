#include "training/checkpoint_manager.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <utility>

#include "util/atomic_file.h"

namespace fs = std::filesystem;

namespace torchmt {

CheckpointManager::CheckpointManager(std::string run_dir, int64_t keep_last)
    : run_dir_(std::move(run_dir)), keep_last_(keep_last) {}

void CheckpointManager::save(const Transformer& model, const OptimizerState* optimizer, const CheckpointMeta& meta,
                             bool best, bool numbered) {
  // The best checkpoint is what users translate with, not what training resumes from: weights
  // and metadata only, a third of the bytes, so `translate -m` starts fast. Written before the
  // last one, whose metadata says it is the best: a run stopped between the two resumes from
  // before this validation and comes to it again.
  if (best) save_best(model, meta);
  save_checkpoint(last_path(), model, optimizer, meta);
  if (!numbered || keep_last_ <= 0) return;
  atomic_copy(last_path(), run_dir_ + "/checkpoint_" + std::to_string(meta.position.step) + ".pt");
  const auto files = this->numbered();
  for (size_t i = 0; i + static_cast<size_t>(keep_last_) < files.size(); ++i) fs::remove(files[i]);
}

void CheckpointManager::save_best(const Transformer& model, const CheckpointMeta& meta) {
  save_checkpoint(best_path(), model, nullptr, meta);
}

bool CheckpointManager::offer_top(const Transformer& model, const CheckpointMeta& meta, double bleu, int64_t keep) {
  if (keep <= 0) return false;
  if (static_cast<int64_t>(top_.size()) >= keep && bleu <= top_.back().first) return false;
  save_checkpoint(top_path(meta.position.step), model, nullptr, meta);
  top_.emplace_back(bleu, meta.position.step);
  // Highest BLEU first; among equals the newer.
  std::sort(top_.begin(), top_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  while (static_cast<int64_t>(top_.size()) > keep) {
    std::error_code ec;
    fs::remove(top_path(top_.back().second), ec);
    top_.pop_back();
  }
  return true;
}

std::vector<std::string> CheckpointManager::top_paths() const {
  std::vector<std::string> out;
  for (const auto& [bleu, step] : top_) out.push_back(top_path(step));
  return out;
}

void CheckpointManager::recall_top(const std::vector<std::pair<int64_t, double>>& step_bleu) {
  static const std::regex pattern("top_([0-9]{1,18})\\.pt");
  top_.clear();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir_, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, pattern)) continue;
    const int64_t step = std::stoll(m[1]);
    auto it = std::find_if(step_bleu.begin(), step_bleu.end(), [&](const auto& p) { return p.first == step; });
    if (it == step_bleu.end()) {
      fs::remove(entry.path(), ec);  // from validations after the checkpoint resumed from
    } else {
      top_.emplace_back(it->second, step);
    }
  }
  std::sort(top_.begin(), top_.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
}

std::vector<std::string> CheckpointManager::numbered() const {
  static const std::regex pattern("checkpoint_([0-9]{1,18})\\.pt");  // (more digits: not a step of ours)
  std::vector<std::pair<int64_t, std::string>> found;
  for (const auto& entry : fs::directory_iterator(run_dir_)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern)) found.emplace_back(std::stoll(m[1]), entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

int64_t CheckpointManager::remove_stale_temporaries() const {
  static const std::regex pattern(".+\\.tmp\\.[A-Za-z0-9]{6}");
  int64_t removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir_, ec)) {
    if (entry.is_regular_file(ec) && std::regex_match(entry.path().filename().string(), pattern) &&
        fs::remove(entry.path(), ec))
      ++removed;
  }
  return removed;
}

}  // namespace torchmt
