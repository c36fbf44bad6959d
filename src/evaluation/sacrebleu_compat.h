#pragma once
// The sacreBLEU release whose rules the metrics here reproduce; named in the signatures.
namespace torchmt::evaluation {

inline constexpr const char* kSacrebleuCompatibleVersion = "2.6.0";

}  // namespace torchmt::evaluation
