// The cloud metadata answers the preemption poller reads (ckpt/preemption.h): the body of AWS IMDS
// spot/instance-action (JSON: action, time) and of GCP instance/preempted ("TRUE"/"FALSE").
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ckpt/preemption.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const tern::ckpt::PreemptionNotice n = tern::ckpt::ParseAwsInstanceAction(body);
  if (n.source.empty() || std::isnan(n.window_s)) __builtin_trap();
  (void)tern::ckpt::ParseGcpPreempted(body);
  return 0;
}
