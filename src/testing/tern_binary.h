// Helpers shared by the plan tests that run the built `tern` binary.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace tern::testing {

// $TERN_BINARY_DIR/tern if set; otherwise the first `tern` in the test executable's directory or its
// parents (CMake puts it in the build root). Empty if not built.
inline std::filesystem::path FindTernBinary() {
  namespace fs = std::filesystem;
  if (const char* dir = std::getenv("TERN_BINARY_DIR"); dir && *dir) {
    const fs::path p = fs::path(dir) / "tern";
    if (fs::is_regular_file(p)) return p;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  for (fs::path d = exe.parent_path(); !d.empty(); d = d.parent_path()) {
    if (fs::is_regular_file(d / "tern", ec)) return d / "tern";
    if (d == d.parent_path()) break;
  }
  return {};
}

}  // namespace tern::testing
