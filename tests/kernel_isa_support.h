#pragma once
// Kernel tests run once per instruction set this machine runs (src/kernels/cpu_isa.h): a suite
// derived from EveryCpuIsa, written with TEST_P and instantiated with
// TORCHMT_FOR_EVERY_CPU_ISA(Suite), runs each test with cpu_isa() forced to each level, so an
// AVX-512 machine also tests the AVX2 and portable code.
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "kernels/cpu_isa.h"

namespace torchmt::test {

class EveryCpuIsa : public ::testing::TestWithParam<kernels::CpuIsa> {
 protected:
  void SetUp() override { isa_.emplace(GetParam()); }
  void TearDown() override { isa_.reset(); }

 private:
  std::optional<kernels::CpuIsaOverride> isa_;
};

inline std::string cpu_isa_test_name(const ::testing::TestParamInfo<kernels::CpuIsa>& info) {
  std::string name = kernels::cpu_isa_name(info.param);
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

}  // namespace torchmt::test

#define TORCHMT_FOR_EVERY_CPU_ISA(Suite)                                                              \
  INSTANTIATE_TEST_SUITE_P(CpuIsa, Suite, ::testing::ValuesIn(::torchmt::kernels::available_cpu_isas()), \
                           ::torchmt::test::cpu_isa_test_name)
