#include "onnx_graph.h"

#include <cstring>
#include <stdexcept>
#include <string_view>

namespace torchmt {
namespace {

// Protobuf's wire format, written directly: Debian's libsentencepiece carries its own copy of
// protobuf-lite and exports its symbols, so a process that also loads libprotobuf (for
// libonnx-dev's generated classes) crashes at start-up in whichever copy the loader picks.
// Field numbers are those of onnx.proto (ONNX 1.12, libonnx-dev's /usr/include/onnx/onnx.proto).
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, uint32_t field, Wire wire) { put_varint(out, (uint64_t{field} << 3) | wire); }
void put_int(std::string& out, uint32_t field, int64_t v) {  // int32/int64 fields: two's complement
  put_key(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kBytes);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}
void put_float(std::string& out, uint32_t field, float v) {
  put_key(out, field, kFixed32);
  char bytes[4];
  std::memcpy(bytes, &v, 4);  // little-endian hosts only (x86-64, AArch64)
  out.append(bytes, 4);
}

// TensorProto.DataType
int32_t data_type(OnnxGraph::Type type) {
  switch (type) {
    case OnnxGraph::Type::kFloat: return 1;
    case OnnxGraph::Type::kInt8: return 3;
    case OnnxGraph::Type::kInt64: return 7;
    case OnnxGraph::Type::kBool: return 9;
  }
  throw std::logic_error("unknown ONNX type");
}

// ValueInfoProto { name = 1; type = 2 { tensor_type = 1 { elem_type = 1; shape = 2 { dim = 1 {
// dim_value = 1 | dim_param = 2 } } } } }
std::string value_info(const std::string& name, OnnxGraph::Type type, const std::vector<OnnxGraph::Dim>& dims) {
  std::string shape;
  for (const auto& dim : dims) {
    std::string d;
    if (std::holds_alternative<int64_t>(dim)) put_int(d, 1, std::get<int64_t>(dim));
    else put_bytes(d, 2, std::get<std::string>(dim));
    put_bytes(shape, 1, d);
  }
  std::string tensor;
  put_int(tensor, 1, data_type(type));
  put_bytes(tensor, 2, shape);
  std::string type_proto;
  put_bytes(type_proto, 1, tensor);
  std::string out;
  put_bytes(out, 1, name);
  put_bytes(out, 2, type_proto);
  return out;
}

}  // namespace

struct OnnxGraph::Proto {
  std::string name;
  std::vector<std::string> nodes, initializers, inputs, outputs;  // encoded messages
};

OnnxGraph::OnnxGraph(const std::string& name) : proto_(std::make_unique<Proto>()) { proto_->name = name; }
OnnxGraph::~OnnxGraph() = default;

void OnnxGraph::input(const std::string& name, Type type, const std::vector<Dim>& dims) {
  proto_->inputs.push_back(value_info(name, type, dims));
}

void OnnxGraph::output(const std::string& name, Type type, const std::vector<Dim>& dims) {
  proto_->outputs.push_back(value_info(name, type, dims));
}

// TensorProto { dims = 1; data_type = 2; int64_data = 7 (packed); name = 8; raw_data = 9 }
std::string OnnxGraph::weight(const std::string& name, Type type, const std::vector<int64_t>& dims, const void* data,
                              size_t bytes) {
  std::string t;
  for (auto d : dims) put_int(t, 1, d);
  put_int(t, 2, data_type(type));
  put_bytes(t, 8, name);
  put_bytes(t, 9, std::string_view(static_cast<const char*>(data), bytes));  // little-endian, as ONNX's raw data
  proto_->initializers.push_back(std::move(t));
  return name;
}

std::string OnnxGraph::ints(const std::vector<int64_t>& values) {
  const std::string name = fresh("const");
  std::string t;
  put_int(t, 1, static_cast<int64_t>(values.size()));
  put_int(t, 2, data_type(Type::kInt64));
  std::string packed;
  for (auto v : values) put_varint(packed, static_cast<uint64_t>(v));
  put_bytes(t, 7, packed);
  put_bytes(t, 8, name);
  proto_->initializers.push_back(std::move(t));
  return name;
}

std::string OnnxGraph::scalar(float value) {
  const std::string name = fresh("const");
  std::string t;  // no dims: a 0-d tensor
  put_int(t, 2, data_type(Type::kFloat));
  put_bytes(t, 8, name);
  put_bytes(t, 9, std::string_view(reinterpret_cast<const char*>(&value), sizeof value));
  proto_->initializers.push_back(std::move(t));
  return name;
}

void OnnxGraph::emit(const std::string& op, const std::vector<std::string>& inputs,
                     const std::vector<std::string>& outputs, const std::vector<Attribute>& attributes) {
  // NodeProto { input = 1; output = 2; name = 3; op_type = 4; attribute = 5 }
  std::string n;
  for (const auto& in : inputs) put_bytes(n, 1, in);
  for (const auto& out : outputs) put_bytes(n, 2, out);
  put_bytes(n, 3, fresh(op));
  put_bytes(n, 4, op);
  for (const auto& a : attributes) {
    // AttributeProto { name = 1; f = 2; i = 3; ints = 8; type = 20 (FLOAT 1, INT 2, INTS 7) }
    std::string attr;
    put_bytes(attr, 1, a.name);
    if (const auto* i = std::get_if<int64_t>(&a.value)) {
      put_int(attr, 3, *i);
      put_int(attr, 20, 2);
    } else if (const auto* f = std::get_if<float>(&a.value)) {
      put_float(attr, 2, *f);
      put_int(attr, 20, 1);
    } else {
      for (auto v : std::get<std::vector<int64_t>>(a.value)) put_int(attr, 8, v);
      put_int(attr, 20, 7);
    }
    put_bytes(n, 5, attr);
  }
  proto_->nodes.push_back(std::move(n));
}

std::string OnnxGraph::node(const std::string& op, const std::vector<std::string>& inputs,
                            const std::vector<Attribute>& attributes, const std::string& output) {
  const std::string name = output.empty() ? fresh(op + "_out") : output;
  emit(op, inputs, {name}, attributes);
  return name;
}

std::vector<std::string> OnnxGraph::nodes(const std::string& op, const std::vector<std::string>& inputs, int outputs,
                                          const std::vector<Attribute>& attributes) {
  std::vector<std::string> names;
  for (int i = 0; i < outputs; ++i) names.push_back(fresh(op + "_out"));
  emit(op, inputs, names, attributes);
  return names;
}

std::string OnnxGraph::serialize(const std::string& producer_version, const std::string& doc) const {
  // GraphProto { node = 1; name = 2; initializer = 5; input = 11; output = 12 }
  std::string graph;
  for (const auto& n : proto_->nodes) put_bytes(graph, 1, n);
  put_bytes(graph, 2, proto_->name);
  for (const auto& t : proto_->initializers) put_bytes(graph, 5, t);
  for (const auto& v : proto_->inputs) put_bytes(graph, 11, v);
  for (const auto& v : proto_->outputs) put_bytes(graph, 12, v);
  if (graph.size() >= (size_t{2} << 30))
    throw std::invalid_argument("ONNX export: the graph " + proto_->name + " exceeds protobuf's 2 GiB limit");
  // ModelProto { ir_version = 1; producer_name = 2; producer_version = 3; doc_string = 6;
  // graph = 7; opset_import = 8 { domain = 1; version = 2 } }
  std::string opset;
  put_bytes(opset, 1, "");
  put_int(opset, 2, kOpset);
  std::string model;
  put_int(model, 1, kIrVersion);
  put_bytes(model, 2, "torchmt");
  put_bytes(model, 3, producer_version);
  put_bytes(model, 6, doc);
  put_bytes(model, 7, graph);
  put_bytes(model, 8, opset);
  return model;
}

std::string OnnxGraph::fresh(const std::string& stem) { return stem + "_" + std::to_string(counter_++); }

}  // namespace torchmt
