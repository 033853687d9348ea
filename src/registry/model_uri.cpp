#include "registry/model_uri.h"

#include "model/safetensors.h"
#include "registry/registry.h"

namespace tern::registry {

bool IsModelUri(const std::string& path) {
  return path.rfind(kModelUriScheme, 0) == 0;
}

std::string ModelUriRef(const std::string& uri) {
  return uri.substr(sizeof(kModelUriScheme) - 1);
}

Result<std::string> ResolveModelUri(const std::string& path_or_uri) {
  if (!IsModelUri(path_or_uri)) return path_or_uri;
  TERN_ASSIGN_OR_RETURN(ModelRef ref, ParseModelRef(ModelUriRef(path_or_uri)));
  TERN_ASSIGN_OR_RETURN(auto reg, OpenRegistry("", ""));
  auto dir = reg->Materialize(ref);
  if (!dir.ok()) return dir.status().WithContext("resolving " + path_or_uri);
  return dir;
}

Result<std::string> PinModelUri(const std::string& path_or_uri) {
  if (!IsModelUri(path_or_uri)) return path_or_uri;
  TERN_ASSIGN_OR_RETURN(ModelRef ref, ParseModelRef(ModelUriRef(path_or_uri)));
  TERN_ASSIGN_OR_RETURN(auto reg, OpenRegistry("", ""));
  auto entry = reg->Get(ref);
  if (!entry.ok()) return entry.status().WithContext("resolving " + path_or_uri);
  return fmt::format("{}{}@{}", kModelUriScheme, entry->name, entry->version);
}

Status ExportModelUri(const std::string& uri, const std::string& out) {
  TERN_ASSIGN_OR_RETURN(std::string dir, ResolveModelUri(uri));
  TERN_ASSIGN_OR_RETURN(LoadedWeights w, ReadGptSafetensors(dir + "/model.safetensors"));
  return WriteGptSafetensors(out, w.config, w.params, w.metadata);
}

}  // namespace tern::registry
