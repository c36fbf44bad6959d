#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "util/atomic_file.h"
#include "torchmt/util/strings.h"

namespace torchmt {
namespace {

constexpr uint64_t kMaxHeader = 100ull << 20;

struct DtypeInfo {
  c10::ScalarType type;
  int64_t bytes;
};

DtypeInfo dtype_info(const std::string& name, const std::string& what) {
  if (name == "F32") return {torch::kFloat, 4};
  if (name == "F16") return {torch::kHalf, 2};
  if (name == "BF16") return {torch::kBFloat16, 2};
  throw std::runtime_error(what + " has dtype '" + escape_control(name) + "' (torchmt reads F32, F16 and BF16)");
}

}  // namespace

std::map<std::string, at::Tensor> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error(path + ": not found or unreadable");
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  auto fail = [&](const std::string& why) { return std::runtime_error(path + ": not a safetensors file (" + why + ")"); };
  unsigned char length_bytes[8];
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(length_bytes), 8)) throw fail("shorter than its header length");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | length_bytes[i];
  if (header_size > kMaxHeader || header_size > file_size - 8) throw fail("header length " + std::to_string(header_size));
  std::string header(header_size, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_size))) throw fail("truncated header");
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    throw fail(first_line(e.what()));
  }
  if (!parsed.is_object()) throw fail("header is not a JSON object");
  const uint64_t data_size = file_size - 8 - header_size;
  struct Entry {
    std::string name;
    DtypeInfo dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [name, spec] : parsed.items()) {
    if (name == "__metadata__") continue;
    const std::string what = path + ": tensor '" + escape_control(name) + "'";
    if (!spec.is_object() || !spec.contains("dtype") || !spec.contains("shape") || !spec.contains("data_offsets") ||
        !spec["dtype"].is_string() || !spec["shape"].is_array() || !spec["data_offsets"].is_array() ||
        spec["data_offsets"].size() != 2)
      throw std::runtime_error(what + " lacks dtype, shape or data_offsets");
    Entry e{name, dtype_info(spec["dtype"].get<std::string>(), what), {}, 0, 0};
    uint64_t elements = 1;
    for (const auto& d : spec["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40)) throw std::runtime_error(what + " has an invalid shape");
      e.shape.push_back(d.get<int64_t>());
      elements *= d.get<uint64_t>();
      if (elements > (1ull << 40)) throw std::runtime_error(what + " has an invalid shape");
    }
    if (!spec["data_offsets"][0].is_number_unsigned() || !spec["data_offsets"][1].is_number_unsigned())
      throw std::runtime_error(what + " has invalid data_offsets");
    e.begin = spec["data_offsets"][0].get<uint64_t>();
    e.end = spec["data_offsets"][1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      throw std::runtime_error(what + " lies outside the file's " + std::to_string(data_size) + " bytes of data");
    if (e.end - e.begin != elements * static_cast<uint64_t>(e.dtype.bytes))
      throw std::runtime_error(what + " holds " + std::to_string(e.end - e.begin) + " bytes for its shape's " +
                               std::to_string(elements * static_cast<uint64_t>(e.dtype.bytes)));
    entries.push_back(std::move(e));
  }
  std::vector<std::pair<uint64_t, uint64_t>> sorted;
  for (const auto& e : entries)
    if (e.end > e.begin) sorted.emplace_back(e.begin, e.end);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].first < sorted[i - 1].second) throw fail("tensors overlap");

  std::map<std::string, at::Tensor> out;
  const uint64_t data_start = 8 + header_size;
  for (const auto& e : entries) {
    auto raw = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype.type));
    in.seekg(static_cast<std::streamoff>(data_start + e.begin));
    if (e.end > e.begin &&
        !in.read(static_cast<char*>(raw.data_ptr()), static_cast<std::streamsize>(e.end - e.begin)))
      throw fail("truncated data");
    out.emplace(e.name, raw.to(torch::kFloat));
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    auto t = tensor.detach().to(torch::kCPU, torch::kFloat).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as safetensors writes it
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  bytes += json;
  bytes.reserve(bytes.size() + offset);
  for (const auto& t : data) bytes.append(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()) * 4);
  atomic_write(path, bytes);
}

}  // namespace torchmt
