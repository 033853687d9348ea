#include "registry/model_uri.h"

#include <cstdlib>

#include "model/safetensors.h"
#include "registry/registry.h"
#include "registry/signing.h"

namespace tern::registry {

bool IsModelUri(const std::string& path) {
  return path.rfind(kModelUriScheme, 0) == 0;
}

Result<std::string> ResolveModelUri(const std::string& path_or_uri) {
  if (!IsModelUri(path_or_uri)) return path_or_uri;
  const std::string ref_text = path_or_uri.substr(sizeof(kModelUriScheme) - 1);
  TERN_ASSIGN_OR_RETURN(ModelRef ref, ParseModelRef(ref_text));
  RegistryOptions o;
  o.location = DefaultRegistryLocation();
  if (const char* kf = std::getenv("TERN_REGISTRY_KEY_FILE"); kf && *kf) {
    TERN_ASSIGN_OR_RETURN(o.key, ReadKeyFile(kf));
  }
  auto reg = Registry::Open(o);
  if (!reg.ok()) return reg.status().WithContext("opening the model registry " + o.location);
  auto dir = (*reg)->Materialize(ref);
  if (!dir.ok()) return dir.status().WithContext("resolving " + path_or_uri);
  return dir;
}

Status ExportModelUri(const std::string& uri, const std::string& out) {
  TERN_ASSIGN_OR_RETURN(std::string dir, ResolveModelUri(uri));
  TERN_ASSIGN_OR_RETURN(LoadedWeights w, ReadGptSafetensors(dir + "/model.safetensors"));
  return WriteGptSafetensors(out, w.config, w.params, w.metadata);
}

}  // namespace tern::registry
