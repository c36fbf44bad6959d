#pragma once
// OnnxGraph: one ONNX graph built node by node and serialised as a ModelProto (opset 17, IR 8)
// in protobuf's wire format, written directly (onnx_graph.cpp says why not with libprotobuf).
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace torchmt {

class OnnxGraph {
 public:
  enum class Type { kFloat, kInt64, kBool, kInt8 };
  // A dimension: a fixed size or a symbolic name ("batch").
  using Dim = std::variant<int64_t, std::string>;
  struct Attribute {
    std::string name;
    std::variant<int64_t, float, std::vector<int64_t>> value;
  };

  static constexpr int64_t kOpset = 17;  // LayerNormalization; ONNX Runtime 1.14 and later
  static constexpr int64_t kIrVersion = 8;

  explicit OnnxGraph(const std::string& name);
  ~OnnxGraph();
  OnnxGraph(const OnnxGraph&) = delete;
  OnnxGraph& operator=(const OnnxGraph&) = delete;

  void input(const std::string& name, Type type, const std::vector<Dim>& dims);
  void output(const std::string& name, Type type, const std::vector<Dim>& dims);
  // An initializer under `name` from `bytes` bytes of little-endian values (a contiguous tensor's
  // memory). Returns its name.
  std::string weight(const std::string& name, Type type, const std::vector<int64_t>& dims, const void* data,
                     size_t bytes);
  // Constant initializers with generated names.
  std::string ints(const std::vector<int64_t>& values);  // 1-D int64
  std::string scalar(float value);                        // 0-D float
  // One node; returns its output's name (`output`, or a generated one when empty).
  std::string node(const std::string& op, const std::vector<std::string>& inputs,
                   const std::vector<Attribute>& attributes = {}, const std::string& output = "");
  // A node with several outputs (e.g. TopK): their generated names.
  std::vector<std::string> nodes(const std::string& op, const std::vector<std::string>& inputs, int outputs,
                                 const std::vector<Attribute>& attributes = {});
  // The ModelProto with this graph, opset 17 and `doc` as its doc string. Throws
  // std::invalid_argument past protobuf's 2 GiB limit (readers refuse larger messages).
  std::string serialize(const std::string& producer_version, const std::string& doc) const;

 private:
  std::string fresh(const std::string& stem);
  void emit(const std::string& op, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
            const std::vector<Attribute>& attributes);
  struct Proto;
  std::unique_ptr<Proto> proto_;
  int64_t counter_ = 0;
};

}  // namespace torchmt
