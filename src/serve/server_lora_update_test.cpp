// LoRA adapters loaded and unloaded while the server runs (`tern serve --allow-lora-updates`, vLLM's
// /v1/load_lora_adapter and /v1/unload_lora_adapter): a loaded adapter is listed and answers as its merged
// model, loading a served name again replaces it, an unloaded one is a 404; only admin keys may; bad names,
// the model's own name, a failed load and one adapter over --max-lora-adapters are refused with the reason;
// with the flag off the routes say how to turn them on.
#include <filesystem>

#include "serve/adapter_routes.h"
#include "testing/files.h"
#include "testing/server_fixture.h"

namespace tern::testing {
namespace {

constexpr char kOps[] = "sk-ops-SECRET-5d1e0c7b";  // admin: true
constexpr char kApp[] = "sk-app-SECRET-a94f3e20";  // may generate, not load

class LoraUpdateServerTest : public ServerTest {
 protected:
  static void SetUpTestSuite() {
    ServerOptions so = DefaultOptions();
    so.api_key.clear();
    so.api_keys = {{"ops", kOps, "platform", 0, 0, true}, {"app", kApp, "search", 0, 0}};
    so.adapters = {{"psalms", "runs/psalms"}};
    so.allow_lora_updates = true;
    so.max_lora_adapters = 3;
    // "seed:N" is a random adapter (RandomLoraAdapter seed N); anything else fails as a real loader would.
    so.lora_loader = [](const std::string& path) -> Result<LoraAdapter> {
      if (path.rfind("seed:", 0) != 0) return Status::NotFound(path + ": no such file or directory");
      return Seeded(std::stoi(path.substr(5)));
    };
    StartServer(so);
  }
  static LoraAdapter Seeded(int seed) {
    return RandomLoraAdapter(*run_, 4, kLoraAllTargets, 8.0f, static_cast<uint32_t>(seed));
  }
  static HttpResult Load(const std::string& name, const std::string& path, const std::string& key = kOps) {
    return Curl("/v1/load_lora_adapter", json({{"lora_name", name}, {"lora_path", path}}).dump(), key);
  }
  static HttpResult Unload(const std::string& name, const std::string& key = kOps) {
    return Curl("/v1/unload_lora_adapter", json({{"lora_name", name}}).dump(), key);
  }
  static HttpResult Complete(const std::string& model) {
    return Curl("/v1/completions",
                R"({"prompt":"And God said","max_tokens":8,"temperature":0,"ignore_eos":true,"model":")" +
                    model + "\"}",
                kApp);
  }
  static std::string Text(const HttpResult& r) { return Json(r)["choices"][0]["text"]; }
  static std::vector<std::string> Listed() {
    std::vector<std::string> ids;
    const json list = Json(Curl("/v1/models", "", kApp));
    for (const json& m : list["data"]) ids.push_back(m["id"]);
    return ids;
  }
};

// --lora-root: models:/ URIs and paths inside the root, resolved; nothing that leaves it by "..", a symlink
// or another scheme.
TEST(CheckLoraPath, AllowsOnlyTheRegistryAndPathsInsideTheRoot) {
  TempDir dir;
  const std::filesystem::path root = std::filesystem::path(dir.path()) / "adapters";
  std::filesystem::create_directories(root / "law");
  std::filesystem::create_directories(std::filesystem::path(dir.path()) / "secret");
  std::filesystem::create_directory_symlink(std::filesystem::path(dir.path()) / "secret", root / "link");
  EXPECT_TRUE(CheckLoraPath((root / "law").string(), root.string()).ok());
  EXPECT_TRUE(CheckLoraPath((root / "law/adapter.safetensors").string(), root.string()).ok());
  EXPECT_TRUE(
      CheckLoraPath((root / "not-yet").string(), root.string()).ok());  // the loader says it is missing
  EXPECT_TRUE(CheckLoraPath("models:/law@production", root.string()).ok());
  EXPECT_TRUE(CheckLoraPath("/etc/passwd", "").ok());  // no root: the admin key is the only guard
  for (const std::string& bad :
       {(root / "../secret").string(), (root / "link/adapter.safetensors").string(),
        std::string("/etc/passwd"), std::string("s3://bucket/law"), (root.string() + "-evil/x")}) {
    const Status st = CheckLoraPath(bad, root.string());
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("outside --lora-root"), std::string::npos) << st.message();
  }
}

TEST_F(LoraUpdateServerTest, LoadsReplacesAndUnloadsWhileServing) {
  const HttpResult loaded = Load("gospels", "seed:7");
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  const json j = Json(loaded);
  EXPECT_EQ(j["id"], "gospels");
  EXPECT_EQ(j["parent"], "tiny");
  EXPECT_EQ(j["rank"], 4);
  EXPECT_EQ(j["replaced"], false);
  EXPECT_EQ(Listed(), (std::vector<std::string>{"tiny", "psalms", "gospels"}));
  EXPECT_EQ(Json(Curl("/v1/models/gospels", "", kApp))["root"], "seed:7");
  const HttpResult first = Complete("gospels");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(Text(first), GreedyText(*run_, MergedLoraParams(*run_, Seeded(7)), "And God said", 8));

  // The same name again: the new adapter answers from now on (a registry alias moved).
  const HttpResult again = Load("gospels", "seed:8");
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(Json(again)["replaced"], true);
  const std::string replaced = Text(Complete("gospels"));
  EXPECT_EQ(replaced, GreedyText(*run_, MergedLoraParams(*run_, Seeded(8)), "And God said", 8));
  EXPECT_NE(replaced, Text(first)) << "the two adapters must differ for this test to mean anything";
  EXPECT_EQ(Listed(), (std::vector<std::string>{"tiny", "psalms", "gospels"}));

  const HttpResult gone = Unload("gospels");
  ASSERT_EQ(gone.status, 200) << gone.body;
  EXPECT_EQ(Json(gone)["deleted"], true);
  EXPECT_EQ(Complete("gospels").status, 404);
  EXPECT_EQ(Listed(), (std::vector<std::string>{"tiny", "psalms"}));
  const HttpResult twice = Unload("gospels");
  EXPECT_EQ(twice.status, 404);
  EXPECT_NE(Json(twice)["error"]["message"].get<std::string>().find("served: 'psalms'"), std::string::npos)
      << twice.body;
  // An adapter given at start unloads the same way.
  ASSERT_EQ(Unload("psalms").status, 200);
  EXPECT_EQ(Complete("psalms").status, 404);
  ASSERT_EQ(Load("psalms", "seed:1").status, 200);
  EXPECT_EQ(Complete("psalms").status, 200);
  EXPECT_EQ(Metrics(kOps)["tern_lora_adapters"], 1);
}

TEST_F(LoraUpdateServerTest, RefusesWithTheReason) {
  auto message = [](const HttpResult& r) { return Json(r)["error"]["message"].get<std::string>(); };
  const HttpResult app = Load("law", "seed:3", kApp);
  EXPECT_EQ(app.status, 403);
  EXPECT_NE(message(app).find("admin: true"), std::string::npos) << app.body;
  EXPECT_EQ(Unload("psalms", kApp).status, 403);
  EXPECT_EQ(Load("law", "seed:3", "").status, 401);

  const HttpResult bad_name = Load("law 2", "seed:3");
  EXPECT_EQ(bad_name.status, 400);
  EXPECT_EQ(Json(bad_name)["error"]["param"], "lora_name");
  EXPECT_EQ(Load("tiny", "seed:3").status, 400) << "the model's own name";
  const HttpResult missing = Load("law", "runs/nowhere");
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(message(missing).find("runs/nowhere: no such file"), std::string::npos) << missing.body;
  EXPECT_EQ(Curl("/v1/load_lora_adapter", R"({"lora_name":"law"})", kOps).status, 400);
  EXPECT_EQ(Curl("/v1/load_lora_adapter", "[1]", kOps).status, 400);

  // --max-lora-adapters 3: a fourth is refused and nothing changes; replacing one still works.
  std::vector<std::string> names = {"a1", "a2", "a3", "a4"};
  int served = static_cast<int>(Listed().size()) - 1;
  for (int i = 0; served < 3; i++, served++)
    ASSERT_EQ(Load(names[i], "seed:" + std::to_string(20 + i)).status, 200);
  const std::vector<std::string> before = Listed();
  const HttpResult full = Load("a9", "seed:30");
  EXPECT_EQ(full.status, 400);
  EXPECT_EQ(Json(full)["error"]["code"], "too_many_adapters") << full.body;
  EXPECT_EQ(Listed(), before);
  EXPECT_EQ(Load(before.back(), "seed:31").status, 200);
  EXPECT_EQ(Metrics(kOps)["tern_lora_adapters"], 3);
  for (size_t i = 2; i < before.size(); i++) EXPECT_EQ(Unload(before[i]).status, 200) << before[i];
}

// With the flag off (the other suites' default) the routes are 404s that say how to turn them on.
TEST_F(ServerTest, AdapterUpdatesNeedTheFlag) {
  const HttpResult r = Curl("/v1/load_lora_adapter", R"({"lora_name":"x","lora_path":"y"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("--allow-lora-updates"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace tern::testing
