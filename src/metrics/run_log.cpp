#include "metrics/run_log.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace tern {

RunLog::~RunLog() {
  if (file_) std::fclose(file_);
}

Status RunLog::Open(const std::string& path, bool append) {
  if (file_) std::fclose(file_);
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!file_)
    return Status::IoError(fmt::format("cannot open {} for writing: {}", path, std::strerror(errno)));
  path_ = path;
  return Status::Ok();
}

Status RunLog::Write(nlohmann::json row) {
  if (!file_) return Status::Ok();  // never opened: discards (data-parallel ranks other than 0)
  if (!row.contains(kRunRecordVersionKey)) StampRecordVersion(&row);
  std::string line = row.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return Status::IoError(fmt::format("writing {} failed: {} (disk full?)", path_, std::strerror(errno)));
  }
  if (observer_) observer_(row);
  return Status::Ok();
}

void CostMeter::StartClock(double billing_start_unix) {
  if (billing_start_unix <= 0) return;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  startup_s = std::max(0.0, now - billing_start_unix);
}

}  // namespace tern
