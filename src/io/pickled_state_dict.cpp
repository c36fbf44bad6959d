#include "io/pickled_state_dict.h"

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "bounded_reader.h"
#include "util/atomic_file.h"
#include "torchmt/util/strings.h"

namespace torchmt {
namespace {

struct Value;
using ValuePtr = std::shared_ptr<Value>;

struct Value {
  enum Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor } kind = kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;  // a string, or "module.name" of a global
  std::vector<ValuePtr> items;                        // tuple, list
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  // dict
  at::Tensor tensor;                                  // storage (1-D) or tensor
};

ValuePtr make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

c10::ScalarType storage_type(const std::string& global) {
  static const std::map<std::string, c10::ScalarType> kTypes = {
      {"torch.FloatStorage", torch::kFloat},     {"torch.HalfStorage", torch::kHalf},
      {"torch.BFloat16Storage", torch::kBFloat16}, {"torch.DoubleStorage", torch::kDouble},
      {"torch.LongStorage", torch::kLong},       {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort},     {"torch.CharStorage", torch::kChar},
      {"torch.ByteStorage", torch::kByte},       {"torch.BoolStorage", torch::kBool}};
  auto it = kTypes.find(global);
  if (it == kTypes.end()) throw std::runtime_error("storage type " + global + " is not supported");
  return it->second;
}

class Unpickler {
 public:
  Unpickler(const std::string& pickle, caffe2::serialize::PyTorchStreamReader& archive)
      : p_(pickle), archive_(archive) {}

  ValuePtr run() {
    while (true) {
      const uint8_t op = byte();
      switch (op) {
        case 0x80: byte(); break;               // PROTO
        case 0x95: bytes(8); break;             // FRAME
        case '.': return pop();                 // STOP
        case '(': marks_.push_back(stack_.size()); break;
        case ')': push(make(Value::kTuple)); break;
        case ']': push(make(Value::kList)); break;
        case '}': push(make(Value::kDict)); break;
        case 'N': push(make(Value::kNone)); break;
        case 0x88: case 0x89: {                 // NEWTRUE, NEWFALSE
          auto v = make(Value::kBool);
          v->i = op == 0x88;
          push(v);
          break;
        }
        case 'J': push_int(static_cast<int32_t>(le(4))); break;  // BININT
        case 'K': push_int(static_cast<int64_t>(le(1))); break;  // BININT1
        case 'M': push_int(static_cast<int64_t>(le(2))); break;  // BININT2
        case 0x8a: {                                             // LONG1
          const size_t n = byte();
          if (n > 8) throw malformed("integer wider than 64 bits");
          uint64_t u = n ? le(n) : 0;
          if (n > 0 && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~uint64_t{0} << (8 * n);  // sign
          push_int(static_cast<int64_t>(u));
          break;
        }
        case 'G': {                                              // BINFLOAT, big-endian
          uint64_t u = 0;
          for (unsigned char c : bytes(8)) u = (u << 8) | c;
          auto v = make(Value::kFloat);
          std::memcpy(&v->f, &u, 8);
          push(v);
          break;
        }
        case 'X': push_string(bytes(le(4))); break;      // BINUNICODE
        case 0x8c: push_string(bytes(byte())); break;    // SHORT_BINUNICODE
        case 0x8d: push_string(bytes(le(8))); break;     // BINUNICODE8
        case 'T': push_string(bytes(le(4))); break;      // BINSTRING
        case 'U': push_string(bytes(byte())); break;     // SHORT_BINSTRING
        case 'c': {                                      // GLOBAL module\nname\n
          const std::string module = line(), name = line();
          push_global(module + "." + name);
          break;
        }
        case 0x93: {                                     // STACK_GLOBAL
          auto name = pop(), module = pop();
          push_global(module->s + "." + name->s);
          break;
        }
        case 'q': memo_[le(1)] = peek(); break;          // BINPUT
        case 'r': memo_[le(4)] = peek(); break;          // LONG_BINPUT
        case 0x94: memo_[memo_.size()] = peek(); break;  // MEMOIZE
        case 'h': push(memo(le(1))); break;              // BINGET
        case 'j': push(memo(le(4))); break;              // LONG_BINGET
        case 't': {
          auto v = make(Value::kTuple);
          v->items = pop_to_mark();
          push(v);
          break;
        }
        case 0x85: case 0x86: case 0x87: {               // TUPLE1..3
          auto v = make(Value::kTuple);
          v->items.resize(op - 0x84);
          for (size_t k = v->items.size(); k-- > 0;) v->items[k] = pop();
          push(v);
          break;
        }
        case 'a': {                                      // APPEND
          auto item = pop();
          expect(top(), Value::kList, "APPEND")->items.push_back(item);
          break;
        }
        case 'e': {                                      // APPENDS
          auto items = pop_to_mark();
          auto& list = expect(top(), Value::kList, "APPENDS")->items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        case 's': {                                      // SETITEM
          auto value = pop(), key = pop();
          expect(top(), Value::kDict, "SETITEM")->entries.emplace_back(key, value);
          break;
        }
        case 'u': {                                      // SETITEMS
          auto items = pop_to_mark();
          if (items.size() % 2) throw malformed("SETITEMS with an odd count");
          auto& dict = expect(top(), Value::kDict, "SETITEMS")->entries;
          for (size_t k = 0; k < items.size(); k += 2) dict.emplace_back(items[k], items[k + 1]);
          break;
        }
        case 'b': pop(); break;                          // BUILD: a state dict's _metadata, unused
        case 'Q': push(storage(pop())); break;           // BINPERSID
        case 'R': {                                      // REDUCE
          auto args = pop(), callable = pop();
          push(reduce(expect(callable, Value::kGlobal, "REDUCE")->s, *expect(args, Value::kTuple, "REDUCE")));
          break;
        }
        default:
          throw malformed("opcode 0x" + hex(op) + " is not supported");
      }
    }
  }

 private:
  std::runtime_error malformed(const std::string& why) const {
    return std::runtime_error("not a state dict torchmt reads (" + why + " at byte " + std::to_string(pos_) + ")");
  }
  static std::string hex(uint8_t b) {
    const char* digits = "0123456789abcdef";
    return {digits[b >> 4], digits[b & 15]};
  }
  uint8_t byte() {
    if (pos_ >= p_.size()) throw malformed("truncated");
    return static_cast<uint8_t>(p_[pos_++]);
  }
  std::string bytes(uint64_t n) {
    if (n > p_.size() - pos_) throw malformed("truncated");
    std::string out = p_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  uint64_t le(size_t n) {
    uint64_t u = 0;
    const std::string b = bytes(n);
    for (size_t k = n; k-- > 0;) u = (u << 8) | static_cast<unsigned char>(b[k]);
    return u;
  }
  std::string line() {
    const size_t end = p_.find('\n', pos_);
    if (end == std::string::npos) throw malformed("truncated");
    std::string out = p_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  void push(ValuePtr v) {
    if (stack_.size() > (1u << 24)) throw malformed("stack too deep");
    stack_.push_back(std::move(v));
  }
  void push_int(int64_t i) {
    auto v = make(Value::kInt);
    v->i = i;
    push(v);
  }
  void push_string(std::string s) {
    auto v = make(Value::kString);
    v->s = std::move(s);
    push(v);
  }
  void push_global(const std::string& name) {
    static const std::set<std::string> kKnown = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                                                 "torch._utils._rebuild_parameter"};
    if (!kKnown.count(name) && name.rfind("torch.", 0) != 0) throw malformed("global " + escape_control(name));
    auto v = make(Value::kGlobal);
    v->s = name;
    push(v);
  }
  ValuePtr peek() {
    if (stack_.empty()) throw malformed("empty stack");
    return stack_.back();
  }
  ValuePtr top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) throw malformed("empty stack");
    return stack_.back();
  }
  ValuePtr pop() {
    auto v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<ValuePtr> pop_to_mark() {
    if (marks_.empty()) throw malformed("no mark");
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  ValuePtr memo(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) throw malformed("memo entry " + std::to_string(key) + " missing");
    return it->second;
  }
  ValuePtr expect(const ValuePtr& v, Value::Kind kind, const char* where) {
    if (v->kind != kind) throw malformed(std::string("unexpected operand of ") + where);
    return v;
  }

  // ('storage', torch.XStorage, key, location, numel) -> the record data/KEY as a 1-D tensor.
  ValuePtr storage(const ValuePtr& id) {
    const auto& t = expect(id, Value::kTuple, "BINPERSID")->items;
    if (t.size() != 5 || t[0]->kind != Value::kString || t[0]->s != "storage" || t[1]->kind != Value::kGlobal ||
        t[2]->kind != Value::kString || t[4]->kind != Value::kInt)
      throw malformed("a persistent id that is not a storage");
    const auto dtype = storage_type(t[1]->s);
    const std::string record = "data/" + t[2]->s;
    if (!archive_.hasRecord(record)) throw malformed("no record " + escape_control(record));
    auto [data, size] = archive_.getRecord(record);
    const int64_t numel = t[4]->i;
    const auto element = static_cast<int64_t>(c10::elementSize(dtype));
    if (numel < 0 || static_cast<uint64_t>(numel) * static_cast<uint64_t>(element) != size)
      throw malformed("storage " + escape_control(t[2]->s) + " holds " + std::to_string(size) + " bytes for " +
                      std::to_string(numel) + " elements");
    auto v = make(Value::kStorage);
    v->tensor = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
    if (size) std::memcpy(v->tensor.data_ptr(), data.get(), size);
    return v;
  }

  static std::vector<int64_t> ints(const ValuePtr& v) {
    std::vector<int64_t> out;
    for (const auto& item : v->items) out.push_back(item->i);
    return out;
  }

  ValuePtr reduce(const std::string& callable, const Value& args) {
    if (callable == "collections.OrderedDict") return make(Value::kDict);
    if (callable == "torch._utils._rebuild_parameter" && !args.items.empty() && args.items[0]->kind == Value::kTensor)
      return args.items[0];
    if (callable != "torch._utils._rebuild_tensor_v2") throw malformed("call of " + escape_control(callable));
    const auto& a = args.items;
    if (a.size() < 4 || a[0]->kind != Value::kStorage || a[1]->kind != Value::kInt || a[2]->kind != Value::kTuple ||
        a[3]->kind != Value::kTuple || a[2]->items.size() != a[3]->items.size())
      throw malformed("a tensor that is not (storage, offset, size, stride)");
    const auto sizes = ints(a[2]), strides = ints(a[3]);
    const at::Tensor& storage = a[0]->tensor;
    // The farthest element the view reads must lie inside the storage.
    int64_t last = a[1]->i;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] < 0 || strides[d] < 0) throw malformed("a negative size or stride");
      if (sizes[d] == 0) last = -1;
      if (last >= 0) last += (sizes[d] - 1) * strides[d];
    }
    if (a[1]->i < 0 || last >= storage.numel()) throw malformed("a tensor outside its storage");
    auto v = make(Value::kTensor);
    v->tensor = storage.as_strided(sizes, strides, a[1]->i).contiguous();
    return v;
  }

  const std::string& p_;
  caffe2::serialize::PyTorchStreamReader& archive_;
  size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, ValuePtr> memo_;
};

}  // namespace

std::map<std::string, at::Tensor> read_pickled_state_dict(const std::string& path) {
  const std::string content = read_file(path);
  if (content.size() < 4 || content.compare(0, 4, "PK\x03\x04") != 0)
    throw std::runtime_error(path + ": not a zip archive (a file of torch.save before PyTorch 1.6? save it again "
                             "with a newer torch, or as model.safetensors)");
  std::map<std::string, at::Tensor> out;
  try {
    caffe2::serialize::PyTorchStreamReader archive(std::make_shared<BoundedReader>(content));
    auto [data, size] = archive.getRecord("data.pkl");
    const std::string pickle(static_cast<const char*>(data.get()), size);
    const ValuePtr root = Unpickler(pickle, archive).run();
    if (root->kind != Value::kDict) throw std::runtime_error("the file holds no dictionary");
    for (const auto& [key, value] : root->entries) {
      if (key->kind != Value::kString || value->kind != Value::kTensor)
        throw std::runtime_error("the dictionary holds something other than name -> tensor");
      at::Tensor t = value->tensor;
      out[key->s] = t.is_floating_point() ? t.to(torch::kFloat) : t;
    }
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + first_line(e.what()));
  }
  return out;
}

}  // namespace torchmt
